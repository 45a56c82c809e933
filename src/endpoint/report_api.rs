//! `GET /v1/history/report`: one endpoint's accounting, audited actions and trouble over
//! a window (`accounting` has the contract and the arithmetic; this reads the history).

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::history_api::{HistoryRoutes, bad, failed, history, only, time};
use crate::accounting::{
    self, Ask, GpuTime, IdleRule, PENDING_MS, Parts, Tally, WindowReport, usage,
};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::store::history::{CHUNK_MS, HistoryError, HistoryStore, ROLLUP_IDLE_BELOW};
use crate::wire::history::{self as hw, BeforeHistory};

/// A whole number parameter within `range`, or its default.
fn number(
    q: &HashMap<String, String>,
    name: &str,
    range: std::ops::RangeInclusive<u64>,
    default: u64,
) -> Result<u64, crate::endpoint::api_error::ApiError> {
    let Some(raw) = q.get(name) else {
        return Ok(default);
    };
    raw.parse::<u64>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            bad(format!(
                "`{name}` must be a whole number from {} to {}",
                range.start(),
                range.end()
            ))
        })
}

/// The report over `ask`'s window from the history in `s`, cut to where the history begins;
/// `Err` with where it begins (`None`: nothing recorded) when the window is wholly before it.
/// [`Parts::Usage`]: the usage table alone, from the hours rolled up where it can.
pub fn window_report(
    s: &HistoryStore,
    ask: Ask,
    parts: Parts,
) -> Result<Result<WindowReport, Option<Timestamp>>, HistoryError> {
    let Some(begins) = s.from()? else {
        return flags_only(s, ask);
    };
    if ask.to < begins {
        return Ok(Err(Some(begins)));
    }
    let ask = Ask {
        from: ask.from.max(begins),
        ..ask
    };
    let mut r = match parts {
        Parts::All => match whole(s, &ask)? {
            Some(r) => WindowReport {
                flags: s.flag_episodes(ask.from, ask.to)?,
                ..r
            },
            None => return Ok(Err(Some(begins))),
        },
        Parts::Usage => WindowReport {
            from: ask.from,
            to: ask.to,
            usage: usage(s, ask.from, ask.to, ask.idle)?,
            ..WindowReport::default()
        },
    };
    r.history_from = Some(begins);
    Ok(Ok(r))
}

/// The report of a history of flags alone (`gpuboard record --config`): its episodes in
/// the window, nothing else; `Err` as `window_report`'s.
fn flags_only(
    s: &HistoryStore,
    ask: Ask,
) -> Result<Result<WindowReport, Option<Timestamp>>, HistoryError> {
    let Some(begins) = s.flags_from()? else {
        return Ok(Err(None));
    };
    if ask.to < begins {
        return Ok(Err(Some(begins)));
    }
    Ok(Ok(WindowReport {
        from: ask.from.max(begins),
        to: ask.to,
        history_from: Some(begins),
        flags: s.flag_episodes(ask.from, ask.to)?,
        ..WindowReport::default()
    }))
}

/// The whole report (`accounting::report`'s, on two cores): the window's versions read
/// and replayed on a connection and thread of their own while its samples are read on this
/// one (the samples are most of the memory, kept in this thread's allocator); then its usage
/// and its trouble found at once. `None` before the history.
fn whole(s: &HistoryStore, ask: &Ask) -> Result<Option<WindowReport>, HistoryError> {
    let other = s.another_reader()?;
    let tell = |store: &HistoryStore| {
        store.window(ask.from, ask.to).map(|w| {
            w.map(|(start, versions)| accounting::tell(&start, &versions, ask.from, ask.to))
        })
    };
    let (story, samples) = std::thread::scope(|scope| {
        let telling = other.map(|o| scope.spawn(move || tell(&o)));
        let samples = s.all_ticks(early(ask.from), ask.to);
        let story = match telling {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err(gone("reading the versions"))),
            None => tell(s),
        };
        (story, samples)
    });
    let Some(story) = story? else {
        return Ok(None);
    };
    let samples = samples?;
    let (usage, trouble) = std::thread::scope(|scope| {
        let trouble = scope.spawn(|| accounting::trouble::find(&story, &samples, ask.pending_ms));
        let usage = accounting::account(&story, &samples, ask.idle);
        (usage, trouble.join().map_err(|_| gone("finding trouble")))
    });
    Ok(Some(WindowReport {
        from: ask.from,
        to: ask.to,
        history_from: None,
        usage,
        trouble: trouble?,
        actions: story.actions,
        flags: Vec::new(),
    }))
}

/// A helper thread of a report that failed.
fn gone(what: &str) -> HistoryError {
    HistoryError::Damaged(format!("the report failed {what}"))
}

/// Samples from this long before a window speak for its start.
fn early(from: Timestamp) -> Timestamp {
    Timestamp(from.0.saturating_sub(accounting::usage::HOLD_MS))
}

/// The usage over `from..to`: the hours rolled up with `idle`'s threshold added up, and the
/// rest (the ends of the window, hours not rolled up) replayed.
fn usage(
    s: &HistoryStore,
    from: Timestamp,
    to: Timestamp,
    idle: IdleRule,
) -> Result<GpuTime, HistoryError> {
    let rolled = if idle.idle_below_pct == ROLLUP_IDLE_BELOW {
        s.rollups(from, to, idle.idle_below_pct)?
    } else {
        Vec::new()
    };
    let mut total = Tally::default();
    let mut at = from;
    for (hour, rolled) in rolled {
        if at < hour {
            total.then(replay(s, at, hour, idle)?);
        }
        rolled.add_to(&mut total)?;
        at = Timestamp(hour.0 + CHUNK_MS);
    }
    if at < to {
        total.then(replay(s, at, to, idle)?);
    }
    Ok(usage::settle(total, idle))
}

/// The usage of `from..to` tallied from its versions and samples.
fn replay(
    s: &HistoryStore,
    from: Timestamp,
    to: Timestamp,
    idle: IdleRule,
) -> Result<Tally, HistoryError> {
    let Some((start, versions)) = s.window(from, to)? else {
        return Ok(Tally::default());
    };
    let samples = s.all_ticks(early(from), to)?;
    let story = accounting::tell(&start, &versions, from, to);
    Ok(usage::tally(&story, &samples, idle.idle_below_pct))
}

/// `GET /v1/history/report?from=&to=[&idle_below=PCT][&idle_for=SECS][&pending_over=SECS][&parts=usage]`.
async fn report(
    State(routes): State<HistoryRoutes>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, crate::endpoint::api_error::ApiError> {
    only(
        &q,
        &[
            "from",
            "to",
            "idle_below",
            "idle_for",
            "pending_over",
            "parts",
        ],
    )?;
    let parts = match q.get("parts").map(String::as_str) {
        None | Some("all") => Parts::All,
        Some("usage") => Parts::Usage,
        Some(other) => {
            return Err(bad(format!(
                "`parts` is `{other}`: it must be `all` (the default) or `usage` (the usage table alone)"
            )));
        }
    };
    let history = history(&routes)?;
    let from = time(&q, "from")?;
    // The window ends now at the latest: what has not happened is not accounted.
    let to = time(&q, "to")?.min(SystemClock.now());
    if from > to {
        return Err(bad("`from` is after `to` (or after now)"));
    }
    let defaults = IdleRule::default();
    let ask = Ask {
        from,
        to,
        idle: IdleRule {
            idle_below_pct: u32::try_from(number(
                &q,
                "idle_below",
                0..=100,
                u64::from(defaults.idle_below_pct),
            )?)
            .unwrap_or(100),
            idle_for_ms: number(
                &q,
                "idle_for",
                0..=86_400 * 366,
                defaults.idle_for_ms / 1000,
            )? * 1000,
        },
        pending_ms: number(&q, "pending_over", 0..=86_400 * 366, PENDING_MS / 1000)? * 1000,
    };
    // A connection of its own: a report over days must not hold up seeks.
    let answer = history
        .read_apart(move |s| window_report(s, ask, parts))
        .await
        .map_err(failed)?;
    match answer {
        Ok(r) => Ok(axum::Json(r).into_response()),
        Err(begins) => {
            let detail = match begins {
                Some(b) => format!(
                    "no history in the window ending {}: this endpoint's history begins at {}",
                    crate::clock::date_time(to, &jiff::tz::TimeZone::UTC),
                    crate::clock::date_time(b, &jiff::tz::TimeZone::UTC),
                ),
                None => "no history yet: nothing has been recorded".to_string(),
            };
            let body = BeforeHistory {
                error: hw::BEFORE_HISTORY.to_string(),
                detail,
                history_from: begins,
            };
            Ok((StatusCode::NOT_FOUND, axum::Json(body)).into_response())
        }
    }
}

/// The report's route, for a router whose state gives [`HistoryRoutes`].
pub fn routes<S>() -> axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
    HistoryRoutes: axum::extract::FromRef<S>,
{
    axum::Router::new().route(crate::accounting::REPORT_PATH, axum::routing::get(report))
}
