//! Nodes and pods into a snapshot, every GPU-share encoding read into one model. Pure.
//!
//! A node's GPUs come from HAMi's register annotation when it has one (UUIDs, memory,
//! models), else from Koordinator's resources (`gpu-core` / 100 GPUs sharing `gpu-memory`),
//! else from `nvidia.com/gpu` (model and memory from GPU feature discovery's labels); MIG
//! instances (`nvidia.com/mig-PROFILE`) follow as devices of their own. A bound pod holds:
//! the GPUs HAMi's annotation names (by UUID), else those Koordinator's names (by minor),
//! else whole GPUs of the kind it asks for: Kubernetes does not publish which, so they are
//! shown on the first free ones, and the form says so. A pod not yet bound is a pending
//! claim with the scheduler's own `PodScheduled` reason. A GPU whose shares add up to more
//! than the GPU (memory, compute, or a whole-GPU claim beside another) is flagged.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::claims::{
    Asked, asked_of, count, millicores, pending_claim, placed_claim, pod_label, warn_problems,
    warning,
};
use super::encodings::{
    HAMI_ALLOCATED, HAMI_NODE_REGISTER, KOORD_ALLOCATED, hami_allocated, hami_register,
    koord_allocated,
};
use super::objects::{NodeFacts, PodFacts};
use crate::clock::Timestamp;
use crate::placement::{DeviceShare, Health};

use crate::snapshot::{
    ClaimState, ClaimView, DeviceView, EndpointInfo, NodeView, PodNames, ResourceView,
    SCHEMA_VERSION, Snapshot, SourceWarning,
};
use crate::units::{Bytes, SLOTS_PER_DEVICE, Slots, UNITS_PER_DEVICE, Units};

/// The answers warnings name.
pub const NODES: &str = "/api/v1/nodes";
/// The pods answer.
pub const PODS: &str = "/api/v1/pods";

pub(super) const MIG_PREFIX: &str = "nvidia.com/mig-";
const MIG_MODEL: &str = "MIG ";

/// How a claim's share came to be known, for the double-booking message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    Hami,
    Koordinator,
    Whole,
}

impl Via {
    fn name(self) -> &'static str {
        match self {
            Via::Hami => "HAMi",
            Via::Koordinator => "Koordinator",
            Via::Whole => "whole GPU",
        }
    }
}

/// Turns the cluster's nodes and pods into a snapshot. `name` is the source's display name,
/// `version` the server's (or kubelet's) version.
pub fn snapshot<'a>(
    nodes: impl IntoIterator<Item = &'a NodeFacts>,
    pods: impl IntoIterator<Item = &'a PodFacts>,
    name: &str,
    version: &str,
    taken_at: Timestamp,
) -> Snapshot {
    let mut warnings = Vec::new();
    let mut node_views: Vec<NodeView> = nodes
        .into_iter()
        .map(|n| node_view(n, &mut warnings))
        .collect();
    node_views.sort_by(|a, b| a.name.cmp(&b.name));
    // Indexes, so 10 000 pods on 1 000 nodes cost no more than a pass over them.
    let node_at: HashMap<String, usize> = node_views
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.clone(), i))
        .collect();
    let devices_of = |node: &str| node_at.get(node).map(|&i| &node_views[i].devices[..]);
    let mut held: HashSet<(String, u32)> = HashSet::new();
    let mut pods: Vec<&PodFacts> = pods.into_iter().collect();
    pods.sort_by(|a, b| {
        (&a.created, &a.namespace, &a.name).cmp(&(&b.created, &b.namespace, &b.name))
    });
    // Every pod by UID, GPU or not: a process on a GPU in a pod that asked for none is
    // the unclaimed use most worth naming.
    let names: PodNames = pods
        .iter()
        .filter(|p| !p.uid.is_empty())
        .map(|p| (p.uid.clone(), (p.namespace.clone(), p.name.clone())))
        .collect();

    let mut claims = Vec::new();
    let mut whole = Vec::new();
    for p in pods {
        warn_problems(
            &mut warnings,
            PODS,
            &pod_label(p),
            &p.problems,
            "those fields",
        );
        if matches!(p.phase.as_str(), "Succeeded" | "Failed") {
            continue;
        }
        let asked = asked_of(p, &mut warnings);
        let has_annotation = p.annotations.contains_key(HAMI_ALLOCATED)
            || p.annotations.contains_key(KOORD_ALLOCATED);
        if !asked.is_gpu() && !has_annotation {
            continue;
        }
        match &p.node_name {
            None => claims.push((pending_claim(p, &asked), Vec::new())),
            Some(node) => {
                let devices = devices_of(node);
                if devices.is_none() {
                    warnings.push(warning(
                        PODS,
                        &pod_label(p),
                        format!("bound to node `{node}`, which the nodes answer does not list"),
                        "its GPU shares",
                    ));
                }
                let known = annotated_shares(p, devices.unwrap_or_default(), &mut warnings);
                match known {
                    Some((via, shares)) => {
                        held.extend(shares.iter().map(|s| (node.clone(), s.device)));
                        let vias = vec![via; shares.len()];
                        claims.push((placed_claim(p, &asked, node, shares, ""), vias));
                    }
                    None => whole.push((p, asked)),
                }
            }
        }
    }
    // Whole GPUs whose index Kubernetes does not publish: on the first free ones, after
    // every share that is known.
    for (p, asked) in whole {
        let node = p.node_name.clone().unwrap_or_default();
        let devices = devices_of(&node).unwrap_or_default();
        let (shares, note) = first_free(devices, &asked, &held, &node);
        held.extend(shares.iter().map(|s| (node.clone(), s.device)));
        let vias = vec![Via::Whole; shares.len()];
        claims.push((placed_claim(p, &asked, &node, shares, note), vias));
    }
    tally(&mut node_views, &claims);
    let mut claims: Vec<ClaimView> = claims.into_iter().map(|(c, _)| c).collect();
    claims.sort_by(claim_order);
    let resources = resources_of(&node_views);
    let projects = crate::sources::adapter::projects_of(&claims);
    let mut endpoint = EndpointInfo::engine(name, "kubernetes", version.to_string());
    endpoint.warnings = warnings;
    Snapshot {
        schema: SCHEMA_VERSION,
        endpoint,
        revision: 0,
        taken_at,
        nodes: node_views,
        claims,
        projects,
        resources,
        pods: names,
        ..Snapshot::default()
    }
}

/// Placed claims first, by node, first device and form; pending ones after.
fn claim_order(a: &ClaimView, b: &ClaimView) -> std::cmp::Ordering {
    (
        a.state == ClaimState::Pending,
        &a.node,
        a.shares.first().map(|s| s.device),
        &a.form,
    )
        .cmp(&(
            b.state == ClaimState::Pending,
            &b.node,
            b.shares.first().map(|s| s.device),
            &b.form,
        ))
}

// ---- nodes ----

fn node_view(n: &NodeFacts, warnings: &mut Vec<SourceWarning>) -> NodeView {
    let label = format!("node {}", n.name);
    warn_problems(warnings, NODES, &label, &n.problems, "those fields");
    let health = node_health(n);
    let model = n
        .labels
        .get("nvidia.com/gpu.product")
        .cloned()
        .unwrap_or_else(|| "gpu".to_string());
    let labelled_memory = n
        .labels
        .get("nvidia.com/gpu.memory")
        .and_then(|m| count(m))
        .map(Bytes::mib);
    let device = |index: u32, model: String, memory: Option<Bytes>| DeviceView {
        index,
        model,
        memory_capacity: memory,
        memory_free: memory.unwrap_or_default(),
        compute_free: Units::FULL,
        slots_free: Slots::FULL,
        cordoned: n.unschedulable,
        health: health.clone(),
        ..DeviceView::default()
    };
    let mut devices = Vec::new();
    if let Some(text) = n.annotations.get(HAMI_NODE_REGISTER) {
        match hami_register(text) {
            Ok(gpus) => {
                for (i, g) in gpus.into_iter().enumerate() {
                    let index = g.index.unwrap_or(u32::try_from(i).unwrap_or(u32::MAX));
                    let mut d = device(index, g.model, Some(g.memory));
                    d.uuid = Some(g.uuid);
                    if !g.healthy && d.health == Health::Healthy {
                        d.health = Health::Unhealthy("HAMi reports this GPU unhealthy".into());
                    }
                    devices.push(d);
                }
            }
            Err(why) => warnings.push(warning(
                NODES,
                &format!("{label} metadata.annotations.{HAMI_NODE_REGISTER}"),
                why,
                "HAMi's list of this node's GPUs (read from its resources instead)",
            )),
        }
    }
    if devices.is_empty()
        && let Some((k, memory)) = whole_gpus(n, &label, labelled_memory, warnings)
    {
        for i in 0..k.min(1024) {
            devices.push(device(
                u32::try_from(i).unwrap_or(u32::MAX),
                model.clone(),
                memory,
            ));
        }
    }
    let keys: Vec<String> = n
        .capacity
        .keys()
        .filter(|k| k.starts_with(MIG_PREFIX))
        .cloned()
        .collect();
    for key in keys {
        let profile = key.trim_start_matches(MIG_PREFIX).to_string();
        let k = capacity_count(n, &label, &key, warnings).unwrap_or(0);
        for _ in 0..k.min(1024) {
            let index = u32::try_from(devices.len()).unwrap_or(u32::MAX);
            devices.push(device(index, format!("{MIG_MODEL}{profile}"), None));
        }
    }
    NodeView {
        name: n.name.clone(),
        cpus_milli: n
            .allocatable
            .get("cpu")
            .or(n.capacity.get("cpu"))
            .and_then(|c| millicores(c)),
        cpus_allocated_milli: 0,
        devices,
    }
}

/// Healthy, or why the node is not Ready.
fn node_health(n: &NodeFacts) -> Health {
    match &n.ready {
        Some(c) if !c.is_true => Health::Unhealthy(format!(
            "node not Ready{}{}",
            if c.reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", c.reason)
            },
            if c.message.is_empty() {
                String::new()
            } else {
                format!(": {}", c.message)
            }
        )),
        _ => Health::Healthy,
    }
}

/// A whole number in the node's `status.capacity` under `key`; a warning when it is not one.
fn capacity_count(
    n: &NodeFacts,
    label: &str,
    key: &str,
    warnings: &mut Vec<SourceWarning>,
) -> Option<u64> {
    let text = n.capacity.get(key)?;
    let c = count(text);
    if c.is_none() {
        warnings.push(warning(
            NODES,
            &format!("{label} status.capacity.{key}"),
            format!("expected a whole number, found `{text}`"),
            "that resource's GPUs",
        ));
    }
    c
}

/// How many whole GPUs the node's resources count, and each one's memory: Koordinator's
/// `gpu-core` (100 per GPU, its `gpu-memory` shared out), else `nvidia.com/gpu`.
fn whole_gpus(
    n: &NodeFacts,
    label: &str,
    labelled_memory: Option<Bytes>,
    warnings: &mut Vec<SourceWarning>,
) -> Option<(u64, Option<Bytes>)> {
    let koord = capacity_count(n, label, "koordinator.sh/gpu-core", warnings)
        .or_else(|| capacity_count(n, label, "kubernetes.io/gpu-core", warnings))
        .map(|core| core / 100);
    match koord {
        Some(k) if k > 0 => {
            let total = n
                .capacity
                .get("koordinator.sh/gpu-memory")
                .or_else(|| n.capacity.get("kubernetes.io/gpu-memory"))
                .and_then(|m| Bytes::parse_capacity(m).ok());
            Some((k, total.map(|t| Bytes(t.0 / k)).or(labelled_memory)))
        }
        _ => capacity_count(n, label, "nvidia.com/gpu", warnings).map(|c| (c, labelled_memory)),
    }
}

fn percent_units(p: u32) -> Units {
    Units(p.min(100) * (UNITS_PER_DEVICE / 100))
}

/// The shares a pod's HAMi or Koordinator annotation names; `None` when it has neither
/// (or neither could be read).
fn annotated_shares(
    p: &PodFacts,
    devices: &[DeviceView],
    warnings: &mut Vec<SourceWarning>,
) -> Option<(Via, Vec<DeviceShare>)> {
    let bad = |key: &str, why: String, warnings: &mut Vec<SourceWarning>| {
        warnings.push(warning(
            PODS,
            &format!("{} metadata.annotations.{key}", pod_label(p)),
            why,
            "the GPU shares it names",
        ));
    };
    if let Some(text) = p.annotations.get(HAMI_ALLOCATED) {
        match hami_allocated(text) {
            Ok(list) => {
                let mut shares: Vec<DeviceShare> = Vec::new();
                for s in list {
                    let Some(d) = devices.iter().find(|d| d.uuid.as_deref() == Some(&s.uuid))
                    else {
                        bad(
                            HAMI_ALLOCATED,
                            format!("GPU {} is not among its node's GPUs", s.uuid),
                            warnings,
                        );
                        continue;
                    };
                    add_share(
                        &mut shares,
                        d.index,
                        s.memory,
                        percent_units(s.cores),
                        Slots(1),
                    );
                }
                return Some((Via::Hami, shares));
            }
            Err(why) => bad(HAMI_ALLOCATED, why, warnings),
        }
    }
    if let Some(text) = p.annotations.get(KOORD_ALLOCATED) {
        match koord_allocated(text) {
            Ok(list) => {
                let mut shares: Vec<DeviceShare> = Vec::new();
                for s in list {
                    let Some(d) = devices.iter().find(|d| d.index == s.minor) else {
                        bad(
                            KOORD_ALLOCATED,
                            format!("GPU minor {} is not among its node's GPUs", s.minor),
                            warnings,
                        );
                        continue;
                    };
                    let from_ratio = s
                        .ratio
                        .zip(d.memory_capacity)
                        .map(|(r, cap)| cap.mul_div_ceil(u64::from(r.min(100)), 100));
                    let memory = s.memory.or(from_ratio).unwrap_or_default();
                    let whole = s.core.unwrap_or(0) >= 100
                        && (s.ratio.unwrap_or(0) >= 100
                            || d.memory_capacity.is_some_and(|c| memory >= c));
                    let slots = if whole {
                        Slots(SLOTS_PER_DEVICE)
                    } else {
                        Slots(1)
                    };
                    add_share(
                        &mut shares,
                        d.index,
                        memory,
                        percent_units(s.core.unwrap_or(0)),
                        slots,
                    );
                }
                return Some((Via::Koordinator, shares));
            }
            Err(why) => bad(KOORD_ALLOCATED, why, warnings),
        }
    }
    None
}

fn add_share(
    shares: &mut Vec<DeviceShare>,
    device: u32,
    memory: Bytes,
    compute: Units,
    slots: Slots,
) {
    match shares.iter_mut().find(|s| s.device == device) {
        Some(s) => {
            s.memory += memory;
            s.compute += compute;
            s.slots += slots;
        }
        None => shares.push(DeviceShare {
            device,
            memory,
            compute,
            slots,
        }),
    }
}

/// Whole GPUs (or MIG instances) for a pod whose devices are not published: the first
/// ones on its node that no claim holds yet.
fn first_free(
    devices: &[DeviceView],
    asked: &Asked,
    held: &HashSet<(String, u32)>,
    node: &str,
) -> (Vec<DeviceShare>, &'static str) {
    let held = |index: u32| held.contains(&(node.to_string(), index));
    let mut wants: Vec<(Option<String>, u64)> = vec![(None, asked.get("nvidia.com/gpu"))];
    if asked.hami.is_some() {
        // A HAMi pod without its annotation yet: `nvidia.com/gpu` counts vGPUs, not GPUs.
        wants.clear();
    }
    wants.extend(
        asked
            .mig()
            .map(|(p, n)| (Some(format!("{MIG_MODEL}{p}")), n)),
    );
    let mut shares = Vec::new();
    let mut short = false;
    for (model, n) in wants {
        let free: Vec<&DeviceView> = devices
            .iter()
            .filter(|d| {
                let kind_ok = match &model {
                    Some(m) => &d.model == m,
                    None => !d.model.starts_with(MIG_MODEL),
                };
                kind_ok && !held(d.index)
            })
            .collect();
        let mut free = free.into_iter();
        for _ in 0..n {
            match free.next() {
                Some(d) => shares.push(DeviceShare {
                    device: d.index,
                    memory: d.memory_capacity.unwrap_or_default(),
                    compute: Units::FULL,
                    slots: Slots(SLOTS_PER_DEVICE),
                }),
                None => short = true,
            }
        }
    }
    let note = if asked.hami.is_some() {
        " (HAMi has not published its GPUs yet)"
    } else if short {
        " (Kubernetes does not publish which GPUs; fewer free GPUs than asked)"
    } else if shares.is_empty() {
        ""
    } else {
        " (Kubernetes does not publish which GPUs; shown on the first free)"
    };
    (shares, note)
}

// ---- per device ----

/// Books every claim's shares on its devices, and flags a GPU booked past whole.
fn tally(nodes: &mut [NodeView], claims: &[(ClaimView, Vec<Via>)]) {
    let mut by_node: HashMap<&str, Vec<&(ClaimView, Vec<Via>)>> = HashMap::new();
    for c in claims {
        if let Some(node) = c.0.node.as_deref() {
            by_node.entry(node).or_default().push(c);
        }
    }
    for n in nodes.iter_mut() {
        let here = by_node.remove(n.name.as_str()).unwrap_or_default();
        for d in &mut n.devices {
            let mut memory = Bytes(0);
            let mut compute = Units(0);
            let mut slots = Slots(0);
            let mut who = Vec::new();
            for (c, vias) in here.iter().copied() {
                for (s, via) in c.shares.iter().zip(vias) {
                    if s.device != d.index {
                        continue;
                    }
                    memory += s.memory;
                    compute += s.compute;
                    slots += s.slots;
                    d.holders.push(c.id);
                    let pod = c.request.labels.get("k8s.pod").cloned().unwrap_or_default();
                    who.push(format!(
                        "{}/{pod} ({} {}, {}%)",
                        c.project,
                        via.name(),
                        s.memory.iec(),
                        s.compute.0 / (UNITS_PER_DEVICE / 100)
                    ));
                }
            }
            let over_memory = d.memory_capacity.is_some_and(|cap| memory > cap);
            let over = over_memory || compute > Units::FULL || slots > Slots::FULL;
            if over && who.len() > 1 {
                let mut what = Vec::new();
                if over_memory {
                    what.push(format!(
                        "memory {} of {}",
                        memory.iec(),
                        d.memory_capacity.unwrap_or_default().iec()
                    ));
                }
                if compute > Units::FULL {
                    what.push(format!("compute {}%", compute.0 / (UNITS_PER_DEVICE / 100)));
                }
                if slots > Slots::FULL && what.is_empty() {
                    what.push("a whole-GPU claim beside another".to_string());
                }
                let why = format!("double-booked: {} by {}", what.join(", "), who.join(", "));
                d.health = match &d.health {
                    Health::Unhealthy(before) => Health::Unhealthy(format!("{before}; {why}")),
                    _ => Health::Unhealthy(why),
                };
            }
            d.memory_allocated = d.memory_capacity.map_or(memory, |cap| memory.min(cap));
            d.memory_free = d.memory_capacity.unwrap_or_default() - memory;
            d.compute_allocated = compute.min(Units::FULL);
            d.compute_free = Units::FULL - compute;
            d.slots_allocated = slots.min(Slots::FULL);
            d.slots_free = Slots::FULL - slots;
        }
    }
}

fn resources_of(nodes: &[NodeView]) -> Vec<ResourceView> {
    let mut out: BTreeMap<String, ResourceView> = BTreeMap::new();
    for d in nodes.iter().flat_map(|n| &n.devices) {
        let r = out.entry(d.model.clone()).or_insert_with(|| ResourceView {
            name: d.model.clone(),
            speed: 1.0,
            ..ResourceView::default()
        });
        r.instances += 1.0;
        if d.holders.is_empty() && !d.cordoned {
            r.idle += 1.0;
        }
    }
    out.into_values().collect()
}
