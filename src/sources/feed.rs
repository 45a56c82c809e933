//! How the endpoint source reaches an endpoint's versioned snapshot and its delta watch:
//! the `Feed` trait (a conditional snapshot read and a watch stream), with the wire
//! shapes of the fleet sync protocol (docs: fleet-protocol, issue 11), and its
//! implementation for `client::Client`. Unit tests drive the watch task through a
//! scripted `Feed` instead of sockets.

use futures::future::BoxFuture;
use futures::stream::BoxStream;

use crate::client::{Client, ClientError};
use crate::snapshot::{Change, Snapshot};

// ---- Stand-ins for the protocol's wire and client types --------------------------------
// Same names and shapes as `wire::{SnapshotVersion, DeltaBody, WatchEvent}` and
// `client::{Conditional, WatchStream}`. Once those exist, delete these and re-export:
//   pub use crate::client::{Conditional, WatchStream};
//   pub use crate::wire::{DeltaBody, SnapshotVersion, WatchEvent};

/// A snapshot version: `epoch` changes when the endpoint restarts, `seq` counts versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SnapshotVersion {
    /// Random per endpoint process start.
    pub epoch: u64,
    /// One more for each new snapshot version.
    pub seq: u64,
}

impl std::fmt::Display for SnapshotVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.epoch, self.seq)
    }
}

/// The changes from one version to the next.
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaBody {
    /// The version they apply to.
    pub from: SnapshotVersion,
    /// The version they make.
    pub to: SnapshotVersion,
    /// The changes, in order.
    pub changes: Vec<Change>,
}

/// One event of the delta watch.
// Constructed by the client's delta watch once it lands (and by the tests until then).
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent {
    /// The whole state (first, or after a resync).
    Snapshot {
        /// Its version.
        version: SnapshotVersion,
        /// The state.
        snapshot: Box<Snapshot>,
    },
    /// The changes to the next version.
    Delta(DeltaBody),
    /// `since` cannot be served; a `Snapshot` follows.
    Resync {
        /// Why, in the endpoint's words.
        reason: String,
    },
    /// Nothing changed; the endpoint is at `version`.
    Heartbeat {
        /// The current version.
        version: SnapshotVersion,
    },
}

/// A conditional snapshot read.
// `NotModified` comes from the client's conditional read once it lands.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Clone, Debug, PartialEq)]
pub enum Conditional {
    /// Still the known version (304).
    NotModified,
    /// A new state; `version` from the `ETag`, `None` from an endpoint that sends none.
    Fresh {
        /// The state.
        snapshot: Box<Snapshot>,
        /// Its version.
        version: Option<SnapshotVersion>,
    },
}

/// The delta watch: ends with an error item when the stream drops or falls silent.
pub type WatchStream = BoxStream<'static, Result<WatchEvent, ClientError>>;

// ---- End of stand-ins -------------------------------------------------------------------

/// An endpoint's versioned state, as the endpoint source reads it.
pub trait Feed: Send + Sync + 'static {
    /// The snapshot, unless it is still `known` (`Conditional::NotModified`).
    fn snapshot_if_changed(
        &self,
        known: Option<SnapshotVersion>,
    ) -> BoxFuture<'static, Result<Conditional, ClientError>>;
    /// The delta watch, resuming after `since`; `ClientError::NotFound`/`Invalid` when the
    /// endpoint has none (the source then polls `snapshot_if_changed`).
    fn watch(
        &self,
        since: Option<SnapshotVersion>,
    ) -> BoxFuture<'static, Result<WatchStream, ClientError>>;
}

// ---- Interim `Feed for Client`, until the client speaks the protocol --------------------
// Plain `GET /v1/snapshot` with no version, and no delta watch (so the source polls).
// After the server branch merges, replace this block with:
//
// impl Feed for Client {
//     fn snapshot_if_changed(
//         &self,
//         known: Option<SnapshotVersion>,
//     ) -> BoxFuture<'static, Result<Conditional, ClientError>> {
//         let client = self.clone();
//         Box::pin(async move { client.snapshot_if_changed(known).await })
//     }
//     fn watch(
//         &self,
//         since: Option<SnapshotVersion>,
//     ) -> BoxFuture<'static, Result<WatchStream, ClientError>> {
//         let client = self.clone();
//         Box::pin(async move { client.watch(since).await })
//     }
// }
impl Feed for Client {
    fn snapshot_if_changed(
        &self,
        _known: Option<SnapshotVersion>,
    ) -> BoxFuture<'static, Result<Conditional, ClientError>> {
        let client = self.clone();
        Box::pin(async move {
            let snapshot = Box::new(client.snapshot().await?);
            Ok(Conditional::Fresh {
                snapshot,
                version: None,
            })
        })
    }
    fn watch(
        &self,
        _since: Option<SnapshotVersion>,
    ) -> BoxFuture<'static, Result<WatchStream, ClientError>> {
        Box::pin(async move {
            Err(ClientError::NotFound {
                detail: "this build's client has no delta watch".to_string(),
            })
        })
    }
}
// ---- End of interim `Feed for Client` ---------------------------------------------------
