//! Changes between two snapshots of one endpoint: what `GET /v1/watch?deltas=1` streams
//! after its first snapshot, so a console that is in sync receives only what changed, and
//! what the console applies to its copy. `apply(old, diff(old, new))` is `new` exactly.
//!
//! Nodes, claims and projects change one at a time (whole, keyed by name or id); the
//! lists that change together (resources, coordination records) are sent whole; audit
//! events are appended. The header (who the endpoint is) is sent only when it changed;
//! otherwise a version that changed anything carries only its revision and time.
//!
//! Readers from before per-project changes and the short header know only the whole
//! project list and the whole header: [`diff_whole`] writes that form (what the history
//! records), and [`to_whole_lists`] turns a run of changes into it for them.

use std::collections::HashMap;
use std::hash::Hash;

use serde::Serialize;

use super::figures::{ClaimFigures, NodeFigures, apply_figures};
use super::{
    AuditEvent, ClaimView, CoordinationRecord, EndpointInfo, HostView, NodeView, ProjectView,
    ResourceView, Snapshot,
};
use crate::clock::Timestamp;
use crate::ids::ClaimId;

mod read;

/// One change from a snapshot to the next. Read in one pass, its tag first (`read`): the
/// derived reader of a tagged enum buffers each change whole before reading it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum SnapshotChange {
    /// Who produced the snapshot, its revision and when it was taken.
    Header {
        /// The endpoint.
        endpoint: EndpointInfo,
        /// Its revision.
        revision: u64,
        /// When the new snapshot was taken.
        taken_at: Timestamp,
    },
    /// A node, whole with its devices: replaces the node of that name, or is appended.
    Node {
        /// The node.
        node: NodeView,
    },
    /// The node of this name is gone.
    NodeRemoved {
        /// Its name.
        name: String,
    },
    /// Every node, in order (sent when their order changed).
    Nodes {
        /// The nodes.
        nodes: Vec<NodeView>,
    },
    /// A claim, whole: replaces the claim of that id, or is appended.
    Claim {
        /// The claim.
        claim: Box<ClaimView>,
    },
    /// The claim of this id is gone.
    ClaimRemoved {
        /// Its id.
        id: ClaimId,
    },
    /// Every claim, in order (sent when their order changed).
    Claims {
        /// The claims.
        claims: Vec<ClaimView>,
    },
    /// Every project's account (sent when their order changed, or to a reader that knows
    /// no per-project change).
    Projects {
        /// The projects.
        projects: Vec<ProjectView>,
    },
    /// A project's account, whole: replaces the project of that name, or is appended.
    Project {
        /// The project.
        project: ProjectView,
    },
    /// The project of this name is gone.
    ProjectRemoved {
        /// Its name.
        name: String,
    },
    /// The revision and time of a snapshot whose endpoint information did not change
    /// (the short `Header`).
    Revision {
        /// Its revision.
        revision: u64,
        /// When the new snapshot was taken.
        taken_at: Timestamp,
    },
    /// Every resource type.
    Resources {
        /// The resource types.
        resources: Vec<ResourceView>,
    },
    /// Every coordination-file record.
    Coordination {
        /// The records.
        records: Vec<CoordinationRecord>,
    },
    /// The host's CPU, memory and load.
    Host {
        /// The host, if known.
        host: Option<HostView>,
    },
    /// New audit events, oldest first; then the oldest are dropped until `keep` remain.
    EventsAppended {
        /// The new events.
        events: Vec<AuditEvent>,
        /// How many events the snapshot holds afterwards.
        keep: usize,
    },
    /// Every audit event (sent when the new ones do not follow the old ones).
    Events {
        /// The events.
        events: Vec<AuditEvent>,
    },
    /// New telemetry figures of devices and claims whose figures alone changed, as screens
    /// show them (only to readers of the third form: `super::figures`).
    Figures {
        /// When the devices were sampled, when not at the snapshot's time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<Timestamp>,
        /// Per node, its devices' figures.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        nodes: Vec<NodeFigures>,
        /// The claims' measured use.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        claims: Vec<ClaimFigures>,
    },
}

impl SnapshotChange {
    /// Whether this change, made to a snapshot at `revision`, brings what telemetry brings
    /// alone (`Snapshot::same_but_telemetry` leaves it out): figures, the host's, the time.
    /// A reader told so need not compare the snapshot with the last.
    pub fn telemetry_alone(&self, revision: u64) -> bool {
        match self {
            SnapshotChange::Figures { .. } | SnapshotChange::Host { .. } => true,
            SnapshotChange::Revision { revision: r, .. } => *r == revision,
            _ => false,
        }
    }
}

/// The changes that turn `old` into `new`; empty when they are equal. Projects change
/// one at a time and the header is short when only the revision and time moved.
pub fn diff(old: &Snapshot, new: &Snapshot) -> Vec<SnapshotChange> {
    diff_in(old, new, Form::Keyed)
}

/// As [`diff`], in the form every reader knows: the whole project list and the whole
/// header whenever they are sent.
pub fn diff_whole(old: &Snapshot, new: &Snapshot) -> Vec<SnapshotChange> {
    diff_in(old, new, Form::Whole)
}

/// Whether `change` is one that readers from before per-project changes cannot read.
pub fn keyed_only(change: &SnapshotChange) -> bool {
    matches!(
        change,
        SnapshotChange::Project { .. }
            | SnapshotChange::ProjectRemoved { .. }
            | SnapshotChange::Revision { .. }
    )
}

/// `changes` (a run of deltas' changes, in order, ending at `now`) in the whole-list form:
/// the per-project changes and short headers left out, and the whole project list and
/// header of `now` appended when any was. Both only ever replace what they change, so
/// applying the result gives the same state as applying `changes`.
pub fn to_whole_lists(changes: Vec<SnapshotChange>, now: &Snapshot) -> Vec<SnapshotChange> {
    let (mut projects, mut header) = (false, false);
    let mut out: Vec<SnapshotChange> = changes
        .into_iter()
        .filter(|c| {
            projects |= matches!(
                c,
                SnapshotChange::Project { .. } | SnapshotChange::ProjectRemoved { .. }
            );
            header |= matches!(c, SnapshotChange::Revision { .. });
            !keyed_only(c)
        })
        .collect();
    if projects {
        out.push(SnapshotChange::Projects {
            projects: now.projects.clone(),
        });
    }
    if header {
        out.push(SnapshotChange::Header {
            endpoint: now.endpoint.clone(),
            revision: now.revision,
            taken_at: now.taken_at,
        });
    }
    out
}

/// Which form a diff is written in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// Projects one by one, the short header.
    Keyed,
    /// Whole project lists and whole headers.
    Whole,
}

fn diff_in(old: &Snapshot, new: &Snapshot, form: Form) -> Vec<SnapshotChange> {
    let mut out = Vec::new();
    keyed(
        &old.nodes,
        &new.nodes,
        |n| n.name.clone(),
        |node| SnapshotChange::Node { node },
        |name| SnapshotChange::NodeRemoved { name },
        |nodes| SnapshotChange::Nodes { nodes },
        &mut out,
    );
    keyed(
        &old.claims,
        &new.claims,
        |c| c.id,
        |claim| SnapshotChange::Claim {
            claim: Box::new(claim),
        },
        |id| SnapshotChange::ClaimRemoved { id },
        |claims| SnapshotChange::Claims { claims },
        &mut out,
    );
    match form {
        Form::Keyed => keyed(
            &old.projects,
            &new.projects,
            |p| p.name.clone(),
            |project| SnapshotChange::Project { project },
            |name| SnapshotChange::ProjectRemoved { name },
            |projects| SnapshotChange::Projects { projects },
            &mut out,
        ),
        Form::Whole if old.projects != new.projects => out.push(SnapshotChange::Projects {
            projects: new.projects.clone(),
        }),
        Form::Whole => {}
    }
    if old.resources != new.resources {
        out.push(SnapshotChange::Resources {
            resources: new.resources.clone(),
        });
    }
    if old.coordination != new.coordination {
        out.push(SnapshotChange::Coordination {
            records: new.coordination.clone(),
        });
    }
    if old.host != new.host {
        out.push(SnapshotChange::Host {
            host: new.host.clone(),
        });
    }
    if old.events != new.events {
        out.push(events(&old.events, &new.events));
    }
    let header_changed = old.endpoint != new.endpoint
        || old.revision != new.revision
        || old.taken_at != new.taken_at;
    if header_changed || !out.is_empty() {
        let header = if form == Form::Keyed && old.endpoint == new.endpoint {
            SnapshotChange::Revision {
                revision: new.revision,
                taken_at: new.taken_at,
            }
        } else {
            SnapshotChange::Header {
                endpoint: new.endpoint.clone(),
                revision: new.revision,
                taken_at: new.taken_at,
            }
        };
        out.insert(0, header);
    }
    out
}

/// Per item for a list keyed by `key` whose order is kept (items removed, changed in
/// place, new ones appended); the whole list when the order changed otherwise.
fn keyed<T: Clone + PartialEq, K: Eq + Hash + Clone>(
    old: &[T],
    new: &[T],
    key: impl Fn(&T) -> K,
    upsert: impl Fn(T) -> SnapshotChange,
    removed: impl Fn(K) -> SnapshotChange,
    whole: impl Fn(Vec<T>) -> SnapshotChange,
    out: &mut Vec<SnapshotChange>,
) {
    if old == new {
        return;
    }
    let in_new: HashMap<K, &T> = new.iter().map(|t| (key(t), t)).collect();
    let in_old: HashMap<K, &T> = old.iter().map(|t| (key(t), t)).collect();
    // The order apply would give: old items still present, then new ones, in new's order.
    let kept = old.iter().filter(|t| in_new.contains_key(&key(t)));
    let added = new.iter().filter(|t| !in_old.contains_key(&key(t)));
    let same_order = kept.chain(added).map(&key).eq(new.iter().map(&key))
        && in_new.len() == new.len()
        && in_old.len() == old.len();
    if !same_order {
        out.push(whole(new.to_vec()));
        return;
    }
    for t in old {
        if !in_new.contains_key(&key(t)) {
            out.push(removed(key(t)));
        }
    }
    for t in new {
        if in_old.get(&key(t)).is_none_or(|o| *o != t) {
            out.push(upsert(t.clone()));
        }
    }
}

fn events(old: &[AuditEvent], new: &[AuditEvent]) -> SnapshotChange {
    let whole = || SnapshotChange::Events {
        events: new.to_vec(),
    };
    let Some(last) = old.last() else {
        return SnapshotChange::EventsAppended {
            events: new.to_vec(),
            keep: new.len(),
        };
    };
    // The old tail must be the new head, then the rest of new is what was appended.
    let Some(at) = new.iter().rposition(|e| e == last) else {
        return whole();
    };
    let head = &new[..=at];
    if head.len() > old.len() || old[old.len() - head.len()..] != *head {
        return whole();
    }
    SnapshotChange::EventsAppended {
        events: new[at + 1..].to_vec(),
        keep: new.len(),
    }
}

/// Applies `changes` (one delta, in order) to `snap`.
pub fn apply(snap: &mut Snapshot, changes: &[SnapshotChange]) {
    let mut nodes: Option<HashMap<String, usize>> = None;
    let mut claims: Option<HashMap<ClaimId, usize>> = None;
    let mut projects: Option<HashMap<String, usize>> = None;
    for change in changes {
        match change {
            SnapshotChange::Header {
                endpoint,
                revision,
                taken_at,
            } => {
                snap.endpoint.clone_from(endpoint);
                snap.revision = *revision;
                snap.taken_at = *taken_at;
            }
            SnapshotChange::Node { node } => {
                let index = nodes.get_or_insert_with(|| index_of(&snap.nodes, |n| n.name.clone()));
                upsert(&mut snap.nodes, index, node.name.clone(), node);
            }
            SnapshotChange::NodeRemoved { name } => {
                snap.nodes.retain(|n| n.name != *name);
                nodes = None;
            }
            SnapshotChange::Nodes { nodes: all } => {
                snap.nodes.clone_from(all);
                nodes = None;
            }
            SnapshotChange::Claim { claim } => {
                let index = claims.get_or_insert_with(|| index_of(&snap.claims, |c| c.id));
                upsert(&mut snap.claims, index, claim.id, claim);
            }
            SnapshotChange::ClaimRemoved { id } => {
                snap.claims.retain(|c| c.id != *id);
                claims = None;
            }
            SnapshotChange::Claims { claims: all } => {
                snap.claims.clone_from(all);
                claims = None;
            }
            SnapshotChange::Revision { revision, taken_at } => {
                snap.revision = *revision;
                snap.taken_at = *taken_at;
            }
            SnapshotChange::Projects { projects: all } => {
                snap.projects.clone_from(all);
                projects = None;
            }
            SnapshotChange::Project { project } => {
                let index =
                    projects.get_or_insert_with(|| index_of(&snap.projects, |p| p.name.clone()));
                upsert(&mut snap.projects, index, project.name.clone(), project);
            }
            SnapshotChange::ProjectRemoved { name } => {
                snap.projects.retain(|p| p.name != *name);
                projects = None;
            }
            SnapshotChange::Resources { resources } => snap.resources.clone_from(resources),
            SnapshotChange::Coordination { records } => snap.coordination.clone_from(records),
            SnapshotChange::Host { host } => snap.host.clone_from(host),
            SnapshotChange::EventsAppended { events, keep } => {
                snap.events.extend(events.iter().cloned());
                let drop = snap.events.len().saturating_sub(*keep);
                snap.events.drain(..drop);
            }
            SnapshotChange::Events { events } => snap.events.clone_from(events),
            SnapshotChange::Figures { at, nodes, claims } => {
                apply_figures(snap, *at, nodes, claims);
            }
        }
    }
}

fn index_of<T, K: Eq + Hash>(items: &[T], key: impl Fn(&T) -> K) -> HashMap<K, usize> {
    items.iter().enumerate().map(|(i, t)| (key(t), i)).collect()
}

fn upsert<T: Clone, K: Eq + Hash>(
    items: &mut Vec<T>,
    index: &mut HashMap<K, usize>,
    key: K,
    item: &T,
) {
    match index.get(&key) {
        Some(&i) if i < items.len() => items[i] = item.clone(),
        _ => {
            index.insert(key, items.len());
            items.push(item.clone());
        }
    }
}

#[cfg(test)]
mod tests;
