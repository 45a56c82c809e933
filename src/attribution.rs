//! Who is using what on a GPU: each process seen on a device is matched to the claim
//! holding that device (by the claim id `gpuboard run` put in its environment, by its
//! pid, or by an ancestor's pid), then per claim memory used is set against memory
//! reserved, per device the memory no claim accounts for is "unclaimed", and claims whose
//! devices sit idle for long are flagged. Pure functions: the caller brings the readings
//! and the time.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::ids::ClaimId;
use crate::telemetry::ProcessSample;
use crate::telemetry::procfs::ProcessOrigin;
use crate::units::Bytes;

/// A claim's hold on one device (a claim over several devices has one per device).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The claim.
    pub claim_id: ClaimId,
    /// Local device index.
    pub device: u32,
    /// Memory the claim reserved on this device.
    pub reserved: Bytes,
    /// Pids registered with the claim (e.g. the `gpuboard run` child, a Flink worker).
    pub pids: Vec<u32>,
}

/// What one device shows now.
#[derive(Clone, Copy, Debug)]
pub struct DeviceObservation<'a> {
    /// Local device index.
    pub device: u32,
    /// Processes NVML listed on it.
    pub processes: &'a [ProcessSample],
    /// GPU utilization percent, when known.
    pub utilization_percent: Option<u32>,
}

/// A claim's use of one device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimUsage {
    /// The claim.
    pub claim_id: ClaimId,
    /// Local device index.
    pub device: u32,
    /// Memory reserved on the device.
    pub reserved: Bytes,
    /// Memory its processes use there (those whose use NVML reported).
    pub used: Bytes,
    /// True when some of its processes' memory is unknown, so `used` is a lower bound.
    pub used_incomplete: bool,
    /// Its processes on the device.
    pub pids: Vec<u32>,
    /// Uses more than it reserved.
    pub over_limit: bool,
}

/// Memory on a device that no claim accounts for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAttribution {
    /// Local device index.
    pub device: u32,
    /// Memory used by processes no claim holding this device accounts for.
    pub unclaimed: Bytes,
    /// Those processes.
    pub unclaimed_pids: Vec<u32>,
}

/// The outcome of matching one round of processes to claims.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribution {
    /// One entry per holding, in claim then device order.
    pub claims: Vec<ClaimUsage>,
    /// One entry per observed device.
    pub devices: Vec<DeviceAttribution>,
}

impl Attribution {
    /// The usage of `claim_id` on `device`, if it holds it.
    pub fn claim(&self, claim_id: ClaimId, device: u32) -> Option<&ClaimUsage> {
        self.claims
            .iter()
            .find(|c| c.claim_id == claim_id && c.device == device)
    }

    /// The unclaimed use on `device`, if it was observed.
    pub fn device(&self, device: u32) -> Option<&DeviceAttribution> {
        self.devices.iter().find(|d| d.device == device)
    }
}

/// Which of the holdings on one device a process belongs to.
fn owner<'h>(
    pid: u32,
    origin: Option<&ProcessOrigin>,
    on_device: &[&'h Holding],
) -> Option<&'h Holding> {
    if let Some(claim) = origin.and_then(|o| o.claim_id) {
        // The environment names the claim: only that claim can own it here.
        return on_device.iter().copied().find(|h| h.claim_id == claim);
    }
    if let Some(h) = on_device.iter().copied().find(|h| h.pids.contains(&pid)) {
        return Some(h);
    }
    // The nearest registered ancestor wins (a worker under a registered launcher).
    origin?
        .ancestors
        .iter()
        .find_map(|a| on_device.iter().copied().find(|h| h.pids.contains(a)))
}

/// Matches processes to claims. A process whose environment names a claim that does not
/// hold its device counts as unclaimed use there: it runs where it did not reserve.
pub fn attribute(
    devices: &[DeviceObservation<'_>],
    origins: &[ProcessOrigin],
    holdings: &[Holding],
) -> Attribution {
    let origins: HashMap<u32, &ProcessOrigin> = origins.iter().map(|o| (o.pid, o)).collect();
    let mut usage: BTreeMap<(ClaimId, u32), ClaimUsage> = holdings
        .iter()
        .map(|h| {
            (
                (h.claim_id, h.device),
                ClaimUsage {
                    claim_id: h.claim_id,
                    device: h.device,
                    reserved: h.reserved,
                    used: Bytes(0),
                    used_incomplete: false,
                    pids: Vec::new(),
                    over_limit: false,
                },
            )
        })
        .collect();
    let mut per_device = Vec::with_capacity(devices.len());
    for observed in devices {
        let on_device: Vec<&Holding> = holdings
            .iter()
            .filter(|h| h.device == observed.device)
            .collect();
        let mut device = DeviceAttribution {
            device: observed.device,
            ..DeviceAttribution::default()
        };
        for process in observed.processes {
            if let Some(h) = owner(process.pid, origins.get(&process.pid).copied(), &on_device) {
                if let Some(u) = usage.get_mut(&(h.claim_id, h.device)) {
                    match process.used_memory {
                        Some(bytes) => u.used += bytes,
                        None => u.used_incomplete = true,
                    }
                    u.pids.push(process.pid);
                }
            } else {
                device.unclaimed += process.used_memory.unwrap_or_default();
                device.unclaimed_pids.push(process.pid);
            }
        }
        per_device.push(device);
    }
    let claims = usage
        .into_values()
        .map(|mut u| {
            u.over_limit = u.used > u.reserved;
            u
        })
        .collect();
    Attribution {
        claims,
        devices: per_device,
    }
}

/// When a claim counts as allocated-but-idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdlePolicy {
    /// How long without activity before it is flagged (milliseconds).
    pub threshold_ms: u64,
    /// Utilization at or below this is "about zero".
    pub max_utilization_percent: u32,
}

impl Default for IdlePolicy {
    fn default() -> Self {
        IdlePolicy {
            threshold_ms: 30 * 60 * 1000,
            max_utilization_percent: 1,
        }
    }
}

/// A claim flagged as allocated but idle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleClaim {
    /// The claim.
    pub claim_id: ClaimId,
    /// Since when it has been idle (the caller's clock, milliseconds).
    pub idle_since_ms: u64,
}

/// Remembers since when each claim has been idle, across rounds.
#[derive(Clone, Debug, Default)]
pub struct IdleTracker {
    policy: IdlePolicy,
    idle_since: HashMap<ClaimId, u64>,
}

impl IdleTracker {
    /// A tracker with this policy.
    pub fn new(policy: IdlePolicy) -> IdleTracker {
        IdleTracker {
            policy,
            idle_since: HashMap::new(),
        }
    }

    /// Takes one round at `now_ms` and returns the claims idle for longer than the
    /// threshold. A claim is idle in a round when none of its devices shows one of its
    /// processes and every one of its devices is at about zero utilization (unknown
    /// utilization counts as zero only when there is no process at all).
    pub fn update(
        &mut self,
        now_ms: u64,
        attribution: &Attribution,
        devices: &[DeviceObservation<'_>],
    ) -> Vec<IdleClaim> {
        let mut idle_now: BTreeMap<ClaimId, bool> = BTreeMap::new();
        for usage in &attribution.claims {
            let busy_device = devices
                .iter()
                .find(|d| d.device == usage.device)
                .and_then(|d| d.utilization_percent)
                .is_some_and(|u| u > self.policy.max_utilization_percent);
            let idle = usage.pids.is_empty() && !busy_device;
            let entry = idle_now.entry(usage.claim_id).or_insert(true);
            *entry &= idle;
        }
        self.idle_since
            .retain(|id, _| idle_now.get(id) == Some(&true));
        let mut flagged = Vec::new();
        for (claim_id, idle) in idle_now {
            if !idle {
                continue;
            }
            let since = *self.idle_since.entry(claim_id).or_insert(now_ms);
            if now_ms.saturating_sub(since) > self.policy.threshold_ms {
                flagged.push(IdleClaim {
                    claim_id,
                    idle_since_ms: since,
                });
            }
        }
        flagged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32, mib: Option<u64>) -> ProcessSample {
        ProcessSample {
            pid,
            used_memory: mib.map(Bytes::mib),
            name: None,
            owner: None,
        }
    }

    fn holding(claim_id: u64, device: u32, reserved_mib: u64, pids: &[u32]) -> Holding {
        Holding {
            claim_id: ClaimId(claim_id),
            device,
            reserved: Bytes::mib(reserved_mib),
            pids: pids.to_vec(),
        }
    }

    fn obs(device: u32, processes: &[ProcessSample], util: Option<u32>) -> DeviceObservation<'_> {
        DeviceObservation {
            device,
            processes,
            utilization_percent: util,
        }
    }

    #[test]
    fn matches_by_pid_ancestor_and_environment() {
        let procs = [p(100, Some(500)), p(201, Some(300)), p(300, Some(100))];
        let origins = [
            ProcessOrigin {
                pid: 201,
                ancestors: vec![200, 1],
                claim_id: None,
            },
            ProcessOrigin {
                pid: 300,
                ancestors: vec![1],
                claim_id: Some(ClaimId(3)),
            },
        ];
        let holdings = [
            holding(1, 0, 1024, &[100]),
            holding(2, 0, 1024, &[200]),
            holding(3, 0, 1024, &[]),
        ];
        let a = attribute(&[obs(0, &procs, Some(50))], &origins, &holdings);
        assert_eq!(
            a.claim(ClaimId(1), 0).map(|c| c.used),
            Some(Bytes::mib(500))
        );
        assert_eq!(
            a.claim(ClaimId(2), 0).map(|c| c.pids.clone()),
            Some(vec![201])
        );
        assert_eq!(
            a.claim(ClaimId(3), 0).map(|c| c.used),
            Some(Bytes::mib(100))
        );
        assert_eq!(a.device(0).map(|d| d.unclaimed), Some(Bytes(0)));
    }

    #[test]
    fn over_limit_only_when_use_exceeds_the_reservation() {
        let procs = [p(10, Some(600)), p(11, Some(500)), p(20, Some(1024))];
        let holdings = [holding(1, 0, 1024, &[10, 11]), holding(2, 0, 1024, &[20])];
        let a = attribute(&[obs(0, &procs, None)], &[], &holdings);
        let one = a.claim(ClaimId(1), 0).expect("claim 1");
        assert_eq!(one.used, Bytes::mib(1100));
        assert!(one.over_limit);
        let two = a.claim(ClaimId(2), 0).expect("claim 2");
        assert!(!two.over_limit, "exactly at the limit is within it");
    }

    #[test]
    fn processes_of_no_claim_are_unclaimed_use_per_device() {
        let dev0 = [p(10, Some(100)), p(66, Some(2048)), p(67, None)];
        let dev1 = [p(10, Some(100))];
        // Claim 1 holds device 0 only: its process on device 1 is rogue use there.
        let holdings = [holding(1, 0, 1024, &[10])];
        let a = attribute(&[obs(0, &dev0, None), obs(1, &dev1, None)], &[], &holdings);
        let d0 = a.device(0).expect("device 0");
        assert_eq!(d0.unclaimed, Bytes::mib(2048));
        assert_eq!(d0.unclaimed_pids, vec![66, 67]);
        assert_eq!(a.device(1).map(|d| d.unclaimed), Some(Bytes::mib(100)));
        assert_eq!(
            a.claim(ClaimId(1), 0).map(|c| c.used),
            Some(Bytes::mib(100))
        );
    }

    #[test]
    fn an_environment_naming_another_claim_is_not_matched_by_pid() {
        let procs = [p(10, Some(100))];
        let origins = [ProcessOrigin {
            pid: 10,
            ancestors: vec![],
            claim_id: Some(ClaimId(9)),
        }];
        let holdings = [holding(1, 0, 1024, &[10])];
        let a = attribute(&[obs(0, &procs, None)], &origins, &holdings);
        assert_eq!(
            a.device(0).map(|d| d.unclaimed_pids.clone()),
            Some(vec![10])
        );
        assert!(a.claim(ClaimId(1), 0).is_some_and(|c| c.pids.is_empty()));
    }

    #[test]
    fn unknown_memory_marks_the_sum_incomplete_and_never_over_limit_by_guess() {
        let procs = [p(10, None)];
        let a = attribute(&[obs(0, &procs, None)], &[], &[holding(1, 0, 1, &[10])]);
        let c = a.claim(ClaimId(1), 0).expect("claim");
        assert!(c.used_incomplete);
        assert!(!c.over_limit);
    }

    #[test]
    fn idle_claims_are_flagged_after_the_threshold_and_cleared_by_activity() {
        let policy = IdlePolicy {
            threshold_ms: 1000,
            max_utilization_percent: 1,
        };
        let mut tracker = IdleTracker::new(policy);
        let holdings = [holding(1, 0, 1024, &[10]), holding(2, 1, 1024, &[20])];
        let busy = [p(20, Some(10))];
        let round = |t: &mut IdleTracker, now: u64, util0: u32, dev1: &[ProcessSample]| {
            let devices = [obs(0, &[], Some(util0)), obs(1, dev1, Some(0))];
            let a = attribute(&devices, &[], &holdings);
            t.update(now, &a, &devices)
        };
        assert!(round(&mut tracker, 0, 0, &busy).is_empty());
        assert!(
            round(&mut tracker, 1000, 0, &busy).is_empty(),
            "not longer than threshold"
        );
        assert_eq!(
            round(&mut tracker, 1001, 0, &busy),
            vec![IdleClaim {
                claim_id: ClaimId(1),
                idle_since_ms: 0
            }]
        );
        // Utilization on its device makes it active; idleness restarts afterwards.
        assert!(round(&mut tracker, 1500, 80, &busy).is_empty());
        assert!(round(&mut tracker, 2000, 0, &busy).is_empty());
        assert_eq!(
            round(&mut tracker, 3001, 0, &[]),
            vec![IdleClaim {
                claim_id: ClaimId(1),
                idle_since_ms: 2000
            },]
        );
        // Claim 2 lost its process at 3001: idle since then, not flagged yet.
        assert_eq!(round(&mut tracker, 4002, 0, &[]).len(), 2);
    }
}
