//! Placement: a fleet of nodes and their devices, each with capacity in memory, compute
//! and slots; claims placed per device (never on node sums), released, and moved
//! atomically; and, when nothing fits, the reasons aggregated per node the way an
//! operator reads them. No I/O: the server, the CLI, the console and the simulator all
//! call this.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::ClaimId;
use crate::request::{ClaimRequest, GpuForm, Milli, PerDevice, accelerator_key};
use crate::units::{Bytes, SLOTS_PER_DEVICE, Slots, Units};

/// How to choose among devices that fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Fullest device that fits: keeps whole GPUs free and limits stranded memory.
    #[default]
    Binpack,
    /// Emptiest device that fits.
    Spread,
}

/// A device as an inventory or NVML describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSpec {
    /// The device's index on its node (what `CUDA_VISIBLE_DEVICES` names).
    pub index: u32,
    /// The model name, e.g. `NVIDIA A100-SXM4-40GB`.
    pub model: String,
    /// NVML's UUID when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Schedulable memory M; `None` makes the device unschedulable.
    pub memory: Option<Bytes>,
    /// Devices with the same group share NVLink or a PCIe switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_group: Option<u32>,
}

/// A node as an inventory describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// The node's name, unique in the fleet.
    pub name: String,
    /// Its devices.
    pub devices: Vec<DeviceSpec>,
    /// CPU capacity for claims that ask for `cpus`; `None` leaves CPU unaccounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Milli>,
}

/// Whether a device can take new claims, apart from cordoning.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", content = "reason", rename_all = "lowercase")]
pub enum Health {
    /// Working.
    #[default]
    Healthy,
    /// Reported bad (ECC, XID...), with why.
    Unhealthy(String),
    /// Gone from the bus or from NVML.
    Lost,
}

/// A device and what is allocated on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// What the device is.
    pub spec: DeviceSpec,
    /// Memory reserved by claims.
    pub memory_allocated: Bytes,
    /// Compute reserved by claims.
    pub compute_allocated: Units,
    /// Slots taken by claims.
    pub slots_allocated: Slots,
    /// Takes no new claims while set.
    pub cordoned: bool,
    /// Health as last reported.
    pub health: Health,
    /// Claims holding a share of this device, in placement order.
    pub holders: Vec<ClaimId>,
    key: String,
}

impl Device {
    /// Schedulable memory, zero when unknown.
    pub fn capacity(&self) -> Bytes {
        self.spec.memory.unwrap_or_default()
    }
    /// Memory not reserved.
    pub fn memory_free(&self) -> Bytes {
        self.capacity() - self.memory_allocated
    }
    /// Compute not reserved.
    pub fn compute_free(&self) -> Units {
        Units::FULL - self.compute_allocated
    }
    /// Slots not taken.
    pub fn slots_free(&self) -> Slots {
        Slots::FULL - self.slots_allocated
    }
    /// The normalized accelerator name used for `accelerator_type` matching.
    pub fn accelerator(&self) -> &str {
        &self.key
    }
    /// Whether new claims may land here at all.
    pub fn schedulable(&self) -> bool {
        !self.cordoned
            && self.health == Health::Healthy
            && self.spec.memory.is_some_and(|m| m.0 > 0)
    }
    fn fits(&self, need: &PerDevice) -> bool {
        need.memory <= self.memory_free()
            && need.compute <= self.compute_free()
            && need.slots <= self.slots_free()
            && (!need.exclusive || self.slots_allocated.0 == 0)
    }
}

/// A node and its devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The node's name.
    pub name: String,
    /// Devices in index order.
    pub devices: Vec<Device>,
    /// CPU capacity, when accounted.
    pub cpus: Option<Milli>,
    /// CPU reserved by claims.
    pub cpus_allocated: Milli,
}

impl Node {
    /// The device with this index.
    pub fn device(&self, index: u32) -> Option<&Device> {
        self.devices.iter().find(|d| d.spec.index == index)
    }
    fn cpus_free(&self) -> Option<Milli> {
        self.cpus
            .map(|c| Milli(c.0.saturating_sub(self.cpus_allocated.0)))
    }
}

/// One device's part of a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceShare {
    /// Device index on the claim's node.
    pub device: u32,
    /// Memory reserved there.
    pub memory: Bytes,
    /// Compute reserved there.
    pub compute: Units,
    /// Slots taken there.
    pub slots: Slots,
}

/// Where a claim sits: one node, and its shares of that node's devices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// The node.
    pub node: String,
    /// Its shares, one per device, in device order.
    pub shares: Vec<DeviceShare>,
    /// CPU reserved on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Milli>,
}

impl Allocation {
    /// Device indexes, comma-separated, as `CUDA_VISIBLE_DEVICES` wants them.
    pub fn visible_devices(&self) -> String {
        self.shares
            .iter()
            .map(|s| s.device.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
    /// Memory reserved across all devices.
    pub fn memory(&self) -> Bytes {
        self.shares.iter().fold(Bytes(0), |a, s| a + s.memory)
    }
    /// Compute reserved across all devices.
    pub fn compute(&self) -> Units {
        self.shares.iter().fold(Units(0), |a, s| a + s.compute)
    }
}

impl fmt::Display for Allocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.node, self.visible_devices())
    }
}

/// Why one device (or node) could not take the request.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Reason {
    /// Cordoned by an operator.
    Cordoned,
    /// Reported unhealthy.
    Unhealthy,
    /// Lost from the bus or NVML.
    Lost,
    /// Memory unknown, so unschedulable.
    UnknownMemory,
    /// Another accelerator type than asked.
    WrongAccelerator,
    /// Not among the pinned devices.
    NotPinned,
    /// The request needs more memory than the device has at all.
    TooSmall,
    /// Not enough free memory now.
    InsufficientMemory,
    /// Not enough free compute now.
    InsufficientCompute,
    /// No free slot (or not wholly free, for exclusive claims).
    NoSlots,
    /// Not enough free CPU on the node.
    InsufficientCpu,
    /// The node does not account CPU, so CPU-only claims cannot land there.
    NoCpuCapacity,
    /// Some devices fit, but fewer than the request needs on one node.
    TooFewDevices,
}

impl Reason {
    fn text(&self) -> &'static str {
        match self {
            Reason::Cordoned => "cordoned",
            Reason::Unhealthy => "unhealthy",
            Reason::Lost => "lost",
            Reason::UnknownMemory => "memory unknown",
            Reason::WrongAccelerator => "other accelerator type",
            Reason::NotPinned => "not pinned",
            Reason::TooSmall => "too small",
            Reason::InsufficientMemory => "insufficient memory",
            Reason::InsufficientCompute => "insufficient compute",
            Reason::NoSlots => "no free slot",
            Reason::InsufficientCpu => "insufficient CPU",
            Reason::NoCpuCapacity => "no CPU capacity declared",
            Reason::TooFewDevices => "too few devices fit",
        }
    }
}

/// How many devices of a node failed for one reason, with the figures an operator needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonCount {
    /// The reason.
    #[serde(flatten)]
    pub reason: Reason,
    /// Devices (or nodes, for node-level reasons) it applies to.
    pub count: usize,
    /// The largest free amount among them (memory in bytes, compute in units, CPU in millicores, devices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_free: Option<u64>,
    /// What the request needs on one device (same unit as `largest_free`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<u64>,
}

/// The reasons one node could not take the request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReasons {
    /// The node.
    pub node: String,
    /// Its device count.
    pub devices: usize,
    /// Reasons, most devices first.
    pub reasons: Vec<ReasonCount>,
}

/// A request that does not fit, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{}", self.summary())]
pub struct NoFit {
    /// It could not fit even on an empty fleet: waiting will not help.
    pub infeasible: bool,
    /// Per node, aggregated.
    pub nodes: Vec<NodeReasons>,
}

impl NoFit {
    /// One line per node: "node a: 3/4 GPUs insufficient memory (largest free 3.1 GiB, needs 20 GiB); 1/4 cordoned".
    pub fn lines(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| {
                let mut said_gpus = false;
                let parts: Vec<String> = n
                    .reasons
                    .iter()
                    .map(|r| {
                        let mut s = match r.reason {
                            // Devices, not an amount: "only 1 of the 2 GPUs it needs fit".
                            Reason::TooFewDevices | Reason::NotPinned
                                if r.largest_free.is_some() =>
                            {
                                let have = r.largest_free.unwrap_or(0);
                                let needs = r.needs.unwrap_or(0);
                                return if r.reason == Reason::TooFewDevices {
                                    format!("only {have} of the {needs} GPUs it needs fit")
                                } else {
                                    format!("{have} devices pinned, the form takes {needs}")
                                };
                            }
                            Reason::NoCpuCapacity
                            | Reason::InsufficientCpu
                            | Reason::TooFewDevices => r.reason.text().to_string(),
                            // "3/4 GPUs insufficient memory; 1/4 cordoned": the noun once.
                            _ if said_gpus => {
                                format!("{}/{} {}", r.count, n.devices, r.reason.text())
                            }
                            _ => {
                                said_gpus = true;
                                format!("{}/{} GPUs {}", r.count, n.devices, r.reason.text())
                            }
                        };
                        if let (Some(free), Some(needs)) = (r.largest_free, r.needs) {
                            let (free, needs) = match r.reason {
                                Reason::InsufficientMemory | Reason::TooSmall => {
                                    (Bytes(free).iec(), Bytes(needs).iec())
                                }
                                Reason::InsufficientCompute => (
                                    format!(
                                        "{} GPU",
                                        Units(u32::try_from(free).unwrap_or(u32::MAX))
                                    ),
                                    format!(
                                        "{} GPU",
                                        Units(u32::try_from(needs).unwrap_or(u32::MAX))
                                    ),
                                ),
                                Reason::InsufficientCpu => {
                                    (Milli(free).to_string(), Milli(needs).to_string())
                                }
                                _ => (free.to_string(), needs.to_string()),
                            };
                            let label = if r.reason == Reason::TooSmall {
                                "has"
                            } else {
                                "largest free"
                            };
                            s.push_str(&format!(" ({label} {free}, needs {needs})"));
                        }
                        s
                    })
                    .collect();
                format!("node {}: {}", n.node, parts.join("; "))
            })
            .collect()
    }

    /// All lines joined, with a lead that says whether waiting can help.
    pub fn summary(&self) -> String {
        let lead = if self.infeasible {
            "infeasible (no device could ever hold it)"
        } else {
            "does not fit now"
        };
        if self.nodes.is_empty() {
            return format!("{lead}: no node matches (none named so, or none with GPUs)");
        }
        format!("{lead}: {}", self.lines().join(" | "))
    }
}

/// Why a move could not happen; the claim stays where it was.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MoveError {
    /// No such claim.
    #[error("no claim {0}")]
    UnknownClaim(ClaimId),
    /// The claim asks for no GPU, so there is nothing to move.
    #[error("claim {0} holds no GPU")]
    NothingToMove(ClaimId),
    /// The target does not fit.
    #[error("the target does not fit: {0}")]
    NoFit(NoFit),
}

/// Why a fleet change was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FleetError {
    /// Two nodes with one name.
    #[error("node `{0}` is already in the fleet")]
    DuplicateNode(String),
    /// Two devices with one index on a node.
    #[error("node `{node}` lists device {index} twice")]
    DuplicateDevice {
        /// The node.
        node: String,
        /// The repeated index.
        index: u32,
    },
    /// No such node.
    #[error("no node `{0}`")]
    UnknownNode(String),
    /// No such device.
    #[error("node `{node}` has no device {index}")]
    UnknownDevice {
        /// The node.
        node: String,
        /// The index asked for.
        index: u32,
    },
    /// The claim id is taken.
    #[error("claim {0} already exists")]
    DuplicateClaim(ClaimId),
    /// Restoring a stored allocation would over-commit a device.
    #[error("stored claim {id} no longer fits on {node}: {detail}")]
    DoesNotFit {
        /// The claim.
        id: ClaimId,
        /// Its node.
        node: String,
        /// What overflowed.
        detail: String,
    },
}

/// What a claim asks of placement, kept so that a move can re-normalize it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Demand {
    gpu: Option<GpuForm>,
    accelerator: Option<String>,
    cpus: Option<Milli>,
    /// Only devices of this exact model (fair share places claims per resource type).
    model: Option<String>,
}

impl Demand {
    fn of(req: &ClaimRequest) -> Demand {
        Demand::on(req, None)
    }

    fn on(req: &ClaimRequest, model: Option<&str>) -> Demand {
        Demand {
            gpu: req.gpu,
            accelerator: req.accelerator_type.as_deref().map(accelerator_key),
            cpus: req.cpus,
            model: model.map(str::to_string),
        }
    }
}

/// Where a move should go: a node, devices on it, or both; unset parts are free.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveTarget {
    /// The node to move to.
    #[serde(default)]
    pub node: Option<String>,
    /// The devices to move to.
    #[serde(default)]
    pub devices: Option<Vec<u32>>,
}

/// Devices of one model and memory size, indexed by free memory for fast fits.
#[derive(Debug, Default)]
struct Class {
    model: String,
    key: String,
    capacity: Bytes,
    /// (free memory, node, device position) of schedulable devices.
    free: BTreeSet<(Bytes, u32, u32)>,
}

/// The fleet: nodes, devices, claims and their allocations.
#[derive(Debug, Default)]
pub struct Fleet {
    policy: Policy,
    nodes: Vec<Node>,
    by_name: HashMap<String, usize>,
    classes: Vec<Class>,
    /// (node, device position) -> class.
    class_of: HashMap<(u32, u32), usize>,
    claims: HashMap<ClaimId, (Demand, Allocation)>,
}

/// A placement: node position and (device position, share) pairs.
type Plan = (usize, Vec<(usize, PerDevice)>);

impl Fleet {
    /// An empty fleet with a placement policy.
    pub fn new(policy: Policy) -> Fleet {
        Fleet {
            policy,
            ..Fleet::default()
        }
    }

    /// The placement policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Adds a node and its devices, all free.
    pub fn add_node(&mut self, spec: NodeSpec) -> Result<(), FleetError> {
        if self.by_name.contains_key(&spec.name) {
            return Err(FleetError::DuplicateNode(spec.name));
        }
        let mut seen = BTreeSet::new();
        for d in &spec.devices {
            if !seen.insert(d.index) {
                return Err(FleetError::DuplicateDevice {
                    node: spec.name.clone(),
                    index: d.index,
                });
            }
        }
        let mut devices: Vec<Device> = spec
            .devices
            .into_iter()
            .map(|spec| Device {
                key: accelerator_key(&spec.model),
                spec,
                memory_allocated: Bytes(0),
                compute_allocated: Units(0),
                slots_allocated: Slots(0),
                cordoned: false,
                health: Health::Healthy,
                holders: Vec::new(),
            })
            .collect();
        devices.sort_by_key(|d| d.spec.index);
        let n = self.nodes.len();
        self.by_name.insert(spec.name.clone(), n);
        self.nodes.push(Node {
            name: spec.name,
            devices,
            cpus: spec.cpus,
            cpus_allocated: Milli(0),
        });
        for d in 0..self.nodes[n].devices.len() {
            self.index(n, d);
        }
        Ok(())
    }

    /// Nodes in the order they were added.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node with this name.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.by_name.get(name).map(|&i| &self.nodes[i])
    }

    /// A claim's allocation.
    pub fn allocation(&self, id: ClaimId) -> Option<&Allocation> {
        self.claims.get(&id).map(|(_, a)| a)
    }

    /// All claims and their allocations, in no particular order.
    pub fn allocations(&self) -> impl Iterator<Item = (ClaimId, &Allocation)> {
        self.claims.iter().map(|(id, (_, a))| (*id, a))
    }

    /// How many claims hold an allocation.
    pub fn claim_count(&self) -> usize {
        self.claims.len()
    }

    fn locate(&self, node: &str, index: u32) -> Result<(usize, usize), FleetError> {
        let n = *self
            .by_name
            .get(node)
            .ok_or_else(|| FleetError::UnknownNode(node.to_string()))?;
        let d = self.nodes[n]
            .devices
            .iter()
            .position(|d| d.spec.index == index)
            .ok_or_else(|| FleetError::UnknownDevice {
                node: node.to_string(),
                index,
            })?;
        Ok((n, d))
    }

    /// Stops or resumes new claims on a device; existing claims stay.
    pub fn set_cordon(&mut self, node: &str, index: u32, cordoned: bool) -> Result<(), FleetError> {
        let (n, d) = self.locate(node, index)?;
        self.unindex(n, d);
        self.nodes[n].devices[d].cordoned = cordoned;
        self.index(n, d);
        Ok(())
    }

    /// Records a device's health; unhealthy and lost devices take no new claims.
    pub fn set_health(&mut self, node: &str, index: u32, health: Health) -> Result<(), FleetError> {
        let (n, d) = self.locate(node, index)?;
        self.unindex(n, d);
        self.nodes[n].devices[d].health = health;
        self.index(n, d);
        Ok(())
    }

    fn class_for(&mut self, model: &str, key: &str, capacity: Bytes) -> usize {
        if let Some(i) = self
            .classes
            .iter()
            .position(|c| c.model == model && c.capacity == capacity)
        {
            return i;
        }
        self.classes.push(Class {
            model: model.to_string(),
            key: key.to_string(),
            capacity,
            free: BTreeSet::new(),
        });
        self.classes.len() - 1
    }

    fn entry(&self, n: usize, d: usize) -> (Bytes, u32, u32) {
        let dev = &self.nodes[n].devices[d];
        // Positions fit in u32: at most 2^32 nodes and devices are never built.
        (dev.memory_free(), n as u32, d as u32)
    }

    fn index(&mut self, n: usize, d: usize) {
        let dev = &self.nodes[n].devices[d];
        if !dev.schedulable() {
            return;
        }
        let (model, key, capacity) = (dev.spec.model.clone(), dev.key.clone(), dev.capacity());
        let c = self.class_for(&model, &key, capacity);
        let entry = self.entry(n, d);
        self.classes[c].free.insert(entry);
        self.class_of.insert((n as u32, d as u32), c);
    }

    fn unindex(&mut self, n: usize, d: usize) {
        if let Some(c) = self.class_of.remove(&(n as u32, d as u32)) {
            let entry = self.entry(n, d);
            self.classes[c].free.remove(&entry);
        }
    }

    /// Where the request would go now, without placing it.
    pub fn plan(&self, req: &ClaimRequest) -> Result<Allocation, NoFit> {
        self.plan_on(req, None)
    }

    /// Like [`Fleet::plan`], limited to devices of one exact model when `model` is given
    /// (fair share places a claim on a resource type, and a type is one GPU model).
    pub fn plan_on(&self, req: &ClaimRequest, model: Option<&str>) -> Result<Allocation, NoFit> {
        let demand = Demand::on(req, model);
        let plan = self.find(&demand, req.node.as_deref(), req.devices.as_deref())?;
        Ok(self.allocation_of(&demand, &plan))
    }

    /// Places a claim, or says why it does not fit; nothing changes on failure.
    /// Ids are the caller's to keep unique; reusing a live id first releases the old claim.
    pub fn claim(&mut self, id: ClaimId, req: &ClaimRequest) -> Result<Allocation, NoFit> {
        self.claim_on(id, req, None)
    }

    /// Like [`Fleet::claim`], limited to devices of one exact model when `model` is given.
    pub fn claim_on(
        &mut self,
        id: ClaimId,
        req: &ClaimRequest,
        model: Option<&str>,
    ) -> Result<Allocation, NoFit> {
        debug_assert!(!self.claims.contains_key(&id), "claim id {id} reused");
        self.release(id);
        let demand = Demand::on(req, model);
        let plan = self.find(&demand, req.node.as_deref(), req.devices.as_deref())?;
        let alloc = self.allocation_of(&demand, &plan);
        self.apply(id, &plan, demand.cpus, true);
        // A later move may go to any model: the restriction was for this placement only.
        self.claims.insert(
            id,
            (
                Demand {
                    model: None,
                    ..demand
                },
                alloc.clone(),
            ),
        );
        Ok(alloc)
    }

    /// Puts back a stored claim at its stored place (after a restart). Cordons are
    /// ignored (the claim was there first); over-commitment is refused.
    pub fn restore(
        &mut self,
        id: ClaimId,
        req: &ClaimRequest,
        alloc: &Allocation,
    ) -> Result<(), FleetError> {
        if self.claims.contains_key(&id) {
            return Err(FleetError::DuplicateClaim(id));
        }
        let n = *self
            .by_name
            .get(&alloc.node)
            .ok_or_else(|| FleetError::UnknownNode(alloc.node.clone()))?;
        let mut parts = Vec::new();
        for s in &alloc.shares {
            let (_, d) = self.locate(&alloc.node, s.device)?;
            let need = PerDevice {
                memory: s.memory,
                compute: s.compute,
                slots: s.slots,
                exclusive: s.slots == Slots::FULL,
            };
            if !self.nodes[n].devices[d].fits(&need) {
                return Err(FleetError::DoesNotFit {
                    id,
                    node: alloc.node.clone(),
                    detail: format!(
                        "device {} has {} free",
                        s.device,
                        self.nodes[n].devices[d].memory_free()
                    ),
                });
            }
            parts.push((d, need));
        }
        if !self.cpu_ok(n, alloc.cpus) {
            return Err(FleetError::DoesNotFit {
                id,
                node: alloc.node.clone(),
                detail: "not enough free CPU".to_string(),
            });
        }
        self.apply(id, &(n, parts), alloc.cpus, true);
        self.claims.insert(id, (Demand::of(req), alloc.clone()));
        Ok(())
    }

    /// Releases a claim; releasing an unknown claim is a no-op that returns `None`.
    pub fn release(&mut self, id: ClaimId) -> Option<Allocation> {
        let (_, alloc) = self.claims.remove(&id)?;
        self.unapply(id, &alloc);
        Some(alloc)
    }

    /// Moves a claim to other devices or another node, atomically: on failure it
    /// stays where it was. The claim keeps its id.
    pub fn move_claim(
        &mut self,
        id: ClaimId,
        target: &MoveTarget,
    ) -> Result<Allocation, MoveError> {
        let (demand, old) = self.claims.remove(&id).ok_or(MoveError::UnknownClaim(id))?;
        if demand.gpu.is_none() && target.devices.is_some() {
            self.claims.insert(id, (demand, old));
            return Err(MoveError::NothingToMove(id));
        }
        // Holder lists are in placement order; a failed move must not reorder them.
        let held: Vec<(usize, usize, Vec<ClaimId>)> = self
            .by_name
            .get(&old.node)
            .map(|&n| {
                self.parts_of(n, &old)
                    .iter()
                    .map(|&(d, _)| (n, d, self.nodes[n].devices[d].holders.clone()))
                    .collect()
            })
            .unwrap_or_default();
        self.unapply(id, &old);
        match self.find(&demand, target.node.as_deref(), target.devices.as_deref()) {
            Ok(plan) => {
                let alloc = self.allocation_of(&demand, &plan);
                self.apply(id, &plan, demand.cpus, true);
                self.claims.insert(id, (demand, alloc.clone()));
                Ok(alloc)
            }
            Err(e) => {
                let n = self.by_name[&old.node];
                let parts = self.parts_of(n, &old);
                self.apply(id, &(n, parts), old.cpus, true);
                for (n, d, holders) in held {
                    self.nodes[n].devices[d].holders = holders;
                }
                self.claims.insert(id, (demand, old));
                Err(MoveError::NoFit(e))
            }
        }
    }

    fn parts_of(&self, n: usize, alloc: &Allocation) -> Vec<(usize, PerDevice)> {
        alloc
            .shares
            .iter()
            .filter_map(|s| {
                let d = self.nodes[n]
                    .devices
                    .iter()
                    .position(|d| d.spec.index == s.device)?;
                Some((
                    d,
                    PerDevice {
                        memory: s.memory,
                        compute: s.compute,
                        slots: s.slots,
                        exclusive: s.slots == Slots::FULL,
                    },
                ))
            })
            .collect()
    }

    fn allocation_of(&self, demand: &Demand, (n, parts): &Plan) -> Allocation {
        let node = &self.nodes[*n];
        let mut shares: Vec<DeviceShare> = parts
            .iter()
            .map(|(d, p)| DeviceShare {
                device: node.devices[*d].spec.index,
                memory: p.memory,
                compute: p.compute,
                slots: p.slots,
            })
            .collect();
        shares.sort_by_key(|s| s.device);
        Allocation {
            node: node.name.clone(),
            shares,
            cpus: demand.cpus,
        }
    }

    fn apply(&mut self, id: ClaimId, (n, parts): &Plan, cpus: Option<Milli>, add: bool) {
        for (d, p) in parts {
            self.unindex(*n, *d);
            let dev = &mut self.nodes[*n].devices[*d];
            if add {
                dev.memory_allocated += p.memory;
                dev.compute_allocated += p.compute;
                dev.slots_allocated += p.slots;
                dev.holders.push(id);
            } else {
                dev.memory_allocated -= p.memory;
                dev.compute_allocated -= p.compute;
                dev.slots_allocated -= p.slots;
                dev.holders.retain(|h| *h != id);
            }
            self.index(*n, *d);
        }
        if let Some(c) = cpus {
            let node = &mut self.nodes[*n];
            node.cpus_allocated = if add {
                Milli(node.cpus_allocated.0.saturating_add(c.0))
            } else {
                Milli(node.cpus_allocated.0.saturating_sub(c.0))
            };
        }
    }

    fn unapply(&mut self, id: ClaimId, alloc: &Allocation) {
        if let Some(&n) = self.by_name.get(&alloc.node) {
            let parts = self.parts_of(n, alloc);
            self.apply(id, &(n, parts), alloc.cpus, false);
        }
    }

    /// Finds a place, or gathers the reasons there is none.
    fn find(
        &self,
        demand: &Demand,
        node: Option<&str>,
        pins: Option<&[u32]>,
    ) -> Result<Plan, NoFit> {
        let found = match (&demand.gpu, node, pins) {
            (None, _, _) => self.find_cpu_only(demand, node),
            (Some(form), None, None) if form.device_count() == 1 => self.find_indexed(demand, form),
            (Some(form), _, _) => self.find_scan(demand, form, node, pins),
        };
        found.ok_or_else(|| self.explain(demand, node, pins))
    }

    fn cpu_ok(&self, n: usize, cpus: Option<Milli>) -> bool {
        match (cpus, self.nodes[n].cpus_free()) {
            (Some(need), Some(free)) => need <= free,
            _ => true,
        }
    }

    /// Single-device requests anywhere: walk each class's free-memory index from the
    /// smallest free amount that could fit (binpack) or from the largest (spread).
    fn find_indexed(&self, demand: &Demand, form: &GpuForm) -> Option<Plan> {
        let mut best: Option<(Bytes, u32, u32, PerDevice)> = None;
        for class in &self.classes {
            if demand
                .accelerator
                .as_deref()
                .is_some_and(|a| a != class.key)
                || demand.model.as_deref().is_some_and(|m| m != class.model)
            {
                continue;
            }
            let Ok(need) = form.per_device(class.capacity) else {
                continue;
            };
            let fits = |&&(free, n, d): &&(Bytes, u32, u32)| {
                let dev = &self.nodes[n as usize].devices[d as usize];
                free >= need.memory && dev.fits(&need) && self.cpu_ok(n as usize, demand.cpus)
            };
            let start = (need.memory, 0, 0);
            let found = match self.policy {
                Policy::Binpack => class.free.range(start..).find(fits),
                Policy::Spread => class.free.range(start..).rev().find(fits),
            };
            if let Some(&(free, n, d)) = found {
                let left = free - need.memory;
                let better = match (&best, self.policy) {
                    (None, _) => true,
                    (Some((b, ..)), Policy::Binpack) => left < *b,
                    (Some((b, ..)), Policy::Spread) => left > *b,
                };
                if better {
                    best = Some((left, n, d, need));
                }
            }
        }
        best.map(|(_, n, d, need)| (n as usize, vec![(d as usize, need)]))
    }

    /// Multi-device or pinned requests: each node in turn, choosing its best devices.
    fn find_scan(
        &self,
        demand: &Demand,
        form: &GpuForm,
        node: Option<&str>,
        pins: Option<&[u32]>,
    ) -> Option<Plan> {
        let count = form.device_count() as usize;
        if pins.is_some_and(|p| p.len() != count) {
            return None;
        }
        // A named node is looked up, not searched for.
        let range = match node {
            Some(name) => match self.by_name.get(name) {
                Some(&n) => n..n + 1,
                None => return None,
            },
            None => 0..self.nodes.len(),
        };
        let mut best: Option<(Bytes, Plan)> = None;
        // One buffer for every node, and the last normalization reused: nodes are
        // mostly of one model, and this loop runs over the whole fleet.
        let mut fitting: Vec<(usize, PerDevice, Bytes, Option<u32>)> = Vec::new();
        let mut last: Option<(Bytes, Option<PerDevice>)> = None;
        for n in range {
            let nd = &self.nodes[n];
            if nd.devices.len() < count || !self.cpu_ok(n, demand.cpus) {
                continue;
            }
            fitting.clear();
            for (d, dev) in nd.devices.iter().enumerate() {
                if !dev.schedulable()
                    || pins.is_some_and(|p| !p.contains(&dev.spec.index))
                    || demand.accelerator.as_deref().is_some_and(|a| a != dev.key)
                    || demand.model.as_deref().is_some_and(|m| m != dev.spec.model)
                {
                    continue;
                }
                let capacity = dev.capacity();
                let need = match last {
                    Some((m, need)) if m == capacity => need,
                    _ => {
                        let need = form.per_device(capacity).ok();
                        last = Some((capacity, need));
                        need
                    }
                };
                if let Some(need) = need
                    && dev.fits(&need)
                {
                    fitting.push((
                        d,
                        need,
                        dev.memory_free() - need.memory,
                        dev.spec.link_group,
                    ));
                }
            }
            if fitting.len() < count {
                continue;
            }
            match self.policy {
                Policy::Binpack => fitting.sort_unstable_by_key(|f| (f.2, f.0)),
                Policy::Spread => fitting.sort_unstable_by_key(|f| (std::cmp::Reverse(f.2), f.0)),
            }
            // Prefer devices that share a link: the first group with enough fitting devices.
            let group = if count > 1 {
                fitting
                    .iter()
                    .filter_map(|f| f.3)
                    .find(|&g| fitting.iter().filter(|f| f.3 == Some(g)).count() >= count)
            } else {
                None
            };
            let chosen = || {
                fitting
                    .iter()
                    .filter(|f| group.is_none() || f.3 == group)
                    .take(count)
            };
            let left = chosen().fold(Bytes(0), |a, f| a + f.2);
            let better = match (&best, self.policy) {
                (None, _) => true,
                (Some((b, _)), Policy::Binpack) => left < *b,
                (Some((b, _)), Policy::Spread) => left > *b,
            };
            if better {
                best = Some((left, (n, chosen().map(|f| (f.0, f.1)).collect())));
            }
        }
        best.map(|(_, p)| p)
    }

    fn find_cpu_only(&self, demand: &Demand, node: Option<&str>) -> Option<Plan> {
        let need = demand.cpus?;
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, nd)| node.is_none_or(|name| name == nd.name))
            .filter_map(|(n, nd)| nd.cpus_free().filter(|f| *f >= need).map(|f| (n, f)))
            .min_by_key(|&(n, free)| match self.policy {
                Policy::Binpack => (free.0, n),
                Policy::Spread => (u64::MAX - free.0, n),
            })
            .map(|(n, _)| (n, Vec::new()))
    }

    /// The slow path, only taken on failure: every device's reason, aggregated per node.
    fn explain(&self, demand: &Demand, node: Option<&str>, pins: Option<&[u32]>) -> NoFit {
        let mut nodes = Vec::new();
        let mut feasible_somewhere = false;
        for (n, nd) in self.nodes.iter().enumerate() {
            if node.is_some_and(|name| name != nd.name) {
                continue;
            }
            // A CPU-only node says nothing useful about a GPU request.
            if demand.gpu.is_some() && nd.devices.is_empty() {
                continue;
            }
            let mut counts: BTreeMap<Reason, ReasonCount> = BTreeMap::new();
            let mut note = |reason: Reason, free: Option<u64>, needs: Option<u64>| {
                let e = counts.entry(reason.clone()).or_insert(ReasonCount {
                    reason,
                    count: 0,
                    largest_free: None,
                    needs: None,
                });
                e.count += 1;
                e.largest_free = e.largest_free.max(free);
                e.needs = e.needs.max(needs);
            };
            let Some(form) = &demand.gpu else {
                match (demand.cpus, nd.cpus_free()) {
                    (Some(need), Some(free)) => {
                        feasible_somewhere |= nd.cpus.is_some_and(|c| c >= need);
                        note(Reason::InsufficientCpu, Some(free.0), Some(need.0));
                    }
                    _ => note(Reason::NoCpuCapacity, None, None),
                }
                nodes.push(NodeReasons {
                    node: nd.name.clone(),
                    devices: nd.devices.len(),
                    reasons: counts.into_values().collect(),
                });
                continue;
            };
            let count = form.device_count() as usize;
            let mut fit_now = 0;
            let mut fit_empty = 0;
            for dev in &nd.devices {
                let reason = if pins.is_some_and(|p| !p.contains(&dev.spec.index)) {
                    Some((Reason::NotPinned, None, None))
                } else if demand.accelerator.as_deref().is_some_and(|a| a != dev.key)
                    || demand.model.as_deref().is_some_and(|m| m != dev.spec.model)
                {
                    Some((Reason::WrongAccelerator, None, None))
                } else if dev.spec.memory.is_none_or(|m| m.0 == 0) {
                    // Zero is as unschedulable as unknown (see `Device::schedulable`).
                    Some((Reason::UnknownMemory, None, None))
                } else {
                    match form.per_device(dev.capacity()) {
                        Err(too) => {
                            Some((Reason::TooSmall, Some(dev.capacity().0), Some(too.needs.0)))
                        }
                        Ok(need) => {
                            fit_empty += 1;
                            if dev.cordoned {
                                Some((Reason::Cordoned, None, None))
                            } else if dev.health == Health::Lost {
                                Some((Reason::Lost, None, None))
                            } else if dev.health != Health::Healthy {
                                Some((Reason::Unhealthy, None, None))
                            } else if need.memory > dev.memory_free() {
                                Some((
                                    Reason::InsufficientMemory,
                                    Some(dev.memory_free().0),
                                    Some(need.memory.0),
                                ))
                            } else if need.compute > dev.compute_free() {
                                Some((
                                    Reason::InsufficientCompute,
                                    Some(u64::from(dev.compute_free().0)),
                                    Some(u64::from(need.compute.0)),
                                ))
                            } else if !dev.fits(&need) {
                                Some((Reason::NoSlots, None, None))
                            } else {
                                fit_now += 1;
                                None
                            }
                        }
                    }
                };
                if let Some((r, free, needs)) = reason {
                    note(r, free, needs);
                }
            }
            let pins_ok = pins.is_none_or(|p| p.len() == count);
            if fit_empty >= count
                && pins_ok
                && nd
                    .cpus
                    .is_none_or(|c| demand.cpus.is_none_or(|need| need <= c))
            {
                feasible_somewhere = true;
            }
            if fit_now > 0 && fit_now < count {
                note(
                    Reason::TooFewDevices,
                    Some(fit_now as u64),
                    Some(count as u64),
                );
            } else if fit_now >= count && !self.cpu_ok(n, demand.cpus) {
                let free = nd.cpus_free().map(|f| f.0);
                note(Reason::InsufficientCpu, free, demand.cpus.map(|c| c.0));
            }
            if !pins_ok {
                note(
                    Reason::NotPinned,
                    Some(pins.map_or(0, <[u32]>::len) as u64),
                    Some(count as u64),
                );
            }
            let mut reasons: Vec<ReasonCount> = counts.into_values().collect();
            reasons.sort_by_key(|r| std::cmp::Reverse(r.count));
            nodes.push(NodeReasons {
                node: nd.name.clone(),
                devices: nd.devices.len(),
                reasons,
            });
        }
        NoFit {
            infeasible: !feasible_somewhere,
            nodes,
        }
    }

    /// Free capacity check used by tests and the console: nothing is over-committed.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut expected: HashMap<(usize, u32), (Bytes, Units, Slots)> = HashMap::new();
        for (_, alloc) in self.claims.values() {
            let n = self.by_name[&alloc.node];
            for s in &alloc.shares {
                let e = expected.entry((n, s.device)).or_default();
                e.0 += s.memory;
                e.1 += s.compute;
                e.2 += s.slots;
            }
        }
        for (n, node) in self.nodes.iter().enumerate() {
            for dev in &node.devices {
                let want = expected
                    .get(&(n, dev.spec.index))
                    .copied()
                    .unwrap_or_default();
                let got = (
                    dev.memory_allocated,
                    dev.compute_allocated,
                    dev.slots_allocated,
                );
                if want != got {
                    return Err(format!(
                        "{}:{} books {got:?} but claims add up to {want:?}",
                        node.name, dev.spec.index
                    ));
                }
                if dev.memory_allocated > dev.capacity()
                    || dev.compute_allocated > Units::FULL
                    || dev.slots_allocated.0 > SLOTS_PER_DEVICE
                {
                    return Err(format!(
                        "{}:{} is over-committed: {got:?}",
                        node.name, dev.spec.index
                    ));
                }
            }
            if let Some(c) = node.cpus
                && node.cpus_allocated > c
            {
                return Err(format!("{} CPU over-committed", node.name));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gpu(index: u32, model: &str, memory: Bytes) -> DeviceSpec {
        DeviceSpec {
            index,
            model: model.to_string(),
            uuid: None,
            memory: Some(memory),
            link_group: None,
        }
    }

    fn node(name: &str, devices: Vec<DeviceSpec>) -> NodeSpec {
        NodeSpec {
            name: name.to_string(),
            devices,
            cpus: None,
        }
    }

    fn req(v: serde_json::Value) -> ClaimRequest {
        ClaimRequest::from_json(&v).unwrap()
    }

    fn fleet(policy: Policy, nodes: Vec<NodeSpec>) -> Fleet {
        let mut f = Fleet::new(policy);
        for n in nodes {
            f.add_node(n).unwrap();
        }
        f
    }

    #[test]
    fn heterogeneous_nodes_convert_on_their_own_memory() {
        let mut f = fleet(
            Policy::Binpack,
            vec![
                node(
                    "a100-40",
                    vec![gpu(0, "NVIDIA A100-SXM4-40GB", Bytes::gib(40))],
                ),
                node(
                    "a100-80",
                    vec![gpu(0, "NVIDIA A100-SXM4-80GB", Bytes::gib(80))],
                ),
            ],
        );
        let r = req(json!({"gpu_memory": "20Gi", "node": "a100-40"}));
        let a = f.claim(ClaimId(1), &r).unwrap();
        assert_eq!(a.shares[0].compute, Units(5000));
        let r = req(json!({"gpu_memory": "20Gi", "node": "a100-80"}));
        let a = f.claim(ClaimId(2), &r).unwrap();
        assert_eq!(a.shares[0].compute, Units(2500));
        assert_eq!(a.shares[0].memory, Bytes::gib(20));
        f.check_invariants().unwrap();
    }

    #[test]
    fn infeasible_accelerator_request_says_why() {
        let mut f = fleet(
            Policy::Binpack,
            vec![
                node("g5", vec![gpu(0, "NVIDIA A10G", Bytes::gib(24))]),
                node("p4", vec![gpu(0, "NVIDIA A100-SXM4-80GB", Bytes::gib(80))]),
            ],
        );
        let r = req(json!({"gpu_memory": "30Gi", "accelerator_type": "NVIDIA_TESLA_A10G"}));
        let e = f.claim(ClaimId(1), &r).unwrap_err();
        assert!(e.infeasible);
        let text = e.to_string();
        assert!(
            text.contains("node g5: 1/1 GPUs too small (has 24 GiB, needs 30 GiB)"),
            "{text}"
        );
        assert!(
            text.contains("node p4: 1/1 GPUs other accelerator type"),
            "{text}"
        );
        assert_eq!(f.claim_count(), 0);
    }

    #[test]
    fn node_sums_never_decide_a_fit() {
        let mut f = fleet(
            Policy::Binpack,
            vec![node(
                "a",
                vec![
                    gpu(0, "A100", Bytes::gib(40)),
                    gpu(1, "A100", Bytes::gib(40)),
                ],
            )],
        );
        f.claim(
            ClaimId(1),
            &req(json!({"gpu_memory": "30Gi", "devices": [0]})),
        )
        .unwrap();
        f.claim(
            ClaimId(2),
            &req(json!({"gpu_memory": "30Gi", "devices": [1]})),
        )
        .unwrap();
        let e = f
            .claim(ClaimId(3), &req(json!({"gpu_memory": "15Gi"})))
            .unwrap_err();
        assert!(!e.infeasible);
        assert_eq!(
            e.lines(),
            vec![
                "node a: 2/2 GPUs insufficient memory (largest free 10 GiB, needs 15 GiB)"
                    .to_string()
            ]
        );
    }

    #[test]
    fn reasons_aggregate_per_node_and_reason() {
        let mut f = fleet(
            Policy::Binpack,
            vec![node(
                "a",
                (0..4).map(|i| gpu(i, "A100", Bytes::gib(40))).collect(),
            )],
        );
        f.set_cordon("a", 3, true).unwrap();
        for (id, d) in [(1, 0), (2, 1), (3, 2)] {
            f.claim(
                ClaimId(id),
                &req(json!({"gpu_memory": "37Gi", "devices": [d]})),
            )
            .unwrap();
        }
        let e = f
            .claim(ClaimId(9), &req(json!({"gpu_memory": "20Gi"})))
            .unwrap_err();
        assert_eq!(
            e.lines(),
            vec!["node a: 3/4 GPUs insufficient memory (largest free 3 GiB, needs 20 GiB); 1/4 cordoned".to_string()]
        );
        assert!(e.summary().starts_with("does not fit now"));
    }

    #[test]
    fn koordinator_split_takes_two_devices_of_one_node() {
        let mut f = fleet(
            Policy::Binpack,
            vec![
                node("one", vec![gpu(0, "A100", Bytes::gib(16))]),
                node(
                    "two",
                    vec![
                        gpu(0, "A100", Bytes::gib(16)),
                        gpu(1, "A100", Bytes::gib(16)),
                    ],
                ),
            ],
        );
        let a = f
            .claim(
                ClaimId(1),
                &req(json!({"gpu-memory": "4Gi", "gpu-core": 100, "gpu.shared": 2})),
            )
            .unwrap();
        assert_eq!(a.node, "two");
        assert_eq!(a.shares.len(), 2);
        for s in &a.shares {
            assert_eq!(
                (s.memory, s.compute, s.slots),
                (Bytes::gib(2), Units(5000), Slots(1))
            );
        }
        let e = f
            .claim(
                ClaimId(2),
                &req(json!({"gpu-memory": "4Gi", "gpu.shared": 2, "node": "one"})),
            )
            .unwrap_err();
        assert!(e.infeasible, "{e}");
    }

    #[test]
    fn binpack_fills_the_fullest_and_spread_the_emptiest() {
        for (policy, want) in [(Policy::Binpack, 1), (Policy::Spread, 0)] {
            let mut f = fleet(
                policy,
                vec![node(
                    "a",
                    vec![
                        gpu(0, "A100", Bytes::gib(40)),
                        gpu(1, "A100", Bytes::gib(40)),
                    ],
                )],
            );
            f.claim(ClaimId(1), &req(json!({"num_gpus": 0.25, "devices": [1]})))
                .unwrap();
            let a = f
                .claim(ClaimId(2), &req(json!({"num_gpus": 0.25})))
                .unwrap();
            assert_eq!(a.shares[0].device, want, "{policy:?}");
        }
    }

    #[test]
    fn binpack_prefers_the_smaller_gpu_that_fits() {
        let mut f = fleet(
            Policy::Binpack,
            vec![
                node("big", vec![gpu(0, "H100", Bytes::gib(80))]),
                node("small", vec![gpu(0, "A100", Bytes::gib(40))]),
            ],
        );
        assert_eq!(
            f.claim(ClaimId(1), &req(json!({"gpu_memory": "20Gi"})))
                .unwrap()
                .node,
            "small"
        );
    }

    #[test]
    fn exclusive_claims_need_an_empty_device_and_take_all_slots() {
        let mut f = fleet(
            Policy::Binpack,
            vec![node(
                "a",
                vec![
                    gpu(0, "A100", Bytes::gib(40)),
                    gpu(1, "A100", Bytes::gib(40)),
                ],
            )],
        );
        f.claim(
            ClaimId(1),
            &req(json!({"num_gpus": 0.0001, "devices": [0]})),
        )
        .unwrap();
        let a = f
            .claim(ClaimId(2), &req(json!({"nvidia.com/gpu": 1})))
            .unwrap();
        assert_eq!(a.shares[0].device, 1);
        assert_eq!(a.shares[0].slots, Slots::FULL);
        let e = f
            .claim(ClaimId(3), &req(json!({"num_gpus": 1})))
            .unwrap_err();
        assert!(!e.infeasible);
        f.release(ClaimId(1));
        assert_eq!(
            f.claim(ClaimId(3), &req(json!({"num_gpus": 1})))
                .unwrap()
                .shares[0]
                .device,
            0
        );
    }

    #[test]
    fn slots_cap_sharers_at_one_hundred() {
        let mut f = fleet(
            Policy::Binpack,
            vec![node("a", vec![gpu(0, "A100", Bytes::gib(40))])],
        );
        for id in 0..100 {
            f.claim(
                ClaimId(id),
                &req(json!({"gpu-memory": "1Mi", "gpu.shared": 1})),
            )
            .unwrap();
        }
        let e = f
            .claim(
                ClaimId(100),
                &req(json!({"gpu-memory": "1Mi", "gpu.shared": 1})),
            )
            .unwrap_err();
        assert_eq!(e.lines(), vec!["node a: 1/1 GPUs no free slot".to_string()]);
    }

    #[test]
    fn compute_is_a_dimension_of_its_own() {
        let mut f = fleet(
            Policy::Binpack,
            vec![node("a", vec![gpu(0, "A100", Bytes::gib(40))])],
        );
        f.claim(
            ClaimId(1),
            &req(json!({"gpu-memory": "1Gi", "gpu-core": 80, "gpu.shared": 1})),
        )
        .unwrap();
        let e = f
            .claim(
                ClaimId(2),
                &req(json!({"gpu-memory": "1Gi", "gpu-core": 30, "gpu.shared": 1})),
            )
            .unwrap_err();
        assert_eq!(
            e.lines(),
            vec![
                "node a: 1/1 GPUs insufficient compute (largest free 0.2 GPU, needs 0.3 GPU)"
                    .to_string()
            ]
        );
    }

    #[test]
    fn move_is_atomic_and_keeps_the_id() {
        let mut f = fleet(
            Policy::Binpack,
            vec![node(
                "a",
                vec![
                    gpu(0, "A100", Bytes::gib(40)),
                    gpu(1, "A100", Bytes::gib(40)),
                ],
            )],
        );
        f.claim(
            ClaimId(7),
            &req(json!({"gpu_memory": "30Gi", "devices": [0]})),
        )
        .unwrap();
        f.claim(
            ClaimId(8),
            &req(json!({"gpu_memory": "20Gi", "devices": [1]})),
        )
        .unwrap();
        let target = MoveTarget {
            node: None,
            devices: Some(vec![1]),
        };
        let before = f.allocation(ClaimId(7)).cloned();
        assert!(matches!(
            f.move_claim(ClaimId(7), &target),
            Err(MoveError::NoFit(_))
        ));
        assert_eq!(
            f.allocation(ClaimId(7)).cloned(),
            before,
            "a failed move leaves the claim in place"
        );
        f.check_invariants().unwrap();
        f.release(ClaimId(8));
        let a = f.move_claim(ClaimId(7), &target).unwrap();
        assert_eq!(a.shares[0].device, 1);
        assert_eq!(f.node("a").unwrap().devices[0].memory_allocated, Bytes(0));
        assert_eq!(f.allocation(ClaimId(7)).unwrap().shares[0].device, 1);
        assert!(matches!(
            f.move_claim(ClaimId(99), &target),
            Err(MoveError::UnknownClaim(ClaimId(99)))
        ));
        f.check_invariants().unwrap();
    }

    #[test]
    fn cordoned_unhealthy_and_unknown_devices_take_nothing_new() {
        let mut f = fleet(
            Policy::Binpack,
            vec![node(
                "a",
                vec![
                    gpu(0, "A100", Bytes::gib(40)),
                    gpu(1, "A100", Bytes::gib(40)),
                    DeviceSpec {
                        memory: None,
                        ..gpu(2, "A100", Bytes(0))
                    },
                ],
            )],
        );
        f.set_cordon("a", 0, true).unwrap();
        f.set_health("a", 1, Health::Unhealthy("XID 79".into()))
            .unwrap();
        let e = f
            .claim(ClaimId(1), &req(json!({"num_gpus": 0.5})))
            .unwrap_err();
        assert!(!e.infeasible, "cordons and health can change");
        assert_eq!(
            e.lines(),
            vec!["node a: 1/3 GPUs cordoned; 1/3 unhealthy; 1/3 memory unknown".to_string()]
        );
        f.set_cordon("a", 0, false).unwrap();
        assert_eq!(
            f.claim(ClaimId(1), &req(json!({"num_gpus": 0.5})))
                .unwrap()
                .shares[0]
                .device,
            0
        );
        assert!(f.set_cordon("a", 9, true).is_err());
        assert!(f.set_cordon("b", 0, true).is_err());
    }

    #[test]
    fn a_zero_memory_device_is_no_reason_to_wait() {
        let mut f = fleet(
            Policy::Binpack,
            vec![node(
                "a",
                vec![DeviceSpec {
                    memory: Some(Bytes(0)),
                    ..gpu(0, "A100", Bytes(0))
                }],
            )],
        );
        let e = f
            .claim(ClaimId(1), &req(json!({"num_gpus": 0.0001})))
            .unwrap_err();
        assert!(e.infeasible, "{e}");
        assert_eq!(
            e.lines(),
            vec!["node a: 1/1 GPUs memory unknown".to_string()]
        );
    }

    #[test]
    fn a_failed_move_keeps_holders_in_placement_order() {
        let mut f = fleet(
            Policy::Binpack,
            vec![node("a", vec![gpu(0, "A100", Bytes::gib(40))])],
        );
        for id in 1..=3 {
            f.claim(ClaimId(id), &req(json!({"num_gpus": 0.25})))
                .unwrap();
        }
        let before = f.nodes().to_vec();
        let target = MoveTarget {
            node: Some("nowhere".into()),
            devices: None,
        };
        assert!(matches!(
            f.move_claim(ClaimId(1), &target),
            Err(MoveError::NoFit(_))
        ));
        assert_eq!(f.nodes(), &before[..]);
        assert_eq!(
            f.nodes()[0].devices[0].holders,
            vec![ClaimId(1), ClaimId(2), ClaimId(3)]
        );
    }

    #[test]
    fn linked_devices_are_preferred_for_multi_device_claims() {
        let linked = |i, g| DeviceSpec {
            link_group: Some(g),
            ..gpu(i, "A100", Bytes::gib(40))
        };
        let mut f = fleet(
            Policy::Binpack,
            vec![node(
                "a",
                vec![linked(0, 0), linked(1, 1), linked(2, 1), linked(3, 0)],
            )],
        );
        f.claim(ClaimId(1), &req(json!({"num_gpus": 0.5, "devices": [0]})))
            .unwrap();
        let a = f
            .claim(ClaimId(2), &req(json!({"nvidia.com/gpu": 2})))
            .unwrap();
        assert_eq!(a.visible_devices(), "1,2");
    }

    #[test]
    fn cpu_claims_are_accounted_per_node() {
        let mut f = Fleet::new(Policy::Binpack);
        f.add_node(NodeSpec {
            cpus: Some(Milli(4000)),
            ..node("cpu", vec![])
        })
        .unwrap();
        f.claim(ClaimId(1), &req(json!({"cpus": 3}))).unwrap();
        let e = f.claim(ClaimId(2), &req(json!({"cpus": 2}))).unwrap_err();
        assert_eq!(
            e.lines(),
            vec!["node cpu: insufficient CPU (largest free 1, needs 2)".to_string()]
        );
        assert!(f.claim(ClaimId(3), &req(json!({"cpus": "500m"}))).is_ok());
        let e = f.claim(ClaimId(4), &req(json!({"cpus": 8}))).unwrap_err();
        assert!(e.infeasible);
    }

    #[test]
    fn restore_refuses_over_commitment() {
        let mut f = fleet(
            Policy::Binpack,
            vec![node("a", vec![gpu(0, "A100", Bytes::gib(40))])],
        );
        let r = req(json!({"gpu_memory": "30Gi"}));
        let a = f.plan(&r).unwrap();
        f.restore(ClaimId(1), &r, &a).unwrap();
        assert!(matches!(
            f.restore(ClaimId(1), &r, &a),
            Err(FleetError::DuplicateClaim(ClaimId(1)))
        ));
        assert!(matches!(
            f.restore(ClaimId(2), &r, &a),
            Err(FleetError::DoesNotFit { .. })
        ));
        f.check_invariants().unwrap();
    }

    #[test]
    fn duplicate_nodes_and_devices_are_refused() {
        let mut f = fleet(Policy::Binpack, vec![node("a", vec![])]);
        assert!(matches!(
            f.add_node(node("a", vec![])),
            Err(FleetError::DuplicateNode(_))
        ));
        let twice = node(
            "b",
            vec![gpu(0, "A100", Bytes::gib(1)), gpu(0, "A100", Bytes::gib(1))],
        );
        assert!(matches!(
            f.add_node(twice),
            Err(FleetError::DuplicateDevice { .. })
        ));
    }
}
