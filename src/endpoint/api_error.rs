//! The API's error answer: a status and the JSON `ErrorBody` (`{error, detail, rule?,
//! rule_number?, field?}`, plus the reasons of a claim that does not fit), and how each
//! engine failure maps to one. A leaf: the routes and their helpers import it, it imports
//! none of them.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::endpoint::engine::EngineError;
use crate::placement::{FleetError, MoveError, NoFit};
use crate::request::{RequestError, Rule};
use crate::scheduler::RenewError;
use crate::wire::ErrorBody;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    // Boxed: every handler returns `Result<_, ApiError>`, and the body is large.
    body: Box<ErrorBody>,
    /// The body was not read to its end, so the connection cannot carry another request.
    close: bool,
}

impl ApiError {
    fn with(status: StatusCode, body: ErrorBody) -> ApiError {
        ApiError {
            status,
            body: Box::new(body),
            close: false,
        }
    }

    pub(crate) fn new(status: StatusCode, error: &str, detail: impl Into<String>) -> ApiError {
        ApiError::with(status, ErrorBody::new(error, detail))
    }

    /// The same, closing the connection after the answer (its body was not read to its end).
    pub(crate) fn closing(status: StatusCode, error: &str, detail: impl Into<String>) -> ApiError {
        ApiError {
            close: true,
            ..ApiError::new(status, error, detail)
        }
    }

    pub(crate) fn invalid(rule: Rule, field: Option<&str>, detail: impl Into<String>) -> ApiError {
        ApiError::from(RequestError {
            rule,
            field: field.map(str::to_string),
            message: detail.into(),
        })
    }

    pub(crate) fn no_fit(no: &NoFit, lead: Option<&str>) -> ApiError {
        ApiError::with(StatusCode::CONFLICT, ErrorBody::no_fit(no, lead))
    }

    pub(crate) fn not_found(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", detail)
    }
}

/// 500 `snapshot_failed`: the snapshot could not be written.
pub(crate) fn serialize_failed(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "snapshot_failed",
        format!("the snapshot could not be written: {e}"),
    )
}

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> ApiError {
        ApiError::with(StatusCode::UNPROCESSABLE_ENTITY, ErrorBody::invalid(&e))
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        match e {
            EngineError::Move(MoveError::UnknownClaim(id))
            | EngineError::Renew(RenewError::UnknownClaim(id)) => {
                ApiError::not_found(format!("no claim {id}"))
            }
            EngineError::Move(MoveError::NoFit(no)) => {
                ApiError::no_fit(&no, Some("the move target does not fit"))
            }
            EngineError::Move(e @ MoveError::NothingToMove(_)) => {
                ApiError::new(StatusCode::CONFLICT, "nothing_to_move", e.to_string())
            }
            EngineError::Renew(e @ RenewError::NoLease(_)) => {
                ApiError::new(StatusCode::CONFLICT, "no_lease", e.to_string())
            }
            EngineError::Fleet(
                e @ (FleetError::UnknownNode(_) | FleetError::UnknownDevice { .. }),
            ) => ApiError::not_found(e.to_string()),
            EngineError::Fleet(e) => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            EngineError::Invalid(detail) => ApiError::invalid(Rule::OutOfRange, None, detail),
            EngineError::UnknownProject(detail) => ApiError::not_found(detail),
            EngineError::Store(e) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_failed",
                e.to_string(),
            ),
            e @ EngineError::KeyReused(_) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                e.to_string(),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(*self.body)).into_response();
        if self.close {
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        r
    }
}
