//! What changed between two recorded states, for people and for seeking: claims placed,
//! started, moved, ended; cordons; device health; nodes; shares and ledgers; each with the
//! GPUs, claim and project it touches, and the audit event behind it when there is one.

use std::collections::{BTreeMap, BTreeSet};

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::snapshot::{AuditEvent, ClaimState, ClaimView, DeviceView, ProjectView, Snapshot};
use crate::wire::history::{ChangeKind, GpuRef, HistoryChange, Target};

fn claim_gpus(c: &ClaimView) -> Vec<GpuRef> {
    let Some(node) = &c.node else {
        return Vec::new();
    };
    c.shares
        .iter()
        .map(|s| GpuRef {
            node: node.clone(),
            index: s.device,
        })
        .collect()
}

fn list(gpus: &[GpuRef]) -> String {
    let names: Vec<String> = gpus.iter().map(ToString::to_string).collect();
    names.join(",")
}

fn claim_change(
    at: Timestamp,
    version: u64,
    old: Option<&ClaimView>,
    new: &ClaimView,
) -> HistoryChange {
    let gpus = claim_gpus(new);
    let who = format!("claim {} ({})", new.id, new.project);
    let (kind, summary) = match (old, new.state) {
        (None, ClaimState::Placed) => (
            ChangeKind::ClaimPlaced,
            format!("{who} placed on {}", list(&gpus)),
        ),
        (None, ClaimState::Pending) => (ChangeKind::ClaimPending, format!("{who} waits")),
        (Some(o), ClaimState::Placed) if o.state == ClaimState::Pending => (
            ChangeKind::ClaimStarted,
            format!("{who} started on {}", list(&gpus)),
        ),
        (Some(o), _) if o.node != new.node || o.shares != new.shares => {
            let before = claim_gpus(o);
            (
                ChangeKind::ClaimMoved,
                format!("{who} moved from {} to {}", list(&before), list(&gpus)),
            )
        }
        (Some(_), _) => (ChangeKind::ClaimChanged, format!("{who} changed")),
    };
    let mut all = gpus;
    if let Some(o) = old {
        all.extend(claim_gpus(o));
    }
    all.sort();
    all.dedup();
    HistoryChange {
        at,
        version,
        kind,
        gpus: all,
        claim: Some(new.id),
        project: Some(new.project.clone()),
        summary,
        event: None,
    }
}

fn device_changes(
    at: Timestamp,
    version: u64,
    gpu: GpuRef,
    old: &DeviceView,
    new: &DeviceView,
    out: &mut Vec<HistoryChange>,
) {
    let change = |kind, summary: String| HistoryChange {
        at,
        version,
        kind,
        gpus: vec![gpu.clone()],
        claim: None,
        project: None,
        summary,
        event: None,
    };
    if old.cordoned != new.cordoned {
        let (kind, verb) = if new.cordoned {
            (ChangeKind::Cordoned, "cordoned")
        } else {
            (ChangeKind::Uncordoned, "uncordoned")
        };
        out.push(change(kind, format!("GPU {gpu} {verb}")));
    }
    if old.health != new.health
        || old.memory_capacity != new.memory_capacity
        || old.model != new.model
    {
        out.push(change(
            ChangeKind::DeviceChanged,
            format!("GPU {gpu} now {:?}", new.health).to_lowercase(),
        ));
    }
}

/// Whether a project's ledger changed in a way worth a line: a backoff began or ended,
/// eligibility flipped, or debts were cleared (not the steady accrual of debt).
fn ledger_moved(old: &ProjectView, new: &ProjectView) -> bool {
    let marks = |p: &ProjectView| -> Vec<_> {
        p.resources
            .iter()
            .map(|r| {
                (
                    r.resource.clone(),
                    r.backoff_until,
                    r.eligible,
                    r.debt == 0.0,
                )
            })
            .collect()
    };
    marks(old) != marks(new)
}

fn project_changes(
    at: Timestamp,
    version: u64,
    old: &[ProjectView],
    new: &[ProjectView],
    out: &mut Vec<HistoryChange>,
) {
    let before: BTreeMap<&str, &ProjectView> = old.iter().map(|p| (p.name.as_str(), p)).collect();
    for p in new {
        let change = |kind, summary: String| HistoryChange {
            at,
            version,
            kind,
            gpus: Vec::new(),
            claim: None,
            project: Some(p.name.clone()),
            summary,
            event: None,
        };
        match before.get(p.name.as_str()) {
            None => out.push(change(
                ChangeKind::ShareChanged,
                format!("project {} appears with share {}", p.name, p.share),
            )),
            Some(o) if o.share != p.share => out.push(change(
                ChangeKind::ShareChanged,
                format!("project {} share {} -> {}", p.name, o.share, p.share),
            )),
            Some(o) if ledger_moved(o, p) => out.push(change(
                ChangeKind::LedgerChanged,
                format!("project {} ledger: backoff or debts changed", p.name),
            )),
            Some(_) => {}
        }
    }
}

/// The target an audit event names (`claim 17`, `a:3`, `project vision`), if it is one.
fn event_target(e: &AuditEvent) -> Option<Target> {
    if let Some(id) = e.target.strip_prefix("claim ") {
        return id.parse().ok().map(|id: u64| Target::Claim(ClaimId(id)));
    }
    if let Some(p) = e.target.strip_prefix("project ") {
        return Some(Target::Project(p.to_string()));
    }
    e.target.parse().ok().map(Target::Gpu)
}

/// Whether `change` touches `target`.
pub fn touches(change: &HistoryChange, target: &Target) -> bool {
    match target {
        Target::Gpu(g) => change.gpus.contains(g),
        Target::Claim(id) => change.claim == Some(*id),
        Target::Project(p) => change.project.as_deref() == Some(p.as_str()),
    }
}

/// The keys a change is indexed under for seeking: `g:NODE:INDEX`, `c:ID`, `p:NAME`.
pub fn keys(change: &HistoryChange) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = change
        .gpus
        .iter()
        .map(|g| key(&Target::Gpu(g.clone())))
        .collect();
    if let Some(c) = change.claim {
        out.insert(key(&Target::Claim(c)));
    }
    if let Some(p) = &change.project {
        out.insert(key(&Target::Project(p.clone())));
    }
    out
}

/// The index key of a target.
pub fn key(target: &Target) -> String {
    match target {
        Target::Gpu(g) => format!("g:{g}"),
        Target::Claim(id) => format!("c:{id}"),
        Target::Project(p) => format!("p:{p}"),
    }
}

/// The changes from `old` (none: the first state recorded) to `new`, recorded at `at`.
pub fn between(old: Option<&Snapshot>, new: &Snapshot, at: Timestamp) -> Vec<HistoryChange> {
    // The first state recorded is where the history begins, not a change.
    let Some(base) = old else {
        return Vec::new();
    };
    let version = new.revision;
    let mut out = Vec::new();
    if base.endpoint != new.endpoint {
        out.push(HistoryChange {
            at,
            version,
            kind: ChangeKind::EndpointChanged,
            gpus: Vec::new(),
            claim: None,
            project: None,
            summary: format!("endpoint {} changed", new.endpoint.name),
            event: None,
        });
    }
    let old_nodes: BTreeMap<&str, _> = base.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let new_names: BTreeSet<&str> = new.nodes.iter().map(|n| n.name.as_str()).collect();
    for n in &new.nodes {
        let gpus_of = |n: &crate::snapshot::NodeView| {
            n.devices
                .iter()
                .map(|d| GpuRef {
                    node: n.name.clone(),
                    index: d.index,
                })
                .collect::<Vec<_>>()
        };
        let Some(o) = old_nodes.get(n.name.as_str()) else {
            out.push(HistoryChange {
                at,
                version,
                kind: ChangeKind::NodeAdded,
                gpus: gpus_of(n),
                claim: None,
                project: None,
                summary: format!("node {} added with {} GPUs", n.name, n.devices.len()),
                event: None,
            });
            continue;
        };
        for d in &n.devices {
            if let Some(od) = o.devices.iter().find(|x| x.index == d.index) {
                let gpu = GpuRef {
                    node: n.name.clone(),
                    index: d.index,
                };
                device_changes(at, version, gpu, od, d, &mut out);
            }
        }
    }
    for o in &base.nodes {
        if !new_names.contains(o.name.as_str()) {
            out.push(HistoryChange {
                at,
                version,
                kind: ChangeKind::NodeRemoved,
                gpus: Vec::new(),
                claim: None,
                project: None,
                summary: format!("node {} removed", o.name),
                event: None,
            });
        }
    }
    let old_claims: BTreeMap<ClaimId, &ClaimView> = base.claims.iter().map(|c| (c.id, c)).collect();
    let new_ids: BTreeSet<ClaimId> = new.claims.iter().map(|c| c.id).collect();
    for c in &new.claims {
        let o = old_claims.get(&c.id).copied();
        if o != Some(c) {
            out.push(claim_change(at, version, o, c));
        }
    }
    for c in &base.claims {
        if !new_ids.contains(&c.id) {
            out.push(HistoryChange {
                at,
                version,
                kind: ChangeKind::ClaimEnded,
                gpus: claim_gpus(c),
                claim: Some(c.id),
                project: Some(c.project.clone()),
                summary: format!("claim {} ({}) ended", c.id, c.project),
                event: None,
            });
        }
    }
    project_changes(at, version, &base.projects, &new.projects, &mut out);
    attach_events(base, new, at, &mut out);
    out
}

/// Hangs each new audit event on the change it explains (by target), or adds it alone.
fn attach_events(old: &Snapshot, new: &Snapshot, at: Timestamp, out: &mut Vec<HistoryChange>) {
    let seen = old.events.last().map_or(0, |e| e.revision);
    for e in new.events.iter().filter(|e| e.revision > seen) {
        let target = event_target(e);
        let explained = target.as_ref().and_then(|t| {
            out.iter_mut()
                .rev()
                .find(|c| c.event.is_none() && touches(c, t))
        });
        if let Some(c) = explained {
            c.summary = format!("{}: {} by {}", c.summary, e.detail, e.actor);
            c.event = Some(e.clone());
            continue;
        }
        let mut change = HistoryChange {
            at,
            version: e.revision,
            kind: ChangeKind::Event,
            gpus: Vec::new(),
            claim: None,
            project: None,
            summary: format!("{} {} by {}: {}", e.action, e.target, e.actor, e.detail),
            event: Some(e.clone()),
        };
        match target {
            Some(Target::Gpu(g)) => change.gpus.push(g),
            Some(Target::Claim(id)) => change.claim = Some(id),
            Some(Target::Project(p)) => change.project = Some(p),
            None => {}
        }
        out.push(change);
    }
}
