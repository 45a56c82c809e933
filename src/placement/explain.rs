//! Why a request does not fit: every device's reason, aggregated per node with the
//! figures an operator needs, and whether waiting could ever help. On a fleet of more
//! than [`NODES_LISTED`] nodes the reasons are counted across the fleet instead, with
//! the nodes nearest to fitting shown in full (`summary`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::fleet::{Demand, Fleet};
use super::model::{Device, Health, Node};
use super::summary::{FleetReasons, NODES_LISTED, fleet_lines};
use crate::request::{GpuForm, Milli, PerDevice};
use crate::units::{Bytes, Units};

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
    /// The node has fewer devices than the request needs on one node: never, whatever
    /// their memory.
    FewerDevicesThanAsked,
}

impl Reason {
    pub(super) fn text(&self) -> &'static str {
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
            Reason::FewerDevicesThanAsked => "fewer GPUs than asked",
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
    /// Per node, aggregated: every node weighed, or where `fleet` is set, only the few
    /// nearest to fitting.
    pub nodes: Vec<NodeReasons>,
    /// On a fleet of more than [`NODES_LISTED`] nodes: the reasons counted across all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<Box<FleetReasons>>,
}

impl NoFit {
    /// One line per node: "node a: 3/4 GPUs insufficient memory (largest free 3.1 GiB, needs 20 GiB); 1/4 cordoned".
    /// Summarized (`fleet` set): a line across the fleet, then the nodes nearest to fitting.
    /// Nodes the request could use come first: one whose every GPU is of another type or
    /// not pinned says little about why it waits, so it is listed after the real blockers.
    pub fn lines(&self) -> Vec<String> {
        if let Some(f) = &self.fleet {
            return fleet_lines(f, &self.nodes);
        }
        let (mut first, then): (Vec<&NodeReasons>, Vec<&NodeReasons>) =
            self.nodes.iter().partition(|n| !n.excluded_by_ask());
        first.extend(then);
        first.into_iter().map(node_line).collect()
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

impl NodeReasons {
    /// Every device was ruled out by what the request asked (another accelerator type,
    /// not among the pinned devices), not by the state of the node.
    fn excluded_by_ask(&self) -> bool {
        !self.reasons.is_empty()
            && self
                .reasons
                .iter()
                .all(|r| matches!(r.reason, Reason::WrongAccelerator | Reason::NotPinned))
    }
}

/// One node's line: its reasons, the "GPUs" noun said once.
pub(super) fn node_line(n: &NodeReasons) -> String {
    let mut said_gpus = false;
    let parts: Vec<String> = n
        .reasons
        .iter()
        .map(|r| {
            let mut s = match r.reason {
                // Devices, not an amount: "only 1 of the 2 GPUs it needs fit".
                Reason::TooFewDevices | Reason::NotPinned | Reason::FewerDevicesThanAsked
                    if r.largest_free.is_some() =>
                {
                    let have = r.largest_free.unwrap_or(0);
                    let needs = r.needs.unwrap_or(0);
                    return match r.reason {
                        Reason::TooFewDevices => {
                            format!("only {have} of the {needs} GPUs it needs fit")
                        }
                        Reason::FewerDevicesThanAsked => {
                            format!("it has {have} GPUs, the request needs {needs} on one node")
                        }
                        _ => format!("{have} devices pinned, the form takes {needs}"),
                    };
                }
                Reason::NoCpuCapacity | Reason::InsufficientCpu | Reason::TooFewDevices => {
                    r.reason.text().to_string()
                }
                // "3/4 GPUs insufficient memory; 1/4 cordoned": the noun once.
                _ if said_gpus => format!("{}/{} {}", r.count, n.devices, r.reason.text()),
                _ => {
                    said_gpus = true;
                    format!("{}/{} GPUs {}", r.count, n.devices, r.reason.text())
                }
            };
            if let Some(figures) = figures(r) {
                s.push_str(&figures);
            }
            s
        })
        .collect();
    format!("node {}: {}", n.node, parts.join("; "))
}

/// " (largest free X, needs Y)" in the reason's own unit, when both figures are known.
pub(super) fn figures(r: &ReasonCount) -> Option<String> {
    let (free, needs) = (r.largest_free?, r.needs?);
    let (free, needs) = match r.reason {
        // Within 1% the two read alike (`largest free 79.2 GiB, needs 79.2 GiB`): say by
        // how much it falls short.
        Reason::InsufficientMemory | Reason::TooSmall
            if needs > free && (needs - free).saturating_mul(100) < needs =>
        {
            (
                Bytes(free).iec(),
                format!("{}, {} more", Bytes(needs).iec(), Bytes(needs - free).iec()),
            )
        }
        Reason::InsufficientMemory | Reason::TooSmall => (Bytes(free).iec(), Bytes(needs).iec()),
        Reason::InsufficientCompute => (
            format!("{} GPU", Units(u32::try_from(free).unwrap_or(u32::MAX))),
            format!("{} GPU", Units(u32::try_from(needs).unwrap_or(u32::MAX))),
        ),
        Reason::InsufficientCpu => (Milli(free).to_string(), Milli(needs).to_string()),
        _ => (free.to_string(), needs.to_string()),
    };
    let label = if r.reason == Reason::TooSmall {
        "has"
    } else {
        "largest free"
    };
    Some(format!(" ({label} {free}, needs {needs})"))
}

/// A reason with its figures (largest free, needs), as one device or node reports it.
pub(super) type Noted = (Reason, Option<u64>, Option<u64>);

/// Reasons counted per reason with the largest figures seen.
#[derive(Default)]
pub(super) struct Tally(BTreeMap<Reason, ReasonCount>);

impl Tally {
    pub(super) fn note(&mut self, reason: Reason, free: Option<u64>, needs: Option<u64>) {
        self.add(reason, 1, free, needs);
    }

    /// `count` devices (or nodes) with one reason.
    pub(super) fn add(
        &mut self,
        reason: Reason,
        count: usize,
        free: Option<u64>,
        needs: Option<u64>,
    ) {
        if count == 0 {
            return;
        }
        let e = self.0.entry(reason.clone()).or_insert(ReasonCount {
            reason,
            count: 0,
            largest_free: None,
            needs: None,
        });
        e.count += count;
        e.largest_free = e.largest_free.max(free);
        e.needs = e.needs.max(needs);
    }

    pub(super) fn into_reasons(self) -> Vec<ReasonCount> {
        self.0.into_values().collect()
    }

    /// The reasons, most first (ties in the reasons' order).
    pub(super) fn into_sorted(self) -> Vec<ReasonCount> {
        let mut reasons = self.into_reasons();
        reasons.sort_by_key(|r| std::cmp::Reverse(r.count));
        reasons
    }
}

/// Why a device of this model and memory can never take its share (`Err`), whatever
/// its state; else the share it would take.
pub(super) fn static_verdict(
    model: &str,
    memory: Option<Bytes>,
    demand: &Demand,
    form: &GpuForm,
) -> Result<PerDevice, Noted> {
    if demand
        .accelerator
        .as_ref()
        .is_some_and(|a| !a.matches(model, memory))
        || demand.model.as_deref().is_some_and(|m| m != model)
    {
        return Err((Reason::WrongAccelerator, None, None));
    }
    let capacity = match memory {
        // Zero is as unschedulable as unknown (see `Device::schedulable`).
        Some(m) if m.0 > 0 => m,
        _ => return Err((Reason::UnknownMemory, None, None)),
    };
    form.per_device(capacity)
        .map_err(|too| (Reason::TooSmall, Some(capacity.0), Some(too.needs.0)))
}

/// Why one device cannot take its share now (`None`: it can), and whether it could
/// when empty and healthy.
pub(super) fn device_reason(
    dev: &Device,
    demand: &Demand,
    form: &GpuForm,
    pins: Option<&[u32]>,
) -> (Option<Noted>, bool) {
    if pins.is_some_and(|p| !p.contains(&dev.spec.index)) {
        return (Some((Reason::NotPinned, None, None)), false);
    }
    let need = match static_verdict(&dev.spec.model, dev.spec.memory, demand, form) {
        Err(noted) => return (Some(noted), false),
        Ok(need) => need,
    };
    let reason = if dev.cordoned {
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
        None
    };
    (reason, true)
}

/// A CPU-only request on one node: its reason, and whether the node could ever hold it.
fn cpu_only_reasons(demand: &Demand, nd: &Node) -> (Vec<ReasonCount>, bool) {
    let mut tally = Tally::default();
    let mut feasible = false;
    match (demand.cpus, nd.cpus_free()) {
        (Some(need), Some(free)) => {
            feasible = nd.cpus.is_some_and(|c| c >= need);
            tally.note(Reason::InsufficientCpu, Some(free.0), Some(need.0));
        }
        _ => tally.note(Reason::NoCpuCapacity, None, None),
    }
    (tally.into_reasons(), feasible)
}

impl Fleet {
    /// Only taken on failure: every device's reason aggregated per node, or on a large
    /// fleet, counted across it.
    pub(super) fn explain(
        &self,
        demand: &Demand,
        node: Option<&str>,
        pins: Option<&[u32]>,
    ) -> NoFit {
        if let (Some(form), None, None) = (&demand.gpu, node, pins)
            && self.gpu_nodes() > NODES_LISTED
        {
            return self.explain_summarized(demand, form);
        }
        let walked = self.explain_walk(demand, node, pins);
        if walked.nodes.len() > NODES_LISTED {
            return walked.summarized(demand);
        }
        walked
    }

    /// The nodes with devices.
    pub(super) fn gpu_nodes(&self) -> usize {
        self.gpu_nodes
    }

    /// Every device's reason, aggregated per node.
    pub(super) fn explain_walk(
        &self,
        demand: &Demand,
        node: Option<&str>,
        pins: Option<&[u32]>,
    ) -> NoFit {
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
            let (reasons, feasible) = match &demand.gpu {
                None => cpu_only_reasons(demand, nd),
                Some(form) => self.gpu_reasons(n, demand, form, pins),
            };
            feasible_somewhere |= feasible;
            nodes.push(NodeReasons {
                node: nd.name.clone(),
                devices: nd.devices.len(),
                reasons,
            });
        }
        NoFit {
            infeasible: !feasible_somewhere,
            nodes,
            fleet: None,
        }
    }

    /// A GPU request on node `n`: its reasons, most devices first, and whether the node
    /// could ever hold it.
    pub(super) fn gpu_reasons(
        &self,
        n: usize,
        demand: &Demand,
        form: &GpuForm,
        pins: Option<&[u32]>,
    ) -> (Vec<ReasonCount>, bool) {
        let nd = &self.nodes[n];
        let mut tally = Tally::default();
        let count = form.device_count() as usize;
        // Too few devices at all: that is the reason, not their memory or slots.
        if nd.devices.len() < count {
            tally.note(
                Reason::FewerDevicesThanAsked,
                Some(nd.devices.len() as u64),
                Some(count as u64),
            );
            return (tally.into_reasons(), false);
        }
        let mut fit_now = 0;
        let mut fit_empty = 0;
        for dev in &nd.devices {
            let (reason, fits_empty) = device_reason(dev, demand, form, pins);
            if fits_empty {
                fit_empty += 1;
                if reason.is_none() {
                    fit_now += 1;
                }
            }
            if let Some((r, free, needs)) = reason {
                tally.note(r, free, needs);
            }
        }
        let pins_ok = pins.is_none_or(|p| p.len() == count);
        let feasible = fit_empty >= count
            && pins_ok
            && nd
                .cpus
                .is_none_or(|c| demand.cpus.is_none_or(|need| need <= c));
        if fit_now > 0 && fit_now < count {
            tally.note(
                Reason::TooFewDevices,
                Some(fit_now as u64),
                Some(count as u64),
            );
        } else if fit_now >= count && !self.cpu_ok(n, demand.cpus) {
            let free = nd.cpus_free().map(|f| f.0);
            tally.note(Reason::InsufficientCpu, free, demand.cpus.map(|c| c.0));
        }
        if !pins_ok {
            tally.note(
                Reason::NotPinned,
                Some(pins.map_or(0, <[u32]>::len) as u64),
                Some(count as u64),
            );
        }
        (tally.into_sorted(), feasible)
    }
}
