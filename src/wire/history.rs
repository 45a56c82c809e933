//! The history API's contract: paths, queries and answers, shared by the endpoint (and
//! `gpuboard record`) that serves them and the client that reads them.
//!
//! Every route is a read (the read role may call it). TIME is milliseconds since the Unix
//! epoch (`1795442709000`) or RFC 3339 (`2026-11-23T14:05:09Z`); see [`parse_time`].
//!
//! - `GET /v1/snapshot?at=TIME`: the same `Snapshot` JSON as `GET /v1/snapshot`, as the
//!   endpoint served it then: its state at the last recorded version at or before TIME,
//!   with each device's telemetry at its last sample at or before TIME. The header
//!   [`AT_HEADER`] carries the time of the state shown (the later of the two, in ms), and
//!   [`HISTORY_FROM_HEADER`] where this endpoint's history begins. Before the history
//!   begins (or with no history yet): 404 with a [`BeforeHistory`] body, never an empty
//!   snapshot. An endpoint that records no history has no [`AT_HEADER`]: the client
//!   refuses such an answer rather than show the present as the past.
//! - `GET /v1/history`: [`HistoryInfo`], how far back it goes and its size.
//! - `GET /v1/history/changes?from=TIME&to=TIME[&gpu=NODE:INDEX|&claim=ID|&project=NAME][&limit=N]`:
//!   [`Changes`], the state changes in the window, oldest first.
//! - `GET /v1/history/seek?at=TIME&dir=next|prev[&gpu=|&claim=|&project=]`: [`Seek`], the
//!   next change after TIME (or the previous one before it) touching that target (any
//!   change without one); 404 when there is none.
//! - `GET /v1/history/telemetry?gpu=NODE:INDEX&from=TIME&to=TIME`: [`DeviceSeries`], the
//!   device's samples for charts, oldest first.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::snapshot::AuditEvent;
use crate::units::Bytes;

/// The routes.
pub mod paths {
    /// `GET`: [`super::HistoryInfo`].
    pub const HISTORY: &str = "/v1/history";
    /// `GET`: [`super::Changes`].
    pub const CHANGES: &str = "/v1/history/changes";
    /// `GET`: [`super::Seek`].
    pub const SEEK: &str = "/v1/history/seek";
    /// `GET`: [`super::DeviceSeries`].
    pub const TELEMETRY: &str = "/v1/history/telemetry";
}

/// Response header of `GET /v1/snapshot?at=`: the time of the state shown, ms since the epoch.
pub const AT_HEADER: &str = "x-gpuboard-at";
/// Response header of `GET /v1/snapshot?at=`: where the history begins, ms since the epoch.
pub const HISTORY_FROM_HEADER: &str = "x-gpuboard-history-from";
/// The error code of a [`BeforeHistory`] answer.
pub const BEFORE_HISTORY: &str = "before_history";
/// How the 404 detail of a seek that found no change starts (its error code is `no_change`).
pub const NO_CHANGE: &str = "no change";
/// The most changes one `changes` answer holds (and the default `limit`).
pub const MAX_CHANGES: usize = 10_000;
/// The most samples one `telemetry` answer holds (a week at 5 s has 120 960).
pub const MAX_SAMPLES: usize = 20_000;

/// Reads a TIME argument: whole milliseconds since the Unix epoch, or RFC 3339.
pub fn parse_time(raw: &str) -> Result<Timestamp, String> {
    let raw = raw.trim();
    // The latest time any store or clock here can hold (9999-12-30): a later one is the
    // caller's mistake (400), never an overflow deeper down (500).
    let latest = u64::try_from(jiff::Timestamp::MAX.as_millisecond()).unwrap_or(u64::MAX);
    let too_late = || {
        format!(
            "time `{raw}` is after 9999-12-30, the latest time accepted ({latest} ms since the \
             epoch)"
        )
    };
    if !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()) {
        return match raw.parse::<u64>() {
            Ok(ms) if ms <= latest => Ok(Timestamp(ms)),
            _ => Err(too_late()),
        };
    }
    let ts: jiff::Timestamp = raw.parse().map_err(|_| {
        // `9999-12-31T23:59:59Z` is RFC 3339, only out of range.
        let dated = raw.len() >= 10
            && raw.as_bytes()[..4].iter().all(u8::is_ascii_digit)
            && raw.as_bytes()[4] == b'-'
            && raw.starts_with("9999");
        if dated {
            too_late()
        } else {
            format!(
                "time `{raw}` is neither milliseconds since the Unix epoch nor RFC 3339 \
                 (2026-11-23T14:05:09Z)"
            )
        }
    })?;
    u64::try_from(ts.as_millisecond())
        .map(Timestamp)
        .map_err(|_| format!("time `{raw}` is before 1970"))
}

/// A device of the endpoint, written `NODE:INDEX` in queries (the last `:` splits).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GpuRef {
    /// Node name.
    pub node: String,
    /// Index on the node.
    pub index: u32,
}

impl fmt::Display for GpuRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.node, self.index)
    }
}

impl FromStr for GpuRef {
    type Err = String;
    fn from_str(s: &str) -> Result<GpuRef, String> {
        let bad = || format!("gpu `{s}` must be NODE:INDEX, as `node-a:3`");
        let (node, index) = s.rsplit_once(':').ok_or_else(bad)?;
        if node.is_empty() {
            return Err(bad());
        }
        Ok(GpuRef {
            node: node.to_string(),
            index: index.parse().map_err(|_| bad())?,
        })
    }
}

/// What a change touches, to filter changes and seeks by: one GPU, one claim or one project.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// A device.
    Gpu(GpuRef),
    /// A claim.
    Claim(ClaimId),
    /// A project.
    Project(String),
}

impl Target {
    /// The query parameter that names it (`gpu=a:3`, `claim=17`, `project=vision`), encoded.
    pub fn query(&self) -> String {
        match self {
            Target::Gpu(g) => format!("gpu={}", encode(&g.to_string())),
            Target::Claim(id) => format!("claim={id}"),
            Target::Project(p) => format!("project={}", encode(p)),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Gpu(g) => write!(f, "GPU {g}"),
            Target::Claim(id) => write!(f, "claim {id}"),
            Target::Project(p) => write!(f, "project {p}"),
        }
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
pub fn encode(value: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Which way a seek goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// The first change strictly after the time.
    Next,
    /// The last change strictly before the time.
    Prev,
}

impl Direction {
    /// As the query writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Next => "next",
            Direction::Prev => "prev",
        }
    }
}

/// The 404 body of `GET /v1/snapshot?at=` before the history begins.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeforeHistory {
    /// Always [`BEFORE_HISTORY`].
    pub error: String,
    /// In words: the time asked and where the history begins.
    pub detail: String,
    /// Where this endpoint's history begins; `null` when nothing is recorded yet.
    pub history_from: Option<Timestamp>,
}

/// `GET /v1/history`: how far back the history goes, and its size.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryInfo {
    /// The earliest time a snapshot can be shown for; `null` when nothing is recorded.
    pub from: Option<Timestamp>,
    /// The latest recorded time (state or telemetry); `null` when nothing is recorded.
    pub to: Option<Timestamp>,
    /// Bytes the history takes on disk.
    pub bytes: Bytes,
    /// State versions recorded (keyframes included).
    pub versions: u64,
    /// Of those, whole snapshots.
    pub keyframes: u64,
    /// Telemetry samples recorded (one per device per sampling).
    pub samples: u64,
    /// Retention by age, days.
    pub keep_days: u32,
    /// Retention by size.
    pub keep_bytes: Bytes,
    /// Set when recording has stopped (a full disk...), saying why; the endpoint serves on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// What kind of change a [`HistoryChange`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A claim appeared holding devices.
    ClaimPlaced,
    /// A claim appeared waiting.
    ClaimPending,
    /// A waiting claim got its devices.
    ClaimStarted,
    /// A placed claim now holds other devices (or another node).
    ClaimMoved,
    /// A claim is gone (released, expired, its owner gone: the event says which).
    ClaimEnded,
    /// Something else about a claim changed (lease renewed, pending reasons...).
    ClaimChanged,
    /// A device stopped taking new claims.
    Cordoned,
    /// A device takes new claims again.
    Uncordoned,
    /// A device's health or capacity changed.
    DeviceChanged,
    /// A node appeared.
    NodeAdded,
    /// A node is gone.
    NodeRemoved,
    /// A project's share changed, or it appeared.
    ShareChanged,
    /// A project's ledger changed: debts reset, a backoff started or ended.
    LedgerChanged,
    /// The endpoint's own information changed (its store failed, a warning...).
    EndpointChanged,
    /// An audit event that matched no other change.
    Event,
    /// A kind this build does not know (from a newer endpoint).
    #[serde(other)]
    Other,
}

/// One change of the recorded state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryChange {
    /// When it was recorded.
    pub at: Timestamp,
    /// The endpoint's state revision it produced (`Snapshot::revision`).
    pub version: u64,
    /// What kind of change.
    pub kind: ChangeKind,
    /// The devices it touches.
    #[serde(default)]
    pub gpus: Vec<GpuRef>,
    /// The claim it touches, if any.
    #[serde(default)]
    pub claim: Option<ClaimId>,
    /// The project it touches, if any.
    #[serde(default)]
    pub project: Option<String>,
    /// In words: `claim 17 (vision) placed on a:0,a:1`.
    pub summary: String,
    /// The audit event behind it (who did it), when it came from one.
    #[serde(default)]
    pub event: Option<AuditEvent>,
}

/// `GET /v1/history/changes`: the changes in a window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Changes {
    /// The window's start, as asked.
    pub from: Timestamp,
    /// The window's end, as asked.
    pub to: Timestamp,
    /// Oldest first.
    pub changes: Vec<HistoryChange>,
    /// More changes were in the window than `limit`: ask again from the last one's time.
    pub truncated: bool,
}

/// `GET /v1/history/seek`: where the next (or previous) change is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seek {
    /// When it was recorded: `GET /v1/snapshot?at=` this time shows the state it made.
    pub at: Timestamp,
    /// The state revision it produced.
    pub version: u64,
}

/// One telemetry sample of a device. Metrics are `null` when the device did not report
/// them. Power is recorded to the watt.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// When it was sampled.
    pub at: Timestamp,
    /// GPU utilization, percent.
    pub utilization_gpu: Option<u32>,
    /// Memory in use, bytes.
    pub memory_used: Option<Bytes>,
    /// Memory reserved by claims then, bytes.
    pub memory_reserved: Bytes,
    /// Power draw, milliwatts (a whole number of watts).
    pub power_mw: Option<u32>,
    /// Temperature, degrees Celsius.
    pub temperature_c: Option<u32>,
    /// SM clock, MHz.
    pub clock_sm_mhz: Option<u32>,
    /// Memory clock, MHz.
    pub clock_memory_mhz: Option<u32>,
}

/// `GET /v1/history/telemetry`: one device's samples in a window.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSeries {
    /// The device, as `NODE:INDEX`.
    pub gpu: String,
    /// The window's start, as asked.
    pub from: Timestamp,
    /// The window's end, as asked.
    pub to: Timestamp,
    /// Oldest first.
    pub samples: Vec<Sample>,
    /// More than [`MAX_SAMPLES`] were in the window: these are the first.
    pub truncated: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_millis_or_rfc3339() {
        assert_eq!(
            parse_time("1795442709000"),
            Ok(Timestamp(1_795_442_709_000))
        );
        assert_eq!(
            parse_time("2026-11-23T14:05:09Z"),
            Ok(Timestamp(1_795_442_709_000))
        );
        assert_eq!(
            parse_time("2026-11-23T16:05:09+02:00"),
            Ok(Timestamp(1_795_442_709_000))
        );
        let e = parse_time("yesterday").unwrap_err();
        assert!(e.contains("RFC 3339"), "{e}");
        assert!(parse_time("1969-12-31T23:59:59Z").is_err());
        assert!(parse_time("99999999999999999999999").is_err());
        // Past what a store can hold: refused as too late, not left to overflow later.
        for late in [
            "9223372036854775808",
            "18446744073709551615",
            "9999-12-31T23:59:59Z",
        ] {
            let e = parse_time(late).unwrap_err();
            assert!(e.contains("after 9999-12-30"), "{late}: {e}");
        }
    }

    #[test]
    fn gpus_read_node_colon_index() {
        let g: GpuRef = "host:a:3".parse().unwrap();
        assert_eq!((g.node.as_str(), g.index), ("host:a", 3));
        assert_eq!(g.to_string(), "host:a:3");
        assert!("nocolon".parse::<GpuRef>().is_err());
        assert!(":3".parse::<GpuRef>().is_err());
        assert!("a:x".parse::<GpuRef>().is_err());
        assert_eq!(Target::Gpu(g).query(), "gpu=host%3Aa%3A3");
    }

    #[test]
    fn unknown_change_kinds_read_as_other() {
        let k: ChangeKind = serde_json::from_str("\"claim_teleported\"").unwrap();
        assert_eq!(k, ChangeKind::Other);
        let k: ChangeKind = serde_json::from_str("\"claim_moved\"").unwrap();
        assert_eq!(k, ChangeKind::ClaimMoved);
    }
}
