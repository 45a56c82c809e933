//! Fleet totals over the shown sources (the Overview's figures), recomputed with the rows
//! when the data or the shown sources change, never per frame.

use crate::placement::Health;
use crate::snapshot::ClaimState;

use super::{State, View};

/// Totals over the shown sources' devices and claims.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FleetTotals {
    /// GPUs: physical ones where the join merged devices several sources list, else
    /// the devices.
    pub gpus: usize,
    /// Cordoned devices.
    pub cordoned: usize,
    /// Devices not healthy (unhealthy or lost).
    pub bad: usize,
    /// Memory capacity, bytes.
    pub cap: u64,
    /// Memory allocated, bytes.
    pub alloc: u64,
    /// Memory used (telemetry), bytes.
    pub used: u64,
    /// Memory free to claim, bytes.
    pub free: u64,
    /// Free memory nobody can claim (no compute or slots left, or cordoned), bytes.
    pub stranded: u64,
    /// Some device reported its used memory.
    pub used_known: bool,
    /// Capacity of the devices that reported their used memory (what `used` is out of).
    pub cap_measured: u64,
    /// Claims whose memory use is measured (over-limit and idle are known only for them).
    pub claims_measured: usize,
    /// Some device knows its memory used outside any claim.
    pub unclaimed_known: bool,
    /// Compute allocated, in thousandths of a GPU.
    pub compute: u64,
    /// Memory used outside any claim, bytes.
    pub unclaimed: u64,
    /// Devices allocated but idle.
    pub idle_devs: usize,
    /// Placed claims.
    pub placed: usize,
    /// Pending claims.
    pub pending: usize,
    /// Claims over their memory limit.
    pub over: usize,
    /// Idle claims.
    pub idle: usize,
}

impl State {
    /// Recomputes the fleet totals from the shown sources' data.
    pub fn recompute_totals(&mut self) {
        let mut t = FleetTotals::default();
        for (_, s) in self.shown_sources() {
            let Some(d) = &s.data else { continue };
            for (_, dev) in d.devices() {
                t.gpus += 1;
                t.cordoned += usize::from(dev.cordoned);
                t.bad += usize::from(dev.health != Health::Healthy);
                t.cap += dev.memory_capacity.unwrap_or_default().0;
                t.alloc += dev.memory_allocated.0;
                t.free += dev.memory_free.0;
                t.compute += u64::from(dev.compute_allocated.0);
                if let Some(u) = dev.telemetry.as_ref().and_then(|t| t.memory_used) {
                    t.used += u.0;
                    t.used_known = true;
                    t.cap_measured += dev.memory_capacity.unwrap_or_default().0;
                }
                t.unclaimed_known |= dev.unclaimed_memory.is_some();
                t.unclaimed += dev.unclaimed_memory.unwrap_or_default().0;
                t.idle_devs += usize::from(dev.allocated_but_idle());
                if dev.cordoned || dev.compute_free.0 == 0 || dev.slots_free.0 == 0 {
                    t.stranded += dev.memory_free.0;
                }
            }
            for c in &d.claims {
                match c.state {
                    ClaimState::Placed => t.placed += 1,
                    ClaimState::Pending => t.pending += 1,
                }
                t.claims_measured += usize::from(c.memory_used.is_some());
                t.over += usize::from(c.over_limit);
                t.idle += usize::from(c.idle);
            }
        }
        // A GPU several sources list is one GPU: where the join merged devices, count the
        // physical GPUs a shown source sees.
        let physical = self
            .physical_fleet()
            .gpus
            .iter()
            .filter(|g| {
                g.seen_by
                    .iter()
                    .any(|s| self.source_filter.is_none_or(|f| f == s.source))
            })
            .count();
        if physical > 0 && physical < t.gpus {
            t.gpus = physical;
        }
        self.totals = t;
    }
}

impl State {
    /// Why the current view's problem filter cannot be answered, when it cannot: over
    /// limit and idle need measured use, unclaimed use needs attribution. A list filtered
    /// to it reads `n/a` with this reason rather than an empty list taken for "none".
    pub fn unmeasured(&self) -> Option<&'static str> {
        let f = self.filter().trim().to_lowercase();
        if f.len() < 3 {
            return None;
        }
        let is = |word: &str| word.starts_with(f.as_str());
        let t = &self.totals;
        match self.view {
            View::Claims if is("over-limit") && t.claims_measured == 0 => {
                Some("no claim's use is measured")
            }
            View::Claims | View::Gpus if is("idle") && !t.used_known => Some("no telemetry"),
            View::Gpus if is("unclaimed") && !t.unclaimed_known => Some("no attribution"),
            _ => None,
        }
    }
}
