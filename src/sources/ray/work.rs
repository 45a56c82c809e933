//! The work Ray knows about: tasks, actors and placement groups from the state API, and
//! the pending resource demands of `/api/cluster_status`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::answers::{RayAnswerKind, RayParseError, in_envelope, state_list};
use super::resources::{RayResource, canonical_shape, classify_resource};
use crate::sources::json::{At, ShapeError};

/// A task from the state API (actor creation tasks included).
#[derive(Clone, Debug)]
pub(super) struct RayTask {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) state: String,
    pub(super) kind: String,
    pub(super) job_id: String,
    pub(super) worker_id: Option<String>,
    pub(super) required: Vec<(RayResource, f64)>,
    pub(super) created_ms: Option<u64>,
}

/// A task's `required_resources`, classified.
fn required(at: At<'_>) -> Result<Vec<(RayResource, f64)>, ShapeError> {
    Ok(at
        .opt_field("required_resources", |r| {
            r.entries(|k, v| Ok((classify_resource(k), v.f64()?)))
        })?
        .unwrap_or_default())
}

/// A millisecond time, clamped at zero.
fn millis(at: At<'_>) -> Result<u64, ShapeError> {
    Ok(at.f64()?.max(0.0) as u64)
}

/// Reads `/api/v0/tasks`.
pub(super) fn parse_tasks(
    doc: &Value,
    skipped: &mut Vec<ShapeError>,
) -> Result<Vec<RayTask>, RayParseError> {
    state_list(RayAnswerKind::Tasks, doc, skipped, |t| {
        Ok(RayTask {
            id: t.field("task_id", |v| v.str())?,
            name: t.opt_field("name", |v| v.str())?.unwrap_or_default(),
            state: t.opt_field("state", |v| v.str())?.unwrap_or_default(),
            kind: t.opt_field("type", |v| v.str())?.unwrap_or_default(),
            job_id: t.opt_field("job_id", |v| v.str())?.unwrap_or_default(),
            worker_id: t.opt_field("worker_id", |v| v.str())?,
            required: required(t)?,
            created_ms: t.opt_field("creation_time_ms", millis)?,
        })
    })
}

/// An actor from the state API.
#[derive(Clone, Debug)]
pub(super) struct RayActor {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) class: String,
    pub(super) job_id: String,
}

/// Reads `/api/v0/actors`.
pub(super) fn parse_actors(
    doc: &Value,
    skipped: &mut Vec<ShapeError>,
) -> Result<Vec<RayActor>, RayParseError> {
    state_list(RayAnswerKind::Actors, doc, skipped, |a| {
        Ok(RayActor {
            id: a.field("actor_id", |v| v.str())?,
            name: a.opt_field("name", |v| v.str())?.unwrap_or_default(),
            class: a.opt_field("class_name", |v| v.str())?.unwrap_or_default(),
            job_id: a.opt_field("job_id", |v| v.str())?.unwrap_or_default(),
        })
    })
}

/// A placement-group bundle: its index, the GPU it reserves, its node once placed.
#[derive(Clone, Debug)]
pub(super) struct RayBundle {
    pub(super) index: u32,
    pub(super) gpu: f64,
    /// Everything it asks for, canonical names, zero amounts left out.
    pub(super) shape: BTreeMap<String, f64>,
    pub(super) node_id: Option<String>,
}

/// A placement group from the state API.
#[derive(Clone, Debug)]
pub(super) struct RayPlacementGroup {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) state: String,
    pub(super) job_id: String,
    pub(super) created_ms: Option<u64>,
    pub(super) bundles: Vec<RayBundle>,
    /// Why Ray has not placed it (`stats.scheduling_state`: `NO_RESOURCES`, `INFEASIBLE`...).
    pub(super) scheduling: Option<String>,
}

/// Reads `/api/v0/placement_groups`.
pub(super) fn parse_placement_groups(
    doc: &Value,
    skipped: &mut Vec<ShapeError>,
) -> Result<Vec<RayPlacementGroup>, RayParseError> {
    state_list(RayAnswerKind::PlacementGroups, doc, skipped, |p| {
        let bundles = p
            .opt_field("bundles", |bs| {
                bs.each(|b| {
                    let resources = b
                        .opt_field("unit_resources", |r| {
                            r.entries(|k, v| Ok((classify_resource(k), v.f64()?)))
                        })?
                        .unwrap_or_default();
                    let gpu = resources
                        .iter()
                        .filter(|(r, _)| *r == RayResource::Gpu)
                        .map(|(_, v)| v)
                        .sum();
                    let mut shape = canonical_shape(&resources);
                    shape.retain(|_, v| *v > 0.0);
                    Ok(RayBundle {
                        index: b.field("bundle_id", |id| id.field("bundle_index", |i| i.u32()))?,
                        gpu,
                        shape,
                        node_id: b.opt_field("node_id", |n| n.str())?,
                    })
                })
            })?
            .unwrap_or_default();
        let created_ns = p.opt_field("stats", |s| {
            s.opt_field("creation_request_received_ns", |n| n.f64())
        })?;
        let scheduling = p
            .opt_field("stats", |s| s.opt_field("scheduling_state", |n| n.str()))?
            .flatten();
        Ok(RayPlacementGroup {
            id: p
                .field("placement_group_id", |v| v.str())?
                .to_ascii_lowercase(),
            name: p.opt_field("name", |v| v.str())?.unwrap_or_default(),
            state: p.opt_field("state", |v| v.str())?.unwrap_or_default(),
            job_id: p
                .opt_field("creator_job_id", |v| v.str())?
                .unwrap_or_default(),
            created_ms: created_ns.flatten().map(|ns| (ns / 1e6) as u64),
            bundles,
            scheduling,
        })
    })
}

/// A resource demand: canonical resources and how many requests want that shape.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Demand {
    pub(super) shape: BTreeMap<String, f64>,
    pub(super) count: u32,
}

/// A pending placement group's demand (`pgDemand`): its bundles (shape, how many of it),
/// its strategy, and how many pending groups ask for exactly this.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct PgDemand {
    pub(super) bundles: Vec<(BTreeMap<String, f64>, u32)>,
    pub(super) strategy: String,
    pub(super) count: u32,
}

/// The pending demands of `/api/cluster_status`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Demands {
    /// Tasks and actors (`resourceDemand`).
    pub(super) tasks: Vec<Demand>,
    /// Placement groups (`pgDemand`).
    pub(super) groups: Vec<PgDemand>,
}

/// A resource map, canonical names.
fn shape_of(at: At<'_>) -> Result<BTreeMap<String, f64>, ShapeError> {
    let res = at.entries(|k, v| Ok((classify_resource(k), v.f64()?)))?;
    Ok(canonical_shape(&res))
}

/// A `[value, count]` pair: `value` read with `f`.
fn pair<T>(
    at: At<'_>,
    f: impl FnOnce(At<'_>) -> Result<T, ShapeError>,
) -> Result<(T, u32), ShapeError> {
    const PAIR: &str = "a [value, count] pair";
    Ok((at.item(0, 2, PAIR, f)?, at.item(1, 2, PAIR, |c| c.u32())?))
}

/// One `pgDemand` entry: `[{"bundles": [[{"GPU": 2.0}, 2]], "strategy": "PACK"}, 1]`.
fn pg_demand(at: At<'_>) -> Result<PgDemand, ShapeError> {
    let ((bundles, strategy), count) = pair(at, |g| {
        let bundles = g.field("bundles", |bs| bs.each(|b| pair(b, shape_of)))?;
        let strategy = g.opt_field("strategy", |s| s.str())?.unwrap_or_default();
        Ok((bundles, strategy))
    })?;
    Ok(PgDemand {
        bundles,
        strategy,
        count,
    })
}

/// Reads the pending demands of `/api/cluster_status`; none while the autoscaler has not
/// reported. An entry that cannot be read is skipped, its error in `skipped`.
pub(super) fn parse_demands(
    doc: &Value,
    skipped: &mut Vec<ShapeError>,
) -> Result<Demands, RayParseError> {
    let demands = in_envelope(RayAnswerKind::ClusterStatus, doc, |data| {
        data.opt_field("clusterStatus", |cs| {
            cs.opt_field("loadMetricsReport", |lm| {
                let tasks = lm.opt_field("resourceDemand", |d| {
                    d.each_or_skip(skipped, |p| {
                        let (shape, count) = pair(p, shape_of)?;
                        Ok(Demand { shape, count })
                    })
                })?;
                let groups = lm.opt_field("pgDemand", |d| d.each_or_skip(skipped, pg_demand))?;
                Ok(Demands {
                    tasks: tasks.unwrap_or_default(),
                    groups: groups.unwrap_or_default(),
                })
            })
        })
    })?;
    Ok(demands.flatten().unwrap_or_default())
}
