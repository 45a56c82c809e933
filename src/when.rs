//! The times an operator types (the console's `g` and `--at`, `status --at`, `events --since`,
//! `gpuboard report`'s window): `03:12` (the last 03:12 in the operator's zone), `-10m` or
//! `10m` (before now), `2026-11-25 03:12:30` (local), RFC 3339, or milliseconds since the
//! epoch. Pure: now and the zone are given. Every command that takes a time reads it here.

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::TimeZone;

use crate::clock::Timestamp;

/// What may be typed, for error messages and help.
pub const FORMS: &str = "03:12, 03:12:30, -10m (or 10m: ago), -1h30m, 2026-11-25 03:12, \
                         2026-11-25T03:12:30Z (RFC 3339) or ms since the epoch";

/// Why a typed time was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhenError {
    /// Nothing typed.
    #[error("no time given: type {FORMS}")]
    Empty,
    /// Not one of the forms.
    #[error("`{0}` is not a time: type {FORMS}")]
    Unreadable(String),
    /// After now: the console rewinds, it does not predict.
    #[error("`{0}` is in the future: rewind to a time before now")]
    Future(String),
}

/// The time `text` names, `now` being now in `zone`.
pub fn parse_when(text: &str, now: Timestamp, zone: &TimeZone) -> Result<Timestamp, WhenError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(WhenError::Empty);
    }
    let bad = || WhenError::Unreadable(t.to_string());
    let at = if let Some(ago) = t.strip_prefix('-') {
        Timestamp(now.0.saturating_sub(span_ms(ago).ok_or_else(bad)?))
    } else if let Some(ago) = unit_span_ms(t) {
        // `10m`, `1h 30m`: a span with its unit can only mean "ago" (`events --since 30m`).
        Timestamp(now.0.saturating_sub(ago))
    } else if t.len() > 8 && t.bytes().all(|b| b.is_ascii_digit()) {
        Timestamp(t.parse().map_err(|_| bad())?)
    } else if let Ok(ts) = t.parse::<jiff::Timestamp>() {
        Timestamp(u64::try_from(ts.as_millisecond()).map_err(|_| bad())?)
    } else if let Ok(civil) = t
        .parse::<DateTime>()
        .or_else(|_| t.parse::<Date>().map(|d| d.to_datetime(Time::midnight())))
    {
        let zoned = civil.to_zoned(zone.clone()).map_err(|_| bad())?;
        Timestamp(u64::try_from(zoned.timestamp().as_millisecond()).map_err(|_| bad())?)
    } else {
        // A time of day alone (jiff would also take the time out of a date and time).
        let time = t.parse::<Time>().map_err(|_| bad())?;
        last_time_of_day(time, now, zone).ok_or_else(bad)?
    };
    if at > now {
        return Err(WhenError::Future(t.to_string()));
    }
    Ok(at)
}

/// `03:12`: today's, or yesterday's when today's is still to come.
fn last_time_of_day(time: Time, now: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
    let now_ts = jiff::Timestamp::from_millisecond(i64::try_from(now.0).ok()?).ok()?;
    let today = now_ts.to_zoned(zone.clone()).date();
    let at = |d: Date| -> Option<Timestamp> {
        let z = d.to_datetime(time).to_zoned(zone.clone()).ok()?;
        u64::try_from(z.timestamp().as_millisecond())
            .ok()
            .map(Timestamp)
    };
    let t = at(today)?;
    if t <= now {
        Some(t)
    } else {
        at(today.yesterday().ok()?)
    }
}

/// A span written with its units (`30m`, `1h 30m`, `90s`): a bare number is left to the
/// other forms (milliseconds since the epoch), so it is not read as minutes here.
fn unit_span_ms(text: &str) -> Option<u64> {
    let last = text.chars().last()?;
    if last.is_ascii_digit() || !text.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    span_ms(text)
}

/// `10m`, `1h30m`, `1h 30m`, `90s`, `2d` in milliseconds.
fn span_ms(text: &str) -> Option<u64> {
    let mut total: u64 = 0;
    let mut digits = String::new();
    let mut any = false;
    for c in text.chars() {
        if c == ' ' && digits.is_empty() {
            continue;
        }
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit: u64 = match c {
            's' => 1_000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => 86_400_000,
            _ => return None,
        };
        let n: u64 = digits.parse().ok()?;
        digits.clear();
        total = total.checked_add(n.checked_mul(unit)?)?;
        any = true;
    }
    // A bare number is minutes (`-10`), the unit operators mean most.
    if !digits.is_empty() {
        let n: u64 = digits.parse().ok()?;
        total = total.checked_add(n.checked_mul(60_000)?)?;
        any = true;
    }
    any.then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-25 03:25:00 UTC.
    const NOW: Timestamp = Timestamp(1_795_577_100_000);

    fn utc(s: &str) -> Timestamp {
        Timestamp(u64::try_from(s.parse::<jiff::Timestamp>().unwrap().as_millisecond()).unwrap())
    }

    #[test]
    fn every_form_reads_as_the_time_it_names() {
        assert_eq!(utc("2026-11-25T03:25:00Z"), NOW);
        let cases = [
            ("03:12", "2026-11-25T03:12:00Z"),
            (" 03:12:30 ", "2026-11-25T03:12:30Z"),
            ("-10m", "2026-11-25T03:15:00Z"),
            ("-10", "2026-11-25T03:15:00Z"),
            ("-1h30m", "2026-11-25T01:55:00Z"),
            ("-90s", "2026-11-25T03:23:30Z"),
            ("-2d", "2026-11-23T03:25:00Z"),
            ("10m", "2026-11-25T03:15:00Z"),
            ("1h 30m", "2026-11-25T01:55:00Z"),
            ("-1h 30m", "2026-11-25T01:55:00Z"),
            ("90s", "2026-11-25T03:23:30Z"),
            ("2026-11-25 03:12:30", "2026-11-25T03:12:30Z"),
            ("2026-11-25 03:12", "2026-11-25T03:12:00Z"),
            ("2026-11-24", "2026-11-24T00:00:00Z"),
            ("2026-11-24 23:50", "2026-11-24T23:50:00Z"),
            ("2026-11-25T03:12:30Z", "2026-11-25T03:12:30Z"),
            ("2026-11-25T04:12:30+01:00", "2026-11-25T03:12:30Z"),
            ("1795576320000", "2026-11-25T03:12:00Z"),
            // Today's 23:50 is still to come: yesterday's.
            ("23:50", "2026-11-24T23:50:00Z"),
        ];
        for (text, want) in cases {
            assert_eq!(
                parse_when(text, NOW, &TimeZone::UTC),
                Ok(utc(want)),
                "{text}"
            );
        }
    }

    #[test]
    fn local_forms_read_in_the_given_zone() {
        let paris = TimeZone::get("Europe/Paris").unwrap();
        assert_eq!(
            parse_when("04:12", NOW, &paris),
            Ok(utc("2026-11-25T03:12:00Z"))
        );
        assert_eq!(
            parse_when("2026-11-25 04:12:30", NOW, &paris),
            Ok(utc("2026-11-25T03:12:30Z"))
        );
        // Absolute and relative forms do not depend on the zone.
        assert_eq!(
            parse_when("-10m", NOW, &paris),
            Ok(utc("2026-11-25T03:15:00Z"))
        );
    }

    #[test]
    fn bad_input_says_what_is_allowed() {
        for text in [
            "",
            "  ",
            "yesterday",
            "-10x",
            "-",
            "25:99",
            "03:12pm",
            "2026-13-01",
        ] {
            let e = parse_when(text, NOW, &TimeZone::UTC).unwrap_err();
            let words = e.to_string();
            assert!(
                words.contains("-10m") && words.contains("RFC 3339"),
                "{text}: {words}"
            );
        }
        let e = parse_when("2026-11-26 00:00", NOW, &TimeZone::UTC).unwrap_err();
        assert_eq!(e, WhenError::Future("2026-11-26 00:00".to_string()));
        let e = parse_when("2026-11-25 03:30", NOW, &TimeZone::UTC).unwrap_err();
        assert_eq!(e, WhenError::Future("2026-11-25 03:30".to_string()));
        assert!(e.to_string().contains("in the future"));
    }
}
