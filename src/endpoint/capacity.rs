//! `GET /v1/capacity`: the current version's capacity (`wire::capacity`), derived once per
//! snapshot version and shared by every reader, with its digest as `ETag`; 304 when
//! `If-None-Match` names it. A fleet claim reads this instead of the whole snapshot.

use std::sync::{Arc, PoisonError};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::endpoint::api_error::{ApiError, serialize_failed};
use crate::endpoint::api_state::{ApiState, BuiltCapacity};
use crate::wire::SnapshotVersion;
use crate::wire::capacity::{CapacitySummary, capacity_etag};

fn cached(st: &ApiState, version: SnapshotVersion) -> Option<Arc<BuiltCapacity>> {
    st.capacity
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .filter(|b| b.version == version)
        .cloned()
}

/// `GET /v1/capacity`.
pub(crate) async fn capacity(
    State(st): State<ApiState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let current = st.versions.current().await.map_err(serialize_failed)?;
    let built = if let Some(b) = cached(&st, current.version) {
        b
    } else {
        let json = serde_json::to_vec(&CapacitySummary::of(&current.snapshot))
            .map_err(serialize_failed)?;
        let etag = HeaderValue::from_str(&capacity_etag(&json))
            .map_err(|e| serialize_failed(e.to_string()))?;
        let built = Arc::new(BuiltCapacity {
            version: current.version,
            etag,
            json: Bytes::from(json),
        });
        *st.capacity.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&built));
        built
    };
    let tag = built.etag.to_str().unwrap_or_default();
    let known = crate::endpoint::conditional::unchanged_for(&headers, tag);
    if known {
        return Ok((
            StatusCode::NOT_MODIFIED,
            [(header::ETAG, built.etag.clone())],
        )
            .into_response());
    }
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::ETAG, built.etag.clone()),
        ],
        Body::from(built.json.clone()),
    )
        .into_response())
}
