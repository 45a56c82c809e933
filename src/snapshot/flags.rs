//! What an operator should notice about a device: facts read from its snapshot, shared by
//! the console's lists (filters, totals) and its drawing, so both mean the same by "idle".

use crate::placement::Health;

use super::DeviceView;

/// How many of the latest utilization samples must all be zero for "idle".
const IDLE_SAMPLES: usize = 30;

/// One thing worth noticing about a device, in the order the FLAGS column lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceFlag {
    /// Taking no new claims.
    Cordon,
    /// Its source says it is unhealthy.
    Unhealthy,
    /// Gone: its source lost it, or its telemetry did.
    Lost,
    /// Its memory is unknown (then it takes no claim).
    NoMemInfo,
    /// Memory is reserved but the GPU has done nothing lately.
    Idle,
    /// Processes that belong to no claim use its memory.
    Unclaimed,
}

impl DeviceFlag {
    /// The word the screens show and a filter matches.
    pub fn word(self) -> &'static str {
        match self {
            DeviceFlag::Cordon => "cordon",
            DeviceFlag::Unhealthy => "unhealthy",
            DeviceFlag::Lost => "lost",
            DeviceFlag::NoMemInfo => "no-mem-info",
            DeviceFlag::Idle => "idle",
            DeviceFlag::Unclaimed => "unclaimed",
        }
    }
}

/// Whether the newest `IDLE_SAMPLES` of a utilization history (oldest first) are all
/// zero: what the idle flag reads of the history.
pub fn quiet_lately(history: impl DoubleEndedIterator<Item = u64>) -> bool {
    history.rev().take(IDLE_SAMPLES).all(|u| u == 0)
}

impl DeviceView {
    /// Memory is reserved but the GPU has done nothing for the whole recent history
    /// (false without telemetry: unmeasured is not idle).
    pub fn allocated_but_idle(&self) -> bool {
        let Some(t) = &self.telemetry else {
            return false;
        };
        self.memory_allocated.0 > 0
            && t.utilization_gpu == Some(0)
            && quiet_lately(t.history_utilization.iter().map(|u| u64::from(*u)))
    }

    /// Memory used outside any claim is known and above zero.
    pub fn has_unclaimed_use(&self) -> bool {
        self.unclaimed_memory.is_some_and(|b| b.0 > 0)
    }

    /// Whose the unclaimed use is: the owners (by cgroup) of its processes that belong to
    /// no claim, each once, in process order. Empty when nobody's is known.
    pub fn unclaimed_owners(&self) -> Vec<&super::ProcessOwner> {
        let mut out: Vec<&super::ProcessOwner> = Vec::new();
        let processes = self.telemetry.iter().flat_map(|t| t.processes.iter());
        for o in processes
            .filter(|p| p.claim.is_none())
            .filter_map(|p| p.owner.as_ref())
        {
            if !out.contains(&o) {
                out.push(o);
            }
        }
        out
    }

    /// What an operator should notice about it, in the FLAGS column's order (`Lost`
    /// twice when both its source and its telemetry lost it, as the column shows).
    pub fn flags(&self) -> Vec<DeviceFlag> {
        let mut f = Vec::new();
        if self.cordoned {
            f.push(DeviceFlag::Cordon);
        }
        match &self.health {
            Health::Healthy => {}
            Health::Unhealthy(_) => f.push(DeviceFlag::Unhealthy),
            Health::Lost => f.push(DeviceFlag::Lost),
        }
        if self.telemetry.as_ref().is_some_and(|t| t.lost) {
            f.push(DeviceFlag::Lost);
        }
        if self.memory_capacity.is_none() {
            f.push(DeviceFlag::NoMemInfo);
        }
        if self.allocated_but_idle() {
            f.push(DeviceFlag::Idle);
        }
        if self.has_unclaimed_use() {
            f.push(DeviceFlag::Unclaimed);
        }
        f
    }

    /// The flags' words (`cordon`, `idle`, ...), as the FLAGS column writes them.
    pub fn flag_words(&self) -> Vec<&'static str> {
        self.flags().into_iter().map(DeviceFlag::word).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::DeviceTelemetry;
    use crate::units::Bytes;

    fn busy(util: Option<u32>, history: Vec<u32>, allocated: u64) -> DeviceView {
        DeviceView {
            memory_capacity: Some(Bytes::gib(40)),
            memory_allocated: Bytes(allocated),
            telemetry: Some(DeviceTelemetry {
                utilization_gpu: util,
                history_utilization: history,
                ..DeviceTelemetry::default()
            }),
            ..DeviceView::default()
        }
    }

    #[test]
    fn idle_needs_a_reservation_and_a_quiet_recent_history() {
        assert!(busy(Some(0), vec![0; 40], 1).allocated_but_idle());
        // Busy once, long ago (beyond the samples looked at), is still idle now.
        let mut long_ago = vec![90];
        long_ago.extend([0; IDLE_SAMPLES]);
        assert!(busy(Some(0), long_ago, 1).allocated_but_idle());
        assert!(!busy(Some(0), vec![0, 5, 0], 1).allocated_but_idle());
        assert!(!busy(Some(3), vec![0; 40], 1).allocated_but_idle());
        assert!(!busy(None, vec![0; 40], 1).allocated_but_idle());
        assert!(!busy(Some(0), vec![0; 40], 0).allocated_but_idle());
        assert!(!DeviceView::default().allocated_but_idle());
    }

    #[test]
    fn flags_come_in_the_column_order() {
        let mut d = busy(Some(0), vec![0; 5], 1);
        d.cordoned = true;
        d.unclaimed_memory = Some(Bytes(1));
        assert_eq!(d.flag_words(), vec!["cordon", "idle", "unclaimed"]);
        d.unclaimed_memory = Some(Bytes(0));
        d.memory_capacity = None;
        d.health = Health::Lost;
        assert_eq!(
            d.flag_words(),
            vec!["cordon", "lost", "no-mem-info", "idle"]
        );
    }
}
