//! Simulated telemetry, for an inventory served on a machine without its GPUs
//! (`gpuboard serve --inventory FILE --simulate-telemetry[=SEED]`): made-up figures that
//! follow the claims placed, so a first try shows moving utilisation, memory, power and
//! temperature instead of n/a. Every device it fills says `simulated`, and the endpoint's
//! telemetry note says so, so it is never taken for NVML's.
//!
//! Pure: the figures are a function of the seed, the snapshot's time and the claims on
//! each device. Each claim's activity and memory use drift smoothly (values drawn at
//! knots `KNOT_MS` apart, eased between), an allocated GPU is busier the more of it is
//! claimed, an unallocated one idles at 0 to 3 %, and temperature, power and clocks follow
//! utilisation within the board's limits. The sparklines are the same function at the
//! earlier steps.

use std::collections::BTreeMap;

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::snapshot::{ClaimState, DeviceTelemetry, DeviceView, ProcessView, Snapshot};
use crate::units::{Bytes, UNITS_PER_DEVICE};

/// Time between two simulated samples.
pub const STEP_MS: u64 = 1_000;
/// Time between two knots of the drift: activity changes over about this long.
const KNOT_MS: u64 = 20_000;
/// Samples in a sparkline.
const HISTORY: u64 = 60;
/// The pid simulated processes start from (a claim's process is this plus its id's low
/// digits): far from the pids of a small machine, and never read from /proc.
const PID_BASE: u32 = 3_000_000;

/// The simulation: its seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Simulation {
    seed: u64,
}

/// One claim's share of one device, as the simulation needs it.
#[derive(Clone, Copy, Debug)]
struct Held {
    claim: ClaimId,
    memory: Bytes,
    /// Compute, as a fraction of the device.
    compute: f64,
}

impl Simulation {
    /// A simulation drawing from `seed`.
    pub fn new(seed: u64) -> Simulation {
        Simulation { seed }
    }

    /// What the endpoint's telemetry note says while it runs.
    pub fn note(self) -> String {
        format!(
            "SIMULATED telemetry (--simulate-telemetry, seed {}): made-up figures that follow \
             the claims; no GPU was read",
            self.seed
        )
    }

    /// Fills every device of `snap` that has no telemetry of its own with simulated
    /// telemetry at `snap.taken_at`, and each placed claim with the memory its simulated
    /// processes use. Devices a real backend read are left as they are.
    pub fn fill(self, snap: &mut Snapshot) {
        let now = snap.taken_at;
        let mut held: BTreeMap<(&str, u32), Vec<Held>> = BTreeMap::new();
        for c in snap.claims.iter().filter(|c| c.state == ClaimState::Placed) {
            let Some(node) = c.node.as_deref() else {
                continue;
            };
            for s in &c.shares {
                held.entry((node, s.device)).or_default().push(Held {
                    claim: c.id,
                    memory: s.memory,
                    compute: f64::from(s.compute.0) / f64::from(UNITS_PER_DEVICE),
                });
            }
        }
        let mut used: BTreeMap<ClaimId, Bytes> = BTreeMap::new();
        let mut filled: BTreeMap<(String, u32), DeviceTelemetry> = BTreeMap::new();
        for (n, d) in snap.devices().filter(|(_, d)| d.telemetry.is_none()) {
            let holders = held
                .get(&(n.name.as_str(), d.index))
                .map_or(&[][..], Vec::as_slice);
            let t = self.device(&n.name, d, holders, now);
            for p in &t.processes {
                if let (Some(id), Some(b)) = (p.claim, p.used_memory) {
                    *used.entry(id).or_default() += b;
                }
            }
            filled.insert((n.name.clone(), d.index), t);
        }
        for n in &mut snap.nodes {
            for d in &mut n.devices {
                if let Some(t) = filled.remove(&(n.name.clone(), d.index)) {
                    d.unclaimed_memory = Some(Bytes(0));
                    d.telemetry = Some(t);
                }
            }
        }
        for c in &mut snap.claims {
            if let Some(u) = used.get(&c.id) {
                c.memory_used = Some(*u);
                c.over_limit = false;
            }
        }
    }

    /// One device's telemetry at `now`.
    fn device(
        self,
        node: &str,
        d: &DeviceView,
        holders: &[Held],
        now: Timestamp,
    ) -> DeviceTelemetry {
        let key = fnv(&format!("{node}:{}", d.index));
        let step = now.0 / STEP_MS;
        let cap = d.memory_capacity;
        let limit = power_limit_mw(&d.model, cap.unwrap_or_default());
        let history: Vec<(u32, Vec<Bytes>)> = (step.saturating_sub(HISTORY - 1)..=step)
            .map(|s| self.load(key, holders, cap, s * STEP_MS))
            .collect();
        let (util, parts) = history.last().cloned().unwrap_or_default();
        let temp_wobble = (3.0 * self.drift(key ^ 0x7e, now.0)) as u32;
        let processes = holders
            .iter()
            .zip(&parts)
            .map(|(h, b)| ProcessView {
                pid: PID_BASE + u32::try_from(h.claim.0 % 1_000_000).unwrap_or(0),
                name: Some("simulated".to_string()),
                used_memory: cap.map(|_| *b),
                claim: Some(h.claim),
                owner: None,
            })
            .collect();
        let busy = util > 0;
        DeviceTelemetry {
            sampled_at: now,
            lost: false,
            pci_bus_id: None,
            memory_total: cap,
            memory_reserved: None,
            memory_used: cap.map(|_| parts.iter().fold(Bytes(0), |a, b| a + *b)),
            utilization_gpu: Some(util),
            utilization_memory: Some(util * 3 / 5),
            temperature_c: Some(30 + util * 45 / 100 + temp_wobble),
            // Idle at 15 % of the limit, 90 % of it at full load.
            // Whole watts, as boards report their draw.
            power_mw: Some((limit * 3 / 20 + (limit * 3 / 4) / 100 * util) / 1_000 * 1_000),
            power_limit_mw: Some(limit),
            clock_sm_mhz: Some(if busy { 1_100 + util * 3 } else { 210 }),
            clock_memory_mhz: Some(1_593),
            fan_pct: None,
            throttle: Vec::new(),
            ecc_uncorrected: None,
            mig_enabled: None,
            processes,
            history_utilization: history.iter().map(|(u, _)| *u).collect(),
            history_memory_used: history
                .iter()
                .filter_map(|(_, m)| cap.map(|_| m.iter().map(|b| b.0).sum()))
                .collect(),
            simulated: true,
        }
    }

    /// Utilisation (percent) and each holder's memory in use at `at`, within the card.
    fn load(self, key: u64, holders: &[Held], cap: Option<Bytes>, at: u64) -> (u32, Vec<Bytes>) {
        let cap = cap.unwrap_or_default();
        if holders.is_empty() {
            return ((3.0 * self.drift(key, at)) as u32, Vec::new());
        }
        let mut util = 0.0;
        let mut mem: Vec<Bytes> = Vec::with_capacity(holders.len());
        for h in holders {
            let c = h.claim.0;
            // A share of memory only stands for that part of the GPU's compute.
            let part = if h.compute > 0.0 {
                h.compute
            } else if cap.0 > 0 {
                (h.memory.0 as f64 / cap.0 as f64).max(0.1)
            } else {
                0.1
            };
            // The claim's activity, a little different on each of its GPUs.
            let busy = 0.8 * self.drift(c, at) + 0.2 * self.drift(c ^ key, at);
            util += part * (0.35 + 0.65 * busy) * 100.0;
            let reserved = if h.memory.0 > 0 {
                h.memory
            } else {
                Bytes((cap.0 as f64 * part.min(1.0) * 0.5) as u64)
            };
            let frac = 0.5 + 0.45 * self.drift(c ^ 0x006d_656d, at);
            mem.push(Bytes((reserved.0 as f64 * frac) as u64));
        }
        // Claims past the card squeeze each other, never the card.
        let total: u64 = mem.iter().map(|b| b.0).sum();
        if total > cap.0 && total > 0 {
            for b in &mut mem {
                b.0 = u64::try_from(u128::from(b.0) * u128::from(cap.0) / u128::from(total))
                    .unwrap_or(0);
            }
        }
        // Whole MiB, as a board reports its memory.
        for b in &mut mem {
            b.0 = b.0 >> 20 << 20;
        }
        ((util.round() as u32).min(100), mem)
    }

    /// A value in [0, 1) for `key` that drifts smoothly with time: drawn at knots
    /// `KNOT_MS` apart and eased between them.
    fn drift(self, key: u64, at: u64) -> f64 {
        let knot = at / KNOT_MS;
        let t = (at % KNOT_MS) as f64 / KNOT_MS as f64;
        let ease = t * t * (3.0 - 2.0 * t);
        let a = unit(mix(self.seed ^ mix(key) ^ mix(knot)));
        let b = unit(mix(self.seed ^ mix(key) ^ mix(knot + 1)));
        a + (b - a) * ease
    }
}

/// A board's power limit in milliwatts, by its model (the vendors' board powers), else by
/// its memory.
fn power_limit_mw(model: &str, memory: Bytes) -> u32 {
    let watts = [
        ("H200", 700),
        ("H100", 700),
        ("A100", 400),
        ("V100", 300),
        ("L40", 300),
        ("A10", 150),
        ("L4", 72),
        ("T4", 70),
    ]
    .iter()
    .find(|(m, _)| model.contains(m))
    .map_or(
        if memory >= Bytes::gib(40) { 400 } else { 250 },
        |(_, w)| *w,
    );
    watts * 1_000
}

/// splitmix64's finaliser: a well-mixed 64-bit value of `x`.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The top 53 bits of `x` as a value in [0, 1).
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// FNV-1a of `s`: a device's key from its node and index.
fn fnv(s: &str) -> u64 {
    ClaimId::of_name(s).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ClaimRequest;
    use crate::scheduler::{Scheduler, SchedulerConfig};

    const FLEET: &str = include_str!("../../assets/demo-fleet.toml");

    /// The demo fleet with a few claims placed, its snapshot at `at`.
    fn fleet(claims: &[serde_json::Value], at: Timestamp) -> Snapshot {
        let nodes = crate::inventory::parse(FLEET, "demo-fleet.toml").unwrap();
        let mut sched = Scheduler::new(SchedulerConfig::default(), nodes).unwrap();
        for c in claims {
            let req = ClaimRequest::from_json(c).unwrap();
            let _ = sched.submit(req, "test", Timestamp(1_000));
        }
        sched.snapshot(at)
    }

    fn filled(seed: u64, at: u64) -> Snapshot {
        let claims = [
            serde_json::json!({"project": "vision", "nvidia.com/gpu": 2}),
            serde_json::json!({"project": "nlp", "gpu_memory": "10Gi"}),
            serde_json::json!({"project": "speech", "num_gpus": 0.25}),
        ];
        let mut snap = fleet(&claims, Timestamp(at));
        Simulation::new(seed).fill(&mut snap);
        snap
    }

    fn utils(s: &Snapshot) -> Vec<u32> {
        s.devices()
            .map(|(_, d)| d.telemetry.as_ref().unwrap().utilization_gpu.unwrap())
            .collect()
    }

    #[test]
    fn every_device_is_filled_labelled_and_within_its_limits() {
        for at in (0..600).map(|s| 1_800_000_000_000 + s * 7_777) {
            let s = filled(7, at);
            for (n, d) in s.devices() {
                let t = d.telemetry.as_ref().unwrap();
                let name = format!("{}:{}", n.name, d.index);
                assert!(t.simulated, "{name}");
                assert_eq!(t.sampled_at, Timestamp(at));
                let cap = d.memory_capacity.unwrap();
                assert!(t.memory_used.unwrap() <= cap, "{name}");
                assert!(t.utilization_gpu.unwrap() <= 100, "{name}");
                assert!(t.utilization_memory.unwrap() <= 100, "{name}");
                assert!(t.power_mw.unwrap() <= t.power_limit_mw.unwrap(), "{name}");
                assert!((30..=80).contains(&t.temperature_c.unwrap()), "{name}");
                assert_eq!(t.history_utilization.len(), HISTORY as usize, "{name}");
                assert!(t.history_utilization.iter().all(|u| *u <= 100), "{name}");
                assert!(t.history_memory_used.iter().all(|m| *m <= cap.0), "{name}");
            }
            // Each placed claim's memory in use is its processes', within what it reserved.
            for c in s.claims.iter().filter(|c| c.state == ClaimState::Placed) {
                let used = c.memory_used.unwrap();
                assert!(used.0 > 0 && !c.over_limit, "claim {}", c.id);
            }
        }
    }

    #[test]
    fn the_same_seed_and_time_give_the_same_figures_and_time_moves_them() {
        let t0 = 1_800_000_000_000;
        assert_eq!(filled(7, t0), filled(7, t0));
        assert_ne!(utils(&filled(7, t0)), utils(&filled(8, t0)));
        // A minute on, the busy devices read differently, step by step.
        let later = filled(7, t0 + 60_000);
        assert_ne!(utils(&filled(7, t0)), utils(&later));
        let a = filled(7, t0);
        let one = filled(7, t0 + STEP_MS);
        let first = |s: &Snapshot| s.devices().next().unwrap().1.telemetry.clone().unwrap();
        // The sparkline moves on by one sample per step.
        assert_eq!(
            first(&a).history_utilization[1..],
            first(&one).history_utilization[..HISTORY as usize - 1]
        );
    }

    #[test]
    fn allocated_gpus_are_busier_than_free_ones() {
        for at in (0..50).map(|s| 1_800_000_000_000 + s * 13_000) {
            let s = filled(3, at);
            let mut busy = Vec::new();
            let mut free = Vec::new();
            for (_, d) in s.devices() {
                let u = d.telemetry.as_ref().unwrap().utilization_gpu.unwrap();
                if d.holders.is_empty() {
                    free.push(u);
                } else {
                    busy.push(u);
                }
            }
            assert!(!busy.is_empty() && !free.is_empty());
            assert!(free.iter().all(|u| *u <= 3), "{free:?}");
            // Two whole GPUs of a claim: each at least 35 % busy.
            assert!(busy.iter().filter(|u| **u >= 35).count() >= 2, "{busy:?}");
        }
    }

    #[test]
    fn a_device_read_by_a_backend_is_left_alone() {
        let mut snap = fleet(&[], Timestamp(1_800_000_000_000));
        let real = DeviceTelemetry {
            utilization_gpu: Some(42),
            ..DeviceTelemetry::default()
        };
        snap.nodes[0].devices[0].telemetry = Some(real.clone());
        Simulation::new(1).fill(&mut snap);
        assert_eq!(snap.nodes[0].devices[0].telemetry, Some(real));
        assert!(
            snap.nodes[0].devices[1]
                .telemetry
                .as_ref()
                .unwrap()
                .simulated
        );
    }

    /// A console reading the third form over a paced watch (a version every 5 s of a
    /// simulation stepping every second) keeps the endpoint's utilization sparkline sample
    /// for sample, and a memory sparkline of the figures it received: one every 5 s where
    /// the endpoint's has one a second, as long as the endpoint's.
    #[test]
    fn a_console_reading_figures_keeps_the_sparklines_from_what_it_receives() {
        let t0 = 1_800_000_000_000;
        let first = filled(7, t0);
        let (mut endpoint, mut console) = (first.clone(), first.clone());
        let mut received: Vec<Vec<u64>> = Vec::new();
        for k in 1..=30 {
            let next = filled(7, t0 + k * 5 * STEP_MS);
            let changes = crate::snapshot::diff_figures(&endpoint, &next);
            let json = serde_json::to_string(&changes).unwrap();
            assert!(!json.contains("\"op\":\"node\""), "{json}");
            crate::snapshot::apply(
                &mut console,
                &serde_json::from_str::<Vec<_>>(&json).unwrap(),
            );
            endpoint = next;
            received.push(
                endpoint
                    .devices()
                    .map(|(_, d)| d.telemetry.as_ref().unwrap().memory_used.unwrap().0)
                    .collect(),
            );
        }
        let kept = HISTORY as usize;
        for (i, ((_, c), (_, e))) in console.devices().zip(endpoint.devices()).enumerate() {
            let (c, e) = (c.telemetry.as_ref().unwrap(), e.telemetry.as_ref().unwrap());
            assert_eq!(c.history_utilization, e.history_utilization, "device {i}");
            assert_eq!(c.utilization_gpu, e.utilization_gpu, "device {i}");
            // The first snapshot's last 30 samples, then the 30 figures received.
            let (_, f) = first.devices().nth(i).unwrap();
            let mut memory =
                f.telemetry.as_ref().unwrap().history_memory_used[kept - 30..].to_vec();
            memory.extend(received.iter().map(|r| r[i]));
            assert_eq!(c.history_memory_used, memory, "device {i}");
            // Whole MiB and watts, so every figure is the endpoint's exactly.
            let mut same = c.clone();
            same.history_memory_used.clone_from(&e.history_memory_used);
            assert_eq!(&same, e, "device {i}");
        }
        assert_eq!(console.claims, endpoint.claims);
    }
}
