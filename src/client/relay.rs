//! API requests that travel another road than a socket of this process: a console acting on
//! a host it reads over SSH hands each request to `gpuboard relay` there, which makes it to
//! that host's serve with the token the SSH user can read, and hands back the serve's status
//! and body as they came. What travels is the API's own request (method, path, JSON body,
//! the idempotency and move headers) and answer (status, body), one JSON line each, so a
//! relayed answer is decoded and its errors read exactly as one off a socket.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::{Method, StatusCode, Url, header};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Client, ClientError};
use crate::wire;

/// How `gpuboard relay --check` starts its answer when the token can be read (then the
/// `user@host` it acts as).
pub const RELAY_OK: &str = "ok";
/// How it starts its answer when it cannot (then why).
pub const RELAY_READ_ONLY: &str = "read-only:";

/// One API request as a relay carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Relayed {
    /// `GET`, `POST`, `PUT`, `PATCH` or `DELETE`.
    pub method: String,
    /// The API path (`/v1/...`), with its query.
    pub path: String,
    /// The JSON body, when the request has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// `wire::IDEMPOTENCY_HEADER`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `wire::MOVE_HEADER`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub move_id: Option<String>,
}

/// What a relay answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum RelayAnswer {
    /// The serve answered: its status and body.
    Http {
        /// The status code.
        status: u16,
        /// The body (decompressed).
        body: String,
    },
    /// The relay cannot act for the caller (no serve there, its token unreadable): why.
    ReadOnly {
        /// What is missing, and what would do.
        why: String,
    },
    /// The serve could not be reached.
    Unreachable {
        /// Why.
        detail: String,
        /// Whether the request may have reached it.
        sent: bool,
    },
    /// The serve did not answer in time.
    Timeout {
        /// The limit, in seconds.
        secs: u64,
    },
}

/// A road to a serve: it sends one request and says what came back, within `limit`.
pub trait Relay: Send + Sync + std::fmt::Debug {
    /// Sends `request`; an error is the road's own (the relay could not be run).
    fn send(
        &self,
        request: Relayed,
        limit: Duration,
    ) -> BoxFuture<'static, Result<RelayAnswer, ClientError>>;
}

/// The methods a relay carries.
const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

impl Client {
    /// A client whose requests go through `relay` to the serve it reaches (named `shown` in
    /// errors), giving up on each after `timeout`. Only the calls of the API's JSON routes
    /// go through it (claims, releases, moves, cordons, projects, forecast, preview).
    ///
    /// # Errors
    /// None in practice: the client of an address that is always valid.
    pub fn relayed(relay: Arc<dyn Relay>, timeout: Duration) -> Result<Client, ClientError> {
        let mut client = Client::new("http://localhost/", None, timeout)?;
        client.relay = Some(relay);
        Ok(client)
    }

    /// `call_keyed` through `relay`: the same request, the same reading of its answer.
    pub(super) async fn call_relayed<T: DeserializeOwned>(
        &self,
        relay: &Arc<dyn Relay>,
        method: &Method,
        path: &str,
        body: Option<&(impl Serialize + ?Sized)>,
        key: Option<&str>,
    ) -> Result<(StatusCode, T), ClientError> {
        let body = body
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| self.decode(format!("the request could not be written: {e}")))?;
        let request = Relayed {
            method: method.as_str().to_string(),
            path: path.to_string(),
            body,
            key: key.map(str::to_string),
            move_id: self.move_id.clone(),
        };
        let endpoint = self.base.to_string();
        let (status, bytes) = match relay.send(request, self.timeout).await? {
            RelayAnswer::Http { status, body } => (status, body.into_bytes()),
            RelayAnswer::ReadOnly { why } => return Err(ClientError::Forbidden { detail: why }),
            RelayAnswer::Unreachable { detail, sent } => {
                return Err(ClientError::Unreachable {
                    endpoint,
                    detail,
                    sent,
                });
            }
            RelayAnswer::Timeout { secs } => return Err(ClientError::Timeout { endpoint, secs }),
        };
        let status = StatusCode::from_u16(status)
            .map_err(|_| self.decode(format!("the relay answered status {status}")))?;
        if status.is_success() {
            let value = serde_json::from_slice(&bytes).map_err(|e| self.decode(e.to_string()))?;
            return Ok((status, value));
        }
        let mut headers = header::HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        Err(self.refused(status, &headers, &bytes))
    }

    /// Makes a relayed `request` to this client's endpoint and says what it answered: what
    /// `gpuboard relay` does on the serve's host. Only `/v1/` paths and the API's methods.
    pub async fn send_relayed(&self, request: &Relayed) -> RelayAnswer {
        let refused = |why: String| RelayAnswer::ReadOnly { why };
        if !METHODS.contains(&request.method.as_str()) {
            return refused(format!(
                "method `{}` is not relayed; one of {}",
                request.method,
                METHODS.join(", ")
            ));
        }
        if !request.path.starts_with("/v1/") || request.path.contains("..") {
            return refused(format!(
                "path `{}` is not relayed; only the API's /v1/ routes",
                request.path
            ));
        }
        let Ok(method) = Method::from_bytes(request.method.as_bytes()) else {
            return refused(format!("method `{}` is not one", request.method));
        };
        let url = match Url::parse(&format!(
            "{}{}",
            self.base.as_str().trim_end_matches('/'),
            request.path
        )) {
            Ok(u) => u,
            Err(e) => return refused(format!("path `{}`: {e}", request.path)),
        };
        let mut req = self.http.request(method, url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(k) = &request.key {
            req = req.header(wire::IDEMPOTENCY_HEADER, k);
        }
        if let Some(m) = &request.move_id {
            req = req.header(wire::MOVE_HEADER, m);
        }
        if let Some(b) = &request.body {
            req = req.json(b);
        }
        let lost = |e: ClientError| match e {
            ClientError::Unreachable { detail, sent, .. } => {
                RelayAnswer::Unreachable { detail, sent }
            }
            ClientError::Timeout { secs, .. } => RelayAnswer::Timeout { secs },
            other => RelayAnswer::Unreachable {
                detail: other.to_string(),
                sent: true,
            },
        };
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return lost(self.transport(&e)),
        };
        let status = resp.status().as_u16();
        match self.body(resp).await {
            Ok(bytes) => RelayAnswer::Http {
                status,
                body: String::from_utf8_lossy(&bytes).into_owned(),
            },
            Err(e) => lost(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A relay answering what it was given, keeping what it was asked.
    #[derive(Debug)]
    struct Canned {
        answer: RelayAnswer,
        asked: Mutex<Vec<Relayed>>,
    }

    impl Relay for Canned {
        fn send(
            &self,
            request: Relayed,
            _limit: Duration,
        ) -> BoxFuture<'static, Result<RelayAnswer, ClientError>> {
            self.asked.lock().unwrap().push(request);
            let answer = self.answer.clone();
            Box::pin(async move { Ok(answer) })
        }
    }

    fn through(answer: RelayAnswer) -> (Arc<Canned>, Client) {
        let relay = Arc::new(Canned {
            answer,
            asked: Mutex::new(Vec::new()),
        });
        let client = Client::relayed(relay.clone(), Duration::from_secs(3)).unwrap();
        (relay, client)
    }

    #[tokio::test]
    async fn a_relayed_request_is_the_api_request_and_its_errors_read_the_same() {
        let (relay, client) = through(RelayAnswer::Http {
            status: 409,
            body: r#"{"error":"conflict","detail":"claim 3 is not placed"}"#.into(),
        });
        let e = client
            .for_move("m-1")
            .release(crate::ids::ClaimId(3))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ClientError::Conflict { detail, .. } if detail == "claim 3 is not placed"),
            "{e:?}"
        );
        let asked = relay.asked.lock().unwrap().clone();
        assert_eq!(
            asked,
            vec![Relayed {
                method: "DELETE".into(),
                path: "/v1/claims/3".into(),
                body: None,
                key: None,
                move_id: Some("m-1".into()),
            }]
        );
        let (_, client) = through(RelayAnswer::ReadOnly {
            why: "cannot read the operator token".into(),
        });
        let e = client.cordon("n", 0).await.unwrap_err();
        assert!(matches!(e, ClientError::Forbidden { .. }), "{e:?}");
        let (_, client) = through(RelayAnswer::Unreachable {
            detail: "refused".into(),
            sent: false,
        });
        let e = client.reset_project("p").await.unwrap_err();
        assert!(
            matches!(e, ClientError::Unreachable { sent: false, .. }),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn the_relay_carries_only_the_apis_routes() {
        // A port nothing listens on: bound, then let go.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = Client::new(
            &format!("http://127.0.0.1:{port}"),
            None,
            Duration::from_secs(1),
        )
        .unwrap();
        let ask = |method: &str, path: &str| Relayed {
            method: method.into(),
            path: path.into(),
            body: None,
            key: None,
            move_id: None,
        };
        for bad in [ask("CONNECT", "/v1/claims"), ask("GET", "/healthz")] {
            let a = client.send_relayed(&bad).await;
            assert!(matches!(a, RelayAnswer::ReadOnly { .. }), "{a:?}");
        }
        let a = client.send_relayed(&ask("GET", "/v1/../x")).await;
        assert!(matches!(a, RelayAnswer::ReadOnly { .. }), "{a:?}");
        // Nothing listens there: unreachable, nothing sent.
        let a = client.send_relayed(&ask("GET", "/v1/snapshot")).await;
        assert!(
            matches!(a, RelayAnswer::Unreachable { sent: false, .. }),
            "{a:?}"
        );
    }
}
