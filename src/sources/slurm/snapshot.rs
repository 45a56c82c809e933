//! slurmrestd's answers turned into a snapshot, one section at a time: the nodes answer
//! (nodes and their GPUs), the jobs answer (jobs as claims), then each node's devices
//! counted from the claims on it, and the accounts as projects.

use std::collections::BTreeMap;

use super::answers::{
    SlurmAnswerKind, SlurmAnswers, SlurmNode, SlurmParseError, parse_jobs, parse_nodes,
};
use super::jobs::{ShardsPerGpu, job_claims, u32_of};
use crate::clock::Timestamp;
use crate::placement::Health;
use crate::snapshot::{
    ClaimState, ClaimView, DeviceView, EndpointInfo, NodeView, ResourceView, SCHEMA_VERSION,
    Snapshot,
};
use crate::sources::sections::Sections;
use crate::units::{Slots, Units};

/// Each node's GPUs by node name: (model per index, shards per GPU).
type GpusByNode<'a> = BTreeMap<&'a str, (Vec<String>, u64)>;

/// Turns slurmrestd's answers into a snapshot. `name` is the endpoint's display name.
pub fn snapshot(
    answers: &SlurmAnswers,
    name: &str,
    taken_at: Timestamp,
) -> Result<Snapshot, SlurmParseError> {
    // The core is the nodes answer; the jobs are optional, job by job.
    let mut sections = Sections::new();
    let mut skipped = Vec::new();
    let (release, slurm_nodes) = parse_nodes(&answers.nodes, &mut skipped)?;
    let nodes_path = format!("/{}", SlurmAnswerKind::Nodes.path());
    sections.extend(
        skipped
            .drain(..)
            .map(|e| e.warning(&nodes_path, "this node")),
    );
    let jobs = sections
        .optional(parse_jobs(&answers.jobs, &mut skipped).map_err(|e| e.warning("every job")));
    let jobs_path = format!("/{}", SlurmAnswerKind::Jobs.path());
    sections.extend(skipped.drain(..).map(|e| e.warning(&jobs_path, "this job")));
    let gpus: GpusByNode<'_> = slurm_nodes
        .iter()
        .map(|n| (n.name.as_str(), gpus_of(n)))
        .collect();

    let shards_per_gpu: ShardsPerGpu<'_> = gpus.iter().map(|(n, (_, s))| (*n, *s)).collect();
    let mut claims: Vec<ClaimView> = jobs
        .iter()
        .flat_map(|j| job_claims(j, &shards_per_gpu))
        .collect();
    let (nodes, resources) = node_views(&slurm_nodes, &gpus, &claims);
    let projects = crate::sources::adapter::projects_of(&claims);
    claims.sort_by(|a, b| {
        (
            a.state == ClaimState::Pending,
            &a.node,
            a.shares.first().map(|s| s.device),
            a.id,
        )
            .cmp(&(
                b.state == ClaimState::Pending,
                &b.node,
                b.shares.first().map(|s| s.device),
                b.id,
            ))
    });
    let mut endpoint = EndpointInfo::engine(name, "slurm", format!("slurm {release}"));
    endpoint.warnings = sections.into_warnings();
    Ok(Snapshot {
        schema: SCHEMA_VERSION,
        endpoint,
        revision: 0,
        taken_at,
        nodes,
        claims,
        projects,
        resources,
        ..Snapshot::default()
    })
}

/// A node's GPUs: (model per index, shards per GPU).
fn gpus_of(node: &SlurmNode) -> (Vec<String>, u64) {
    let mut models = Vec::new();
    let mut shards = 0;
    for g in &node.gres {
        match g.name.as_str() {
            "gpu" => {
                let model = g.kind.clone().unwrap_or_else(|| "gpu".to_string());
                models.extend(std::iter::repeat_n(model, g.count.min(1024) as usize));
            }
            "shard" => shards += g.count,
            _ => {}
        }
    }
    let per_gpu = if models.is_empty() {
        0
    } else {
        shards / models.len() as u64
    };
    (models, per_gpu)
}

/// Each node with its GPUs, their state from the node's, and what the claims on it hold;
/// and each GPU model as a resource type (instances, idle ones).
fn node_views(
    slurm_nodes: &[SlurmNode],
    gpus: &GpusByNode<'_>,
    claims: &[ClaimView],
) -> (Vec<NodeView>, Vec<ResourceView>) {
    let mut nodes = Vec::new();
    let mut resources: BTreeMap<String, ResourceView> = BTreeMap::new();
    for n in slurm_nodes {
        let (models, _) = gpus.get(n.name.as_str()).cloned().unwrap_or_default();
        let drain = n.flags.iter().any(|f| f == "DRAIN");
        let not_responding = n.flags.iter().any(|f| f == "NOT_RESPONDING");
        let base = n.state.as_str();
        let shown = match (base, drain) {
            ("allocated" | "mixed" | "completing", true) => "draining".to_string(),
            ("idle", true) => "drained".to_string(),
            (s, _) => s.to_string(),
        };
        let why = if n.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", n.reason)
        };
        let health = if matches!(base, "down" | "fail" | "failing" | "unknown") || not_responding {
            let nr = if not_responding {
                ", not responding"
            } else {
                ""
            };
            Health::Unhealthy(format!("Slurm node {shown}{nr}{why}"))
        } else {
            Health::Healthy
        };
        let cordoned = drain || matches!(base, "down" | "drained" | "fail" | "future" | "maint");
        let mut devices: Vec<DeviceView> = models
            .iter()
            .enumerate()
            .map(|(i, model)| DeviceView {
                index: u32_of(i as u64),
                model: model.clone(),
                compute_free: Units::FULL,
                slots_free: Slots::FULL,
                cordoned,
                health: health.clone(),
                ..DeviceView::default()
            })
            .collect();
        for c in claims
            .iter()
            .filter(|c| c.node.as_deref() == Some(n.name.as_str()))
        {
            for s in &c.shares {
                if let Some(d) = devices.get_mut(s.device as usize) {
                    d.compute_allocated = (d.compute_allocated + s.compute).min(Units::FULL);
                    d.compute_free = Units::FULL - d.compute_allocated;
                    d.slots_allocated = (d.slots_allocated + s.slots).min(Slots::FULL);
                    d.slots_free = Slots::FULL - d.slots_allocated;
                    d.holders.push(c.id);
                }
            }
        }
        for d in &devices {
            let r = resources
                .entry(d.model.clone())
                .or_insert_with(|| ResourceView {
                    name: d.model.clone(),
                    speed: 1.0,
                    ..ResourceView::default()
                });
            r.instances += 1.0;
            if d.holders.is_empty() && !d.cordoned {
                r.idle += 1.0;
            }
        }
        nodes.push(NodeView {
            name: n.name.clone(),
            cpus_milli: n.cpus.map(|c| u64::from(c) * 1000),
            cpus_allocated_milli: u64::from(n.alloc_cpus) * 1000,
            devices,
        });
    }
    (nodes, resources.into_values().collect())
}
