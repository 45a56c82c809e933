//! A gpuboard endpoint over HTTP (API v1): reads `GET /v1/snapshot`, acts through the
//! claim, release, move, cordon and reset routes with a bearer token.
//!
//! The endpoint's own client (`client.rs`) is being written in parallel; this source
//! speaks the documented API directly and should switch to that client once it lands.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{Action, Failure, Outcome, Source, plan_on_snapshot};
use crate::placement::Allocation;
use crate::snapshot::{ClaimView, SCHEMA_VERSION, Snapshot};

/// Largest snapshot accepted, so a peer sending garbage cannot exhaust memory.
const MAX_BODY: usize = 256 << 20;

/// A gpuboard endpoint.
pub struct Http {
    name: String,
    base: String,
    token: Option<String>,
    client: reqwest::Client,
    last: Arc<Mutex<Option<Snapshot>>>,
}

impl Http {
    /// An endpoint at `url` (`http://host:port`), with an optional bearer token.
    pub fn new(
        name: &str,
        url: &str,
        token: Option<String>,
        timeout: Duration,
    ) -> anyhow::Result<Http> {
        let base = url.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            anyhow::bail!("endpoint URL `{url}` must start with http:// or https://");
        }
        let client = reqwest::Client::builder().timeout(timeout).build()?;
        Ok(Http {
            name: name.to_string(),
            base,
            token,
            client,
            last: Arc::new(Mutex::new(None)),
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let b = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => b.bearer_auth(t),
            None => b,
        }
    }
}

fn transport(e: &reqwest::Error) -> Failure {
    if e.is_timeout() {
        Failure::Timeout(0)
    } else {
        Failure::Unreachable(e.to_string())
    }
}

/// Reads a response: a JSON body on success, the endpoint's `{error, detail}` otherwise.
async fn read(resp: reqwest::Response) -> Result<Value, Failure> {
    let status = resp.status();
    if resp.content_length().is_some_and(|n| n > MAX_BODY as u64) {
        return Err(Failure::Decode(format!(
            "answer of {} bytes is larger than the {MAX_BODY} accepted",
            resp.content_length().unwrap_or_default()
        )));
    }
    let bytes = resp.bytes().await.map_err(|e| transport(&e))?;
    if bytes.len() > MAX_BODY {
        return Err(Failure::Decode("answer too large".into()));
    }
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();
    if status.is_success() {
        return body.ok_or_else(|| Failure::Decode("the answer is not JSON".into()));
    }
    let words = body
        .as_ref()
        .map(|b| {
            let error = b.get("error").and_then(Value::as_str).unwrap_or_default();
            let detail = b.get("detail").and_then(Value::as_str).unwrap_or_default();
            match (error.is_empty(), detail.is_empty()) {
                (false, false) => format!("{error}: {detail}"),
                (false, true) => error.to_string(),
                _ => detail.to_string(),
            }
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(200).collect());
    Err(match status.as_u16() {
        401 | 403 => Failure::Unauthorized(words),
        422 => Failure::Invalid(words),
        409 => Failure::Refused(words),
        s => Failure::Http {
            status: s,
            message: words,
        },
    })
}

impl Source for Http {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> &str {
        "gpuboard"
    }
    fn can_act(&self) -> bool {
        true
    }
    fn fetch(&self) -> BoxFuture<'static, Result<Snapshot, Failure>> {
        let req = self.request(reqwest::Method::GET, "/v1/snapshot");
        let last = Arc::clone(&self.last);
        Box::pin(async move {
            let resp = req.send().await.map_err(|e| transport(&e))?;
            let body = read(resp).await?;
            let snap: Snapshot =
                serde_json::from_value(body).map_err(|e| Failure::Decode(e.to_string()))?;
            if snap.schema != SCHEMA_VERSION {
                return Err(Failure::Decode(format!(
                    "snapshot schema {} is not the {SCHEMA_VERSION} this console reads",
                    snap.schema
                )));
            }
            if let Ok(mut l) = last.lock() {
                *l = Some(snap.clone());
            }
            Ok(snap)
        })
    }
    fn plan(&self, request: Value) -> BoxFuture<'static, Result<Allocation, Failure>> {
        let last = self.last.lock().ok().and_then(|l| l.clone());
        Box::pin(async move {
            let snap = last.ok_or_else(|| {
                Failure::Refused("no snapshot from this endpoint yet to plan against".into())
            })?;
            plan_on_snapshot(&snap, &request)
        })
    }
    fn act(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>> {
        use reqwest::Method;
        let from = match &action {
            Action::Move { id, .. } => self
                .last
                .lock()
                .ok()
                .and_then(|l| l.as_ref().and_then(|s| s.claim(*id)).map(place)),
            _ => None,
        };
        let req = match &action {
            Action::Claim { request } => self.request(Method::POST, "/v1/claims").json(request),
            Action::Release { id } => self.request(Method::DELETE, &format!("/v1/claims/{id}")),
            Action::Move { id, target } => self
                .request(Method::POST, &format!("/v1/claims/{id}/move"))
                .json(target),
            Action::Cordon {
                node,
                index,
                cordoned,
            } => self.request(
                Method::POST,
                &format!(
                    "/v1/devices/{node}/{index}/{}",
                    if *cordoned { "cordon" } else { "uncordon" }
                ),
            ),
            Action::ResetProject { project } => self
                .request(Method::POST, &format!("/v1/projects/{project}/reset"))
                .json(&json!({})),
        };
        Box::pin(async move {
            let resp = req.send().await.map_err(|e| transport(&e))?;
            let body = read(resp).await?;
            let claim = || -> Result<ClaimView, Failure> {
                let v = body.get("claim").cloned().unwrap_or_else(|| body.clone());
                serde_json::from_value(v).map_err(|e| Failure::Decode(e.to_string()))
            };
            Ok(match action {
                Action::Claim { .. } => Outcome::Claimed(Box::new(claim()?)),
                Action::Release { id } => Outcome::Released {
                    id,
                    place: claim().ok().map(|c| place(&c)),
                },
                Action::Move { id, .. } => Outcome::Moved {
                    id,
                    from: from.unwrap_or_default(),
                    to: place(&claim()?),
                },
                Action::Cordon {
                    node,
                    index,
                    cordoned,
                } => Outcome::Cordoned {
                    node,
                    index,
                    cordoned,
                },
                Action::ResetProject { project } => Outcome::Reset { project },
            })
        })
    }
}

/// `node:0,1`, or `pending`.
pub fn place(c: &ClaimView) -> String {
    match &c.node {
        Some(n) => format!(
            "{n}:{}",
            c.shares
                .iter()
                .map(|s| s.device.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
        None => "pending".to_string(),
    }
}
