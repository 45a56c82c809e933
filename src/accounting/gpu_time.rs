//! GPU time: how much of a GPU, for how long. One GPU for one second is one GPU-second; a
//! quarter GPU for an hour is 900 GPU-seconds, 0.25 GPU-hours.

use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Sub};

use serde::{Deserialize, Serialize};

/// GPU-seconds: a fraction of a device times a duration.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GpuSeconds(pub f64);

impl GpuSeconds {
    /// `fraction` of a device (1.0 is one whole GPU) held for `ms` milliseconds.
    pub fn of(fraction: f64, ms: u64) -> GpuSeconds {
        // Windows are at most years long: milliseconds fit an f64 exactly.
        GpuSeconds(fraction * ms as f64 / 1000.0)
    }

    /// In GPU-hours.
    pub fn hours(self) -> f64 {
        self.0 / 3600.0
    }
}

impl Add for GpuSeconds {
    type Output = GpuSeconds;
    fn add(self, rhs: GpuSeconds) -> GpuSeconds {
        GpuSeconds(self.0 + rhs.0)
    }
}

impl Sub for GpuSeconds {
    type Output = GpuSeconds;
    fn sub(self, rhs: GpuSeconds) -> GpuSeconds {
        GpuSeconds(self.0 - rhs.0)
    }
}

impl AddAssign for GpuSeconds {
    fn add_assign(&mut self, rhs: GpuSeconds) {
        self.0 += rhs.0;
    }
}

impl Sum for GpuSeconds {
    fn sum<I: Iterator<Item = GpuSeconds>>(iter: I) -> GpuSeconds {
        iter.fold(GpuSeconds::default(), Add::add)
    }
}

impl fmt::Display for GpuSeconds {
    /// In GPU-hours, two decimals: `0.25 GPU-h`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2} GPU-h", self.hours())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarter_gpu_for_an_hour_is_a_quarter_gpu_hour() {
        let q = GpuSeconds::of(0.25, 3_600_000);
        assert!((q.hours() - 0.25).abs() < 1e-12);
        assert_eq!(q.to_string(), "0.25 GPU-h");
        assert_eq!([q, q].into_iter().sum::<GpuSeconds>(), GpuSeconds(1800.0));
    }
}
