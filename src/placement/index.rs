//! The fit index and the searches that use it: schedulable devices grouped by model and
//! size and ordered by free memory, so a single-device claim finds its place without a
//! scan; multi-device claims walk the same index in order of what each device would have
//! left, weighing only nodes that could be the best; pinned claims and claims on a named
//! node scan node by node; linked devices are preferred; binpack or spread decides among
//! the fits.

use super::Policy;
use super::cells::{Cell, OFF};
use super::explain::NoFit;
use super::fleet::{Demand, Fleet, Plan};
use super::summary::NODES_LISTED;
use crate::request::{GpuForm, Milli, PerDevice};
use crate::shared::{SetRange, SharedSet};
use crate::units::Bytes;

/// Devices of one model and memory size, indexed by free memory for fast fits.
#[derive(Clone, Debug, Default)]
pub(super) struct Class {
    pub(super) model: String,
    pub(super) capacity: Bytes,
    /// (free memory, node, device position) of schedulable devices.
    pub(super) free: SharedSet<(Bytes, u32, u32)>,
}

impl Fleet {
    /// The class of device `d` of node `n`, made if it is the first of its model and size
    /// (the model is copied only then).
    fn class_for(&mut self, n: usize, d: usize) -> usize {
        let dev = &self.nodes[n].devices[d];
        let capacity = dev.capacity();
        if let Some(i) = self
            .classes
            .iter()
            .position(|c| c.model == dev.spec.model && c.capacity == capacity)
        {
            return i;
        }
        let model = dev.spec.model.clone();
        self.classes.push(Class {
            model,
            capacity,
            free: SharedSet::new(),
        });
        self.classes.len() - 1
    }

    fn entry(&self, n: usize, d: usize) -> (Bytes, u32, u32) {
        let dev = &self.nodes[n].devices[d];
        // Positions fit in u32: at most 2^32 nodes and devices are never built.
        (dev.memory_free(), n as u32, d as u32)
    }

    /// Puts a device into its class's free-memory index, if it can take claims.
    pub(super) fn index(&mut self, n: usize, d: usize) {
        let dev = &self.nodes[n].devices[d];
        if !dev.schedulable() {
            self.off.insert((n as u32, d as u32));
            self.set_cell(n, d, Cell::off());
            return;
        }
        self.off.remove(&(n as u32, d as u32));
        let c = self.class_for(n, d);
        let entry = self.entry(n, d);
        self.classes[c].free.insert(entry);
        // Classes fit in u32: at most 2^32 models and sizes are never built.
        self.set_cell(n, d, Cell::of(&self.nodes[n].devices[d], c as u32));
    }

    /// Takes a device out of the index (before its free memory or state changes).
    pub(super) fn unindex(&mut self, n: usize, d: usize) {
        let c = self.cells_of(n)[d].class;
        if c != OFF {
            let entry = self.entry(n, d);
            self.classes[c as usize].free.remove(&entry);
            self.set_cell(n, d, Cell::off());
        }
    }

    /// Finds a place, or gathers the reasons there is none.
    pub(super) fn find(
        &self,
        demand: &Demand,
        node: Option<&str>,
        pins: Option<&[u32]>,
    ) -> Result<Plan, NoFit> {
        // A multi-device request on a large fleet: the walk's count of what fits is the
        // refusal's, so a fleet where nothing fits is counted once.
        if let (Some(form), None, None) = (&demand.gpu, node, pins)
            && form.device_count() > 1
            && self.gpu_nodes() > NODES_LISTED
        {
            return self.find_multi_or_refusal(demand, form, WALK_BEFORE_COUNTING);
        }
        self.search(demand, node, pins)
            .ok_or_else(|| self.explain(demand, node, pins))
    }

    /// [`Fleet::find_multi`], or the refusal counted across the fleet
    /// ([`Fleet::explain_summarized`]), worked out when the walk asks whether anything fits.
    pub(super) fn find_multi_or_refusal(
        &self,
        demand: &Demand,
        form: &GpuForm,
        walk_first: usize,
    ) -> Result<Plan, NoFit> {
        let mut refusal = None;
        let found = self.walk_multi(demand, form, walk_first, &mut || {
            // Whole devices that fit somewhere are known from the counts: no count of the
            // cells, and no refusal to make (work fetch places only what it found fits).
            if self.wholes_fit(demand, form) == Some(true) {
                return false;
            }
            refusal = self.counted_refusal(demand, form);
            refusal.is_some()
        });
        found.ok_or_else(|| refusal.unwrap_or_else(|| self.explain_summarized(demand, form)))
    }

    /// Finds a place, without saying why when there is none.
    pub(super) fn search(
        &self,
        demand: &Demand,
        node: Option<&str>,
        pins: Option<&[u32]>,
    ) -> Option<Plan> {
        match (&demand.gpu, node, pins) {
            (None, _, _) => self.find_cpu_only(demand, node),
            (Some(form), None, None) if form.device_count() == 1 => self.find_indexed(demand, form),
            (Some(form), None, None) => self.find_multi(demand, form),
            (Some(form), _, _) => self.find_scan(demand, form, node, pins),
        }
    }

    /// Whether the node has the CPU asked for free (always, where either side is unset).
    pub(super) fn cpu_ok(&self, n: usize, cpus: Option<Milli>) -> bool {
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
                .as_ref()
                .is_some_and(|a| !a.matches(&class.model, Some(class.capacity)))
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

    /// Multi-device requests anywhere: the free-memory index walked in order of what each
    /// device would have left (smallest first for binpack, largest first for spread),
    /// merged across the classes the request may use. A node is weighed once, when its
    /// first device that could take a share comes up; since every device it would use
    /// comes at or after that point, a node not yet weighed leaves at least `count` times
    /// the current device's leftover (at most, for spread), and the walk stops once that
    /// bound is worse than the best node found. Chooses what [`Fleet::find_scan`] chooses:
    /// the best leftover, ties to the node added first.
    pub(super) fn find_multi(&self, demand: &Demand, form: &GpuForm) -> Option<Plan> {
        self.find_multi_counting_after(demand, form, WALK_BEFORE_COUNTING)
    }

    /// [`Fleet::find_multi`], asking the cells whether anything fits once `walk_first`
    /// steps were walked with no node found (tests make it small).
    pub(super) fn find_multi_counting_after(
        &self,
        demand: &Demand,
        form: &GpuForm,
        walk_first: usize,
    ) -> Option<Plan> {
        let count = form.device_count() as usize;
        self.walk_multi(demand, form, walk_first, &mut || {
            self.wholes_fit(demand, form) != Some(true)
                && !self.any_node_fits(&self.class_needs(demand, form), count, demand.cpus)
        })
    }

    /// The multi-device walk; `nothing_fits` is asked once, after `walk_first` steps with
    /// no node found, and ends the walk when it answers yes.
    fn walk_multi(
        &self,
        demand: &Demand,
        form: &GpuForm,
        walk_first: usize,
        nothing_fits: &mut dyn FnMut() -> bool,
    ) -> Option<Plan> {
        let count = form.device_count() as usize;
        if count == 0 {
            return self.find_scan(demand, form, None, None);
        }
        let binpack = self.policy == Policy::Binpack;
        let mut cursors: Vec<Cursor<'_>> = self
            .classes
            .iter()
            .filter(|class| {
                demand
                    .accelerator
                    .as_ref()
                    .is_none_or(|a| a.matches(&class.model, Some(class.capacity)))
                    && demand.model.as_deref().is_none_or(|m| m == class.model)
            })
            .filter_map(|class| {
                let need = form.per_device(class.capacity).ok()?;
                let mut cursor = Cursor {
                    need,
                    range: class.free.range((need.memory, 0, 0)..),
                    binpack,
                    head: None,
                };
                cursor.advance();
                Some(cursor)
            })
            .collect();
        // Each class's share (`None`: too large for it), for the cells' quick count.
        let shares: Vec<Option<PerDevice>> = self
            .classes
            .iter()
            .map(|class| form.per_device(class.capacity).ok())
            .collect();
        let mut weighed = vec![false; self.nodes.len()];
        let mut best: Option<(Bytes, Plan)> = None;
        let mut scratch = NodeScratch::default();
        // Steps walked, a node weighed counting as 8 (about what it costs).
        let (mut walked, mut counted) = (0, false);
        loop {
            // A long walk with no fit yet may be one through a fleet where nothing fits:
            // the cells answer that at a fraction of the cost of weighing every node.
            walked += 1;
            if walked >= walk_first && !counted && best.is_none() {
                counted = true;
                if nothing_fits() {
                    return None;
                }
            }
            // The next device across classes, in walking order.
            let pick = cursors
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.head.map(|h| (i, h)))
                .reduce(|a, b| {
                    let ahead = if binpack {
                        b.1.0 < a.1.0
                    } else {
                        b.1.0 > a.1.0
                    };
                    if ahead { b } else { a }
                });
            let Some((i, (left, n, d))) = pick else { break };
            let need = cursors[i].need;
            cursors[i].advance();
            let n = n as usize;
            if let Some((b, (bn, _))) = &best {
                let bound = |left: Bytes| Bytes(left.0.saturating_mul(count as u64));
                if (binpack && bound(left) > *b) || (!binpack && bound(left) < *b) {
                    break;
                }
                if binpack && none_left_wins(&cursors, (left, n), (*b, *bn), count) {
                    break;
                }
            }
            if weighed[n] || !self.nodes[n].devices[d as usize].fits(&need) {
                continue;
            }
            weighed[n] = true;
            walked += 7;
            // A node with fewer cells that could take a share than the request needs is
            // not weighed: the plan takes only devices whose cell fits (on a full fleet
            // most nodes met have one free device).
            if self.cells_taking(n, &shares) < count {
                continue;
            }
            if let Some((left, plan)) = self.node_plan(n, demand, form, None, &mut scratch) {
                let better = best.as_ref().is_none_or(|(b, (bn, _))| {
                    let tie_first = left == *b && n < *bn;
                    tie_first || if binpack { left < *b } else { left > *b }
                });
                if better {
                    best = Some((left, plan));
                }
            }
        }
        best.map(|(_, p)| p)
    }

    /// How many of node `n`'s cells could take their class's share (`shares`, by class).
    fn cells_taking(&self, n: usize, shares: &[Option<PerDevice>]) -> usize {
        self.cells_of(n)
            .iter()
            .filter(|c| {
                c.class != OFF
                    && shares
                        .get(c.class as usize)
                        .copied()
                        .flatten()
                        .is_some_and(|need| c.fits(&need))
            })
            .count()
    }

    /// Multi-device or pinned requests: each node in turn, choosing its best devices.
    /// Also the reference the indexed search is tested against.
    pub(super) fn find_scan(
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
        let mut scratch = NodeScratch::default();
        for n in range {
            let Some((left, plan)) = self.node_plan(n, demand, form, pins, &mut scratch) else {
                continue;
            };
            let better = match (&best, self.policy) {
                (None, _) => true,
                (Some((b, _)), Policy::Binpack) => left < *b,
                (Some((b, _)), Policy::Spread) => left > *b,
            };
            if better {
                best = Some((left, plan));
            }
        }
        best.map(|(_, p)| p)
    }

    /// Node `n`'s best devices for the request, preferring linked devices, with the
    /// memory they would have left in all; `None` when it cannot take it.
    fn node_plan(
        &self,
        n: usize,
        demand: &Demand,
        form: &GpuForm,
        pins: Option<&[u32]>,
        scratch: &mut NodeScratch,
    ) -> Option<(Bytes, Plan)> {
        let count = form.device_count() as usize;
        let nd = &self.nodes[n];
        if nd.devices.len() < count || !self.cpu_ok(n, demand.cpus) {
            return None;
        }
        let fitting = &mut scratch.fitting;
        fitting.clear();
        for (d, dev) in nd.devices.iter().enumerate() {
            if !dev.schedulable()
                || pins.is_some_and(|p| !p.contains(&dev.spec.index))
                || demand
                    .accelerator
                    .as_ref()
                    .is_some_and(|a| !a.matches(&dev.spec.model, dev.spec.memory))
                || demand.model.as_deref().is_some_and(|m| m != dev.spec.model)
            {
                continue;
            }
            let capacity = dev.capacity();
            let need = match scratch.last {
                Some((m, need)) if m == capacity => need,
                _ => {
                    let need = form.per_device(capacity).ok();
                    scratch.last = Some((capacity, need));
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
            return None;
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
        Some((left, (n, chosen().map(|f| (f.0, f.1)).collect())))
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
}

/// Steps of the multi-device walk (a device looked at is one, a node weighed 8) after
/// which, with no node found yet, it asks the cells whether any node can take the
/// request at all: a fleet where nothing fits is not walked through (about 32 nodes
/// weighed, against 1 000 in the placement bench), and a request that fits is placed long
/// before (the bench's 2-device request within a few steps).
const WALK_BEFORE_COUNTING: usize = 256;

/// Binpack, with the best node `best` (its leftover, its position) found and the device
/// `met` (its leftover, its node) just taken from the walk of a `count`-device request:
/// whether no node left can be chosen. A node met at the best's leftover can at most tie,
/// and a tie goes to the node added first; each class comes in node order within one
/// leftover, so once neither the device met nor any class's next device is on a node before
/// the best one (or leaves more), the walk need not go on through every wholly free device
/// of the fleet.
fn none_left_wins(
    cursors: &[Cursor<'_>],
    met: (Bytes, usize),
    best: (Bytes, usize),
    count: usize,
) -> bool {
    let after = |left: Bytes, n: usize| {
        let bound = Bytes(left.0.saturating_mul(count as u64));
        bound > best.0 || (bound == best.0 && n >= best.1)
    };
    after(met.0, met.1)
        && cursors
            .iter()
            .all(|c| c.head.is_none_or(|(l, n, _)| after(l, n as usize)))
}

/// One class's part of the multi-device walk: its per-device need and the next device.
struct Cursor<'a> {
    need: PerDevice,
    range: SetRange<'a, (Bytes, u32, u32)>,
    binpack: bool,
    /// (memory left after the share, node, device position) of the next device.
    head: Option<(Bytes, u32, u32)>,
}

impl Cursor<'_> {
    fn advance(&mut self) {
        let next = if self.binpack {
            self.range.next()
        } else {
            self.range.next_back()
        };
        self.head = next.map(|&(free, n, d)| (free - self.need.memory, n, d));
    }
}

/// Buffers reused from node to node: a search weighs many nodes, mostly of one model.
#[derive(Default)]
struct NodeScratch {
    /// (device position, share, memory left, link group) of the devices that fit.
    fitting: Vec<(usize, PerDevice, Bytes, Option<u32>)>,
    /// The last capacity normalized and its share (`None`: too large for it).
    last: Option<(Bytes, Option<PerDevice>)>,
}
