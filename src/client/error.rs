//! What can go wrong talking to an endpoint, and the CLI's exit code for each.

use crate::placement::NoFit;
use crate::request::RequestError;
use crate::wire;
use reqwest::{StatusCode, header};

/// What went wrong talking to an endpoint.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ClientError {
    /// The endpoint URL is not usable.
    #[error("bad endpoint `{url}`: {detail}")]
    BadEndpoint {
        /// As given.
        url: String,
        /// Why.
        detail: String,
    },
    /// No connection, or it broke before an answer came.
    #[error("cannot reach {endpoint}: {detail}")]
    Unreachable {
        /// The endpoint.
        endpoint: String,
        /// Why.
        detail: String,
        /// Whether the request may have reached the endpoint: `false` only when surely
        /// nothing was sent (no connection was made), so a claim is known not placed.
        sent: bool,
    },
    /// No answer in time.
    #[error("{endpoint} did not answer within {secs} s")]
    Timeout {
        /// The endpoint.
        endpoint: String,
        /// The timeout.
        secs: u64,
    },
    /// 401: no token, or a wrong one.
    #[error("unauthorized: {detail}")]
    Unauthorized {
        /// The endpoint's explanation.
        detail: String,
    },
    /// 403: a read token on a mutation.
    #[error("forbidden: {detail}")]
    Forbidden {
        /// The endpoint's explanation.
        detail: String,
    },
    /// 400, 413 or 422: the request was refused as invalid.
    #[error("invalid request{}: {detail}", rule.as_ref().map(|r| format!(" (rule {r})")).unwrap_or_default())]
    Invalid {
        /// The broken rule's code (`unknown-field`...), for 422.
        rule: Option<String>,
        /// Its number in docs/design.md#3-validation-rules.
        rule_number: Option<u8>,
        /// The field at fault.
        field: Option<String>,
        /// What was wrong and what is allowed.
        detail: String,
    },
    /// 409 `does_not_fit`: no device can take it now (or ever, when `infeasible`).
    #[error("{detail}")]
    DoesNotFit {
        /// The summary line.
        detail: String,
        /// One line per node.
        reasons: Vec<String>,
        /// Waiting will not help.
        infeasible: bool,
        /// The structured reasons, when the endpoint sent them.
        no_fit: Option<NoFit>,
    },
    /// Another 409 (nothing to move, no lease...).
    #[error("{detail}")]
    Conflict {
        /// The error code.
        error: String,
        /// The endpoint's explanation.
        detail: String,
    },
    /// What answered is not a gpuboard endpoint (a web page, another service).
    #[error("{endpoint} is not a gpuboard endpoint: it answered {answered}")]
    NotGpuboard {
        /// The endpoint as named.
        endpoint: String,
        /// What answered: status and the start of its body.
        answered: String,
    },
    /// 404.
    #[error("not found: {detail}")]
    NotFound {
        /// The endpoint's explanation.
        detail: String,
    },
    /// 5xx or an unexpected status.
    #[error("endpoint error (HTTP {status}): {detail}")]
    Server {
        /// The status code.
        status: u16,
        /// The endpoint's explanation.
        detail: String,
    },
    /// The answer could not be read.
    #[error("unreadable answer from {endpoint}: {detail}")]
    Decode {
        /// The endpoint.
        endpoint: String,
        /// Why.
        detail: String,
    },
}

impl ClientError {
    /// Whether the request surely never reached the endpoint (no connection was made).
    pub fn never_sent(&self) -> bool {
        matches!(self, ClientError::Unreachable { sent: false, .. })
    }

    /// Whether this is the answer to a keyed claim whose first request with that key is
    /// still being committed (it will land, or fail with the store): ask again, same key.
    pub fn in_flight(&self) -> bool {
        matches!(self, ClientError::Conflict { error, .. } if error == wire::IN_FLIGHT)
    }

    /// The CLI's exit code for this error (README, "Exit codes").
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Invalid { .. } | ClientError::BadEndpoint { .. } => 3,
            ClientError::DoesNotFit { .. } => 4,
            ClientError::Unreachable { .. }
            | ClientError::Timeout { .. }
            | ClientError::NotGpuboard { .. } => 5,
            ClientError::Unauthorized { .. } | ClientError::Forbidden { .. } => 6,
            ClientError::NotFound { .. } => 7,
            ClientError::Conflict { .. } => 8,
            ClientError::Server { .. } | ClientError::Decode { .. } => 1,
        }
    }
}

impl From<RequestError> for ClientError {
    /// A request refused before it was sent, by the same validator the endpoint runs.
    fn from(e: RequestError) -> ClientError {
        ClientError::Invalid {
            rule: Some(e.rule.code().to_string()),
            rule_number: Some(e.rule.number()),
            field: e.field,
            detail: e.message,
        }
    }
}

/// What answered where a gpuboard endpoint was expected, in a few words: its status, its
/// `Server` and its content type (`HTTP 404 Not Found from nginx/1.25, text/html, 153
/// bytes`). Its body is never quoted: a web page's markup tells an operator nothing.
pub(super) fn foreign_answer(
    status: StatusCode,
    headers: &header::HeaderMap,
    len: usize,
    markup: bool,
) -> String {
    use std::fmt::Write as _;
    let word = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.chars()
                    .filter(|c| !c.is_control())
                    .take(60)
                    .collect::<String>()
            })
            .filter(|v| !v.trim().is_empty())
    };
    let mut text = format!("HTTP {status}");
    if let Some(server) = word(header::SERVER) {
        let _ = write!(text, " from {server}");
    }
    let kind = word(header::CONTENT_TYPE)
        .map(|t| t.split(';').next().unwrap_or_default().trim().to_string())
        .or_else(|| markup.then(|| "a markup page".to_string()));
    match (kind, len) {
        (_, 0) => text.push_str(", empty"),
        (Some(kind), n) => {
            let _ = write!(text, ", {kind}, {n} bytes");
        }
        (None, n) => {
            let _ = write!(text, ", {n} bytes");
        }
    }
    text
}

/// The error of a gpuboard endpoint's non-2xx answer, from its status and `wire::ErrorBody`.
pub(super) fn error_from(status: StatusCode, bytes: &[u8]) -> ClientError {
    let body: wire::ErrorBody = serde_json::from_slice(bytes).unwrap_or_else(|_| wire::ErrorBody {
        detail: String::from_utf8_lossy(&bytes[..bytes.len().min(500)]).into_owned(),
        ..wire::ErrorBody::default()
    });
    let detail = if body.detail.is_empty() {
        format!("HTTP {status}")
    } else {
        body.detail
    };
    match status {
        StatusCode::UNAUTHORIZED => ClientError::Unauthorized { detail },
        StatusCode::FORBIDDEN => ClientError::Forbidden { detail },
        StatusCode::NOT_FOUND => ClientError::NotFound { detail },
        StatusCode::BAD_REQUEST
        | StatusCode::PAYLOAD_TOO_LARGE
        | StatusCode::UNPROCESSABLE_ENTITY => ClientError::Invalid {
            rule: body.rule,
            rule_number: body.rule_number,
            field: body.field,
            detail,
        },
        StatusCode::CONFLICT if body.error == "does_not_fit" => ClientError::DoesNotFit {
            detail,
            reasons: body.reasons.unwrap_or_default(),
            infeasible: body.infeasible.unwrap_or(false),
            no_fit: body.no_fit,
        },
        StatusCode::CONFLICT => ClientError::Conflict {
            error: body.error,
            detail,
        },
        s => ClientError::Server {
            status: s.as_u16(),
            detail,
        },
    }
}
