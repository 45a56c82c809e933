//! The work Ray knows about: tasks, actors and placement groups from the state API, and
//! the pending resource demands of `/api/cluster_status`, each read through serde types
//! item by item (an item that cannot be read is skipped with its path).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::answers::{RayAnswerKind, RayParseError, in_envelope, shape, state_list};
use super::resources::{RayResource, canonical_shape, classify_resource};
use crate::sources::json::{Num, ShapeError, Whole, typed, typed_each};

/// Resources as Ray writes them, classified.
fn classified(r: Option<BTreeMap<String, Num>>) -> Vec<(RayResource, f64)> {
    r.unwrap_or_default()
        .into_iter()
        .map(|(k, Num(v))| (classify_resource(&k), v))
        .collect()
}

/// A task of `/api/v0/tasks`, as Ray writes it.
#[derive(Deserialize)]
struct TaskEntry {
    task_id: String,
    name: Option<String>,
    state: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    job_id: Option<String>,
    worker_id: Option<String>,
    required_resources: Option<BTreeMap<String, Num>>,
    creation_time_ms: Option<Num>,
}

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

/// Reads `/api/v0/tasks`.
pub(super) fn parse_tasks(
    doc: &Value,
    skipped: &mut Vec<ShapeError>,
) -> Result<Vec<RayTask>, RayParseError> {
    let entries: Vec<TaskEntry> = state_list(RayAnswerKind::Tasks, doc, skipped)?;
    Ok(entries
        .into_iter()
        .map(|t| RayTask {
            id: t.task_id,
            name: t.name.unwrap_or_default(),
            state: t.state.unwrap_or_default(),
            kind: t.kind.unwrap_or_default(),
            job_id: t.job_id.unwrap_or_default(),
            worker_id: t.worker_id,
            required: classified(t.required_resources),
            created_ms: t.creation_time_ms.map(|Num(ms)| ms.max(0.0) as u64),
        })
        .collect())
}

/// An actor of `/api/v0/actors`, as Ray writes it.
#[derive(Deserialize)]
struct ActorEntry {
    actor_id: String,
    name: Option<String>,
    class_name: Option<String>,
    job_id: Option<String>,
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
    let entries: Vec<ActorEntry> = state_list(RayAnswerKind::Actors, doc, skipped)?;
    Ok(entries
        .into_iter()
        .map(|a| RayActor {
            id: a.actor_id,
            name: a.name.unwrap_or_default(),
            class: a.class_name.unwrap_or_default(),
            job_id: a.job_id.unwrap_or_default(),
        })
        .collect())
}

/// A placement group of `/api/v0/placement_groups`, as Ray writes it.
#[derive(Deserialize)]
struct GroupEntry {
    placement_group_id: String,
    name: Option<String>,
    state: Option<String>,
    creator_job_id: Option<String>,
    bundles: Option<Vec<BundleEntry>>,
    stats: Option<GroupStats>,
}

/// A bundle of a placement group.
#[derive(Deserialize)]
struct BundleEntry {
    bundle_id: BundleId,
    unit_resources: Option<BTreeMap<String, Num>>,
    node_id: Option<String>,
}

/// A bundle's place in its group.
#[derive(Deserialize)]
struct BundleId {
    bundle_index: Whole,
}

/// A group's scheduling stats.
#[derive(Deserialize)]
struct GroupStats {
    creation_request_received_ns: Option<Num>,
    scheduling_state: Option<String>,
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
    let entries: Vec<GroupEntry> = state_list(RayAnswerKind::PlacementGroups, doc, skipped)?;
    Ok(entries
        .into_iter()
        .map(|p| {
            let bundles = p
                .bundles
                .unwrap_or_default()
                .into_iter()
                .map(|b| {
                    let resources = classified(b.unit_resources);
                    let gpu = resources
                        .iter()
                        .filter(|(r, _)| *r == RayResource::Gpu)
                        .map(|(_, v)| v)
                        .sum();
                    let mut shape = canonical_shape(&resources);
                    shape.retain(|_, v| *v > 0.0);
                    RayBundle {
                        index: b.bundle_id.bundle_index.0,
                        gpu,
                        shape,
                        node_id: b.node_id,
                    }
                })
                .collect();
            let (created_ns, scheduling) = p.stats.map_or((None, None), |s| {
                (s.creation_request_received_ns, s.scheduling_state)
            });
            RayPlacementGroup {
                id: p.placement_group_id.to_ascii_lowercase(),
                name: p.name.unwrap_or_default(),
                state: p.state.unwrap_or_default(),
                job_id: p.creator_job_id.unwrap_or_default(),
                created_ms: created_ns.map(|Num(ns)| (ns / 1e6) as u64),
                bundles,
                scheduling,
            }
        })
        .collect())
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

/// `/api/cluster_status`'s `data`, down to the load report.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusData {
    cluster_status: Option<ClusterStatus>,
}

/// The autoscaler's view of the cluster.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClusterStatus {
    load_metrics_report: Option<LoadReport>,
}

/// Pending demands, kept raw and read entry by entry.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LoadReport {
    resource_demand: Option<Value>,
    pg_demand: Option<Value>,
}

/// Resources, as Ray writes them.
type Shape = BTreeMap<String, Num>;

/// `[{"bundles": [[{"GPU": 2.0}, 2]], "strategy": "PACK"}, 1]`.
#[derive(Deserialize)]
struct PgEntry {
    bundles: Vec<(Shape, Whole)>,
    strategy: Option<String>,
}

/// A shape in canonical names.
fn canonical(s: Shape) -> BTreeMap<String, f64> {
    canonical_shape(&classified(Some(s)))
}

/// The entries of a demand list, raw (none when absent).
fn entries(v: Option<Value>, at: &str) -> Result<Vec<Value>, RayParseError> {
    v.map_or_else(
        || Ok(Vec::new()),
        |v| typed_each(&v, at, &mut Vec::new()).map_err(shape(RayAnswerKind::ClusterStatus)),
    )
}

/// Reads the pending demands of `/api/cluster_status`; none while the autoscaler has not
/// reported. An entry that cannot be read is skipped, its error in `skipped`.
pub(super) fn parse_demands(
    doc: &Value,
    skipped: &mut Vec<ShapeError>,
) -> Result<Demands, RayParseError> {
    let data: StatusData = in_envelope(RayAnswerKind::ClusterStatus, doc)?;
    let Some(report) = data.cluster_status.and_then(|c| c.load_metrics_report) else {
        return Ok(Demands::default());
    };
    let at = "data.clusterStatus.loadMetricsReport";
    let (tasks, groups) = (
        entries(report.resource_demand, &format!("{at}.resourceDemand"))?,
        entries(report.pg_demand, &format!("{at}.pgDemand"))?,
    );
    let mut out = Demands::default();
    for (i, v) in tasks.iter().enumerate() {
        match typed::<(Shape, Whole)>(v, &format!("{at}.resourceDemand[{i}]")) {
            Ok((shape, Whole(count))) => out.tasks.push(Demand {
                shape: canonical(shape),
                count,
            }),
            Err(e) => skipped.push(e),
        }
    }
    for (i, v) in groups.iter().enumerate() {
        match typed::<(PgEntry, Whole)>(v, &format!("{at}.pgDemand[{i}]")) {
            Ok((g, Whole(count))) => out.groups.push(PgDemand {
                bundles: g
                    .bundles
                    .into_iter()
                    .map(|(s, Whole(n))| (canonical(s), n))
                    .collect(),
                strategy: g.strategy.unwrap_or_default(),
                count,
            }),
            Err(e) => skipped.push(e),
        }
    }
    Ok(out)
}
