use proptest::prelude::*;

use super::*;
use crate::request::ClaimRequest;
use crate::snapshot::{ClaimState, DeviceView};
use crate::units::Bytes;

fn node(name: &str, devices: u32, cordoned: u32) -> NodeView {
    NodeView {
        name: name.to_string(),
        cpus_milli: None,
        cpus_allocated_milli: 0,
        devices: (0..devices)
            .map(|index| DeviceView {
                index,
                model: "NVIDIA A100".into(),
                cordoned: index < cordoned,
                memory_capacity: Some(Bytes::gib(40)),
                ..DeviceView::default()
            })
            .collect(),
    }
}

fn claim(id: u64, project: &str, node: Option<&str>) -> ClaimView {
    ClaimView {
        id: ClaimId(id),
        name: None,
        state: if node.is_some() {
            ClaimState::Placed
        } else {
            ClaimState::Pending
        },
        project: project.to_string(),
        holder: None,
        form: "gpu_memory=1GiB".into(),
        request: ClaimRequest::memory(Bytes::gib(1), project),
        node: node.map(str::to_string),
        shares: Vec::new(),
        memory_reserved: Bytes::gib(1),
        compute_reserved: crate::units::Units(0),
        memory_used: None,
        over_limit: false,
        idle: false,
        created_at: Timestamp(id),
        lease_expires_at: None,
        pending_reasons: Vec::new(),
        infeasible: false,
    }
}

fn event(revision: u64) -> AuditEvent {
    AuditEvent {
        revision,
        at: Timestamp(revision * 10),
        actor: "operator".into(),
        action: "claim".into(),
        target: format!("claim {revision}"),
        detail: String::new(),
    }
}

/// One thing that can happen to an endpoint's state between two snapshots.
#[derive(Clone, Debug)]
enum Op {
    AddNode(u8),
    RemoveNode(u8),
    Cordon(u8, u8),
    AddClaim(u8),
    RemoveClaim(u8),
    MoveClaim(u8, u8),
    ShuffleClaims,
    ShuffleNodes,
    Project(u8),
    OneProject(u8),
    Endpoint(u8),
    Events(u8),
    TrimEvents(u8),
    Host(u8),
    Tick,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<u8>().prop_map(Op::AddNode),
        any::<u8>().prop_map(Op::RemoveNode),
        (any::<u8>(), any::<u8>()).prop_map(|(n, d)| Op::Cordon(n, d)),
        any::<u8>().prop_map(Op::AddClaim),
        any::<u8>().prop_map(Op::RemoveClaim),
        (any::<u8>(), any::<u8>()).prop_map(|(c, n)| Op::MoveClaim(c, n)),
        Just(Op::ShuffleClaims),
        Just(Op::ShuffleNodes),
        any::<u8>().prop_map(Op::Project),
        any::<u8>().prop_map(Op::OneProject),
        any::<u8>().prop_map(Op::Endpoint),
        (1u8..5).prop_map(Op::Events),
        (0u8..8).prop_map(Op::TrimEvents),
        any::<u8>().prop_map(Op::Host),
        Just(Op::Tick),
    ]
}

fn step(s: &mut Snapshot, op: &Op) {
    let pick = |len: usize, k: u8| (len > 0).then(|| usize::from(k) % len);
    match *op {
        Op::AddNode(k) => {
            let name = format!("node-{k}");
            if !s.nodes.iter().any(|n| n.name == name) {
                s.nodes.push(node(&name, 1 + u32::from(k % 8), 0));
            }
        }
        Op::RemoveNode(k) => {
            if let Some(i) = pick(s.nodes.len(), k) {
                s.nodes.remove(i);
            }
        }
        Op::Cordon(k, d) => {
            if let Some(i) = pick(s.nodes.len(), k)
                && let Some(j) = pick(s.nodes[i].devices.len(), d)
            {
                let dev = &mut s.nodes[i].devices[j];
                dev.cordoned = !dev.cordoned;
            }
        }
        Op::AddClaim(k) => {
            let id = s.claims.iter().map(|c| c.id.0).max().unwrap_or(0) + 1;
            let node = pick(s.nodes.len(), k).map(|i| s.nodes[i].name.clone());
            s.claims
                .push(claim(id, &format!("p{}", k % 3), node.as_deref()));
        }
        Op::RemoveClaim(k) => {
            if let Some(i) = pick(s.claims.len(), k) {
                s.claims.remove(i);
            }
        }
        Op::MoveClaim(c, n) => {
            if let Some(i) = pick(s.claims.len(), c) {
                let to = pick(s.nodes.len(), n).map(|j| s.nodes[j].name.clone());
                s.claims[i].node = to;
            }
        }
        Op::ShuffleClaims => s.claims.reverse(),
        Op::ShuffleNodes => {
            let by = 1.min(s.nodes.len());
            s.nodes.rotate_left(by);
        }
        Op::Project(k) => {
            s.projects = (0..k % 4)
                .map(|p| ProjectView {
                    name: format!("p{p}"),
                    share: 100 + u32::from(k),
                    ..ProjectView::default()
                })
                .collect();
        }
        Op::OneProject(k) => {
            if let Some(i) = pick(s.projects.len(), k) {
                s.projects[i].running += 1;
            } else {
                s.projects.push(ProjectView {
                    name: format!("q{k}"),
                    ..ProjectView::default()
                });
            }
        }
        Op::Endpoint(k) => s.endpoint.name = format!("e{}", k % 3),
        Op::Events(n) => {
            let next = s.events.last().map_or(1, |e| e.revision + 1);
            s.events.extend((next..next + u64::from(n)).map(event));
            let drop = s.events.len().saturating_sub(6);
            s.events.drain(..drop);
        }
        Op::TrimEvents(n) => s.events.truncate(usize::from(n)),
        Op::Host(k) => {
            s.host = (k % 2 == 0).then(|| HostView {
                hostname: "h".into(),
                cores: Some(u32::from(k)),
                ..HostView::default()
            });
        }
        Op::Tick => {
            s.revision += 1;
            s.taken_at = s.taken_at.plus_millis(1000);
        }
    }
}

/// A delta goes over the wire as JSON: apply what the other side would read.
fn over_the_wire(changes: &[SnapshotChange]) -> Vec<SnapshotChange> {
    let text = serde_json::to_string(changes).unwrap();
    serde_json::from_str(&text).unwrap()
}

proptest! {
    #[test]
    fn deltas_carry_a_snapshot_to_the_next(ops in prop::collection::vec(prop::collection::vec(op(), 0..6), 1..12)) {
        let mut endpoint = Snapshot::default();
        let mut console = endpoint.clone();
        for batch in &ops {
            let before = endpoint.clone();
            for o in batch {
                step(&mut endpoint, o);
            }
            let changes = diff(&before, &endpoint);
            prop_assert_eq!(changes.is_empty(), before == endpoint);
            if changes.iter().all(|c| c.telemetry_alone(before.revision)) {
                prop_assert!(before.same_but_telemetry(&endpoint), "{:?}", changes);
            }
            apply(&mut console, &over_the_wire(&changes));
            prop_assert_eq!(&console, &endpoint);
        }
    }

    /// What an old reader gets: each delta whole-listed, or a run of them collapsed into
    /// one by `to_whole_lists`, with nothing it cannot read; both give the same state.
    #[test]
    fn the_whole_list_forms_carry_a_snapshot_to_the_next(ops in prop::collection::vec(prop::collection::vec(op(), 0..6), 1..12)) {
        let start = Snapshot::default();
        let mut endpoint = start.clone();
        let mut each = start.clone();
        let mut run = Vec::new();
        for batch in &ops {
            let before = endpoint.clone();
            for o in batch {
                step(&mut endpoint, o);
            }
            let whole = diff_whole(&before, &endpoint);
            prop_assert!(!whole.iter().any(keyed_only));
            apply(&mut each, &over_the_wire(&whole));
            prop_assert_eq!(&each, &endpoint);
            run.extend(diff(&before, &endpoint));
        }
        let collapsed = to_whole_lists(run, &endpoint);
        prop_assert!(!collapsed.iter().any(keyed_only));
        let mut old_reader = start;
        apply(&mut old_reader, &over_the_wire(&collapsed));
        prop_assert_eq!(&old_reader, &endpoint);
    }
}

#[test]
fn a_changed_project_travels_alone_under_a_short_header() {
    let old = Snapshot {
        projects: (0..50)
            .map(|i| ProjectView {
                name: format!("p{i}"),
                ..ProjectView::default()
            })
            .collect(),
        ..Snapshot::default()
    };
    let mut new = old.clone();
    new.projects[7].running = 3;
    new.revision = 4;
    let changes = diff(&old, &new);
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert_eq!(
        serde_json::to_value(&changes[0]).unwrap(),
        serde_json::json!({"op": "revision", "revision": 4, "taken_at": 0})
    );
    assert!(matches!(&changes[1], SnapshotChange::Project { project } if project.name == "p7"));
    // The form old readers know: the whole list and the whole header.
    let whole = diff_whole(&old, &new);
    assert!(matches!(
        &whole[0],
        SnapshotChange::Header { revision: 4, .. }
    ));
    assert!(matches!(&whole[1], SnapshotChange::Projects { projects } if projects.len() == 50));
}

#[test]
fn a_changed_claim_travels_alone() {
    let old = Snapshot {
        nodes: (0..100).map(|i| node(&format!("n{i}"), 8, 0)).collect(),
        claims: (1..=1000).map(|i| claim(i, "p", Some("n1"))).collect(),
        ..Snapshot::default()
    };
    let mut new = old.clone();
    new.claims[500].node = Some("n2".into());
    new.revision = 1;
    let changes = diff(&old, &new);
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert!(matches!(&changes[1], SnapshotChange::Claim { claim } if claim.id == ClaimId(501)));
    let mut got = old;
    apply(&mut got, &changes);
    assert_eq!(got, new);
}

#[test]
fn events_are_appended_not_resent() {
    let old = Snapshot {
        events: (1..=5).map(event).collect(),
        ..Snapshot::default()
    };
    let mut new = old.clone();
    new.events.remove(0);
    new.events.push(event(6));
    let changes = diff(&old, &new);
    assert_eq!(
        changes[1],
        SnapshotChange::EventsAppended {
            events: vec![event(6)],
            keep: 5
        }
    );
}

#[test]
fn the_wire_form_names_each_change() {
    let c = SnapshotChange::ClaimRemoved { id: ClaimId(7) };
    assert_eq!(
        serde_json::to_value(&c).unwrap(),
        serde_json::json!({"op": "claim_removed", "id": 7})
    );
}
