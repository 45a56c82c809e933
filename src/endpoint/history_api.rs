//! The history routes (`wire::history` has the contract): `GET /v1/snapshot?at=`,
//! `/v1/history`, `/v1/history/changes`, `/v1/history/seek`, `/v1/history/telemetry`.
//! Reads only; the read role may call them. Served by `gpuboard serve` behind its tokens,
//! and by `gpuboard record` on its own listener.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{FromRef, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::clock::Timestamp;
use crate::endpoint::api_error::ApiError;
use crate::endpoint::api_state::ApiState;
use crate::endpoint::history_recorder::RecordedHistory;
use crate::snapshot::SourceWarning;
use crate::store::RecordingGap;
use crate::store::history::{HistoryError, StateAt};
use crate::wire::history::{
    self as hw, BeforeHistory, Changes, DeviceSeries, Direction, GpuRef, MAX_CHANGES, MAX_SAMPLES,
    Target, parse_time,
};

/// What the history routes need: the history, when this endpoint records one.
#[derive(Clone, Debug)]
pub struct HistoryRoutes(pub Option<Arc<RecordedHistory>>);

impl FromRef<ApiState> for HistoryRoutes {
    fn from_ref(st: &ApiState) -> HistoryRoutes {
        HistoryRoutes(st.history.clone())
    }
}

type Params = Query<HashMap<String, String>>;

pub(super) fn bad(detail: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_query", detail)
}

pub(super) fn history(routes: &HistoryRoutes) -> Result<Arc<RecordedHistory>, ApiError> {
    routes.0.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no_history",
            "this endpoint records no history (it was started with --history-days 0)",
        )
    })
}

pub(super) fn failed(e: HistoryError) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "history_failed",
        format!("the history could not be read: {e}"),
    )
}

pub(super) fn time(q: &HashMap<String, String>, name: &str) -> Result<Timestamp, ApiError> {
    let raw = q.get(name).ok_or_else(|| {
        bad(format!(
            "`{name}` is required: a time (ms since the epoch or RFC 3339)"
        ))
    })?;
    parse_time(raw).map_err(|e| bad(format!("`{name}`: {e}")))
}

/// Refuses parameters the route does not take, naming those it does.
pub(super) fn only(q: &HashMap<String, String>, allowed: &[&str]) -> Result<(), ApiError> {
    match q.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(bad(format!(
            "unknown parameter `{k}`; allowed: {}",
            allowed.join(", ")
        ))),
        None => Ok(()),
    }
}

/// At most one of `gpu`, `claim`, `project`.
fn target(q: &HashMap<String, String>) -> Result<Option<Target>, ApiError> {
    let mut found = Vec::new();
    if let Some(g) = q.get("gpu") {
        found.push(Target::Gpu(g.parse::<GpuRef>().map_err(bad)?));
    }
    if let Some(c) = q.get("claim") {
        let id = c
            .parse::<u64>()
            .map_err(|_| bad(format!("claim `{c}` must be a claim id (a whole number)")))?;
        found.push(Target::Claim(crate::ids::ClaimId(id)));
    }
    if let Some(p) = q.get("project") {
        found.push(Target::Project(p.clone()));
    }
    if found.len() > 1 {
        return Err(bad("give at most one of `gpu`, `claim`, `project`"));
    }
    Ok(found.pop())
}

fn window(q: &HashMap<String, String>) -> Result<(Timestamp, Timestamp), ApiError> {
    let (from, to) = (time(q, "from")?, time(q, "to")?);
    if from > to {
        return Err(bad("`from` is after `to`"));
    }
    Ok((from, to))
}

/// `GET /v1/snapshot?at=TIME` (the snapshot route hands over when `at` is given).
pub(crate) async fn snapshot_at(
    routes: &HistoryRoutes,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    only(q, &["at"])?;
    let history = history(routes)?;
    let at = time(q, "at")?;
    let ongoing = history.stopped_gap().filter(|g| g.covers(at));
    let (state, from, kept) = history
        .read(move |s| Ok((s.state_at(at)?, s.from()?, s.gap_at(at)?)))
        .await
        .map_err(failed)?;
    let gap = kept.or(ongoing);
    let from_header = from.and_then(|f| HeaderValue::from_str(&f.0.to_string()).ok());
    match state {
        StateAt::Before(from) => {
            let detail = match from {
                Some(f) => format!(
                    "no history at {}: this endpoint's history begins at {} ({} ms)",
                    at.0,
                    crate::clock::date_time(f, &jiff::tz::TimeZone::UTC),
                    f.0
                ),
                None => "no history yet: nothing has been recorded".to_string(),
            };
            let body = BeforeHistory {
                error: hw::BEFORE_HISTORY.to_string(),
                detail,
                history_from: from,
            };
            Ok((StatusCode::NOT_FOUND, axum::Json(body)).into_response())
        }
        StateAt::Shown(mut snap, shown) => {
            if let Some(gap) = &gap {
                snap.endpoint.warnings.push(gap_warning(gap));
            }
            let mut r = axum::Json(snap).into_response();
            let h = r.headers_mut();
            if let Ok(v) = HeaderValue::from_str(&shown.0.to_string()) {
                h.insert(hw::AT_HEADER, v);
            }
            if let Some(v) = from_header {
                h.insert(hw::HISTORY_FROM_HEADER, v);
            }
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            Ok(r)
        }
    }
}

/// What a state asked for inside a gap in the recording says: it is the last one recorded
/// before, and what happened meanwhile is not known.
fn gap_warning(gap: &RecordingGap) -> SourceWarning {
    let utc = &jiff::tz::TimeZone::UTC;
    let end = gap.end.map_or_else(
        || "now (still stopped)".to_string(),
        |e| crate::clock::date_time(e, utc),
    );
    SourceWarning {
        section: "history".to_string(),
        path: "history.sqlite".to_string(),
        found: format!(
            "nothing was recorded from {} to {end} (recording {})",
            crate::clock::date_time(gap.start, utc),
            gap.why
        ),
        left_out: "what changed in that time: this is the state recorded last before it"
            .to_string(),
    }
}

/// `GET /v1/history`.
pub(crate) async fn info(
    State(routes): State<HistoryRoutes>,
    Query(q): Params,
) -> Result<Response, ApiError> {
    only(&q, &[])?;
    let history = history(&routes)?;
    let info = history.info().await.map_err(failed)?;
    Ok(axum::Json(info).into_response())
}

/// `GET /v1/history/changes`.
pub(crate) async fn changes(
    State(routes): State<HistoryRoutes>,
    Query(q): Params,
) -> Result<Response, ApiError> {
    only(&q, &["from", "to", "gpu", "claim", "project", "limit"])?;
    let history = history(&routes)?;
    let (from, to) = window(&q)?;
    let target = target(&q)?;
    let limit = match q.get("limit") {
        None => MAX_CHANGES,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_CHANGES).contains(n))
            .ok_or_else(|| {
                bad(format!(
                    "`limit` must be a whole number from 1 to {MAX_CHANGES}"
                ))
            })?,
    };
    let (changes, truncated) = history
        .read(move |s| s.changes(from, to, target.as_ref(), limit))
        .await
        .map_err(failed)?;
    Ok(axum::Json(Changes {
        from,
        to,
        changes,
        truncated,
    })
    .into_response())
}

/// `GET /v1/history/seek`.
pub(crate) async fn seek(
    State(routes): State<HistoryRoutes>,
    Query(q): Params,
) -> Result<Response, ApiError> {
    only(&q, &["at", "dir", "gpu", "claim", "project"])?;
    let history = history(&routes)?;
    let at = time(&q, "at")?;
    let dir = match q.get("dir").map(String::as_str) {
        Some("next") => Direction::Next,
        Some("prev") => Direction::Prev,
        _ => return Err(bad("`dir` must be `next` or `prev`")),
    };
    let target = target(&q)?;
    let what = target
        .as_ref()
        .map_or_else(|| "anything".to_string(), ToString::to_string);
    let found = history
        .read(move |s| s.seek(at, dir, target.as_ref()))
        .await
        .map_err(failed)?;
    match found {
        Some(seek) => Ok(axum::Json(seek).into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_change",
            format!(
                "{} touching {what} {} {}",
                hw::NO_CHANGE,
                if dir == Direction::Next {
                    "after"
                } else {
                    "before"
                },
                at.0
            ),
        )),
    }
}

/// `GET /v1/history/telemetry`.
pub(crate) async fn telemetry(
    State(routes): State<HistoryRoutes>,
    Query(q): Params,
) -> Result<Response, ApiError> {
    only(&q, &["gpu", "from", "to"])?;
    let history = history(&routes)?;
    let gpu: GpuRef = q
        .get("gpu")
        .ok_or_else(|| bad("`gpu` is required: NODE:INDEX"))?
        .parse()
        .map_err(bad)?;
    let (from, to) = window(&q)?;
    let name = gpu.to_string();
    let samples = history
        .read(move |s| s.samples(&gpu, from, to, MAX_SAMPLES + 1, false))
        .await
        .map_err(failed)?;
    let truncated = samples.len() > MAX_SAMPLES;
    Ok(axum::Json(DeviceSeries {
        gpu: name,
        from,
        to,
        samples: samples
            .iter()
            .take(MAX_SAMPLES)
            .map(crate::history::DeviceSample::chart)
            .collect(),
        truncated,
    })
    .into_response())
}

/// The history routes, for a router whose state gives [`HistoryRoutes`] (the report's are
/// `report_api::routes`).
pub fn routes<S>() -> axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
    HistoryRoutes: FromRef<S>,
{
    use axum::routing::get;
    axum::Router::new()
        .route(hw::paths::HISTORY, get(info))
        .route(hw::paths::CHANGES, get(changes))
        .route(hw::paths::SEEK, get(seek))
        .route(hw::paths::TELEMETRY, get(telemetry))
}
