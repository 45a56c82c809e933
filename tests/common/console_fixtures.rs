//! Fixed data for the console's snapshot tests and benchmarks: generator functions over
//! a real scheduler with telemetry set by hand, at a fixed `now`, dates in UTC.
//! Everything here is deterministic and uses only the crate's public API. Included with
//! `#[path]` by each test or bench that needs it, so not every user calls everything.
#![allow(dead_code)]

use serde_json::json;

use gpuboard::clock::Timestamp;
use gpuboard::console::keymap::Keymap;
use gpuboard::console::msg::{Effect, Msg};
use gpuboard::console::state::{SourceSlot, State};
use gpuboard::console::update::update;
use gpuboard::ids::ClaimId;
use gpuboard::placement::{DeviceSpec, NodeSpec, Policy};
use gpuboard::request::ClaimRequest;
use gpuboard::scheduler::{Scheduler, SchedulerConfig};
use gpuboard::snapshot::{DeviceTelemetry, ProcessView, ProjectResourceView, Snapshot};
use gpuboard::sources::Action;
use gpuboard::units::Bytes;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// The fixtures' `now`: 2024-03-01 12:00:00 UTC.
pub const NOW: Timestamp = Timestamp(1_709_294_400_000);
/// When the fixture claims were made (`NOW` minus 25 minutes).
pub const CREATED: Timestamp = Timestamp(NOW.0 - 25 * 60_000);

fn gpu(index: u32, model: &str, gib: u64) -> DeviceSpec {
    DeviceSpec {
        index,
        model: model.to_string(),
        uuid: Some(format!("GPU-{index:08x}-fixture")),
        memory: Some(Bytes::gib(gib)),
        link_group: None,
    }
}

/// A small lab: two A100-40GB on `lab-a`, two A10G on `lab-b`, six claims (one over its
/// limit, one idle, one pending), one cordoned GPU, unclaimed use on one GPU, and
/// fair-share accounts with a backoff.
// The lab written out as data, a node, claim or account a few lines each: read as the
// fixture it is, top to bottom.
#[allow(clippy::too_many_lines)]
pub fn lab_snapshot() -> Snapshot {
    let nodes = vec![
        NodeSpec {
            name: "lab-a".into(),
            devices: vec![
                gpu(0, "NVIDIA A100-SXM4-40GB", 40),
                gpu(1, "NVIDIA A100-SXM4-40GB", 40),
            ],
            cpus: None,
        },
        NodeSpec {
            name: "lab-b".into(),
            devices: vec![gpu(0, "NVIDIA A10G", 24), gpu(1, "NVIDIA A10G", 24)],
            cpus: None,
        },
    ];
    let config = SchedulerConfig {
        name: "lab".into(),
        kind: "embedded".into(),
        policy: Policy::Binpack,
        ..SchedulerConfig::default()
    };
    let Ok(mut s) = Scheduler::new(config, nodes) else {
        return Snapshot::default();
    };
    let requests = [
        json!({"gpu_memory": "10Gi", "project": "vision", "holder": "alice", "ttl": 3600, "node": "lab-a", "devices": [0]}),
        json!({"num_gpus": 0.5, "project": "nlp", "holder": "bob", "node": "lab-a", "devices": [0]}),
        json!({"gpu-memory-ratio": 50, "gpu-core": 50, "gpu.shared": 1, "project": "speech", "holder": "carol", "node": "lab-b", "devices": [0]}),
        json!({"nvidia.com/gpu": 1, "project": "batch", "holder": "job-7", "node": "lab-a", "devices": [1]}),
        json!({"gpu_memory": "4Gi", "project": "robotics", "node": "lab-b", "devices": [0]}),
        json!({"nvidia.com/gpu": 2, "project": "vision", "holder": "dave", "wait": true}),
    ];
    for r in requests {
        if let Ok(req) = ClaimRequest::from_json(&r) {
            s.submit(req, "operator", CREATED);
        }
    }
    let _ = s.set_cordon("lab-b", 1, true, "operator", CREATED.plus_secs(60));
    let mut snap = s.snapshot(NOW);
    // Memory use per claim (percent of its reservation) and utilization it drives.
    let usage = |id: ClaimId| match id.0 {
        1 => (120, 70), // over its limit
        2 => (60, 45),
        3 => (10, 0), // idle
        4 => (80, 95),
        _ => (50, 20),
    };
    for node in &mut snap.nodes {
        for d in &mut node.devices {
            let mut used = Bytes(0);
            let mut util = 0u32;
            let mut processes = Vec::new();
            for id in &d.holders {
                let (pct, u) = usage(*id);
                let reserved = snap
                    .claims
                    .iter()
                    .find(|c| c.id == *id)
                    .and_then(|c| c.shares.iter().find(|x| x.device == d.index))
                    .map_or(Bytes(0), |x| x.memory);
                let m = reserved.mul_div_ceil(pct, 100);
                used += m;
                util = (util + u).min(100);
                processes.push(ProcessView {
                    pid: 3000 + u32::try_from(id.0).unwrap_or(0),
                    name: Some(format!("train-{id}")),
                    used_memory: Some(m),
                    claim: Some(*id),
                    owner: None,
                });
            }
            let rogue = node.name == "lab-b" && d.index == 0;
            if rogue {
                used += Bytes::gib(2);
                processes.push(ProcessView {
                    pid: 4242,
                    name: Some("stray-notebook".into()),
                    used_memory: Some(Bytes::gib(2)),
                    claim: None,
                    owner: None,
                });
            }
            d.unclaimed_memory = Some(if rogue { Bytes::gib(2) } else { Bytes(0) });
            let history: Vec<u32> = (0..60u32)
                .map(|k| {
                    if util == 0 {
                        0
                    } else {
                        (util + k * 7 % 11).min(100)
                    }
                })
                .collect();
            d.telemetry = Some(DeviceTelemetry {
                sampled_at: NOW,
                lost: false,
                pci_bus_id: Some(format!("0000:{:02x}:00.0", 0x10 + d.index * 0x10)),
                memory_total: d.memory_capacity.map(|c| c + Bytes::mib(512)),
                memory_reserved: Some(Bytes::mib(512)),
                memory_used: Some(used),
                utilization_gpu: Some(util),
                utilization_memory: Some(util / 2),
                temperature_c: Some(35 + util / 3),
                power_mw: Some(50_000 + util * 2_500),
                power_limit_mw: Some(if node.name == "lab-a" {
                    400_000
                } else {
                    300_000
                }),
                clock_sm_mhz: Some(1410),
                clock_memory_mhz: Some(1593),
                fan_pct: if node.name == "lab-a" { None } else { Some(40) },
                throttle: Vec::new(),
                ecc_uncorrected: Some(0),
                mig_enabled: Some(false),
                processes,
                history_utilization: history,
                history_memory_used: (0..60u64).map(|k| used.0 / 60 * (k + 1)).collect(),
                simulated: false,
            });
        }
    }
    let used_by: std::collections::BTreeMap<ClaimId, Bytes> = snap
        .devices()
        .flat_map(|(_, d)| d.telemetry.iter().flat_map(|t| t.processes.iter()))
        .filter_map(|p| Some((p.claim?, p.used_memory?)))
        .fold(std::collections::BTreeMap::default(), |mut m, (id, b)| {
            *m.entry(id).or_insert(Bytes(0)) += b;
            m
        });
    for c in &mut snap.claims {
        if let Some(u) = used_by.get(&c.id) {
            c.memory_used = Some(*u);
            c.over_limit = *u > c.memory_reserved;
            c.idle = usage(c.id).1 == 0;
        }
    }
    for (i, p) in snap.projects.iter_mut().enumerate() {
        let k = i as f64;
        p.overall_debt = 1200.0 - 600.0 * k;
        p.resources = vec![ProjectResourceView {
            resource: "A100".into(),
            debt: 900.0 - 450.0 * k,
            target: 0.5,
            used: 0.25 * k,
            eligible: i % 2 == 0,
            backoff_until: (p.name == "robotics").then(|| NOW.plus_secs(540)),
            backoff_interval_s: (p.name == "robotics").then_some(600),
            pending: p.pending,
            reason: (p.name == "robotics")
                .then(|| "backed off: no pending claim fits A100".to_string()),
        }];
        if p.name == "vision" {
            p.resources.push(ProjectResourceView {
                resource: "A10G".into(),
                debt: -120.0,
                target: 0.25,
                used: 0.5,
                eligible: true,
                backoff_until: None,
                backoff_interval_s: None,
                pending: 0,
                reason: None,
            });
        }
    }
    snap
}

/// The fixture state: the lab source fresh at `NOW`, on the GPUs view, dates in UTC; the
/// operator is `alice` (the holder of claim 1).
pub fn lab_state() -> State {
    let mut st = State::new(
        vec![SourceSlot::new(
            "lab",
            "embedded".parse().unwrap(),
            true,
            None,
        )],
        Keymap::builtin(),
        2_000,
        false,
    );
    st.zone = jiff::tz::TimeZone::UTC;
    st.operator = Some("alice".to_string());
    let _ = update(&mut st, Msg::Tick(NOW));
    feed(&mut st, 0, lab_snapshot(), NOW.0 - 1_000);
    st
}

/// The lab plus a second source that is down: its last data is 2 minutes old and its
/// last fetch failed.
pub fn with_down_source() -> State {
    let mut st = State::new(
        vec![
            SourceSlot::new("lab", "embedded".parse().unwrap(), true, None),
            SourceSlot::new("far", "gpuboard".parse().unwrap(), true, None),
        ],
        Keymap::builtin(),
        2_000,
        false,
    );
    st.zone = jiff::tz::TimeZone::UTC;
    let _ = update(&mut st, Msg::Tick(Timestamp(NOW.0 - 180_000)));
    let mut far = lab_snapshot();
    far.endpoint.name = "far".into();
    // Another cluster's GPUs: their own UUIDs, so the physical join keeps them apart.
    for n in &mut far.nodes {
        n.name = n.name.replace("lab", "far");
        for d in &mut n.devices {
            d.uuid = d.uuid.as_ref().map(|u| u.replace("fixture", "far"));
        }
    }
    for c in &mut far.claims {
        c.node = c.node.as_ref().map(|n| n.replace("lab", "far"));
    }
    feed(&mut st, 1, far, NOW.0 - 120_000);
    let _ = update(
        &mut st,
        Msg::Fetched {
            source: 1,
            at: Timestamp(NOW.0 - 60_000),
            result: Err(gpuboard::sources::Failure::Unreachable {
                detail: "connection refused (127.0.0.1:7070)".into(),
                sent: false,
            }),
        },
    );
    feed(&mut st, 0, lab_snapshot(), NOW.0 - 1_000);
    let _ = update(&mut st, Msg::Tick(NOW));
    st
}

/// Delivers a snapshot from `source` fetched at `at`, as the driver would.
pub fn feed(st: &mut State, source: usize, snap: Snapshot, at: u64) {
    if let Some(s) = st.sources.get_mut(source) {
        s.in_flight = true;
    }
    let _ = update(
        st,
        Msg::Fetched {
            source,
            at: Timestamp(at),
            result: Ok(snap.into()),
        },
    );
}

/// A state over a demo world at scale (for benchmarks): `nodes` x `gpus` devices and
/// about `claims` claims, fetched at `NOW`.
pub fn scaled_state(nodes: usize, gpus: u32, claims: usize) -> anyhow::Result<State> {
    let mut world = gpuboard::sources::demo::DemoWorld::scaled(nodes, gpus, claims, 7)?;
    world.advance(NOW);
    let snap = world.snapshot(NOW);
    let mut st = State::new(
        vec![SourceSlot::new("demo", "demo".parse().unwrap(), true, None)],
        Keymap::builtin(),
        2_000,
        false,
    );
    st.size = (160, 48);
    st.zone = jiff::tz::TimeZone::UTC;
    let _ = update(&mut st, Msg::Tick(NOW));
    feed(&mut st, 0, snap, NOW.0);
    Ok(st)
}

/// A plain key press of `c`.
pub fn k(c: char) -> Msg {
    Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
}

/// A plain key press of `c`.
pub fn code(c: KeyCode) -> Msg {
    Msg::Key(KeyEvent::new(c, KeyModifiers::NONE))
}

/// Feeds `msgs` to `update`; every effect asked for.
pub fn run(st: &mut State, msgs: Vec<Msg>) -> Vec<Effect> {
    msgs.into_iter().flat_map(|m| update(st, m)).collect()
}

/// The actions among `effects`.
pub fn acts(effects: &[Effect]) -> Vec<Action> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Act { action, .. } => Some(action.clone()),
            _ => None,
        })
        .collect()
}

/// The flash message shown, or nothing.
pub fn flash(st: &State) -> String {
    st.flash
        .as_ref()
        .map(|f| f.text.clone())
        .unwrap_or_default()
}
