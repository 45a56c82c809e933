//! An audit event's detail in words. The fair-share ledger records its events (backoffs,
//! resets) as JSON so they stay machine-readable in the history; every front end (the
//! console's Events view, `gpuboard events`, the report's timeline) shows them as a
//! sentence through this one function.

use crate::clock::{self, Timestamp};
use crate::fairshare::{ClearCause, EventKind};

/// `detail` as a sentence, times in `zone`: a ledger event's JSON read as words, any other
/// detail as recorded.
pub fn detail_words(detail: &str, zone: &jiff::tz::TimeZone) -> String {
    let Ok(kind) = serde_json::from_str::<EventKind>(detail) else {
        return detail.to_string();
    };
    let when = |t: Timestamp| clock::date_time(t, zone);
    match kind {
        EventKind::BackedOff {
            project,
            resource,
            until,
            interval_s,
        } => format!(
            "{project} backed off on {resource} until {} (interval {})",
            when(until),
            clock::age(
                std::time::Duration::try_from_secs_f64(interval_s)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            )
        ),
        EventKind::BackoffCleared {
            project,
            resource,
            cause,
        } => format!(
            "{project}'s backoff on {resource} cleared: {}",
            match cause {
                ClearCause::Placed => "a claim of it was placed there",
                ClearCause::NewClaim => "it asked for something that can run there",
                ClearCause::Operator => "by an operator",
            }
        ),
        EventKind::ClockWentBack { from, to } => format!(
            "the clock went back from {} to {}: every backoff cleared",
            when(from),
            when(to)
        ),
        EventKind::DebtsReset { project } => match project {
            Some(p) => format!("{p}'s debts reset"),
            None => "every project's debts reset".to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_events_read_as_sentences_and_other_details_as_recorded() {
        let utc = jiff::tz::TimeZone::UTC;
        let json = r#"{"event":"backed_off","project":"vision","resource":"gpu:A100","until":1795577100000,"interval_s":600.0}"#;
        let words = detail_words(json, &utc);
        assert!(
            words.starts_with("vision backed off on gpu:A100 until "),
            "{words}"
        );
        assert!(
            !words.contains('{') && !words.contains("1795577100000"),
            "{words}"
        );
        let reset = r#"{"event":"debts_reset","project":null}"#;
        assert_eq!(detail_words(reset, &utc), "every project's debts reset");
        assert_eq!(detail_words("placed at a:0", &utc), "placed at a:0");
    }
}
