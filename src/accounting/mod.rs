//! Accounting from the recorded history: where a window's GPU time went per project
//! (reserved by compute and by memory fraction, used, idle-allocated, unallocated), what
//! the audited actions did to their targets, and what went wrong. Pure: it is given the
//! state at the window's start, the versions recorded in it and the devices' samples
//! (`store::history` reads them, `endpoint::report_api` serves the result).
//!
//! The route, a read (the read role may call it):
//! `GET /v1/history/report?from=TIME&to=TIME[&idle_below=PCT][&idle_for=SECS][&pending_over=SECS][&parts=usage]`
//! answers a [`WindowReport`]; with `parts=usage` only its `usage` (no actions, no trouble),
//! added up from the hours the history has rolled up. TIME as the other history routes take it. A window that
//! begins before the history does is cut to where it begins (`from` says so); a window
//! wholly before it is a 404 `before_history` answer, as `GET /v1/snapshot?at=`.

pub mod flags;
pub mod gpu_time;
pub mod rollup;
pub mod story;
pub mod trouble;
pub mod usage;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use gpu_time::GpuSeconds;
pub use story::{AuditedAction, BackoffSpan, Story, tell};
pub use trouble::Trouble;
pub use usage::{ByShare, Figures, GpuTime, IdleRule, ProjectGpuTime, Tally, account};

use crate::clock::Timestamp;
use crate::history::Record;
use crate::history::sample::Tick;
use crate::snapshot::Snapshot;
use crate::wire::history::GpuRef;

/// The route.
pub const REPORT_PATH: &str = "/v1/history/report";
/// Claims pending at least this long are listed as trouble, by default: 10 minutes.
pub const PENDING_MS: u64 = 600_000;

/// What the report is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ask {
    /// Window start.
    pub from: Timestamp,
    /// Window end.
    pub to: Timestamp,
    /// When a claim counts as idle.
    pub idle: IdleRule,
    /// Claims pending this long or longer are trouble, ms.
    pub pending_ms: u64,
}

impl Ask {
    /// The route's query for it.
    pub fn query(&self) -> String {
        format!(
            "from={}&to={}&idle_below={}&idle_for={}&pending_over={}",
            self.from.0,
            self.to.0,
            self.idle.idle_below_pct,
            self.idle.idle_for_ms / 1000,
            self.pending_ms / 1000
        )
    }
}

/// Which parts of a report are asked for (`parts=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Parts {
    /// Usage, actions and trouble.
    #[default]
    All,
    /// The usage table alone.
    Usage,
}

impl Ask {
    /// The route's query for `parts` of it.
    pub fn query_for(&self, parts: Parts) -> String {
        match parts {
            Parts::All => self.query(),
            Parts::Usage => format!("{}&parts=usage", self.query()),
        }
    }
}

/// One endpoint's window: `GET /v1/history/report`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowReport {
    /// The window's start: as asked, or where the history begins when later.
    pub from: Timestamp,
    /// The window's end.
    pub to: Timestamp,
    /// Where this endpoint's history begins.
    pub history_from: Option<Timestamp>,
    /// GPU time per project.
    pub usage: GpuTime,
    /// Audited actions, oldest first, with their target's state around them.
    pub actions: Vec<AuditedAction>,
    /// What went wrong.
    pub trouble: Trouble,
    /// The flags' episodes that overlap the window (gpuboards before them send none).
    #[serde(default)]
    pub flags: Vec<crate::physical::FlagEpisode>,
}

/// The whole window's report from its history: `start` is the state at `ask.from`,
/// `versions` those recorded after it (oldest first), `samples` each device's (oldest
/// first, from up to [`usage::HOLD_MS`] before `ask.from`).
pub fn report(
    start: &Snapshot,
    versions: &[Record],
    samples: &BTreeMap<GpuRef, Vec<Tick>>,
    ask: &Ask,
) -> WindowReport {
    let story = tell(start, versions, ask.from, ask.to);
    WindowReport {
        from: ask.from,
        to: ask.to,
        history_from: None,
        usage: account(&story, samples, ask.idle),
        trouble: trouble::find(&story, samples, ask.pending_ms),
        actions: story.actions,
        flags: Vec::new(),
    }
}

#[cfg(test)]
mod tests;
