use super::*;
use crate::request::ClaimRequest;
use crate::snapshot::figures::DeviceFigures;
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

fn figures(index: u32) -> DeviceFigures {
    DeviceFigures {
        index,
        utilization_gpu: Some(87),
        utilization_memory: None,
        temperature_c: Some(61),
        power_w: Some(312),
        clock_sm_mhz: Some(1_410),
        clock_memory_mhz: None,
        fan_pct: None,
        memory_used_mib: Some(30_210),
        processes_short_mib: vec![Some(0), None, Some(-3)],
        unclaimed_mib: Some(0),
        utilization_samples: vec![80, 87],
        history_len: Some(60),
    }
}

/// One change of every kind (the figures change with and without its optional parts).
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
        SnapshotChange::Figures {
            at: Some(Timestamp(81)),
            nodes: vec![NodeFigures {
                name: "a".into(),
                devices: vec![figures(0), figures(3)],
            }],
            claims: vec![ClaimFigures {
                id: ClaimId(3),
                memory_beyond_mib: Some(12),
                over_limit: true,
                idle: false,
            }],
        },
        SnapshotChange::Figures {
            at: None,
            nodes: Vec::new(),
            claims: Vec::new(),
        },
    ]
}

/// `change` as the endpoint writes it, its tag moved from first to last.
fn tag_last(change: &SnapshotChange) -> String {
    let json = serde_json::to_string(change).unwrap();
    let tag_end = json.find(',').unwrap_or(json.len() - 1);
    let (tag, rest) = (&json[1..tag_end], &json[tag_end..json.len() - 1]);
    match rest.strip_prefix(',') {
        Some(fields) => format!("{{{fields},{tag}}}"),
        None => format!("{{{tag}}}"),
    }
}

#[test]
fn every_kind_of_change_round_trips_through_the_wire_form() {
    for change in every_kind() {
        let json = serde_json::to_string(&change).unwrap();
        assert!(
            json.starts_with("{\"op\":"),
            "the endpoint writes the tag first: {json}"
        );
        let read: SnapshotChange = serde_json::from_str(&json).unwrap();
        assert_eq!(read, change, "{json}");
        // Read from a JSON value too (what a caller holding one does).
        let value = serde_json::to_value(&change).unwrap();
        assert_eq!(
            serde_json::from_value::<SnapshotChange>(value).unwrap(),
            change
        );
    }
    let all = every_kind();
    let read: Vec<SnapshotChange> =
        serde_json::from_slice(&serde_json::to_vec(&all).unwrap()).unwrap();
    assert_eq!(read, all);
}

#[test]
fn a_change_whose_tag_is_not_first_is_still_read() {
    for change in every_kind() {
        let json = tag_last(&change);
        assert!(
            !json.starts_with("{\"op\":") || json == "{\"op\":\"figures\"}",
            "{json}"
        );
        let read: SnapshotChange = serde_json::from_str(&json).unwrap();
        assert_eq!(read, change, "{json}");
    }
    let json = r#"[{"revision": 8, "taken_at": 80, "op": "revision"},
        {"name": "b", "op": "node_removed"}, {"op": "claim_removed", "id": 2}]"#;
    let read: Vec<SnapshotChange> = serde_json::from_str(json).unwrap();
    assert_eq!(
        read,
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
fn unknown_fields_are_skipped_as_before() {
    for json in [
        r#"{"op": "node_removed", "name": "b", "why": {"a": [1, 2]}}"#,
        r#"{"why": 3, "name": "b", "op": "node_removed"}"#,
    ] {
        let read: SnapshotChange = serde_json::from_str(json).unwrap();
        assert_eq!(read, SnapshotChange::NodeRemoved { name: "b".into() });
    }
}

#[test]
fn a_damaged_change_is_an_error_naming_what_is_wrong() {
    for (json, says) in [
        (
            r#"[{"op": "teleport"}]"#,
            "unknown variant `teleport`, expected one of",
        ),
        (
            r#"[{"id": 2, "op": "teleport"}]"#,
            "unknown variant `teleport`",
        ),
        (r#"[{"op": "node_removed"}]"#, "missing field `name`"),
        (r#"[{"name": 3, "op": "node_removed"}]"#, "invalid type"),
        (r"[{}]", "missing field `op`"),
        (r#"[{"name": "b"}]"#, "missing field `op`"),
        (r#"[{"op": 4}]"#, "expected"),
        (r"[[1]]", "a snapshot change"),
    ] {
        let err = serde_json::from_str::<Vec<SnapshotChange>>(json)
            .err()
            .unwrap();
        assert!(err.to_string().contains(says), "{json}: {err}");
    }
}
