//! What the API's routes share: the engine, the gate, the snapshot versions, the history.
//! A leaf for the routes: they and their helpers import it, it imports none of them.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::endpoint::auth::Tokens;
use crate::endpoint::engine::Engine;
use crate::endpoint::gate::{Access, Gate};
use crate::endpoint::history_recorder::{RecordedHistory, spawn_feed};
use crate::endpoint::versions::SnapshotVersions;
use crate::wire;

/// What the router needs.
#[derive(Clone)]
pub struct ApiState {
    pub(crate) engine: Engine,
    pub(crate) gate: Arc<Gate>,
    pub(crate) open_reads: bool,
    pub(crate) responses: Family<Vec<(String, String)>, Counter>,
    /// The snapshot versions every reader shares.
    pub(crate) versions: Arc<SnapshotVersions>,
    /// How long a delta watch stays silent before a heartbeat.
    pub(crate) heartbeat: Duration,
    /// The endpoint's recorded history, when it keeps one.
    pub(crate) history: Option<Arc<RecordedHistory>>,
    /// The capacity of the last version read (`GET /v1/capacity`).
    pub(crate) capacity: Arc<std::sync::Mutex<Option<Arc<BuiltCapacity>>>>,
    /// The last forecast and the hold times it used (`GET /v1/forecast`).
    pub(crate) forecasts: Arc<crate::endpoint::forecast_cache::Forecasts>,
}

/// A version's capacity, serialized, with its `ETag`.
#[derive(Debug)]
pub(crate) struct BuiltCapacity {
    /// The snapshot version it was derived from.
    pub(crate) version: wire::SnapshotVersion,
    /// Its `ETag`.
    pub(crate) etag: axum::http::HeaderValue,
    /// Its JSON.
    pub(crate) json: axum::body::Bytes,
}

impl ApiState {
    /// State for an endpoint over `engine`; `open_reads` lets reads through without a token.
    /// Snapshot versions get a random epoch: a restarted endpoint has another.
    pub fn new(engine: Engine, tokens: Tokens, open_reads: bool) -> ApiState {
        ApiState {
            versions: Arc::new(SnapshotVersions::new(engine.clone(), rand::random())),
            engine,
            gate: Arc::new(Gate::new(tokens, None)),
            open_reads,
            responses: Family::default(),
            heartbeat: wire::HEARTBEAT,
            history: None,
            capacity: Arc::default(),
            forecasts: Arc::default(),
        }
    }

    /// The same, serving (and reporting on) `history`.
    #[must_use]
    pub fn with_history(mut self, history: Arc<RecordedHistory>) -> ApiState {
        self.history = Some(history);
        self
    }

    /// The same, serving `history` and recording into it: the feed (returned) follows this
    /// state's versions and ends with them. Call from within the runtime.
    #[must_use]
    pub fn recording(
        self,
        history: Arc<RecordedHistory>,
    ) -> (ApiState, tokio::task::JoinHandle<()>) {
        let feed = spawn_feed(Arc::clone(&history), Arc::clone(&self.versions));
        (self.with_history(history), feed)
    }

    /// The same, also accepting the named tokens kept in `dir` (see `tokens`).
    #[must_use]
    pub fn with_token_dir(mut self, dir: &std::path::Path) -> ApiState {
        self.gate = Arc::new(self.gate.with_dir(dir));
        self
    }

    /// The same with another heartbeat interval for delta watches (tests use a short one).
    #[must_use]
    pub fn with_heartbeat(mut self, heartbeat: Duration) -> ApiState {
        self.heartbeat = heartbeat;
        self
    }

    /// What the gate's middleware needs: who may pass.
    pub(crate) fn access(&self) -> Access {
        Access {
            gate: Arc::clone(&self.gate),
            open_reads: self.open_reads,
        }
    }
}
