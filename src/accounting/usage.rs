//! GPU time per project over a window: reserved (by compute and by memory fraction), used,
//! idle-allocated, and what nobody reserved; from a window's [`Story`] and the devices'
//! telemetry samples.
//!
//! - Reserved: a claim's share of each device it holds, times how long; a quarter GPU for
//!   an hour is 0.25 GPU-hours. Per project, reserved + unallocated = the fleet's physical
//!   GPU time, by compute and by memory alike.
//! - Used: a sample's device utilization holds until the next sample (at most
//!   [`HOLD_MS`]); a claim with a process on the device is charged the utilization times
//!   its share (so no claim is charged more than it reserved, and a device's claims
//!   together never more than the device did). Processes of no claim are charged to none.
//! - Idle-allocated: a claim whose processes ran below `idle_below_pct` on every device
//!   it holds (no process counts as 0 %) for at least `idle_for_ms`: the whole run is
//!   charged, at its share. Time without samples is neither used nor idle.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::gpu_time::GpuSeconds;
use super::story::Story;
use crate::history::sample::Tick;
use crate::ids::ClaimId;
use crate::wire::history::GpuRef;

/// A sample speaks for its device for at most this long (the snapshot's staleness).
pub const HOLD_MS: u64 = 300_000;

/// Below this utilization, percent, a claim is idle by default (and the hours rolled up
/// in the history count it so).
pub const IDLE_BELOW_PCT: u32 = 5;

/// When a claim counts as idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleRule {
    /// Utilization below this, percent, is idle.
    pub idle_below_pct: u32,
    /// For at least this long, milliseconds.
    pub idle_for_ms: u64,
}

impl Default for IdleRule {
    fn default() -> IdleRule {
        IdleRule {
            idle_below_pct: IDLE_BELOW_PCT,
            idle_for_ms: 15 * 60_000,
        }
    }
}

/// GPU time by the two ways a share is counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ByShare {
    /// By compute fraction.
    pub compute: GpuSeconds,
    /// By memory fraction.
    pub memory: GpuSeconds,
}

/// One project's (or one claim's) GPU time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Reserved.
    pub reserved: ByShare,
    /// Used: utilization of its processes times its share.
    pub used: GpuSeconds,
    /// Held while idle.
    pub idle_allocated: GpuSeconds,
    /// Reserved (by compute) while no telemetry sample spoke for it: neither used nor idle.
    /// Windows accounted before this was counted read 0.
    #[serde(default)]
    pub unmeasured: GpuSeconds,
}

impl Figures {
    fn add(&mut self, o: &Figures) {
        self.reserved.compute += o.reserved.compute;
        self.reserved.memory += o.reserved.memory;
        self.used += o.used;
        self.idle_allocated += o.idle_allocated;
        self.unmeasured += o.unmeasured;
    }

    /// Nothing of what was reserved was measured (no telemetry sample at all): its used
    /// and idle figures mean "unknown", and read n/a, not 0.
    pub fn unmeasured_whole(&self) -> bool {
        self.reserved.compute.0 > 0.0 && self.unmeasured.0 >= self.reserved.compute.0 * 0.999
    }
}

// serde's `skip_serializing_if` hands a reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(g: &GpuSeconds) -> bool {
    g.0 == 0.0
}

/// A project's GPU time. Its figures are written beside its name (`{"project", "claims",
/// "reserved", "used", "idle_allocated"}`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProjectGpuTime {
    /// The project.
    pub project: String,
    /// Claims it held in the window.
    pub claims: u32,
    /// Its figures.
    pub figures: Figures,
}

/// A claim's GPU time. Its figures are written beside its id, as [`ProjectGpuTime`]'s.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimGpuTime {
    /// The claim.
    pub claim: ClaimId,
    /// Its project.
    pub project: String,
    /// Its holder, if named.
    pub holder: Option<String>,
    /// Its longest idle run in the window, ms.
    pub longest_idle_ms: u64,
    /// Its figures.
    pub figures: Figures,
}

// The two above as written: flat. serde's `flatten` would write the same, but reads a
// flattened struct by buffering each one first; a month's usage lists some 150 000 claims.
#[derive(Serialize, Deserialize)]
struct ProjectWire<P> {
    project: P,
    claims: u32,
    reserved: ByShare,
    used: GpuSeconds,
    idle_allocated: GpuSeconds,
    #[serde(default, skip_serializing_if = "is_zero")]
    unmeasured: GpuSeconds,
}

#[derive(Serialize, Deserialize)]
struct ClaimWire<P, H> {
    claim: ClaimId,
    project: P,
    holder: H,
    longest_idle_ms: u64,
    reserved: ByShare,
    used: GpuSeconds,
    idle_allocated: GpuSeconds,
    #[serde(default, skip_serializing_if = "is_zero")]
    unmeasured: GpuSeconds,
}

impl Serialize for ProjectGpuTime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ProjectWire {
            project: &self.project,
            claims: self.claims,
            reserved: self.figures.reserved,
            used: self.figures.used,
            idle_allocated: self.figures.idle_allocated,
            unmeasured: self.figures.unmeasured,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ProjectGpuTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = ProjectWire::<String>::deserialize(d)?;
        Ok(ProjectGpuTime {
            project: w.project,
            claims: w.claims,
            figures: Figures {
                reserved: w.reserved,
                used: w.used,
                idle_allocated: w.idle_allocated,
                unmeasured: w.unmeasured,
            },
        })
    }
}

impl Serialize for ClaimGpuTime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ClaimWire {
            claim: self.claim,
            project: &self.project,
            holder: &self.holder,
            longest_idle_ms: self.longest_idle_ms,
            reserved: self.figures.reserved,
            used: self.figures.used,
            idle_allocated: self.figures.idle_allocated,
            unmeasured: self.figures.unmeasured,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ClaimGpuTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = ClaimWire::<String, Option<String>>::deserialize(d)?;
        Ok(ClaimGpuTime {
            claim: w.claim,
            project: w.project,
            holder: w.holder,
            longest_idle_ms: w.longest_idle_ms,
            figures: Figures {
                reserved: w.reserved,
                used: w.used,
                idle_allocated: w.idle_allocated,
                unmeasured: w.unmeasured,
            },
        })
    }
}

/// A window's GPU time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuTime {
    /// The idle rule applied.
    pub policy: IdleRule,
    /// The fleet's devices times the window.
    pub physical: GpuSeconds,
    /// What no claim reserved.
    pub unallocated: ByShare,
    /// Per project, the biggest idle-allocated first.
    pub projects: Vec<ProjectGpuTime>,
    /// Per claim that held devices, the biggest idle-allocated first.
    pub claims: Vec<ClaimGpuTime>,
}

/// `[from, to)` pieces of one (claim, device) idle time, oldest first, merged when they touch.
#[derive(Default)]
struct Pieces(Vec<(u64, u64)>);

impl Pieces {
    fn push(&mut self, from: u64, to: u64) {
        if let Some(last) = self.0.last_mut()
            && last.1 == from
        {
            last.1 = to;
            return;
        }
        self.0.push((from, to));
    }
}

/// The parts of two sorted interval lists that both cover.
fn intersect(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let from = a[i].0.max(b[j].0);
        let to = a[i].1.min(b[j].1);
        if from < to {
            out.push((from, to));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The utilization a sample gives `claim` on its device: the device's when one of the
/// claim's processes is there, else none.
fn claim_util(s: &Tick, claim: ClaimId) -> u32 {
    let runs = s.processes.iter().any(|p| p.claim == Some(claim));
    if runs {
        s.utilization_gpu.unwrap_or(0).min(100)
    } else {
        0
    }
}

/// A time a claim's devices were all idle for it: `[from, to)` ms, at `weight` GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct IdleRun {
    /// Start, ms.
    pub from: u64,
    /// End (excluded), ms.
    pub to: u64,
    /// The claim's GPUs over it.
    pub weight: f64,
}

/// One claim's GPU time over a span, before the idle rule's minimum is applied.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClaimTally {
    /// Its project (as last seen).
    pub project: String,
    /// Its holder (as last seen).
    pub holder: Option<String>,
    /// Reserved.
    pub reserved: ByShare,
    /// Used.
    pub used: GpuSeconds,
    /// Reserved while no sample spoke for it.
    #[serde(default)]
    pub unmeasured: GpuSeconds,
    /// Its idle runs, oldest first.
    pub idle: Vec<IdleRun>,
}

/// A span's GPU time as it adds up: spans that follow each other add into the span they
/// make together ([`Tally::then`]), and [`settle`] turns it into [`GpuTime`]. What an hour
/// of history is rolled up into.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// The fleet's devices times the span.
    pub physical: GpuSeconds,
    /// What no claim reserved.
    pub unallocated: ByShare,
    /// Per claim that held devices.
    pub claims: BTreeMap<ClaimId, ClaimTally>,
}

impl Tally {
    /// Adds `later`, the span that follows this one.
    pub fn then(&mut self, later: Tally) {
        self.physical += later.physical;
        self.unallocated.compute += later.unallocated.compute;
        self.unallocated.memory += later.unallocated.memory;
        for (id, c) in later.claims {
            let t = self.claims.entry(id).or_default();
            t.project = c.project;
            t.holder = c.holder;
            t.reserved.compute += c.reserved.compute;
            t.reserved.memory += c.reserved.memory;
            t.used += c.used;
            t.unmeasured += c.unmeasured;
            t.idle.extend(c.idle);
        }
    }
}

/// Accounts a window: `story` from [`super::story::tell`], `samples` per device oldest
/// first (from up to [`HOLD_MS`] before the window's start).
pub fn account(story: &Story, samples: &BTreeMap<GpuRef, Vec<Tick>>, policy: IdleRule) -> GpuTime {
    settle(tally(story, samples, policy.idle_below_pct), policy)
}

/// Adds up a window's GPU time, idle meaning below `idle_below_pct`.
pub fn tally(story: &Story, samples: &BTreeMap<GpuRef, Vec<Tick>>, idle_below_pct: u32) -> Tally {
    let mut usage = Tally::default();
    let mut claims: BTreeMap<ClaimId, ClaimTally> = BTreeMap::new();
    let mut idle: BTreeMap<(ClaimId, &GpuRef), Pieces> = BTreeMap::new();
    for (gpu, spans) in &story.devices {
        let series = samples.get(gpu).map_or(&[][..], Vec::as_slice);
        // This device's idle pieces per claim (a device has few claims: no map per sample).
        let mut here: BTreeMap<ClaimId, Pieces> = BTreeMap::new();
        for span in spans {
            let ms = span.to.millis_since(span.from);
            usage.physical += GpuSeconds::of(1.0, ms);
            let (mut compute, mut memory) = (0.0, 0.0);
            for h in &span.holds {
                let f = claims.entry(h.claim).or_insert_with(|| ClaimTally {
                    project: h.project.clone(),
                    ..ClaimTally::default()
                });
                f.reserved.compute += GpuSeconds::of(h.compute, ms);
                f.reserved.memory += GpuSeconds::of(h.memory, ms);
                compute += h.compute;
                memory += h.memory;
            }
            usage.unallocated.compute += GpuSeconds::of((1.0 - compute).max(0.0), ms);
            usage.unallocated.memory += GpuSeconds::of((1.0 - memory).max(0.0), ms);
            if span.holds.is_empty() {
                continue;
            }
            let mut used = vec![0.0_f64; span.holds.len()];
            // How much of the span some sample spoke for, in ms.
            let mut covered: u64 = 0;
            let mut idle_here: Vec<Pieces> = span.holds.iter().map(|_| Pieces::default()).collect();
            // The samples that speak for part of the span.
            let first = series.partition_point(|s| s.at.0 + HOLD_MS <= span.from.0);
            for (i, s) in series.iter().enumerate().skip(first) {
                if s.at >= span.to {
                    break;
                }
                let next = series.get(i + 1).map_or(u64::MAX, |n| n.at.0);
                let from = s.at.0.max(span.from.0);
                let to = next.min(s.at.0 + HOLD_MS).min(span.to.0);
                if to <= from {
                    continue;
                }
                covered += to - from;
                for (k, h) in span.holds.iter().enumerate() {
                    let util = claim_util(s, h.claim);
                    used[k] += f64::from(util) / 100.0 * h.weight() * (to - from) as f64;
                    if util < idle_below_pct {
                        idle_here[k].push(from, to);
                    }
                }
            }
            let uncovered = ms.saturating_sub(covered);
            for ((h, u), pieces) in span.holds.iter().zip(used).zip(idle_here) {
                if let Some(f) = claims.get_mut(&h.claim) {
                    f.used += GpuSeconds(u / 1000.0);
                    f.unmeasured += GpuSeconds::of(h.compute, uncovered);
                }
                let all = here.entry(h.claim).or_default();
                for (from, to) in pieces.0 {
                    all.push(from, to);
                }
            }
        }
        for (claim, pieces) in here {
            idle.insert((claim, gpu), pieces);
        }
    }
    for (id, t) in &mut claims {
        let Some(story_c) = story.claims.get(id) else {
            continue;
        };
        t.project.clone_from(&story_c.project);
        t.holder.clone_from(&story_c.holder);
        // Idle runs: the times every device of a placed span was idle for the claim.
        for span in &story_c.placed {
            let mut common = vec![(span.from.0, span.to.0)];
            for gpu in &span.devices {
                let pieces = idle.get(&(*id, gpu)).map_or(&[][..], |p| p.0.as_slice());
                common = intersect(&common, pieces);
            }
            if span.devices.is_empty() {
                common.clear();
            }
            let weight = span_weight(story, *id, span);
            for (from, to) in common {
                match t.idle.last_mut() {
                    Some(last) if last.to == from && last.weight.to_bits() == weight.to_bits() => {
                        last.to = to;
                    }
                    _ => t.idle.push(IdleRun { from, to, weight }),
                }
            }
        }
    }
    usage.claims = claims;
    usage
}

/// A window's GPU time from its tally: idle runs shorter than `policy.idle_for_ms` are not
/// charged; per project and per claim, the biggest idle-allocated first.
pub fn settle(tally: Tally, policy: IdleRule) -> GpuTime {
    let mut out_claims = Vec::new();
    for (id, t) in tally.claims {
        let mut longest = 0;
        let mut run_start = 0;
        let mut charged = GpuSeconds::default();
        let mut pending = GpuSeconds::default();
        let mut last_end = None;
        for run in &t.idle {
            if last_end != Some(run.from) {
                run_start = run.from;
                pending = GpuSeconds::default();
            }
            pending += GpuSeconds::of(run.weight, run.to - run.from);
            let length = run.to - run_start;
            longest = longest.max(length);
            if length >= policy.idle_for_ms {
                charged += pending;
                pending = GpuSeconds::default();
            }
            last_end = Some(run.to);
        }
        out_claims.push(ClaimGpuTime {
            claim: id,
            project: t.project,
            holder: t.holder,
            longest_idle_ms: longest,
            figures: Figures {
                reserved: t.reserved,
                used: t.used,
                idle_allocated: charged,
                unmeasured: t.unmeasured,
            },
        });
    }
    let mut projects: BTreeMap<&str, ProjectGpuTime> = BTreeMap::new();
    for c in &out_claims {
        let p = projects
            .entry(&c.project)
            .or_insert_with(|| ProjectGpuTime {
                project: c.project.clone(),
                ..ProjectGpuTime::default()
            });
        p.claims += 1;
        p.figures.add(&c.figures);
    }
    let mut projects: Vec<ProjectGpuTime> = projects.into_values().collect();
    sort_projects(&mut projects);
    out_claims.sort_by(|a, b| {
        b.figures
            .idle_allocated
            .0
            .total_cmp(&a.figures.idle_allocated.0)
            .then(a.claim.cmp(&b.claim))
    });
    GpuTime {
        policy,
        physical: tally.physical,
        unallocated: tally.unallocated,
        projects,
        claims: out_claims,
    }
}

/// Biggest idle-allocated first, then biggest reserved, then by name.
pub fn sort_projects(projects: &mut [ProjectGpuTime]) {
    projects.sort_by(|a, b| {
        b.figures
            .idle_allocated
            .0
            .total_cmp(&a.figures.idle_allocated.0)
            .then(
                b.figures
                    .reserved
                    .compute
                    .0
                    .total_cmp(&a.figures.reserved.compute.0),
            )
            .then(a.project.cmp(&b.project))
    });
}

/// A claim's weight over a placed span: its devices' shares as the device spans had them
/// (the memory fraction for a claim that reserved memory only).
fn span_weight(story: &Story, id: ClaimId, span: &super::story::ClaimSpan) -> f64 {
    let mut w = 0.0;
    for gpu in &span.devices {
        let at = |s: &&super::story::DeviceSpan| s.from <= span.from && span.from < s.to;
        if let Some(h) = story
            .devices
            .get(gpu)
            .and_then(|spans| spans.iter().find(at))
            .and_then(|s| s.holds.iter().find(|h| h.claim == id))
        {
            w += h.weight();
        }
    }
    w
}
