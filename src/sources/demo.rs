//! The demo source: the demo fleet (`assets/demo-fleet.toml`) in an in-process scheduler,
//! with a synthetic workload. Projects claim and release slices in every request form,
//! some wait as pending, some use more memory than they reserved, some sit idle, one
//! process uses memory without a claim, and the telemetry moves.
//!
//! Deterministic: the workload advances in fixed steps of simulated time from the first
//! fetch, drawing from a seeded RNG, so the same seed and the same clock readings give the
//! same snapshots.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

use super::{Action, Failure, Fetched, Outcome, Source, apply, plan_on};
use crate::clock::{Clock, Timestamp};
use crate::ids::ClaimId;
use crate::inventory;
use crate::placement::{Allocation, DeviceSpec, NodeSpec, Policy};
use crate::request::ClaimRequest;
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::snapshot::{DeviceTelemetry, ProcessView, Snapshot};
use crate::units::Bytes;

/// The demo fleet file, embedded.
pub const DEMO_FLEET: &str = include_str!("../../assets/demo-fleet.toml");
/// Simulated time between workload steps.
pub const STEP_MS: u64 = 1_000;
/// Samples kept per device for sparklines.
pub const HISTORY: usize = 120;
/// Steps caught up at most per fetch; beyond that the workload skips ahead.
const MAX_CATCH_UP: u64 = 600;
const PROJECTS: [&str; 5] = ["vision", "nlp", "speech", "robotics", "batch"];

/// How a claim's processes behave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Profile {
    /// Memory used as a percentage of what it reserved (above 100: over its limit).
    use_pct: u64,
    /// GPU utilization it drives on its devices, percent of its compute share (0: idle).
    util: u32,
}

/// The simulated world behind the demo source.
pub struct DemoWorld {
    sched: Scheduler,
    rng: StdRng,
    last_step: Option<Timestamp>,
    /// Claims the workload made (it releases only its own).
    workload: Vec<ClaimId>,
    profiles: BTreeMap<ClaimId, Profile>,
    /// Per (node, device position): utilization and memory history.
    history: BTreeMap<(usize, usize), (VecDeque<u32>, VecDeque<u64>)>,
    /// A process using memory on no claim: (node, device position, bytes).
    rogue: Option<(usize, usize, Bytes)>,
    target_claims: usize,
    initial_claims: usize,
    quiet: bool,
}

impl DemoWorld {
    /// The demo fleet with the default workload.
    pub fn new(seed: u64) -> anyhow::Result<DemoWorld> {
        let nodes = inventory::parse(DEMO_FLEET, "demo-fleet.toml")?;
        DemoWorld::with_nodes(nodes, seed, 60, 45, false)
    }

    /// The demo fleet with a frozen workload: no claims come or go and only the first
    /// device's telemetry moves (for measuring what one changing device costs).
    pub fn quiet(seed: u64) -> anyhow::Result<DemoWorld> {
        let nodes = inventory::parse(DEMO_FLEET, "demo-fleet.toml")?;
        DemoWorld::with_nodes(nodes, seed, 60, 45, true)
    }

    /// A synthetic fleet of `nodes` x `gpus` A100-80GB devices holding about `claims`
    /// claims (for benchmarks at scale).
    pub fn scaled(nodes: usize, gpus: u32, claims: usize, seed: u64) -> anyhow::Result<DemoWorld> {
        let specs = (0..nodes)
            .map(|n| NodeSpec {
                name: format!("node-{n:04}"),
                devices: (0..gpus)
                    .map(|i| DeviceSpec {
                        index: i,
                        model: "NVIDIA A100-SXM4-80GB".to_string(),
                        uuid: None,
                        memory: Some(Bytes::gib(80)),
                        link_group: None,
                    })
                    .collect(),
                cpus: None,
            })
            .collect();
        DemoWorld::with_nodes(specs, seed, claims, claims, false)
    }

    fn with_nodes(
        nodes: Vec<NodeSpec>,
        seed: u64,
        target_claims: usize,
        initial_claims: usize,
        quiet: bool,
    ) -> anyhow::Result<DemoWorld> {
        let config = SchedulerConfig {
            name: "demo".to_string(),
            kind: "demo".to_string(),
            policy: Policy::Binpack,
            ..SchedulerConfig::default()
        };
        Ok(DemoWorld {
            sched: Scheduler::new(config, nodes)?,
            rng: StdRng::seed_from_u64(seed),
            last_step: None,
            workload: Vec::new(),
            profiles: BTreeMap::new(),
            history: BTreeMap::new(),
            rogue: None,
            target_claims,
            initial_claims,
            quiet,
        })
    }

    /// The scheduler, for actions.
    pub fn scheduler_mut(&mut self) -> &mut Scheduler {
        &mut self.sched
    }

    /// Advances the workload to `now` in fixed steps; the first call fills the fleet.
    pub fn advance(&mut self, now: Timestamp) {
        let Some(mut last) = self.last_step else {
            self.populate(now);
            self.sample();
            self.last_step = Some(now);
            return;
        };
        if now < last {
            // The clock went back: resume from here rather than stall.
            self.last_step = Some(now);
            return;
        }
        let due = now.millis_since(last) / STEP_MS;
        if due > MAX_CATCH_UP {
            last = Timestamp(now.0 - MAX_CATCH_UP * STEP_MS);
        }
        while last.plus_millis(STEP_MS) <= now {
            last = last.plus_millis(STEP_MS);
            self.step(last);
        }
        self.last_step = Some(last);
    }

    fn populate(&mut self, now: Timestamp) {
        // Some random requests are refused (they never fit); stop trying after twice as many.
        let mut tries = 0;
        while self.workload.len() < self.initial_claims && tries < self.initial_claims * 2 {
            self.submit_random(now);
            tries += 1;
        }
        // One process holds memory on no claim: the "rogue" use operators must see.
        let nodes = self.sched.fleet().nodes();
        if let Some(node) = nodes.len().checked_sub(1) {
            let bytes = Bytes::gib(3);
            self.rogue = Some((node, 0, bytes));
        }
        self.sched.take_changes();
    }

    fn step(&mut self, at: Timestamp) {
        if !self.quiet {
            let count = self.workload.len();
            if self.rng.random_bool(0.6) {
                self.submit_random(at);
            }
            let p_release = (count as f64 / self.target_claims.max(1) as f64 * 0.6).min(1.0);
            if count > 0 && self.rng.random_bool(p_release) {
                let k = self.rng.random_range(0..count);
                let id = self.workload.swap_remove(k);
                self.sched.release(id, "demo-workload", at);
                self.profiles.remove(&id);
            }
            self.sched.tick(at, &|_| true);
        }
        self.sched.take_changes();
        self.sample();
    }

    fn random_request(&mut self) -> Value {
        let r = &mut self.rng;
        let project = PROJECTS[r.random_range(0..PROJECTS.len())];
        let holder = format!(
            "{}-{}",
            ["job", "user", "nb"][r.random_range(0..3)],
            r.random_range(1..60)
        );
        let mut req = match r.random_range(0..100) {
            0..35 => {
                let gib = [4, 8, 10, 16, 20, 24, 30][r.random_range(0..7)];
                json!({"gpu_memory": format!("{gib}Gi")})
            }
            35..60 => {
                let f = [0.1, 0.25, 0.5][r.random_range(0..3)];
                json!({ "num_gpus": f })
            }
            60..75 => {
                let ratio = [25, 50][r.random_range(0..2)];
                json!({"gpu-memory-ratio": ratio, "gpu-core": ratio, "gpu.shared": 1})
            }
            75..88 => json!({"gpu-memory": "20Gi", "gpu.shared": 2}),
            _ => {
                let k: u32 = r.random_range(1..3);
                json!({ "nvidia.com/gpu": k })
            }
        };
        if let Value::Object(m) = &mut req {
            m.insert("project".into(), json!(project));
            m.insert("holder".into(), json!(holder));
            if r.random_bool(0.3) {
                m.insert("wait".into(), json!(true));
            }
            if r.random_bool(0.1) {
                m.insert("accelerator_type".into(), json!("A100"));
            }
            if r.random_bool(0.2) {
                m.insert("ttl".into(), json!(3600));
            }
        }
        req
    }

    fn submit_random(&mut self, at: Timestamp) {
        let wire = self.random_request();
        let Ok(req) = crate::request::ClaimRequest::from_json(&wire) else {
            return;
        };
        if let crate::scheduler::Submitted::Placed(c) | crate::scheduler::Submitted::Pending(c) =
            self.sched.submit(req, "demo-workload", at)
        {
            let profile = self.random_profile();
            self.profiles.insert(c.id, profile);
            self.workload.push(c.id);
        }
    }

    fn random_profile(&mut self) -> Profile {
        let r = &mut self.rng;
        match r.random_range(0..100) {
            0..10 => Profile {
                use_pct: r.random_range(105..130),
                util: r.random_range(40..95),
            },
            10..22 => Profile {
                use_pct: r.random_range(5..30),
                util: 0,
            },
            _ => Profile {
                use_pct: r.random_range(30..95),
                util: r.random_range(20..100),
            },
        }
    }

    /// A claim the workload did not make (an operator's) gets a steady, modest profile.
    fn profile(&self, id: ClaimId) -> Profile {
        self.profiles.get(&id).copied().unwrap_or(Profile {
            use_pct: 60,
            util: 40,
        })
    }

    /// One telemetry sample per device, into the history rings.
    fn sample(&mut self) {
        let mut samples = Vec::new();
        for (ni, node) in self.sched.fleet().nodes().iter().enumerate() {
            for (di, dev) in node.devices.iter().enumerate() {
                if self.quiet && !(ni == 0 && di == 0) && self.history.contains_key(&(ni, di)) {
                    continue;
                }
                let cap = dev.spec.memory.unwrap_or_default();
                let (mut util, used) = self.device_load(ni, di, &dev.holders, &node.name);
                // A GPU cannot use more memory than it has: claims over their limit
                // squeeze the others, never the card.
                let used = used.min(cap);
                if self.quiet && ni == 0 && di == 0 {
                    util = self.rng.random_range(20..80);
                }
                let jitter = if util > 0 {
                    self.rng.random_range(0..9)
                } else {
                    0
                };
                samples.push(((ni, di), (util + jitter).saturating_sub(4).min(100), used));
            }
        }
        for (key, util, used) in samples {
            let (u, m) = self.history.entry(key).or_default();
            u.push_back(util);
            m.push_back(used.0);
            while u.len() > HISTORY {
                u.pop_front();
            }
            while m.len() > HISTORY {
                m.pop_front();
            }
        }
    }

    /// Utilization and memory used on one device from the claims holding it.
    fn device_load(&self, ni: usize, di: usize, holders: &[ClaimId], node: &str) -> (u32, Bytes) {
        let mut util = 0u32;
        let mut used = Bytes(0);
        for id in holders {
            let p = self.profile(*id);
            if let Some(share) = self.share_on(*id, node, di) {
                used += share.0.mul_div_ceil(p.use_pct, 100);
                let frac = u64::from(share.1.max(1000)) * u64::from(p.util) / 10_000;
                util += u32::try_from(frac).unwrap_or(100);
            }
        }
        if let Some((rn, rd, bytes)) = self.rogue
            && rn == ni
            && rd == di
        {
            used += bytes;
            util += 5;
        }
        (util.min(100), used)
    }

    fn share_on(&self, id: ClaimId, node: &str, pos: usize) -> Option<(Bytes, u32)> {
        let alloc = self.sched.fleet().allocation(id)?;
        if alloc.node != node {
            return None;
        }
        let index = self.sched.fleet().node(node)?.devices.get(pos)?.spec.index;
        alloc
            .shares
            .iter()
            .find(|s| s.device == index)
            .map(|s| (s.memory, s.compute.0))
    }

    /// The scheduler's snapshot with the synthetic telemetry and attribution added.
    pub fn snapshot(&self, now: Timestamp) -> Snapshot {
        let mut snap = self.sched.snapshot(now);
        let mut claim_used: BTreeMap<ClaimId, Bytes> = BTreeMap::new();
        for (ni, node) in snap.nodes.iter_mut().enumerate() {
            for (di, dev) in node.devices.iter_mut().enumerate() {
                let Some((uh, mh)) = self.history.get(&(ni, di)) else {
                    continue;
                };
                let util = uh.back().copied().unwrap_or(0);
                let used = Bytes(mh.back().copied().unwrap_or(0));
                let mut processes: Vec<ProcessView> = Vec::new();
                let rogue = self
                    .rogue
                    .filter(|(rn, rd, _)| *rn == ni && *rd == di)
                    .map(|(_, _, b)| b);
                let wants: Vec<Option<Bytes>> = dev
                    .holders
                    .iter()
                    .map(|id| {
                        snap_share(&snap.claims, *id, dev.index)
                            .map(|b| b.mul_div_ceil(self.profile(*id).use_pct, 100))
                    })
                    .collect();
                // What the processes want, scaled down to fit the card when they want
                // more than it has (as `sample` capped the device's total).
                let cap = dev.memory_capacity.unwrap_or_default();
                let wanted: u64 =
                    wants.iter().flatten().map(|b| b.0).sum::<u64>() + rogue.map_or(0, |b| b.0);
                let fit = |b: Bytes| {
                    if wanted > cap.0 {
                        // Rounded down, so the scaled parts never add up past the card.
                        let part = u128::from(b.0) * u128::from(cap.0) / u128::from(wanted);
                        Bytes(u64::try_from(part).unwrap_or(cap.0))
                    } else {
                        b
                    }
                };
                for (id, mem) in dev.holders.iter().zip(wants) {
                    let mem = mem.map(fit);
                    if let Some(m) = mem {
                        *claim_used.entry(*id).or_default() += m;
                    }
                    processes.push(ProcessView {
                        pid: 20_000 + u32::try_from(id.0 % 40_000).unwrap_or(0),
                        name: Some("python3".to_string()),
                        used_memory: mem,
                        claim: Some(*id),
                        owner: None,
                    });
                }
                let rogue = rogue.map(fit);
                if let Some(b) = rogue {
                    processes.push(ProcessView {
                        pid: 4242,
                        name: Some("stray-notebook".to_string()),
                        used_memory: Some(b),
                        claim: None,
                        owner: None,
                    });
                }
                dev.unclaimed_memory = Some(rogue.unwrap_or_default());
                let big = cap >= Bytes::gib(40);
                dev.telemetry = Some(DeviceTelemetry {
                    sampled_at: now,
                    lost: false,
                    pci_bus_id: Some(format!("0000:{:02x}:00.0", 0x10 + di * 0x10)),
                    memory_total: Some(cap + Bytes::mib(512)),
                    memory_reserved: Some(Bytes::mib(512)),
                    memory_used: Some(used),
                    utilization_gpu: Some(util),
                    utilization_memory: Some(util * 2 / 3),
                    temperature_c: Some(32 + util / 2),
                    power_mw: Some(if big { 60_000 } else { 25_000 } + util * 3_000),
                    power_limit_mw: Some(if big { 400_000 } else { 300_000 }),
                    clock_sm_mhz: Some(if util > 0 { 1410 } else { 210 }),
                    clock_memory_mhz: Some(1593),
                    // Data-centre boards have no fan to report.
                    fan_pct: if big { None } else { Some(30 + util / 3) },
                    throttle: Vec::new(),
                    ecc_uncorrected: Some(0),
                    mig_enabled: Some(false),
                    processes,
                    history_utilization: uh.iter().copied().collect(),
                    history_memory_used: mh.iter().copied().collect(),
                    simulated: false,
                });
            }
        }
        for c in &mut snap.claims {
            if let Some(used) = claim_used.get(&c.id) {
                c.memory_used = Some(*used);
                c.over_limit = *used > c.memory_reserved;
                c.idle = self.profile(c.id).util == 0;
            }
        }
        snap
    }
}

fn snap_share(claims: &[crate::snapshot::ClaimView], id: ClaimId, index: u32) -> Option<Bytes> {
    // Claims are in id order (the scheduler keeps them in a BTreeMap).
    let c = claims
        .binary_search_by_key(&id, |c| c.id)
        .ok()
        .and_then(|i| claims.get(i))?;
    c.shares
        .iter()
        .find(|s| s.device == index)
        .map(|s| s.memory)
}

/// The demo source.
pub struct Demo {
    world: Arc<Mutex<DemoWorld>>,
    clock: Arc<dyn Clock>,
}

impl Demo {
    /// A demo source over a world, reading time from `clock`.
    pub fn new(world: DemoWorld, clock: Arc<dyn Clock>) -> Demo {
        Demo {
            world: Arc::new(Mutex::new(world)),
            clock,
        }
    }
}

fn poisoned<T>(_: T) -> Failure {
    Failure::Refused("demo state poisoned".to_string())
}

impl Source for Demo {
    fn name(&self) -> &'static str {
        "demo"
    }
    fn kind(&self) -> super::SourceKind {
        super::SourceKind::Demo
    }
    fn can_act(&self) -> bool {
        true
    }
    fn fetch(&self) -> BoxFuture<'static, Result<Fetched, Failure>> {
        let world = Arc::clone(&self.world);
        let now = self.clock.now();
        Box::pin(async move {
            let mut w = world.lock().map_err(poisoned)?;
            w.advance(now);
            Ok(w.snapshot(now).into())
        })
    }
    fn plan(&self, request: ClaimRequest) -> BoxFuture<'static, Result<Allocation, Failure>> {
        let world = Arc::clone(&self.world);
        Box::pin(async move {
            let mut w = world.lock().map_err(poisoned)?;
            plan_on(w.scheduler_mut(), &request)
        })
    }
    /// Worked out on a copy of the demo's scheduler by the endpoint's own preview, its
    /// holders ending at their declared durations and leases (the demo records no history).
    fn preview(
        &self,
        action: crate::wire::forecast::PreviewAction,
    ) -> Option<BoxFuture<'static, Result<crate::wire::forecast::Preview, Failure>>> {
        let world = Arc::clone(&self.world);
        let now = self.clock.now();
        Some(Box::pin(async move {
            let mut w = world.lock().map_err(poisoned)?;
            let holds = crate::forecast::HoldTimes::default();
            Ok(crate::forecast::preview::preview(
                w.scheduler_mut(),
                &action,
                &holds,
                "console",
                now,
            ))
        }))
    }
    fn act(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>> {
        let world = Arc::clone(&self.world);
        let now = self.clock.now();
        Box::pin(async move {
            let mut w = world.lock().map_err(poisoned)?;
            let out = apply(w.scheduler_mut(), &action, "console", now);
            w.scheduler_mut().take_changes();
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_and_clock_give_the_same_world() {
        let run = |seed| {
            let mut w = DemoWorld::new(seed).unwrap();
            let t0 = Timestamp(1_700_000_000_000);
            for k in 0..30 {
                w.advance(t0.plus_secs(k * 3));
            }
            w.snapshot(t0.plus_secs(90))
        };
        let (a, b, c) = (run(7), run(7), run(8));
        assert_eq!(a, b);
        assert_ne!(a.claims, c.claims);
        assert!(a.claims.iter().any(|c| c.over_limit), "some over limit");
        assert!(a.claims.iter().any(|c| c.idle), "some idle");
        assert!(
            a.devices()
                .any(|(_, d)| d.unclaimed_memory.is_some_and(|b| b.0 > 0)),
            "one device has unclaimed use"
        );
        assert!(
            a.devices()
                .all(|(_, d)| d.memory_allocated <= d.memory_capacity.unwrap_or_default()),
            "never over-committed"
        );
    }

    #[test]
    fn the_demo_never_uses_more_memory_than_a_gpu_has() {
        for seed in [1, 42, 7] {
            let mut w = DemoWorld::new(seed).unwrap();
            let t0 = Timestamp(1_700_000_000_000);
            let mut over_limit_seen = false;
            for k in 0..300 {
                let now = t0.plus_secs(k);
                w.advance(now);
                if k % 15 != 0 {
                    continue;
                }
                let snap = w.snapshot(now);
                over_limit_seen |= snap.claims.iter().any(|c| c.over_limit);
                for n in &snap.nodes {
                    for d in &n.devices {
                        let (Some(cap), Some(t)) = (d.memory_capacity, &d.telemetry) else {
                            continue;
                        };
                        let used = t.memory_used.unwrap_or_default();
                        assert!(
                            used <= cap,
                            "seed {seed} {}:{}: {used} of {cap}",
                            n.name,
                            d.index
                        );
                        let procs: u64 = t
                            .processes
                            .iter()
                            .filter_map(|p| p.used_memory)
                            .map(|b| b.0)
                            .sum();
                        assert!(
                            procs <= cap.0,
                            "seed {seed} {}:{}: processes {procs} of {cap}",
                            n.name,
                            d.index
                        );
                    }
                }
            }
            // Over-limit claims still happen: they squeeze their neighbours, not the card.
            assert!(over_limit_seen, "seed {seed}");
        }
    }

    #[test]
    fn pending_claims_appear_under_load() {
        let mut w = DemoWorld::new(3).unwrap();
        let t0 = Timestamp(1_700_000_000_000);
        let mut seen_pending = false;
        for k in 0..400 {
            w.advance(t0.plus_secs(k));
            if k % 20 == 0 {
                seen_pending |= w
                    .snapshot(t0.plus_secs(k))
                    .claims
                    .iter()
                    .any(|c| c.state == crate::snapshot::ClaimState::Pending);
            }
        }
        assert!(seen_pending);
    }

    #[test]
    fn quiet_world_changes_only_the_first_device() {
        let mut w = DemoWorld::quiet(1).unwrap();
        let t0 = Timestamp(1_700_000_000_000);
        w.advance(t0);
        let a = w.snapshot(t0);
        w.advance(t0.plus_secs(30));
        let b = w.snapshot(t0);
        assert_eq!(a.claims, b.claims);
        let changed: Vec<_> = a
            .devices()
            .zip(b.devices())
            .filter(|((_, x), (_, y))| x != y)
            .map(|((n, x), _)| (n.name.clone(), x.index))
            .collect();
        assert!(changed.len() <= 1, "{changed:?}");
    }
}
