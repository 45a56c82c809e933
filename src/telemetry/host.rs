//! Host CPU, memory and load beside the GPUs, from sysinfo (its GPU feature stays off:
//! GPUs come from NVML only).

use serde::{Deserialize, Serialize};
use sysinfo::System;

use crate::units::Bytes;

/// Load averages over 1, 5 and 15 minutes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadAverage {
    /// Over one minute.
    pub one: f64,
    /// Over five minutes.
    pub five: f64,
    /// Over fifteen minutes.
    pub fifteen: f64,
}

/// One reading of the host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostSample {
    /// CPU busy percent across all cores since the previous reading; `None` on the first.
    pub cpu_percent: Option<f32>,
    /// Logical CPUs.
    pub cpu_count: usize,
    /// Physical memory.
    pub memory_total: Bytes,
    /// Memory in use.
    pub memory_used: Bytes,
    /// Memory available to new work.
    pub memory_available: Bytes,
    /// Load averages, where the platform has them.
    pub load: Option<LoadAverage>,
}

impl HostSample {
    /// Whether these figures moved enough from `shown` to be worth showing again:
    /// another machine shape, CPU busy by 10 points, memory in use by 2 % of the total,
    /// or the 1-minute load by 0.5 and a fifth. A drift adds up against the figures
    /// compared with until it shows.
    pub fn moved_from(&self, shown: &HostSample) -> bool {
        let (a, b) = (shown, self);
        let cpu = match (a.cpu_percent, b.cpu_percent) {
            (Some(x), Some(y)) => (x - y).abs() >= 10.0,
            (x, y) => x.is_some() != y.is_some(),
        };
        let memory =
            a.memory_used.0.abs_diff(b.memory_used.0).saturating_mul(50) >= b.memory_total.0;
        let load = match (&a.load, &b.load) {
            (Some(x), Some(y)) => {
                let d = (x.one - y.one).abs();
                d >= 0.5 && d >= 0.2 * x.one.max(y.one)
            }
            (x, y) => x.is_some() != y.is_some(),
        };
        a.cpu_count != b.cpu_count || a.memory_total != b.memory_total || cpu || memory || load
    }
}

/// A source of host readings, so the sampler can be tested without the real host.
pub trait HostSource: Send {
    /// Reads the host now.
    fn sample(&mut self) -> Option<HostSample>;
}

/// The real host, through sysinfo.
pub struct SysinfoHost {
    system: Option<System>,
    primed: bool,
}

impl SysinfoHost {
    /// Starts reading the host; when sysinfo cannot start, samples are `None`.
    pub fn new() -> SysinfoHost {
        SysinfoHost {
            system: System::new().ok(),
            primed: false,
        }
    }
}

impl Default for SysinfoHost {
    fn default() -> Self {
        SysinfoHost::new()
    }
}

impl HostSource for SysinfoHost {
    fn sample(&mut self) -> Option<HostSample> {
        let system = self.system.as_mut()?;
        system.refresh_cpu_usage();
        system.refresh_memory();
        // CPU usage is a difference between two refreshes: the first has nothing to compare.
        let cpu_percent = self.primed.then(|| system.global_cpu_usage());
        self.primed = true;
        let load = System::load_average().ok().map(|l| LoadAverage {
            one: l.one,
            five: l.five,
            fifteen: l.fifteen,
        });
        Some(HostSample {
            cpu_percent,
            cpu_count: system.cpus().len(),
            memory_total: Bytes(system.total_memory()),
            memory_used: Bytes(system.used_memory()),
            memory_available: Bytes(system.available_memory()),
            load,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_host() {
        let mut host = SysinfoHost::new();
        let first = host.sample().expect("sysinfo works on linux");
        assert!(
            first.cpu_percent.is_none(),
            "no CPU percent without a previous reading"
        );
        assert!(first.memory_total.0 > 0);
        assert!(first.memory_used <= first.memory_total);
        let second = host.sample().expect("second reading");
        assert!(second.cpu_percent.is_some());
        assert!(second.cpu_count > 0);
    }
}
