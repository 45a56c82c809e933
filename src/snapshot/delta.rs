//! Changes between two snapshots of one endpoint: what `GET /v1/watch?deltas=1` streams
//! after its first snapshot, so a console that is in sync receives only what changed, and
//! what the console applies to its copy. `apply(old, diff(old, new))` is `new` exactly.
//!
//! Nodes and claims change one at a time (whole, keyed by name or id); the lists that
//! change together (projects, resources, coordination records) are sent whole; audit
//! events are appended.

use std::collections::HashMap;
use std::hash::Hash;

use serde::{Deserialize, Serialize};

use super::{
    AuditEvent, ClaimView, CoordinationRecord, EndpointInfo, HostView, NodeView, ProjectView,
    ResourceView, Snapshot,
};
use crate::clock::Timestamp;
use crate::ids::ClaimId;

/// One change from a snapshot to the next.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// Every project's account.
    Projects {
        /// The projects.
        projects: Vec<ProjectView>,
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
}

/// The changes that turn `old` into `new`; empty when they are equal.
pub fn diff(old: &Snapshot, new: &Snapshot) -> Vec<SnapshotChange> {
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
    if old.projects != new.projects {
        out.push(SnapshotChange::Projects {
            projects: new.projects.clone(),
        });
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
        out.insert(
            0,
            SnapshotChange::Header {
                endpoint: new.endpoint.clone(),
                revision: new.revision,
                taken_at: new.taken_at,
            },
        );
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
            SnapshotChange::Projects { projects } => snap.projects.clone_from(projects),
            SnapshotChange::Resources { resources } => snap.resources.clone_from(resources),
            SnapshotChange::Coordination { records } => snap.coordination.clone_from(records),
            SnapshotChange::Host { host } => snap.host.clone_from(host),
            SnapshotChange::EventsAppended { events, keep } => {
                snap.events.extend(events.iter().cloned());
                let drop = snap.events.len().saturating_sub(*keep);
                snap.events.drain(..drop);
            }
            SnapshotChange::Events { events } => snap.events.clone_from(events),
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
