//! `/nodes?view=summary`: Ray's nodes, their resource totals and accelerator type, and the
//! GPU every worker holds per GPU index (directly or inside a placement-group bundle).

use std::collections::BTreeMap;

use serde_json::Value;

use serde::Deserialize;

use super::answers::{RayAnswerKind, RayParseError, in_envelope, shape};
use super::resources::{RayResource, classify_resource, units};
use crate::sources::json::{Num, ShapeError, Whole, typed, typed_each, typed_or_skip};
use crate::units::Units;

/// The all-`f` id Ray gives workers that host no actor.
fn is_nil_id(id: &str) -> bool {
    id.is_empty() || id.bytes().all(|b| b == b'f' || b == b'F')
}

/// GPU held by one worker process, per slot (GPU index).
#[derive(Clone, Debug, Default)]
pub(super) struct WorkerGpus {
    pub(super) worker_id: String,
    pub(super) actor_id: Option<String>,
    pub(super) job_id: String,
    pub(super) pid: Option<u32>,
    pub(super) direct: Vec<(u32, Units)>,
    pub(super) bundle: Option<BundleUse>,
}

/// GPU a worker holds inside a placement group.
#[derive(Clone, Debug)]
pub(super) struct BundleUse {
    pub(super) pg: String,
    /// The bundle, when the resource name says.
    pub(super) index: Option<u32>,
    pub(super) slots: Vec<(u32, Units)>,
}

/// A live or dead raylet: its resource totals (canonical names), GPUs and workers.
#[derive(Clone, Debug)]
pub(super) struct RayNode {
    pub(super) id: String,
    pub(super) hostname: String,
    pub(super) alive: bool,
    pub(super) totals: BTreeMap<String, f64>,
    pub(super) gpus: u32,
    pub(super) accelerator: Option<String>,
    pub(super) workers: Vec<WorkerGpus>,
    /// Where its workers' stats should be, when the dashboard agent has not reported them
    /// (a node that just started, a busy agent): which GPU each worker holds is unknown.
    pub(super) unreported: Option<String>,
}

/// `/nodes?view=summary`'s `data`: the nodes, kept raw and read one by one.
#[derive(Deserialize)]
struct Summary {
    summary: Value,
}

/// One node of the summary.
#[derive(Deserialize)]
struct NodeEntry {
    hostname: Option<String>,
    raylet: Raylet,
}

/// A node's raylet: id, state, names, resource totals, labels, and its workers.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raylet {
    node_id: String,
    state: Option<String>,
    node_manager_hostname: Option<String>,
    node_manager_address: Option<String>,
    resources_total: Option<BTreeMap<String, Num>>,
    /// Not core: read on its own, so a bad one leaves the node in (`typed_or_skip`).
    labels: Option<Value>,
    /// Kept raw: read worker by worker.
    core_workers_stats: Option<Value>,
}

/// A worker process of `coreWorkersStats`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WorkerEntry {
    worker_id: Option<String>,
    actor_id: Option<String>,
    job_id: Option<String>,
    pid: Option<Whole>,
    /// Kept raw: only the GPU resources are read (`Used`).
    used_resources: Option<BTreeMap<String, Value>>,
}

/// A used GPU resource: the amount on each GPU index.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Used {
    resource_slots: Vec<Slot>,
}

/// One GPU index and the amount held on it.
#[derive(Deserialize)]
struct Slot {
    slot: Whole,
    allocation: Num,
}

/// A used resource's slots, by GPU index, in gpuboard's grain.
fn slots(v: &Value, at: &str) -> Result<Vec<(u32, Units)>, ShapeError> {
    let used: Used = typed(v, at)?;
    let mut out: Vec<(u32, f64)> = used
        .resource_slots
        .into_iter()
        .map(|s| (s.slot.0, s.allocation.0))
        .collect();
    out.sort_by_key(|(slot, _)| *slot);
    Ok(out.into_iter().map(|(s, a)| (s, units(a))).collect())
}

/// A worker's GPU, directly and in a bundle; `None` when it holds none.
fn parse_worker(w: WorkerEntry, at: &str) -> Result<Option<WorkerGpus>, ShapeError> {
    let mut gpus = WorkerGpus {
        worker_id: w.worker_id.unwrap_or_default(),
        actor_id: w.actor_id.filter(|a| !is_nil_id(a)),
        job_id: w.job_id.unwrap_or_default(),
        pid: w.pid.map(|Whole(p)| p),
        ..WorkerGpus::default()
    };
    for (name, v) in w.used_resources.unwrap_or_default() {
        let here = format!("{at}.usedResources.{name}");
        match classify_resource(&name) {
            RayResource::Gpu => gpus.direct = slots(&v, &here)?,
            RayResource::GpuInBundle { pg, bundle } => {
                let s = slots(&v, &here)?;
                // The bundle-indexed name says more than the any-bundle one.
                let better = match &gpus.bundle {
                    None => true,
                    Some(known) => known.index.is_none() && bundle.is_some(),
                };
                if better {
                    gpus.bundle = Some(BundleUse {
                        pg,
                        index: bundle,
                        slots: s,
                    });
                }
            }
            _ => {}
        }
    }
    let holds =
        !gpus.direct.is_empty() || gpus.bundle.as_ref().is_some_and(|b| !b.slots.is_empty());
    Ok(holds.then_some(gpus))
}

/// A node from its summary entry; unreadable workers go to `skipped`.
fn parse_node(n: NodeEntry, at: &str, skipped: &mut Vec<ShapeError>) -> RayNode {
    let r = n.raylet;
    let mut gpu_total = 0.0;
    let mut accelerator = None;
    let mut canonical = BTreeMap::new();
    for (k, Num(v)) in r.resources_total.unwrap_or_default() {
        match classify_resource(&k) {
            RayResource::Gpu => {
                gpu_total = v;
                canonical.insert("GPU".to_string(), v);
            }
            RayResource::AcceleratorType(t) => {
                canonical.insert(format!("accelerator_type:{t}"), v);
                accelerator = Some(t);
            }
            RayResource::Other(name) => {
                canonical.insert(name, v);
            }
            _ => {}
        }
    }
    if accelerator.is_none() {
        accelerator = typed_or_skip::<BTreeMap<String, Value>>(
            r.labels.as_ref(),
            &format!("{at}.raylet.labels"),
            skipped,
        )
        .unwrap_or_default()
        .get("ray.io/accelerator-type")
        .and_then(Value::as_str)
        .map(str::to_string);
    }
    let hostname = match r.node_manager_hostname {
        Some(h) if !h.is_empty() => h,
        _ => n.hostname.or(r.node_manager_address).unwrap_or_default(),
    };
    let workers_at = format!("{at}.raylet.coreWorkersStats");
    let unreported = r.core_workers_stats.is_none().then(|| workers_at.clone());
    let mut workers = Vec::new();
    if let Some(list) = &r.core_workers_stats {
        match typed_each::<Value>(list, &workers_at, skipped) {
            Ok(items) => {
                for (i, w) in items.iter().enumerate() {
                    let here = format!("{workers_at}[{i}]");
                    match typed(w, &here).and_then(|w| parse_worker(w, &here)) {
                        Ok(Some(g)) => workers.push(g),
                        Ok(None) => {}
                        Err(e) => skipped.push(e),
                    }
                }
            }
            Err(e) => skipped.push(e),
        }
    }
    RayNode {
        id: r.node_id,
        hostname,
        alive: r.state.as_deref() != Some("DEAD"),
        gpus: gpu_total.max(0.0).floor() as u32,
        totals: canonical,
        accelerator,
        workers,
        unreported,
    }
}

/// Reads `/nodes?view=summary`: every node with its totals and GPU-holding workers. A
/// node or worker that cannot be read is skipped, its error in `skipped`; the answer fails
/// only when its list cannot be read, or nodes are listed and none of them can be.
pub(super) fn parse_nodes(
    doc: &Value,
    skipped: &mut Vec<ShapeError>,
) -> Result<Vec<RayNode>, RayParseError> {
    let summary: Summary = in_envelope(RayAnswerKind::Nodes, doc)?;
    let raw: Vec<Value> = typed_each(&summary.summary, "data.summary", &mut Vec::new())
        .map_err(shape(RayAnswerKind::Nodes))?;
    let mut bad_nodes = Vec::new();
    let mut nodes = Vec::with_capacity(raw.len());
    for (i, v) in raw.iter().enumerate() {
        let at = format!("data.summary[{i}]");
        match typed::<NodeEntry>(v, &at) {
            Ok(n) => nodes.push(parse_node(n, &at, skipped)),
            Err(e) => bad_nodes.push(e),
        }
    }
    if nodes.is_empty()
        && let Some(first) = bad_nodes.first()
    {
        return Err(shape(RayAnswerKind::Nodes)(first.clone()));
    }
    skipped.extend(bad_nodes);
    Ok(nodes)
}
