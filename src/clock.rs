//! Time as an input: the scheduler, leases, backoffs and the console read a `Clock`
//! they are given, so tests and the simulator can run a day in milliseconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// `secs` seconds later.
    pub fn plus_secs(self, secs: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(secs.saturating_mul(1000)))
    }
    /// `ms` milliseconds later.
    pub fn plus_millis(self, ms: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }
    /// Milliseconds from `earlier` to `self`, zero if `earlier` is later.
    pub fn millis_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
    /// Seconds from `earlier` to `self` as a float, for accounting (debts), never for fits.
    pub fn secs_since(self, earlier: Timestamp) -> f64 {
        self.millis_since(earlier) as f64 / 1000.0
    }
}

/// A source of the current time.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Timestamp;
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Timestamp(ms)
    }
}

/// A clock that moves only when told: for tests and simulations.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock showing `start`.
    pub fn new(start: Timestamp) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(start.0)))
    }
    /// Moves the clock to `t` (backwards too: tests need that).
    pub fn set(&self, t: Timestamp) {
        self.0.store(t.0, Ordering::SeqCst);
    }
    /// Moves the clock forward by `ms`.
    pub fn advance_millis(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}
