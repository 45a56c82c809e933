//! A window's story: the recorded states replayed from the window's start, turned into
//! spans (who held what share of each device, and in what condition the device was; when
//! each claim was placed or waited; when each project was backed off) and the audit
//! actions with the state of their target just before and just after.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::history::{Body, Record};
use crate::ids::ClaimId;
use crate::placement::Health;
use crate::snapshot::{ClaimState, Snapshot, SnapshotChange, apply};
use crate::units::{Bytes, UNITS_PER_DEVICE};
use crate::wire::history::{GpuRef, HistoryChange};

/// One claim's share of one device.
#[derive(Clone, Debug, PartialEq)]
pub struct Hold {
    /// The claim.
    pub claim: ClaimId,
    /// Its project.
    pub project: String,
    /// Of the device's compute, 0 to 1.
    pub compute: f64,
    /// Of the device's allocatable memory, 0 to 1.
    pub memory: f64,
    /// Memory reserved on the device.
    pub memory_bytes: Bytes,
}

impl Hold {
    /// The share used and idle time are weighted by: the compute fraction, or the memory
    /// fraction for a claim that reserved memory only.
    pub fn weight(&self) -> f64 {
        if self.compute > 0.0 {
            self.compute
        } else {
            self.memory
        }
    }
}

/// A device over a span of time in which nothing about it changed.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceSpan {
    /// Start (included).
    pub from: Timestamp,
    /// End (excluded).
    pub to: Timestamp,
    /// Taking no new claims.
    pub cordoned: bool,
    /// Its health.
    pub health: Health,
    /// Who held what of it.
    pub holds: Vec<Hold>,
}

/// A claim placed (on `devices`, with its total `weight` in GPUs) or waiting, over a span.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimSpan {
    /// Start (included).
    pub from: Timestamp,
    /// End (excluded).
    pub to: Timestamp,
    /// The devices held; empty while pending.
    pub devices: Vec<GpuRef>,
    /// The GPUs it held in all (sum of its devices' weights).
    pub weight: f64,
    /// Why it waits, while pending.
    pub pending_reasons: Vec<String>,
}

/// A claim over the window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClaimStory {
    /// Its project.
    pub project: String,
    /// Its holder, if named.
    pub holder: Option<String>,
    /// Placed spans, oldest first.
    pub placed: Vec<ClaimSpan>,
    /// Pending spans, oldest first.
    pub pending: Vec<ClaimSpan>,
}

/// A project backed off on a resource type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackoffSpan {
    /// The project.
    pub project: String,
    /// The resource type.
    pub resource: String,
    /// When the backoff was first seen.
    pub from: Timestamp,
    /// When it ended (its deadline, or when it was cleared), or the window's end.
    pub to: Timestamp,
    /// Still on at the window's end.
    pub ongoing: bool,
}

/// An audit action in the window, with its target's state around it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditedAction {
    /// When it was done.
    pub at: Timestamp,
    /// Who did it (a token's name or role, `lease`, `scheduler`...).
    pub actor: String,
    /// What (`release`, `cordon`, `claim`...).
    pub action: String,
    /// On what (`claim 17`, `a:3`, `project vision`).
    pub target: String,
    /// The endpoint's words for it.
    pub detail: String,
    /// The target's state just before.
    pub before: String,
    /// The target's state just after.
    pub after: String,
}

/// Everything the window's states say, as spans.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Story {
    /// The window's start.
    pub from: Timestamp,
    /// The window's end.
    pub to: Timestamp,
    /// Per device, its spans oldest first.
    pub devices: BTreeMap<GpuRef, Vec<DeviceSpan>>,
    /// Per claim.
    pub claims: BTreeMap<ClaimId, ClaimStory>,
    /// Backoffs seen, oldest first.
    pub backoffs: Vec<BackoffSpan>,
    /// Audit actions, oldest first.
    pub actions: Vec<AuditedAction>,
}

/// The shares each device is held in, and each claim's state, in one state.
fn holds_of(state: &Snapshot) -> BTreeMap<GpuRef, (bool, Health, Vec<Hold>)> {
    let mut out: BTreeMap<GpuRef, (bool, Health, Vec<Hold>)> = BTreeMap::new();
    let mut memory_of: BTreeMap<GpuRef, u64> = BTreeMap::new();
    for (n, d) in state.devices() {
        let gpu = GpuRef {
            node: n.name.clone(),
            index: d.index,
        };
        memory_of.insert(gpu.clone(), (d.memory_allocated + d.memory_free).0);
        out.insert(gpu, (d.cordoned, d.health.clone(), Vec::new()));
    }
    for c in &state.claims {
        let (ClaimState::Placed, Some(node)) = (c.state, &c.node) else {
            continue;
        };
        for s in &c.shares {
            let gpu = GpuRef {
                node: node.clone(),
                index: s.device,
            };
            let total = memory_of.get(&gpu).copied().unwrap_or(0);
            let Some((_, _, holds)) = out.get_mut(&gpu) else {
                continue;
            };
            holds.push(Hold {
                claim: c.id,
                project: c.project.clone(),
                compute: f64::from(s.compute.0) / f64::from(UNITS_PER_DEVICE),
                memory: if total == 0 {
                    0.0
                } else {
                    (s.memory.0 as f64 / total as f64).min(1.0)
                },
                memory_bytes: s.memory,
            });
        }
    }
    out
}

/// Whether a delta can change who holds what (claims or nodes).
fn moves_holds(body: &Body) -> bool {
    match body {
        Body::Keyframe { .. } => true,
        Body::Delta { delta } => delta.iter().any(|c| {
            matches!(
                c,
                SnapshotChange::Node { .. }
                    | SnapshotChange::NodeRemoved { .. }
                    | SnapshotChange::Nodes { .. }
                    | SnapshotChange::Claim { .. }
                    | SnapshotChange::ClaimRemoved { .. }
                    | SnapshotChange::Claims { .. }
            )
        }),
    }
}

/// What is written of a target's state in the timeline.
fn describe(state: &Snapshot, change: &HistoryChange) -> String {
    if let Some(id) = change.claim {
        return match state.claim(id) {
            None => "gone".to_string(),
            Some(c) if c.state == ClaimState::Pending => "pending".to_string(),
            Some(c) => {
                let gpus: f64 = c
                    .shares
                    .iter()
                    .map(|s| f64::from(s.compute.0) / f64::from(UNITS_PER_DEVICE))
                    .sum();
                format!(
                    "placed on {}:{} ({gpus:.2} GPU, {})",
                    c.node.as_deref().unwrap_or("?"),
                    crate::snapshot::index_ranges(
                        &c.shares.iter().map(|s| s.device).collect::<Vec<_>>()
                    ),
                    c.memory_reserved
                )
            }
        };
    }
    if let [gpu] = change.gpus.as_slice() {
        let found = state
            .devices()
            .find(|(n, d)| n.name == gpu.node && d.index == gpu.index);
        return match found {
            None => "absent".to_string(),
            Some((_, d)) => {
                let health = match &d.health {
                    Health::Healthy => "healthy".to_string(),
                    Health::Unhealthy(why) => format!("unhealthy ({why})"),
                    Health::Lost => "lost".to_string(),
                };
                format!(
                    "{}{health}, {} claim(s)",
                    if d.cordoned { "cordoned, " } else { "" },
                    d.holders.len()
                )
            }
        };
    }
    if let Some(p) = &change.project {
        return match state.projects.iter().find(|x| &x.name == p) {
            None => "absent".to_string(),
            Some(v) => {
                let backed: Vec<&str> = v
                    .resources
                    .iter()
                    .filter(|r| r.backoff_until.is_some_and(|u| u > state.taken_at))
                    .map(|r| r.resource.as_str())
                    .collect();
                let mut s = format!(
                    "share {}, {} running, {} pending",
                    v.share, v.running, v.pending
                );
                if !backed.is_empty() {
                    let _ = write!(s, ", backed off on {}", backed.join(","));
                }
                s
            }
        };
    }
    String::new()
}

/// Builds spans as states come, one state at a time.
struct Builder {
    story: Story,
    open_devices: BTreeMap<GpuRef, DeviceSpan>,
    open_claims: BTreeMap<ClaimId, (ClaimState, ClaimSpan)>,
    open_backoffs: BTreeMap<(String, String), (BackoffSpan, Timestamp)>,
}

impl Builder {
    fn observe_holds(&mut self, state: &Snapshot, at: Timestamp) {
        let now = holds_of(state);
        let gone: Vec<GpuRef> = self
            .open_devices
            .keys()
            .filter(|g| !now.contains_key(*g))
            .cloned()
            .collect();
        for g in gone {
            if let Some(mut span) = self.open_devices.remove(&g) {
                span.to = at;
                self.close_device(g, span);
            }
        }
        for (gpu, (cordoned, health, holds)) in now {
            let same = self
                .open_devices
                .get(&gpu)
                .is_some_and(|s| s.cordoned == cordoned && s.health == health && s.holds == holds);
            if same {
                continue;
            }
            let fresh = DeviceSpan {
                from: at,
                to: at,
                cordoned,
                health,
                holds,
            };
            if let Some(mut old) = self.open_devices.insert(gpu.clone(), fresh) {
                old.to = at;
                self.close_device(gpu, old);
            }
        }
        self.observe_claims(state, at);
    }

    fn close_device(&mut self, gpu: GpuRef, span: DeviceSpan) {
        if span.to > span.from {
            self.story.devices.entry(gpu).or_default().push(span);
        }
    }

    fn observe_claims(&mut self, state: &Snapshot, at: Timestamp) {
        let mut seen = BTreeSet::new();
        for c in &state.claims {
            let devices: Vec<GpuRef> = match (&c.node, c.state) {
                (Some(node), ClaimState::Placed) => c
                    .shares
                    .iter()
                    .map(|s| GpuRef {
                        node: node.clone(),
                        index: s.device,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let weight = c
                .shares
                .iter()
                .map(|s| f64::from(s.compute.0) / f64::from(UNITS_PER_DEVICE))
                .sum();
            let span = ClaimSpan {
                from: at,
                to: at,
                devices,
                weight,
                pending_reasons: c.pending_reasons.clone(),
            };
            seen.insert(c.id);
            let entry = self.story.claims.entry(c.id).or_default();
            entry.project.clone_from(&c.project);
            entry.holder.clone_from(&c.holder);
            let same = self.open_claims.get(&c.id).is_some_and(|(st, s)| {
                *st == c.state
                    && s.devices == span.devices
                    && s.weight.to_bits() == weight.to_bits()
            });
            if same {
                // Pending reasons change often: keep the latest without a new span.
                if let Some((_, s)) = self.open_claims.get_mut(&c.id) {
                    s.pending_reasons = span.pending_reasons;
                }
                continue;
            }
            if let Some((st, old)) = self.open_claims.insert(c.id, (c.state, span)) {
                self.close_claim(c.id, st, old, at);
            }
        }
        let gone: Vec<ClaimId> = self
            .open_claims
            .keys()
            .filter(|id| !seen.contains(*id))
            .copied()
            .collect();
        for id in gone {
            if let Some((st, old)) = self.open_claims.remove(&id) {
                self.close_claim(id, st, old, at);
            }
        }
    }

    fn close_claim(&mut self, id: ClaimId, st: ClaimState, mut span: ClaimSpan, at: Timestamp) {
        span.to = at;
        if span.to <= span.from {
            return;
        }
        let story = self.story.claims.entry(id).or_default();
        match st {
            ClaimState::Placed => story.placed.push(span),
            ClaimState::Pending => story.pending.push(span),
        }
    }

    fn observe_backoffs(&mut self, state: &Snapshot, at: Timestamp) {
        let mut on = BTreeMap::new();
        for p in &state.projects {
            for r in &p.resources {
                if let Some(until) = r.backoff_until.filter(|u| *u > at) {
                    on.insert((p.name.clone(), r.resource.clone()), until);
                }
            }
        }
        let ended: Vec<(String, String)> = self
            .open_backoffs
            .keys()
            .filter(|k| !on.contains_key(*k))
            .cloned()
            .collect();
        for k in ended {
            if let Some((mut b, until)) = self.open_backoffs.remove(&k) {
                b.to = until.min(at);
                self.story.backoffs.push(b);
            }
        }
        for ((project, resource), until) in on {
            let key = (project.clone(), resource.clone());
            if let Some((_, u)) = self.open_backoffs.get_mut(&key) {
                *u = until;
            } else {
                let b = BackoffSpan {
                    project,
                    resource,
                    from: at,
                    to: at,
                    ongoing: false,
                };
                self.open_backoffs.insert(key, (b, until));
            }
        }
    }

    fn observe(&mut self, state: &Snapshot, at: Timestamp, holds_moved: bool) {
        if holds_moved {
            self.observe_holds(state, at);
        } else {
            // Cordons and health ride on nodes; projects and pending reasons on their own.
            self.observe_claims(state, at);
        }
        self.observe_backoffs(state, at);
    }

    fn finish(mut self, to: Timestamp) -> Story {
        for (gpu, mut span) in std::mem::take(&mut self.open_devices) {
            span.to = to;
            self.close_device(gpu, span);
        }
        for (id, (st, span)) in std::mem::take(&mut self.open_claims) {
            self.close_claim(id, st, span, to);
        }
        for (_, (mut b, until)) in std::mem::take(&mut self.open_backoffs) {
            b.ongoing = until > to;
            b.to = until.min(to);
            self.story.backoffs.push(b);
        }
        self.story
            .backoffs
            .sort_by(|a, b| (a.from, &a.project).cmp(&(b.from, &b.project)));
        self.story
    }
}

/// Replays `versions` (recorded after `from`, oldest first) onto `start` (the state at
/// `from`) up to `to`, into spans. Versions outside the window are skipped.
pub fn tell(start: &Snapshot, versions: &[Record], from: Timestamp, to: Timestamp) -> Story {
    let mut b = Builder {
        story: Story {
            from,
            to,
            ..Story::default()
        },
        open_devices: BTreeMap::new(),
        open_claims: BTreeMap::new(),
        open_backoffs: BTreeMap::new(),
    };
    let mut state = start.clone();
    b.observe(&state, from, true);
    for v in versions.iter().filter(|v| v.at > from && v.at <= to) {
        let before = v
            .changes
            .iter()
            .filter(|c| c.event.is_some())
            .map(|c| describe(&state, c))
            .collect::<Vec<_>>();
        match &v.body {
            Body::Keyframe { state: s } => state = (**s).clone(),
            Body::Delta { delta } => apply(&mut state, delta),
        }
        for (c, before) in v.changes.iter().filter(|c| c.event.is_some()).zip(before) {
            if let Some(e) = &c.event {
                b.story.actions.push(AuditedAction {
                    at: e.at,
                    actor: e.actor.clone(),
                    action: e.action.clone(),
                    target: e.target.clone(),
                    detail: e.detail.clone(),
                    before,
                    after: describe(&state, c),
                });
            }
        }
        b.observe(&state, v.at, moves_holds(&v.body));
    }
    b.finish(to)
}
