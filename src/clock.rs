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
    #[must_use]
    pub fn plus_secs(self, secs: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(secs.saturating_mul(1000)))
    }
    /// `ms` milliseconds later.
    #[must_use]
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

/// A span for people, in its two largest units: `42s`, `5m10s`, `3h20m`, `2d3h`. The one
/// age formatter: tables, reasons and the console all use it.
pub fn age(ms: u64) -> String {
    use jiff::fmt::friendly::{Designator, Spacing, SpanPrinter};
    let s = ms / 1000;
    let (days, hours, minutes, seconds) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60, s % 60);
    // The units shown; the rest is cut, not rounded up, so an age never runs ahead.
    let span = match s {
        0..3600 => jiff::Span::new()
            .minutes(as_i64(minutes))
            .seconds(as_i64(seconds)),
        3600..86_400 => jiff::Span::new()
            .hours(as_i64(hours))
            .minutes(as_i64(minutes)),
        _ => jiff::Span::new()
            .days(as_i64(days.min(MAX_SPAN_DAYS)))
            .hours(as_i64(hours)),
    };
    SpanPrinter::new()
        .spacing(Spacing::None)
        .designator(Designator::Compact)
        .span_to_string(&span)
}

/// Jiff's spans hold at most about 7 million days; older ages read as that.
const MAX_SPAN_DAYS: u64 = 7_000_000;

fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `2026-11-23 14:05:09` in `zone` (the operator's local zone in the console; tests pass
/// UTC so snapshots do not depend on where they run).
pub fn date_time(t: Timestamp, zone: &jiff::tz::TimeZone) -> String {
    let ms = i64::try_from(t.0).unwrap_or(i64::MAX);
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(ts) => ts
            .to_zoned(zone.clone())
            .strftime("%Y-%m-%d %H:%M:%S")
            .to_string(),
        Err(_) => format!("@{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_show_two_units_and_never_round_up() {
        assert_eq!(age(0), "0s");
        assert_eq!(age(42_999), "42s");
        assert_eq!(age(310_000), "5m10s");
        assert_eq!(age(12_000_000), "3h20m");
        assert_eq!(age(3 * 86_400_000 + 3_700_000), "3d1h");
        assert_eq!(age(u64::MAX), "7000000d14h");
    }

    #[test]
    fn date_times_are_in_the_zone_given() {
        let t = Timestamp(1_795_442_709_000);
        assert_eq!(
            date_time(t, &jiff::tz::TimeZone::UTC),
            "2026-11-23 14:05:09"
        );
        let plus2 = jiff::tz::TimeZone::fixed(jiff::tz::offset(2));
        assert_eq!(date_time(t, &plus2), "2026-11-23 16:05:09");
    }
}
