//! `/nodes?view=summary`: Ray's nodes, their resource totals and accelerator type, and the
//! GPU every worker holds per GPU index (directly or inside a placement-group bundle).

use std::collections::BTreeMap;

use serde_json::Value;

use super::answers::{RayAnswerError, RayAnswerKind, RayParseError, in_envelope};
use super::resources::{RayResource, classify_resource, units};
use crate::sources::json::{At, ShapeError};
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

/// A used resource's `resourceSlots`: amount per GPU index, by index.
fn slots(at: At<'_>) -> Result<Vec<(u32, Units)>, ShapeError> {
    let mut out = at.field("resourceSlots", |s| {
        s.each(|slot| {
            Ok((
                slot.field("slot", |n| n.u32())?,
                slot.field("allocation", |a| a.f64())?,
            ))
        })
    })?;
    out.sort_by_key(|(slot, _)| *slot);
    Ok(out.into_iter().map(|(s, a)| (s, units(a))).collect())
}

/// A worker's GPU, directly and in a bundle; `None` when it holds none.
fn parse_worker(w: At<'_>) -> Result<Option<WorkerGpus>, ShapeError> {
    let mut gpus = WorkerGpus {
        worker_id: w.opt_field("workerId", |v| v.str())?.unwrap_or_default(),
        actor_id: w
            .opt_field("actorId", |v| v.str())?
            .filter(|a| !is_nil_id(a)),
        job_id: w.opt_field("jobId", |v| v.str())?.unwrap_or_default(),
        pid: w.opt_field("pid", |v| v.u32())?,
        ..WorkerGpus::default()
    };
    w.opt_field("usedResources", |r| {
        r.entries(|name, v| {
            match classify_resource(name) {
                RayResource::Gpu => gpus.direct = slots(v)?,
                RayResource::GpuInBundle { pg, bundle } => {
                    let s = slots(v)?;
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
            Ok(())
        })
    })?;
    let holds =
        !gpus.direct.is_empty() || gpus.bundle.as_ref().is_some_and(|b| !b.slots.is_empty());
    Ok(holds.then_some(gpus))
}

/// Reads `/nodes?view=summary`: every node with its totals and GPU-holding workers. A
/// node or worker that cannot be read is skipped, its error in `skipped`; the answer fails
/// only when its list cannot be read, or nodes are listed and none of them can be.
pub(super) fn parse_nodes(
    doc: &Value,
    skipped: &mut Vec<ShapeError>,
) -> Result<Vec<RayNode>, RayParseError> {
    let mut bad_nodes = Vec::new();
    let nodes = in_envelope(RayAnswerKind::Nodes, doc, |data| {
        data.field("summary", |summary| {
            summary.each_or_skip(&mut bad_nodes, |n| {
                n.field("raylet", |r| {
                    let totals: BTreeMap<String, f64> = r
                        .opt_field("resourcesTotal", |t| {
                            t.entries(|k, v| Ok((k.to_string(), v.f64()?)))
                        })?
                        .unwrap_or_default()
                        .into_iter()
                        .collect();
                    let mut gpu_total = 0.0;
                    let mut accelerator = None;
                    let mut canonical = BTreeMap::new();
                    for (k, v) in &totals {
                        match classify_resource(k) {
                            RayResource::Gpu => gpu_total = *v,
                            RayResource::AcceleratorType(t) => {
                                canonical.insert(format!("accelerator_type:{t}"), *v);
                                accelerator = Some(t);
                                continue;
                            }
                            RayResource::Other(name) => {
                                canonical.insert(name, *v);
                                continue;
                            }
                            _ => continue,
                        }
                        canonical.insert("GPU".to_string(), *v);
                    }
                    if accelerator.is_none() {
                        accelerator = r
                            .opt_field("labels", |l| {
                                l.opt_field("ray.io/accelerator-type", |t| t.str())
                            })?
                            .flatten();
                    }
                    let hostname = match r.opt_field("nodeManagerHostname", |h| h.str())? {
                        Some(h) if !h.is_empty() => h,
                        _ => n
                            .opt_field("hostname", |h| h.str())?
                            .or(r.opt_field("nodeManagerAddress", |h| h.str())?)
                            .unwrap_or_default(),
                    };
                    let workers = r.opt_field("coreWorkersStats", |ws| {
                        ws.each_or_skip(skipped, parse_worker)
                    })?;
                    let unreported = workers
                        .is_none()
                        .then(|| format!("{}.coreWorkersStats", r.path()));
                    let workers = workers.unwrap_or_default().into_iter().flatten().collect();
                    Ok(RayNode {
                        id: r.field("nodeId", |v| v.str())?,
                        hostname,
                        alive: r.opt_field("state", |s| s.str())?.as_deref() != Some("DEAD"),
                        gpus: gpu_total.max(0.0).floor() as u32,
                        totals: canonical,
                        accelerator,
                        workers,
                        unreported,
                    })
                })
            })
        })
    })?;
    if nodes.is_empty()
        && let Some(first) = bad_nodes.first()
    {
        return Err(RayParseError {
            answer: RayAnswerKind::Nodes,
            error: RayAnswerError::Shape(first.clone()),
        });
    }
    skipped.extend(bad_nodes);
    Ok(nodes)
}
