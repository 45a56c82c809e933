//! The join: every prepared source's devices grouped into physical GPUs (by UUID, else by
//! node and index), each GPU with its holders, processes and flags, and where each device
//! went (`Placed`), which the join kept between changes (`kept::Joiner`) reads to build
//! again only the GPUs a change touches.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::snapshot::{DeviceTelemetry, DeviceView, Snapshot};
use crate::units::Bytes;

use super::names::{Aliases, NodeMatch, NodeNames};
use super::prepare::{Hold, PodHost, Prepared, prepare};
use super::{GpuEngine, PhysicalFleet, PhysicalGpu, Sighting, SourceView, flags, holders};

/// Joins the sources once, preparing every one (`Joiner` keeps what it prepared).
pub fn join(sources: &[SourceView<'_>], aliases: &Aliases) -> PhysicalFleet {
    let mut prepared: Vec<Prepared> = sources
        .iter()
        .map(|s| prepare(s.source, s.name, s.engine, s.snapshot, aliases))
        .collect();
    let names = NodeNames::resolved(
        aliases,
        prepared
            .iter()
            .flat_map(|p| p.nodes.iter().map(|n| n.resolved.as_str())),
    );
    let mut parts: Vec<(&mut Prepared, &Snapshot)> = prepared
        .iter_mut()
        .zip(sources)
        .map(|(p, s)| (p, s.snapshot))
        .collect();
    assemble(&mut parts, &names, &mut Keys::default()).0
}

/// Keys the nodes that have none yet, makes the pods Ray nodes may run in, and joins.
pub(super) fn assemble(
    parts: &mut [(&mut Prepared, &Snapshot)],
    names: &NodeNames,
    keys: &mut Keys,
) -> (PhysicalFleet, Placed) {
    let ray = parts.iter().any(|(p, _)| p.engine == GpuEngine::Ray);
    for (p, snap) in parts.iter_mut() {
        if p.engine != GpuEngine::Ray {
            for n in p.nodes.iter_mut().filter(|n| n.key.is_none()) {
                n.key = Some(node_key(names, keys, &n.name, &n.resolved));
            }
        }
        if ray && p.engine == GpuEngine::Kubernetes && p.pods.is_none() {
            p.pods = Some(super::prepare::pod_hosts(p, snap));
        }
    }
    let parts: Vec<(&Prepared, &Snapshot)> = parts.iter().map(|(p, s)| (&**p, *s)).collect();
    combine(&parts, names, keys)
}

fn node_key(
    names: &NodeNames,
    keys: &mut Keys,
    name: &str,
    resolved: &str,
) -> Result<usize, String> {
    match names.key_resolved(resolved) {
        NodeMatch::Key(k) => Ok(keys.id(k)),
        NodeMatch::Ambiguous(all) => Err(ambiguous(name, &all)),
    }
}

/// A device of one source, while the join places it.
pub(super) struct Seen<'a> {
    pub sighting: Sighting,
    pub device: &'a DeviceView,
    /// The source's claims on it.
    pub holds: &'a [Hold],
    /// Its telemetry, once shared.
    pub telemetry: &'a OnceLock<Arc<DeviceTelemetry>>,
    /// The pod a Ray node runs in (source, claim), when the Ray node is a pod.
    pub inside: Option<(usize, ClaimId)>,
    /// Where the device is in its source.
    pub at: Coord,
}

/// Where a device is: its source's part, node and device there, and its position among
/// the part's devices (node by node).
#[derive(Clone, Copy, Debug)]
pub(super) struct Coord {
    pub part: usize,
    pub node: usize,
    pub device: usize,
    pub flat: usize,
}

/// Where each device of a join went, so the next join can build again only the GPUs a
/// changed device is part of.
#[derive(Debug, Default)]
pub(super) struct Placed {
    /// Per part, per device (`Coord::flat`): the GPU it is seen in (an index into the
    /// fleet's GPUs).
    pub gpu_of: Vec<Vec<usize>>,
    /// Every GPU's devices, GPU after GPU, each GPU's in `seen_by` order: GPU `g`'s are
    /// `members[starts[g]..starts[g + 1]]`.
    pub members: Vec<Coord>,
    pub starts: Vec<usize>,
}

/// A slot: node (its number in `Keys`) and index. Numbers, so placing a device hashes
/// no string and allocates nothing.
type Slot = (usize, u32);

/// Every node key the join met, each numbered once.
#[derive(Debug, Default)]
pub(super) struct Keys {
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
    pods: &HashMap<&str, Vec<&PodHost>>,
    node: &str,
    index: u32,
) -> Result<(Slot, Option<(usize, ClaimId)>), String> {
    let Some(hosts) = pods.get(node.to_lowercase().as_str()) else {
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

/// Devices grouped into GPUs as the join goes: each group's slot, its sightings, and why
/// it stands alone when it does.
type Group<'a> = (Option<Slot>, Vec<Seen<'a>>, Option<String>);

/// Groups the prepared sources' devices into GPUs, with every holder and process of each
/// and the double-booked and unexplained flags (idle ones come from `IdleClock`).
// The two passes (devices with a UUID, then those placed by node and index) share their
// indexes and warnings: one function, read top to bottom.
#[allow(clippy::too_many_lines)]
fn combine(
    parts: &[(&Prepared, &Snapshot)],
    names: &NodeNames,
    keys: &mut Keys,
) -> (PhysicalFleet, Placed) {
    // Only a Ray source looks pods up.
    let ray = parts.iter().any(|(p, _)| p.engine == GpuEngine::Ray);
    let pods: HashMap<&str, Vec<&PodHost>> = {
        let mut out: HashMap<&str, Vec<&PodHost>> = HashMap::new();
        for (p, _) in parts.iter().filter(|_| ray) {
            for (name, host) in p.pods.iter().flatten() {
                out.entry(name.as_str()).or_default().push(host);
            }
        }
        out
    };
    // Sized for every device at once: growing them rehashes.
    let devices: usize = parts
        .iter()
        .flat_map(|(p, _)| p.nodes.iter().map(|n| n.devices.len()))
        .sum();
    let mut groups: Vec<Group<'_>> = Vec::with_capacity(devices);
    let mut by_uuid: HashMap<&str, usize> = HashMap::with_capacity(devices);
    let mut by_slot: HashMap<Slot, usize> = HashMap::with_capacity(devices);
    // Ordered, so the warnings come in the same order for the same input.
    let mut conflicts: BTreeMap<Slot, String> = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut later = Vec::new();
    // The GPUs whose UUID two places were given, already said.
    let mut split_warned: HashSet<usize> = HashSet::new();
    for (part, (s, snap)) in parts.iter().enumerate() {
        let engine = s.engine;
        let mut flat = 0;
        for (node, (pn, n)) in s.nodes.iter().zip(&snap.nodes).enumerate() {
            for (device, (pd, d)) in pn.devices.iter().zip(&n.devices).enumerate() {
                let at = Coord {
                    part,
                    node,
                    device,
                    flat,
                };
                flat += 1;
                let placed = match &pn.key {
                    _ if engine == GpuEngine::Ray => {
                        ray_slot(names, keys, &pods, &n.name, pd.index)
                    }
                    Some(Ok(k)) => Ok(((*k, pd.index), None)),
                    Some(Err(why)) => Err(why.clone()),
                    None => {
                        node_key(names, keys, &pn.name, &pn.resolved).map(|k| ((k, pd.index), None))
                    }
                };
                let mut seen = Seen {
                    sighting: Sighting {
                        source: s.source,
                        source_name: Arc::clone(&s.name),
                        engine,
                        node: Arc::clone(&pn.name),
                        index: pd.index,
                        uuid: pd.uuid.clone(),
                    },
                    device: d,
                    holds: &pd.holds,
                    telemetry: &pd.telemetry,
                    inside: None,
                    at,
                };
                let Some(uuid) = pd.uuid.as_deref() else {
                    later.push((seen, placed));
                    continue;
                };
                let known = by_uuid.get(uuid).copied();
                // One source giving one UUID to two of its GPUs is wrong about one of them:
                // the second is matched by its node and index instead, and that is said.
                let twice = known.and_then(|at| {
                    groups[at].1.iter().find(|o| {
                        o.sighting.source == s.source
                            && (*o.sighting.node != *n.name || o.sighting.index != pd.index)
                    })
                });
                if let Some(o) = twice {
                    warnings.push(format!(
                        "{}: UUID {uuid} is given to {}:{} and {}:{}; {}:{} is matched by \
                         its node and index",
                        s.name,
                        o.sighting.node,
                        o.sighting.index,
                        n.name,
                        pd.index,
                        n.name,
                        pd.index
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
                    by_uuid.insert(uuid, groups.len());
                    groups.push((slot, Vec::new(), None));
                    groups.len() - 1
                });
                seen.inside = inside;
                let group = &mut groups[at];
                if group.0.is_none() {
                    group.0 = slot;
                }
                // Two sources that give one UUID at two places: one GPU, by its UUID, at
                // the first one's place; said once, since a node name no rule matches
                // (or an index a container renumbered) is the likely cause.
                if let (Some(first), Some(here)) = (group.0, slot)
                    && first != here
                    && let Some(o) = group.1.first()
                    && split_warned.insert(at)
                {
                    warnings.push(format!(
                        "UUID {uuid} is {}:{} to {} but {}:{} to {}: joined as one GPU at {}:{} \
                         by its UUID (if the nodes are one host, name it in the config's \
                         [aliases])",
                        o.sighting.node,
                        o.sighting.index,
                        o.sighting.source_name,
                        n.name,
                        pd.index,
                        s.name,
                        keys.name(first.0),
                        first.1
                    ));
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
    let mut built: Vec<(PhysicalGpu, Vec<Coord>)> = groups
        .into_iter()
        .map(|(slot, mut seen, unmatched)| {
            seen.sort_by_key(|s| s.sighting.source);
            let at = seen.iter().map(|s| s.at).collect();
            let (node, index) = match slot {
                Some((id, index)) => (keys.name(id).to_string(), index),
                None => seen.first().map_or((String::new(), 0), |s| {
                    (s.sighting.node.to_lowercase(), s.sighting.index)
                }),
            };
            (gpu_of(node, index, seen, unmatched), at)
        })
        .collect();
    built.sort_by(|(a, _), (b, _)| (&a.node, a.index, &a.uuid).cmp(&(&b.node, b.index, &b.uuid)));
    let mut placed = Placed {
        gpu_of: parts
            .iter()
            .map(|(p, _)| vec![0; p.nodes.iter().map(|n| n.devices.len()).sum()])
            .collect(),
        members: Vec::with_capacity(devices),
        starts: Vec::with_capacity(built.len() + 1),
    };
    let mut gpus = Vec::with_capacity(built.len());
    for (g, (gpu, at)) in built.into_iter().enumerate() {
        placed.starts.push(placed.members.len());
        for c in at {
            if let Some(slot) = placed
                .gpu_of
                .get_mut(c.part)
                .and_then(|p| p.get_mut(c.flat))
            {
                *slot = g;
            }
            placed.members.push(c);
        }
        gpus.push(Arc::new(gpu));
    }
    placed.starts.push(placed.members.len());
    (PhysicalFleet { gpus, warnings }, placed)
}

/// How a reading ranks as a GPU's telemetry: one that lists processes (NVML) first, then
/// a scheduler's own, then the newest; the highest is shown.
pub(super) fn rank(t: &DeviceTelemetry, engine: GpuEngine) -> (bool, bool, bool, Timestamp) {
    (
        !t.lost,
        !t.processes.is_empty(),
        engine != GpuEngine::Telemetry,
        t.sampled_at,
    )
}

/// One source's device of a GPU, as what the GPU's telemetry, memory and processes' memory
/// are read from.
#[derive(Clone, Copy)]
pub(super) struct Reading<'a> {
    pub source: usize,
    pub engine: GpuEngine,
    pub device: &'a DeviceView,
    /// Its telemetry, once shared.
    pub telemetry: &'a OnceLock<Arc<DeviceTelemetry>>,
}

impl<'a> Reading<'a> {
    fn of(s: &Seen<'a>) -> Reading<'a> {
        Reading {
            source: s.sighting.source,
            engine: s.sighting.engine,
            device: s.device,
            telemetry: s.telemetry,
        }
    }
}

/// What a GPU's devices (in `seen_by` order) say of it beyond who holds it: the telemetry
/// shown and its source, and its memory (the sources' capacity, else the driver's total).
fn readings_of<'a>(
    readings: impl Iterator<Item = Reading<'a>> + Clone,
) -> (Option<Arc<DeviceTelemetry>>, Option<usize>, Option<Bytes>) {
    // The last of equal ranks: the later source.
    let best = readings
        .clone()
        .filter_map(|r| Some((rank(r.device.telemetry.as_ref()?, r.engine), r)))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, r)| r);
    let telemetry = best.and_then(|r| {
        let t = r.device.telemetry.as_ref()?;
        Some(Arc::clone(r.telemetry.get_or_init(|| Arc::new(t.clone()))))
    });
    let memory = readings
        .filter_map(|r| r.device.memory_capacity)
        .max()
        .or_else(|| telemetry.as_ref().and_then(|t| t.memory_total));
    (telemetry, best.map(|r| r.source), memory)
}

/// Takes new readings into `gpu`, whose devices (`readings`, in `seen_by` order) changed in
/// their telemetry alone and list the same processes (pid, name, claim and owner) as when
/// it was built: its telemetry, memory, processes' memory and flags are what `gpu_of`
/// gives, without placing holders and processes again. Idle flags are the caller's.
pub(super) fn take_readings(gpu: &mut PhysicalGpu, readings: &[Reading<'_>]) {
    let (telemetry, from, memory) = readings_of(readings.iter().copied());
    // Each process's memory from the first device that lists it, as `gpu_of` takes it.
    for p in &mut gpu.processes {
        p.used_memory = readings
            .iter()
            .filter_map(|r| r.device.telemetry.as_ref())
            .flat_map(|t| &t.processes)
            .find(|q| q.pid == p.pid)
            .and_then(|q| q.used_memory);
    }
    gpu.telemetry = telemetry;
    gpu.telemetry_from = from;
    gpu.memory = memory;
    gpu.flags = flags::flags_of(gpu);
}

/// The GPU at `node` and `index` that `seen` (sorted by source) are sightings of.
pub(super) fn gpu_of(
    node: String,
    index: u32,
    seen: Vec<Seen<'_>>,
    unmatched: Option<String>,
) -> PhysicalGpu {
    let first = seen.first();
    let model = seen
        .iter()
        .map(|s| s.device.model.as_str())
        .find(|m| !m.is_empty() && *m != "gpu")
        .or_else(|| first.map(|s| s.device.model.as_str()))
        .unwrap_or_default()
        .to_string();
    let (telemetry, telemetry_from, memory) = readings_of(seen.iter().map(Reading::of));
    let (holders, processes) = holders::holders_of(&seen);
    let uuid = seen
        .iter()
        .find_map(|s| s.sighting.uuid.as_deref().map(str::to_string));
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
