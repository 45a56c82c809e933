//! Physical GPUs across sources: every source that sees a GPU (a gpuboard endpoint's
//! NVML, Slurm's gres, Kubernetes' nodes, Ray's raylets, Prometheus' dcgm series) lists
//! it as its own device; this joins those devices into one GPU each, puts every engine's
//! holders of it in one tree (a pod over the Ray worker in it over the process in its
//! cgroup; a Slurm job over the `gpuboard run` inside it), and flags what no one engine
//! can see: two holders that together ask more than the GPU has, memory used by processes
//! no holder accounts for, and holders of a GPU that has done nothing for long.
//!
//! A GPU is known by its UUID where any source gives one, else by node and index, with
//! node names matched across sources (`names`). A device that cannot be matched stays
//! alone, with a warning that says why. Pure: the caller brings the snapshots and the time.

mod episodes;
mod flags;
mod holders;
mod names;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;

use crate::ids::ClaimId;
use crate::snapshot::{ClaimState, ClaimView, DeviceTelemetry, DeviceView, ProcessOwner, Snapshot};
use crate::units::{Bytes, Units};

pub use episodes::{EpisodeHolder, FlagEpisode, FlagTracker};
pub use flags::{GpuFlag, IDLE_BELOW_PERCENT, IDLE_FOR_MS, IdleClock, Resource};
pub use names::{Aliases, NodeMatch, NodeNames};

/// One source's data, as the join reads it.
#[derive(Clone, Copy, Debug)]
pub struct SourceView<'a> {
    /// The source's position (the console's source index).
    pub source: usize,
    /// Its display name.
    pub name: &'a str,
    /// The engine it speaks for.
    pub engine: GpuEngine,
    /// Its snapshot.
    pub snapshot: &'a Snapshot,
}

/// The engine a source speaks for (its `SourceKind`, as the join needs it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuEngine {
    /// A gpuboard endpoint (or the embedded scheduler, or the demo).
    Gpuboard,
    /// Slurm.
    Slurm,
    /// Kubernetes.
    Kubernetes,
    /// Ray.
    Ray,
    /// BOINC.
    Boinc,
    /// Telemetry only (Prometheus dcgm series, a host read over SSH): sees GPUs, holds none.
    Telemetry,
}

impl GpuEngine {
    /// Its name as screens show it.
    pub fn word(self) -> &'static str {
        match self {
            GpuEngine::Gpuboard => "gpuboard",
            GpuEngine::Slurm => "slurm",
            GpuEngine::Kubernetes => "kubernetes",
            GpuEngine::Ray => "ray",
            GpuEngine::Boinc => "boinc",
            GpuEngine::Telemetry => "telemetry",
        }
    }
}

/// A shared string, written as a string.
fn shared_str<S: serde::Serializer>(s: &Arc<str>, to: S) -> Result<S::Ok, S::Error> {
    to.serialize_str(s)
}

/// One source's device, as a sighting of a physical GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Sighting {
    /// The source's position.
    pub source: usize,
    /// The source's name (shared by all its sightings).
    #[serde(serialize_with = "shared_str")]
    pub source_name: Arc<str>,
    /// Its engine.
    pub engine: GpuEngine,
    /// The node as that source names it (shared by the node's devices).
    #[serde(serialize_with = "shared_str")]
    pub node: Arc<str>,
    /// The device index in that source.
    pub index: u32,
    /// The UUID that source gives, if any.
    pub uuid: Option<String>,
}

/// One engine's hold on a GPU: a claim, a Slurm job, a pod, a Ray worker, a BOINC task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuHolder {
    /// The source that reports it.
    pub source: usize,
    /// That source's name.
    #[serde(serialize_with = "shared_str")]
    pub source_name: Arc<str>,
    /// Its engine.
    pub engine: GpuEngine,
    /// Its claim id in that source.
    pub claim: ClaimId,
    /// What it is, in a few words (`Slurm job 42`, `pod ml/train-0`, `Ray actor Trainer`).
    pub label: String,
    /// Its project (account, namespace, Ray job).
    pub project: String,
    /// Memory it holds on this GPU (zero when its engine does not count memory).
    pub memory: Bytes,
    /// Compute it holds on this GPU.
    pub compute: Units,
    /// The holder it is nested in (an index into the same GPU's holders).
    pub parent: Option<usize>,
    /// Its engine does not say which GPU it holds; it is shown on one, not known there,
    /// so it books nothing twice.
    pub guessed: bool,
}

/// A process on a GPU and the holder it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuProcess {
    /// Host pid.
    pub pid: u32,
    /// Name, when readable.
    pub name: Option<String>,
    /// GPU memory it uses.
    pub used_memory: Option<Bytes>,
    /// Whose it is by its cgroup.
    pub owner: Option<ProcessOwner>,
    /// The holder it belongs to (an index into the GPU's holders); `None`: unexplained.
    pub holder: Option<usize>,
    /// The source whose telemetry listed it.
    pub source: usize,
}

/// One physical GPU as every source sees it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhysicalGpu {
    /// Its node (the key its names matched on: lower case, short unless ambiguous).
    pub node: String,
    /// Its index on the node.
    pub index: u32,
    /// Its UUID, when any source gives one (lower case).
    pub uuid: Option<String>,
    /// Model name.
    pub model: String,
    /// Memory, from the sources' capacity or the driver's total.
    pub memory: Option<Bytes>,
    /// The sources that see it, in source order.
    pub seen_by: Vec<Sighting>,
    /// Live telemetry from whichever source has it (NVML first: it lists processes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<DeviceTelemetry>,
    /// The source the telemetry is from.
    pub telemetry_from: Option<usize>,
    /// Every engine's holders; children name their parent.
    pub holders: Vec<GpuHolder>,
    /// Processes on it, each with its holder.
    pub processes: Vec<GpuProcess>,
    /// What is wrong with it.
    pub flags: Vec<GpuFlag>,
    /// Why this device could not be matched to other sources' devices, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unmatched: Option<String>,
}

impl PhysicalGpu {
    /// A stable key: the UUID, else `node:index`.
    pub fn id(&self) -> String {
        self.uuid
            .clone()
            .unwrap_or_else(|| format!("{}:{}", self.node, self.index))
    }

    /// Whether its `id` is `id`, without making the id.
    pub fn is(&self, id: &str) -> bool {
        match &self.uuid {
            Some(u) => u == id,
            None => id.rsplit_once(':').is_some_and(|(node, index)| {
                node == self.node
                    && (index == "0" || !index.starts_with('0'))
                    && index.bytes().all(|b| b.is_ascii_digit())
                    && index.parse() == Ok(self.index)
            }),
        }
    }

    /// `node:index`, as `:gpu` takes it.
    pub fn place(&self) -> String {
        format!("{}:{}", self.node, self.index)
    }

    /// The chain of holders from the outermost down to `holder` (labels).
    pub fn chain(&self, holder: usize) -> Vec<&GpuHolder> {
        let mut out = Vec::new();
        let mut at = Some(holder);
        while let Some(i) = at {
            let Some(h) = self.holders.get(i) else { break };
            if out.len() > self.holders.len() {
                break;
            }
            out.push(h);
            at = h.parent;
        }
        out.reverse();
        out
    }

    /// Holders nested in none.
    pub fn roots(&self) -> impl Iterator<Item = (usize, &GpuHolder)> {
        self.holders
            .iter()
            .enumerate()
            .filter(|(_, h)| h.parent.is_none())
    }

    /// The holders directly inside `parent` (or the roots for `None`).
    pub fn children(&self, parent: Option<usize>) -> impl Iterator<Item = (usize, &GpuHolder)> {
        self.holders
            .iter()
            .enumerate()
            .filter(move |(_, h)| h.parent == parent)
    }

    /// The sources that see it, by name, each once.
    pub fn source_names(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for s in &self.seen_by {
            if !out.contains(&&*s.source_name) {
                out.push(&s.source_name);
            }
        }
        out
    }

    /// Whether it carries a flag of this kind (`double-booked`, `unexplained`, `idle`).
    pub fn has_flag(&self, word: &str) -> bool {
        self.flags.iter().any(|f| f.word() == word)
    }
}

/// Every physical GPU, and what could not be matched.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PhysicalFleet {
    /// GPUs by node and index.
    pub gpus: Vec<PhysicalGpu>,
    /// Why devices were left unmatched, one line each.
    pub warnings: Vec<String>,
}

impl PhysicalFleet {
    /// The GPU at `node:index`, the node matched as the join matches names (case, short
    /// name, or any source's own name for it).
    pub fn find(&self, node: &str, index: u32) -> Option<&PhysicalGpu> {
        let lower = node.to_lowercase();
        let short = lower.split('.').next().unwrap_or(&lower).to_string();
        let at = |g: &&PhysicalGpu| {
            g.index == index
                && (g.node == lower
                    || g.node == short
                    || g.seen_by.iter().any(|s| s.node.eq_ignore_ascii_case(node)))
        };
        self.gpus
            .iter()
            .find(|g| at(g) && g.unmatched.is_none())
            .or_else(|| self.gpus.iter().find(at))
    }

    /// Takes the new telemetry of `source` (its `snapshot`, which differs from the one
    /// last joined only in its devices' telemetry) into the GPUs it is the only sighting
    /// of, without joining again: their telemetry, their processes' memory and the flags
    /// that memory makes. `false` (nothing changed) when a join is needed instead: a GPU
    /// it shares with another source, a device gone, or processes that came, went or
    /// changed claim. Idle flags are the caller's (`IdleClock::observe`).
    pub fn refresh_telemetry(&mut self, source: usize, snapshot: &Snapshot) -> bool {
        let devices: HashMap<(&str, u32), &DeviceView> = snapshot
            .nodes
            .iter()
            .flat_map(|n| {
                n.devices
                    .iter()
                    .map(move |d| ((n.name.as_str(), d.index), d))
            })
            .collect();
        let mut updates = Vec::new();
        for (at, gpu) in self.gpus.iter().enumerate() {
            if !gpu.seen_by.iter().any(|s| s.source == source) {
                continue;
            }
            let [seen] = gpu.seen_by.as_slice() else {
                return false;
            };
            let Some(device) = devices.get(&(&*seen.node, seen.index)) else {
                return false;
            };
            let (old, new) = (gpu.telemetry.as_ref(), device.telemetry.as_ref());
            if !same_processes(old, new)
                || old.map(|t| t.memory_total) != new.map(|t| t.memory_total)
            {
                return false;
            }
            updates.push((at, new.cloned()));
        }
        for (at, telemetry) in updates {
            let Some(gpu) = self.gpus.get_mut(at) else {
                continue;
            };
            for p in &mut gpu.processes {
                p.used_memory = telemetry
                    .iter()
                    .flat_map(|t| t.processes.iter())
                    .find(|q| q.pid == p.pid)
                    .and_then(|q| q.used_memory);
            }
            gpu.telemetry = telemetry;
            gpu.flags = flags::flags_of(gpu);
        }
        true
    }

    /// How many GPUs carry a flag of this kind.
    pub fn count_flag(&self, word: &str) -> usize {
        self.gpus.iter().filter(|g| g.has_flag(word)).count()
    }
}

/// Whether two readings of a GPU list the same processes (pid, name, claim and owner, in
/// order) and both or neither lost it: then the join would place them as it did.
fn same_processes(a: Option<&DeviceTelemetry>, b: Option<&DeviceTelemetry>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.lost == b.lost
                && a.processes.len() == b.processes.len()
                && a.processes.iter().zip(&b.processes).all(|(p, q)| {
                    p.pid == q.pid && p.name == q.name && p.claim == q.claim && p.owner == q.owner
                })
        }
        _ => false,
    }
}

/// A device of one source, while the join places it.
struct Seen<'a> {
    sighting: Sighting,
    device: &'a DeviceView,
    /// The node's name in the snapshot (what its claims name).
    node: &'a str,
    /// The pod a Ray node runs in (source, claim), when the Ray node is a pod.
    inside: Option<(usize, ClaimId)>,
}

/// A slot: node (its number in `Keys`) and index. Numbers, so placing a device hashes
/// no string and allocates nothing.
type Slot = (usize, u32);

/// Every node key the join met, each numbered once.
#[derive(Default)]
struct Keys {
    ids: HashMap<String, usize>,
    names: Vec<String>,
}

impl Keys {
    /// The number of `key`, given one if it is new.
    fn id(&mut self, key: String) -> usize {
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = self.names.len();
        self.names.push(key.clone());
        self.ids.insert(key, id);
        id
    }

    /// The key numbered `id`.
    fn name(&self, id: usize) -> &str {
        self.names.get(id).map_or("", String::as_str)
    }
}

/// Where a Ray node's device sits: a Ray node that is a pod (`KubeRay` names a raylet by
/// its pod's host name) has the pod's devices, in order, on the pod's node; else its own.
/// Or why it cannot be placed.
fn ray_slot(
    names: &NodeNames,
    keys: &mut Keys,
    pods: &HashMap<String, Vec<PodHost>>,
    node: &str,
    index: u32,
) -> Result<(Slot, Option<(usize, ClaimId)>), String> {
    let Some(hosts) = pods.get(&node.to_lowercase()) else {
        return match names.key(node) {
            NodeMatch::Key(k) => Ok(((keys.id(k), index), None)),
            NodeMatch::Ambiguous(all) => Err(ambiguous(node, &all)),
        };
    };
    let [pod] = hosts.as_slice() else {
        return Err(format!(
            "Ray node `{node}` names {} pods; which one it runs in is unknown",
            hosts.len()
        ));
    };
    let Some(&device) = pod.devices.get(index as usize) else {
        return Err(format!(
            "Ray node `{node}` is pod {} which holds {} GPUs, fewer than index {index}",
            pod.label,
            pod.devices.len()
        ));
    };
    match names.key(&pod.node) {
        NodeMatch::Key(k) => Ok(((keys.id(k), device), Some((pod.source, pod.claim)))),
        NodeMatch::Ambiguous(all) => Err(ambiguous(&pod.node, &all)),
    }
}

fn ambiguous(node: &str, all: &[String]) -> String {
    format!(
        "node `{node}` could be any of {}; name it in the config's [aliases]",
        all.join(", ")
    )
}

/// A placed pod: a Ray node named as the pod runs inside it.
struct PodHost {
    source: usize,
    claim: ClaimId,
    label: String,
    node: String,
    devices: Vec<u32>,
}

/// Placed pods by name (lower case), for Ray nodes that are pods.
fn pod_hosts(sources: &[SourceView<'_>]) -> HashMap<String, Vec<PodHost>> {
    let mut out: HashMap<String, Vec<PodHost>> = HashMap::new();
    // Only a Ray source looks pods up.
    if !sources.iter().any(|s| s.engine == GpuEngine::Ray) {
        return out;
    }
    for s in sources {
        if s.engine != GpuEngine::Kubernetes {
            continue;
        }
        for c in &s.snapshot.claims {
            let (Some(node), Some(pod)) = (&c.node, c.request.labels.get("k8s.pod")) else {
                continue;
            };
            if c.state != ClaimState::Placed {
                continue;
            }
            let mut devices: Vec<u32> = c.shares.iter().map(|s| s.device).collect();
            devices.sort_unstable();
            out.entry(pod.to_lowercase()).or_default().push(PodHost {
                source: s.source,
                claim: c.id,
                label: holders::label(GpuEngine::Kubernetes, c),
                node: node.clone(),
                devices,
            });
        }
    }
    out
}

fn norm_uuid(u: Option<&str>) -> Option<String> {
    u.map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_lowercase)
}

/// Devices grouped into GPUs as the join goes: each group's slot, its sightings, and why
/// it stands alone when it does.
type Group<'a> = (Option<Slot>, Vec<Seen<'a>>, Option<String>);

/// Joins the sources' devices into physical GPUs, with every holder and process of each
/// and the double-booked and unexplained flags (idle ones come from `IdleClock`).
// The two passes (devices with a UUID, then those placed by node and index) share their
// indexes and warnings: one function, read top to bottom.
#[allow(clippy::too_many_lines)]
pub fn join(sources: &[SourceView<'_>], aliases: &Aliases) -> PhysicalFleet {
    let names = NodeNames::new(
        aliases,
        sources
            .iter()
            .flat_map(|s| s.snapshot.nodes.iter().map(|n| n.name.as_str())),
    );
    let pods = pod_hosts(sources);
    let mut keys = Keys::default();
    let mut groups: Vec<Group<'_>> = Vec::new();
    let mut by_uuid: HashMap<String, usize> = HashMap::new();
    let mut by_slot: HashMap<Slot, usize> = HashMap::new();
    // Ordered, so the warnings come in the same order for the same input.
    let mut conflicts: BTreeMap<Slot, String> = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut later = Vec::new();
    for s in sources {
        let engine = s.engine;
        let source_name: Arc<str> = Arc::from(s.name);
        for n in &s.snapshot.nodes {
            let node: Arc<str> = Arc::from(n.name.as_str());
            // A node's key once for all its devices (a Ray node's depends on the device).
            let key = (engine != GpuEngine::Ray).then(|| match names.key(&n.name) {
                NodeMatch::Key(k) => Ok(keys.id(k)),
                NodeMatch::Ambiguous(all) => Err(ambiguous(&n.name, &all)),
            });
            for d in &n.devices {
                let placed = match &key {
                    Some(Ok(k)) => Ok(((*k, d.index), None)),
                    Some(Err(why)) => Err(why.clone()),
                    None => ray_slot(&names, &mut keys, &pods, &n.name, d.index),
                };
                let mut seen = Seen {
                    sighting: Sighting {
                        source: s.source,
                        source_name: Arc::clone(&source_name),
                        engine,
                        node: Arc::clone(&node),
                        index: d.index,
                        uuid: norm_uuid(d.uuid.as_deref()),
                    },
                    device: d,
                    node: &n.name,
                    inside: None,
                };
                let Some(uuid) = seen.sighting.uuid.as_deref() else {
                    later.push((seen, placed));
                    continue;
                };
                let known = by_uuid.get(uuid).copied();
                // One source giving one UUID to two of its GPUs is wrong about one of them:
                // the second is matched by its node and index instead, and that is said.
                let twice = known.and_then(|at| {
                    groups[at].1.iter().find(|o| {
                        o.sighting.source == s.source
                            && (*o.sighting.node != *n.name || o.sighting.index != d.index)
                    })
                });
                if let Some(o) = twice {
                    warnings.push(format!(
                        "{}: UUID {uuid} is given to {}:{} and {}:{}; {}:{} is matched by \
                         its node and index",
                        s.name, o.sighting.node, o.sighting.index, n.name, d.index, n.name, d.index
                    ));
                    later.push((seen, placed));
                    continue;
                }
                // A UUID names the GPU wherever its node and index put it.
                let (slot, inside) = match placed {
                    Ok((slot, inside)) => (Some(slot), inside),
                    Err(_) => (None, None),
                };
                let at = known.unwrap_or_else(|| {
                    by_uuid.insert(uuid.to_string(), groups.len());
                    groups.push((slot, Vec::new(), None));
                    groups.len() - 1
                });
                seen.inside = inside;
                let group = &mut groups[at];
                if group.0.is_none() {
                    group.0 = slot;
                }
                group.1.push(seen);
                let Some(slot) = slot else { continue };
                match by_slot.get(&slot) {
                    Some(&other) if other != at => {
                        let was = groups[other].1.first().map_or_else(String::new, |o| {
                            format!(
                                "{} to {}",
                                o.sighting.uuid.as_deref().unwrap_or_default(),
                                o.sighting.source_name
                            )
                        });
                        let uuid = groups[at]
                            .1
                            .last()
                            .and_then(|o| o.sighting.uuid.as_deref())
                            .unwrap_or_default();
                        conflicts.entry(slot).or_insert_with(|| {
                            format!(
                                "GPU {}:{} is {was} but {uuid} to {}",
                                keys.name(slot.0),
                                slot.1,
                                s.name
                            )
                        });
                    }
                    Some(_) => {}
                    None => {
                        by_slot.insert(slot, at);
                    }
                }
            }
        }
    }
    for why in conflicts.values() {
        warnings.push(format!(
            "{why}: devices without a UUID there are left unmatched"
        ));
    }
    for (mut seen, placed) in later {
        let (slot, inside) = match placed {
            Ok(p) => p,
            Err(why) => {
                warnings.push(format!(
                    "{} GPU {}:{} left unmatched: {why}",
                    seen.sighting.source_name, seen.sighting.node, seen.sighting.index
                ));
                groups.push((None, vec![seen], Some(why)));
                continue;
            }
        };
        seen.inside = inside;
        if let Some(why) = conflicts.get(&slot) {
            warnings.push(format!(
                "{} GPU {}:{} left unmatched: {why}",
                seen.sighting.source_name, seen.sighting.node, seen.sighting.index
            ));
            groups.push((Some(slot), vec![seen], Some(why.clone())));
            continue;
        }
        if let Some(&at) = by_slot.get(&slot) {
            groups[at].1.push(seen);
        } else {
            by_slot.insert(slot, groups.len());
            groups.push((Some(slot), vec![seen], None));
        }
    }
    let claims: Vec<ClaimIndex<'_>> = sources.iter().map(claim_index).collect();
    let by_source: HashMap<usize, usize> = sources
        .iter()
        .enumerate()
        .map(|(i, s)| (s.source, i))
        .collect();
    let mut gpus: Vec<PhysicalGpu> = groups
        .into_iter()
        .map(|(slot, mut seen, unmatched)| {
            seen.sort_by_key(|s| s.sighting.source);
            gpu_of(slot, &keys, seen, unmatched, &claims, &by_source)
        })
        .collect();
    gpus.sort_by(|a, b| (&a.node, a.index, &a.uuid).cmp(&(&b.node, b.index, &b.uuid)));
    PhysicalFleet { gpus, warnings }
}

/// A source's placed claims by (node, device).
type ClaimIndex<'a> =
    HashMap<(&'a str, u32), Vec<(&'a ClaimView, &'a crate::placement::DeviceShare)>>;

fn claim_index<'a>(s: &SourceView<'a>) -> ClaimIndex<'a> {
    let mut out: ClaimIndex<'a> = HashMap::with_capacity(s.snapshot.claims.len());
    for c in &s.snapshot.claims {
        let (ClaimState::Placed, Some(node)) = (c.state, &c.node) else {
            continue;
        };
        for share in &c.shares {
            out.entry((node.as_str(), share.device))
                .or_default()
                .push((c, share));
        }
    }
    out
}

/// Telemetry that lists processes first (NVML), then a scheduler's own, then the newest.
fn telemetry_rank(s: &Seen<'_>) -> Option<(bool, bool, bool, crate::clock::Timestamp)> {
    let t = s.device.telemetry.as_ref()?;
    Some((
        !t.lost,
        !t.processes.is_empty(),
        s.sighting.engine != GpuEngine::Telemetry,
        t.sampled_at,
    ))
}

fn gpu_of<'c>(
    slot: Option<Slot>,
    keys: &Keys,
    seen: Vec<Seen<'c>>,
    unmatched: Option<String>,
    claims: &'c [ClaimIndex<'c>],
    by_source: &HashMap<usize, usize>,
) -> PhysicalGpu {
    let first = seen.first();
    let (node, index) = match slot {
        Some((id, index)) => (keys.name(id).to_string(), index),
        None => first.map_or((String::new(), 0), |s| {
            (s.sighting.node.to_lowercase(), s.sighting.index)
        }),
    };
    let model = seen
        .iter()
        .map(|s| s.device.model.as_str())
        .find(|m| !m.is_empty() && *m != "gpu")
        .or_else(|| first.map(|s| s.device.model.as_str()))
        .unwrap_or_default()
        .to_string();
    let best = seen
        .iter()
        .filter_map(|s| telemetry_rank(s).map(|r| (r, s)))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, s)| s);
    let telemetry = best.and_then(|s| s.device.telemetry.clone());
    let memory = seen
        .iter()
        .filter_map(|s| s.device.memory_capacity)
        .max()
        .or_else(|| telemetry.as_ref().and_then(|t| t.memory_total));
    let on_device = |s: &Seen<'c>| -> &'c [(&'c ClaimView, &'c crate::placement::DeviceShare)] {
        by_source
            .get(&s.sighting.source)
            .and_then(|&i| claims.get(i))
            .and_then(|c| c.get(&(s.node, s.sighting.index)))
            .map_or(&[][..], Vec::as_slice)
    };
    let (holders, processes) = holders::holders_of(&seen, on_device);
    let telemetry_from = best.map(|s| s.sighting.source);
    let uuid = seen.iter().find_map(|s| s.sighting.uuid.clone());
    let mut gpu = PhysicalGpu {
        node,
        index,
        uuid,
        model,
        memory,
        seen_by: seen.into_iter().map(|s| s.sighting).collect(),
        telemetry,
        telemetry_from,
        holders,
        processes,
        flags: Vec::new(),
        unmatched,
    };
    gpu.flags = flags::flags_of(&gpu);
    gpu
}

#[cfg(test)]
mod tests;
