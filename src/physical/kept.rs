//! The join kept between changes (`Joiner`). A source whose snapshot is the same shared
//! one as last time is not prepared again. A source whose new snapshot lists the same
//! devices (same nodes, indexes and UUIDs, in the same order) groups them into the same
//! GPUs as before: then only the GPUs one of its devices changed in are built again, and
//! every other GPU is the last join's, shared. Anything else (a device or source that came
//! or went, a Ray source, whose nodes may be pods) groups every device again.

use std::sync::Arc;

use crate::snapshot::{DeviceTelemetry, DeviceView, Snapshot};

use super::join::{Keys, Placed, Reading, Seen, assemble, gpu_of, rank, take_readings};
use super::names::{Aliases, NodeNames};
use super::prepare::{self, Prepared, prepare};
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
    /// Joins the sources when every device stays where the last join put it (the same
    /// sources in the same places, each with the same snapshot or one that lists the same
    /// devices, and no Ray source): then only the GPUs a changed device is in are built
    /// again, and those whose devices brought new readings alone only take them. `None`,
    /// and nothing done, when the devices would be grouped again.
    pub fn refresh(
        &mut self,
        sources: &[SharedSource],
        aliases: &Aliases,
    ) -> Option<PhysicalFleet> {
        self.stays(sources, aliases)
            .then(|| self.join(sources, aliases))
    }

    /// Whether every device of `sources` stays where the last join put it: what `refresh`
    /// asks before it joins.
    pub fn stays(&self, sources: &[SharedSource], aliases: &Aliases) -> bool {
        self.last.is_some()
            && *aliases == self.aliases
            && self.parts.len() == sources.len()
            && sources.iter().zip(&self.parts).all(|(s, (snap, p))| {
                s.engine != GpuEngine::Ray
                    && p.source == s.source
                    && p.engine == s.engine
                    && *p.name == *s.name
                    && (Arc::ptr_eq(snap, &s.snapshot) || prepare::same_devices(snap, &s.snapshot))
            })
    }

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
        let mut replaced: Vec<(usize, Part, Vec<bool>)> = Vec::new();
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
            // The same devices as the part it replaces: prepared from it.
            let mut was = old.get_mut(i).and_then(Option::take).filter(|(_, p)| {
                in_place && p.source == s.source && p.engine == s.engine && *p.name == *s.name
            });
            let again = was
                .as_mut()
                .and_then(|(snap, p)| prepare::again(p, snap, &s.snapshot));
            let prepared = if let (Some(was), Some((prepared, same))) = (was, again) {
                replaced.push((i, was, same));
                prepared
            } else {
                in_place = false;
                prepare(s.source, &s.name, s.engine, &s.snapshot, aliases)
            };
            self.parts.push((Arc::clone(&s.snapshot), prepared));
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

/// Whether a device's new reading `now` (after `was`, the same processes using the same
/// memory) leaves its GPU as it was: the GPU's telemetry is another source's and outranks
/// this reading, before and after (dcgm's series beside NVML's).
fn unseen_telemetry(
    was: &DeviceTelemetry,
    now: &DeviceTelemetry,
    (source, engine): (usize, GpuEngine),
    gpu: &PhysicalGpu,
) -> bool {
    let (Some(best), Some(from)) = (&gpu.telemetry, gpu.telemetry_from) else {
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
    from != source && was.processes == now.processes && rank(now, engine) < rank(best, best_engine)
}

/// How much of a GPU a change of its devices touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Touched {
    /// Nothing shown.
    No,
    /// Its readings alone: telemetry with the same processes (`same_listing`), the same
    /// model, capacity and claims; the GPU takes them (`take_readings`).
    Readings,
    /// What places its holders or processes: it is built again (`gpu_of`).
    Whole,
}

/// Whether two readings list the same processes (pid, name, claim and owner, in order):
/// then the join places them as it did, and only their memory may differ.
pub(super) fn same_listing(a: &DeviceTelemetry, b: &DeviceTelemetry) -> bool {
    a.processes.len() == b.processes.len()
        && a.processes.iter().zip(&b.processes).all(|(p, q)| {
            p.pid == q.pid && p.name == q.name && p.claim == q.claim && p.owner == q.owner
        })
}

/// What a device's change does to its GPU: `was` and `now` with their source's claims on
/// them (`holds`: the same or not).
fn touched(
    was: &DeviceView,
    now: &DeviceView,
    same_holds: bool,
    (source, engine): (usize, GpuEngine),
    gpu: Option<&PhysicalGpu>,
) -> Touched {
    if !same_holds || was.model != now.model || was.memory_capacity != now.memory_capacity {
        return Touched::Whole;
    }
    match (&was.telemetry, &now.telemetry) {
        (None, None) => Touched::No,
        (Some(a), Some(b)) if same_listing(a, b) => {
            if gpu.is_some_and(|gpu| unseen_telemetry(a, b, (source, engine), gpu)) {
                Touched::No
            } else {
                Touched::Readings
            }
        }
        _ => Touched::Whole,
    }
}

/// Builds again the GPUs of `fleet` that a device of the `replaced` parts changed in (what
/// the join reads of it, or its source's claims on it), or takes only its new readings
/// where nothing else changed; the others stay shared.
fn rebuild(
    parts: &mut [Part],
    replaced: Vec<(usize, Part, Vec<bool>)>,
    fleet: &mut PhysicalFleet,
    placed: &Placed,
) {
    let mut touched_gpus = vec![Touched::No; fleet.gpus.len()];
    for (i, (was_snap, was), same_holds) in replaced {
        let Some((snap, now)) = parts.get_mut(i) else {
            continue;
        };
        let mut gpu_at = placed.gpu_of.get(i).map_or(&[][..], Vec::as_slice).iter();
        let mut same_holds = same_holds.into_iter();
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
                // Per device, node by node: its GPU, and whether its holds are the same.
                let (at, same_holds) = (gpu_at.next().copied(), same_holds.next() == Some(true));
                if same_holds
                    && wd.model == d.model
                    && wd.memory_capacity == d.memory_capacity
                    && wd.telemetry == d.telemetry
                {
                    // Unchanged: its telemetry, once shared, stays the same shared one.
                    pd.telemetry = wpd.telemetry;
                    continue;
                }
                let Some(g) = at else { continue };
                let gpu = fleet.gpus.get(g).map(|g| &**g);
                let t = touched(wd, d, same_holds, (now.source, now.engine), gpu);
                if let Some(was) = touched_gpus.get_mut(g) {
                    *was = (*was).max(t);
                }
            }
        }
    }
    let parts: &[Part] = parts;
    let mut readings = Vec::new();
    for (g, gpu) in fleet.gpus.iter_mut().enumerate() {
        let t = touched_gpus.get(g).copied().unwrap_or(Touched::No);
        if t == Touched::No {
            continue;
        }
        let (Some(&from), Some(&to)) = (placed.starts.get(g), placed.starts.get(g + 1)) else {
            continue;
        };
        let members = placed.members.get(from..to).unwrap_or_default();
        if t == Touched::Readings {
            readings.clear();
            readings.extend(members.iter().filter_map(|&at| {
                let (snap, p) = parts.get(at.part)?;
                Some(Reading {
                    source: p.source,
                    engine: p.engine,
                    device: snap.nodes.get(at.node)?.devices.get(at.device)?,
                    telemetry: &p.nodes.get(at.node)?.devices.get(at.device)?.telemetry,
                })
            }));
            take_readings(Arc::make_mut(gpu), &readings);
            continue;
        }
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
