//! Live telemetry joined to the scheduler's state: the latest sampling round of this
//! host's GPUs (with where each GPU process comes from and the coordination file's
//! records, both read on the sampler thread), and the pure merge of that round into a
//! `Snapshot`: device telemetry, processes with their claims, unclaimed memory, per-claim
//! use, over-limit and idle flags, the host, and why no GPU is seen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use crate::attribution::{
    Attribution, DeviceObservation, Holding, IdlePolicy, IdleTracker, attribute,
};
use crate::clock::Timestamp;
use crate::discovery::coordination::read_records;
use crate::ids::ClaimId;
use crate::placement::{DeviceSpec, NodeSpec};
use crate::snapshot::{self, ClaimState, CoordinationRecord, HostView, ProcessView, Snapshot};
use crate::telemetry::procfs::ProcessOrigin;
use crate::telemetry::simulated::{self, Simulation};
use crate::telemetry::{BackendStatus, HostSample, TelemetrySnapshot, procfs, shown};
use crate::units::Bytes;

/// Where live telemetry is joined in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveConfig {
    /// The node of the inventory that is this host (its devices match by index).
    pub node: String,
    /// The Flink coordination file to list (`None`: none listed).
    pub coordination_file: Option<PathBuf>,
    /// Where `/proc` is (process origins for attribution).
    pub proc_root: PathBuf,
    /// When a claim counts as allocated but idle.
    pub idle: IdlePolicy,
    /// Simulated telemetry for the devices no backend reads (`serve --simulate-telemetry`).
    pub simulate: Option<Simulation>,
}

impl LiveConfig {
    /// This host under `node`, with Flink's default coordination file and `/proc`.
    pub fn local(node: &str) -> LiveConfig {
        LiveConfig {
            node: node.to_string(),
            coordination_file: Some(PathBuf::from(
                crate::discovery::coordination::DEFAULT_COORDINATION_FILE,
            )),
            proc_root: PathBuf::from("/proc"),
            idle: IdlePolicy::default(),
            simulate: None,
        }
    }
}

/// One round as the merge needs it. Everything here was read off the request path.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveRound {
    /// The sampler's round.
    pub telemetry: TelemetrySnapshot,
    /// Where each GPU process comes from.
    pub origins: Vec<ProcessOrigin>,
    /// Coordination-file records, with dead owners flagged.
    pub coordination: Vec<CoordinationRecord>,
    /// Why the coordination file could not be read, when it could not.
    pub coordination_error: Option<String>,
}

impl LiveRound {
    /// Completes a sampler round with process origins and coordination records. Reads
    /// /proc and the coordination file: call it on the sampler thread.
    pub fn gather(telemetry: TelemetrySnapshot, config: &LiveConfig) -> LiveRound {
        let pids: BTreeSet<u32> = telemetry
            .devices
            .iter()
            .flat_map(|d| d.processes.iter().map(|p| p.pid))
            .collect();
        let origins = pids
            .into_iter()
            .map(|pid| procfs::process_origin(&config.proc_root, pid))
            .collect();
        let (coordination, coordination_error) = match &config.coordination_file {
            None => (Vec::new(), None),
            Some(path) => match read_records(path) {
                Ok(records) => (
                    records
                        .into_iter()
                        .map(|r| CoordinationRecord {
                            file: path.display().to_string(),
                            index: r.index,
                            pid: r.pid,
                            dead: !r.owner_alive,
                        })
                        .collect(),
                    None,
                ),
                Err(e) => (Vec::new(), Some(e.to_string())),
            },
        };
        LiveRound {
            telemetry,
            origins,
            coordination,
            coordination_error,
        }
    }
}

/// The latest round and the idle tracker, shared by the sampler thread (writer), the
/// engine's tick (idle flags) and snapshots (readers). Locks are held only to swap or
/// clone an `Arc`. Its generation counts what it adds to snapshots (rounds published,
/// idle flags changed), so the endpoint knows when its cached snapshot is out of date.
#[derive(Debug)]
pub struct LiveFeed {
    config: LiveConfig,
    latest: Mutex<Option<Arc<LiveRound>>>,
    idle: Mutex<IdleState>,
    generation: watch::Sender<u64>,
    /// When (the round's own clock, ms) the host figures last made a new generation.
    host_shown_ms: std::sync::atomic::AtomicU64,
    /// The host figures of the round that last made a generation.
    host_shown: Mutex<Option<HostSample>>,
}

/// Host figures (CPU, memory, load) change every round; alone they make a new generation
/// (and so a new snapshot version sent to every watching console) at most this often.
/// GPU readings, processes and coordination records make one whenever they change.
pub const HOST_REFRESH_MS: u64 = 60_000;

#[derive(Debug, Default)]
struct IdleState {
    tracker: IdleTracker,
    last_round_ms: Option<u64>,
    flagged: BTreeSet<ClaimId>,
}

impl LiveFeed {
    /// An empty feed.
    pub fn new(config: LiveConfig) -> LiveFeed {
        let tracker = IdleTracker::new(config.idle);
        LiveFeed {
            config,
            latest: Mutex::new(None),
            idle: Mutex::new(IdleState {
                tracker,
                ..IdleState::default()
            }),
            generation: watch::Sender::new(0),
            host_shown_ms: std::sync::atomic::AtomicU64::new(0),
            host_shown: Mutex::new(None),
        }
    }

    /// Where it joins in.
    pub fn config(&self) -> &LiveConfig {
        &self.config
    }

    /// Replaces the latest round; when what it shows changed, starts a new generation and
    /// wakes those waiting for it (devices: a figure as the screens show it, see
    /// `shown::same_shown`; host figures alone: at most every `HOST_REFRESH_MS`, and only
    /// once they moved from those last shown, see `host_moved`).
    pub fn publish(&self, round: LiveRound) {
        use std::sync::atomic::Ordering;
        let now = round.telemetry.fetched_unix_ms;
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        let mut host_shown = self
            .host_shown
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let host_due = now.saturating_sub(self.host_shown_ms.load(Ordering::Relaxed))
            >= HOST_REFRESH_MS
            && host_moved(host_shown.as_ref(), round.telemetry.host.as_ref());
        let shown_changed = latest.as_deref().is_none_or(|prev| {
            prev.telemetry.backend != round.telemetry.backend
                || !shown::same_shown(&prev.telemetry.devices, &round.telemetry.devices)
                || prev.origins != round.origins
                || prev.coordination != round.coordination
                || prev.coordination_error != round.coordination_error
                || host_due
        });
        if shown_changed {
            host_shown.clone_from(&round.telemetry.host);
        }
        drop(host_shown);
        *latest = Some(Arc::new(round));
        drop(latest);
        if shown_changed {
            self.host_shown_ms.store(now, Ordering::Relaxed);
            self.generation.send_modify(|g| *g += 1);
        }
    }

    /// How many times what the feed adds to snapshots changed (rounds, idle flags).
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// The generation, as it changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// The latest round, if any.
    pub fn latest(&self) -> Option<Arc<LiveRound>> {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Claims flagged idle at the last tick.
    pub fn idle_claims(&self) -> BTreeSet<ClaimId> {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .flagged
            .clone()
    }

    /// Feeds a round not seen yet to the idle tracker, against the claims of a snapshot.
    /// `snapshot` is called only when needed: for a new round that shows devices (the
    /// snapshot only matters through them, and taking one of 20 000 claims every second
    /// was most of an idle endpoint's work).
    pub fn track_idle(&self, snapshot: impl FnOnce() -> Snapshot) {
        let Some(round) = self.latest() else {
            return;
        };
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.last_round_ms == Some(round.telemetry.fetched_unix_ms) {
            return;
        }
        idle.last_round_ms = Some(round.telemetry.fetched_unix_ms);
        // No device in the round: nothing joins, whatever the snapshot holds.
        let snap = if round.telemetry.devices.is_empty() {
            Snapshot::default()
        } else {
            snapshot()
        };
        let joined = Join::new(&snap, &round, &self.config.node);
        let observations = joined.observations(&round);
        let attribution = attribute(&observations, &round.origins, &joined.holdings);
        let flagged: BTreeSet<ClaimId> = idle
            .tracker
            .update(round.telemetry.fetched_unix_ms, &attribution, &observations)
            .into_iter()
            .map(|c| c.claim_id)
            .collect();
        if flagged != idle.flagged {
            idle.flagged = flagged;
            drop(idle);
            self.generation.send_modify(|g| *g += 1);
        }
    }

    /// Joins the latest round into `snap` (see `merge`), then, when simulating, fills the
    /// devices no backend read and says so first in the telemetry note.
    pub fn merge_into(&self, snap: &mut Snapshot) {
        let round = self.latest();
        if let Some(round) = &round {
            merge(snap, round, &self.config.node, &self.idle_claims());
        }
        if let Some(sim) = &self.config.simulate {
            sim.fill(snap);
            // No driver is expected here: why NVML is missing would only be noise.
            let coordination = round.as_ref().and_then(|r| r.coordination_error.as_ref());
            snap.endpoint.telemetry_note = Some(match coordination {
                Some(e) => format!("{}; {e}", sim.note()),
                None => sim.note(),
            });
        }
    }

    /// Moves simulated telemetry on by a step: a new generation, so watchers and caches
    /// take a fresh snapshot (`spawn_simulation` calls it every `simulated::STEP_MS`).
    fn simulated_step(&self) {
        self.generation.send_modify(|g| *g += 1);
    }
}

/// Steps the simulated telemetry of `feed` every `simulated::STEP_MS` until aborted; a
/// no-op task when the feed does not simulate.
pub fn spawn_simulation(feed: Arc<LiveFeed>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if feed.config.simulate.is_none() {
            return;
        }
        let mut every = tokio::time::interval(std::time::Duration::from_millis(simulated::STEP_MS));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            feed.simulated_step();
        }
    })
}

/// Whether the host figures moved enough from those last shown to be worth a new version
/// to every watching console (`HostSample::moved_from`). An idle host then sends nothing;
/// a drift adds up against the figures shown until it shows.
fn host_moved(shown: Option<&HostSample>, now: Option<&HostSample>) -> bool {
    match (shown, now) {
        (Some(a), Some(b)) => b.moved_from(a),
        _ => shown.is_some() != now.is_some(),
    }
}

/// How the snapshot's devices meet the round's: (node index in `snap.nodes`, device
/// position) for each telemetry index, and the claims' holdings in telemetry indexes.
struct Join {
    by_telemetry: BTreeMap<u32, (usize, usize)>,
    holdings: Vec<Holding>,
}

impl Join {
    fn new(snap: &Snapshot, round: &LiveRound, local_node: &str) -> Join {
        let mut by_telemetry = BTreeMap::new();
        for t in &round.telemetry.devices {
            let found = snap.nodes.iter().enumerate().find_map(|(ni, node)| {
                node.devices
                    .iter()
                    .position(|d| {
                        match (&d.uuid, &t.info.uuid) {
                            (Some(a), Some(b)) if a == b => true,
                            // Two known UUIDs that differ are different boards.
                            (Some(_), Some(_)) => false,
                            _ => node.name == local_node && d.index == t.index,
                        }
                    })
                    .map(|di| (ni, di))
            });
            if let Some(at) = found {
                by_telemetry.insert(t.index, at);
            }
        }
        let mut to_telemetry: BTreeMap<(&str, u32), u32> = BTreeMap::new();
        for (tindex, (ni, di)) in &by_telemetry {
            if let Some(d) = snap
                .nodes
                .get(*ni)
                .and_then(|n| n.devices.get(*di).map(|d| (n, d)))
            {
                to_telemetry.insert((d.0.name.as_str(), d.1.index), *tindex);
            }
        }
        let holdings = snap
            .claims
            .iter()
            .filter(|c| c.state == ClaimState::Placed)
            .flat_map(|c| {
                let node = c.node.as_deref().unwrap_or_default();
                let pids: Vec<u32> = c.request.pid.into_iter().collect();
                let to_telemetry = &to_telemetry;
                c.shares.iter().filter_map(move |s| {
                    to_telemetry.get(&(node, s.device)).map(|t| Holding {
                        claim_id: c.id,
                        device: *t,
                        reserved: s.memory,
                        pids: pids.clone(),
                    })
                })
            })
            .collect();
        Join {
            by_telemetry,
            holdings,
        }
    }

    fn observations<'r>(&self, round: &'r LiveRound) -> Vec<DeviceObservation<'r>> {
        round
            .telemetry
            .devices
            .iter()
            .filter(|t| self.by_telemetry.contains_key(&t.index))
            .map(|t| DeviceObservation {
                device: t.index,
                processes: &t.processes,
                utilization_percent: t.metrics.utilization_gpu_percent,
            })
            .collect()
    }
}

/// Joins one round into a snapshot: each device matched by UUID, or by index on the
/// local node, gets its telemetry (every unsupported metric stays `null`), its processes
/// with the claim each belongs to, and its unclaimed memory; each placed claim on local
/// devices gets the memory its processes use, over-limit, and `idle` when in `idle`. The
/// host, the coordination records and, when no GPU can be read, the reason are set too.
pub fn merge(snap: &mut Snapshot, round: &LiveRound, local_node: &str, idle: &BTreeSet<ClaimId>) {
    let joined = Join::new(snap, round, local_node);
    let observations = joined.observations(round);
    let attribution = attribute(&observations, &round.origins, &joined.holdings);
    let sampled_at = Timestamp(round.telemetry.fetched_unix_ms);
    for t in &round.telemetry.devices {
        let Some((ni, di)) = joined.by_telemetry.get(&t.index) else {
            continue;
        };
        let Some(view) = snap.nodes.get_mut(*ni).and_then(|n| n.devices.get_mut(*di)) else {
            continue;
        };
        if view.uuid.is_none() {
            view.uuid.clone_from(&t.info.uuid);
        }
        view.telemetry = Some(device_telemetry(t, sampled_at, &attribution));
        view.unclaimed_memory = attribution.device(t.index).map(|d| d.unclaimed);
    }
    for claim in &mut snap.claims {
        let usages: Vec<_> = attribution
            .claims
            .iter()
            .filter(|u| u.claim_id == claim.id)
            .collect();
        if usages.is_empty() {
            continue;
        }
        claim.memory_used = Some(usages.iter().fold(Bytes(0), |sum, u| sum + u.used));
        claim.over_limit = usages.iter().any(|u| u.over_limit);
        claim.idle = idle.contains(&claim.id);
    }
    snap.host = round.telemetry.host.as_ref().map(|h| HostView {
        hostname: local_node.to_string(),
        cpu_pct: h.cpu_percent,
        cores: u32::try_from(h.cpu_count).ok(),
        memory_used: Some(h.memory_used),
        memory_total: Some(h.memory_total),
        load1: h.load.map(|l| l.one),
    });
    snap.coordination.clone_from(&round.coordination);
    let mut notes = Vec::new();
    if let BackendStatus::Unavailable { reason, .. } = &round.telemetry.backend {
        notes.push(reason.to_string());
    }
    if let Some(e) = &round.coordination_error {
        notes.push(e.clone());
    }
    if !notes.is_empty() {
        snap.endpoint.telemetry_note = Some(notes.join("; "));
    }
}

fn device_telemetry(
    t: &crate::telemetry::DeviceReading,
    sampled_at: Timestamp,
    attribution: &Attribution,
) -> snapshot::DeviceTelemetry {
    let m = &t.metrics;
    let claim_of = |pid: u32| {
        attribution
            .claims
            .iter()
            .find(|u| u.device == t.index && u.pids.contains(&pid))
            .map(|u| u.claim_id)
    };
    snapshot::DeviceTelemetry {
        sampled_at,
        lost: t.is_lost(),
        pci_bus_id: t.info.pci_bus_id.clone(),
        memory_total: m.memory.map(|x| x.total),
        memory_reserved: m.memory.map(|x| x.reserved),
        memory_used: m.memory.map(|x| x.used),
        utilization_gpu: m.utilization_gpu_percent,
        utilization_memory: m.utilization_memory_percent,
        temperature_c: m.temperature_c,
        power_mw: m.power_mw,
        power_limit_mw: m.power_limit_mw,
        clock_sm_mhz: m.clocks.sm_mhz,
        clock_memory_mhz: m.clocks.memory_mhz,
        // The busiest fan: the one an operator worries about.
        fan_pct: m.fan_percent.as_ref().and_then(|f| f.iter().copied().max()),
        throttle: m.throttle_reasons.clone().unwrap_or_default(),
        ecc_uncorrected: m.ecc.and_then(|e| e.volatile_uncorrected),
        mig_enabled: m.mig.as_ref().map(|x| x.enabled),
        processes: t
            .processes
            .iter()
            .map(|p| ProcessView {
                pid: p.pid,
                name: p.name.clone(),
                used_memory: p.used_memory,
                claim: claim_of(p.pid),
                owner: p.owner.clone(),
            })
            .collect(),
        history_utilization: t
            .history
            .utilization_percent
            .for_sparkline()
            .into_iter()
            .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
            .collect(),
        history_memory_used: t.history.memory_used_bytes.for_sparkline(),
        simulated: false,
    }
}

/// The inventory of this host from a sampling round: one node named `node` with every
/// device that answers; schedulable memory is total less the driver's reservation less
/// `headroom`, and a device whose memory cannot be read is unschedulable (`None`).
pub fn inventory(round: &TelemetrySnapshot, node: &str, headroom: Bytes) -> NodeSpec {
    NodeSpec {
        name: node.to_string(),
        devices: round
            .devices
            .iter()
            .filter(|t| !t.is_lost())
            .map(|t| DeviceSpec {
                index: t.index,
                model: t
                    .info
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("GPU {}", t.index)),
                uuid: t.info.uuid.clone(),
                memory: t
                    .metrics
                    .memory
                    .map(|m| m.schedulable())
                    .filter(|m| *m > headroom)
                    .map(|m| m - headroom),
                link_group: None,
            })
            .collect(),
        cpus: None,
    }
}

/// The host's name as the kernel has it, or `local` when it cannot be read.
pub fn hostname() -> String {
    std::fs::read_to_string(Path::new("/proc/sys/kernel/hostname"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "local".to_string())
}

/// Opens this host's NVML (`library`: a path, or the driver's soname) with the host
/// reader, and takes a first round now: the inventory comes from it, and the sampler
/// carries on from there.
pub fn open_local(
    library: Option<&Path>,
    config: crate::telemetry::SamplerConfig,
) -> (crate::telemetry::SamplerCore, TelemetrySnapshot) {
    let backend = crate::telemetry::nvml::NvmlBackend::open(library)
        .with_owners_under(crate::telemetry::cgroup_owner::host_proc());
    let mut core = crate::telemetry::SamplerCore::new(
        Box::new(backend),
        Some(Box::new(crate::telemetry::SysinfoHost::new())),
        config,
    );
    let first = core.round(crate::clock::Clock::now(&crate::clock::SystemClock));
    (core, first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::endpoint::engine::{Engine, EngineConfig, LocalProcesses};
    use crate::scheduler::Submitted;
    use crate::telemetry::fake::{FakeBackend, FakeGpu};
    use crate::telemetry::{
        DeviceInfo, DeviceMetrics, HostSample, MemoryInfo, ProcessSample, SamplerConfig,
        SamplerCore, Unavailable,
    };
    use serde_json::json;

    fn gpu(index: u32, util: Option<u32>, processes: Vec<ProcessSample>) -> FakeGpu {
        FakeGpu {
            info: DeviceInfo {
                name: Some("NVIDIA L4".into()),
                uuid: Some(format!("GPU-{index}")),
                pci_bus_id: Some(format!("00000000:0{index}:00.0")),
                ..DeviceInfo::default()
            },
            metrics: DeviceMetrics {
                utilization_gpu_percent: util,
                memory: Some(MemoryInfo {
                    total: Bytes::gib(24),
                    reserved: Bytes::mib(512),
                    used: Bytes::gib(3),
                    free: Bytes::gib(20),
                }),
                ..DeviceMetrics::default()
            },
            processes,
            lost: false,
        }
    }

    fn proc(pid: u32, mib: u64) -> ProcessSample {
        ProcessSample {
            pid,
            used_memory: Some(Bytes::mib(mib)),
            name: Some(format!("p{pid}")),
            owner: None,
        }
    }

    fn round(fake: &FakeBackend, secs: u64) -> TelemetrySnapshot {
        let mut core = SamplerCore::new(Box::new(fake.clone()), None, SamplerConfig::default());
        let mut snap = core.round(Timestamp(0).plus_secs(secs));
        snap.host = Some(HostSample {
            cpu_percent: Some(12.5),
            cpu_count: 2,
            memory_total: Bytes::gib(8),
            memory_used: Bytes::gib(3),
            memory_available: Bytes::gib(5),
            load: None,
        });
        snap
    }

    fn config(proc_root: &Path) -> LiveConfig {
        LiveConfig {
            node: "host".into(),
            coordination_file: None,
            proc_root: proc_root.to_path_buf(),
            idle: IdlePolicy {
                threshold_ms: 10_000,
                max_utilization_percent: 1,
            },
            simulate: None,
        }
    }

    fn engine(nodes: Vec<NodeSpec>) -> Engine {
        Engine::in_memory(
            EngineConfig::default(),
            nodes,
            Arc::new(ManualClock::new(Timestamp(1_000))),
            Arc::new(LocalProcesses),
        )
        .unwrap()
    }

    async fn claim(engine: &Engine, body: serde_json::Value) -> ClaimId {
        let req = crate::request::ClaimRequest::from_json(&body).unwrap();
        match engine.submit(req, "op").await.unwrap() {
            Submitted::Placed(c) => c.id,
            other => panic!("not placed: {other:?}"),
        }
    }

    #[test]
    fn inventory_takes_schedulable_memory_less_headroom_and_unknown_memory_is_unschedulable() {
        let mut no_memory = gpu(1, None, vec![]);
        no_memory.metrics.memory = None;
        no_memory.info.name = None;
        let fake = FakeBackend::new(vec![gpu(0, None, vec![]), no_memory]);
        let node = inventory(&round(&fake, 1), "host", Bytes::gib(1));
        assert_eq!(node.name, "host");
        assert_eq!(node.devices.len(), 2);
        assert_eq!(
            node.devices[0].memory,
            Some(Bytes::gib(24) - Bytes::mib(512) - Bytes::gib(1))
        );
        assert_eq!(node.devices[0].uuid.as_deref(), Some("GPU-0"));
        assert_eq!(node.devices[0].model, "NVIDIA L4");
        assert_eq!(node.devices[1].memory, None);
        assert_eq!(node.devices[1].model, "GPU 1");
        let all = inventory(&round(&fake, 1), "host", Bytes::gib(100));
        assert_eq!(
            all.devices[0].memory, None,
            "headroom larger than the board"
        );
    }

    #[tokio::test]
    async fn processes_are_attributed_and_over_limit_and_unclaimed_use_flagged() {
        let proc_root = tempfile::tempdir().unwrap();
        // pid 301's environment names claim 2 (as `gpuboard run` sets it).
        let dir = proc_root.path().join("301");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("status"), "Name:\tx\nPPid:\t1\n").unwrap();
        std::fs::write(dir.join("environ"), b"GPUBOARD_CLAIM_ID=2\0").unwrap();
        let fake = FakeBackend::new(vec![
            gpu(0, Some(90), vec![proc(100, 3000), proc(666, 700)]),
            gpu(1, Some(50), vec![proc(301, 100)]),
        ]);
        let snapshot = round(&fake, 5);
        let node = inventory(&snapshot, "host", Bytes(0));
        let engine = engine(vec![node]);
        let one = claim(
            &engine,
            json!({"gpu_memory": "2GiB", "devices": [0], "pid": 100}),
        )
        .await;
        let two = claim(&engine, json!({"gpu_memory": "1GiB", "devices": [1]})).await;
        assert_eq!((one, two), (ClaimId(1), ClaimId(2)));
        let feed = LiveFeed::new(config(proc_root.path()));
        feed.publish(LiveRound::gather(snapshot, feed.config()));
        let mut snap = engine.snapshot();
        feed.merge_into(&mut snap);

        let d0 = &snap.nodes[0].devices[0];
        let t0 = d0.telemetry.as_ref().unwrap();
        assert_eq!(t0.utilization_gpu, Some(90));
        assert_eq!(t0.memory_total, Some(Bytes::gib(24)));
        assert_eq!(t0.temperature_c, None, "unsupported stays null");
        assert_eq!(t0.sampled_at, Timestamp(5_000));
        assert_eq!(t0.history_utilization, vec![90]);
        let claims: Vec<_> = t0.processes.iter().map(|p| (p.pid, p.claim)).collect();
        assert_eq!(claims, vec![(100, Some(ClaimId(1))), (666, None)]);
        assert_eq!(d0.unclaimed_memory, Some(Bytes::mib(700)));
        let d1 = &snap.nodes[0].devices[1];
        assert_eq!(
            d1.telemetry.as_ref().unwrap().processes[0].claim,
            Some(ClaimId(2))
        );
        assert_eq!(d1.unclaimed_memory, Some(Bytes(0)));

        let c1 = snap.claim(ClaimId(1)).unwrap();
        assert_eq!(c1.memory_used, Some(Bytes::mib(3000)));
        assert!(c1.over_limit, "3000 MiB used of 2 GiB reserved");
        let c2 = snap.claim(ClaimId(2)).unwrap();
        assert_eq!(c2.memory_used, Some(Bytes::mib(100)));
        assert!(!c2.over_limit);
        let host = snap.host.as_ref().unwrap();
        assert_eq!((host.hostname.as_str(), host.cpu_pct), ("host", Some(12.5)));
        assert_eq!(snap.endpoint.telemetry_note, None);
    }

    #[test]
    fn device_figures_make_a_generation_when_they_move_as_the_screens_show_them() {
        let proc_root = tempfile::tempdir().unwrap();
        let feed = LiveFeed::new(config(proc_root.path()));
        let fake = FakeBackend::new(vec![gpu(0, Some(40), vec![proc(100, 3000)])]);
        let mut core = SamplerCore::new(Box::new(fake.clone()), None, SamplerConfig::default());
        let mut publish = |secs: u64| {
            let round = core.round(Timestamp(0).plus_secs(secs));
            feed.publish(LiveRound::gather(round, feed.config()));
            feed.generation()
        };
        assert_eq!(publish(1), 1, "the first round is news");
        // A new sample in the sparklines, and memory moved by less than a MiB: no news.
        fake.update(|gpus| {
            if let Some(m) = gpus[0].metrics.memory.as_mut() {
                m.used += Bytes(100_000);
            }
        });
        assert_eq!(publish(2), 1);
        fake.update(|gpus| gpus[0].metrics.power_mw = Some(70_400));
        assert_eq!(publish(3), 2, "a power draw appearing is news");
        fake.update(|gpus| gpus[0].metrics.power_mw = Some(70_300));
        assert_eq!(publish(4), 2, "the same watts");
        fake.update(|gpus| gpus[0].metrics.utilization_gpu_percent = Some(41));
        assert_eq!(publish(5), 3, "one percent more");
        fake.update(|gpus| gpus[0].processes[0].used_memory = Some(Bytes::mib(3001)));
        assert_eq!(
            publish(7),
            4,
            "a process's memory, by the MiB (processes are read every 2 s)"
        );
    }

    #[test]
    fn host_figures_alone_make_a_generation_at_most_every_minute_once_they_moved() {
        let proc_root = tempfile::tempdir().unwrap();
        let feed = LiveFeed::new(config(proc_root.path()));
        let no_gpu = FakeBackend::new(vec![]);
        let busy = |secs: u64, cpu: f32| {
            let mut t = round(&no_gpu, secs);
            if let Some(h) = t.host.as_mut() {
                h.cpu_percent = Some(cpu);
            }
            LiveRound::gather(t, feed.config())
        };
        feed.publish(busy(0, 10.0));
        assert_eq!(feed.generation(), 1, "the first round is news");
        feed.publish(busy(1, 11.0));
        feed.publish(busy(59, 12.0));
        assert_eq!(feed.generation(), 1, "host figures within the minute wait");
        feed.publish(busy(60, 13.0));
        assert_eq!(feed.generation(), 1, "figures that barely moved make none");
        feed.publish(busy(61, 45.0));
        assert_eq!(
            feed.generation(),
            2,
            "figures that moved show, after the minute"
        );
        let latest = feed.latest().unwrap();
        assert_eq!(
            latest.telemetry.host.as_ref().unwrap().cpu_percent,
            Some(45.0)
        );
        feed.publish(busy(200, 46.0));
        assert_eq!(feed.generation(), 2, "measured against the figures shown");
        feed.publish(busy(201, 30.0));
        assert_eq!(feed.generation(), 3);

        let gpu = FakeBackend::new(vec![gpu(0, Some(5), vec![])]);
        feed.publish(LiveRound::gather(round(&gpu, 202), feed.config()));
        assert_eq!(feed.generation(), 4, "a GPU appearing is news at once");
    }

    #[tokio::test]
    async fn an_allocated_claim_with_no_process_on_an_idle_device_turns_idle() {
        let proc_root = tempfile::tempdir().unwrap();
        let fake = FakeBackend::new(vec![gpu(0, Some(0), vec![])]);
        let engine = engine(vec![inventory(&round(&fake, 0), "host", Bytes(0))]);
        let id = claim(&engine, json!({"gpu_memory": "1GiB"})).await;
        let feed = LiveFeed::new(config(proc_root.path()));
        for secs in [0, 5, 10] {
            feed.publish(LiveRound::gather(round(&fake, secs), feed.config()));
            feed.track_idle(|| engine.snapshot());
        }
        assert!(
            feed.idle_claims().is_empty(),
            "10 s is not longer than 10 s"
        );
        feed.publish(LiveRound::gather(round(&fake, 11), feed.config()));
        feed.track_idle(|| engine.snapshot());
        let mut snap = engine.snapshot();
        feed.merge_into(&mut snap);
        assert!(snap.claim(id).unwrap().idle);
        assert_eq!(snap.claim(id).unwrap().memory_used, Some(Bytes(0)));
        // Activity clears it.
        fake.update(|g| g[0].metrics.utilization_gpu_percent = Some(80));
        feed.publish(LiveRound::gather(round(&fake, 12), feed.config()));
        feed.track_idle(|| engine.snapshot());
        assert!(feed.idle_claims().is_empty());
    }

    #[test]
    fn devices_match_by_uuid_or_local_index_and_the_reason_and_coordination_show() {
        let dir = tempfile::tempdir().unwrap();
        let coordination = dir.path().join("coord");
        // Our own pid lives; pid 0x7fff_fff0 does not.
        std::fs::write(
            &coordination,
            format!("0 {}\n1 {}\n", std::process::id(), 0x7fff_fff0u32),
        )
        .unwrap();
        let fake = FakeBackend::new(vec![gpu(0, Some(1), vec![]), gpu(1, Some(2), vec![])]);
        let mut node = inventory(&round(&fake, 1), "elsewhere", Bytes(0));
        // Device 0 keeps its UUID (matches on any node); device 1 has none and another node.
        node.devices[1].uuid = None;
        let engine = engine(vec![node]);
        let mut cfg = config(dir.path());
        cfg.coordination_file = Some(coordination.clone());
        let round = LiveRound::gather(round(&fake, 1), &cfg);
        let mut snap = engine.snapshot();
        merge(&mut snap, &round, "host", &BTreeSet::new());
        assert!(snap.nodes[0].devices[0].telemetry.is_some());
        assert!(snap.nodes[0].devices[1].telemetry.is_none());
        let flags: Vec<_> = snap
            .coordination
            .iter()
            .map(|r| (r.index, r.dead))
            .collect();
        assert_eq!(flags, vec![(0, false), (1, true)]);

        let down = FakeBackend::unavailable(Unavailable::DriverNotLoaded);
        let round = LiveRound::gather(round_of(&down), &cfg);
        let mut snap = engine.snapshot();
        merge(&mut snap, &round, "host", &BTreeSet::new());
        assert!(
            snap.endpoint
                .telemetry_note
                .as_deref()
                .unwrap()
                .contains("kernel driver is not loaded")
        );
    }

    fn round_of(fake: &FakeBackend) -> TelemetrySnapshot {
        round(fake, 2)
    }
}
