//! Reading a `SnapshotChange` in one pass. The change is internally tagged (`{"op":
//! "node", "node": {...}}`), and serde's derived reader for such an enum first copies the
//! whole change into a buffer to find its tag, then reads it again from that buffer: for
//! a console watching a hundred busy hosts that copy was a fifth of its CPU. The endpoint
//! (serde) writes the tag first, so this reads the tag, then the variant's fields straight
//! from the input. A change whose tag is not first (not written by serde) is still read,
//! by gathering it whole first; the bytes on the wire are the same either way.

use std::fmt;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::SnapshotChange;
use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::snapshot::figures::{ClaimFigures, NodeFigures};
use crate::snapshot::{
    AuditEvent, ClaimView, CoordinationRecord, EndpointInfo, HostView, NodeView, ProjectView,
    ResourceView,
};

impl<'de> Deserialize<'de> for SnapshotChange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SnapshotChange, D::Error> {
        d.deserialize_map(ChangeVisitor)
    }
}

/// The tags, as `SnapshotChange` names them (an unknown one is serde's `unknown variant`
/// error, listing these).
#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Op {
    Header,
    Node,
    NodeRemoved,
    Nodes,
    Claim,
    ClaimRemoved,
    Claims,
    Projects,
    Project,
    ProjectRemoved,
    Revision,
    Resources,
    Coordination,
    Host,
    EventsAppended,
    Events,
    Figures,
}

// Each variant's fields, as the derived reader reads them (unknown fields ignored).
#[derive(Deserialize)]
struct HeaderF {
    endpoint: EndpointInfo,
    revision: u64,
    taken_at: Timestamp,
}
#[derive(Deserialize)]
struct NodeF {
    node: NodeView,
}
#[derive(Deserialize)]
struct NameF {
    name: String,
}
#[derive(Deserialize)]
struct NodesF {
    nodes: Vec<NodeView>,
}
#[derive(Deserialize)]
struct ClaimF {
    claim: Box<ClaimView>,
}
#[derive(Deserialize)]
struct IdF {
    id: ClaimId,
}
#[derive(Deserialize)]
struct ClaimsF {
    claims: Vec<ClaimView>,
}
#[derive(Deserialize)]
struct ProjectsF {
    projects: Vec<ProjectView>,
}
#[derive(Deserialize)]
struct ProjectF {
    project: ProjectView,
}
#[derive(Deserialize)]
struct RevisionF {
    revision: u64,
    taken_at: Timestamp,
}
#[derive(Deserialize)]
struct ResourcesF {
    resources: Vec<ResourceView>,
}
#[derive(Deserialize)]
struct CoordinationF {
    records: Vec<CoordinationRecord>,
}
#[derive(Deserialize)]
struct HostF {
    host: Option<HostView>,
}
#[derive(Deserialize)]
struct AppendedF {
    events: Vec<AuditEvent>,
    keep: usize,
}
#[derive(Deserialize)]
struct EventsF {
    events: Vec<AuditEvent>,
}
#[derive(Deserialize)]
struct FiguresF {
    #[serde(default)]
    at: Option<Timestamp>,
    #[serde(default)]
    nodes: Vec<NodeFigures>,
    #[serde(default)]
    claims: Vec<ClaimFigures>,
}

/// The change of tag `op` from the rest of its fields (`rest`, a map without the tag).
fn fields<'de, D: Deserializer<'de>>(op: Op, rest: D) -> Result<SnapshotChange, D::Error> {
    Ok(match op {
        Op::Header => {
            let f = HeaderF::deserialize(rest)?;
            SnapshotChange::Header {
                endpoint: f.endpoint,
                revision: f.revision,
                taken_at: f.taken_at,
            }
        }
        Op::Node => SnapshotChange::Node {
            node: NodeF::deserialize(rest)?.node,
        },
        Op::NodeRemoved => SnapshotChange::NodeRemoved {
            name: NameF::deserialize(rest)?.name,
        },
        Op::Nodes => SnapshotChange::Nodes {
            nodes: NodesF::deserialize(rest)?.nodes,
        },
        Op::Claim => SnapshotChange::Claim {
            claim: ClaimF::deserialize(rest)?.claim,
        },
        Op::ClaimRemoved => SnapshotChange::ClaimRemoved {
            id: IdF::deserialize(rest)?.id,
        },
        Op::Claims => SnapshotChange::Claims {
            claims: ClaimsF::deserialize(rest)?.claims,
        },
        Op::Projects => SnapshotChange::Projects {
            projects: ProjectsF::deserialize(rest)?.projects,
        },
        Op::Project => SnapshotChange::Project {
            project: ProjectF::deserialize(rest)?.project,
        },
        Op::ProjectRemoved => SnapshotChange::ProjectRemoved {
            name: NameF::deserialize(rest)?.name,
        },
        Op::Revision => {
            let f = RevisionF::deserialize(rest)?;
            SnapshotChange::Revision {
                revision: f.revision,
                taken_at: f.taken_at,
            }
        }
        Op::Resources => SnapshotChange::Resources {
            resources: ResourcesF::deserialize(rest)?.resources,
        },
        Op::Coordination => SnapshotChange::Coordination {
            records: CoordinationF::deserialize(rest)?.records,
        },
        Op::Host => SnapshotChange::Host {
            host: HostF::deserialize(rest)?.host,
        },
        Op::EventsAppended => {
            let f = AppendedF::deserialize(rest)?;
            SnapshotChange::EventsAppended {
                events: f.events,
                keep: f.keep,
            }
        }
        Op::Events => SnapshotChange::Events {
            events: EventsF::deserialize(rest)?.events,
        },
        Op::Figures => {
            let f = FiguresF::deserialize(rest)?;
            SnapshotChange::Figures {
                at: f.at,
                nodes: f.nodes,
                claims: f.claims,
            }
        }
    })
}

/// A change's first key: the tag, or another field (kept, for the slow way).
enum FirstKey {
    Op,
    Other(String),
}

impl<'de> Deserialize<'de> for FirstKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FirstKey, D::Error> {
        struct Key;
        impl Visitor<'_> for Key {
            type Value = FirstKey;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<FirstKey, E> {
                Ok(if v == "op" {
                    FirstKey::Op
                } else {
                    FirstKey::Other(v.to_string())
                })
            }
        }
        d.deserialize_identifier(Key)
    }
}

struct ChangeVisitor;

impl<'de> Visitor<'de> for ChangeVisitor {
    type Value = SnapshotChange;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a snapshot change (an object with its `op` and fields)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SnapshotChange, A::Error> {
        match map.next_key::<FirstKey>()? {
            None => Err(A::Error::missing_field("op")),
            Some(FirstKey::Op) => {
                let op: Op = map.next_value()?;
                fields(op, MapAccessDeserializer::new(map))
            }
            Some(FirstKey::Other(first)) => slow(first, map),
        }
    }
}

/// A change whose tag is not its first field: gathered whole, then its tag taken out and
/// its fields read as above.
fn slow<'de, A: MapAccess<'de>>(first: String, mut map: A) -> Result<SnapshotChange, A::Error> {
    let mut all = serde_json::Map::new();
    all.insert(first, map.next_value()?);
    while let Some((k, v)) = map.next_entry::<String, serde_json::Value>()? {
        all.insert(k, v);
    }
    let Some(op) = all.remove("op") else {
        return Err(A::Error::missing_field("op"));
    };
    let op = Op::deserialize(op).map_err(A::Error::custom)?;
    fields(op, serde_json::Value::Object(all)).map_err(A::Error::custom)
}

#[cfg(test)]
mod tests;
