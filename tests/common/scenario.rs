//! The hand-made accounting scenario (`tests/report_scenario.rs` has its story): three
//! projects on one node of four L4s over two hours, the states the endpoint served, the
//! GPUs' samples every 5 s, and the figures computed by hand. Shared by the report's tests
//! and the console's Usage view, which must show the same figures.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;

use gpuboard::accounting::{Ask, IdleRule, PENDING_MS};
use gpuboard::clock::Timestamp;
use gpuboard::history::sample::{Rare, Tick};
use gpuboard::history::{DeviceSample, Record, Recording, state_of};
use gpuboard::ids::ClaimId;
use gpuboard::placement::DeviceShare;
use gpuboard::snapshot::{
    AuditEvent, ClaimState, ClaimView, DeviceView, NodeView, ProcessView, ProjectResourceView,
    ProjectView, Snapshot,
};
use gpuboard::store::history::HistoryStore;
use gpuboard::units::{Bytes, Slots, Units};
use gpuboard::wire::history::GpuRef;

pub const GIB: u64 = 1 << 30;
pub const MIN: u64 = 60_000;
/// 2026-11-25 01:00:00 UTC: the snapshot's window.
pub const T0: u64 = 1_795_568_400_000;

/// A claim of the scenario: id, project, device on node n0 (None: pending), compute units.
pub type Claim = (u64, &'static str, Option<u32>, u32);

struct Moment {
    minute: u64,
    claims: Vec<Claim>,
    cordoned: Vec<u32>,
    nlp_backoff_until: Option<u64>,
    event: Option<(&'static str, &'static str, &'static str, &'static str)>,
}

pub fn claim_view(t0: u64, &(id, project, device, units): &Claim) -> ClaimView {
    let memory = Bytes(16 * GIB * u64::from(units) / 10_000);
    ClaimView {
        id: ClaimId(id),
        name: None,
        state: if device.is_some() {
            ClaimState::Placed
        } else {
            ClaimState::Pending
        },
        project: project.to_string(),
        holder: (id == 1).then(|| "train-resnet".to_string()),
        form: if units == 10_000 {
            "num_gpus=1".into()
        } else {
            format!("num_gpus=0.{}", units / 100)
        },
        request: gpuboard::request::ClaimRequest::from_json(&serde_json::json!({"num_gpus": 1}))
            .unwrap(),
        node: device.map(|_| "n0".to_string()),
        shares: device
            .map(|d| DeviceShare {
                device: d,
                memory,
                compute: Units(units),
                slots: Slots(if units == 10_000 { 100 } else { 1 }),
            })
            .into_iter()
            .collect(),
        memory_reserved: memory,
        compute_reserved: Units(units),
        memory_used: None,
        over_limit: false,
        idle: false,
        created_at: Timestamp(t0),
        lease_expires_at: None,
        pending_reasons: if device.is_none() {
            vec!["n0: no GPU has a whole device free".to_string()]
        } else {
            Vec::new()
        },
        infeasible: false,
    }
}

/// The endpoint's state at each moment, as it served it.
// The scenario's moments written out as data, one `Moment` each, in the order they
// happen: read as the story it is.
#[allow(clippy::too_many_lines)]
pub fn states(t0: u64) -> Vec<Snapshot> {
    let base: Vec<Claim> = vec![
        (1, "vision", Some(0), 10_000),
        (2, "nlp", Some(1), 2_500),
        (3, "speech", Some(1), 5_000),
        (4, "speech", None, 10_000),
        (5, "vision", Some(3), 10_000),
    ];
    let after_20: Vec<Claim> = vec![base[0], base[1], base[2], (4, "speech", Some(3), 10_000)];
    let after_60: Vec<Claim> = vec![after_20[0], after_20[1], after_20[3]];
    let moments = [
        Moment {
            minute: 0,
            claims: base,
            cordoned: vec![],
            nlp_backoff_until: None,
            event: None,
        },
        Moment {
            minute: 20,
            claims: after_20.clone(),
            cordoned: vec![],
            nlp_backoff_until: None,
            event: Some(("lease", "expire", "claim 5", "lease expired, released")),
        },
        Moment {
            minute: 30,
            claims: after_20,
            cordoned: vec![],
            nlp_backoff_until: Some(45),
            event: None,
        },
        Moment {
            minute: 60,
            claims: after_60.clone(),
            cordoned: vec![],
            nlp_backoff_until: Some(45),
            event: Some(("alice (alice@ws1)", "release", "claim 3", "released")),
        },
        Moment {
            minute: 90,
            claims: after_60,
            cordoned: vec![2],
            nlp_backoff_until: Some(45),
            event: Some(("ops (ops@ws2)", "cordon", "n0:2", "cordoned")),
        },
    ];
    let mut events = Vec::new();
    let mut out = Vec::new();
    for (i, m) in moments.iter().enumerate() {
        let revision = i as u64 + 1;
        let at = t0 + m.minute * MIN;
        if let Some((actor, action, target, detail)) = m.event {
            events.push(AuditEvent {
                revision,
                at: Timestamp(at),
                actor: actor.into(),
                action: action.into(),
                target: target.into(),
                detail: detail.into(),
            });
        }
        let devices = (0..4)
            .map(|d| {
                let mine: Vec<&Claim> = m.claims.iter().filter(|c| c.2 == Some(d)).collect();
                let units: u32 = mine.iter().map(|c| c.3).sum();
                let mem = Bytes(16 * GIB * u64::from(units) / 10_000);
                DeviceView {
                    index: d,
                    model: "NVIDIA L4".into(),
                    memory_capacity: Some(Bytes(16 * GIB)),
                    memory_allocated: mem,
                    memory_free: Bytes(16 * GIB - mem.0),
                    compute_allocated: Units(units),
                    compute_free: Units(10_000 - units),
                    cordoned: m.cordoned.contains(&d),
                    holders: mine.iter().map(|c| ClaimId(c.0)).collect(),
                    ..DeviceView::default()
                }
            })
            .collect();
        let project = |name: &str, share: u32, until: Option<u64>| ProjectView {
            name: name.into(),
            share,
            resources: vec![ProjectResourceView {
                resource: "gpu".into(),
                eligible: until.is_none(),
                backoff_until: until.map(|u| Timestamp(t0 + u * MIN)),
                ..ProjectResourceView::default()
            }],
            ..ProjectView::default()
        };
        out.push(Snapshot {
            schema: 1,
            revision,
            taken_at: Timestamp(at),
            nodes: vec![NodeView {
                name: "n0".into(),
                devices,
                ..NodeView::default()
            }],
            claims: m.claims.iter().map(|c| claim_view(t0, c)).collect(),
            projects: vec![
                project("nlp", 100, m.nlp_backoff_until),
                project("speech", 100, None),
                project("vision", 200, None),
            ],
            events: events.clone(),
            ..Snapshot::default()
        });
    }
    out
}

pub fn sample(at: u64, util: u32, procs: &[(u64, u64)]) -> DeviceSample {
    DeviceSample {
        at: Timestamp(at),
        utilization_gpu: Some(util),
        memory_used: Some(Bytes(procs.iter().map(|p| p.1).sum::<u64>() * GIB)),
        rare: Rare {
            processes: procs
                .iter()
                .map(|&(claim, gib)| ProcessView {
                    pid: 1000 + claim as u32,
                    name: Some("python".into()),
                    used_memory: Some(Bytes(gib * GIB)),
                    claim: Some(ClaimId(claim)),
                    owner: None,
                })
                .collect(),
            ..Rare::default()
        },
        ..DeviceSample::default()
    }
}

/// Every 5 s for two hours: what each GPU's processes did.
pub fn samples(t0: u64) -> BTreeMap<GpuRef, Vec<DeviceSample>> {
    let mut out: BTreeMap<GpuRef, Vec<DeviceSample>> = BTreeMap::new();
    for i in 0..(120 * MIN / 5_000) {
        let at = t0 + i * 5_000;
        let m = (at - t0) / MIN;
        let gpu = |index| GpuRef {
            node: "n0".into(),
            index,
        };
        // Claim 1 trains, sits idle from minute 60 to 100 (no process), then trains again.
        let a = if (60..100).contains(&m) {
            sample(at, 0, &[])
        } else {
            sample(at, 80, &[(1, 10)])
        };
        // Claim 2 (4 GiB reserved) uses 6 GiB from minute 30 to 50; claim 3 runs until 60.
        let nlp = if (30..50).contains(&m) { 6 } else { 3 };
        let b = if m < 60 {
            sample(at, 60, &[(2, nlp), (3, 2)])
        } else {
            sample(at, 60, &[(2, nlp)])
        };
        let d = if m < 20 {
            sample(at, 90, &[(5, 12)])
        } else {
            sample(at, 50, &[(4, 12)])
        };
        out.entry(gpu(0)).or_default().push(a);
        out.entry(gpu(1)).or_default().push(b);
        out.entry(gpu(2)).or_default().push(sample(at, 0, &[]));
        out.entry(gpu(3)).or_default().push(d);
    }
    out
}

pub fn recorded(t0: u64) -> (Snapshot, Vec<Record>) {
    let states = states(t0);
    let mut r = Recording::default();
    let mut records: Vec<Record> = states.iter().filter_map(|s| r.observe(s)).collect();
    records.remove(0);
    (state_of(&states[0]), records)
}

pub fn ask(t0: u64) -> Ask {
    Ask {
        from: Timestamp(t0),
        to: Timestamp(t0 + 120 * MIN),
        idle: IdleRule::default(),
        pending_ms: PENDING_MS,
    }
}

/// The hand-computed figures, GPU-hours: project -> (claims, reserved, used, idle).
pub fn expected() -> BTreeMap<&'static str, (u32, f64, f64, f64)> {
    [
        // Claim 1: 1 GPU x 2 h; used 0.8 x 80 min; idle 40 min. Claim 5: 1 GPU x 20 min at 90 %.
        (
            "vision",
            (2, 2.0 + 1.0 / 3.0, 0.8 * 80.0 / 60.0 + 0.3, 40.0 / 60.0),
        ),
        // Claim 2: 0.25 GPU x 2 h at 60 %.
        ("nlp", (1, 0.5, 0.25 * 0.6 * 2.0, 0.0)),
        // Claim 3: 0.5 GPU x 1 h at 60 %; claim 4: 1 GPU from minute 20 at 50 %.
        (
            "speech",
            (2, 0.5 + 100.0 / 60.0, 0.3 + 0.5 * 100.0 / 60.0, 0.0),
        ),
    ]
    .into()
}

/// Writes the scenario into `dir`'s history as the recorder would have.
pub fn write_history(dir: &Path, t0: u64) {
    let start_states = states(t0);
    let mut store = HistoryStore::open(dir).unwrap();
    let mut r = Recording::default();
    for s in &start_states {
        if let Some(rec) = r.observe(s) {
            store.append(&rec).unwrap();
        }
    }
    for (gpu, series) in samples(t0) {
        for hour in series.chunk_by(|a, b| a.at.0 / 3_600_000 == b.at.0 / 3_600_000) {
            store.add_chunk(&gpu, hour).unwrap();
        }
    }
    // As the recorder does when it seals each hour.
    for hour in [t0, t0 + 60 * MIN] {
        store.roll_up(Timestamp(hour)).unwrap();
    }
}

/// What accounting reads of the scenario's samples.
pub fn ticks(t0: u64) -> BTreeMap<GpuRef, Vec<Tick>> {
    samples(t0)
        .into_iter()
        .map(|(gpu, series)| (gpu, series.iter().map(Tick::from).collect()))
        .collect()
}

/// Flag episodes with known answers, as a serve's history and `gpuboard record`s' would
/// give them: Slurm account `ml` idle 1 h, Kubernetes namespace `ml` (not the account)
/// idle the last hour and still, a Slurm job and a pod double-booking `n1:1` for 30
/// minutes, unexplained memory on `n1:2` for 15.
pub fn flag_episodes(t0: u64) -> Vec<gpuboard::physical::FlagEpisode> {
    use gpuboard::physical::{EpisodeHolder, FlagEpisode, GpuEngine};
    use gpuboard::units::Units;
    let holder = |engine: GpuEngine, label: &str, project: &str| EpisodeHolder {
        engine,
        label: label.to_string(),
        project: project.to_string(),
        source: engine.word().to_string(),
        compute: Units::FULL,
    };
    let episode =
        |flag: &str, index: u32, from: u64, to: Option<u64>, holders, detail: &str| FlagEpisode {
            flag: flag.to_string(),
            gpu: format!("n1:{index}"),
            node: "n1".to_string(),
            index,
            uuid: None,
            holders,
            detail: detail.to_string(),
            started: Timestamp(t0 + from),
            ended: to.map(|t| Timestamp(t0 + t)),
        };
    let job = holder(GpuEngine::Slurm, "Slurm job 42", "ml");
    let pod = holder(GpuEngine::Kubernetes, "pod ml/train-0", "ml");
    let unexplained = FlagEpisode {
        gpu: "gpu-n1-2".to_string(),
        uuid: Some("gpu-n1-2".to_string()),
        ..episode(
            "unexplained",
            2,
            0,
            Some(15 * MIN),
            vec![],
            "unexplained: 2 GiB used by pid 4242 that no holder accounts for",
        )
    };
    vec![
        unexplained,
        episode(
            "idle",
            0,
            10 * MIN,
            Some(70 * MIN),
            vec![job.clone()],
            "idle: below 5 % for 30 min or more, held by Slurm job 42 [slurm]",
        ),
        episode(
            "double-booked",
            1,
            30 * MIN,
            Some(60 * MIN),
            vec![job, pod.clone()],
            "double-booked: Slurm job 42 [slurm] and pod ml/train-0 [kubernetes] hold 2.00 GPU \
             of 1.00 GPU",
        ),
        episode(
            "idle",
            1,
            60 * MIN,
            None,
            vec![pod],
            "idle: below 5 % for 30 min or more, held by pod ml/train-0 [kubernetes]",
        ),
    ]
}
