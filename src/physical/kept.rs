//! The join kept between changes (`Joiner`). A source whose snapshot is the same shared
//! one as last time is not prepared again. A source whose new snapshot lists the same
//! devices (same nodes, indexes and UUIDs, in the same order) groups them into the same
//! GPUs as before: then only the GPUs one of its devices changed in are built again, and
//! every other GPU is the last join's, shared. Anything else (a device or source that came
//! or went, a Ray source, whose nodes may be pods) groups every device again.

use std::sync::Arc;

use crate::snapshot::{DeviceView, Snapshot};

use super::join::{Keys, Placed, Seen, assemble, gpu_of, rank};
use super::names::{Aliases, NodeNames};
use super::prepare::{Prepared, prepare};
use super::{GpuEngine, PhysicalFleet, PhysicalGpu};

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

/// A source's snapshot and what was prepared of it.
type Part = (Arc<Snapshot>, Prepared);

/// The join kept between changes: each source's snapshot prepared (its node names
/// resolved and keyed, its UUIDs normalised, its claims made holders on their devices),
/// kept while the source's snapshot is the same `Arc`, and the last join's GPUs with where
/// each device went. `join` gives what the one-shot `physical::join` gives for the same
/// sources.
#[derive(Debug, Default)]
pub struct Joiner {
    aliases: Aliases,
    parts: Vec<Part>,
    /// The node names of the last join: the nodes' keys hold while these do.
    names: NodeNames,
    keys: Keys,
    /// The last join's GPUs and warnings, and where each device went.
    last: Option<(PhysicalFleet, Placed)>,
}

impl Joiner {
    /// Joins the sources, preparing again only those whose snapshot is not the one the
    /// last join read, and building again only the GPUs their changed devices are in
    /// when they list the same devices as before.
    pub fn join(&mut self, sources: &[SharedSource], aliases: &Aliases) -> PhysicalFleet {
        if *aliases != self.aliases {
            *self = Joiner {
                aliases: aliases.clone(),
                ..Joiner::default()
            };
        }
        let mut old: Vec<Option<Part>> = std::mem::take(&mut self.parts)
            .into_iter()
            .map(Some)
            .collect();
        // Whether every device is where it was: the same sources in the same places, each
        // the same snapshot or one with the same devices. A Ray node may be a pod, placed
        // by another source's claims: with Ray, every device is placed again.
        let mut in_place = self.last.is_some()
            && old.len() == sources.len()
            && sources.iter().all(|s| s.engine != GpuEngine::Ray);
        // The parts prepared again, each with the one it replaced.
        let mut replaced: Vec<(usize, Part)> = Vec::new();
        for (i, s) in sources.iter().enumerate() {
            let same = |o: &Option<Part>| {
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
            if let Some(part) = at.and_then(|j| old.get_mut(j)?.take()) {
                in_place &= at == Some(i);
                self.parts.push(part);
                continue;
            }
            let mut part = (
                Arc::clone(&s.snapshot),
                prepare(s.source, &s.name, s.engine, &s.snapshot, aliases),
            );
            match old.get_mut(i).and_then(Option::take) {
                Some(was) if in_place && same_devices(&was.1, &part.1) => {
                    // The same node names: their keys hold.
                    for (n, w) in part.1.nodes.iter_mut().zip(&was.1.nodes) {
                        n.key.clone_from(&w.key);
                    }
                    replaced.push((i, was));
                }
                _ => in_place = false,
            }
            self.parts.push(part);
        }
        if in_place && let Some((fleet, placed)) = &mut self.last {
            rebuild(&mut self.parts, replaced, fleet, placed);
            return fleet.clone();
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
        let (fleet, placed) = assemble(&mut parts, &self.names, &mut self.keys);
        self.last = Some((fleet.clone(), placed));
        fleet
    }
}

/// Whether two preparations of a source list the same devices: the same source, nodes,
/// indexes and UUIDs, in the same order (then the join groups them as it did).
fn same_devices(was: &Prepared, now: &Prepared) -> bool {
    was.source == now.source
        && was.engine == now.engine
        && was.name == now.name
        && was.nodes.len() == now.nodes.len()
        && was.nodes.iter().zip(&now.nodes).all(|(a, b)| {
            a.name == b.name
                && a.resolved == b.resolved
                && a.devices.len() == b.devices.len()
                && a.devices
                    .iter()
                    .zip(&b.devices)
                    .all(|(x, y)| x.index == y.index && x.uuid == y.uuid)
        })
}

/// Whether a GPU built from `a` would be the one built from `b`: what the join reads of a
/// device beyond where it is (`gpu_of` and the holders read these and nothing else).
fn reads_same(a: &DeviceView, b: &DeviceView) -> bool {
    a.model == b.model && a.memory_capacity == b.memory_capacity && a.telemetry == b.telemetry
}

/// Whether a device that changed in its telemetry alone leaves its GPU as it was: the
/// GPU's telemetry is another source's and outranks this reading, before and after, and
/// the reading lists the same processes (dcgm's series beside NVML's).
fn unseen_telemetry(
    was: &DeviceView,
    now: &DeviceView,
    (source, engine): (usize, GpuEngine),
    gpu: &PhysicalGpu,
) -> bool {
    let (Some(a), Some(b), Some(best), Some(from)) = (
        &was.telemetry,
        &now.telemetry,
        &gpu.telemetry,
        gpu.telemetry_from,
    ) else {
        return false;
    };
    let Some(best_engine) = gpu
        .seen_by
        .iter()
        .find(|s| s.source == from)
        .map(|s| s.engine)
    else {
        return false;
    };
    from != source
        && was.model == now.model
        && was.memory_capacity == now.memory_capacity
        && a.processes == b.processes
        && rank(b, engine) < rank(best, best_engine)
}

/// Builds again the GPUs of `fleet` that a device of the `replaced` parts changed in (what
/// the join reads of it, or its source's claims on it); the others stay shared.
fn rebuild(
    parts: &mut [Part],
    replaced: Vec<(usize, Part)>,
    fleet: &mut PhysicalFleet,
    placed: &Placed,
) {
    let mut dirty = vec![false; fleet.gpus.len()];
    for (i, (was_snap, was)) in replaced {
        let Some((snap, now)) = parts.get_mut(i) else {
            continue;
        };
        let gpu_at = placed.gpu_of.get(i).map_or(&[][..], Vec::as_slice);
        let mut flat = 0;
        for (((wn, n), wpn), pn) in was_snap
            .nodes
            .iter()
            .zip(&snap.nodes)
            .zip(was.nodes)
            .zip(&mut now.nodes)
        {
            for (((wd, d), wpd), pd) in wn
                .devices
                .iter()
                .zip(&n.devices)
                .zip(wpn.devices)
                .zip(&mut pn.devices)
            {
                let at = gpu_at.get(flat).copied();
                if reads_same(wd, d) && wpd.holds == pd.holds {
                    // Unchanged: its telemetry, once shared, stays the same shared one.
                    pd.telemetry = wpd.telemetry;
                } else if let Some(g) = at
                    && !(wpd.holds == pd.holds
                        && fleet.gpus.get(g).is_some_and(|gpu| {
                            unseen_telemetry(wd, d, (now.source, now.engine), gpu)
                        }))
                    && let Some(dirty) = dirty.get_mut(g)
                {
                    *dirty = true;
                }
                flat += 1;
            }
        }
    }
    let parts: &[Part] = parts;
    for (g, gpu) in fleet.gpus.iter_mut().enumerate() {
        if !dirty.get(g).copied().unwrap_or(false) {
            continue;
        }
        let (Some(&from), Some(&to)) = (placed.starts.get(g), placed.starts.get(g + 1)) else {
            continue;
        };
        let members = placed.members.get(from..to).unwrap_or_default();
        let seen: Vec<Seen<'_>> = members
            .iter()
            .zip(&gpu.seen_by)
            .filter_map(|(&at, sighting)| {
                let (snap, p) = parts.get(at.part)?;
                let pd = p.nodes.get(at.node)?.devices.get(at.device)?;
                Some(Seen {
                    sighting: sighting.clone(),
                    device: snap.nodes.get(at.node)?.devices.get(at.device)?,
                    holds: &pd.holds,
                    telemetry: &pd.telemetry,
                    inside: None,
                    at,
                })
            })
            .collect();
        let unmatched = gpu.unmatched.clone();
        *gpu = Arc::new(gpu_of(gpu.node.clone(), gpu.index, seen, unmatched));
    }
}
