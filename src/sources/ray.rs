//! A Ray cluster read through its dashboard, as a read-only console source.
//!
//! Six GETs per fetch, one at a time: `/api/version` (is it Ray, which version),
//! `/nodes?view=summary` (nodes, resource totals, and every worker's used resources per
//! GPU index, Ray's `resourceSlots`), `/api/cluster_status` (pending resource demands),
//! and the state API's `/api/v0/tasks`, `/api/v0/actors` and `/api/v0/placement_groups`
//! (names, jobs, pending work, placement-group bundles). The dashboard renames resources
//! in some answers (camelCase: `acceleratorType:A100`, `GPUGroup0Fa9Db...` for
//! `GPU_group_0_fa9db...`); `classify_resource` maps them back.
//!
//! In the snapshot, every actor, task and placement-group bundle holding GPU is a placed
//! claim with its shares per GPU index; tasks and actors running inside a bundle are
//! claims too, but their shares are carved out of the bundle's, so device allocation
//! counts the bundle once. Pending tasks and placement groups that want GPU are pending
//! claims with Ray's state and demand as reasons, marked infeasible when no node could
//! ever hold them. Ray owns these GPUs: the source takes no actions (`refuse_action`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::error::SourceError;
use super::http::{Auth, JsonClient, PeerKind};
use super::json::{At, ShapeError};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::ids::ClaimId;
use crate::placement::DeviceShare;
use crate::request::{ClaimRequest, GpuForm};
use crate::snapshot::{
    ClaimState, ClaimView, DeviceView, EndpointInfo, NodeView, SCHEMA_VERSION, Snapshot,
};
use crate::units::{Bytes, SLOTS_PER_DEVICE, Slots, UNITS_PER_DEVICE, Units};

/// Hex digits of a placement-group id (18 bytes in Ray 2.x).
const PG_ID_HEX_LEN: usize = 36;
/// The all-`f` id Ray gives workers that host no actor.
fn is_nil_id(id: &str) -> bool {
    id.is_empty() || id.bytes().all(|b| b == b'f' || b == b'F')
}

/// How to reach a Ray dashboard.
#[derive(Clone, Debug, PartialEq)]
pub struct RayConfig {
    /// Display name of the endpoint; the URL's host when empty.
    pub name: String,
    /// The dashboard's address, `http://head:8265` (a proxy path prefix is kept).
    pub url: String,
    /// Ray's auth token (`RAY_AUTH_MODE=token`), sent as `Authorization: Bearer`.
    pub token: Option<String>,
    /// Deadline for a whole fetch.
    pub timeout: Duration,
}

impl RayConfig {
    /// A config with no token and a 5-second timeout.
    pub fn new(url: impl Into<String>) -> RayConfig {
        RayConfig {
            name: String::new(),
            url: url.into(),
            token: None,
            timeout: Duration::from_secs(5),
        }
    }
}

/// What the console shows when an operator tries to claim, release or move on a Ray source.
pub fn refuse_action(action: &str) -> String {
    format!(
        "Ray owns these GPUs; gpuboard cannot {action} here. Change the work through Ray itself \
         (cancel the task, kill the actor, remove the placement group, or resubmit the job with \
         other resources)."
    )
}

/// The dashboard answers one fetch reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RayAnswers {
    /// `/api/version`.
    pub version: Value,
    /// `/nodes?view=summary`.
    pub nodes: Value,
    /// `/api/cluster_status`.
    pub cluster_status: Value,
    /// `/api/v0/tasks` (not finished, not failed, with detail).
    pub tasks: Value,
    /// `/api/v0/actors` (not dead, with detail).
    pub actors: Value,
    /// `/api/v0/placement_groups` (not removed, with detail).
    pub placement_groups: Value,
}

/// Which answer something was wrong with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `/api/version`.
    Version,
    /// `/nodes?view=summary`.
    Nodes,
    /// `/api/cluster_status`.
    ClusterStatus,
    /// `/api/v0/tasks`.
    Tasks,
    /// `/api/v0/actors`.
    Actors,
    /// `/api/v0/placement_groups`.
    PlacementGroups,
}

impl Answer {
    /// Path and query of the request, relative to the dashboard's base address.
    pub fn request(self) -> (&'static str, &'static [(&'static str, &'static str)]) {
        const NOT_DONE: &[(&str, &str)] = &[
            ("detail", "1"),
            ("limit", "10000"),
            ("filter_keys", "state"),
            ("filter_predicates", "!="),
            ("filter_values", "FINISHED"),
            ("filter_keys", "state"),
            ("filter_predicates", "!="),
            ("filter_values", "FAILED"),
        ];
        match self {
            Answer::Version => ("api/version", &[]),
            Answer::Nodes => ("nodes", &[("view", "summary")]),
            Answer::ClusterStatus => ("api/cluster_status", &[]),
            Answer::Tasks => ("api/v0/tasks", NOT_DONE),
            Answer::Actors => (
                "api/v0/actors",
                &[
                    ("detail", "1"),
                    ("limit", "10000"),
                    ("filter_keys", "state"),
                    ("filter_predicates", "!="),
                    ("filter_values", "DEAD"),
                ],
            ),
            Answer::PlacementGroups => (
                "api/v0/placement_groups",
                &[
                    ("detail", "1"),
                    ("limit", "10000"),
                    ("filter_keys", "state"),
                    ("filter_predicates", "!="),
                    ("filter_values", "REMOVED"),
                ],
            ),
        }
    }
}

/// What was wrong with one answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnswerError {
    /// It is not what a Ray dashboard answers.
    NotRay(String),
    /// Ray answered `"result": false` with this message.
    Failed(String),
    /// It has the wrong shape.
    Shape(String),
}

/// The answer and what was wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{answer:?}: {error:?}")]
pub struct RayParseError {
    /// Which answer.
    pub answer: Answer,
    /// What was wrong.
    pub error: AnswerError,
}

/// A resource name as Ray means it, whichever spelling the dashboard used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RayResource {
    /// `GPU`.
    Gpu,
    /// GPU reserved in a placement group: `GPU_group_<pg>` (any bundle) or
    /// `GPU_group_<i>_<pg>` (bundle `i`).
    GpuInBundle {
        /// The placement group's id, lower-case hex.
        pg: String,
        /// The bundle, when the name says.
        bundle: Option<u32>,
    },
    /// `accelerator_type:<type>`.
    AcceleratorType(String),
    /// A placement-group resource other than GPU (`bundle_group_...`, `CPU_group_...`).
    OtherInBundle,
    /// Anything else, under its canonical name where known.
    Other(String),
}

/// Splits a placement-group suffix `<i>_<pg>`, `<pg>`, or the camelCase `<i><Pg>` / `<Pg>`.
fn bundle_suffix(rest: &str) -> Option<(Option<u32>, String)> {
    let rest = rest.trim_start_matches('_');
    let (index, pg) = match rest.split_once('_') {
        Some((i, pg)) => (Some(i.parse::<u32>().ok()?), pg),
        None if rest.len() > PG_ID_HEX_LEN => {
            let (i, pg) = rest.split_at(rest.len() - PG_ID_HEX_LEN);
            (Some(i.parse::<u32>().ok()?), pg)
        }
        None => (None, rest),
    };
    (pg.len() == PG_ID_HEX_LEN && pg.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| (index, pg.to_ascii_lowercase()))
}

/// Maps a resource name from any dashboard answer back to what Ray calls it.
pub fn classify_resource(name: &str) -> RayResource {
    if name == "GPU" {
        return RayResource::Gpu;
    }
    for prefix in ["accelerator_type:", "acceleratorType:"] {
        if let Some(t) = name.strip_prefix(prefix) {
            return RayResource::AcceleratorType(t.to_string());
        }
    }
    for prefix in ["GPU_group", "GPUGroup"] {
        if let Some(rest) = name.strip_prefix(prefix)
            && let Some((bundle, pg)) = bundle_suffix(rest)
        {
            return RayResource::GpuInBundle { pg, bundle };
        }
    }
    if let Some((_, rest)) = name
        .split_once("_group")
        .or_else(|| name.split_once("Group"))
        && bundle_suffix(rest).is_some()
    {
        return RayResource::OtherInBundle;
    }
    let canonical = match name {
        "objectStoreMemory" => "object_store_memory",
        "node:InternalHead" => "node:__internal_head__",
        other => other,
    };
    RayResource::Other(canonical.to_string())
}

/// A resource amount in Ray's 1e-4 grain.
fn units(amount: f64) -> Units {
    Units(
        (amount * f64::from(UNITS_PER_DEVICE))
            .round()
            .clamp(0.0, f64::from(u32::MAX)) as u32,
    )
}

/// A stable claim id for a Ray object (FNV-1a of its kind and id).
fn claim_id(kind: &str, id: &str) -> ClaimId {
    ClaimId::of_name(&format!("{kind}/{id}"))
}

/// Ray's `{"result": true, "msg": ..., "data": ...}` envelope: the data, or why not.
fn envelope(doc: &Value) -> Result<At<'_>, AnswerError> {
    let Value::Object(map) = doc else {
        return Err(AnswerError::NotRay(format!(
            "it answered {}, not the dashboard's {{\"result\": ..., \"data\": ...}} object",
            At::root(doc).wrong("").found
        )));
    };
    match map.get("result") {
        Some(Value::Bool(true)) => {}
        Some(Value::Bool(false)) => {
            let msg = map
                .get("msg")
                .and_then(Value::as_str)
                .unwrap_or("(no message)");
            return Err(AnswerError::Failed(msg.to_string()));
        }
        _ => {
            return Err(AnswerError::NotRay(
                "its JSON has no boolean `result`, which every dashboard answer carries"
                    .to_string(),
            ));
        }
    }
    let root = At::root(doc);
    match map.get("data") {
        Some(Value::Object(_)) => Ok(root),
        _ => Err(AnswerError::Shape(
            root.field("data", |d| Err::<(), _>(d.wrong("an object")))
                .err()
                .map_or_else(String::new, |e| e.to_string()),
        )),
    }
}

fn shape(answer: Answer) -> impl Fn(ShapeError) -> RayParseError {
    move |e| RayParseError {
        answer,
        error: AnswerError::Shape(e.to_string()),
    }
}

fn in_envelope<T>(
    answer: Answer,
    doc: &Value,
    f: impl FnOnce(At<'_>) -> Result<T, ShapeError>,
) -> Result<T, RayParseError> {
    let root = envelope(doc).map_err(|error| RayParseError { answer, error })?;
    root.field("data", f).map_err(shape(answer))
}

/// The state API's list, under `data.result.result`.
fn state_list<T>(
    answer: Answer,
    doc: &Value,
    f: impl FnMut(At<'_>) -> Result<T, ShapeError>,
) -> Result<Vec<T>, RayParseError> {
    in_envelope(answer, doc, |data| {
        data.field("result", |r| r.field("result", |list| list.each(f)))
    })
}

/// Reads `/api/version`: Ray's version, or why this is not a Ray dashboard.
pub fn parse_version(doc: &Value) -> Result<String, RayParseError> {
    let not_ray = |why: &str| RayParseError {
        answer: Answer::Version,
        error: AnswerError::NotRay(why.to_string()),
    };
    let Value::Object(map) = doc else {
        return Err(not_ray("`/api/version` did not answer a JSON object"));
    };
    match map.get("ray_version") {
        Some(Value::String(v)) if !v.is_empty() => Ok(v.clone()),
        _ => Err(not_ray("`/api/version` has no `ray_version`")),
    }
}

/// GPU held by one worker process, per slot (GPU index).
#[derive(Clone, Debug, Default)]
struct WorkerGpus {
    worker_id: String,
    actor_id: Option<String>,
    job_id: String,
    pid: Option<u32>,
    direct: Vec<(u32, Units)>,
    bundle: Option<BundleUse>,
}

/// GPU a worker holds inside a placement group.
#[derive(Clone, Debug)]
struct BundleUse {
    pg: String,
    /// The bundle, when the resource name says.
    index: Option<u32>,
    slots: Vec<(u32, Units)>,
}

#[derive(Clone, Debug)]
struct RayNode {
    id: String,
    hostname: String,
    alive: bool,
    totals: BTreeMap<String, f64>,
    gpus: u32,
    accelerator: Option<String>,
    workers: Vec<WorkerGpus>,
}

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

fn parse_nodes(doc: &Value) -> Result<Vec<RayNode>, RayParseError> {
    in_envelope(Answer::Nodes, doc, |data| {
        data.field("summary", |summary| {
            summary.each(|n| {
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
                    let workers = r
                        .opt_field("coreWorkersStats", |ws| ws.each(parse_worker))?
                        .unwrap_or_default()
                        .into_iter()
                        .flatten()
                        .collect();
                    Ok(RayNode {
                        id: r.field("nodeId", |v| v.str())?,
                        hostname,
                        alive: r.opt_field("state", |s| s.str())?.as_deref() != Some("DEAD"),
                        gpus: gpu_total.max(0.0).floor() as u32,
                        totals: canonical,
                        accelerator,
                        workers,
                    })
                })
            })
        })
    })
}

#[derive(Clone, Debug)]
struct RayTask {
    id: String,
    name: String,
    state: String,
    kind: String,
    job_id: String,
    worker_id: Option<String>,
    required: Vec<(RayResource, f64)>,
    created_ms: Option<u64>,
}

fn required(at: At<'_>) -> Result<Vec<(RayResource, f64)>, ShapeError> {
    Ok(at
        .opt_field("required_resources", |r| {
            r.entries(|k, v| Ok((classify_resource(k), v.f64()?)))
        })?
        .unwrap_or_default())
}

fn millis(at: At<'_>) -> Result<u64, ShapeError> {
    Ok(at.f64()?.max(0.0) as u64)
}

fn parse_tasks(doc: &Value) -> Result<Vec<RayTask>, RayParseError> {
    state_list(Answer::Tasks, doc, |t| {
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

#[derive(Clone, Debug)]
struct RayActor {
    id: String,
    name: String,
    class: String,
    job_id: String,
}

fn parse_actors(doc: &Value) -> Result<Vec<RayActor>, RayParseError> {
    state_list(Answer::Actors, doc, |a| {
        Ok(RayActor {
            id: a.field("actor_id", |v| v.str())?,
            name: a.opt_field("name", |v| v.str())?.unwrap_or_default(),
            class: a.opt_field("class_name", |v| v.str())?.unwrap_or_default(),
            job_id: a.opt_field("job_id", |v| v.str())?.unwrap_or_default(),
        })
    })
}

#[derive(Clone, Debug)]
struct RayBundle {
    index: u32,
    gpu: f64,
    node_id: Option<String>,
}

#[derive(Clone, Debug)]
struct RayPlacementGroup {
    id: String,
    name: String,
    state: String,
    job_id: String,
    created_ms: Option<u64>,
    bundles: Vec<RayBundle>,
}

fn parse_placement_groups(doc: &Value) -> Result<Vec<RayPlacementGroup>, RayParseError> {
    state_list(Answer::PlacementGroups, doc, |p| {
        let bundles = p
            .opt_field("bundles", |bs| {
                bs.each(|b| {
                    let gpu = b
                        .opt_field("unit_resources", |r| {
                            r.entries(|k, v| Ok((classify_resource(k), v.f64()?)))
                        })?
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|(r, _)| *r == RayResource::Gpu)
                        .map(|(_, v)| v)
                        .sum();
                    Ok(RayBundle {
                        index: b.field("bundle_id", |id| id.field("bundle_index", |i| i.u32()))?,
                        gpu,
                        node_id: b.opt_field("node_id", |n| n.str())?,
                    })
                })
            })?
            .unwrap_or_default();
        let created_ns = p.opt_field("stats", |s| {
            s.opt_field("creation_request_received_ns", |n| n.f64())
        })?;
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
        })
    })
}

/// A resource demand: canonical resources and how many requests want that shape.
#[derive(Clone, Debug, PartialEq)]
struct Demand {
    shape: BTreeMap<String, f64>,
    count: u32,
}

fn canonical_shape(entries: &[(RayResource, f64)]) -> BTreeMap<String, f64> {
    entries
        .iter()
        .filter(|(_, v)| *v > 0.0)
        .filter_map(|(r, v)| {
            let name = match r {
                RayResource::Gpu | RayResource::GpuInBundle { .. } => "GPU".to_string(),
                RayResource::AcceleratorType(t) => format!("accelerator_type:{t}"),
                RayResource::Other(n) => n.clone(),
                RayResource::OtherInBundle => return None,
            };
            Some((name, *v))
        })
        .fold(BTreeMap::new(), |mut m, (k, v)| {
            *m.entry(k).or_insert(0.0) += v;
            m
        })
}

fn show_shape(shape: &BTreeMap<String, f64>) -> String {
    let parts: Vec<String> = shape.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{{{}}}", parts.join(", "))
}

/// Reads the pending demands of `/api/cluster_status`; none while the autoscaler has not reported.
fn parse_demands(doc: &Value) -> Result<Vec<Demand>, RayParseError> {
    let demands = in_envelope(Answer::ClusterStatus, doc, |data| {
        data.opt_field("clusterStatus", |cs| {
            cs.opt_field("loadMetricsReport", |lm| {
                let mut out = Vec::new();
                for key in ["resourceDemand", "pgDemand"] {
                    let list = lm.opt_field(key, |d| {
                        d.each(|pair| {
                            let Value::Array(items) = pair.value() else {
                                return Err(pair.wrong("a [resources, count] pair"));
                            };
                            let (Some(res), Some(count)) = (items.first(), items.get(1)) else {
                                return Err(pair.wrong("a [resources, count] pair"));
                            };
                            let res =
                                At::root(res).entries(|k, v| Ok((classify_resource(k), v.f64()?)));
                            let res = res.map_err(|_| pair.wrong("a [resources, count] pair"))?;
                            let count = At::root(count)
                                .u32()
                                .map_err(|_| pair.wrong("a [resources, count] pair"))?;
                            Ok(Demand {
                                shape: canonical_shape(&res),
                                count,
                            })
                        })
                    })?;
                    out.extend(list.unwrap_or_default());
                }
                Ok(out)
            })
        })
    })?;
    Ok(demands.flatten().unwrap_or_default())
}

/// A GPU request in Ray's terms.
fn form_of(shares: &[(u32, Units)], total: Units) -> GpuForm {
    if !shares.is_empty() && shares.iter().all(|(_, u)| *u == Units::FULL) {
        GpuForm::RayWhole {
            count: u32::try_from(shares.len()).unwrap_or(u32::MAX),
        }
    } else if total.0 >= UNITS_PER_DEVICE && total.0.is_multiple_of(UNITS_PER_DEVICE) {
        GpuForm::RayWhole {
            count: total.0 / UNITS_PER_DEVICE,
        }
    } else {
        GpuForm::RayFraction { fraction: total }
    }
}

fn slot_cost(u: Units) -> Slots {
    if u >= Units::FULL {
        Slots(SLOTS_PER_DEVICE)
    } else {
        Slots(1)
    }
}

struct ClaimSpec {
    kind: &'static str,
    ray_id: String,
    holder: String,
    job_id: String,
    node: Option<String>,
    slots: Vec<(u32, Units)>,
    gpu_total: Units,
    note: Option<String>,
    placement_group: Option<String>,
    created_ms: Option<u64>,
    pending: Option<(Vec<String>, bool)>,
}

fn claim(spec: ClaimSpec) -> ClaimView {
    let form = form_of(&spec.slots, spec.gpu_total);
    let mut labels = BTreeMap::from([
        ("ray.kind".to_string(), spec.kind.to_string()),
        ("ray.id".to_string(), spec.ray_id.clone()),
    ]);
    if let Some(pg) = &spec.placement_group {
        labels.insert("ray.placement_group".to_string(), pg.clone());
    }
    let request = ClaimRequest {
        gpu: Some(form),
        accelerator_type: None,
        cpus: None,
        node: None,
        devices: None,
        project: format!("ray-job-{}", spec.job_id),
        holder: Some(spec.holder.clone()),
        ttl: None,
        pid: None,
        expected_duration: None,
        labels,
        wait: spec.pending.is_some(),
    };
    let mut form_text = request.describe();
    if let Some(note) = &spec.note {
        form_text = format!("{form_text} ({note})");
    }
    let shares: Vec<DeviceShare> = spec
        .slots
        .iter()
        .map(|&(device, compute)| DeviceShare {
            device,
            memory: Bytes(0),
            compute,
            slots: slot_cost(compute),
        })
        .collect();
    let (state, reasons, infeasible) = match spec.pending {
        Some((reasons, infeasible)) => (ClaimState::Pending, reasons, infeasible),
        None => (ClaimState::Placed, Vec::new(), false),
    };
    ClaimView {
        id: claim_id(spec.kind, &spec.ray_id),
        state,
        project: request.project.clone(),
        holder: Some(spec.holder),
        form: form_text,
        request,
        node: spec.node,
        compute_reserved: shares.iter().fold(Units(0), |a, s| a + s.compute),
        shares,
        memory_reserved: Bytes(0),
        memory_used: None,
        over_limit: false,
        idle: false,
        created_at: Timestamp(spec.created_ms.unwrap_or(0)),
        lease_expires_at: None,
        pending_reasons: reasons,
        infeasible,
    }
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// Why Ray has not placed a request, in Ray's terms, and whether it never can be.
fn pending_reasons(
    state: &str,
    want: &BTreeMap<String, f64>,
    demands: &[Demand],
    nodes: &[(String, &RayNode)],
) -> (Vec<String>, bool) {
    let mut reasons = vec![match state {
        "PENDING_NODE_ASSIGNMENT" => {
            "Ray: waiting for a node with the resources (PENDING_NODE_ASSIGNMENT)".to_string()
        }
        "PENDING_ARGS_AVAIL" => "Ray: waiting for its arguments (PENDING_ARGS_AVAIL)".to_string(),
        "PENDING" => "Ray: placement group waiting for resources (PENDING)".to_string(),
        other => format!("Ray: {other}"),
    }];
    if let Some(d) = demands.iter().find(|d| d.shape == *want) {
        reasons.push(format!(
            "Ray demand {}: {}+ pending tasks/actors/groups",
            show_shape(&d.shape),
            d.count
        ));
    }
    let fits = |n: &RayNode| {
        want.iter()
            .all(|(k, v)| n.totals.get(k).is_some_and(|have| have + 1e-9 >= *v))
    };
    let alive: Vec<&(String, &RayNode)> = nodes.iter().filter(|(_, n)| n.alive).collect();
    let infeasible = !alive.iter().any(|(_, n)| fits(n));
    if infeasible {
        for (k, v) in want {
            let best = alive
                .iter()
                .map(|(name, n)| (n.totals.get(k).copied().unwrap_or(0.0), name))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            if best.is_none_or(|(have, _)| have < *v) {
                let largest = best.map_or_else(
                    || "there are no live nodes".to_string(),
                    |(have, name)| format!("the largest has {have} on {name}"),
                );
                reasons.push(format!("infeasible: no node has {k} {v}; {largest}"));
            }
        }
    }
    (reasons, infeasible)
}

/// Turns the dashboard's answers into a snapshot. `name` is the endpoint's display name.
pub fn snapshot(
    answers: &RayAnswers,
    name: &str,
    taken_at: Timestamp,
) -> Result<Snapshot, RayParseError> {
    let version = parse_version(&answers.version)?;
    let ray_nodes = parse_nodes(&answers.nodes)?;
    let demands = parse_demands(&answers.cluster_status)?;
    let tasks = parse_tasks(&answers.tasks)?;
    let actors = parse_actors(&answers.actors)?;
    let groups = parse_placement_groups(&answers.placement_groups)?;

    // Node names: host names, told apart by node id where two raylets share a host.
    let mut per_host: HashMap<&str, usize> = HashMap::new();
    for n in ray_nodes.iter().filter(|n| n.alive) {
        *per_host.entry(n.hostname.as_str()).or_default() += 1;
    }
    let named: Vec<(String, &RayNode)> = ray_nodes
        .iter()
        .filter(|n| n.alive)
        .map(|n| {
            let name = if per_host.get(n.hostname.as_str()).copied().unwrap_or(0) > 1
                || n.hostname.is_empty()
            {
                format!("{}/{}", n.hostname, short(&n.id))
            } else {
                n.hostname.clone()
            };
            (name, n)
        })
        .collect();
    let node_name: HashMap<&str, &str> = named
        .iter()
        .map(|(name, n)| (n.id.as_str(), name.as_str()))
        .collect();
    let actor_by_id: HashMap<&str, &RayActor> = actors.iter().map(|a| (a.id.as_str(), a)).collect();
    let running_task_by_worker: HashMap<&str, &RayTask> = tasks
        .iter()
        .filter(|t| t.state == "RUNNING" && t.kind == "NORMAL_TASK")
        .filter_map(|t| t.worker_id.as_deref().map(|w| (w, t)))
        .collect();
    let group_by_id: HashMap<&str, &RayPlacementGroup> =
        groups.iter().map(|g| (g.id.as_str(), g)).collect();

    let mut claims: Vec<ClaimView> = Vec::new();
    // (node, device) -> (compute, slots, holders) counted on the device.
    let mut usage: BTreeMap<(String, u32), (Units, Slots, Vec<ClaimId>)> = BTreeMap::new();
    // Bundles' devices as their members report them: (pg, bundle) -> devices.
    let mut bundle_devices: BTreeMap<(String, u32), BTreeSet<u32>> = BTreeMap::new();
    let mut member_holders: Vec<(String, u32, ClaimId)> = Vec::new();

    for (node, n) in &named {
        for w in &n.workers {
            let (kind, ray_id, holder, job, created) = match &w.actor_id {
                Some(actor_id) => {
                    let a = actor_by_id.get(actor_id.as_str());
                    let label = a
                        .map(|a| {
                            if a.name.is_empty() {
                                a.class.clone()
                            } else {
                                a.name.clone()
                            }
                        })
                        .unwrap_or_default();
                    let label = if label.is_empty() {
                        short(actor_id).to_string()
                    } else {
                        label
                    };
                    let job = a.map_or(w.job_id.clone(), |a| a.job_id.clone());
                    (
                        "actor",
                        actor_id.clone(),
                        format!("actor {label}"),
                        job,
                        None,
                    )
                }
                None => match running_task_by_worker.get(w.worker_id.as_str()) {
                    Some(t) => (
                        "task",
                        t.id.clone(),
                        format!(
                            "task {}",
                            if t.name.is_empty() {
                                short(&t.id)
                            } else {
                                &t.name
                            }
                        ),
                        t.job_id.clone(),
                        t.created_ms,
                    ),
                    // The state API lags the raylet: name the worker until it catches up.
                    None => (
                        "worker",
                        w.worker_id.clone(),
                        format!(
                            "worker {}",
                            w.pid.map_or_else(
                                || short(&w.worker_id).to_string(),
                                |p| format!("pid {p}")
                            )
                        ),
                        w.job_id.clone(),
                        None,
                    ),
                },
            };
            if !w.direct.is_empty() {
                let total = w.direct.iter().fold(Units(0), |a, (_, u)| a + *u);
                let c = claim(ClaimSpec {
                    kind,
                    ray_id: ray_id.clone(),
                    holder: holder.clone(),
                    job_id: job.clone(),
                    node: Some(node.clone()),
                    slots: w.direct.clone(),
                    gpu_total: total,
                    note: None,
                    placement_group: None,
                    created_ms: created,
                    pending: None,
                });
                for s in &c.shares {
                    let u = usage.entry((node.clone(), s.device)).or_default();
                    u.0 += s.compute;
                    u.1 += s.slots;
                    u.2.push(c.id);
                }
                claims.push(c);
            }
            if let Some(BundleUse {
                pg,
                index: bundle,
                slots,
            }) = &w.bundle
            {
                let group = group_by_id.get(pg.as_str());
                // A member naming no bundle is in the group's only GPU bundle, if it has one.
                let bundle = bundle.or_else(|| {
                    let mut gpu_bundles = group?.bundles.iter().filter(|b| b.gpu > 0.0);
                    match (gpu_bundles.next(), gpu_bundles.next()) {
                        (Some(b), None) => Some(b.index),
                        _ => None,
                    }
                });
                let pg_label = group
                    .map(|g| {
                        if g.name.is_empty() {
                            short(&g.id).to_string()
                        } else {
                            g.name.clone()
                        }
                    })
                    .unwrap_or_else(|| short(pg).to_string());
                let where_ = match bundle {
                    Some(b) => format!("in placement group {pg_label} bundle {b}"),
                    None => format!("in placement group {pg_label}"),
                };
                let total = slots.iter().fold(Units(0), |a, (_, u)| a + *u);
                let c = claim(ClaimSpec {
                    kind,
                    ray_id: ray_id.clone(),
                    holder: holder.clone(),
                    job_id: job.clone(),
                    node: Some(node.clone()),
                    slots: slots.clone(),
                    gpu_total: total,
                    note: Some(where_),
                    placement_group: Some(pg.clone()),
                    created_ms: created,
                    pending: None,
                });
                for (device, _) in slots {
                    member_holders.push((node.clone(), *device, c.id));
                    if let Some(b) = bundle {
                        bundle_devices
                            .entry((pg.clone(), b))
                            .or_default()
                            .insert(*device);
                    }
                }
                claims.push(c);
            }
        }
    }

    // Bundles hold their reservation whether or not anything runs in them.
    for g in groups.iter().filter(|g| g.state == "CREATED") {
        let label = if g.name.is_empty() {
            short(&g.id).to_string()
        } else {
            g.name.clone()
        };
        for b in g.bundles.iter().filter(|b| b.gpu > 0.0) {
            let Some(node) = b.node_id.as_deref().and_then(|id| node_name.get(id)) else {
                continue;
            };
            let devices = bundle_devices.get(&(g.id.clone(), b.index));
            let reserve = if b.gpu < 1.0 {
                units(b.gpu)
            } else {
                Units::FULL
            };
            let slots: Vec<(u32, Units)> = devices
                .map(|d| d.iter().map(|&i| (i, reserve)).collect())
                .unwrap_or_default();
            let wanted = (b.gpu.ceil() as usize).max(1);
            let note = if slots.len() < wanted {
                format!(
                    "placement group {label} bundle {}; Ray names its GPU only once a task or actor runs in it",
                    b.index
                )
            } else {
                format!("placement group {label} bundle {}", b.index)
            };
            let c = claim(ClaimSpec {
                kind: "bundle",
                ray_id: format!("{}:{}", g.id, b.index),
                holder: format!("placement group {label} bundle {}", b.index),
                job_id: g.job_id.clone(),
                node: Some((*node).to_string()),
                slots,
                gpu_total: units(b.gpu),
                note: Some(note),
                placement_group: Some(g.id.clone()),
                created_ms: g.created_ms,
                pending: None,
            });
            for s in &c.shares {
                let u = usage.entry(((*node).to_string(), s.device)).or_default();
                u.0 += s.compute;
                u.1 += s.slots;
                u.2.push(c.id);
            }
            claims.push(c);
        }
    }
    // Members hold a share of their bundle's reservation: listed on the device, not counted.
    for (node, device, id) in member_holders {
        usage.entry((node, device)).or_default().2.push(id);
    }

    // Pending work that wants GPU.
    for t in tasks.iter().filter(|t| {
        t.state.starts_with("PENDING")
            && (t.kind == "NORMAL_TASK" || t.kind == "ACTOR_CREATION_TASK")
    }) {
        let want = canonical_shape(&t.required);
        let Some(&gpu) = want.get("GPU") else {
            continue;
        };
        let (reasons, infeasible) = pending_reasons(&t.state, &want, &demands, &named);
        let kind = if t.kind == "ACTOR_CREATION_TASK" {
            "actor"
        } else {
            "task"
        };
        let label = if t.name.is_empty() {
            short(&t.id).to_string()
        } else {
            t.name.clone()
        };
        claims.push(claim(ClaimSpec {
            kind,
            ray_id: t.id.clone(),
            holder: format!("{kind} {label}"),
            job_id: t.job_id.clone(),
            node: None,
            slots: Vec::new(),
            gpu_total: units(gpu),
            note: None,
            placement_group: None,
            created_ms: t.created_ms,
            pending: Some((reasons, infeasible)),
        }));
    }
    for g in groups
        .iter()
        .filter(|g| g.state == "PENDING" || g.state == "RESCHEDULING")
    {
        let label = if g.name.is_empty() {
            short(&g.id).to_string()
        } else {
            g.name.clone()
        };
        for b in g.bundles.iter().filter(|b| b.gpu > 0.0) {
            let want = BTreeMap::from([("GPU".to_string(), b.gpu)]);
            let (reasons, infeasible) = pending_reasons(&g.state, &want, &demands, &named);
            claims.push(claim(ClaimSpec {
                kind: "bundle",
                ray_id: format!("{}:{}", g.id, b.index),
                holder: format!("placement group {label} bundle {}", b.index),
                job_id: g.job_id.clone(),
                node: None,
                slots: Vec::new(),
                gpu_total: units(b.gpu),
                note: None,
                placement_group: Some(g.id.clone()),
                created_ms: g.created_ms,
                pending: Some((reasons, infeasible)),
            }));
        }
    }

    let mut nodes: Vec<NodeView> = named
        .iter()
        .map(|(name, n)| {
            let used_max = usage
                .keys()
                .filter(|(node, _)| node == name)
                .map(|(_, d)| d + 1)
                .max()
                .unwrap_or(0);
            let devices = (0..n.gpus.max(used_max))
                .map(|index| {
                    let (compute, slots, holders) = usage
                        .get(&(name.clone(), index))
                        .cloned()
                        .unwrap_or_default();
                    DeviceView {
                        index,
                        model: n.accelerator.clone().unwrap_or_else(|| "GPU".to_string()),
                        uuid: None,
                        memory_capacity: None,
                        compute_allocated: compute,
                        compute_free: Units::FULL - compute,
                        slots_allocated: slots,
                        slots_free: Slots::FULL - slots,
                        holders,
                        ..DeviceView::default()
                    }
                })
                .collect();
            NodeView {
                name: name.clone(),
                cpus_milli: n.totals.get("CPU").map(|c| (c * 1000.0).round() as u64),
                cpus_allocated_milli: 0,
                devices,
            }
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    claims.sort_by(|a, b| {
        let key = |c: &ClaimView| {
            (
                c.state == ClaimState::Pending,
                c.node.clone(),
                c.shares.first().map(|s| s.device),
                c.holder.clone(),
            )
        };
        key(a).cmp(&key(b))
    });

    Ok(Snapshot {
        schema: SCHEMA_VERSION,
        endpoint: EndpointInfo::engine(name, "ray", format!("ray {version}")),
        revision: 0,
        taken_at,
        nodes,
        claims,
        ..Snapshot::default()
    })
}

/// A Ray dashboard as a console source.
#[derive(Clone)]
pub struct RaySource {
    config: RayConfig,
    client: JsonClient,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for RaySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaySource")
            .field("url", &self.config.url)
            .field("token", &self.config.token.as_ref().map(|_| ".."))
            .finish_non_exhaustive()
    }
}

impl RaySource {
    /// A source reading the dashboard in `config`, on the wall clock.
    pub fn new(config: RayConfig) -> Result<RaySource, SourceError> {
        RaySource::with_clock(config, Arc::new(SystemClock))
    }

    /// A source on an injected clock (tests).
    pub fn with_clock(config: RayConfig, clock: Arc<dyn Clock>) -> Result<RaySource, SourceError> {
        let auth = config.token.clone().map(Auth::Bearer);
        let client = JsonClient::new(&config.url, auth, config.timeout, PeerKind::Ray)?;
        Ok(RaySource {
            config,
            client,
            clock,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RayConfig {
        &self.config
    }

    /// Reads the dashboard's raw answers, one request at a time, within the timeout.
    pub async fn fetch_answers(&self) -> Result<RayAnswers, SourceError> {
        let all = async {
            let version = self.get(Answer::Version).await?;
            // Check the version answer first: a wrong address fails on one request.
            parse_version(&version).map_err(|e| self.error(e))?;
            Ok::<_, SourceError>(RayAnswers {
                version,
                nodes: self.get(Answer::Nodes).await?,
                cluster_status: self.get(Answer::ClusterStatus).await?,
                tasks: self.get(Answer::Tasks).await?,
                actors: self.get(Answer::Actors).await?,
                placement_groups: self.get(Answer::PlacementGroups).await?,
            })
        };
        tokio::time::timeout(self.config.timeout, all)
            .await
            .map_err(|_| SourceError::Timeout {
                url: self.client.base().to_string(),
                timeout: self.config.timeout,
            })?
    }

    /// Reads the dashboard and turns its answers into a snapshot.
    pub async fn fetch(&self) -> Result<Snapshot, SourceError> {
        let answers = self.fetch_answers().await?;
        let name = if self.config.name.is_empty() {
            self.client
                .base()
                .host_str()
                .unwrap_or_default()
                .to_string()
        } else {
            self.config.name.clone()
        };
        snapshot(&answers, &name, self.clock.now()).map_err(|e| self.error(e))
    }

    async fn get(&self, answer: Answer) -> Result<Value, SourceError> {
        let (path, query) = answer.request();
        let url = self.client.url(path, query)?;
        self.client.get_json(&url).await
    }

    fn error(&self, e: RayParseError) -> SourceError {
        let (path, query) = e.answer.request();
        let url = self
            .client
            .url(path, query)
            .map_or_else(|_| self.client.base().to_string(), |u| u.to_string());
        match e.error {
            AnswerError::NotRay(why) => SourceError::NotRayDashboard { url, why },
            AnswerError::Failed(message) => SourceError::Peer {
                url,
                peer: "Ray dashboard",
                message,
            },
            AnswerError::Shape(what) => SourceError::Decode { url, what },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renamed_resources_map_back() {
        let pg = "fa9db15f39cdcca1837d4e4fcf0501000000";
        assert_eq!(classify_resource("GPU"), RayResource::Gpu);
        assert_eq!(
            classify_resource("acceleratorType:A100"),
            RayResource::AcceleratorType("A100".into())
        );
        assert_eq!(
            classify_resource("accelerator_type:H100"),
            RayResource::AcceleratorType("H100".into())
        );
        for (name, bundle) in [
            ("GPUGroup0Fa9Db15F39Cdcca1837D4E4Fcf0501000000", Some(0)),
            ("GPUGroupFa9Db15F39Cdcca1837D4E4Fcf0501000000", None),
            (
                "GPU_group_12_fa9db15f39cdcca1837d4e4fcf0501000000",
                Some(12),
            ),
            ("GPU_group_fa9db15f39cdcca1837d4e4fcf0501000000", None),
        ] {
            assert_eq!(
                classify_resource(name),
                RayResource::GpuInBundle {
                    pg: pg.into(),
                    bundle
                },
                "{name}"
            );
        }
        // A group id that starts with digits is still told apart from a bundle index.
        assert_eq!(
            classify_resource("GPUGroup3Fa9Db15F39Cdcca1837D4E4Fcf05010000"),
            RayResource::Other("GPUGroup3Fa9Db15F39Cdcca1837D4E4Fcf05010000".into())
        );
        assert_eq!(
            classify_resource("GPUGroup31Fa9Db15F39Cdcca1837D4E4Fcf05010000"),
            RayResource::GpuInBundle {
                pg: "31fa9db15f39cdcca1837d4e4fcf05010000".into(),
                bundle: None
            }
        );
        assert_eq!(
            classify_resource("bundleGroup0Fa9Db15F39Cdcca1837D4E4Fcf0501000000"),
            RayResource::OtherInBundle
        );
        assert_eq!(
            classify_resource("objectStoreMemory"),
            RayResource::Other("object_store_memory".into())
        );
        assert_eq!(
            classify_resource("my_group_thing"),
            RayResource::Other("my_group_thing".into())
        );
    }

    #[test]
    fn claim_ids_are_stable_and_distinct() {
        assert_eq!(claim_id("task", "ab"), claim_id("task", "ab"));
        assert_ne!(claim_id("task", "ab"), claim_id("actor", "ab"));
        // FNV-1a of "task/ab": a fixed value, so ids survive restarts and upgrades.
        assert_eq!(claim_id("task", "ab"), ClaimId(0x55e8_0e57_0187_6a9e));
    }

    #[test]
    fn refusal_says_ray_owns_the_gpus() {
        let m = refuse_action("release claim 7");
        assert!(m.starts_with("Ray owns these GPUs; gpuboard cannot release claim 7 here."));
    }

    #[test]
    fn forms_follow_ray_num_gpus() {
        assert_eq!(
            form_of(&[(0, Units(2500))], Units(2500)),
            GpuForm::RayFraction {
                fraction: Units(2500)
            }
        );
        assert_eq!(
            form_of(&[(0, Units::FULL), (1, Units::FULL)], Units(20_000)),
            GpuForm::RayWhole { count: 2 }
        );
        assert_eq!(form_of(&[], Units(80_000)), GpuForm::RayWhole { count: 8 });
        assert_eq!(
            form_of(&[], Units(5000)),
            GpuForm::RayFraction {
                fraction: Units(5000)
            }
        );
    }
}
