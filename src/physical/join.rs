//! The join: every prepared source's devices grouped into physical GPUs (by UUID, else by
//! node and index), each GPU with its holders, processes and flags. And the join kept
//! between changes (`Joiner`): a source whose snapshot is the same shared one as last time
//! is not prepared again, so a change of one source costs that source's preparation and
//! the grouping, not every source's.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::snapshot::{DeviceTelemetry, DeviceView, Snapshot};

use super::names::{Aliases, NodeMatch, NodeNames};
use super::prepare::{Hold, PodHost, Prepared, prepare};
use super::{GpuEngine, PhysicalFleet, PhysicalGpu, Sighting, SourceView, flags, holders};

/// One source's data, shared with its owner: what `Joiner::join` reads. The snapshot is
/// known again by its `Arc`, so a source that did not change is not read again.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedSource {
    /// The source's position (the console's source index).
    pub source: usize,
    /// Its display name.
    pub name: String,
    /// The engine it speaks for.
    pub engine: GpuEngine,
    /// Its snapshot.
    pub snapshot: Arc<Snapshot>,
}

/// The join kept between changes: each source's snapshot prepared (its node names
/// resolved and keyed, its UUIDs normalised, its claims made holders on their devices),
/// kept while the source's snapshot is the same `Arc`. `join` gives what the one-shot
/// `physical::join` gives for the same sources.
#[derive(Debug, Default)]
pub struct Joiner {
    aliases: Aliases,
    parts: Vec<(Arc<Snapshot>, Prepared)>,
    /// The node names of the last join: the nodes' keys hold while these do.
    names: NodeNames,
    keys: Keys,
}

impl Joiner {
    /// Joins the sources, preparing again only those whose snapshot is not the one the
    /// last join read.
    pub fn join(&mut self, sources: &[SharedSource], aliases: &Aliases) -> PhysicalFleet {
        if *aliases != self.aliases {
            *self = Joiner {
                aliases: aliases.clone(),
                ..Joiner::default()
            };
        }
        let mut old: Vec<Option<(Arc<Snapshot>, Prepared)>> = std::mem::take(&mut self.parts)
            .into_iter()
            .map(Some)
            .collect();
        for (i, s) in sources.iter().enumerate() {
            let same = |o: &Option<(Arc<Snapshot>, Prepared)>| {
                o.as_ref().is_some_and(|(snap, p)| {
                    Arc::ptr_eq(snap, &s.snapshot)
                        && p.source == s.source
                        && p.engine == s.engine
                        && *p.name == *s.name
                })
            };
            // Sources come in the same order each time: look where it was first.
            let at = if old.get(i).is_some_and(same) {
                Some(i)
            } else {
                old.iter().position(same)
            };
            let part = at.and_then(|i| old.get_mut(i)?.take()).unwrap_or_else(|| {
                let p = prepare(s.source, &s.name, s.engine, &s.snapshot, aliases);
                (Arc::clone(&s.snapshot), p)
            });
            self.parts.push(part);
        }
        let names = NodeNames::resolved(
            aliases,
            self.parts
                .iter()
                .flat_map(|(_, p)| p.nodes.iter().map(|n| n.resolved.as_str())),
        );
        if names != self.names {
            // A name came or went: every node's key is made again.
            self.names = names;
            self.keys = Keys::default();
            for (_, p) in &mut self.parts {
                for n in &mut p.nodes {
                    n.key = None;
                }
            }
        }
        let mut parts: Vec<(&mut Prepared, &Snapshot)> =
            self.parts.iter_mut().map(|(s, p)| (p, &**s)).collect();
        assemble(&mut parts, &self.names, &mut self.keys)
    }
}

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
    assemble(&mut parts, &names, &mut Keys::default())
}

/// Keys the nodes that have none yet, makes the pods Ray nodes may run in, and joins.
fn assemble(
    parts: &mut [(&mut Prepared, &Snapshot)],
    names: &NodeNames,
    keys: &mut Keys,
) -> PhysicalFleet {
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
}

/// A slot: node (its number in `Keys`) and index. Numbers, so placing a device hashes
/// no string and allocates nothing.
type Slot = (usize, u32);

/// Every node key the join met, each numbered once.
#[derive(Debug, Default)]
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
fn combine(parts: &[(&Prepared, &Snapshot)], names: &NodeNames, keys: &mut Keys) -> PhysicalFleet {
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
    for (s, snap) in parts {
        let engine = s.engine;
        for (pn, n) in s.nodes.iter().zip(&snap.nodes) {
            for (pd, d) in pn.devices.iter().zip(&n.devices) {
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
    let mut gpus: Vec<PhysicalGpu> = groups
        .into_iter()
        .map(|(slot, mut seen, unmatched)| {
            seen.sort_by_key(|s| s.sighting.source);
            gpu_of(slot, keys, seen, unmatched)
        })
        .collect();
    gpus.sort_by(|a, b| (&a.node, a.index, &a.uuid).cmp(&(&b.node, b.index, &b.uuid)));
    PhysicalFleet { gpus, warnings }
}

/// Telemetry that lists processes first (NVML), then a scheduler's own, then the newest.
fn telemetry_rank(s: &Seen<'_>) -> Option<(bool, bool, bool, Timestamp)> {
    let t = s.device.telemetry.as_ref()?;
    Some((
        !t.lost,
        !t.processes.is_empty(),
        s.sighting.engine != GpuEngine::Telemetry,
        t.sampled_at,
    ))
}

fn gpu_of(
    slot: Option<Slot>,
    keys: &Keys,
    seen: Vec<Seen<'_>>,
    unmatched: Option<String>,
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
    let telemetry = best.and_then(|s| {
        let t = s.device.telemetry.as_ref()?;
        Some(Arc::clone(s.telemetry.get_or_init(|| Arc::new(t.clone()))))
    });
    let memory = seen
        .iter()
        .filter_map(|s| s.device.memory_capacity)
        .max()
        .or_else(|| telemetry.as_ref().and_then(|t| t.memory_total));
    let (holders, processes) = holders::holders_of(&seen);
    let telemetry_from = best.map(|s| s.sighting.source);
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
