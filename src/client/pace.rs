//! The telemetry pace a delta watch asks for (the watch's `telemetry_ms`).

use std::time::Duration;

/// Adds the pace asked, if any, to a watch's query.
pub(super) fn ask(query: &mut String, pace: Option<Duration>) {
    if let Some(pace) = pace.filter(|p| !p.is_zero()) {
        let ms = u64::try_from(pace.as_millis()).unwrap_or(u64::MAX);
        query.push_str("&telemetry_ms=");
        query.push_str(&ms.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pace_is_asked_in_whole_milliseconds_and_none_is_not_asked() {
        let mut q = "deltas=1".to_string();
        ask(&mut q, None);
        assert_eq!(q, "deltas=1");
        ask(&mut q, Some(Duration::ZERO));
        assert_eq!(q, "deltas=1");
        ask(&mut q, Some(Duration::from_secs(5)));
        assert_eq!(q, "deltas=1&telemetry_ms=5000");
    }
}
