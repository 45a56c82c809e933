//! `gpuboard report`'s cost (docs/performance.md, "The report and the usage table"): one
//! endpoint's part of the report (`GET /v1/history/report`: read the window's versions and
//! every device's samples from `history.sqlite`, replay, account, find trouble) over 24 h of
//! 1 000 GPUs. Goal: <= 2 s.
//!
//! The history is generated on a simulated clock as `benches/history.rs` does: 250 nodes of
//! four 80 GiB GPUs; every 5 minutes each free GPU may get a claim (a quarter, a half or a
//! whole GPU, four projects, 1 to 8 hours; released by its lease, an audited action); a held
//! GPU samples its claim's process at 85-100 % (idle now and then for an hour), a free one
//! 0 %, every 5 s, written as the sealed hourly chunks a `serve` leaves. States go through
//! the real `Recording` into a real store on disk.
//!
//! `cargo bench --bench report` (release); `-- --gpus N --hours H` for other sizes.
//!
//! `-- --usage [--days D]`: the usage table alone (`parts=usage`, the console's Usage view)
//! over D days (30) of 1 000 GPUs, from a window 20 minutes into the first hour to 25
//! minutes before the last one ends: the whole hours are added up from their roll-ups, the
//! two partial ones replayed. Goal: <= 1 s. The roll-ups are made from the generated hours
//! with the functions the recorder's `HistoryStore::roll_up` uses (`accounting::tell`,
//! `usage::tally`); only the two partial hours are written as chunks (30 days of chunks
//! would take the bench an hour to compress).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use gpuboard::accounting::usage::{IDLE_BELOW_PCT, tally};
use gpuboard::accounting::{Ask, IdleRule, PENDING_MS, Parts, WindowReport, report, tell};
use gpuboard::clock::Timestamp;
use gpuboard::endpoint::report_api::window_report;
use gpuboard::history::sample::{ProcessClaim, Rare, Tick};
use gpuboard::history::{DeviceSample, Record, Recording, state_of};
use gpuboard::ids::ClaimId;
use gpuboard::placement::DeviceShare;
use gpuboard::snapshot::{
    AuditEvent, ClaimState, ClaimView, DeviceView, NodeView, ProcessView, Snapshot,
};
use gpuboard::store::history::HistoryStore;
use gpuboard::units::{Bytes, Slots, Units};
use gpuboard::wire::history::GpuRef;

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

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
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
                    name: None,
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

/// The fleet's claims over time, five minutes at a time.
struct Fleet {
    noise: Noise,
    held: Vec<Option<Held>>,
    events: Vec<AuditEvent>,
    next_id: u64,
    revision: u64,
}

impl Fleet {
    fn new(gpus: usize) -> Fleet {
        Fleet {
            noise: Noise(27),
            held: vec![None; gpus],
            events: Vec::new(),
            next_id: 1,
            revision: 1,
        }
    }

    /// Releases what expired at `at`, places new claims on free GPUs, and the state then.
    fn step(&mut self, at: u64) -> Snapshot {
        for h in &mut self.held {
            if h.is_some_and(|x| x.ends <= at) {
                let x = h.take().unwrap();
                self.revision += 1;
                self.events.push(AuditEvent {
                    revision: self.revision,
                    at: Timestamp(at),
                    actor: "lease".into(),
                    action: "expire".into(),
                    target: format!("claim {}", x.id),
                    detail: "lease expired, released".into(),
                });
            }
            if h.is_none() && self.noise.below(6) == 0 {
                *h = Some(Held {
                    id: self.next_id,
                    project: self.noise.below(4) as usize,
                    units: [2_500, 5_000, 10_000][self.noise.below(3) as usize],
                    ends: at + HOUR_MS * (1 + self.noise.below(8)),
                    lazy: self.noise.below(5) == 0,
                    since: at,
                });
                self.next_id += 1;
                self.revision += 1;
            }
        }
        // The endpoint keeps its latest audit events, not all of them.
        let keep = self.events.len().saturating_sub(200);
        self.events.drain(..keep);
        state(at, self.revision, &self.held, &self.events)
    }
}

fn gpu_ref(g: usize) -> GpuRef {
    GpuRef {
        node: format!("node-{:03}", g / 4),
        index: (g % 4) as u32,
    }
}

/// Seconds this thread has run on a CPU (`/proc/thread-self/schedstat`): on a machine
/// others load, wall time counts their turns too; this does not.
fn cpu_s() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |ns| ns / 1e9)
}

/// Seconds every thread of this process has run on a CPU, those ended included
/// (`/proc/self/stat`'s user and system times, in ticks of 10 ms): the route's work runs on
/// helper threads too.
fn process_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis (state first): utime, stime 12th, 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn median(mut times: Vec<f64>) -> (f64, f64, f64) {
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[0], times[times.len() - 1])
}

fn main() {
    if flag("--usage") {
        usage();
    } else {
        whole();
    }
}

/// The whole report over `--hours` of `--gpus`.
// The bench's recipe in the order it runs: generate, time the route, time each phase on
// one thread, check both agree, print the figures.
#[allow(clippy::too_many_lines)]
fn whole() {
    let gpus = usize::try_from(arg("--gpus", 1_000)).unwrap();
    let hours = arg("--hours", 24);
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut store = HistoryStore::open(dir.path()).unwrap();
    let mut fleet = Fleet::new(gpus);
    let mut recording = Recording::default();
    let mut hour: BTreeMap<usize, Vec<DeviceSample>> = BTreeMap::new();
    let end = T0 + hours * HOUR_MS;
    let mut at = T0;
    while at < end {
        let now = fleet.step(at);
        if let Some(rec) = recording.observe(&now) {
            store.append(&rec).unwrap();
        }
        for (g, h) in fleet.held.iter().enumerate() {
            let block = hour.entry(g).or_default();
            for i in 0..(STEP_MS / 5_000) {
                block.push(sample(at + i * 5_000, &mut fleet.noise, *h));
            }
        }
        at += STEP_MS;
        if at % HOUR_MS == T0 % HOUR_MS {
            for (g, samples) in std::mem::take(&mut hour) {
                store.add_chunk(&gpu_ref(g), &samples).unwrap();
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
    // The route's own work (`window_report`: versions and samples read at once on two
    // connections, usage and trouble found at once), then the same phases one after
    // another on this thread for the split; runs interleaved.
    let mut route = Vec::new();
    let mut route_cpu = Vec::new();
    let mut times = Vec::new();
    let mut cpus = Vec::new();
    let mut parts = Vec::new();
    let mut last = None;
    for _ in 0..5 {
        let t = Instant::now();
        let cpu = process_cpu_s();
        let whole = window_report(&store, ask, Parts::All).unwrap().unwrap();
        route.push(t.elapsed().as_secs_f64());
        route_cpu.push(process_cpu_s() - cpu);

        let t = Instant::now();
        let cpu = cpu_s();
        let begins = store.from().unwrap().unwrap();
        let from = ask.from.max(begins);
        let (start, versions) = store.window(from, ask.to).unwrap().unwrap();
        let read_versions = t.elapsed().as_secs_f64();
        let samples = store
            .all_ticks(Timestamp(from.0 - 300_000), ask.to)
            .unwrap();
        let read_samples = t.elapsed().as_secs_f64() - read_versions;
        let r = report(&start, &versions, &samples, &Ask { from, ..ask });
        let total = t.elapsed().as_secs_f64();
        cpus.push(cpu_s() - cpu);
        times.push(total);
        parts.push((
            total,
            read_versions,
            read_samples,
            total - read_versions - read_samples,
        ));
        assert_eq!(whole.usage, r.usage, "the route's figures are the report's");
        assert_eq!(whole.actions, r.actions);
        assert_eq!(whole.trouble, r.trouble);
        last = Some((
            versions.len(),
            samples.values().map(Vec::len).sum::<usize>(),
            r,
        ));
    }
    let (mid, min, max) = median(route);
    println!(
        "the route's report over {hours} h of {gpus} GPUs: median {mid:.3} s (min {min:.3}, \
         max {max:.3}; 5 runs; on-CPU median {:.3} s, all threads)",
        median(route_cpu).0
    );
    times.sort_by(f64::total_cmp);
    parts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (versions, samples, r) = last.unwrap();
    println!(
        "one thread, phase by phase: median {:.3} s (min {:.3}, max {:.3}; 5 runs; \
         on-CPU median {:.3} s): versions {:.3} s, samples {:.3} s, accounting {:.3} s; \
         {versions} versions, {samples} samples, {} claims, {} actions; history generated \
         in {generated:.0} s",
        times[2],
        times[0],
        times[4],
        median(cpus).0,
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

/// The usage table alone over `--days` of `--gpus`, from roll-ups and two partial hours.
// The bench's recipe in the order it runs: generate the days and their roll-ups, time
// the usage table and its JSON, print the figures.
#[allow(clippy::too_many_lines)]
fn usage() {
    let gpus = usize::try_from(arg("--gpus", 1_000)).unwrap();
    let days = arg("--days", 30);
    let hours = days * 24;
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut store = HistoryStore::open(dir.path()).unwrap();
    let mut fleet = Fleet::new(gpus);
    let mut recording = Recording::default();
    let refs: Vec<GpuRef> = (0..gpus).map(gpu_ref).collect();
    let end = T0 + hours * HOUR_MS;
    let (from, to) = (T0 + 20 * 60_000, end - 25 * 60_000);
    let mut at = T0;
    let mut hour_start: Option<Snapshot> = None;
    let mut versions: Vec<Record> = Vec::new();
    let mut chunks: BTreeMap<usize, Vec<DeviceSample>> = BTreeMap::new();
    let mut ticks: BTreeMap<GpuRef, Vec<Tick>> = BTreeMap::new();
    while at < end {
        let h0 = at - (at - T0) % HOUR_MS;
        // The first and the last hour are cut by the window: replayed from chunks.
        let partial = h0 == T0 || h0 + HOUR_MS == end;
        let now = fleet.step(at);
        if let Some(rec) = recording.observe(&now) {
            store.append(&rec).unwrap();
            if at > h0 {
                versions.push(rec);
            }
        }
        if at == h0 {
            hour_start = Some(state_of(&now));
        }
        for (g, h) in fleet.held.iter().enumerate() {
            if partial {
                let block = chunks.entry(g).or_default();
                for i in 0..(STEP_MS / 5_000) {
                    block.push(sample(at + i * 5_000, &mut fleet.noise, *h));
                }
                continue;
            }
            let series = ticks.entry(refs[g].clone()).or_default();
            for i in 0..(STEP_MS / 5_000) {
                let s = sample(at + i * 5_000, &mut fleet.noise, *h);
                let processes: Arc<[ProcessClaim]> = s
                    .rare
                    .processes
                    .iter()
                    .map(|p| ProcessClaim {
                        claim: p.claim,
                        used_memory: p.used_memory,
                    })
                    .collect();
                series.push(Tick {
                    at: s.at,
                    utilization_gpu: s.utilization_gpu,
                    processes,
                });
            }
        }
        at += STEP_MS;
        if (at - T0).is_multiple_of(HOUR_MS) {
            if partial {
                for (g, samples) in std::mem::take(&mut chunks) {
                    store.add_chunk(&refs[g], &samples).unwrap();
                }
            } else {
                let start = hour_start.take().unwrap();
                let story = tell(&start, &versions, Timestamp(h0), Timestamp(at));
                let t = tally(&story, &ticks, IDLE_BELOW_PCT);
                store.add_rollup(Timestamp(h0), &t).unwrap();
                ticks.clear();
            }
            versions.clear();
        }
    }
    let generated = started.elapsed().as_secs_f64();
    drop(store);
    let store = HistoryStore::open(dir.path()).unwrap();
    let ask = Ask {
        from: Timestamp(from),
        to: Timestamp(to),
        idle: IdleRule::default(),
        pending_ms: PENDING_MS,
    };
    let mut times = Vec::new();
    let mut cpus = Vec::new();
    let mut last = None;
    let mut jsons = Vec::new();
    let mut size = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let cpu = process_cpu_s();
        let r = window_report(&store, ask, Parts::Usage).unwrap().unwrap();
        let computed = t.elapsed().as_secs_f64();
        // What the route sends and the console's client reads back.
        let json = serde_json::to_vec(&r).unwrap();
        let back: WindowReport = serde_json::from_slice(&json).unwrap();
        times.push(t.elapsed().as_secs_f64());
        jsons.push(t.elapsed().as_secs_f64() - computed);
        cpus.push(process_cpu_s() - cpu);
        size = json.len();
        assert_eq!(back.usage.projects, r.usage.projects);
        last = Some(r);
    }
    let (mid, min, max) = median(times);
    let r = last.unwrap();
    let u = &r.usage;
    println!(
        "usage over {days} days of {gpus} GPUs (parts=usage, the answer's JSON written and \
         read back): median {mid:.3} s (min {min:.3}, max {max:.3}; 5 runs; on-CPU median \
         {:.3} s), of which JSON {:.3} s ({:.1} MiB); {} projects, {} claims; history \
         generated in {generated:.0} s",
        median(cpus).0,
        median(jsons).0,
        size as f64 / f64::from(1 << 20),
        u.projects.len(),
        u.claims.len()
    );
    let reserved: f64 = u
        .projects
        .iter()
        .map(|p| p.figures.reserved.compute.hours())
        .sum();
    let expected = gpus as f64 * (to - from) as f64 / HOUR_MS as f64;
    println!(
        "physical {:.1} GPU-h (fleet x window {expected:.1}), reserved {reserved:.1}, \
         unallocated {:.1}, idle-allocated {:.1}",
        u.physical.hours(),
        u.unallocated.compute.hours(),
        u.projects
            .iter()
            .map(|p| p.figures.idle_allocated.hours())
            .sum::<f64>()
    );
    assert!((u.physical.hours() - expected).abs() < 1e-6 * expected);
    assert!((reserved + u.unallocated.compute.hours() - expected).abs() < 1e-3 * expected);
}
