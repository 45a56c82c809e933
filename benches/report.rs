//! `gpuboard report`'s cost (README, "Accounting"): one endpoint's part of the report
//! (`GET /v1/history/report`: read the window's versions and every device's samples from
//! `history.sqlite`, replay, account, find trouble) over 24 h of 1 000 GPUs. Goal: <= 2 s.
//!
//! The history is generated on a simulated clock as `benches/history.rs` does: 250 nodes of
//! four 80 GiB GPUs; every 5 minutes each free GPU may get a claim (a quarter, a half or a
//! whole GPU, four projects, 1 to 8 hours; released by its lease, an audited action); a held
//! GPU samples its claim's process at 85-100 % (idle now and then for an hour), a free one
//! 0 %, every 5 s, written as the sealed hourly chunks a `serve` leaves. States go through
//! the real `Recording` into a real store on disk.
//!
//! `cargo bench --bench report` (release); `-- --gpus N --hours H` for other sizes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Instant;

use gpuboard::accounting::{Ask, IdleRule, PENDING_MS, report};
use gpuboard::clock::Timestamp;
use gpuboard::endpoint::history_store::HistoryStore;
use gpuboard::history::sample::Rare;
use gpuboard::history::wire::GpuRef;
use gpuboard::history::{DeviceSample, Recording};
use gpuboard::ids::ClaimId;
use gpuboard::placement::DeviceShare;
use gpuboard::snapshot::{
    AuditEvent, ClaimState, ClaimView, DeviceView, NodeView, ProcessView, Snapshot,
};
use gpuboard::units::{Bytes, Slots, Units};

const T0: u64 = 1_795_442_400_000;
const STEP_MS: u64 = 300_000;
const HOUR_MS: u64 = 3_600_000;
const PROJECTS: [&str; 4] = ["vision", "speech", "nlp", "rl"];
const GIB: u64 = 1 << 30;

/// A small deterministic generator.
struct Noise(u64);

impl Noise {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}

#[derive(Clone, Copy)]
struct Held {
    id: u64,
    project: usize,
    units: u32,
    ends: u64,
    /// Runs nothing for its first hour.
    lazy: bool,
    since: u64,
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn state(at: u64, revision: u64, held: &[Option<Held>], events: &[AuditEvent]) -> Snapshot {
    let mut s = Snapshot {
        schema: 1,
        revision,
        taken_at: Timestamp(at),
        events: events.to_vec(),
        ..Snapshot::default()
    };
    for (n, gpus) in held.chunks(4).enumerate() {
        let node = format!("node-{n:03}");
        let mut devices = Vec::new();
        for (d, h) in gpus.iter().enumerate() {
            let units = h.map_or(0, |h| h.units);
            let mem = Bytes(80 * GIB * u64::from(units) / 10_000);
            devices.push(DeviceView {
                index: d as u32,
                model: "NVIDIA A100-SXM4-80GB".into(),
                memory_capacity: Some(Bytes(80 * GIB)),
                memory_allocated: mem,
                memory_free: Bytes(80 * GIB - mem.0),
                compute_allocated: Units(units),
                compute_free: Units(10_000 - units),
                holders: h.map(|h| ClaimId(h.id)).into_iter().collect(),
                ..DeviceView::default()
            });
            if let Some(h) = h {
                s.claims.push(ClaimView {
                    id: ClaimId(h.id),
                    state: ClaimState::Placed,
                    project: PROJECTS[h.project].to_string(),
                    holder: None,
                    form: "num_gpus=1".into(),
                    request: gpuboard::request::ClaimRequest::from_json(
                        &serde_json::json!({"num_gpus": 1}),
                    )
                    .unwrap(),
                    node: Some(node.clone()),
                    shares: vec![DeviceShare {
                        device: d as u32,
                        memory: mem,
                        compute: Units(units),
                        slots: Slots(1),
                    }],
                    memory_reserved: mem,
                    compute_reserved: Units(units),
                    memory_used: None,
                    over_limit: false,
                    idle: false,
                    created_at: Timestamp(h.since),
                    lease_expires_at: Some(Timestamp(h.ends)),
                    pending_reasons: Vec::new(),
                    infeasible: false,
                });
            }
        }
        s.nodes.push(NodeView {
            name: node,
            devices,
            ..NodeView::default()
        });
    }
    s
}

fn sample(at: u64, noise: &mut Noise, h: Option<Held>) -> DeviceSample {
    let busy = h.filter(|h| !(h.lazy && at < h.since + HOUR_MS));
    DeviceSample {
        at: Timestamp(at),
        utilization_gpu: Some(if busy.is_some() {
            85 + noise.below(16) as u32
        } else {
            0
        }),
        memory_used: Some(Bytes(if busy.is_some() { 20 * GIB } else { 0 })),
        power_mw: Some(if busy.is_some() { 280_000 } else { 60_000 }),
        temperature_c: Some(if busy.is_some() { 65 } else { 35 }),
        rare: Rare {
            processes: busy
                .map(|h| ProcessView {
                    pid: 4242,
                    name: Some("python".into()),
                    used_memory: Some(Bytes(20 * GIB)),
                    claim: Some(ClaimId(h.id)),
                    owner: None,
                })
                .into_iter()
                .collect(),
            memory_total: Some(Bytes(80 * GIB)),
            ..Rare::default()
        },
        ..DeviceSample::default()
    }
}

fn main() {
    let gpus = usize::try_from(arg("--gpus", 1_000)).unwrap();
    let hours = arg("--hours", 24);
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut store = HistoryStore::open(dir.path()).unwrap();
    let mut noise = Noise(27);
    let mut held: Vec<Option<Held>> = vec![None; gpus];
    let mut recording = Recording::default();
    let mut events: Vec<AuditEvent> = Vec::new();
    let mut next_id = 1;
    let mut revision = 1;
    let mut hour: BTreeMap<usize, Vec<DeviceSample>> = BTreeMap::new();
    let end = T0 + hours * HOUR_MS;
    let mut at = T0;
    while at < end {
        for h in &mut held {
            if h.is_some_and(|x| x.ends <= at) {
                let x = h.take().unwrap();
                revision += 1;
                events.push(AuditEvent {
                    revision,
                    at: Timestamp(at),
                    actor: "lease".into(),
                    action: "expire".into(),
                    target: format!("claim {}", x.id),
                    detail: "lease expired, released".into(),
                });
            }
            if h.is_none() && noise.below(6) == 0 {
                *h = Some(Held {
                    id: next_id,
                    project: noise.below(4) as usize,
                    units: [2_500, 5_000, 10_000][noise.below(3) as usize],
                    ends: at + HOUR_MS * (1 + noise.below(8)),
                    lazy: noise.below(5) == 0,
                    since: at,
                });
                next_id += 1;
                revision += 1;
            }
        }
        // The endpoint keeps its latest audit events, not all of them.
        let keep = events.len().saturating_sub(200);
        events.drain(..keep);
        if let Some(rec) = recording.observe(&state(at, revision, &held, &events)) {
            store.append(&rec).unwrap();
        }
        for (g, h) in held.iter().enumerate() {
            let block = hour.entry(g).or_default();
            for i in 0..(STEP_MS / 5_000) {
                block.push(sample(at + i * 5_000, &mut noise, *h));
            }
        }
        at += STEP_MS;
        if at % HOUR_MS == T0 % HOUR_MS {
            for (g, samples) in std::mem::take(&mut hour) {
                let gpu = GpuRef {
                    node: format!("node-{:03}", g / 4),
                    index: (g % 4) as u32,
                };
                store.add_chunk(&gpu, &samples).unwrap();
            }
        }
    }
    let generated = started.elapsed().as_secs_f64();
    drop(store);
    let store = HistoryStore::open(dir.path()).unwrap();
    let ask = Ask {
        from: Timestamp(T0),
        to: Timestamp(end),
        idle: IdleRule::default(),
        pending_ms: PENDING_MS,
    };
    let mut times = Vec::new();
    let mut parts = Vec::new();
    let mut last = None;
    for _ in 0..5 {
        let t = Instant::now();
        let begins = store.from().unwrap().unwrap();
        let from = ask.from.max(begins);
        let (start, versions) = store.window(from, ask.to).unwrap().unwrap();
        let read_versions = t.elapsed().as_secs_f64();
        let samples = store
            .all_samples(Timestamp(from.0 - 300_000), ask.to)
            .unwrap();
        let read_samples = t.elapsed().as_secs_f64() - read_versions;
        let r = report(&start, &versions, &samples, &Ask { from, ..ask });
        let total = t.elapsed().as_secs_f64();
        times.push(total);
        parts.push((
            total,
            read_versions,
            read_samples,
            total - read_versions - read_samples,
        ));
        last = Some((
            versions.len(),
            samples.values().map(Vec::len).sum::<usize>(),
            r,
        ));
    }
    times.sort_by(f64::total_cmp);
    parts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (versions, samples, r) = last.unwrap();
    println!(
        "report over {hours} h of {gpus} GPUs: median {:.3} s (min {:.3}, max {:.3}; 5 runs): \
         versions {:.3} s, samples {:.3} s, accounting {:.3} s; {versions} versions, \
         {samples} samples, {} claims, {} actions; history generated in {generated:.0} s",
        times[2],
        times[0],
        times[4],
        parts[2].1,
        parts[2].2,
        parts[2].3,
        r.usage.claims.len(),
        r.actions.len()
    );
    let physical = r.usage.physical.hours();
    let reserved: f64 = r
        .usage
        .projects
        .iter()
        .map(|p| p.figures.reserved.compute.hours())
        .sum();
    println!(
        "physical {physical:.1} GPU-h, reserved {reserved:.1}, unallocated {:.1}, idle-allocated {:.1}",
        r.usage.unallocated.compute.hours(),
        r.usage
            .projects
            .iter()
            .map(|p| p.figures.idle_allocated.hours())
            .sum::<f64>()
    );
}
