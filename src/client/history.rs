//! The history API's calls (`wire::history`): the state at a time, the changes in a
//! window, the next or previous change of a target, a device's samples, and the size.

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Client, ClientError};
use crate::clock::Timestamp;
use crate::snapshot::Snapshot;
use crate::wire::history::{
    self as hw, BeforeHistory, Changes, DeviceSeries, Direction, GpuRef, HistoryInfo, Seek, Target,
};
use crate::wire::paths;

/// The answer to `GET /v1/snapshot?at=`.
#[derive(Clone, Debug, PartialEq)]
pub enum SnapshotAt {
    /// The state as the endpoint served it then.
    Shown {
        /// The state.
        snapshot: Box<Snapshot>,
        /// The time of the state shown (its last recorded change or sample at or before
        /// the time asked).
        at: Timestamp,
        /// Where the endpoint's history begins.
        history_from: Option<Timestamp>,
    },
    /// The time asked is before the history begins (`history_from`), or nothing is
    /// recorded yet (`None`).
    BeforeHistory {
        /// Where the history begins.
        history_from: Option<Timestamp>,
    },
}

fn header_time(resp: &reqwest::Response, name: &str) -> Option<Timestamp> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .map(Timestamp)
}

impl Client {
    /// A GET of `path?query` with this client's token and per-call timeout (every history
    /// read is one).
    pub(super) fn history_get(&self, path: &str, query: &str) -> reqwest::RequestBuilder {
        let mut url = self.url(path);
        url.set_query(Some(query));
        let mut req = self.http.request(Method::GET, url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(t) = self.per_call {
            req = req.timeout(t);
        }
        req
    }

    /// A GET of `path?query`, decoded; errors as every other call.
    async fn get_query<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &str,
    ) -> Result<T, ClientError> {
        let resp = self
            .history_get(path, query)
            .send()
            .await
            .map_err(|e| self.transport(&e))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = self.body(resp).await?;
        if !status.is_success() {
            return Err(self.refused(status, &headers, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|e| self.decode(e.to_string()))
    }

    /// `GET /v1/snapshot?at=TIME`: the state the endpoint served at `at`. An endpoint that
    /// records no history is an error (`NotFound`), never its present state.
    pub async fn snapshot_at(&self, at: Timestamp) -> Result<SnapshotAt, ClientError> {
        let resp = self
            .history_get(paths::SNAPSHOT, &format!("at={}", at.0))
            .send()
            .await
            .map_err(|e| self.transport(&e))?;
        let status = resp.status();
        let shown = header_time(&resp, hw::AT_HEADER);
        let from = header_time(&resp, hw::HISTORY_FROM_HEADER);
        let headers = resp.headers().clone();
        let bytes = self.body(resp).await?;
        if status == StatusCode::NOT_FOUND
            && let Ok(body) = serde_json::from_slice::<BeforeHistory>(&bytes)
            && body.error == hw::BEFORE_HISTORY
        {
            return Ok(SnapshotAt::BeforeHistory {
                history_from: body.history_from,
            });
        }
        if !status.is_success() {
            return Err(self.refused(status, &headers, &bytes));
        }
        let Some(shown) = shown else {
            return Err(ClientError::NotFound {
                detail: format!(
                    "{} records no history (it answered the present state, without `{}`); \
                     it needs a gpuboard with the time machine",
                    self.base,
                    hw::AT_HEADER
                ),
            });
        };
        let snap: Snapshot =
            serde_json::from_slice(&bytes).map_err(|e| self.decode(e.to_string()))?;
        Ok(SnapshotAt::Shown {
            snapshot: Box::new(self.check_schema(snap)?),
            at: shown,
            history_from: from,
        })
    }

    /// `GET /v1/history`: how far back the history goes, and its size.
    pub async fn history_info(&self) -> Result<HistoryInfo, ClientError> {
        Ok(self
            .call(Method::GET, hw::paths::HISTORY, None::<&Value>)
            .await?
            .1)
    }

    /// `GET /v1/history/changes`: the changes from `from` to `to` (both included), oldest
    /// first, touching `target` when given; at most `limit` (the endpoint's cap without).
    pub async fn history_changes(
        &self,
        from: Timestamp,
        to: Timestamp,
        target: Option<&Target>,
        limit: Option<usize>,
    ) -> Result<Changes, ClientError> {
        let mut query = format!("from={}&to={}", from.0, to.0);
        if let Some(t) = target {
            query = format!("{query}&{}", t.query());
        }
        if let Some(n) = limit {
            query = format!("{query}&limit={n}");
        }
        self.get_query(hw::paths::CHANGES, &query).await
    }

    /// `GET /v1/history/seek`: the next change after `at` (or the previous one before it)
    /// touching `target` (any change without one); `None` when there is none.
    pub async fn history_seek(
        &self,
        at: Timestamp,
        dir: Direction,
        target: Option<&Target>,
    ) -> Result<Option<Seek>, ClientError> {
        let mut query = format!("at={}&dir={}", at.0, dir.as_str());
        if let Some(t) = target {
            query = format!("{query}&{}", t.query());
        }
        match self.get_query(hw::paths::SEEK, &query).await {
            Ok(seek) => Ok(Some(seek)),
            Err(ClientError::NotFound { detail }) if detail.starts_with(hw::NO_CHANGE) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `GET /v1/history/telemetry`: the samples of `gpu` from `from` to `to`, oldest first.
    pub async fn history_telemetry(
        &self,
        gpu: &GpuRef,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<DeviceSeries, ClientError> {
        let query = format!(
            "gpu={}&from={}&to={}",
            hw::encode(&gpu.to_string()),
            from.0,
            to.0
        );
        self.get_query(hw::paths::TELEMETRY, &query).await
    }
}
