//! The HTTP API v1 (docs/design.md#8-http-api) over an `Engine`: axum on tokio.
//!
//! Errors are JSON `{error, detail, rule?, rule_number?, field?}`; a claim that does not
//! fit answers 409 with the reasons both as lines for people and as structured data.
//! Requests are authenticated before their body is read; bodies are size-limited.

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use tower_http::compression::CompressionLayer;

use crate::endpoint::api_error::{ApiError, serialize_failed};
use crate::endpoint::body::{body_as, body_json, no_body};
use crate::endpoint::engine::{Keyed, KeyedAnswer};
use crate::endpoint::gate::{Actor, authorize};
use crate::endpoint::listener::ListenConfig;
use crate::ids::ClaimId;
use crate::request::{ClaimRequest, Rule};
use crate::scheduler::{Submitted, claim_view};
use crate::store::idempotency::{Fingerprint, KeyAnswer};
use crate::wire::{
    self, Cordoned, MoveBody, ProjectReset, Released, RenewBody, ShareBody, ShareSet, paths,
};

pub use super::api_state::ApiState;
pub use super::body::{BODY_TIMEOUT, MAX_BODY};

type ApiResult = Result<Response, ApiError>;

/// The router with every v1 route, auth and the request counter.
pub fn router(state: ApiState) -> Router {
    let guarded = Router::new()
        .route(paths::SNAPSHOT, get(snapshot))
        .route(paths::CAPACITY, get(super::capacity::capacity))
        .route(paths::WATCH, get(super::watch::watch))
        .route(paths::CLAIMS, post(create_claim))
        .route("/v1/claims/{id}", delete(release_claim))
        .route("/v1/claims/{id}/move", post(move_claim))
        .route("/v1/claims/{id}/renew", post(renew_claim))
        .route("/v1/devices/{node}/{index}/cordon", post(cordon))
        .route("/v1/devices/{node}/{index}/uncordon", post(uncordon))
        .route("/v1/projects/{name}", put(set_share))
        .route("/v1/projects/{name}/reset", post(reset_project))
        .route(paths::METRICS, get(super::metrics::metrics))
        .route(paths::FORECAST, get(super::forecast::forecast_route))
        .route(paths::PREVIEW, post(super::forecast::preview_route))
        .merge(super::history_api::routes())
        .merge(super::report_api::routes())
        .route_layer(middleware::from_fn_with_state(state.access(), authorize));
    Router::new()
        .route(paths::HEALTHZ, get(healthz))
        .merge(guarded)
        .fallback(|| async {
            ApiError::not_found("no such route; the API is under /v1 (see README, API section)")
        })
        .method_not_allowed_fallback(|method: Method| async move {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                format!("{method} is not allowed on this path (see README, API section)"),
            )
        })
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_responses,
        ))
        // gzip when asked; the default predicate leaves event streams and small answers be.
        .layer(CompressionLayer::new())
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` resolves; open streams get two seconds.
/// The accept loop is `listener::serve` with its default limits.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: ApiState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, state, ListenConfig::default(), shutdown).await
}

/// The same with the connection limits, timeouts and TLS of `config`.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    state: ApiState,
    config: ListenConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    super::listener::serve(listener, router(state), config, shutdown).await
}

/// `ok` while the endpoint accepts changes; 503 with the reason once a commit has failed.
/// While another process holds the database locked, 200 `degraded: ...`: the endpoint is
/// up, reads are answered, and changes commit once the lock goes, so nothing should
/// restart it or take its GPUs over (the answer still ends in `ok`, which the console's
/// attach probe looks for).
async fn healthz(State(st): State<ApiState>) -> Response {
    match st.engine.failure() {
        None => {
            let head = match st.engine.store_busy_for() {
                None => "ok
"
                .to_string(),
                Some(busy) => format!(
                    "degraded: database busy for {} s (another process holds its write lock); \
                     changes wait until it is released, reads ok
",
                    busy.as_secs()
                ),
            };
            // A stopped recording is said, but the scheduler is healthy: still 200.
            let stopped = st.history.as_ref().and_then(|h| h.stopped());
            match stopped.or_else(|| st.engine.history_stopped()) {
                Some(why) => format!(
                    "{head}history: {why}
"
                )
                .into_response(),
                None => head.into_response(),
            }
        }
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "failed: writing state failed ({reason}); the endpoint refuses changes until it \
                 is restarted\n"
            ),
        )
            .into_response(),
    }
}

async fn count_responses(State(st): State<ApiState>, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    st.responses
        .get_or_create(&vec![(
            "code".to_string(),
            resp.status().as_u16().to_string(),
        )])
        .inc();
    resp
}

fn claim_id(raw: &str) -> Result<ClaimId, ApiError> {
    raw.parse()
        .map_err(|_| ApiError::not_found(format!("no claim `{raw}`: claim ids are whole numbers")))
}

fn json_status(status: StatusCode, v: &impl serde::Serialize) -> Response {
    (status, axum::Json(v)).into_response()
}

/// The current version's cached JSON, with its `ETag`; `304` when `If-None-Match` has it.
async fn snapshot(
    State(st): State<ApiState>,
    Query(q): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> ApiResult {
    if q.contains_key("at") {
        let routes = super::history_api::HistoryRoutes(st.history.clone());
        return super::history_api::snapshot_at(&routes, &q).await;
    }
    let built = st.versions.current().await.map_err(serialize_failed)?;
    let etag = format!("\"{}\"", built.version);
    let known = crate::endpoint::conditional::unchanged_for(&headers, &etag);
    let etag = HeaderValue::from_str(&etag).map_err(|e| serialize_failed(e.to_string()))?;
    if known {
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response());
    }
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::ETAG, etag),
        ],
        Body::from(built.json.clone()),
    )
        .into_response())
}

async fn create_claim(
    State(st): State<ApiState>,
    Extension(actor): Extension<Actor>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let actor = in_move(&actor, &headers)?;
    let key = idempotency_key(&headers)?;
    let v = body_json(body, false).await?;
    let req = ClaimRequest::from_json(&v)?;
    if let Some(key) = key {
        return keyed_claim(&st, req, &actor, key).await;
    }
    match st.engine.submit(req, &actor).await? {
        Submitted::Placed(c) => {
            let mut r = json_status(StatusCode::CREATED, &claim_view(&c));
            if let Ok(loc) = HeaderValue::from_str(&format!("/v1/claims/{}", c.id)) {
                r.headers_mut().insert(header::LOCATION, loc);
            }
            Ok(r)
        }
        Submitted::Pending(c) => Ok(json_status(StatusCode::ACCEPTED, &claim_view(&c))),
        Submitted::Refused(no) => Err(ApiError::no_fit(&no, None)),
        Submitted::ShareZero(e) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "share_zero",
            e.to_string(),
        )),
    }
}

/// The request's idempotency key, if it sent one. Two keys are refused: which one the
/// client meant cannot be known, and keeping either could run the claim twice.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut all = headers.get_all(wire::IDEMPOTENCY_HEADER).iter();
    let Some(raw) = all.next() else {
        return Ok(None);
    };
    if all.next().is_some() {
        return Err(ApiError::invalid(
            Rule::WrongType,
            None,
            format!("give one {} header, not several", wire::IDEMPOTENCY_HEADER),
        ));
    }
    let raw = raw.to_str().unwrap_or("\u{fffd}");
    wire::idempotency_key(raw)
        .map(|k| Some(k.to_string()))
        .map_err(|e| ApiError::invalid(Rule::WrongType, None, e))
}

/// A claim with an idempotency key: run once, its answer recorded with it and replayed.
async fn keyed_claim(st: &ApiState, req: ClaimRequest, actor: &str, key: String) -> ApiResult {
    let canonical = wire::claim_body(&req).to_string();
    let keyed = Keyed {
        fingerprint: Fingerprint::of(actor, &canonical),
        key: key.clone(),
    };
    let answer = st.engine.submit_keyed(req, actor, keyed, answer_of).await?;
    let (recorded, replayed) = match answer {
        KeyedAnswer::First(a) => (a, false),
        KeyedAnswer::Replayed(a) => (a, true),
        KeyedAnswer::InFlight(a) => {
            let claim = a.claim.map(|c| format!(" (claim {c})")).unwrap_or_default();
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                wire::IN_FLIGHT,
                format!(
                    "the first request with {} `{key}`{claim} is still being committed; ask \
                     again with the same key for its answer",
                    wire::IDEMPOTENCY_HEADER
                ),
            ));
        }
    };
    let status = StatusCode::from_u16(recorded.status).unwrap_or(StatusCode::OK);
    let mut r = (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        recorded.body,
    )
        .into_response();
    if let Some(c) = recorded.claim.filter(|_| status == StatusCode::CREATED)
        && let Ok(loc) = HeaderValue::from_str(&format!("/v1/claims/{c}"))
    {
        r.headers_mut().insert(header::LOCATION, loc);
    }
    if replayed {
        r.headers_mut().insert(
            wire::IDEMPOTENT_REPLAY_HEADER,
            HeaderValue::from_static("true"),
        );
    }
    Ok(r)
}

/// The answer a claim's result gets, as recorded with its idempotency key.
fn answer_of(out: &Submitted) -> KeyAnswer {
    let (status, claim, body) = match out {
        Submitted::Placed(c) => (StatusCode::CREATED, Some(c.id), json_text(&claim_view(c))),
        Submitted::Pending(c) => (StatusCode::ACCEPTED, Some(c.id), json_text(&claim_view(c))),
        Submitted::Refused(no) => (
            StatusCode::CONFLICT,
            None,
            json_text(&wire::ErrorBody::no_fit(no, None)),
        ),
        Submitted::ShareZero(e) => (
            StatusCode::CONFLICT,
            None,
            json_text(&wire::ErrorBody::new("share_zero", e.to_string())),
        ),
    };
    KeyAnswer {
        status: status.as_u16(),
        claim,
        body,
    }
}

fn json_text(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| {
        serde_json::json!({"error": "serialize_failed", "detail": e.to_string()}).to_string()
    })
}

/// Who the audit names: the caller, with the move id of a cross-endpoint move.
fn in_move(actor: &Actor, headers: &HeaderMap) -> Result<String, ApiError> {
    let raw = headers
        .get(wire::MOVE_HEADER)
        .map(|v| v.to_str().unwrap_or("\u{fffd}"));
    wire::move_actor(&actor.0, raw).map_err(|e| ApiError::invalid(Rule::WrongType, None, e))
}

async fn release_claim(
    State(st): State<ApiState>,
    Extension(actor): Extension<Actor>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> ApiResult {
    let actor = in_move(&actor, &headers)?;
    let id = claim_id(&id)?;
    no_body(body, "DELETE /v1/claims/{id}").await?;
    // Idempotent for a claim that existed (already released: 200, `released: false`); an
    // id this endpoint never handed out is a mistake worth saying (404).
    if !st.engine.issued(id) {
        return Err(ApiError::not_found(format!(
            "no claim {id}: this endpoint never issued that id"
        )));
    }
    let released = st.engine.release(id, &actor).await?;
    Ok(json_status(
        StatusCode::OK,
        &Released {
            id,
            released: released.is_some(),
            claim: released.as_ref().map(claim_view),
        },
    ))
}

async fn move_claim(
    State(st): State<ApiState>,
    Extension(actor): Extension<Actor>,
    Path(id): Path<String>,
    body: Body,
) -> ApiResult {
    let id = claim_id(&id)?;
    let target = body_as::<MoveBody>(body, false).await?.target()?;
    let claim = st.engine.move_claim(id, target, &actor.0).await?;
    Ok(json_status(StatusCode::OK, &claim_view(&claim)))
}

async fn renew_claim(
    State(st): State<ApiState>,
    Extension(actor): Extension<Actor>,
    Path(id): Path<String>,
    body: Body,
) -> ApiResult {
    let id = claim_id(&id)?;
    let ttl = body_as::<RenewBody>(body, true).await?.lease()?;
    let claim = st.engine.renew(id, ttl, &actor.0).await?;
    Ok(json_status(StatusCode::OK, &claim_view(&claim)))
}

async fn set_cordon(
    st: &ApiState,
    actor: &Actor,
    node: &str,
    index: &str,
    cordoned: bool,
) -> ApiResult {
    let index: u32 = index.parse().map_err(|_| {
        ApiError::not_found(format!(
            "node `{node}` has no device `{index}`: indexes are whole numbers"
        ))
    })?;
    st.engine.cordon(node, index, cordoned, &actor.0).await?;
    Ok(json_status(
        StatusCode::OK,
        &Cordoned {
            node: node.to_string(),
            index,
            cordoned,
        },
    ))
}

async fn cordon(
    State(st): State<ApiState>,
    Extension(actor): Extension<Actor>,
    Path((node, index)): Path<(String, String)>,
    body: Body,
) -> ApiResult {
    no_body(body, "POST /v1/devices/{node}/{index}/cordon").await?;
    set_cordon(&st, &actor, &node, &index, true).await
}

async fn uncordon(
    State(st): State<ApiState>,
    Extension(actor): Extension<Actor>,
    Path((node, index)): Path<(String, String)>,
    body: Body,
) -> ApiResult {
    no_body(body, "POST /v1/devices/{node}/{index}/uncordon").await?;
    set_cordon(&st, &actor, &node, &index, false).await
}

fn project_name(name: &str) -> Result<(), ApiError> {
    crate::fairshare::ProjectName::new(name)
        .map(|_| ())
        .map_err(|e| ApiError::invalid(Rule::OutOfRange, Some("project"), e.to_string()))
}

async fn set_share(
    State(st): State<ApiState>,
    Extension(actor): Extension<Actor>,
    Path(name): Path<String>,
    body: Body,
) -> ApiResult {
    project_name(&name)?;
    let share = body_as::<ShareBody>(body, false).await?.share()?.get();
    st.engine.set_share(&name, share, &actor.0).await?;
    Ok(json_status(
        StatusCode::OK,
        &ShareSet {
            project: name,
            share,
        },
    ))
}

async fn reset_project(
    State(st): State<ApiState>,
    Extension(actor): Extension<Actor>,
    Path(name): Path<String>,
    body: Body,
) -> ApiResult {
    project_name(&name)?;
    no_body(body, "POST /v1/projects/{name}/reset").await?;
    st.engine.reset_project(&name, &actor.0).await?;
    Ok(json_status(
        StatusCode::OK,
        &ProjectReset {
            project: name,
            reset: true,
        },
    ))
}
