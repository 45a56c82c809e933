//! `gpuboard record`'s read-only API: `/healthz`, `/v1/snapshot` (the latest, or `?at=`),
//! the history routes and the report, so the console rewinds a recorded engine as an
//! endpoint; and `/metrics`, the flags its GPUs carry now.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{FromRef, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::api_error::ApiError;
use super::history_api::{self, HistoryRoutes, snapshot_at};
use super::history_recorder::RecordedHistory;
use super::report_api;

type Params = Query<HashMap<String, String>>;

/// What `gpuboard record`'s listener serves from: the history, and the latest snapshot.
#[derive(Clone, Debug)]
pub struct RecordState {
    /// The history it records.
    pub history: Arc<RecordedHistory>,
    /// The source's latest snapshot, once one was read.
    pub latest: Arc<std::sync::Mutex<Option<Arc<crate::snapshot::Snapshot>>>>,
    /// It records the flags of several sources joined (`--config`), and no snapshot.
    pub joined: bool,
}

impl FromRef<RecordState> for HistoryRoutes {
    fn from_ref(st: &RecordState) -> HistoryRoutes {
        HistoryRoutes(Some(Arc::clone(&st.history)))
    }
}

/// The router: the history and report routes over `state`, and what only `record` serves.
pub fn record_router(state: RecordState) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route(crate::wire::paths::HEALTHZ, get(record_health))
        .route(crate::wire::paths::SNAPSHOT, get(record_snapshot))
        .route("/metrics", get(record_metrics))
        .merge(history_api::routes())
        .merge(report_api::routes())
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such route; `gpuboard record` serves /v1/snapshot, /v1/history and /metrics only",
            )
        })
        .with_state(state)
}

async fn record_health(State(st): State<RecordState>) -> Response {
    match st.history.stopped() {
        Some(why) => format!("ok\nhistory: {why}\n").into_response(),
        None => "ok\n".into_response(),
    }
}

/// `gpuboard_gpu_flagged`, as a serve's `/metrics` has it, for the recorded GPUs.
async fn record_metrics(State(st): State<RecordState>) -> Result<Response, ApiError> {
    let mut reg = prometheus_client::registry::Registry::with_prefix("gpuboard");
    super::metrics::flagged(&mut reg, &st.history.open_flags());
    super::metrics::exposition(&reg)
}

async fn record_snapshot(
    State(st): State<RecordState>,
    Query(q): Params,
) -> Result<Response, ApiError> {
    if q.contains_key("at") {
        return snapshot_at(&HistoryRoutes(Some(Arc::clone(&st.history))), &q).await;
    }
    let latest = st
        .latest
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    match latest {
        Some(snap) => Ok(axum::Json(&*snap).into_response()),
        None if st.joined => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "flags_only",
            "this `gpuboard record --config` keeps its sources' flags, not their snapshots: \
             read its /v1/history/report or /metrics",
        )),
        None => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_yet",
            "the source has not been read yet",
        )),
    }
}
