//! How the endpoint source reaches an endpoint's versioned snapshot and its delta watch:
//! the `Feed` trait (a conditional snapshot read and a watch stream) and its
//! implementation for `client::Client`. Unit tests drive the watch task through a
//! scripted `Feed` instead of sockets.

use futures::future::BoxFuture;

use crate::client::{Client, ClientError};
pub use crate::client::{Conditional, WatchStream};
pub use crate::wire::{DeltaBody, SnapshotVersion, WatchEvent};

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

impl Feed for Client {
    fn snapshot_if_changed(
        &self,
        known: Option<SnapshotVersion>,
    ) -> BoxFuture<'static, Result<Conditional, ClientError>> {
        let client = self.clone();
        Box::pin(async move { client.snapshot_if_changed(known).await })
    }
    fn watch(
        &self,
        since: Option<SnapshotVersion>,
    ) -> BoxFuture<'static, Result<WatchStream, ClientError>> {
        let client = self.clone();
        Box::pin(async move { client.watch(since).await })
    }
}
