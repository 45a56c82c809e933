//! What the console knows of what will happen: each source's forecast of its waiting
//! claims' starts (`GET /v1/forecast` on a gpuboard endpoint, asked by `update::forecast`
//! in the background at the source's pace), and the preview a dialog shows of its action
//! (`POST /v1/preview`, asked when the dialog opens). Drawing only reads what came back.

use std::sync::{Arc, Weak};

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::snapshot::{ClaimState, Snapshot};
use crate::wire::forecast::{ExpectedStart, Forecast, Preview};

use super::State;

/// The least time between two asks of a source's forecast: an endpoint forecasts its
/// state anew at each revision, and a busy one changes every second.
pub const FORECAST_AGAIN_MS: u64 = 10_000;

/// How often a forecast is asked again while the source's state has not changed (holders
/// past their learned ends move the starts even when nothing changes).
pub const FORECAST_STALE_MS: u64 = 60_000;

/// An ask waits at least this many times as long as the last answer took, so that a large
/// endpoint (seconds per forecast) spends a small part of a core on one console.
pub const FORECAST_PACE: u64 = 5;

/// How long after a failed forecast it is asked again.
pub const FORECAST_RETRY_MS: u64 = 60_000;

/// One source's forecast as the console holds it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceForecast {
    /// The last answer.
    pub last: Option<Forecast>,
    /// Why the last ask failed, in the source's words.
    pub error: Option<String>,
    /// The source gives no forecast: never asked again.
    pub none: bool,
    /// An ask is in flight.
    pub in_flight: bool,
    /// When it was last asked.
    pub asked_at: Option<Timestamp>,
    /// The revision of the snapshot it was last asked at.
    pub asked_revision: u64,
    /// How long the last answer took, ms.
    pub took_ms: u64,
    /// Whether a claim waits in the snapshot last looked at.
    pub waiting: Waiting,
}

/// Whether a claim waits in a snapshot, kept for that snapshot (by identity: a changed
/// source's data is a new `Arc`): the due check runs after every batch of messages, and
/// reads a source's claims again only when its data changed.
#[derive(Clone, Debug, Default)]
pub struct Waiting {
    /// The snapshot looked at (held weakly: its memory is not reused while held, so
    /// the same address is the same snapshot).
    seen: Weak<Snapshot>,
    /// Whether a claim waits in it.
    waits: bool,
}

impl Waiting {
    /// Whether a claim waits in `snap`, read from it only when it is not the one seen.
    pub fn in_snapshot(&mut self, snap: &Arc<Snapshot>) -> bool {
        if !std::ptr::eq(self.seen.as_ptr(), Arc::as_ptr(snap)) {
            self.seen = Arc::downgrade(snap);
            self.waits = waits(snap);
        }
        self.waits
    }
}

// What is kept is derived from the data: two states are equal whatever they looked at.
impl PartialEq for Waiting {
    fn eq(&self, _: &Waiting) -> bool {
        true
    }
}

impl SourceForecast {
    /// Whether to ask now: the source gives one, none is in flight, a claim waits in
    /// `snap`, and either the state changed since the last ask or the last answer is
    /// `FORECAST_STALE_MS` old; never sooner than a refresh interval (`refresh_ms`),
    /// `FORECAST_AGAIN_MS` and `FORECAST_PACE` times what the last answer took.
    pub fn due(&mut self, snap: &Arc<Snapshot>, now: Timestamp, refresh_ms: u64) -> bool {
        if self.none || self.in_flight || !self.waiting.in_snapshot(snap) {
            return false;
        }
        let Some(at) = self.asked_at else {
            return true;
        };
        let since = now.millis_since(at);
        if self.error.is_some() {
            return since >= FORECAST_RETRY_MS;
        }
        let gap = refresh_ms
            .max(FORECAST_AGAIN_MS)
            .max(self.took_ms.saturating_mul(FORECAST_PACE));
        since >= gap && (snap.revision != self.asked_revision || since >= FORECAST_STALE_MS)
    }
}

/// Whether a claim waits in `snap`.
fn waits(snap: &Snapshot) -> bool {
    // The projects count their waiting claims; an engine's snapshot may list none.
    if snap.projects.iter().any(|p| p.pending > 0) {
        return true;
    }
    snap.claims.iter().any(|c| c.state == ClaimState::Pending)
}

/// The preview a dialog shows of its action.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum DialogPreview {
    /// Not asked yet: the dialog just opened (asked before the next draw).
    #[default]
    Unasked,
    /// Not an action a preview covers (an engine's, a move across sources, a hand-over).
    NotOffered,
    /// Asked; no answer yet.
    Asking,
    /// The source's answer.
    Shown(Box<Preview>),
    /// No preview, in words (the source cannot preview, or failed).
    Unavailable(String),
}

impl State {
    /// The expected start of claim `id` of source `source`, where its source forecast one.
    pub fn expected_start(&self, source: usize, id: ClaimId) -> Option<&ExpectedStart> {
        self.sources.get(source)?.forecast.last.as_ref()?.of(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::ProjectView;

    fn with_waiting(pending: u32) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            projects: vec![ProjectView {
                pending,
                ..ProjectView::default()
            }],
            ..Snapshot::default()
        })
    }

    #[test]
    fn a_source_is_read_again_only_when_its_data_changed() {
        let mut f = SourceForecast::default();
        let idle = with_waiting(0);
        assert!(!f.due(&idle, Timestamp(1_000), 1_000));
        // The same data: what was read stands.
        assert!(!f.due(&Arc::clone(&idle), Timestamp(2_000), 1_000));
        // New data with a claim waiting: read, and asked.
        let busy = with_waiting(1);
        assert!(f.due(&busy, Timestamp(3_000), 1_000));
        // Equal content in a new snapshot reads the same.
        assert!(f.waiting.in_snapshot(&with_waiting(1)));
        assert!(!f.waiting.in_snapshot(&idle));
    }
}
