//! State versions as records: a keyframe (the whole state) or a delta (the watch's
//! `SnapshotChange`s from the version before), each with the changes it makes for people,
//! compressed with zstd. `Recording` decides, snapshot by snapshot, what to record; `replay`
//! rebuilds the state at a version from its keyframe and the deltas after it.

use serde::{Deserialize, Serialize};

use super::changes;
use super::wire::Change;
use crate::clock::Timestamp;
use crate::snapshot::{Snapshot, SnapshotChange, apply, diff};

/// A keyframe at least every this many versions: a seek replays at most as many deltas.
pub const KEYFRAME_EVERY: u32 = 64;
/// And at least this often, so that retention can cut at a keyframe near any time.
pub const KEYFRAME_MS: u64 = 3_600_000;
/// Between revisions, what drifts without one (debts accruing, an engine's pending demand)
/// is recorded at most this often.
pub const DRIFT_MS: u64 = 60_000;
/// zstd's level for records.
const LEVEL: i32 = 9;

/// What a record holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Body {
    /// The whole state.
    Keyframe {
        /// The state, without telemetry.
        state: Box<Snapshot>,
    },
    /// What changed from the version before.
    Delta {
        /// As the watch sends them.
        delta: Vec<SnapshotChange>,
    },
}

/// One recorded version.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// When it was recorded (the snapshot's `taken_at`).
    pub at: Timestamp,
    /// The state revision.
    pub revision: u64,
    /// Its content.
    pub body: Body,
    /// What changed from the version before, for people (stored apart from the body, so
    /// listing changes never decompresses a keyframe).
    pub changes: Vec<Change>,
}

/// Why a record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Not zstd, or cut short.
    #[error("record not readable: {0}")]
    Compression(String),
    /// Not a record.
    #[error("record damaged: {0}")]
    Damaged(#[from] serde_json::Error),
    /// Deltas without a keyframe before them.
    #[error("no keyframe before version {0}")]
    NoKeyframe(u64),
}

/// Changes compressed, to store beside their record.
pub fn encode_changes(changes: &[Change]) -> Vec<u8> {
    let raw = serde_json::to_vec(changes).unwrap_or_default();
    zstd::bulk::compress(&raw, LEVEL).unwrap_or(raw)
}

/// Changes read back from [`encode_changes`].
pub fn decode_changes(bytes: &[u8]) -> Result<Vec<Change>, RecordError> {
    let raw =
        zstd::stream::decode_all(bytes).map_err(|e| RecordError::Compression(e.to_string()))?;
    Ok(serde_json::from_slice(&raw)?)
}

impl Body {
    /// Compressed, to store.
    pub fn encode(&self) -> Vec<u8> {
        let raw = serde_json::to_vec(self).unwrap_or_default();
        zstd::bulk::compress(&raw, LEVEL).unwrap_or(raw)
    }

    /// Read back from [`Body::encode`].
    pub fn decode(bytes: &[u8]) -> Result<Body, RecordError> {
        let raw =
            zstd::stream::decode_all(bytes).map_err(|e| RecordError::Compression(e.to_string()))?;
        Ok(serde_json::from_slice(&raw)?)
    }

    /// Whether it is a keyframe.
    pub fn is_keyframe(&self) -> bool {
        matches!(self, Body::Keyframe { .. })
    }
}

/// The state part of a served snapshot: everything but telemetry and what is derived from
/// it (device telemetry, unclaimed memory, claims' memory used, over-limit and idle flags,
/// the host's load). Telemetry is recorded as samples; this is recorded exactly.
pub fn state_of(snap: &Snapshot) -> Snapshot {
    let mut s = snap.clone();
    for n in &mut s.nodes {
        for d in &mut n.devices {
            d.telemetry = None;
            d.unclaimed_memory = None;
        }
    }
    for c in &mut s.claims {
        c.memory_used = None;
        c.over_limit = false;
        c.idle = false;
    }
    s.host = None;
    s
}

/// Whether two states differ in what is recorded at once (a revision, claims, nodes, the
/// endpoint); `None` when they differ only in what drifts (ledgers, resources,
/// coordination records, events of engines without revisions); `Some(false)` when equal.
fn structural(old: &Snapshot, new: &Snapshot) -> Option<bool> {
    if old.revision != new.revision
        || old.endpoint != new.endpoint
        || old.nodes != new.nodes
        || old.claims != new.claims
    {
        return Some(true);
    }
    let drifted = old.projects != new.projects
        || old.resources != new.resources
        || old.coordination != new.coordination
        || old.events != new.events;
    if drifted { None } else { Some(false) }
}

/// What has been recorded so far, to decide what the next snapshot adds.
#[derive(Clone, Debug, Default)]
pub struct Recording {
    last: Option<Snapshot>,
    last_at: Timestamp,
    since_keyframe: u32,
    keyframe_at: Timestamp,
    /// The last record was not stored: the next snapshot is recorded whole, changed or not.
    must: bool,
}

impl Recording {
    /// Continues after `last`, the latest recorded state (read back on start), so the
    /// first new record is a delta from it and its changes say what happened meanwhile.
    /// A restart still begins with a keyframe.
    pub fn after(last: Option<(Snapshot, Timestamp)>) -> Recording {
        match last {
            None => Recording::default(),
            Some((state, at)) => Recording {
                last: Some(state),
                last_at: at,
                since_keyframe: KEYFRAME_EVERY,
                keyframe_at: at,
                must: false,
            },
        }
    }

    /// The last record could not be stored: the next snapshot makes a keyframe, changed
    /// or not, so no delta rests on a state the history lacks.
    pub fn force_keyframe(&mut self) {
        self.since_keyframe = KEYFRAME_EVERY;
        self.must = true;
    }

    /// The state last recorded.
    pub fn last(&self) -> Option<&Snapshot> {
        self.last.as_ref()
    }

    /// What `snap` (as served, telemetry and all) adds to the history, if anything.
    pub fn observe(&mut self, snap: &Snapshot) -> Option<Record> {
        let state = state_of(snap);
        let at = snap.taken_at;
        if let Some(last) = self.last.as_ref().filter(|_| !self.must) {
            match structural(last, &state) {
                Some(false) => return None,
                None if at.millis_since(self.last_at) < DRIFT_MS => return None,
                _ => {}
            }
        }
        let changes = changes::between(self.last.as_ref(), &state, at);
        let keyframe = self.last.is_none()
            || self.since_keyframe >= KEYFRAME_EVERY
            || at.millis_since(self.keyframe_at) >= KEYFRAME_MS;
        let body = match (&self.last, keyframe) {
            (Some(last), false) => {
                self.since_keyframe += 1;
                Body::Delta {
                    delta: diff(last, &state),
                }
            }
            _ => {
                self.since_keyframe = 0;
                self.keyframe_at = at;
                Body::Keyframe {
                    state: Box::new(state.clone()),
                }
            }
        };
        self.must = false;
        let record = Record {
            at,
            revision: state.revision,
            body,
            changes,
        };
        self.last = Some(state);
        self.last_at = at;
        Some(record)
    }
}

/// The state after `bodies` (a keyframe, then the deltas after it, in order).
pub fn replay(bodies: impl IntoIterator<Item = Body>) -> Result<Snapshot, RecordError> {
    let mut state: Option<Snapshot> = None;
    for b in bodies {
        match b {
            Body::Keyframe { state: s } => state = Some(*s),
            Body::Delta { delta } => {
                let Some(s) = state.as_mut() else {
                    return Err(RecordError::NoKeyframe(0));
                };
                apply(s, &delta);
            }
        }
    }
    state.ok_or(RecordError::NoKeyframe(0))
}
