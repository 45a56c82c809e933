//! State versions as records: a keyframe (the whole state) or a delta (the watch's
//! `SnapshotChange`s from the version before), each with the changes it makes for people,
//! compressed with zstd. `Recording` decides, snapshot by snapshot, what to record; `replay`
//! rebuilds the state at a version from its keyframe and the deltas after it.

use serde::{Deserialize, Serialize};

use super::changes;
use crate::clock::Timestamp;
use crate::snapshot::{Snapshot, SnapshotChange, apply, diff_whole};
use crate::wire::history::HistoryChange;

/// A keyframe at least every this many versions: a seek replays at most as many deltas.
pub const KEYFRAME_EVERY: u32 = 64;
/// And at least this often, so that retention can cut at a keyframe near any time.
pub const KEYFRAME_MS: u64 = 3_600_000;
/// Between revisions, what drifts without one (debts accruing, an engine's pending demand)
/// is recorded at most this often.
pub const DRIFT_MS: u64 = 900_000;
/// zstd's level for keyframes: the whole state, written at most every 64 versions.
const KEYFRAME_LEVEL: i32 = 9;
/// And for deltas and changes, written with every version: under a saturating claim load a
/// version carries thousands of audit events, and level 9 there was half the recorder's CPU.
const LEVEL: i32 = 3;

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

/// [`Body`] as stored, read field by field.
#[derive(Deserialize)]
struct BodyWire {
    kind: BodyKind,
    #[serde(default)]
    state: Option<Box<Snapshot>>,
    #[serde(default)]
    delta: Option<Vec<SnapshotChange>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum BodyKind {
    Keyframe,
    Delta,
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
    pub changes: Vec<HistoryChange>,
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
    /// A part the record's kind must have is missing.
    #[error("record damaged: {0} is missing")]
    Missing(&'static str),
    /// Deltas without a keyframe before them.
    #[error("no keyframe before version {0}")]
    NoKeyframe(u64),
}

/// Changes compressed, to store beside their record.
pub fn encode_changes(changes: &[HistoryChange]) -> Vec<u8> {
    let raw = serde_json::to_vec(changes).unwrap_or_default();
    zstd::bulk::compress(&raw, LEVEL).unwrap_or(raw)
}

/// Changes read back from [`encode_changes`].
pub fn decode_changes(bytes: &[u8]) -> Result<Vec<HistoryChange>, RecordError> {
    let raw = super::chunk::decompress(bytes).map_err(RecordError::Compression)?;
    Ok(serde_json::from_slice(&raw)?)
}

impl Body {
    /// Compressed, to store.
    pub fn encode(&self) -> Vec<u8> {
        let raw = serde_json::to_vec(self).unwrap_or_default();
        let level = if self.is_keyframe() {
            KEYFRAME_LEVEL
        } else {
            LEVEL
        };
        zstd::bulk::compress(&raw, level).unwrap_or(raw)
    }

    /// Read back from [`Body::encode`].
    pub fn decode(bytes: &[u8]) -> Result<Body, RecordError> {
        let raw = super::chunk::decompress(bytes).map_err(RecordError::Compression)?;
        // Read as a plain struct: serde reads an internally tagged enum by first copying
        // the whole value into a buffer, which doubled the cost of reading a keyframe.
        let wire: BodyWire = serde_json::from_slice(&raw)?;
        match (wire.kind, wire.state, wire.delta) {
            (BodyKind::Keyframe, Some(state), _) => Ok(Body::Keyframe { state }),
            (BodyKind::Delta, _, Some(delta)) => Ok(Body::Delta { delta }),
            (BodyKind::Keyframe, None, _) => Err(RecordError::Missing("a keyframe's state")),
            (BodyKind::Delta, _, None) => Err(RecordError::Missing("a delta's changes")),
        }
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
        || ledger_marks(old) != ledger_marks(new)
    {
        return Some(true);
    }
    let drifted = old.projects != new.projects
        || old.resources != new.resources
        || old.coordination != new.coordination
        || old.events != new.events;
    if drifted { None } else { Some(false) }
}

/// What of the projects' accounts changes by events, not by the passing of time: shares,
/// counts, eligibility and backoffs (debts and targets drift and are not in it).
fn ledger_marks(s: &Snapshot) -> Vec<(&str, u32, u32, u32, Vec<LedgerMark<'_>>)> {
    s.projects
        .iter()
        .map(|p| {
            let marks = p
                .resources
                .iter()
                .map(|r| {
                    (
                        r.resource.as_str(),
                        r.eligible,
                        r.backoff_until,
                        r.backoff_interval_s,
                        r.pending,
                    )
                })
                .collect();
            (p.name.as_str(), p.share, p.running, p.pending, marks)
        })
        .collect()
}

type LedgerMark<'a> = (&'a str, bool, Option<Timestamp>, Option<u64>, u32);

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
        let body = if let (Some(last), false) = (&self.last, keyframe) {
            self.since_keyframe += 1;
            // The form every gpuboard reads, so an older one can still open this history.
            Body::Delta {
                delta: diff_whole(last, &state),
            }
        } else {
            self.since_keyframe = 0;
            self.keyframe_at = at;
            Body::Keyframe {
                state: Box::new(state.clone()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{
        ClaimState, ClaimView, DeviceTelemetry, DeviceView, NodeView, ProjectView,
    };

    fn snap(revision: u64, at: u64, util: u32) -> Snapshot {
        Snapshot {
            schema: 1,
            revision,
            taken_at: Timestamp(at),
            nodes: vec![NodeView {
                name: "a".into(),
                devices: vec![DeviceView {
                    index: 0,
                    telemetry: Some(DeviceTelemetry {
                        sampled_at: Timestamp(at),
                        utilization_gpu: Some(util),
                        ..DeviceTelemetry::default()
                    }),
                    ..DeviceView::default()
                }],
                ..NodeView::default()
            }],
            projects: vec![ProjectView {
                name: "vision".into(),
                overall_debt: at as f64,
                ..ProjectView::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn telemetry_alone_records_nothing_and_drift_only_now_and_then() {
        let mut r = Recording::default();
        let first = r.observe(&snap(1, 1_000, 10)).unwrap();
        assert!(first.body.is_keyframe() && first.changes.is_empty());
        assert!(
            r.observe(&snap(1, 2_000, 90)).is_none(),
            "telemetry is sampled apart"
        );
        assert!(r.observe(&snap(1, 3_000, 90)).is_none(), "debt drift waits");
        let drift = r.observe(&snap(1, 1_000 + DRIFT_MS, 90)).unwrap();
        assert!(!drift.body.is_keyframe());
        let rev = r.observe(&snap(2, 1_001 + DRIFT_MS, 90)).unwrap();
        assert_eq!(rev.revision, 2);
        let state = replay([first.body, drift.body, rev.body]).unwrap();
        assert_eq!(state, state_of(&snap(2, 1_001 + DRIFT_MS, 90)));
        assert!(state.nodes[0].devices[0].telemetry.is_none());
    }

    #[test]
    fn keyframes_come_every_so_many_versions_and_after_a_lost_write() {
        let mut r = Recording::default();
        let mut kinds = Vec::new();
        for v in 1..=(u64::from(KEYFRAME_EVERY) + 3) {
            kinds.push(r.observe(&snap(v, v, 0)).unwrap().body.is_keyframe());
        }
        // A keyframe, then KEYFRAME_EVERY deltas at most, then a keyframe.
        let every = KEYFRAME_EVERY as usize;
        assert!(kinds[0] && kinds[1..=every].iter().all(|k| !k) && kinds[every + 1]);
        r.force_keyframe();
        let again = r
            .observe(&snap(u64::from(KEYFRAME_EVERY) + 3, 999, 0))
            .unwrap();
        assert!(
            again.body.is_keyframe(),
            "recorded whole even though unchanged"
        );
    }

    #[test]
    fn a_claim_placed_then_released_reads_as_two_changes() {
        use crate::wire::history::ChangeKind;
        let mut with = snap(2, 2_000, 0);
        with.claims.push(ClaimView {
            id: crate::ids::ClaimId(7),
            name: None,
            state: ClaimState::Placed,
            project: "vision".into(),
            holder: None,
            form: "num_gpus=1".into(),
            request: crate::request::ClaimRequest::from_json(&serde_json::json!({"num_gpus": 1}))
                .unwrap(),
            node: Some("a".into()),
            shares: vec![crate::placement::DeviceShare {
                device: 0,
                memory: crate::units::Bytes(0),
                compute: crate::units::Units(0),
                slots: crate::units::Slots(1),
            }],
            memory_reserved: crate::units::Bytes(0),
            compute_reserved: crate::units::Units(0),
            memory_used: None,
            over_limit: false,
            idle: false,
            created_at: Timestamp(2_000),
            lease_expires_at: None,
            pending_reasons: Vec::new(),
            infeasible: false,
        });
        let mut r = Recording::default();
        r.observe(&snap(1, 1_000, 0));
        let placed = r.observe(&with).unwrap();
        let ended = r.observe(&snap(3, 3_000, 0)).unwrap();
        assert_eq!(placed.changes[0].kind, ChangeKind::ClaimPlaced);
        assert_eq!(placed.changes[0].gpus[0].to_string(), "a:0");
        assert_eq!(ended.changes[0].kind, ChangeKind::ClaimEnded);
        let keys = crate::history::changes::keys(&ended.changes[0]);
        assert!(keys.contains("c:7") && keys.contains("g:a:0") && keys.contains("p:vision"));
    }
}
