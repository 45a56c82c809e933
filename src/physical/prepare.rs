//! One source's part of the join, made once per snapshot of it: its node names resolved,
//! its devices' UUIDs normalised, and its claims made into holders on the devices they
//! hold. A change of one source prepares that source again, not every source (`Joiner`).

use std::collections::{HashMap, HashSet};
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

/// A source's new snapshot `snap` prepared from its last preparation `was` (of
/// `was_snap`), when it lists the same devices (the same nodes, indexes and UUIDs, in
/// order): the nodes' names and keys and the devices' UUIDs are kept, and so are the holds
/// on every device no changed, new or gone claim holds (moved out of `was`). With it, per
/// device (node by node, as `Placed::gpu_of`), whether its holds are the ones it had.
/// `None`, and `was` untouched, when the devices differ.
pub(super) fn again(
    was: &mut Prepared,
    was_snap: &Snapshot,
    snap: &Snapshot,
) -> Option<(Prepared, Vec<bool>)> {
    if !same_devices(was_snap, snap) {
        return None;
    }
    let mut listed: HashSet<&str> = HashSet::with_capacity(snap.nodes.len());
    let twice = !snap.nodes.iter().all(|n| listed.insert(n.name.as_str()));
    // The devices whose holds may differ: those a claim that changed, came or went holds.
    // A node listed twice gets its claims twice: every device is made again.
    let changed = (!twice).then(|| changed_holds(&was_snap.claims, &snap.claims));
    let mut holds = match &changed {
        Some(keys) => {
            let claims = snap
                .claims
                .iter()
                .filter(|c| c.shares.iter().any(|sh| holds_key(c, sh.device, keys)));
            holds_of(was.source, &was.name, was.engine, claims, Some(keys))
        }
        None => holds_by_device(was.source, &was.name, was.engine, snap),
    };
    let mut same = Vec::with_capacity(snap.nodes.iter().map(|n| n.devices.len()).sum());
    let nodes = was
        .nodes
        .iter_mut()
        .zip(&snap.nodes)
        .map(|(wn, n)| PreparedNode {
            name: Arc::clone(&wn.name),
            resolved: wn.resolved.clone(),
            key: wn.key.clone(),
            devices: wn
                .devices
                .iter_mut()
                .map(|wd| {
                    let key = (n.name.as_str(), wd.index);
                    let (mine, kept) = match &changed {
                        Some(keys) if !keys.contains(&key) => (std::mem::take(&mut wd.holds), true),
                        Some(_) => {
                            let mine = holds.remove(&key).unwrap_or_default();
                            let kept = mine == wd.holds;
                            (mine, kept)
                        }
                        // A node listed twice gets its claims twice, as a lookup by name would.
                        None => {
                            let mine = holds.get(&key).cloned().unwrap_or_default();
                            let kept = mine == wd.holds;
                            (mine, kept)
                        }
                    };
                    same.push(kept);
                    PreparedDevice {
                        index: wd.index,
                        uuid: wd.uuid.clone(),
                        holds: mine,
                        telemetry: OnceLock::new(),
                    }
                })
                .collect(),
        })
        .collect();
    Some((
        Prepared {
            source: was.source,
            name: Arc::clone(&was.name),
            engine: was.engine,
            nodes,
            pods: None,
        },
        same,
    ))
}

/// Whether two snapshots list the same devices: the same nodes, indexes and UUIDs, in order.
pub(super) fn same_devices(a: &Snapshot, b: &Snapshot) -> bool {
    a.nodes.len() == b.nodes.len()
        && a.nodes.iter().zip(&b.nodes).all(|(m, n)| {
            m.name == n.name
                && m.devices.len() == n.devices.len()
                && m.devices
                    .iter()
                    .zip(&n.devices)
                    .all(|(x, y)| x.index == y.index && x.uuid == y.uuid)
        })
}

/// Whether a claim's share of `device` is a hold on one of `keys`.
fn holds_key(c: &ClaimView, device: u32, keys: &HashSet<(&str, u32)>) -> bool {
    placed_on(c).is_some_and(|node| keys.contains(&(node, device)))
}

/// The node a claim holds devices on, when it is placed.
fn placed_on(c: &ClaimView) -> Option<&str> {
    match (c.state, &c.node) {
        (ClaimState::Placed, Some(node)) => Some(node),
        _ => None,
    }
}

/// The devices (node, index) whose holds may differ between two lists of claims: those
/// held by a claim that came, went, moved or changed in what its holds read. Claims keep
/// their order from one snapshot to the next: the lists are matched pair by pair from
/// both ends, and every claim between (where they part) counts as changed, since the order
/// of a device's holds is its claims' order.
fn changed_holds<'a>(was: &'a [ClaimView], now: &'a [ClaimView]) -> HashSet<(&'a str, u32)> {
    let mut out = HashSet::new();
    let mut mark = |c: &'a ClaimView| {
        if let Some(node) = placed_on(c) {
            out.extend(c.shares.iter().map(|sh| (node, sh.device)));
        }
    };
    let head = was
        .iter()
        .zip(now)
        .take_while(|(a, b)| a.id == b.id)
        .count();
    let tail = was
        .iter()
        .skip(head)
        .rev()
        .zip(now.iter().skip(head).rev())
        .take_while(|(a, b)| a.id == b.id)
        .count();
    let (was_rest, now_rest) = (was.len() - head - tail, now.len() - head - tail);
    let pairs = was
        .iter()
        .zip(now)
        .take(head)
        .chain(was.iter().rev().zip(now.iter().rev()).take(tail));
    for (a, b) in pairs {
        if !holds_alike(a, b) {
            mark(a);
            mark(b);
        }
    }
    was.iter().skip(head).take(was_rest).for_each(&mut mark);
    now.iter().skip(head).take(now_rest).for_each(&mut mark);
    out
}

/// Whether two versions of a claim make the same holds: what `holds_by_device` reads.
fn holds_alike(a: &ClaimView, b: &ClaimView) -> bool {
    a.id == b.id
        && a.state == b.state
        && a.node == b.node
        && a.shares == b.shares
        && a.project == b.project
        && a.holder == b.holder
        && a.form == b.form
        && a.request.labels == b.request.labels
}

/// The source's placed claims as holds, by the node and device they hold.
fn holds_by_device<'a>(
    source: usize,
    name: &Arc<str>,
    engine: GpuEngine,
    snapshot: &'a Snapshot,
) -> HashMap<(&'a str, u32), Vec<Hold>> {
    holds_of(source, name, engine, snapshot.claims.iter(), None)
}

/// `claims`' holds, by the node and device they hold: every share's, or only those on
/// `only`.
fn holds_of<'a>(
    source: usize,
    name: &Arc<str>,
    engine: GpuEngine,
    claims: impl Iterator<Item = &'a ClaimView>,
    only: Option<&HashSet<(&str, u32)>>,
) -> HashMap<(&'a str, u32), Vec<Hold>> {
    let mut out: HashMap<(&str, u32), Vec<Hold>> = HashMap::with_capacity(claims.size_hint().0);
    for c in claims {
        let Some(node) = placed_on(c) else {
            continue;
        };
        let pod_uid = label_of(c, "k8s.uid").map(str::to_string);
        let job = label_of(c, "slurm.job_id").and_then(|j| j.parse().ok());
        let label: Arc<str> = Arc::from(holders::label(engine, c));
        let project: Arc<str> = Arc::from(c.project.as_str());
        for share in &c.shares {
            if only.is_some_and(|o| !o.contains(&(node, share.device))) {
                continue;
            }
            out.entry((node, share.device)).or_default().push(Hold {
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
