//! Refusals on a large fleet: a line per node of a thousand nodes tells an operator
//! nothing, and walking every device took most of a refusal's time. Instead the reasons
//! are counted across the fleet (devices per device reason, nodes per node reason) from
//! the nodes' make-ups and the free-memory index, and the few nodes nearest to fitting
//! are walked in full for the words. The counts equal the sum of the full walk's
//! (`summarized`, the reference the property test compares with).

use serde::{Deserialize, Serialize};

use super::explain::{
    NoFit, NodeReasons, Noted, Reason, ReasonCount, Tally, device_reason, figures, node_line,
    static_verdict,
};
use super::fleet::{Demand, Fleet};
use crate::request::GpuForm;
use crate::units::Bytes;

/// Above this many nodes a refusal counts its reasons across the fleet instead of giving a
/// line per node.
pub const NODES_LISTED: usize = 16;
/// Nodes walked in full in a summarized refusal: those nearest to fitting.
const SAMPLED: usize = 3;

/// A refusal's reasons counted across the fleet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetReasons {
    /// The nodes weighed.
    pub nodes: usize,
    /// Their devices.
    pub devices: usize,
    /// Reasons of single devices (counted in devices), most first.
    pub device_reasons: Vec<ReasonCount>,
    /// Reasons of whole nodes (too few devices fit, CPU; counted in nodes), most first.
    pub node_reasons: Vec<ReasonCount>,
}

/// Whether a reason is said of a whole node rather than of a device.
fn node_level(r: &ReasonCount) -> bool {
    match r.reason {
        Reason::TooFewDevices
        | Reason::FewerDevicesThanAsked
        | Reason::InsufficientCpu
        | Reason::NoCpuCapacity => true,
        // Pins of the wrong length are said of the node, with figures; a device outside
        // the pins, of the device.
        Reason::NotPinned => r.largest_free.is_some(),
        _ => false,
    }
}

/// How near a node came to fitting, from its reasons: the devices that fit now, at most
/// the request's count.
fn nearness(n: &NodeReasons, count: u64) -> u64 {
    n.reasons
        .iter()
        .find_map(|r| match r.reason {
            Reason::InsufficientCpu if count > 0 => Some(count),
            Reason::TooFewDevices => r.largest_free,
            _ => None,
        })
        .unwrap_or(0)
}

/// The `SAMPLED` nodes nearest to fitting, ties to the node added first (only those are
/// put in order: a refusal may have hundreds of nodes with some devices free).
fn nearest(mut near: Vec<(u64, usize)>) -> Vec<usize> {
    let key = |&(k, n): &(u64, usize)| (std::cmp::Reverse(k), n);
    if near.len() > SAMPLED {
        near.select_nth_unstable_by_key(SAMPLED, key);
        near.truncate(SAMPLED);
    }
    near.sort_unstable_by_key(key);
    near.into_iter().map(|(_, n)| n).collect()
}

impl NoFit {
    /// The same refusal counted across the fleet, with the nodes nearest to fitting.
    pub(super) fn summarized(self, demand: &Demand) -> NoFit {
        let count = demand.gpu.map_or(0, |f| u64::from(f.device_count()));
        let (mut on_devices, mut on_nodes) = (Tally::default(), Tally::default());
        let mut devices = 0;
        for n in &self.nodes {
            devices += n.devices;
            for r in &n.reasons {
                let tally = if node_level(r) {
                    &mut on_nodes
                } else {
                    &mut on_devices
                };
                tally.add(r.reason.clone(), r.count, r.largest_free, r.needs);
            }
        }
        let near = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (nearness(n, count), i))
            .collect();
        let fleet = FleetReasons {
            nodes: self.nodes.len(),
            devices,
            device_reasons: on_devices.into_sorted(),
            node_reasons: on_nodes.into_sorted(),
        };
        let mut nodes = self.nodes;
        let keep = nearest(near);
        let nodes = keep
            .into_iter()
            .map(|i| std::mem::replace(&mut nodes[i], empty_node()))
            .collect();
        NoFit {
            infeasible: self.infeasible,
            nodes,
            fleet: Some(Box::new(fleet)),
        }
    }
}

/// Whether node `n` is among the first `touched` of `near` (in node order).
fn near_has(near: &[(u64, usize)], touched: usize, n: usize) -> bool {
    near[..touched]
        .binary_search_by_key(&n, |&(_, m)| m)
        .is_ok()
}

fn empty_node() -> NodeReasons {
    NodeReasons {
        node: String::new(),
        devices: 0,
        reasons: Vec::new(),
    }
}

impl Fleet {
    /// A GPU request on no named node and no pins, counted across the fleet without
    /// walking every device: static reasons (other model, too small, memory unknown) per
    /// node make-up, states from the devices that take no claims, free memory and
    /// compute from the index (only devices with memory enough are looked at one by one).
    /// Equals `explain_walk(..).summarized(..)`.
    pub(super) fn explain_summarized(&self, demand: &Demand, form: &GpuForm) -> NoFit {
        self.counted(demand, form).0
    }

    /// [`Fleet::explain_summarized`], or `None` when a node can take the request now.
    pub(super) fn counted_refusal(&self, demand: &Demand, form: &GpuForm) -> Option<NoFit> {
        let (refusal, fits) = self.counted(demand, form);
        (!fits).then_some(refusal)
    }

    /// The refusal counted across the fleet, and whether some node could take the
    /// request after all (its reasons then miss that node).
    // One pass over the nodes and one over the cells gather every count the refusal is
    // made of; the passes share a dozen running tallies, which cut apart would travel in a
    // struct of their own and hide that each cell is read once.
    #[allow(clippy::too_many_lines)]
    fn counted(&self, demand: &Demand, form: &GpuForm) -> (NoFit, bool) {
        let count = form.device_count() as usize;
        let (mut on_devices, mut on_nodes) = (Tally::default(), Tally::default());
        // Per make-up: devices that could hold a share when free, and the static reasons.
        let statics: Vec<(usize, Vec<(Noted, usize)>)> = self
            .profiles
            .iter()
            .map(|p| {
                let mut fit_empty = 0;
                let mut reasons = Vec::new();
                for (model, memory, k) in p {
                    match static_verdict(model, *memory, demand, form) {
                        Ok(_) => fit_empty += k,
                        Err(noted) => reasons.push((noted, *k)),
                    }
                }
                (fit_empty, reasons)
            })
            .collect();
        let mut nodes_of_profile = vec![0usize; self.profiles.len()];
        let (mut weighed, mut devices, mut feasible) = (0, 0, false);
        for (n, nd) in self.nodes.iter().enumerate() {
            if nd.devices.is_empty() {
                continue;
            }
            weighed += 1;
            devices += nd.devices.len();
            if nd.devices.len() < count {
                on_nodes.note(
                    Reason::FewerDevicesThanAsked,
                    Some(nd.devices.len() as u64),
                    Some(count as u64),
                );
                continue;
            }
            let p = self.profile_of[n] as usize;
            nodes_of_profile[p] += 1;
            feasible |= statics[p].0 >= count
                && nd
                    .cpus
                    .is_none_or(|c| demand.cpus.is_none_or(|need| need <= c));
        }
        for (p, (_, reasons)) in statics.iter().enumerate() {
            for ((reason, free, needs), k) in reasons {
                on_devices.add(reason.clone(), k * nodes_of_profile[p], *free, *needs);
            }
        }
        let short = |n: u32| self.nodes[n as usize].devices.len() < count;
        // Devices that take no claims: their state, where their make-up could hold it.
        for &(n, d) in &self.off {
            if short(n) {
                continue;
            }
            let dev = &self.nodes[n as usize].devices[d as usize];
            if let (Some((reason, free, needs)), true) = device_reason(dev, demand, form, None) {
                on_devices.note(reason, free, needs);
            }
        }
        // The rest from the cells, node by node: devices without the share's memory are
        // counted per class, the others weighed for compute and slots.
        let needs = self.class_needs(demand, form);
        let mut lacking: Vec<(usize, Bytes)> = vec![(0, Bytes(0)); needs.len()];
        let (mut no_compute, mut most_compute, mut compute_needs, mut no_slots) = (0, 0, 0, 0);
        let mut near = Vec::new();
        let mut touched = 0;
        // Nodes where some but too few devices fit, and the most that fit on one.
        let mut too_few = (0, 0);
        let mut fits_somewhere = false;
        for n in 0..self.nodes.len() {
            let cells = self.cells_of(n);
            if cells.is_empty() || cells.len() < count {
                continue;
            }
            let mut fits = 0;
            for cell in cells {
                let Some(need) = needs.get(cell.class as usize).and_then(Option::as_ref) else {
                    continue;
                };
                if cell.memory < need.memory {
                    let l = &mut lacking[cell.class as usize];
                    l.0 += 1;
                    l.1 = l.1.max(cell.memory);
                } else if need.compute > cell.compute {
                    no_compute += 1;
                    most_compute = most_compute.max(cell.compute.0);
                    compute_needs = compute_needs.max(need.compute.0);
                } else if !cell.fits(need) {
                    no_slots += 1;
                } else {
                    fits += 1;
                }
            }
            if fits == 0 {
                continue;
            }
            touched += 1;
            if fits < count {
                too_few = (too_few.0 + 1, too_few.1.max(fits));
            } else if !self.cpu_ok(n, demand.cpus) {
                let free = self.nodes[n].cpus_free().map(|f| f.0);
                on_nodes.note(Reason::InsufficientCpu, free, demand.cpus.map(|c| c.0));
            } else {
                fits_somewhere = true;
            }
            near.push((fits.min(count) as u64, n));
        }
        for (c, &(k, largest)) in lacking.iter().enumerate() {
            let needs_memory = needs[c].map(|need| need.memory.0);
            on_devices.add(Reason::InsufficientMemory, k, Some(largest.0), needs_memory);
        }
        on_devices.add(
            Reason::InsufficientCompute,
            no_compute,
            Some(u64::from(most_compute)),
            Some(u64::from(compute_needs)),
        );
        on_devices.add(Reason::NoSlots, no_slots, None, None);
        on_nodes.add(
            Reason::TooFewDevices,
            too_few.0,
            Some(too_few.1 as u64),
            Some(count as u64),
        );
        // Fewer near nodes than shown: the first nodes with devices fill the rest.
        for (n, nd) in self.nodes.iter().enumerate() {
            if near.len() >= SAMPLED + touched {
                break;
            }
            if !nd.devices.is_empty() && !near_has(&near, touched, n) {
                near.push((0, n));
            }
        }
        let nodes = nearest(near)
            .into_iter()
            .map(|n| NodeReasons {
                node: self.nodes[n].name.clone(),
                devices: self.nodes[n].devices.len(),
                reasons: self.gpu_reasons(n, demand, form, None).0,
            })
            .collect();
        let refusal = NoFit {
            infeasible: !feasible,
            nodes,
            fleet: Some(Box::new(FleetReasons {
                nodes: weighed,
                devices,
                device_reasons: on_devices.into_sorted(),
                node_reasons: on_nodes.into_sorted(),
            })),
        };
        (refusal, fits_somewhere)
    }
}

/// A summarized refusal's lines: the fleet's, then each node shown, then how many were.
pub(super) fn fleet_lines(f: &FleetReasons, shown: &[NodeReasons]) -> Vec<String> {
    let mut said_gpus = false;
    let mut parts: Vec<String> = f
        .device_reasons
        .iter()
        .map(|r| {
            let noun = if said_gpus { "" } else { " GPUs" };
            said_gpus = true;
            let figures = figures(r).unwrap_or_default();
            format!(
                "{}/{}{noun} {}{figures}",
                r.count,
                f.devices,
                r.reason.text()
            )
        })
        .collect();
    parts.extend(f.node_reasons.iter().map(|r| {
        let of = format!("{}/{} nodes", r.count, f.nodes);
        let (have, needs) = (r.largest_free.unwrap_or(0), r.needs.unwrap_or(0));
        match r.reason {
            Reason::TooFewDevices => {
                format!("{of}: at most {have} of the {needs} GPUs it needs fit")
            }
            Reason::FewerDevicesThanAsked => {
                format!("{of}: at most {have} GPUs each, the request needs {needs} on one node")
            }
            Reason::NotPinned => format!("{of}: {have} devices pinned, the form takes {needs}"),
            _ => format!("{of} {}{}", r.reason.text(), figures(r).unwrap_or_default()),
        }
    }));
    let mut lines = vec![format!(
        "{} nodes, {} GPUs: {}",
        f.nodes,
        f.devices,
        parts.join("; ")
    )];
    lines.extend(shown.iter().map(node_line));
    lines.push(format!(
        "({} of {} nodes shown, nearest to fitting first)",
        shown.len(),
        f.nodes
    ));
    lines
}
