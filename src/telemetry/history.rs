//! Bounded recent values for sparklines: a ring buffer per metric, so memory stays flat
//! however long the sampler runs.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// The default number of points kept per metric: two minutes at one sample a second.
pub const DEFAULT_HISTORY_LEN: usize = 120;

/// A ring buffer of integer samples (sparklines take `u64`). A missing reading is stored
/// as a gap (`None`), not as zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    capacity: usize,
    values: VecDeque<Option<u64>>,
}

impl History {
    /// An empty history keeping at most `capacity` points (at least one).
    pub fn new(capacity: usize) -> History {
        let capacity = capacity.max(1);
        History {
            capacity,
            values: VecDeque::with_capacity(capacity),
        }
    }

    /// Appends a point, dropping the oldest when full.
    pub fn push(&mut self, value: Option<u64>) {
        if self.values.len() == self.capacity {
            self.values.pop_front();
        }
        self.values.push_back(value);
    }

    /// Points oldest first, gaps included.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = Option<u64>> + '_ {
        self.values.iter().copied()
    }

    /// Points oldest first with gaps drawn as 0, the form ratatui's `Sparkline` takes.
    pub fn for_sparkline(&self) -> Vec<u64> {
        self.values.iter().map(|v| v.unwrap_or(0)).collect()
    }

    /// The newest point, if any was read.
    pub fn latest(&self) -> Option<u64> {
        self.values.back().copied().flatten()
    }

    /// How many points are held.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when nothing was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The most points kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Recent values of one device's main metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceHistory {
    /// GPU utilization, percent.
    pub utilization_percent: History,
    /// Memory used, bytes.
    pub memory_used_bytes: History,
    /// Temperature, degrees Celsius.
    pub temperature_c: History,
    /// Power draw, milliwatts.
    pub power_mw: History,
}

impl DeviceHistory {
    /// Empty histories of `capacity` points each.
    pub fn new(capacity: usize) -> DeviceHistory {
        DeviceHistory {
            utilization_percent: History::new(capacity),
            memory_used_bytes: History::new(capacity),
            temperature_c: History::new(capacity),
            power_mw: History::new(capacity),
        }
    }

    /// Records one round of metrics (all gaps for a lost device).
    pub fn record(&mut self, metrics: &super::DeviceMetrics) {
        self.utilization_percent
            .push(metrics.utilization_gpu_percent.map(u64::from));
        self.memory_used_bytes
            .push(metrics.memory.map(|m| m.used.0));
        self.temperature_c
            .push(metrics.temperature_c.map(u64::from));
        self.power_mw.push(metrics.power_mw.map(u64::from));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_newest_points() {
        let mut h = History::new(3);
        for v in 1..=5 {
            h.push(Some(v));
        }
        assert_eq!(h.len(), 3);
        assert_eq!(h.for_sparkline(), vec![3, 4, 5]);
        assert_eq!(h.latest(), Some(5));
    }

    #[test]
    fn gaps_stay_gaps() {
        let mut h = History::new(4);
        h.push(Some(7));
        h.push(None);
        assert_eq!(h.values().collect::<Vec<_>>(), vec![Some(7), None]);
        assert_eq!(h.latest(), None);
        assert_eq!(h.for_sparkline(), vec![7, 0]);
    }

    #[test]
    fn zero_capacity_still_holds_one_point() {
        let mut h = History::new(0);
        h.push(Some(1));
        h.push(Some(2));
        assert_eq!(h.for_sparkline(), vec![2]);
    }
}
