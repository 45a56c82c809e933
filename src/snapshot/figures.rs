//! The watch's third form (`format=3`): a device whose telemetry changed in its figures
//! alone is sent as its figures at the precision screens show them (percent, °C, W, MHz,
//! MiB), in one `figures` change, instead of its node whole with both sparklines; a claim
//! whose measured use alone changed, as that use. A busy host's delta is then its new
//! figures and little else.
//!
//! The utilization sparkline goes as the samples appended since the version the watcher
//! has, so the reader's copy stays the endpoint's (and the idle flag, which reads it, too).
//! The memory sparkline does not travel: the reader appends each memory figure it receives
//! to its own, so it holds one sample per delta received (at the watch's pace) where the
//! endpoint's holds one per telemetry round, at most as long as the utilization one.
//!
//! Figures are rounded as shown: memory to the MiB, power to the watt. A reader's copy then
//! differs from the endpoint's below what any screen shows, and in the memory sparkline's
//! spacing; everything else is the endpoint's exactly.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{ClaimView, DeviceTelemetry, DeviceView, NodeView, Snapshot, SnapshotChange};
use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::units::Bytes;

/// One device's new figures (a JSON array on the wire, in the order of the fields).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "DeviceWire", into = "DeviceWire")]
pub struct DeviceFigures {
    /// Its index on the node.
    pub index: u32,
    /// GPU utilization, percent.
    pub utilization_gpu: Option<u32>,
    /// Memory-controller utilization, percent.
    pub utilization_memory: Option<u32>,
    /// Temperature, °C.
    pub temperature_c: Option<u32>,
    /// Power draw, whole watts.
    pub power_w: Option<u32>,
    /// SM clock, MHz.
    pub clock_sm_mhz: Option<u32>,
    /// Memory clock, MHz.
    pub clock_memory_mhz: Option<u32>,
    /// Fan speed, percent.
    pub fan_pct: Option<u32>,
    /// Memory in use, MiB.
    pub memory_used_mib: Option<u64>,
    /// Each process's memory in use as the MiB it is short of the device's (of
    /// `memory_used_mib`, or of 0 when that is unknown): 0 for the one process that uses
    /// it all. In the order the device lists its processes (the same ones as before).
    pub processes_short_mib: Vec<Option<i64>>,
    /// Memory used by processes of no claim, MiB.
    pub unclaimed_mib: Option<u64>,
    /// Utilization samples appended to the sparkline since the last version.
    pub utilization_samples: Vec<u32>,
    /// How many samples the sparkline then keeps, when not as many as before.
    pub history_len: Option<usize>,
}

type DeviceWire = (
    u32,
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Option<u64>,
    Vec<Option<i64>>,
    Option<u64>,
    Vec<u32>,
    Option<usize>,
);

impl From<DeviceWire> for DeviceFigures {
    fn from(w: DeviceWire) -> DeviceFigures {
        DeviceFigures {
            index: w.0,
            utilization_gpu: w.1,
            utilization_memory: w.2,
            temperature_c: w.3,
            power_w: w.4,
            clock_sm_mhz: w.5,
            clock_memory_mhz: w.6,
            fan_pct: w.7,
            memory_used_mib: w.8,
            processes_short_mib: w.9,
            unclaimed_mib: w.10,
            utilization_samples: w.11,
            history_len: w.12,
        }
    }
}

impl From<DeviceFigures> for DeviceWire {
    fn from(f: DeviceFigures) -> DeviceWire {
        (
            f.index,
            f.utilization_gpu,
            f.utilization_memory,
            f.temperature_c,
            f.power_w,
            f.clock_sm_mhz,
            f.clock_memory_mhz,
            f.fan_pct,
            f.memory_used_mib,
            f.processes_short_mib,
            f.unclaimed_mib,
            f.utilization_samples,
            f.history_len,
        )
    }
}

/// A node's devices whose figures changed (`[name, [device, ...]]` on the wire).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    from = "(String, Vec<DeviceFigures>)",
    into = "(String, Vec<DeviceFigures>)"
)]
pub struct NodeFigures {
    /// The node's name.
    pub name: String,
    /// Its devices whose figures changed.
    pub devices: Vec<DeviceFigures>,
}

impl From<(String, Vec<DeviceFigures>)> for NodeFigures {
    fn from((name, devices): (String, Vec<DeviceFigures>)) -> NodeFigures {
        NodeFigures { name, devices }
    }
}

impl From<NodeFigures> for (String, Vec<DeviceFigures>) {
    fn from(n: NodeFigures) -> (String, Vec<DeviceFigures>) {
        (n.name, n.devices)
    }
}

/// A claim's measured use (`[id, memory_beyond_mib, over_limit, idle]` on the wire).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    from = "(ClaimId, Option<i64>, bool, bool)",
    into = "(ClaimId, Option<i64>, bool, bool)"
)]
pub struct ClaimFigures {
    /// The claim.
    pub id: ClaimId,
    /// Memory its processes use, as the MiB it is beyond the sum of the memory its
    /// processes on the snapshot's devices use (0 when it is that sum); `None`: unknown.
    pub memory_beyond_mib: Option<i64>,
    /// Its processes use more than it reserved.
    pub over_limit: bool,
    /// Its devices have been idle for long.
    pub idle: bool,
}

impl From<(ClaimId, Option<i64>, bool, bool)> for ClaimFigures {
    fn from((id, memory_beyond_mib, over_limit, idle): (ClaimId, Option<i64>, bool, bool)) -> Self {
        ClaimFigures {
            id,
            memory_beyond_mib,
            over_limit,
            idle,
        }
    }
}

impl From<ClaimFigures> for (ClaimId, Option<i64>, bool, bool) {
    fn from(c: ClaimFigures) -> Self {
        (c.id, c.memory_beyond_mib, c.over_limit, c.idle)
    }
}

/// The changes that turn `old` into `new` in the third form: [`super::diff`]'s, with each
/// node whose devices changed in their figures alone, and each claim whose measured use
/// alone changed, in one `figures` change after the others (a claim's memory is read
/// against its processes' once every device is new).
pub fn diff_figures(old: &Snapshot, new: &Snapshot) -> Vec<SnapshotChange> {
    with_figures(super::diff(old, new), old, new)
}

/// `changes` (from `old` to `new`, in the per-project form) in the third form.
pub fn with_figures(
    changes: Vec<SnapshotChange>,
    old: &Snapshot,
    new: &Snapshot,
) -> Vec<SnapshotChange> {
    let mut old_nodes: Option<HashMap<&str, &NodeView>> = None;
    let mut old_claims: Option<HashMap<ClaimId, &ClaimView>> = None;
    let (mut nodes, mut claims) = (Vec::new(), Vec::new());
    let mut sums: Option<HashMap<ClaimId, u64>> = None;
    let mut at = None;
    let mut out = Vec::with_capacity(changes.len());
    for change in changes {
        let compact = match &change {
            SnapshotChange::Node { node } => old_nodes
                .get_or_insert_with(|| old.nodes.iter().map(|n| (n.name.as_str(), n)).collect())
                .get(node.name.as_str())
                .and_then(|o| node_figures(o, node, &mut at))
                .map(|f| nodes.push(f)),
            SnapshotChange::Claim { claim } => old_claims
                .get_or_insert_with(|| old.claims.iter().map(|c| (c.id, c)).collect())
                .get(&claim.id)
                .and_then(|o| claim_figures(o, claim, sums.get_or_insert_with(|| sums_of(new))))
                .map(|f| claims.push(f)),
            _ => None,
        };
        if compact.is_none() {
            out.push(change);
        }
    }
    if !nodes.is_empty() || !claims.is_empty() {
        let at = at.filter(|t| *t != new.taken_at);
        out.push(SnapshotChange::Figures { at, nodes, claims });
    }
    out
}

/// Per claim, the MiB its processes use on `snap`'s devices (each process rounded).
fn sums_of(snap: &Snapshot) -> HashMap<ClaimId, u64> {
    let mut sums: HashMap<ClaimId, u64> = HashMap::new();
    let processes = snap
        .nodes
        .iter()
        .flat_map(|n| &n.devices)
        .filter_map(|d| d.telemetry.as_ref())
        .flat_map(|t| &t.processes);
    for p in processes {
        if let (Some(id), Some(used)) = (p.claim, p.used_memory) {
            *sums.entry(id).or_default() += mib(used);
        }
    }
    sums
}

/// `a - b` for MiB figures (far below `i64::MAX`).
fn less(a: u64, b: u64) -> i64 {
    i64::try_from(a).unwrap_or(i64::MAX) - i64::try_from(b).unwrap_or(i64::MAX)
}

/// `base + d`, `None` below zero.
fn plus(base: u64, d: i64) -> Option<u64> {
    u64::try_from(i64::try_from(base).ok()?.checked_add(d)?).ok()
}

/// The figures of `new`'s devices that changed, if only figures did (and every device
/// sampled at `at`, which the first one sets).
fn node_figures(old: &NodeView, new: &NodeView, at: &mut Option<Timestamp>) -> Option<NodeFigures> {
    if old.cpus_milli != new.cpus_milli
        || old.cpus_allocated_milli != new.cpus_allocated_milli
        || old.devices.len() != new.devices.len()
    {
        return None;
    }
    let mut devices = Vec::new();
    for (o, n) in old.devices.iter().zip(&new.devices) {
        if o == n {
            continue;
        }
        if !o.same_but_telemetry(n) {
            return None;
        }
        let (Some(ot), Some(nt)) = (&o.telemetry, &n.telemetry) else {
            return None;
        };
        if *at.get_or_insert(nt.sampled_at) != nt.sampled_at || !same_but_figures(ot, nt) {
            return None;
        }
        devices.push(device_figures(n.index, ot, nt, n.unclaimed_memory));
    }
    (!devices.is_empty()).then(|| NodeFigures {
        name: new.name.clone(),
        devices,
    })
}

/// Whether `new` is `old` with other figures, samples, time and process memory.
fn same_but_figures(old: &DeviceTelemetry, new: &DeviceTelemetry) -> bool {
    if old.processes.len() != new.processes.len() {
        return false;
    }
    let mut o = old.clone();
    o.sampled_at = new.sampled_at;
    o.memory_used = new.memory_used;
    o.utilization_gpu = new.utilization_gpu;
    o.utilization_memory = new.utilization_memory;
    o.temperature_c = new.temperature_c;
    o.power_mw = new.power_mw;
    o.clock_sm_mhz = new.clock_sm_mhz;
    o.clock_memory_mhz = new.clock_memory_mhz;
    o.fan_pct = new.fan_pct;
    o.history_utilization.clone_from(&new.history_utilization);
    o.history_memory_used.clone_from(&new.history_memory_used);
    for (p, q) in o.processes.iter_mut().zip(&new.processes) {
        p.used_memory = q.used_memory;
    }
    o == *new
}

fn device_figures(
    index: u32,
    old: &DeviceTelemetry,
    new: &DeviceTelemetry,
    unclaimed: Option<Bytes>,
) -> DeviceFigures {
    let (old_h, new_h) = (&old.history_utilization, &new.history_utilization);
    DeviceFigures {
        index,
        utilization_gpu: new.utilization_gpu,
        utilization_memory: new.utilization_memory,
        temperature_c: new.temperature_c,
        power_w: new.power_mw.map(|mw| mw.saturating_add(500) / 1000),
        clock_sm_mhz: new.clock_sm_mhz,
        clock_memory_mhz: new.clock_memory_mhz,
        fan_pct: new.fan_pct,
        memory_used_mib: new.memory_used.map(mib),
        processes_short_mib: new
            .processes
            .iter()
            .map(|p| {
                p.used_memory
                    .map(|u| less(new.memory_used.map_or(0, mib), mib(u)))
            })
            .collect(),
        unclaimed_mib: unclaimed.map(mib),
        utilization_samples: appended(old_h, new_h).to_vec(),
        history_len: (new_h.len() != old_h.len()).then_some(new_h.len()),
    }
}

/// The samples `new` appended to `old` (a sparkline that drops its oldest when full): the
/// fewest that, after as many of `old`'s newest as `new` keeps, give `new`.
fn appended<'a>(old: &[u32], new: &'a [u32]) -> &'a [u32] {
    let keep = (0..=old.len().min(new.len()))
        .rev()
        .find(|&keep| old[old.len() - keep..] == new[..keep])
        .unwrap_or(0);
    &new[keep..]
}

fn claim_figures(
    old: &ClaimView,
    new: &ClaimView,
    sums: &HashMap<ClaimId, u64>,
) -> Option<ClaimFigures> {
    let mut o = old.clone();
    o.memory_used = new.memory_used;
    o.over_limit = new.over_limit;
    o.idle = new.idle;
    (o == *new).then(|| ClaimFigures {
        id: new.id,
        memory_beyond_mib: new
            .memory_used
            .map(|u| less(mib(u), sums.get(&new.id).copied().unwrap_or(0))),
        over_limit: new.over_limit,
        idle: new.idle,
    })
}

/// Bytes to the nearest MiB.
fn mib(b: Bytes) -> u64 {
    b.0.saturating_add(1 << 19) >> 20
}

/// Applies a `figures` change to `snap` (whose time is the new version's: the change's
/// `at` is left out when the devices were sampled then).
pub(super) fn apply_figures(
    snap: &mut Snapshot,
    at: Option<Timestamp>,
    nodes: &[NodeFigures],
    claims: &[ClaimFigures],
) {
    let at = at.unwrap_or(snap.taken_at);
    if !nodes.is_empty() {
        let by_name: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        for node in &mut snap.nodes {
            let Some(&i) = by_name.get(node.name.as_str()) else {
                continue;
            };
            for f in &nodes[i].devices {
                if let Some(d) = node.devices.iter_mut().find(|d| d.index == f.index) {
                    apply_device(d, f, at);
                }
            }
        }
    }
    if !claims.is_empty() {
        let sums = sums_of(snap);
        let by_id: HashMap<ClaimId, &ClaimFigures> = claims.iter().map(|c| (c.id, c)).collect();
        for c in &mut snap.claims {
            if let Some(f) = by_id.get(&c.id) {
                let base = sums.get(&c.id).copied().unwrap_or(0);
                c.memory_used = f
                    .memory_beyond_mib
                    .and_then(|d| plus(base, d))
                    .map(Bytes::mib);
                c.over_limit = f.over_limit;
                c.idle = f.idle;
            }
        }
    }
}

fn apply_device(d: &mut DeviceView, f: &DeviceFigures, at: Timestamp) {
    d.unclaimed_memory = f.unclaimed_mib.map(Bytes::mib);
    let Some(t) = &mut d.telemetry else { return };
    t.sampled_at = at;
    t.utilization_gpu = f.utilization_gpu;
    t.utilization_memory = f.utilization_memory;
    t.temperature_c = f.temperature_c;
    t.power_mw = f.power_w.map(|w| w.saturating_mul(1000));
    t.clock_sm_mhz = f.clock_sm_mhz;
    t.clock_memory_mhz = f.clock_memory_mhz;
    t.fan_pct = f.fan_pct;
    t.memory_used = f.memory_used_mib.map(Bytes::mib);
    let device = f.memory_used_mib.unwrap_or(0);
    for (p, short) in t.processes.iter_mut().zip(&f.processes_short_mib) {
        p.used_memory = short.and_then(|s| plus(device, -s)).map(Bytes::mib);
    }
    let keep = f.history_len.unwrap_or(t.history_utilization.len());
    t.history_utilization
        .extend_from_slice(&f.utilization_samples);
    let drop = t.history_utilization.len().saturating_sub(keep);
    t.history_utilization.drain(..drop);
    // The memory sparkline gains this figure (a gap reads 0, as the endpoint's does),
    // unless it has never held any, and keeps the utilization one's length.
    if t.memory_used.is_some() || !t.history_memory_used.is_empty() {
        t.history_memory_used.push(t.memory_used.map_or(0, |b| b.0));
    }
    let drop = t.history_memory_used.len().saturating_sub(keep);
    t.history_memory_used.drain(..drop);
}

#[cfg(test)]
mod tests;
