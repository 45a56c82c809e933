//! The console's time: how often it advances, and how a time is written on screen. A leaf:
//! it imports no other part of the console, so the driver, `update` and the views all read
//! it without reading each other.

use jiff::tz::TimeZone;

use crate::clock::{Timestamp, date_time};

/// How often time advances in the state.
pub const TICK_MS: u64 = 1_000;

/// `03:12:30` when `at` is on the day of `now` (in `zone`), else the date too.
pub fn short_time(at: Timestamp, now: Timestamp, zone: &TimeZone) -> String {
    let full = date_time(at, zone);
    let today = date_time(now, zone);
    if full.get(..10) == today.get(..10) {
        full.get(11..).unwrap_or(&full).to_string()
    } else {
        full
    }
}
