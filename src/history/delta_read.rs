//! Reading a recorded delta's `SnapshotChange`s in one pass. The enum is internally tagged
//! (`{"op": "node", "node": {...}}`): serde's derived reader first copies each whole change
//! into a buffer to find its tag, then reads the change again from that buffer, which made
//! reading a day of versions the largest part of a report. serde writes the tag first, so
//! this reads the tag, then the variant's fields straight from the JSON; a change whose tag
//! is not first (not written by serde) is still read, the slow way.

use std::fmt;

use serde::de::value::MapAccessDeserializer;
use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::snapshot::{
    AuditEvent, ClaimView, CoordinationRecord, EndpointInfo, HostView, NodeView, ProjectView,
    ResourceView, SnapshotChange,
};

/// A list of changes, as [`Vec<SnapshotChange>`] deserializes, read in one pass.
pub struct DeltaChanges(pub Vec<SnapshotChange>);

impl<'de> Deserialize<'de> for DeltaChanges {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<DeltaChanges, D::Error> {
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = DeltaChanges;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of snapshot changes")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DeltaChanges, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(c) = seq.next_element_seed(One)? {
                    out.push(c);
                }
                Ok(DeltaChanges(out))
            }
        }
        d.deserialize_seq(List)
    }
}

/// One change.
struct One;

impl<'de> DeserializeSeed<'de> for One {
    type Value = SnapshotChange;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<SnapshotChange, D::Error> {
        d.deserialize_map(self)
    }
}

/// The tags, as `SnapshotChange` names them.
#[derive(Deserialize)]
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

impl<'de> Visitor<'de> for One {
    type Value = SnapshotChange;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a snapshot change")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SnapshotChange, A::Error> {
        let Some(first) = map.next_key::<String>()? else {
            return Err(A::Error::missing_field("op"));
        };
        if first != "op" {
            return slow(first, map);
        }
        let op: Op = map.next_value()?;
        let rest = MapAccessDeserializer::new(map);
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
        })
    }
}

/// A change whose tag is not its first field: gathered whole, then read as serde does.
fn slow<'de, A: MapAccess<'de>>(first: String, mut map: A) -> Result<SnapshotChange, A::Error> {
    let mut all = serde_json::Map::new();
    all.insert(first, map.next_value()?);
    while let Some((k, v)) = map.next_entry::<String, serde_json::Value>()? {
        all.insert(k, v);
    }
    SnapshotChange::deserialize(serde_json::Value::Object(all)).map_err(A::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ClaimRequest;
    use crate::snapshot::{ClaimState, DeviceView};
    use crate::units::{Bytes, Units};

    fn claim(id: u64) -> ClaimView {
        ClaimView {
            id: ClaimId(id),
            name: None,
            state: ClaimState::Placed,
            project: "vision".into(),
            holder: Some("ana".into()),
            form: "gpu_memory=1GiB".into(),
            request: ClaimRequest::memory(Bytes::gib(1), "vision"),
            node: Some("a".into()),
            shares: Vec::new(),
            memory_reserved: Bytes::gib(1),
            compute_reserved: Units(2_500),
            memory_used: None,
            over_limit: false,
            idle: false,
            created_at: Timestamp(id),
            lease_expires_at: Some(Timestamp(9)),
            pending_reasons: Vec::new(),
            infeasible: false,
        }
    }

    /// One change of every kind.
    fn every_kind() -> Vec<SnapshotChange> {
        let node = NodeView {
            name: "a".into(),
            devices: vec![DeviceView {
                index: 0,
                model: "NVIDIA A100".into(),
                memory_capacity: Some(Bytes::gib(40)),
                ..DeviceView::default()
            }],
            ..NodeView::default()
        };
        let project = ProjectView {
            name: "vision".into(),
            share: 2,
            ..ProjectView::default()
        };
        let event = AuditEvent {
            revision: 3,
            at: Timestamp(30),
            actor: "operator".into(),
            action: "claim".into(),
            target: "claim 3".into(),
            detail: "placed".into(),
        };
        vec![
            SnapshotChange::Header {
                endpoint: EndpointInfo {
                    name: "lab".into(),
                    ..EndpointInfo::default()
                },
                revision: 7,
                taken_at: Timestamp(70),
            },
            SnapshotChange::Node { node: node.clone() },
            SnapshotChange::NodeRemoved { name: "b".into() },
            SnapshotChange::Nodes { nodes: vec![node] },
            SnapshotChange::Claim {
                claim: Box::new(claim(3)),
            },
            SnapshotChange::ClaimRemoved { id: ClaimId(2) },
            SnapshotChange::Claims {
                claims: vec![claim(3), claim(4)],
            },
            SnapshotChange::Projects {
                projects: vec![project.clone()],
            },
            SnapshotChange::Project { project },
            SnapshotChange::ProjectRemoved { name: "nlp".into() },
            SnapshotChange::Revision {
                revision: 8,
                taken_at: Timestamp(80),
            },
            SnapshotChange::Resources {
                resources: vec![ResourceView::default()],
            },
            SnapshotChange::Coordination {
                records: vec![CoordinationRecord::default()],
            },
            SnapshotChange::Host {
                host: Some(HostView::default()),
            },
            SnapshotChange::Host { host: None },
            SnapshotChange::EventsAppended {
                events: vec![event.clone()],
                keep: 200,
            },
            SnapshotChange::Events {
                events: vec![event],
            },
        ]
    }

    #[test]
    fn every_kind_of_change_reads_as_the_derived_reader_reads_it() {
        let changes = every_kind();
        let json = serde_json::to_vec(&changes).unwrap();
        let derived: Vec<SnapshotChange> = serde_json::from_slice(&json).unwrap();
        let fast: DeltaChanges = serde_json::from_slice(&json).unwrap();
        assert_eq!(derived, changes);
        assert_eq!(fast.0, changes);
    }

    #[test]
    fn a_change_whose_tag_is_not_first_is_still_read() {
        let json = r#"[{"revision": 8, "taken_at": 80, "op": "revision"},
            {"name": "b", "op": "node_removed"}, {"op": "claim_removed", "id": 2}]"#;
        let fast: DeltaChanges = serde_json::from_str(json).unwrap();
        assert_eq!(
            fast.0,
            [
                SnapshotChange::Revision {
                    revision: 8,
                    taken_at: Timestamp(80)
                },
                SnapshotChange::NodeRemoved { name: "b".into() },
                SnapshotChange::ClaimRemoved { id: ClaimId(2) },
            ]
        );
    }

    #[test]
    fn a_damaged_change_is_an_error_naming_what_is_wrong() {
        for (json, says) in [
            (r#"[{"op": "teleport"}]"#, "unknown variant"),
            (r#"[{"op": "node_removed"}]"#, "missing field `name`"),
            (r"[{}]", "missing field `op`"),
            (r#"[{"name": "b"}]"#, "missing field `op`"),
        ] {
            let err = serde_json::from_str::<DeltaChanges>(json).err().unwrap();
            assert!(err.to_string().contains(says), "{json}: {err}");
        }
    }
}
