//! The HTTP API v1 contract, shared by the endpoint (`endpoint::api`), its client
//! (`client`), the CLI and the console: paths, the default port, request and answer
//! bodies, and the error body. Neither side builds these by hand, so they cannot drift.
//!
//! The read model (`GET /v1/snapshot`) is [`crate::snapshot`]; claim requests are
//! [`ClaimRequest`], written to the wire by [`claim_body`] and read by
//! [`ClaimRequest::from_json`], the one validator. The other request bodies (move, renew,
//! share) are serde records in `bodies`, read by the endpoint with [`read_body`].

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::ids::ClaimId;
use crate::placement::NoFit;
use crate::request::{ClaimRequest, GpuForm, RequestError, ShareMemory};
use crate::snapshot::{ClaimView, Snapshot, SnapshotChange};
use crate::units::UNITS_PER_DEVICE;

mod bodies;
pub mod capacity;
pub mod deflate;
pub mod forecast;
pub mod history;

pub use bodies::{MoveBody, RenewBody, RequestBody, ShareBody, json_kind, read_body};

/// The port `gpuboard serve` listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 7420;

/// The default endpoint: the local `gpuboard serve`.
pub fn default_endpoint() -> String {
    format!("http://127.0.0.1:{DEFAULT_PORT}")
}

/// Request paths, relative to the endpoint's base URL.
/// The header where a client reports who runs it (`user@host`), recorded beside the token's
/// name as the actor of every change it makes. Informative only: the token decides access.
pub const ACTOR_HEADER: &str = "x-gpuboard-user";

/// The longest `ACTOR_HEADER` value kept; longer ones are cut.
pub const ACTOR_MAX: usize = 80;

/// A certificate's SHA-256 fingerprint as `gpuboard serve` prints it and clients pin it:
/// upper-case hex pairs joined by colons.
pub fn tls_fingerprint(der: &[u8]) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(der);
    digest
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A fingerprint as given by a person (any case, with or without colons, an optional
/// `sha256:` prefix) in the form `tls_fingerprint` writes; `None` when it is not 32 bytes
/// of hex.
pub fn normalize_fingerprint(given: &str) -> Option<String> {
    let t = given.trim();
    let t = t
        .strip_prefix("sha256:")
        .or_else(|| t.strip_prefix("SHA256:"))
        .unwrap_or(t);
    let hex: String = t.chars().filter(|c| *c != ':').collect();
    if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let upper = hex.to_ascii_uppercase();
    Some(
        upper
            .as_bytes()
            .chunks(2)
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect::<Vec<_>>()
            .join(":"),
    )
}

pub mod paths {
    use std::fmt::Write as _;

    use crate::ids::ClaimId;

    /// `GET`: liveness, no token needed.
    pub const HEALTHZ: &str = "/healthz";
    /// `GET`: the whole state (snapshot schema v1).
    pub const SNAPSHOT: &str = "/v1/snapshot";
    /// `GET`: what placement needs of the state (`wire::capacity`).
    pub const CAPACITY: &str = "/v1/capacity";
    /// `GET`: server-sent events as the state changes.
    pub const WATCH: &str = "/v1/watch";
    /// The query of `GET` [`WATCH`] that asks for the delta watch in the form `format`
    /// (`DELTA_FORMAT`, or `PER_PROJECT_FORMAT` from an endpoint that refused it),
    /// compressed (`deflate=1`, `wire::deflate`; an endpoint from before it ignores the
    /// word), resuming after `since` when given.
    pub fn watch_deltas_query(since: Option<super::SnapshotVersion>, format: &str) -> String {
        match since {
            Some(v) => format!("deltas=1&format={format}&deflate=1&since={v}"),
            None => format!("deltas=1&format={format}&deflate=1"),
        }
    }
    /// The delta form this build asks for: the per-project form with telemetry figures
    /// (`format=3`: `figures` changes, `snapshot::with_figures`). An endpoint from before
    /// it refuses the word (400), and is asked [`PER_PROJECT_FORMAT`] instead.
    pub const DELTA_FORMAT: &str = "3";
    /// The per-project form (`format=2`: `project`, `project_removed` and `revision`
    /// changes; an endpoint from before it ignores the word and sends whole lists, which
    /// this build reads too).
    pub const PER_PROJECT_FORMAT: &str = "2";
    /// `POST`: create a claim.
    pub const CLAIMS: &str = "/v1/claims";
    /// `GET`: Prometheus metrics.
    pub const METRICS: &str = "/metrics";
    /// Every waiting claim's expected start.
    pub const FORECAST: &str = "/v1/forecast";
    /// What an action would do, before it is taken.
    pub const PREVIEW: &str = "/v1/preview";

    /// `DELETE`: release a claim.
    pub fn claim(id: ClaimId) -> String {
        format!("{CLAIMS}/{id}")
    }
    /// `POST` a [`super::MoveBody`]: move a claim.
    pub fn claim_move(id: ClaimId) -> String {
        format!("{CLAIMS}/{id}/move")
    }
    /// `POST` a [`super::RenewBody`]: renew a claim's lease.
    pub fn claim_renew(id: ClaimId) -> String {
        format!("{CLAIMS}/{id}/renew")
    }
    /// `POST`: stop (`cordoned`) or resume new claims on a device.
    pub fn cordon(node: &str, index: u32, cordoned: bool) -> String {
        let verb = if cordoned { "cordon" } else { "uncordon" };
        format!("/v1/devices/{}/{index}/{verb}", segment(node))
    }
    /// `PUT` a [`super::ShareBody`]: set a project's share.
    pub fn project(name: &str) -> String {
        format!("/v1/projects/{}", segment(name))
    }
    /// `POST`: clear a project's backoffs and debts.
    pub fn project_reset(name: &str) -> String {
        format!("/v1/projects/{}/reset", segment(name))
    }

    /// Percent-encodes one path segment (node and project names may hold `/`).
    fn segment(s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                out.push(char::from(b));
            } else {
                let _ = write!(out, "%{b:02X}");
            }
        }
        out
    }
}

/// The JSON body of every error answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A stable code: `invalid_request`, `does_not_fit`, `not_found`, `conflict`...
    #[serde(default)]
    pub error: String,
    /// What was wrong and what is allowed, in words.
    #[serde(default)]
    pub detail: String,
    /// For `invalid_request`: the broken rule's code (`unknown-field`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// For `invalid_request`: the rule's number in the design's validation rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_number: Option<u8>,
    /// For `invalid_request`: the field at fault (null when none is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// For `does_not_fit`: one line per node (over 16 nodes: a line for the fleet, the nodes
    /// nearest to fitting, and a count of the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<String>>,
    /// For `does_not_fit`: waiting will not help.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infeasible: Option<bool>,
    /// For `does_not_fit`: the structured reasons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_fit: Option<NoFit>,
}

impl ErrorBody {
    /// A body with just a code and a detail.
    pub fn new(error: &str, detail: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: error.to_string(),
            detail: detail.into(),
            ..ErrorBody::default()
        }
    }

    /// `invalid_request` for a broken validation rule.
    pub fn invalid(e: &RequestError) -> ErrorBody {
        ErrorBody {
            rule: Some(e.rule.code().to_string()),
            rule_number: Some(e.rule.number()),
            field: e.field.clone(),
            ..ErrorBody::new("invalid_request", e.message.clone())
        }
    }

    /// `does_not_fit`, with `lead` before the summary when given.
    pub fn no_fit(no: &NoFit, lead: Option<&str>) -> ErrorBody {
        let detail = match lead {
            Some(l) => format!("{l}: {}", no.summary()),
            None => no.summary(),
        };
        ErrorBody {
            reasons: Some(no.lines()),
            infeasible: Some(no.infeasible),
            no_fit: Some(no.clone()),
            ..ErrorBody::new("does_not_fit", detail)
        }
    }
}

/// The answer to `DELETE /v1/claims/{id}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Released {
    /// The id asked for.
    pub id: ClaimId,
    /// False when there was no such claim (already released).
    pub released: bool,
    /// The claim as it was.
    pub claim: Option<ClaimView>,
}

/// The answer to a cordon or uncordon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cordoned {
    /// Node.
    pub node: String,
    /// Device index.
    pub index: u32,
    /// The device's state now.
    pub cordoned: bool,
}

/// The answer to `PUT /v1/projects/{name}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareSet {
    /// The project.
    pub project: String,
    /// Its share now.
    pub share: u32,
}

/// The answer to `POST /v1/projects/{name}/reset`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectReset {
    /// The project.
    pub project: String,
    /// Always true: its backoffs and debts were cleared.
    pub reset: bool,
}

/// The header a cross-endpoint move sends with its claim on the target and its release
/// on the source: both endpoints audit the same move id (`operator (move ID)`).
pub const MOVE_HEADER: &str = "x-gpuboard-move";

/// The reverse of [`move_actor`]: the caller and, for a step of a move, its move id.
pub fn split_move_actor(actor: &str) -> (&str, Option<&str>) {
    actor
        .strip_suffix(')')
        .and_then(|a| a.rsplit_once(" (move "))
        .filter(|(_, id)| !id.is_empty() && !id.contains([' ', '(', ')']))
        .map_or((actor, None), |(caller, id)| (caller, Some(id)))
}

/// The audit actor of a mutation by `caller` that came with `MOVE_HEADER` (or without
/// one): a move id is 1 to 64 ASCII letters, digits, `-` or `_`; anything else is refused
/// with why.
pub fn move_actor(caller: &str, move_id: Option<&str>) -> Result<String, String> {
    let Some(id) = move_id else {
        return Ok(caller.to_string());
    };
    let ok = (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(format!("{caller} (move {id})"))
    } else {
        Err(format!(
            "header {MOVE_HEADER} must be 1 to 64 letters, digits, `-` or `_`; got `{}`",
            id.chars().take(80).collect::<String>()
        ))
    }
}

/// The header a client sends with `POST /v1/claims` to make it idempotent: the endpoint
/// records the key with the claim, in the same commit, and answers any later request with
/// the same key (and body) what the first one did (docs/design.md, "Idempotent claims").
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// Set (`true`) on an answer replayed for an idempotency key seen before.
pub const IDEMPOTENT_REPLAY_HEADER: &str = "idempotent-replayed";

/// The error code of a 409 to a keyed claim whose first request with that key is still
/// being committed: it will land (or fail with the store); ask again with the same key.
pub const IN_FLIGHT: &str = "in_flight";

/// The longest idempotency key accepted, in bytes.
pub const MAX_IDEMPOTENCY_KEY: usize = 128;

/// An idempotency key as sent: 1 to `MAX_IDEMPOTENCY_KEY` visible ASCII characters (no
/// spaces); anything else is refused with why.
pub fn idempotency_key(raw: &str) -> Result<&str, String> {
    let ok =
        (1..=MAX_IDEMPOTENCY_KEY).contains(&raw.len()) && raw.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(raw)
    } else {
        Err(format!(
            "header {IDEMPOTENCY_HEADER} must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters \
             (no spaces); got `{}`",
            raw.chars().take(80).collect::<String>().escape_debug()
        ))
    }
}

/// How often a delta watch (`GET /v1/watch?deltas=1`) says it is alive when nothing else
/// was sent: only an idle stream sends heartbeats, and this is what an idle console pays
/// per endpoint (it was 10 s; 25 s keeps 5 s under `SILENT_AFTER` for a slow peer).
pub const HEARTBEAT: Duration = Duration::from_secs(25);

/// A client that hears nothing from a delta watch for this long counts the stream as dead
/// (the console shows the endpoint stale). 30 s, as when it was 3 heartbeats of 10 s: a
/// hung endpoint shows stale no later than before. A dead one whose connection closes
/// shows at once.
pub const SILENT_AFTER: Duration = Duration::from_secs(30);

/// A version of one endpoint's snapshot, written `"EPOCH.SEQ"` on the wire (`ETag`, SSE
/// ids, `since`). `epoch` is drawn at random when the endpoint starts (a new one means a
/// restart: nothing from before can be resumed); `seq` counts the snapshots it built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SnapshotVersion {
    /// Random per endpoint process.
    pub epoch: u64,
    /// One more for each new snapshot of that process.
    pub seq: u64,
}

impl std::fmt::Display for SnapshotVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.epoch, self.seq)
    }
}

/// Why a text is not a `SnapshotVersion`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a snapshot version (EPOCH.SEQ, two whole numbers)")]
pub struct BadVersion(pub String);

impl std::str::FromStr for SnapshotVersion {
    type Err = BadVersion;

    fn from_str(s: &str) -> Result<SnapshotVersion, BadVersion> {
        let bad = || BadVersion(s.chars().take(64).collect());
        let number = |t: &str| {
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            t.parse::<u64>().map_err(|_| bad())
        };
        let (epoch, seq) = s.split_once('.').ok_or_else(bad)?;
        Ok(SnapshotVersion {
            epoch: number(epoch)?,
            seq: number(seq)?,
        })
    }
}

impl Serialize for SnapshotVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SnapshotVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SnapshotVersion, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Event names of the delta watch (`GET /v1/watch?deltas=1`), as its SSE `event:` lines say.
pub mod watch_events {
    /// The whole snapshot (data: snapshot schema v1; id: its version).
    pub const SNAPSHOT: &str = "snapshot";
    /// The changes from one version to the next (data: [`super::DeltaBody`]).
    pub const DELTA: &str = "delta";
    /// `since` cannot be resumed (data: [`super::ResyncBody`]); a `snapshot` follows.
    pub const RESYNC: &str = "resync";
    /// Nothing changed (data: [`super::HeartbeatBody`]).
    pub const HEARTBEAT: &str = "heartbeat";
}

/// The data of a `delta` event: the changes that turn version `from` into `to`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeltaBody {
    /// The version the changes apply to (the one sent before).
    pub from: SnapshotVersion,
    /// The version they make.
    pub to: SnapshotVersion,
    /// In order; see [`crate::snapshot::apply`].
    pub changes: Vec<SnapshotChange>,
}

/// The data of a `resync` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResyncBody {
    /// Why `since` could not be resumed, in words.
    pub reason: String,
}

/// The data of a `heartbeat` event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatBody {
    /// The version the watcher is at.
    pub version: SnapshotVersion,
}

/// One event of a delta watch, as the client reads it.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent {
    /// The whole state: replaces what the watcher had.
    Snapshot {
        /// Its version.
        version: SnapshotVersion,
        /// The state.
        snapshot: Box<Snapshot>,
    },
    /// Changes from the version the watcher is at to the next.
    Delta(DeltaBody),
    /// The watcher's version cannot be resumed; a `Snapshot` follows.
    Resync {
        /// Why.
        reason: String,
    },
    /// Still alive, nothing changed.
    Heartbeat {
        /// The version the watcher is at.
        version: SnapshotVersion,
    },
}

/// The body of `POST /v1/claims` for a request: its form under the canonical field
/// names (`gpu_memory`, `num_gpus`, `gpu-memory`/`gpu-memory-ratio` + `gpu-core` +
/// `gpu.shared`, `koordinator.sh/gpu`, `nvidia.com/gpu`) and the fields every form may
/// carry. [`ClaimRequest::from_json`] reads it back to the same request.
pub fn claim_body(request: &ClaimRequest) -> Value {
    let mut m = Map::new();
    if let Some(form) = &request.gpu {
        gpu_fields(form, &mut m);
    }
    if let Some(c) = request.cpus {
        m.insert("cpus".into(), json!(format!("{}m", c.0)));
    }
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.to_string(), v);
        }
    };
    put(
        "accelerator_type",
        request.accelerator_type.clone().map(Value::from),
    );
    put("node", request.node.clone().map(Value::from));
    put("devices", request.devices.as_ref().map(|d| json!(d)));
    put("project", Some(Value::from(request.project.clone())));
    put("holder", request.holder.clone().map(Value::from));
    put("ttl", request.ttl.map(Value::from));
    put("pid", request.pid.map(Value::from));
    put(
        "expected_duration",
        request.expected_duration.map(Value::from),
    );
    if !request.labels.is_empty() {
        put("labels", Some(json!(request.labels)));
    }
    if request.wait {
        put("wait", Some(Value::Bool(true)));
    }
    Value::Object(m)
}

fn gpu_fields(form: &GpuForm, m: &mut Map<String, Value>) {
    match *form {
        GpuForm::RayFraction { fraction } => {
            let f = f64::from(fraction.0) / f64::from(UNITS_PER_DEVICE);
            m.insert("num_gpus".into(), json!(f));
        }
        GpuForm::RayWhole { count } => {
            m.insert("num_gpus".into(), json!(count));
        }
        GpuForm::RayMemory { memory } => {
            m.insert("gpu_memory".into(), json!(memory.0));
        }
        GpuForm::Vendor { count } => {
            m.insert("nvidia.com/gpu".into(), json!(count));
        }
        GpuForm::KoordinatorShare {
            memory,
            core,
            shared,
            legacy,
        } => {
            match (legacy, memory, core) {
                // The legacy form meant core = ratio = X; write it back as it came.
                (true, ShareMemory::Ratio(r), Some(c)) if c == r => {
                    m.insert("koordinator.sh/gpu".into(), json!(r));
                }
                (_, ShareMemory::Ratio(r), _) => {
                    m.insert("gpu-memory-ratio".into(), json!(r));
                    if let Some(c) = core {
                        m.insert("gpu-core".into(), json!(c));
                    }
                }
                (_, ShareMemory::Bytes(b), _) => {
                    m.insert("gpu-memory".into(), json!(b.0));
                    if let Some(c) = core {
                        m.insert("gpu-core".into(), json!(c));
                    }
                }
            }
            m.insert("gpu.shared".into(), json!(shared));
        }
    }
}

/// A claim as an operator types it, flag by flag (the CLI's `claim` flags, the console's
/// claim form): amounts stay text until [`ClaimDraft::to_request`] hands them to the one
/// validator, so its message names the problem. This is the one place that decides which
/// wire field a flag becomes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClaimDraft {
    /// GPU memory (`20GiB`): Ray's `gpu_memory`, or Koordinator's `gpu-memory` when a
    /// share field (core, shared, ratio) is also given.
    pub memory: Option<String>,
    /// Ray `num_gpus`: a fraction below 1 or a whole count.
    pub fraction: Option<String>,
    /// `nvidia.com/gpu`: whole devices.
    pub gpus: Option<String>,
    /// Koordinator `gpu-memory-ratio` percent.
    pub ratio: Option<String>,
    /// Koordinator `gpu-core` percent.
    pub core: Option<String>,
    /// Koordinator `gpu.shared` devices.
    pub shared: Option<String>,
    /// CPU cores (`2`, `0.5`, `500m`).
    pub cpus: Option<String>,
    /// Only devices of this accelerator type.
    pub accelerator_type: Option<String>,
    /// Project.
    pub project: Option<String>,
    /// Holder.
    pub holder: Option<String>,
    /// Lease seconds or a duration (`90s`, `2h`).
    pub ttl: Option<String>,
    /// Pin to a node.
    pub node: Option<String>,
    /// Pin to device indexes.
    pub devices: Option<Vec<u32>>,
    /// Queue when it does not fit now.
    pub wait: bool,
    /// `memory` is Koordinator's `gpu-memory` even with no other share field (the
    /// console's share form), so the validator names the missing `gpu.shared`.
    pub koordinator: bool,
}

impl ClaimDraft {
    /// The wire fields the draft stands for, merged over `base` (the CLI's `--request`
    /// JSON); flags win over the same field in `base`.
    pub fn to_json(&self, base: Map<String, Value>) -> Value {
        let mut m = base;
        let share = self.koordinator
            || self.core.is_some()
            || self.shared.is_some()
            || self.ratio.is_some();
        let text = |s: &String| Value::from(s.trim());
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                m.insert(k.to_string(), v);
            }
        };
        let memory_key = if share { "gpu-memory" } else { "gpu_memory" };
        put(memory_key, self.memory.as_ref().map(text));
        put("num_gpus", self.fraction.as_deref().map(number));
        put("nvidia.com/gpu", self.gpus.as_deref().map(number));
        put("gpu-memory-ratio", self.ratio.as_deref().map(number));
        put("gpu-core", self.core.as_deref().map(number));
        put("gpu.shared", self.shared.as_deref().map(number));
        put("cpus", self.cpus.as_deref().map(number));
        put("accelerator_type", self.accelerator_type.as_ref().map(text));
        put("project", self.project.as_ref().map(text));
        put("holder", self.holder.as_ref().map(text));
        put("ttl", self.ttl.as_deref().map(number));
        put("node", self.node.as_ref().map(text));
        put("devices", self.devices.as_ref().map(|d| json!(d)));
        if self.wait {
            put("wait", Some(Value::Bool(true)));
        }
        Value::Object(m)
    }

    /// The validated request, or the validator's error naming the field at fault.
    pub fn to_request(&self, base: Map<String, Value>) -> Result<ClaimRequest, RequestError> {
        ClaimRequest::from_json(&self.to_json(base))
    }
}

/// Text that reads as a number becomes one; anything else stays text for the validator
/// to name in its message.
fn number(s: &str) -> Value {
    let t = s.trim();
    t.parse::<u64>()
        .map(Value::from)
        .or_else(|_| t.parse::<f64>().map(Value::from))
        .unwrap_or_else(|_| Value::from(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn draft() -> ClaimDraft {
        ClaimDraft::default()
    }

    #[test]
    fn snapshot_versions_print_and_parse_as_epoch_dot_seq() {
        let v = SnapshotVersion {
            epoch: 18_446_744_073_709_551_615,
            seq: 7,
        };
        assert_eq!(v.to_string(), "18446744073709551615.7");
        assert_eq!(v.to_string().parse::<SnapshotVersion>(), Ok(v));
        assert_eq!("12.0".parse(), Ok(SnapshotVersion { epoch: 12, seq: 0 }));
        for bad in [
            "",
            "12",
            "12.",
            ".3",
            "1.2.3",
            "+1.2",
            "1.-2",
            " 1.2",
            "1.2 ",
            "a.b",
            "1e3.2",
            "18446744073709551616.1",
        ] {
            assert!(bad.parse::<SnapshotVersion>().is_err(), "{bad:?}");
        }
        let json = serde_json::to_string(&HeartbeatBody { version: v }).unwrap();
        assert_eq!(json, r#"{"version":"18446744073709551615.7"}"#);
        assert_eq!(
            serde_json::from_str::<HeartbeatBody>(&json)
                .unwrap()
                .version,
            v
        );
        assert!(serde_json::from_str::<HeartbeatBody>(r#"{"version":"1"}"#).is_err());
        assert!(serde_json::from_str::<HeartbeatBody>(r#"{"version":3}"#).is_err());
        assert_eq!(
            paths::watch_deltas_query(
                Some(SnapshotVersion { epoch: 5, seq: 9 }),
                paths::DELTA_FORMAT
            ),
            "deltas=1&format=3&deflate=1&since=5.9"
        );
    }

    #[test]
    fn memory_flag_is_ray_alone_and_koordinator_with_a_share_field() {
        let ray = ClaimDraft {
            memory: Some("20GiB".into()),
            ..draft()
        };
        assert_eq!(ray.to_json(Map::new()), json!({"gpu_memory": "20GiB"}));
        let koord = ClaimDraft {
            memory: Some("20GiB".into()),
            shared: Some("2".into()),
            ..draft()
        };
        assert_eq!(
            koord.to_json(Map::new()),
            json!({"gpu-memory": "20GiB", "gpu.shared": 2})
        );
    }

    #[test]
    fn flags_win_over_the_base_request_and_bad_numbers_reach_the_validator() {
        let base = json!({"gpu_memory": "1Gi", "project": "a"});
        let Value::Object(base) = base else {
            unreachable!()
        };
        let d = ClaimDraft {
            project: Some("b".into()),
            ttl: Some("ten".into()),
            ..draft()
        };
        assert_eq!(
            d.to_json(base.clone()),
            json!({"gpu_memory": "1Gi", "project": "b", "ttl": "ten"})
        );
        let e = d.to_request(base).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("ttl"));
    }

    #[test]
    fn error_bodies_round_trip() {
        let e = ClaimRequest::from_json(&json!({"bogus": 1})).unwrap_err();
        let body = ErrorBody::invalid(&e);
        let text = serde_json::to_string(&body).unwrap();
        let back: ErrorBody = serde_json::from_str(&text).unwrap();
        assert_eq!(back, body);
        assert_eq!(back.rule.as_deref(), Some("unknown-field"));
    }

    #[test]
    fn path_segments_are_escaped() {
        assert_eq!(
            paths::cordon("a/b c", 3, true),
            "/v1/devices/a%2Fb%20c/3/cordon"
        );
        assert_eq!(
            paths::project_reset("ml.team-1"),
            "/v1/projects/ml.team-1/reset"
        );
        assert_eq!(paths::claim_move(ClaimId(7)), "/v1/claims/7/move");
    }

    fn any_request_json() -> impl Strategy<Value = Value> {
        let form = prop_oneof![
            (1u32..10_000).prop_map(|u| json!({"num_gpus": f64::from(u) / 10_000.0})),
            (1u32..9).prop_map(|k| json!({"num_gpus": k})),
            (1u64..80).prop_map(|g| json!({"gpu_memory": format!("{g}Gi")})),
            (1u32..5).prop_map(|k| json!({"nvidia.com/gpu": k})),
            (1u32..=100).prop_map(|r| json!({"gpu-memory-ratio": r, "gpu.shared": 1})),
            (1u32..5).prop_map(|s| json!({"gpu-memory-ratio": 100 * s, "gpu.shared": s})),
            (1u32..5, 1u64..20).prop_map(|(s, g)| json!({"gpu-memory": format!("{}Gi", g * u64::from(s)), "gpu-core": 10 * s, "gpu.shared": s})),
            (1u32..100).prop_map(|x| json!({"koordinator.sh/gpu": x})),
            Just(json!({"koordinator.sh/gpu": 200})),
        ];
        let extra = (
            proptest::option::of(1u64..8_000),
            proptest::option::of("[a-z]{1,8}"),
            proptest::option::of(1u64..86_400),
            any::<bool>(),
        );
        (form, extra).prop_map(|(mut v, (cpus, project, ttl, wait))| {
            if let Some(c) = cpus {
                v["cpus"] = json!(format!("{c}m"));
            }
            if let Some(p) = project {
                v["project"] = json!(p);
            }
            if let Some(t) = ttl {
                v["ttl"] = json!(t);
            }
            if wait {
                v["wait"] = json!(true);
            }
            v
        })
    }

    proptest! {
        #[test]
        fn claim_body_reads_back_to_the_same_request(v in any_request_json()) {
            let req = ClaimRequest::from_json(&v).unwrap();
            let body = claim_body(&req);
            let back = ClaimRequest::from_json(&body).unwrap();
            prop_assert_eq!(back, req, "{} -> {}", v, body);
        }
    }

    #[test]
    fn move_ids_name_the_audit_actor_or_are_refused() {
        assert_eq!(move_actor("operator", None).unwrap(), "operator");
        assert_eq!(
            move_actor("operator", Some("mv-1a_2")).unwrap(),
            "operator (move mv-1a_2)"
        );
        for bad in ["", "a b", "x\n", &"m".repeat(65)] {
            let e = move_actor("operator", Some(bad)).unwrap_err();
            assert!(e.contains(MOVE_HEADER), "{bad:?}: {e}");
        }
        let actor = move_actor("alice (u@h)", Some("mv-1")).unwrap();
        assert_eq!(split_move_actor(&actor), ("alice (u@h)", Some("mv-1")));
        assert_eq!(split_move_actor("alice (u@h)"), ("alice (u@h)", None));
        assert_eq!(split_move_actor("x (move )"), ("x (move )", None));
    }
}
