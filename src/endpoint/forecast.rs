//! `GET /v1/forecast` (every waiting claim's expected start) and `POST /v1/preview` (what
//! an action would do). Both run off the claim path: a request takes a copy of the
//! scheduler under its lock and works on the copy on a blocking thread. A forecast is kept
//! for its revision (and at most `REUSE_MS`), so watchers asking again cost nothing; an
//! idle endpoint computes none. The hold times learned from the recorded history are read
//! again at most every `HOLDS_MS`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::api_error::{ApiError, serialize_failed};
use super::api_state::ApiState;
use super::body::body_json;
use super::forecast_cache::lock;
use super::gate::Actor;
use crate::clock::Timestamp;
use crate::forecast::{HoldTimes, forecast, learn, preview};
use crate::wire::forecast::{Forecast, PreviewAction};

/// A forecast is answered again for the same revision for this long: time passing moves
/// learned ends (what a holder has held already) and overdue ones.
pub const REUSE_MS: u64 = 10_000;
/// The hold-time table is rebuilt from the history at most this often.
pub const HOLDS_MS: u64 = 600_000;
/// How far back the history is read for hold times.
pub const HOLDS_WINDOW_MS: u64 = 3 * 86_400_000;

fn failed(what: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "forecast_failed",
        format!("{what} failed: {e}"),
    )
}

/// The hold-time table: the last one while fresh, else learned again from the recorded
/// history (an empty table without one, or when it cannot be read: declared durations
/// and leases still bound holders).
async fn hold_times(st: &ApiState, now: Timestamp) -> Arc<HoldTimes> {
    let fresh = lock(&st.forecasts.holds)
        .as_ref()
        .filter(|(at, _)| now.millis_since(*at) < HOLDS_MS && *at <= now)
        .map(|(_, h)| Arc::clone(h));
    if let Some(h) = fresh {
        return h;
    }
    let table = match &st.history {
        Some(history) => {
            let from = Timestamp(now.0.saturating_sub(HOLDS_WINDOW_MS));
            let read = history
                .read_apart(move |s| {
                    Ok(s.window(from, now)?
                        .map(|(start, versions)| learn(&start, &versions)))
                })
                .await;
            match read {
                Ok(learned) => learned.unwrap_or_default(),
                Err(e) => {
                    tracing::warn!("forecast: hold times not learned from the history: {e}");
                    HoldTimes::default()
                }
            }
        }
        None => HoldTimes::default(),
    };
    let table = Arc::new(table);
    *lock(&st.forecasts.holds) = Some((now, Arc::clone(&table)));
    table
}

/// The forecast of the state now: the last one while its revision stands and it is
/// recent, else computed on a copy.
pub(crate) async fn current(st: &ApiState) -> Result<Arc<Forecast>, ApiError> {
    let _one = st.forecasts.busy.lock().await;
    let revision = st.engine.state_key().revision;
    let now = st.engine.clock().now();
    let kept = lock(&st.forecasts.last)
        .as_ref()
        .filter(|(r, f)| *r == revision && now.millis_since(f.at) < REUSE_MS && f.at <= now)
        .map(|(_, f)| Arc::clone(f));
    if let Some(f) = kept {
        return Ok(f);
    }
    let holds = hold_times(st, now).await;
    let engine = st.engine.clone();
    let f = tokio::task::spawn_blocking(move || {
        let (copy, now) = engine.scheduler_copy(false);
        forecast(&copy, now, &holds)
    })
    .await
    .map_err(|e| failed("the forecast", e))?;
    let f = Arc::new(f);
    *lock(&st.forecasts.last) = Some((revision, Arc::clone(&f)));
    Ok(f)
}

/// `GET /v1/forecast`.
pub(crate) async fn forecast_route(State(st): State<ApiState>) -> Result<Response, ApiError> {
    let f = current(&st).await?;
    Ok((StatusCode::OK, axum::Json(&*f)).into_response())
}

/// `POST /v1/preview`: the action as JSON (`{"action": "release", "claim": 17}`...); the
/// answer says what it would do. Nothing changes.
pub(crate) async fn preview_route(
    State(st): State<ApiState>,
    Extension(actor): Extension<Actor>,
    body: Body,
) -> Result<Response, ApiError> {
    let v = body_json(body, false).await?;
    let action: PreviewAction = serde_json::from_value(v).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_preview",
            format!(
                "the preview body is not an action: {e}; send {{\"action\": ...}} with one of \
                 release (claim), move (claim, node, devices), cordon or uncordon (node, \
                 index), share (project, share), reset (project), claim (request)"
            ),
        )
    })?;
    let now = st.engine.clock().now();
    let holds = hold_times(&st, now).await;
    let engine = st.engine.clone();
    let p = tokio::task::spawn_blocking(move || {
        let (copy, now) = engine.scheduler_copy(true);
        preview::preview(&copy, &action, &holds, &actor.0, now)
    })
    .await
    .map_err(|e| failed("the preview", e))?;
    let json = serde_json::to_vec(&p).map_err(serialize_failed)?;
    Ok((
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json,
    )
        .into_response())
}
