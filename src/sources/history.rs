//! A source's recorded history, as the console rewinds it: the state at a time, the next
//! or previous change touching a GPU, claim or project, and a device's telemetry over a
//! window. Sources that record (gpuboard endpoints, `gpuboard record`) offer it through
//! `Source::history`; the others have none.

use futures::future::BoxFuture;

use super::Failure;
use crate::accounting::Ask;
use crate::client::ReportAt;
use crate::clock::Timestamp;
use crate::snapshot::Snapshot;

/// One telemetry sample of a device, as the history API answers it.
pub use crate::wire::history::Sample;
use crate::wire::history::{Direction, Target};

/// What a source showed at a time.
#[derive(Clone, Debug, PartialEq)]
pub enum AtTime {
    /// The snapshot it served then, and the time of the state shown (its last change at or
    /// before the time asked).
    Shown {
        /// The state.
        snapshot: Box<Snapshot>,
        /// The time it shows.
        at: Timestamp,
    },
    /// The time is before the source's history begins.
    Before {
        /// Where its history begins.
        from: Timestamp,
    },
}

/// A source's history. Futures are `'static` so the driver runs them on their own task.
pub trait SourceHistory: Send + Sync {
    /// The state the source served at `at`.
    fn snapshot_at(&self, at: Timestamp) -> BoxFuture<'static, Result<AtTime, Failure>>;
    /// The time of the next (or previous) change after (before) `at` touching `what`
    /// (`None`: any change); `None` when there is none.
    fn seek(
        &self,
        at: Timestamp,
        dir: Direction,
        what: Option<Target>,
    ) -> BoxFuture<'static, Result<Option<Timestamp>, Failure>>;
    /// A device's samples from `from` to `to`, oldest first.
    fn telemetry(
        &self,
        node: String,
        index: u32,
        from: Timestamp,
        to: Timestamp,
    ) -> BoxFuture<'static, Result<Vec<Sample>, Failure>>;
    /// Its usage table over a window (`GET /v1/history/report?parts=usage`), for the
    /// Usage view.
    fn report(&self, ask: Ask) -> BoxFuture<'static, Result<ReportAt, Failure>>;
}
