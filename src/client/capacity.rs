//! `GET /v1/capacity` (`wire::capacity`): what placement needs of an endpoint, read
//! conditionally on its `ETag`.

use reqwest::{StatusCode, header};

use super::oneshot::{self, Failed, Got};
use super::{Client, ClientError, MAX_ANSWER, NOT_SENT};
use crate::wire::capacity::{CAPACITY_SCHEMA, CapacitySummary};
use crate::wire::paths;

/// The answer to a capacity read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CapacityRead {
    /// 304: still the capacity of the tag the caller knows.
    NotModified,
    /// The capacity, with its tag (`None` when the endpoint sent none).
    Fresh {
        /// The capacity.
        capacity: Box<CapacitySummary>,
        /// Its `ETag`, quotes included.
        etag: Option<String>,
        /// The JSON it was read from, so a cache can keep it without writing it again.
        json: String,
    },
    /// The endpoint predates the route (404 for the path): read its snapshot instead.
    NoRoute,
}

impl Client {
    /// `GET /v1/capacity` with `If-None-Match: known` when given: on a connection of its
    /// own for a plain-HTTP endpoint (`oneshot`), else (and for an answer that reader does
    /// not take) through the pooled client.
    pub async fn capacity_if_changed(
        &self,
        known: Option<&str>,
    ) -> Result<CapacityRead, ClientError> {
        let url = self.url(paths::CAPACITY);
        if url.scheme() == "http" {
            let bearer = self.token.as_ref().map(|t| format!("Bearer {t}"));
            let mut headers = Vec::with_capacity(2);
            if let Some(b) = &bearer {
                headers.push((header::AUTHORIZATION, b.as_str()));
            }
            if let Some(tag) = known {
                headers.push((header::IF_NONE_MATCH, tag));
            }
            let limit = self.per_call.unwrap_or(self.timeout);
            match oneshot::get(&url, &headers, limit, MAX_ANSWER).await {
                Ok(Got::Answer { status, etag, body }) => {
                    let status = StatusCode::from_u16(status)
                        .map_err(|e| self.decode(format!("HTTP status {status}: {e}")))?;
                    return self.capacity_answer(status, etag, &header::HeaderMap::new(), body);
                }
                Ok(Got::Unusual) => {}
                Err(failed) => return Err(self.failed(failed)),
            }
        }
        let mut req = self.http.get(url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(tag) = known {
            req = req.header(header::IF_NONE_MATCH, tag);
        }
        if let Some(t) = self.per_call {
            req = req.timeout(t);
        }
        let resp = req.send().await.map_err(|e| self.transport(&e))?;
        let status = resp.status();
        let etag = resp
            .headers()
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let headers = resp.headers().clone();
        let bytes = if status == StatusCode::NOT_MODIFIED {
            Vec::new()
        } else {
            self.body(resp).await?
        };
        self.capacity_answer(status, etag, &headers, bytes)
    }

    /// What a capacity answer says, however it was read.
    fn capacity_answer(
        &self,
        status: StatusCode,
        etag: Option<String>,
        headers: &header::HeaderMap,
        bytes: Vec<u8>,
    ) -> Result<CapacityRead, ClientError> {
        if status == StatusCode::NOT_MODIFIED {
            return Ok(CapacityRead::NotModified);
        }
        if status == StatusCode::NOT_FOUND {
            return Ok(CapacityRead::NoRoute);
        }
        if !status.is_success() {
            return Err(self.refused(status, headers, &bytes));
        }
        // JSON is UTF-8; text that is not cannot be read as a capacity either.
        let json = String::from_utf8(bytes).map_err(|e| self.decode(e.to_string()))?;
        let capacity: CapacitySummary =
            serde_json::from_str(&json).map_err(|e| self.decode(e.to_string()))?;
        if capacity.schema != CAPACITY_SCHEMA {
            return Err(self.decode(format!(
                "capacity schema {} is not the {CAPACITY_SCHEMA} this build reads",
                capacity.schema
            )));
        }
        Ok(CapacityRead::Fresh {
            capacity: Box::new(capacity),
            etag,
            json,
        })
    }

    /// The error of a one-shot read that got no answer, as the pooled client words it.
    fn failed(&self, failed: Failed) -> ClientError {
        let endpoint = self.base.to_string();
        match failed {
            Failed::NotSent(detail) => ClientError::Unreachable {
                endpoint,
                detail: format!("{NOT_SENT}{detail}"),
                sent: false,
            },
            Failed::Lost(detail) => ClientError::Unreachable {
                endpoint,
                detail,
                sent: true,
            },
            Failed::TimedOut => ClientError::Timeout {
                endpoint,
                secs: self.timeout.as_secs().max(1),
            },
        }
    }
}
