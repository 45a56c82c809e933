//! The fit index and the searches that use it: schedulable devices grouped by model and
//! size and ordered by free memory, so a single-device claim finds its place without a
//! scan; multi-device and pinned claims scan node by node, preferring linked devices;
//! binpack or spread decides among the fits.

use std::collections::BTreeSet;

use super::Policy;
use super::explain::NoFit;
use super::fleet::{Demand, Fleet, Plan};
use crate::request::{GpuForm, Milli, PerDevice};
use crate::units::Bytes;

/// Devices of one model and memory size, indexed by free memory for fast fits.
#[derive(Debug, Default)]
pub(super) struct Class {
    model: String,
    capacity: Bytes,
    /// (free memory, node, device position) of schedulable devices.
    free: BTreeSet<(Bytes, u32, u32)>,
}

impl Fleet {
    fn class_for(&mut self, model: &str, capacity: Bytes) -> usize {
        if let Some(i) = self
            .classes
            .iter()
            .position(|c| c.model == model && c.capacity == capacity)
        {
            return i;
        }
        self.classes.push(Class {
            model: model.to_string(),
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

    /// Puts a device into its class's free-memory index, if it can take claims.
    pub(super) fn index(&mut self, n: usize, d: usize) {
        let dev = &self.nodes[n].devices[d];
        if !dev.schedulable() {
            return;
        }
        let (model, capacity) = (dev.spec.model.clone(), dev.capacity());
        let c = self.class_for(&model, capacity);
        let entry = self.entry(n, d);
        self.classes[c].free.insert(entry);
        self.class_of.insert((n as u32, d as u32), c);
    }

    /// Takes a device out of the index (before its free memory or state changes).
    pub(super) fn unindex(&mut self, n: usize, d: usize) {
        if let Some(c) = self.class_of.remove(&(n as u32, d as u32)) {
            let entry = self.entry(n, d);
            self.classes[c].free.remove(&entry);
        }
    }

    /// Finds a place, or gathers the reasons there is none.
    pub(super) fn find(
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
                    || demand
                        .accelerator
                        .as_ref()
                        .is_some_and(|a| !a.matches(&dev.spec.model, dev.spec.memory))
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
}
