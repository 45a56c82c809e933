//! Ray's answers turned into a snapshot, one section at a time: each answer is read on
//! its own (nodes and their GPUs, cluster demands, tasks, actors, placement groups), then
//! each kind of holder becomes claims: workers holding GPU directly or inside a bundle,
//! the bundles' reservations, pending tasks and actors, pending placement groups. Devices
//! are counted last, from what the holders took.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::answers::{RayAnswerKind, RayAnswers, RayParseError, parse_version};
use super::claims::{ClaimSpec, claim, short};
use super::nodes::{BundleUse, RayNode, WorkerGpus, parse_nodes};
use super::pending::{pending_group_claims, pending_task_claims};
use super::resources::units;
use super::work::{
    RayActor, RayPlacementGroup, RayTask, parse_actors, parse_demands, parse_placement_groups,
    parse_tasks,
};
use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::snapshot::{
    ClaimState, ClaimView, DeviceView, EndpointInfo, NodeView, SCHEMA_VERSION, Snapshot,
    SourceWarning,
};
use crate::sources::json::ShapeError;
use crate::sources::sections::Sections;
use crate::units::{Slots, Units};

/// Live nodes under the names operators see.
pub(super) type Named<'a> = [(String, &'a RayNode)];

/// The claims found so far and what they take from each device.
#[derive(Default)]
struct Book {
    claims: Vec<ClaimView>,
    /// (node, device) -> (compute, slots, holders) counted on the device.
    usage: BTreeMap<(String, u32), (Units, Slots, Vec<ClaimId>)>,
    /// Bundles' devices as their members report them: (pg, bundle) -> devices.
    bundle_devices: BTreeMap<(String, u32), BTreeSet<u32>>,
    /// Members of bundles: listed on their devices, not counted (the bundle is).
    member_holders: Vec<(String, u32, ClaimId)>,
}

impl Book {
    /// Adds a claim whose shares count on its node's devices.
    fn count(&mut self, node: &str, c: ClaimView) {
        for s in &c.shares {
            let u = self.usage.entry((node.to_string(), s.device)).or_default();
            u.0 += s.compute;
            u.1 += s.slots;
            u.2.push(c.id);
        }
        self.claims.push(c);
    }
}

/// Turns the dashboard's answers into a snapshot. `name` is the endpoint's display name.
pub fn snapshot(
    answers: &RayAnswers,
    name: &str,
    taken_at: Timestamp,
) -> Result<Snapshot, RayParseError> {
    // The core: is it Ray, and its nodes with their GPUs. Everything else is optional.
    let version = parse_version(&answers.version)?;
    let mut sections = Sections::new();
    let mut skipped = Vec::new();
    let ray_nodes = parse_nodes(&answers.nodes, &mut skipped)?;
    for path in ray_nodes
        .iter()
        .filter(|n| n.alive)
        .filter_map(|n| n.unreported.as_ref())
    {
        sections.warn(SourceWarning {
            section: "/nodes".to_string(),
            path: path.clone(),
            found: "nothing: the dashboard agent has not reported this node's workers yet"
                .to_string(),
            left_out: "which GPU each worker on the node holds".to_string(),
        });
    }
    sections.extend(
        skipped
            .drain(..)
            .map(|e| e.warning("/nodes", "this node or worker")),
    );
    let demands = sections.optional(
        parse_demands(&answers.cluster_status, &mut skipped)
            .map_err(|e| e.warning("Ray's pending demands")),
    );
    sections.extend(
        skipped
            .drain(..)
            .map(|e| e.warning("/api/cluster_status", "this pending demand")),
    );
    let tasks = state_section(&mut sections, RayAnswerKind::Tasks, |s| {
        parse_tasks(&answers.tasks, s)
    });
    let actors = state_section(&mut sections, RayAnswerKind::Actors, |s| {
        parse_actors(&answers.actors, s)
    });
    let groups = state_section(&mut sections, RayAnswerKind::PlacementGroups, |s| {
        parse_placement_groups(&answers.placement_groups, s)
    });

    let named = name_nodes(&ray_nodes);
    let mut book = Book::default();
    worker_claims(&named, &tasks, &actors, &groups, &mut book);
    bundle_claims(&named, &groups, &mut book);
    // Members hold a share of their bundle's reservation: listed on the device, not counted.
    for (node, device, id) in std::mem::take(&mut book.member_holders) {
        book.usage.entry((node, device)).or_default().2.push(id);
    }
    pending_task_claims(&tasks, &demands.tasks, &named, &mut book.claims);
    pending_group_claims(&groups, &demands.groups, &named, &mut book.claims);

    let nodes = node_views(&named, &book.usage);
    let mut claims = book.claims;
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

    let mut endpoint = EndpointInfo::engine(name, "ray", format!("ray {version}"));
    endpoint.warnings = sections.into_warnings();
    Ok(Snapshot {
        schema: SCHEMA_VERSION,
        endpoint,
        revision: 0,
        taken_at,
        nodes,
        claims,
        ..Snapshot::default()
    })
}

/// A state API list: items that cannot be read are warnings, as is the whole list.
fn state_section<T>(
    sections: &mut Sections,
    answer: RayAnswerKind,
    read: impl FnOnce(&mut Vec<ShapeError>) -> Result<Vec<T>, RayParseError>,
) -> Vec<T> {
    let mut skipped = Vec::new();
    let got = sections.optional(read(&mut skipped).map_err(|e| e.warning("the whole list")));
    let section = format!("/{}", answer.request().0);
    sections.extend(skipped.iter().map(|e| e.warning(&section, "this item")));
    got
}

/// Node names: host names, told apart by node id where two raylets share a host.
fn name_nodes(ray_nodes: &[RayNode]) -> Vec<(String, &RayNode)> {
    let mut per_host: HashMap<&str, usize> = HashMap::new();
    for n in ray_nodes.iter().filter(|n| n.alive) {
        *per_host.entry(n.hostname.as_str()).or_default() += 1;
    }
    ray_nodes
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
        .collect()
}

/// A name, or the short id when there is none.
pub(super) fn label(name: &str, id: &str) -> String {
    if name.is_empty() {
        short(id).to_string()
    } else {
        name.to_string()
    }
}

/// Who holds a worker's GPU, as its claim names it.
// `holder` is the claim's holder field, named as in the snapshot.
#[allow(clippy::struct_field_names)]
struct Holder {
    kind: &'static str,
    ray_id: String,
    holder: String,
    job_id: String,
    created_ms: Option<u64>,
}

/// The actor a worker hosts, else the task it runs, else the worker itself.
fn holder_of(
    w: &WorkerGpus,
    actor_by_id: &HashMap<&str, &RayActor>,
    running_task_by_worker: &HashMap<&str, &RayTask>,
) -> Holder {
    if let Some(actor_id) = &w.actor_id {
        let a = actor_by_id.get(actor_id.as_str());
        let name = a
            .map(|a| {
                if a.name.is_empty() {
                    a.class.clone()
                } else {
                    a.name.clone()
                }
            })
            .unwrap_or_default();
        return Holder {
            kind: "actor",
            ray_id: actor_id.clone(),
            holder: format!("actor {}", label(&name, actor_id)),
            job_id: a.map_or(w.job_id.clone(), |a| a.job_id.clone()),
            created_ms: None,
        };
    }
    match running_task_by_worker.get(w.worker_id.as_str()) {
        Some(t) => Holder {
            kind: "task",
            ray_id: t.id.clone(),
            holder: format!("task {}", label(&t.name, &t.id)),
            job_id: t.job_id.clone(),
            created_ms: t.created_ms,
        },
        // The state API lags the raylet: name the worker until it catches up.
        None => Holder {
            kind: "worker",
            ray_id: w.worker_id.clone(),
            holder: format!(
                "worker {}",
                w.pid
                    .map_or_else(|| short(&w.worker_id).to_string(), |p| format!("pid {p}"))
            ),
            job_id: w.job_id.clone(),
            created_ms: None,
        },
    }
}

/// Workers holding GPU: a counted claim for what they hold directly, and a member claim
/// for what they hold inside a placement-group bundle.
fn worker_claims(
    named: &Named<'_>,
    tasks: &[RayTask],
    actors: &[RayActor],
    groups: &[RayPlacementGroup],
    book: &mut Book,
) {
    let actor_by_id: HashMap<&str, &RayActor> = actors.iter().map(|a| (a.id.as_str(), a)).collect();
    let running_task_by_worker: HashMap<&str, &RayTask> = tasks
        .iter()
        .filter(|t| t.state == "RUNNING" && t.kind == "NORMAL_TASK")
        .filter_map(|t| t.worker_id.as_deref().map(|w| (w, t)))
        .collect();
    let group_by_id: HashMap<&str, &RayPlacementGroup> =
        groups.iter().map(|g| (g.id.as_str(), g)).collect();

    for (node, n) in named {
        for w in &n.workers {
            let h = holder_of(w, &actor_by_id, &running_task_by_worker);
            if !w.direct.is_empty() {
                let total = w.direct.iter().fold(Units(0), |a, (_, u)| a + *u);
                let c = claim(ClaimSpec {
                    kind: h.kind,
                    ray_id: h.ray_id.clone(),
                    holder: h.holder.clone(),
                    job_id: h.job_id.clone(),
                    node: Some(node.clone()),
                    slots: w.direct.clone(),
                    gpu_total: total,
                    note: None,
                    placement_group: None,
                    created_ms: h.created_ms,
                    pending: None,
                });
                book.count(node, c);
            }
            if let Some(used) = &w.bundle {
                let group = group_by_id.get(used.pg.as_str()).copied();
                member_claim(node, &h, used, group, book);
            }
        }
    }
}

/// A worker's GPU inside a bundle: a claim carved out of the bundle's reservation.
fn member_claim(
    node: &str,
    h: &Holder,
    used: &BundleUse,
    group: Option<&RayPlacementGroup>,
    book: &mut Book,
) {
    let BundleUse {
        pg,
        index: bundle,
        slots,
    } = used;
    // A member naming no bundle is in the group's only GPU bundle, if it has one.
    let bundle = bundle.or_else(|| {
        let mut gpu_bundles = group?.bundles.iter().filter(|b| b.gpu > 0.0);
        match (gpu_bundles.next(), gpu_bundles.next()) {
            (Some(b), None) => Some(b.index),
            _ => None,
        }
    });
    let pg_label = group.map_or_else(|| short(pg).to_string(), |g| label(&g.name, &g.id));
    let where_ = match bundle {
        Some(b) => format!("in placement group {pg_label} bundle {b}"),
        None => format!("in placement group {pg_label}"),
    };
    let total = slots.iter().fold(Units(0), |a, (_, u)| a + *u);
    let c = claim(ClaimSpec {
        kind: h.kind,
        ray_id: h.ray_id.clone(),
        holder: h.holder.clone(),
        job_id: h.job_id.clone(),
        node: Some(node.to_string()),
        slots: slots.clone(),
        gpu_total: total,
        note: Some(where_),
        placement_group: Some(pg.clone()),
        created_ms: h.created_ms,
        pending: None,
    });
    for (device, _) in slots {
        book.member_holders.push((node.to_string(), *device, c.id));
        if let Some(b) = bundle {
            book.bundle_devices
                .entry((pg.clone(), b))
                .or_default()
                .insert(*device);
        }
    }
    book.claims.push(c);
}

/// Bundles of created placement groups: they hold their reservation whether or not
/// anything runs in them, on the devices their members report.
fn bundle_claims(named: &Named<'_>, groups: &[RayPlacementGroup], book: &mut Book) {
    let node_name: HashMap<&str, &str> = named
        .iter()
        .map(|(name, n)| (n.id.as_str(), name.as_str()))
        .collect();
    for g in groups.iter().filter(|g| g.state == "CREATED") {
        let label = label(&g.name, &g.id);
        for b in g.bundles.iter().filter(|b| b.gpu > 0.0) {
            let Some(node) = b.node_id.as_deref().and_then(|id| node_name.get(id)) else {
                continue;
            };
            let devices = book.bundle_devices.get(&(g.id.clone(), b.index));
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
            book.count(node, c);
        }
    }
}

/// Each live node with its GPUs (as many as Ray counts, or as holders name), sorted by name.
fn node_views(
    named: &Named<'_>,
    usage: &BTreeMap<(String, u32), (Units, Slots, Vec<ClaimId>)>,
) -> Vec<NodeView> {
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
    nodes
}
