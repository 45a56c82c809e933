//! The fleet: nodes, devices and the claims placed on them, with the bookkeeping that
//! keeps every device's allocated memory, compute and slots equal to its claims' shares.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::Policy;
use super::cells::{Cell, Cells};
use super::explain::NoFit;
use super::index::Class;
use super::model::{Allocation, Device, DeviceShare, Health, Node, NodeSpec};
use super::wholes::Wholes;
use crate::ids::ClaimId;
use crate::request::{AcceleratorWanted, ClaimRequest, GpuForm, Milli, PerDevice, accelerator_key};
use crate::shared::{SharedMap, SharedVec};
use crate::units::{Bytes, SLOTS_PER_DEVICE, Slots, Units};

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
pub(super) struct Demand {
    /// The GPU form, if any.
    pub(super) gpu: Option<GpuForm>,
    /// The accelerator type asked for: family and, where named, memory size.
    pub(super) accelerator: Option<AcceleratorWanted>,
    /// CPU asked for.
    pub(super) cpus: Option<Milli>,
    /// Only devices of this exact model (fair share places claims per resource type).
    pub(super) model: Option<String>,
}

impl Demand {
    fn of(req: &ClaimRequest) -> Demand {
        Demand::on(req, None)
    }

    pub(super) fn on(req: &ClaimRequest, model: Option<&str>) -> Demand {
        Demand {
            gpu: req.gpu,
            accelerator: req
                .accelerator_type
                .as_deref()
                .map(AcceleratorWanted::parse),
            cpus: req.cpus,
            model: model.map(str::to_string),
        }
    }
}

/// The fleet: nodes, devices, claims and their allocations.
#[derive(Clone, Debug, Default)]
pub struct Fleet {
    pub(super) policy: Policy,
    /// Each node behind its own `Arc`, as the claims, in shared chunks
    /// (`crate::shared`): a copy shares the table and the nodes it leaves as they are,
    /// and placing on a node copies that node and its chunk only while a copy shares them.
    pub(super) nodes: SharedVec<Arc<Node>>,
    /// Only a new node changes it: shared whole by copies.
    pub(super) by_name: Arc<HashMap<String, usize>>,
    pub(super) classes: Vec<Class>,
    /// Shared with copies (`crate::shared`), each behind its own `Arc`: a copy of the
    /// fleet (the forecast's) shares the table and the allocations in it.
    pub(super) claims: SharedMap<ClaimId, Arc<(Demand, Allocation)>>,
    /// Moves on whenever what fits may have changed.
    pub(super) generation: u64,
    /// The distinct device make-ups of nodes: (model, memory, devices) in device order.
    pub(super) profiles: Vec<Vec<(String, Option<Bytes>, usize)>>,
    /// Each node's make-up, by position in `profiles`.
    pub(super) profile_of: SharedVec<u32>,
    /// (node, device position) of devices that take no claims (cordoned, unhealthy, lost,
    /// memory unknown): the ones the free-memory index leaves out.
    pub(super) off: BTreeSet<(u32, u32)>,
    /// Every device's free figures, node after node (`cells`).
    pub(super) cells: Cells,
    /// Nodes with devices (counted once: every multi-device placement asks).
    pub(super) gpu_nodes: usize,
    /// Nodes by how many wholly free devices they have, kept with the cells.
    pub(super) wholes: Wholes,
}

/// A placement: node position and (device position, share) pairs.
pub(super) type Plan = (usize, Vec<(usize, PerDevice)>);

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
        let mut profile: Vec<(String, Option<Bytes>, usize)> = Vec::new();
        for d in &devices {
            match profile
                .iter_mut()
                .find(|(m, mem, _)| *m == d.spec.model && *mem == d.spec.memory)
            {
                Some(p) => p.2 += 1,
                None => profile.push((d.spec.model.clone(), d.spec.memory, 1)),
            }
        }
        let p = if let Some(p) = self.profiles.iter().position(|q| *q == profile) {
            p
        } else {
            self.profiles.push(profile);
            self.profiles.len() - 1
        };
        // Positions fit in u32: at most 2^32 node make-ups are never built.
        self.profile_of.push(p as u32);
        let n = self.nodes.len();
        self.cells.push_node(devices.len());
        self.gpu_nodes += usize::from(!devices.is_empty());
        Arc::make_mut(&mut self.by_name).insert(spec.name.clone(), n);
        self.nodes.push(Arc::new(Node {
            name: spec.name,
            devices,
            cpus: spec.cpus,
            cpus_allocated: Milli(0),
        }));
        for d in 0..self.nodes[n].devices.len() {
            self.index(n, d);
        }
        self.generation += 1;
        Ok(())
    }

    /// Nodes in the order they were added.
    pub fn nodes(&self) -> &SharedVec<Arc<Node>> {
        &self.nodes
    }

    /// The node with this name.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.by_name.get(name).map(|&i| &*self.nodes[i])
    }

    /// A claim's allocation.
    pub fn allocation(&self, id: ClaimId) -> Option<&Allocation> {
        self.claims.get(&id).map(|c| &c.1)
    }

    /// All claims and their allocations, in no particular order.
    pub fn allocations(&self) -> impl Iterator<Item = (ClaimId, &Allocation)> {
        self.claims.iter().map(|(id, c)| (*id, &c.1))
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
        Arc::make_mut(&mut self.nodes[n]).devices[d].cordoned = cordoned;
        self.index(n, d);
        self.generation += 1;
        Ok(())
    }

    /// Records a device's health; unhealthy and lost devices take no new claims.
    pub fn set_health(&mut self, node: &str, index: u32, health: Health) -> Result<(), FleetError> {
        let (n, d) = self.locate(node, index)?;
        self.unindex(n, d);
        Arc::make_mut(&mut self.nodes[n]).devices[d].health = health;
        self.index(n, d);
        self.generation += 1;
        Ok(())
    }

    /// A number that changes whenever what fits may have changed (a claim placed,
    /// released or moved, a cordon, a health change, a node added): a fit worked out at
    /// one generation holds until it moves on.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the request fits now, limited to devices of one exact model when `model` is
    /// given: [`Fleet::plan_on`] without working out the reasons when it does not.
    pub fn fits_on(&self, req: &ClaimRequest, model: Option<&str>) -> bool {
        let demand = Demand::on(req, model);
        // Whole devices anywhere: the counts say, without a search.
        if let (Some(form), None, None) = (&demand.gpu, &req.node, &req.devices)
            && let Some(answer) = self.wholes_fit(&demand, form)
        {
            return answer;
        }
        self.search(&demand, req.node.as_deref(), req.devices.as_deref())
            .is_some()
    }

    /// Whether the request fits now on node `node` (its own pin, if any, aside).
    pub fn fits_at(&self, req: &ClaimRequest, node: &str) -> bool {
        let demand = Demand::on(req, None);
        self.search(&demand, Some(node), req.devices.as_deref())
            .is_some()
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
            Arc::new((
                Demand {
                    model: None,
                    ..demand
                },
                alloc.clone(),
            )),
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
        self.claims
            .insert(id, Arc::new((Demand::of(req), alloc.clone())));
        Ok(())
    }

    /// Releases a claim; releasing an unknown claim is a no-op that returns `None`.
    pub fn release(&mut self, id: ClaimId) -> Option<Allocation> {
        let (_, alloc) = Arc::unwrap_or_clone(self.claims.remove(&id)?);
        self.unapply(id, &alloc);
        Some(alloc)
    }

    /// A stored allocation as device positions and shares on node `n`.
    pub(super) fn parts_of(&self, n: usize, alloc: &Allocation) -> Vec<(usize, PerDevice)> {
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

    /// The allocation a plan gives, shares in device order.
    pub(super) fn allocation_of(&self, demand: &Demand, (n, parts): &Plan) -> Allocation {
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

    /// Books (`add`) or unbooks a plan's shares and CPU, keeping the index current.
    pub(super) fn apply(&mut self, id: ClaimId, (n, parts): &Plan, cpus: Option<Milli>, add: bool) {
        self.generation += 1;
        for (d, p) in parts {
            self.unindex(*n, *d);
            let dev = &mut Arc::make_mut(&mut self.nodes[*n]).devices[*d];
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
            let node = Arc::make_mut(&mut self.nodes[*n]);
            node.cpus_allocated = if add {
                Milli(node.cpus_allocated.0.saturating_add(c.0))
            } else {
                Milli(node.cpus_allocated.0.saturating_sub(c.0))
            };
        }
    }

    /// Unbooks a claim's allocation.
    pub(super) fn unapply(&mut self, id: ClaimId, alloc: &Allocation) {
        if let Some(&n) = self.by_name.get(&alloc.node) {
            let parts = self.parts_of(n, alloc);
            self.apply(id, &(n, parts), alloc.cpus, false);
        }
    }

    /// Free capacity check used by tests and the console: nothing is over-committed.
    pub fn check_invariants(&self) -> Result<(), String> {
        let with_devices = self.nodes.iter().filter(|n| !n.devices.is_empty()).count();
        if self.gpu_nodes != with_devices {
            return Err(format!(
                "{} nodes counted with devices, {with_devices} have some",
                self.gpu_nodes
            ));
        }
        if self.wholes.trimmed() != self.wholes_recounted().trimmed() {
            return Err(format!(
                "the counts of wholly free devices {:?} are not a recount's {:?}",
                self.wholes.trimmed(),
                self.wholes_recounted().trimmed()
            ));
        }
        let mut expected: HashMap<(usize, u32), (Bytes, Units, Slots)> = HashMap::new();
        for (_, alloc) in self.claims.values().map(|c| &**c) {
            let n = self.by_name[&alloc.node];
            for s in &alloc.shares {
                let e = expected.entry((n, s.device)).or_default();
                e.0 += s.memory;
                e.1 += s.compute;
                e.2 += s.slots;
            }
        }
        for (n, node) in self.nodes.iter().enumerate() {
            for (d, dev) in node.devices.iter().enumerate() {
                let class = self
                    .classes
                    .iter()
                    .position(|c| c.model == dev.spec.model && c.capacity == dev.capacity());
                let cell = match class {
                    Some(c) if dev.schedulable() => Cell::of(dev, c as u32),
                    _ => Cell::off(),
                };
                if self.cells_of(n).get(d) != Some(&cell) {
                    return Err(format!("{}:{} has a stale cell", node.name, dev.spec.index));
                }
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
