//! The snapshot: one endpoint's whole state as data, version 1 of the wire schema.
//!
//! It is what `GET /v1/snapshot` serves, what `gpuboard status --json` prints, and the
//! view model every console source turns its data into (gpuboard endpoints, the embedded
//! scheduler, and engine adapters). Values are plain numbers: memory in bytes, compute in
//! units of 1e-4 GPU (10 000 per device), slots out of 100 per device, CPU in
//! millicores, times in Unix milliseconds, durations in seconds. Fields that a source
//! does not know are `null`, never 0.

mod delta;
mod figures;
mod flags;
mod owner;
mod words;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::placement::{DeviceShare, Health};
use crate::request::ClaimRequest;
use crate::units::{Bytes, Slots, Units};

pub use delta::{SnapshotChange, apply, diff, diff_whole, keyed_only, to_whole_lists};
pub use figures::{ClaimFigures, DeviceFigures, NodeFigures, diff_figures, with_figures};
pub use flags::{DeviceFlag, quiet_lately};
pub use owner::{PodNames, ProcessOwner};
pub use words::detail_words;

/// The schema version; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// One endpoint's state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Always `SCHEMA_VERSION` when written by this build.
    pub schema: u32,
    /// Who produced it.
    pub endpoint: EndpointInfo,
    /// Monotonic revision of the endpoint's state.
    pub revision: u64,
    /// When it was taken.
    pub taken_at: Timestamp,
    /// Nodes and their devices.
    pub nodes: Vec<NodeView>,
    /// Placed and pending claims.
    pub claims: Vec<ClaimView>,
    /// Projects with their fair-share accounts.
    #[serde(default)]
    pub projects: Vec<ProjectView>,
    /// Resource types (cpu, one per GPU model) with idle instances and shortfall.
    #[serde(default)]
    pub resources: Vec<ResourceView>,
    /// Flink-style GPU coordination-file records on this host.
    #[serde(default)]
    pub coordination: Vec<CoordinationRecord>,
    /// Host CPU, memory and load.
    #[serde(default)]
    pub host: Option<HostView>,
    /// Recent audit events, oldest first.
    #[serde(default)]
    pub events: Vec<AuditEvent>,
    /// A Kubernetes source's pods by UID, to name those hosts' process owners give by UID
    /// only. In memory only: the wire carries the owners once named.
    #[serde(skip)]
    pub pods: PodNames,
}

/// Who produced a snapshot and how it behaves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointInfo {
    /// A name for the endpoint (host name by default).
    pub name: String,
    /// gpuboard version, or the engine's version for adapters.
    pub version: String,
    /// `gpuboard`, `embedded`, `demo`, `ray`, `prometheus`...
    pub kind: String,
    /// Placement policy (`binpack` or `spread`).
    pub policy: String,
    /// Whether it accepts claims, releases and moves.
    pub actions: bool,
    /// Why the local GPUs are not visible, when they are not (no driver, no library...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry_note: Option<String>,
    /// Parts of the peer's answer that could not be read; everything else is live.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<SourceWarning>,
    /// Set once a gpuboard endpoint's commit has failed: it refuses every change until it
    /// is restarted, and says why here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_failed: Option<String>,
}

/// A section of a peer's answer that a source could not read and left out: where it was
/// and what was found there. The rest of the snapshot is still the peer's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceWarning {
    /// The answer it was in (`/api/cluster_status`, `get_state`).
    pub section: String,
    /// Where in that answer, as `data.clusterStatus.loadMetricsReport.pgDemand[0]`.
    pub path: String,
    /// What was wrong, in the reader's words (what was expected, what was found).
    pub found: String,
    /// What is missing from the snapshot because of it.
    pub left_out: String,
}

impl std::fmt::Display for SourceWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} `{}`: {}; left out: {}",
            self.section, self.path, self.found, self.left_out
        )
    }
}

/// A node and its devices.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    /// Node name.
    pub name: String,
    /// CPU capacity in millicores, when accounted.
    pub cpus_milli: Option<u64>,
    /// CPU reserved in millicores.
    pub cpus_allocated_milli: u64,
    /// Devices in index order.
    pub devices: Vec<DeviceView>,
}

/// A device: capacity, allocation, availability both ways (memory and fraction), and telemetry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceView {
    /// Index on the node.
    pub index: u32,
    /// Model name.
    pub model: String,
    /// UUID when known.
    pub uuid: Option<String>,
    /// Schedulable memory M in bytes; `null` when unknown (then unschedulable).
    pub memory_capacity: Option<Bytes>,
    /// Memory reserved by claims, bytes.
    pub memory_allocated: Bytes,
    /// Memory free to claim, bytes.
    pub memory_free: Bytes,
    /// Compute reserved, units (10 000 = one GPU).
    pub compute_allocated: Units,
    /// Compute free, units: the free fraction of the GPU.
    pub compute_free: Units,
    /// Slots taken (of 100).
    pub slots_allocated: Slots,
    /// Slots free.
    pub slots_free: Slots,
    /// Taking no new claims.
    pub cordoned: bool,
    /// Health.
    pub health: Health,
    /// Claims holding a share of it.
    pub holders: Vec<ClaimId>,
    /// Live telemetry, when a sampler or remote source has it.
    #[serde(default)]
    pub telemetry: Option<DeviceTelemetry>,
    /// Memory used by processes that belong to no claim, bytes.
    #[serde(default)]
    pub unclaimed_memory: Option<Bytes>,
}

/// Telemetry of one device. Every metric is `null` when the device does not support it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceTelemetry {
    /// When it was sampled.
    pub sampled_at: Timestamp,
    /// The device has disappeared.
    #[serde(default)]
    pub lost: bool,
    /// PCI bus id.
    pub pci_bus_id: Option<String>,
    /// Total memory as the driver reports it, bytes.
    pub memory_total: Option<Bytes>,
    /// Memory the driver reserves, bytes.
    pub memory_reserved: Option<Bytes>,
    /// Memory in use, bytes.
    pub memory_used: Option<Bytes>,
    /// GPU utilization, percent.
    pub utilization_gpu: Option<u32>,
    /// Memory-controller utilization, percent.
    pub utilization_memory: Option<u32>,
    /// Temperature, degrees Celsius.
    pub temperature_c: Option<u32>,
    /// Power draw, milliwatts.
    pub power_mw: Option<u32>,
    /// Enforced power limit, milliwatts.
    pub power_limit_mw: Option<u32>,
    /// SM clock, MHz.
    pub clock_sm_mhz: Option<u32>,
    /// Memory clock, MHz.
    pub clock_memory_mhz: Option<u32>,
    /// Fan speed, percent.
    pub fan_pct: Option<u32>,
    /// Active throttle reasons, by name.
    #[serde(default)]
    pub throttle: Vec<String>,
    /// Uncorrected ECC errors (volatile).
    pub ecc_uncorrected: Option<u64>,
    /// MIG mode enabled.
    pub mig_enabled: Option<bool>,
    /// Processes using the device.
    #[serde(default)]
    pub processes: Vec<ProcessView>,
    /// Recent utilization percentages, oldest first (for sparklines).
    #[serde(default)]
    pub history_utilization: Vec<u32>,
    /// Recent memory used, bytes, oldest first.
    #[serde(default)]
    pub history_memory_used: Vec<u64>,
    /// Made up by `serve --simulate-telemetry`, not read from the device: every screen
    /// that shows it says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub simulated: bool,
}

/// A process on a device, and the claim it belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessView {
    /// Process id.
    pub pid: u32,
    /// Process name, when readable.
    pub name: Option<String>,
    /// GPU memory it uses, bytes.
    pub used_memory: Option<Bytes>,
    /// The claim it was attributed to.
    pub claim: Option<ClaimId>,
    /// Whose it is by its cgroup (a pod, a Slurm job, a container), when the host says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<ProcessOwner>,
}

/// Whether a claim holds its devices or waits for them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClaimState {
    /// Holding its devices.
    #[default]
    Placed,
    /// Waiting in its project's queue.
    Pending,
}

/// A claim as operators see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimView {
    /// Id, stable across moves and restarts.
    pub id: ClaimId,
    /// The engine's own name for it, what operators type (`ml/train-0` for a pod, `4242`
    /// for a Slurm job, a Ray id's first 8 characters, a BOINC task's name); `None` for
    /// gpuboard's own claims, known by their id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Placed or pending.
    pub state: ClaimState,
    /// Project accounted.
    pub project: String,
    /// Holder, if named.
    pub holder: Option<String>,
    /// The request form as the client wrote it (canonical names).
    pub form: String,
    /// The whole request.
    pub request: ClaimRequest,
    /// Node, when placed.
    pub node: Option<String>,
    /// Per-device shares, when placed.
    pub shares: Vec<DeviceShare>,
    /// Memory reserved across devices, bytes.
    pub memory_reserved: Bytes,
    /// Compute reserved across devices, units.
    pub compute_reserved: Units,
    /// Memory its processes use, bytes, when telemetry knows.
    #[serde(default)]
    pub memory_used: Option<Bytes>,
    /// Its processes use more memory than it reserved.
    #[serde(default)]
    pub over_limit: bool,
    /// Its devices have been idle for long.
    #[serde(default)]
    pub idle: bool,
    /// When it was created.
    pub created_at: Timestamp,
    /// When its lease runs out, if it has one.
    pub lease_expires_at: Option<Timestamp>,
    /// Why it is pending (one line per node), when pending.
    #[serde(default)]
    pub pending_reasons: Vec<String>,
    /// Pending and can never fit this endpoint as it is.
    #[serde(default)]
    pub infeasible: bool,
}

/// A project's account on one resource type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProjectResourceView {
    /// Resource type name (`cpu`, or a GPU model).
    pub resource: String,
    /// Long-term debt, instance-seconds.
    pub debt: f64,
    /// Instances the project should hold now (its fair-share target).
    pub target: f64,
    /// Instances it holds now.
    pub used: f64,
    /// The accrual flag D(P,R): it has work this resource could run.
    pub eligible: bool,
    /// Backed off until (absolute time), if backed off.
    pub backoff_until: Option<Timestamp>,
    /// Current backoff interval, seconds.
    pub backoff_interval_s: Option<u64>,
    /// Pending claims of the project this resource could serve.
    pub pending: u32,
    /// Why it cannot get work here now, if it cannot.
    pub reason: Option<String>,
}

/// A project with its share and accounts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProjectView {
    /// Name.
    pub name: String,
    /// Resource share (default 100).
    pub share: u32,
    /// Claims placed.
    pub running: u32,
    /// Claims pending.
    pub pending: u32,
    /// Overall debt: per-resource debts weighted by speed.
    pub overall_debt: f64,
    /// The engine's own scheduling priority, when it has one (BOINC's `sched_priority`:
    /// higher runs and fetches first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<f64>,
    /// Per resource type.
    pub resources: Vec<ProjectResourceView>,
}

/// A resource type: cpu, or one GPU model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceView {
    /// Name.
    pub name: String,
    /// Instances (devices, or cores for cpu).
    pub instances: f64,
    /// Relative speed.
    pub speed: f64,
    /// Idle instances now.
    pub idle: f64,
    /// Shortfall over the buffer horizon, instance-seconds.
    pub shortfall: f64,
}

/// A line of a Flink GPU coordination file: a GPU index and the pid that took it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinationRecord {
    /// The file it was read from.
    pub file: String,
    /// GPU index.
    pub index: u32,
    /// Owner pid.
    pub pid: u32,
    /// The owner is no longer running.
    pub dead: bool,
}

/// Host CPU, memory and load.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostView {
    /// Host name.
    pub hostname: String,
    /// CPU use, percent of all cores.
    pub cpu_pct: Option<f32>,
    /// Logical cores.
    pub cores: Option<u32>,
    /// Memory in use, bytes.
    pub memory_used: Option<Bytes>,
    /// Memory total, bytes.
    pub memory_total: Option<Bytes>,
    /// 1-minute load average.
    pub load1: Option<f64>,
}

/// One audited change: who, what, target, result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// The revision the change produced.
    pub revision: u64,
    /// When.
    pub at: Timestamp,
    /// Who (a token's role, `lease`, `owner-check`, `scheduler`).
    pub actor: String,
    /// What: claim, release, move, renew, expire, owner-gone, cordon, uncordon, share, reset, place.
    pub action: String,
    /// On what: a claim id, a device, a project.
    pub target: String,
    /// The outcome, in words.
    pub detail: String,
}

impl EndpointInfo {
    /// An engine that gpuboard reads but does not schedule for (Ray, Slurm, BOINC...).
    pub fn engine(name: &str, kind: &str, version: String) -> EndpointInfo {
        EndpointInfo {
            name: name.to_string(),
            version,
            kind: kind.to_string(),
            policy: String::new(),
            actions: false,
            telemetry_note: None,
            warnings: Vec::new(),
            store_failed: None,
        }
    }
}

impl Snapshot {
    /// Every device with its node, in node order.
    pub fn devices(&self) -> impl Iterator<Item = (&NodeView, &DeviceView)> {
        self.nodes
            .iter()
            .flat_map(|n| n.devices.iter().map(move |d| (n, d)))
    }

    /// The claim with this id.
    pub fn claim(&self, id: ClaimId) -> Option<&ClaimView> {
        self.claims.iter().find(|c| c.id == id)
    }

    /// Whether `other` differs from this snapshot in nothing but when it was taken.
    pub fn same_but_time(&self, other: &Snapshot) -> bool {
        self.schema == other.schema
            && self.revision == other.revision
            && self.endpoint == other.endpoint
            && self.nodes == other.nodes
            && self.claims == other.claims
            && self.projects == other.projects
            && self.resources == other.resources
            && self.coordination == other.coordination
            && self.host == other.host
            && self.events == other.events
    }
}

impl EndpointInfo {
    /// The placement policy it names: `spread`, else binpack.
    pub fn placement_policy(&self) -> crate::placement::Policy {
        if self.policy == "spread" {
            crate::placement::Policy::Spread
        } else {
            crate::placement::Policy::Binpack
        }
    }
}

impl NodeView {
    /// The node as an inventory describes it: its devices' identity and capacity (what
    /// placement needs to book claims on it again).
    pub fn spec(&self) -> crate::placement::NodeSpec {
        crate::placement::NodeSpec {
            name: self.name.clone(),
            devices: self
                .devices
                .iter()
                .map(|d| crate::placement::DeviceSpec {
                    index: d.index,
                    model: d.model.clone(),
                    uuid: d.uuid.clone(),
                    memory: d.memory_capacity,
                    link_group: None,
                })
                .collect(),
            cpus: self.cpus_milli.map(crate::request::Milli),
        }
    }
}

impl DeviceView {
    /// Whether `other` is this device with other telemetry and unclaimed memory.
    pub fn same_but_telemetry(&self, other: &DeviceView) -> bool {
        let DeviceView {
            index,
            model,
            uuid,
            memory_capacity,
            memory_allocated,
            memory_free,
            compute_allocated,
            compute_free,
            slots_allocated,
            slots_free,
            cordoned,
            health,
            holders,
            telemetry: _,
            unclaimed_memory: _,
        } = self;
        *index == other.index
            && *model == other.model
            && *uuid == other.uuid
            && *memory_capacity == other.memory_capacity
            && *memory_allocated == other.memory_allocated
            && *memory_free == other.memory_free
            && *compute_allocated == other.compute_allocated
            && *compute_free == other.compute_free
            && *slots_allocated == other.slots_allocated
            && *slots_free == other.slots_free
            && *cordoned == other.cordoned
            && *health == other.health
            && *holders == other.holders
    }
}

impl Snapshot {
    /// Whether `other` differs from this one only in what telemetry brings: its devices'
    /// telemetry and unclaimed memory, its claims' measured use (memory used, over limit,
    /// idle), the host's figures and the times. What joins sources into physical GPUs
    /// (nodes, devices, claims, pods) is then the same.
    pub fn same_but_telemetry(&self, other: &Snapshot) -> bool {
        let device = |a: &DeviceView, b: &DeviceView| a.same_but_telemetry(b);
        let node = |a: &NodeView, b: &NodeView| {
            a.name == b.name
                && a.cpus_milli == b.cpus_milli
                && a.cpus_allocated_milli == b.cpus_allocated_milli
                && a.devices.len() == b.devices.len()
                && a.devices.iter().zip(&b.devices).all(|(a, b)| device(a, b))
        };
        let claim = |a: &ClaimView, b: &ClaimView| {
            let ClaimView {
                id,
                name,
                state,
                project,
                holder,
                form,
                request,
                node,
                shares,
                memory_reserved,
                compute_reserved,
                memory_used: _,
                over_limit: _,
                idle: _,
                created_at,
                lease_expires_at,
                pending_reasons,
                infeasible,
            } = a;
            *id == b.id
                && *name == b.name
                && *state == b.state
                && *project == b.project
                && *holder == b.holder
                && *form == b.form
                && *request == b.request
                && *node == b.node
                && *shares == b.shares
                && *memory_reserved == b.memory_reserved
                && *compute_reserved == b.compute_reserved
                && *created_at == b.created_at
                && *lease_expires_at == b.lease_expires_at
                && *pending_reasons == b.pending_reasons
                && *infeasible == b.infeasible
        };
        self.schema == other.schema
            && self.revision == other.revision
            && self.endpoint == other.endpoint
            && self.nodes.len() == other.nodes.len()
            && self.nodes.iter().zip(&other.nodes).all(|(a, b)| node(a, b))
            && self.claims.len() == other.claims.len()
            && self
                .claims
                .iter()
                .zip(&other.claims)
                .all(|(a, b)| claim(a, b))
            && self.projects == other.projects
            && self.resources == other.resources
            && self.coordination == other.coordination
            && self.events == other.events
            && self.pods == other.pods
    }
}

/// Device indexes as ranges: `2,3,4,5,6,7` -> `2-7`, `0,1,4` -> `0-1,4`. The one way the
/// screens and the CLI write a claim's devices.
pub fn index_ranges(indexes: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < indexes.len() {
        let start = indexes[i];
        let mut end = start;
        while i + 1 < indexes.len() && indexes[i + 1] == end + 1 {
            end += 1;
            i += 1;
        }
        parts.push(if end == start {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

impl ClaimView {
    /// Where it is, as every screen writes it: `node-b:5-6`, `node-c` for a claim that
    /// holds no GPU (CPUs only); `None` while pending.
    pub fn place(&self) -> Option<String> {
        let node = self.node.as_ref()?;
        let devices: Vec<u32> = self.shares.iter().map(|s| s.device).collect();
        Some(if devices.is_empty() {
            node.clone()
        } else {
            format!("{node}:{}", index_ranges(&devices))
        })
    }

    /// What the screens call it and what commands take: the engine's name when it has
    /// one, else the id.
    pub fn shown_id(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.id.to_string())
    }
}
