//! One source's part of the join, made once per snapshot of it: its node names resolved,
//! its devices' UUIDs normalised, and its claims made into holders on the devices they
//! hold. A change of one source prepares that source again, not every source (`Joiner`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use crate::ids::ClaimId;
use crate::snapshot::{ClaimState, ClaimView, DeviceTelemetry, Snapshot};

use super::names::Aliases;
use super::{GpuEngine, GpuHolder, holders};

/// A source's snapshot, prepared.
#[derive(Debug)]
pub(super) struct Prepared {
    /// The source's position.
    pub source: usize,
    /// Its name, shared by its sightings and holders.
    pub name: Arc<str>,
    /// Its engine.
    pub engine: GpuEngine,
    /// Its nodes, in snapshot order.
    pub nodes: Vec<PreparedNode>,
    /// Its placed pods, by name (lower case), when a Ray source needs them: Kubernetes
    /// sources only, made on first need.
    pub pods: Option<Vec<(String, PodHost)>>,
}

/// A node of a prepared source.
#[derive(Debug)]
pub(super) struct PreparedNode {
    /// Its name as the source writes it.
    pub name: Arc<str>,
    /// Its name with the aliases applied, lower case (what node names match on).
    pub resolved: String,
    /// Its key's number in the join's `Keys`, or why it has none; set by the join for the
    /// node names it knows (`Joiner`'s generation), never for a Ray source.
    pub key: Option<Result<usize, String>>,
    /// Its devices, in snapshot order.
    pub devices: Vec<PreparedDevice>,
}

/// A device of a prepared node.
#[derive(Debug)]
pub(super) struct PreparedDevice {
    /// Its index on the node.
    pub index: u32,
    /// Its UUID, trimmed and lower case; `None` when it has none.
    pub uuid: Option<Arc<str>>,
    /// The source's placed claims on it.
    pub holds: Vec<Hold>,
    /// Its telemetry, shared, once a join has shown it (kept for the next joins).
    pub telemetry: OnceLock<Arc<DeviceTelemetry>>,
}

/// A claim's hold on one device, as a holder (not yet nested), with what processes are
/// matched to it by.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Hold {
    /// The holder.
    pub holder: GpuHolder,
    /// Its pod's UID (Kubernetes).
    pub pod_uid: Option<String>,
    /// Its job id (Slurm).
    pub job: Option<u64>,
}

/// A placed pod: a Ray node named as the pod runs inside it.
#[derive(Debug)]
pub(super) struct PodHost {
    pub source: usize,
    pub claim: ClaimId,
    pub label: String,
    pub node: String,
    pub devices: Vec<u32>,
}

/// Prepares one source's snapshot.
pub(super) fn prepare(
    source: usize,
    name: &str,
    engine: GpuEngine,
    snapshot: &Snapshot,
    aliases: &Aliases,
) -> Prepared {
    let name: Arc<str> = Arc::from(name);
    let mut holds = holds_by_device(source, &name, engine, snapshot);
    let mut listed: HashMap<&str, usize> = HashMap::with_capacity(snapshot.nodes.len());
    for n in &snapshot.nodes {
        *listed.entry(n.name.as_str()).or_default() += 1;
    }
    let nodes = snapshot
        .nodes
        .iter()
        .map(|n| {
            let devices = n
                .devices
                .iter()
                .map(|d| {
                    let key = (n.name.as_str(), d.index);
                    // A node listed twice gets its claims twice, as a lookup by name would.
                    let holds = if listed.get(n.name.as_str()).is_some_and(|&k| k > 1) {
                        holds.get(&key).cloned()
                    } else {
                        holds.remove(&key)
                    };
                    PreparedDevice {
                        index: d.index,
                        uuid: norm_uuid(d.uuid.as_deref()),
                        holds: holds.unwrap_or_default(),
                        telemetry: OnceLock::new(),
                    }
                })
                .collect();
            PreparedNode {
                name: Arc::from(n.name.as_str()),
                resolved: aliases.resolve(&n.name),
                key: None,
                devices,
            }
        })
        .collect();
    Prepared {
        source,
        name,
        engine,
        nodes,
        pods: None,
    }
}

/// The source's placed claims as holds, by the node and device they hold.
fn holds_by_device<'a>(
    source: usize,
    name: &Arc<str>,
    engine: GpuEngine,
    snapshot: &'a Snapshot,
) -> HashMap<(&'a str, u32), Vec<Hold>> {
    let mut out: HashMap<(&str, u32), Vec<Hold>> = HashMap::with_capacity(snapshot.claims.len());
    for c in &snapshot.claims {
        let (ClaimState::Placed, Some(node)) = (c.state, &c.node) else {
            continue;
        };
        let pod_uid = label_of(c, "k8s.uid").map(str::to_string);
        let job = label_of(c, "slurm.job_id").and_then(|j| j.parse().ok());
        let label: Arc<str> = Arc::from(holders::label(engine, c));
        let project: Arc<str> = Arc::from(c.project.as_str());
        for share in &c.shares {
            out.entry((node.as_str(), share.device))
                .or_default()
                .push(Hold {
                    holder: GpuHolder {
                        source,
                        source_name: Arc::clone(name),
                        engine,
                        claim: c.id,
                        label: Arc::clone(&label),
                        project: Arc::clone(&project),
                        memory: share.memory,
                        compute: share.compute,
                        parent: None,
                        guessed: holders::guessed(engine, c),
                    },
                    pod_uid: pod_uid.clone(),
                    job,
                });
        }
    }
    out
}

/// A Kubernetes source's placed pods, by name (lower case).
pub(super) fn pod_hosts(p: &Prepared, snapshot: &Snapshot) -> Vec<(String, PodHost)> {
    let mut out = Vec::new();
    for c in &snapshot.claims {
        let (Some(node), Some(pod)) = (&c.node, c.request.labels.get("k8s.pod")) else {
            continue;
        };
        if c.state != ClaimState::Placed {
            continue;
        }
        let mut devices: Vec<u32> = c.shares.iter().map(|s| s.device).collect();
        devices.sort_unstable();
        out.push((
            pod.to_lowercase(),
            PodHost {
                source: p.source,
                claim: c.id,
                label: holders::label(GpuEngine::Kubernetes, c),
                node: node.clone(),
                devices,
            },
        ));
    }
    out
}

fn norm_uuid(u: Option<&str>) -> Option<Arc<str>> {
    u.map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| Arc::from(u.to_lowercase()))
}

fn label_of<'a>(c: &'a ClaimView, key: &str) -> Option<&'a str> {
    c.request.labels.get(key).map(String::as_str)
}
