//! What is wrong with a physical GPU that no one engine can see: two holders that are not
//! nested and together hold more than the GPU has (double-booked), memory used by
//! processes no holder accounts for (unexplained), and holders of a GPU that has stayed
//! below 5 % for 30 minutes (idle, whichever engine holds it).

use std::collections::HashMap;

use serde::Serialize;

use crate::clock::Timestamp;
use crate::units::{Bytes, Units};

use super::{GpuEngine, PhysicalFleet, PhysicalGpu};

/// Below this GPU utilization, percent, a GPU is idle.
pub const IDLE_BELOW_PERCENT: u32 = 5;
/// A GPU idle this long flags its holders.
pub const IDLE_FOR_MS: u64 = 30 * 60 * 1000;

/// What two holders together hold more of than the GPU has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    /// Memory, bytes.
    Memory,
    /// Compute, units (10 000 = the whole GPU).
    Compute,
}

/// One thing wrong with a physical GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "flag", rename_all = "kebab-case")]
pub enum GpuFlag {
    /// Holders not nested in each other hold more than the GPU has.
    DoubleBooked {
        /// The outermost holders counted (indexes into the GPU's holders).
        holders: Vec<usize>,
        /// Of what.
        resource: Resource,
        /// What they hold together (bytes or units).
        held: u64,
        /// What the GPU has.
        has: u64,
    },
    /// Processes no holder accounts for use memory here.
    Unexplained {
        /// Their memory, where known.
        memory: Bytes,
        /// Their pids.
        pids: Vec<u32>,
    },
    /// Held, and below `IDLE_BELOW_PERCENT` since `since`, for at least `IDLE_FOR_MS`.
    Idle {
        /// The outermost holders (indexes into the GPU's holders).
        holders: Vec<usize>,
        /// Idle since.
        since: Timestamp,
    },
}

impl GpuFlag {
    /// The word lists, filters and `status --json` use.
    pub fn word(&self) -> &'static str {
        match self {
            GpuFlag::DoubleBooked { .. } => "double-booked",
            GpuFlag::Unexplained { .. } => "unexplained",
            GpuFlag::Idle { .. } => "idle",
        }
    }

    /// The flag in one line, naming the holders from `gpu`.
    pub fn describe(&self, gpu: &PhysicalGpu) -> String {
        let names = |hs: &[usize]| {
            hs.iter()
                .filter_map(|&i| gpu.holders.get(i))
                .map(|h| format!("{} [{}]", h.label, h.source_name))
                .collect::<Vec<_>>()
                .join(" and ")
        };
        match self {
            GpuFlag::DoubleBooked {
                holders,
                resource: Resource::Memory,
                held,
                has,
            } => format!(
                "double-booked: {} hold {} of {} memory",
                names(holders),
                crate::units::Bytes(*held),
                crate::units::Bytes(*has)
            ),
            GpuFlag::DoubleBooked {
                holders,
                resource: Resource::Compute,
                held,
                has,
            } => format!(
                "double-booked: {} hold {} of {} GPU",
                names(holders),
                Units(u32::try_from(*held).unwrap_or(u32::MAX)),
                Units(u32::try_from(*has).unwrap_or(u32::MAX))
            ),
            GpuFlag::Unexplained { memory, pids } => {
                let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
                format!(
                    "unexplained: {memory} used by pid {} that no holder accounts for",
                    pids.join(", ")
                )
            }
            GpuFlag::Idle { holders, .. } => format!(
                "idle: below {IDLE_BELOW_PERCENT} % for {} min or more, held by {}",
                IDLE_FOR_MS / 60_000,
                names(holders)
            ),
        }
    }
}

/// The double-booked and unexplained flags of a joined GPU.
pub(super) fn flags_of(gpu: &PhysicalGpu) -> Vec<GpuFlag> {
    let mut out = Vec::new();
    let roots: Vec<usize> = gpu
        .roots()
        .filter(|(_, h)| !h.guessed)
        .map(|(i, _)| i)
        .collect();
    if roots.len() >= 2 {
        // How many hold some and their sum; the list is made only for a flag.
        let with = |f: &dyn Fn(usize) -> u64| -> (usize, u64) {
            roots
                .iter()
                .map(|&i| f(i))
                .filter(|&v| v > 0)
                .fold((0, 0u64), |(n, sum), v| (n + 1, sum.saturating_add(v)))
        };
        let holding = |f: &dyn Fn(usize) -> u64| -> Vec<usize> {
            roots.iter().copied().filter(|&i| f(i) > 0).collect()
        };
        // A whole GPU (all its compute) holds all its memory too, whatever its engine says.
        let memory = |i: usize| {
            let h = &gpu.holders[i];
            match gpu.memory {
                Some(m) if h.memory.0 == 0 && h.compute >= Units::FULL => m.0,
                _ => h.memory.0,
            }
        };
        let (n, held) = with(&memory);
        if let Some(has) = gpu.memory
            && n >= 2
            && held > has.0
        {
            out.push(GpuFlag::DoubleBooked {
                holders: holding(&memory),
                resource: Resource::Memory,
                held,
                has: has.0,
            });
        }
        let compute = |i: usize| u64::from(gpu.holders[i].compute.0);
        let (n, held) = with(&compute);
        let has = u64::from(Units::FULL.0);
        // One double booking per GPU: memory's names the same holders already.
        if out.is_empty() && n >= 2 && held > has {
            out.push(GpuFlag::DoubleBooked {
                holders: holding(&compute),
                resource: Resource::Compute,
                held,
                has,
            });
        }
    }
    let loose: Vec<_> = gpu
        .processes
        .iter()
        .filter(|p| p.holder.is_none())
        .collect();
    // Only where some scheduler sees the GPU: a host seen by telemetry alone (a host read
    // over SSH, dcgm) has no allocations for its processes to be missing from.
    let scheduled = gpu.seen_by.iter().any(|s| s.engine != GpuEngine::Telemetry);
    if scheduled && !loose.is_empty() {
        out.push(GpuFlag::Unexplained {
            memory: loose
                .iter()
                .filter_map(|p| p.used_memory)
                .fold(Bytes(0), |a, b| a + b),
            pids: loose.iter().map(|p| p.pid).collect(),
        });
    }
    out
}

/// When each GPU went idle, kept across joins: a GPU below `IDLE_BELOW_PERCENT` since a
/// time at least `IDLE_FOR_MS` ago flags its outermost holders, whichever engine's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdleClock {
    since: HashMap<String, Timestamp>,
}

impl IdleClock {
    /// Notes each GPU's utilization at `now` and sets the idle flags of `fleet` (those of
    /// an earlier call replaced). A GPU with no utilization reading is not idle (unmeasured
    /// is not idle) and starts over.
    pub fn observe(&mut self, fleet: &mut PhysicalFleet, now: Timestamp) {
        let mut last = std::mem::take(&mut self.since);
        let mut seen = HashMap::with_capacity(last.len());
        for gpu in &mut fleet.gpus {
            let util = gpu
                .telemetry
                .as_ref()
                .filter(|t| !t.lost)
                .and_then(|t| t.utilization_gpu);
            let flag = if util.is_some_and(|u| u < IDLE_BELOW_PERCENT) {
                // The key moves from the last map to this one: no id is made for a GPU
                // the clock knew by its UUID.
                let id: std::borrow::Cow<'_, str> = match gpu.uuid.as_deref() {
                    Some(u) => u.into(),
                    None => gpu.id().into(),
                };
                let (id, since) = if let Some((k, t)) = last.remove_entry(&*id) {
                    (k, t.min(now))
                } else {
                    // An id an earlier GPU of this join has (one UUID given to two GPUs)
                    // reads the clock that one moved.
                    let since = seen.get(&*id).copied().unwrap_or(now);
                    (id.into_owned(), since)
                };
                seen.insert(id, since);
                let held = gpu.roots().next().is_some();
                (held && now.millis_since(since) >= IDLE_FOR_MS).then(|| GpuFlag::Idle {
                    holders: gpu.roots().map(|(i, _)| i).collect(),
                    since,
                })
            } else {
                None
            };
            // A GPU shared with the kept join is copied only when its idle flag changes.
            let was = gpu.flags.iter().find(|f| matches!(f, GpuFlag::Idle { .. }));
            if was != flag.as_ref() {
                let gpu = std::sync::Arc::make_mut(gpu);
                gpu.flags.retain(|f| !matches!(f, GpuFlag::Idle { .. }));
                gpu.flags.extend(flag);
            }
        }
        self.since = seen;
    }
}
