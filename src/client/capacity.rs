//! `GET /v1/capacity` (`wire::capacity`): what placement needs of an endpoint, read
//! conditionally on its `ETag`.

use reqwest::{StatusCode, header};

use super::{Client, ClientError};
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
    },
    /// The endpoint predates the route (404 for the path): read its snapshot instead.
    NoRoute,
}

impl Client {
    /// `GET /v1/capacity` with `If-None-Match: known` when given.
    pub async fn capacity_if_changed(
        &self,
        known: Option<&str>,
    ) -> Result<CapacityRead, ClientError> {
        let mut req = self.http.get(self.url(paths::CAPACITY));
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
        if status == StatusCode::NOT_MODIFIED {
            return Ok(CapacityRead::NotModified);
        }
        let etag = resp
            .headers()
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = self.body(resp).await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(CapacityRead::NoRoute);
        }
        if !status.is_success() {
            return Err(self.refused(status, &bytes));
        }
        let capacity: CapacitySummary =
            serde_json::from_slice(&bytes).map_err(|e| self.decode(e.to_string()))?;
        if capacity.schema != CAPACITY_SCHEMA {
            return Err(self.decode(format!(
                "capacity schema {} is not the {CAPACITY_SCHEMA} this build reads",
                capacity.schema
            )));
        }
        Ok(CapacityRead::Fresh {
            capacity: Box::new(capacity),
            etag,
        })
    }
}
