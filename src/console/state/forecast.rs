//! What the console knows of what will happen: each source's forecast of its waiting
//! claims' starts (`GET /v1/forecast` on a gpuboard endpoint, asked by `update::forecast`
//! in the background at the source's pace), and the preview a dialog shows of its action
//! (`POST /v1/preview`, asked when the dialog opens). Drawing only reads what came back.

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::snapshot::{ClaimState, Snapshot};
use crate::wire::forecast::{ExpectedStart, Forecast, Preview};

use super::State;

/// How often a forecast is asked again while the source's state has not changed (an
/// endpoint reuses its answer for 10 s; holders past their learned ends move the starts
/// even when nothing changes).
pub const FORECAST_AGAIN_MS: u64 = 10_000;

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
}

impl SourceForecast {
    /// Whether to ask now: the source gives one, none is in flight, a claim waits in
    /// `snap`, and either the state changed since the last ask (at most once a refresh
    /// interval, `refresh_ms`) or the last answer is `FORECAST_AGAIN_MS` old.
    pub fn due(&self, snap: &Snapshot, now: Timestamp, refresh_ms: u64) -> bool {
        if self.none || self.in_flight || !waits(snap) {
            return false;
        }
        let Some(at) = self.asked_at else {
            return true;
        };
        let since = now.millis_since(at);
        if self.error.is_some() {
            return since >= FORECAST_RETRY_MS;
        }
        (snap.revision != self.asked_revision && since >= refresh_ms) || since >= FORECAST_AGAIN_MS
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
