//! The telemetry pace this process's delta watches ask for (the watch's `telemetry_ms`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The pace asked, ms; 0: none.
static WATCH_TELEMETRY_MS: AtomicU64 = AtomicU64::new(0);

/// Asks every delta watch this process opens from now on for telemetry at most every
/// `pace` (a console watching many endpoints takes in each one's figures more slowly).
/// An endpoint from before the word ignores it.
pub fn watch_telemetry_every(pace: Duration) {
    let ms = u64::try_from(pace.as_millis()).unwrap_or(u64::MAX);
    WATCH_TELEMETRY_MS.store(ms, Ordering::Relaxed);
}

/// Adds the pace asked, if any, to a watch's query.
pub(super) fn ask(query: &mut String) {
    match WATCH_TELEMETRY_MS.load(Ordering::Relaxed) {
        0 => {}
        ms => {
            query.push_str("&telemetry_ms=");
            query.push_str(&ms.to_string());
        }
    }
}
