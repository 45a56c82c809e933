//! Scheduler behaviour end to end: placing, queueing, leases, the journal, moves and
//! work fetch across projects.

use super::*;
use crate::inventory::a100_node;
use crate::placement::MoveTarget;
use crate::units::Bytes;
use serde_json::json;

fn sched() -> Scheduler {
    Scheduler::new(SchedulerConfig::default(), vec![a100_node("a", 2)]).unwrap()
}

fn req(v: serde_json::Value) -> ClaimRequest {
    ClaimRequest::from_json(&v).unwrap()
}

const T0: Timestamp = Timestamp(1_000_000);

/// A scheduler restored from `changes` (its journal) applied the way a store would, over
/// the nodes `s` has; with the restore's warnings.
fn restart(s: &Scheduler, changes: Vec<Change>) -> (Scheduler, Vec<String>) {
    let mut p = Persisted::default();
    for c in changes {
        match c {
            Change::Claim(c) => {
                p.claims.retain(|x| x.id != c.id);
                p.claims.push(*c);
            }
            Change::ClaimRemoved(id) => p.claims.retain(|x| x.id != id),
            Change::Cordon {
                node,
                index,
                cordoned: true,
            } => p.cordoned.push((node, index)),
            Change::Cordon { .. } => {}
            Change::Share { project, share } => p.shares.push((project, share)),
            Change::Audit(e) => p.events.push(e),
            Change::Ledger(l) => p.ledger = Some(*l),
            Change::Counters { revision, next_id } => {
                p.revision = revision;
                p.next_id = next_id;
            }
        }
    }
    let node = NodeSpec {
        name: "a".into(),
        devices: s.fleet().nodes()[0]
            .devices
            .iter()
            .map(|d| d.spec.clone())
            .collect(),
        cpus: None,
    };
    Scheduler::restore(SchedulerConfig::default(), vec![node], p).unwrap()
}

#[test]
fn place_pend_refuse() {
    let mut s = sched();
    assert!(matches!(
        s.submit(req(json!({"nvidia.com/gpu": 2})), "op", T0),
        Submitted::Placed(_)
    ));
    assert!(matches!(
        s.submit(req(json!({"num_gpus": 0.5})), "op", T0),
        Submitted::Refused(_)
    ));
    let Submitted::Pending(p) = s.submit(req(json!({"num_gpus": 0.5, "wait": true})), "op", T0)
    else {
        panic!("expected pending")
    };
    assert_eq!(p.pending.as_ref().map(NoFit::lines).unwrap().len(), 1);
    assert!(
        matches!(s.submit(req(json!({"nvidia.com/gpu": 3, "wait": true})), "op", T0), Submitted::Refused(n) if n.infeasible)
    );
    s.release(ClaimId(1), "op", T0).unwrap();
    s.tick(T0, &|_| true);
    assert!(
        s.claim(p.id).unwrap().allocation.is_some(),
        "pending claim placed once capacity freed"
    );
    assert!(
        s.release(ClaimId(1), "op", T0).is_none(),
        "release is idempotent"
    );
}

#[test]
fn leases_and_owners() {
    let mut s = sched();
    s.submit(req(json!({"num_gpus": 0.5, "ttl": 60})), "op", T0);
    s.submit(req(json!({"num_gpus": 0.5, "pid": 4242})), "op", T0);
    s.tick(T0.plus_secs(30), &|_| true);
    s.renew(ClaimId(1), None, "op", T0.plus_secs(30)).unwrap();
    s.tick(T0.plus_secs(80), &|_| true);
    assert!(s.claim(ClaimId(1)).is_some(), "renewed lease still valid");
    s.tick(T0.plus_secs(91), &|pid| pid != 4242);
    assert!(s.claim(ClaimId(1)).is_none(), "expired");
    assert!(s.claim(ClaimId(2)).is_none(), "owner gone");
    let actions: Vec<_> = s
        .snapshot(T0)
        .events
        .iter()
        .map(|e| e.action.clone())
        .collect();
    assert!(
        actions.contains(&"expire".to_string()) && actions.contains(&"owner-gone".to_string()),
        "{actions:?}"
    );
    assert_eq!(
        s.fleet().node("a").unwrap().devices[0].memory_allocated,
        Bytes(0)
    );
    assert_eq!(
        s.renew(ClaimId(9), Some(5), "op", T0),
        Err(RenewError::UnknownClaim(ClaimId(9)))
    );
}

#[test]
fn a_renewal_never_shortens_a_lease_and_says_what_it_did() {
    let mut s = sched();
    s.submit(req(json!({"num_gpus": 0.5, "ttl": 3600})), "op", T0);
    let end = s.claim(ClaimId(1)).unwrap().lease_expires_at;
    // 54 minutes left, renewed for 100 s: kept, not cut to 100 s.
    let c = s
        .renew(ClaimId(1), Some(100), "op", T0.plus_secs(360))
        .unwrap();
    assert_eq!(c.lease_expires_at, end);
    assert_eq!(c.request.ttl, Some(3600));
    // Longer than what is left: renewed from now.
    let c = s
        .renew(ClaimId(1), Some(7200), "op", T0.plus_secs(360))
        .unwrap();
    assert_eq!(c.lease_expires_at, Some(T0.plus_secs(360 + 7200)));
    let details: Vec<String> = s
        .snapshot(T0)
        .events
        .iter()
        .filter(|e| e.action == "renew")
        .map(|e| e.detail.clone())
        .collect();
    assert_eq!(
        details,
        vec![
            "lease kept: it runs 3240 s more, past the 100 s asked".to_string(),
            "lease renewed: it ends in 7200 s".to_string()
        ]
    );
}

#[test]
fn journal_round_trips_through_persisted_state() {
    let mut s = sched();
    s.submit(
        req(json!({"gpu_memory": "10Gi", "project": "vision"})),
        "op",
        T0,
    );
    s.submit(req(json!({"nvidia.com/gpu": 2, "wait": true})), "op", T0);
    s.set_cordon("a", 1, true, "op", T0).unwrap();
    s.set_share("vision", 300, "op", T0).unwrap();
    let changes = s.take_changes();
    assert!(matches!(
        changes.last(),
        Some(Change::Counters {
            revision: 4,
            next_id: ClaimId(3)
        })
    ));
    assert!(s.take_changes().is_empty());
    let (mut r, warnings) = restart(&s, changes);
    assert!(warnings.is_empty(), "{warnings:?}");
    // Volatile reasons ("nothing fits since...") come back at the first tick.
    r.tick(T0, &|_| true);
    s.tick(T0, &|_| true);
    let (a, b) = (s.snapshot(T0), r.snapshot(T0));
    assert_eq!(a.claims, b.claims);
    assert_eq!(a.nodes, b.nodes);
    assert_eq!(a.revision, b.revision);
    assert_eq!(r.share("vision"), 300);
}

#[test]
fn moves_keep_the_id_and_are_audited() {
    let mut s = sched();
    s.submit(
        req(json!({"num_gpus": 0.5, "devices": [0], "project": "vision", "holder": "ann"})),
        "op",
        T0,
    );
    let c = s
        .move_claim(
            ClaimId(1),
            &MoveTarget {
                node: None,
                devices: Some(vec![1]),
            },
            "op",
            T0,
        )
        .unwrap();
    assert_eq!(c.allocation.unwrap().shares[0].device, 1);
    let last = s.snapshot(T0).events.last().cloned().unwrap();
    assert_eq!(
        last.detail,
        "moved from a:0 to a:1; project vision, holder ann"
    );
}

fn one_gpu() -> Scheduler {
    Scheduler::new(SchedulerConfig::default(), vec![a100_node("a", 1)]).unwrap()
}

#[test]
fn work_fetch_serves_the_project_that_is_owed_most() {
    let mut s = one_gpu();
    let whole = |p: &str| req(json!({"num_gpus": 1, "project": p, "wait": true}));
    assert!(matches!(
        s.submit(whole("a"), "op", T0),
        Submitted::Placed(_)
    ));
    let Submitted::Pending(b) = s.submit(whole("b"), "op", T0) else {
        panic!("b waits")
    };
    let Submitted::Pending(a2) = s.submit(whole("a"), "op", T0.plus_secs(1)) else {
        panic!("a waits")
    };
    // An hour of A holding the GPU while B waited: B is owed, A is not.
    s.tick(T0.plus_secs(3600), &|_| true);
    let snap = s.snapshot(T0.plus_secs(3600));
    let debt = |p: &str| {
        snap.projects
            .iter()
            .find(|x| x.name == p)
            .unwrap()
            .resources[0]
            .debt
    };
    assert!(
        debt("b") > 0.0 && debt("a") < 0.0,
        "a {} b {}",
        debt("a"),
        debt("b")
    );
    s.release(ClaimId(1), "op", T0.plus_secs(3600));
    s.tick(T0.plus_secs(3601), &|_| true);
    assert!(
        s.claim(b.id).unwrap().allocation.is_some(),
        "B, owed most, goes first"
    );
    assert!(s.claim(a2.id).unwrap().allocation.is_none());
    let pending = s
        .snapshot(T0.plus_secs(3601))
        .claim(a2.id)
        .cloned()
        .unwrap();
    assert!(
        !pending.pending_reasons.is_empty(),
        "a pending claim says why"
    );
}

#[test]
fn a_large_waiting_claim_does_not_hold_back_small_ones() {
    let mut s = sched();
    s.submit(
        req(json!({"num_gpus": 0.5, "devices": [0], "project": "x"})),
        "op",
        T0,
    );
    let Submitted::Pending(big) = s.submit(
        req(json!({"nvidia.com/gpu": 2, "project": "big", "wait": true})),
        "op",
        T0,
    ) else {
        panic!("two whole GPUs cannot fit while one is shared")
    };
    let small = s.submit(
        req(json!({"num_gpus": 0.25, "project": "small", "wait": true})),
        "op",
        T0.plus_secs(1),
    );
    assert!(matches!(small, Submitted::Placed(_)), "{small:?}");
    assert!(s.claim(big.id).unwrap().allocation.is_none());
}

#[test]
fn shares_and_resets_are_validated_and_survive_a_restart() {
    let mut s = one_gpu();
    assert!(
        s.set_share("a b", 10, "op", T0).is_err(),
        "bad project name"
    );
    assert!(
        s.set_share("a", 2_000_000, "op", T0).is_err(),
        "share above the maximum"
    );
    s.set_share("a", 300, "op", T0).unwrap();
    s.submit(req(json!({"num_gpus": 1, "project": "a"})), "op", T0);
    s.submit(
        req(json!({"num_gpus": 1, "project": "b", "wait": true})),
        "op",
        T0,
    );
    s.tick(T0.plus_secs(600), &|_| true);
    let before = s.snapshot(T0.plus_secs(600)).projects;
    let changes = s.take_changes();
    let (r, warnings) = restart(&s, changes);
    assert!(warnings.is_empty(), "{warnings:?}");
    let after = r.snapshot(T0.plus_secs(600)).projects;
    let debts = |v: &[crate::snapshot::ProjectView]| {
        v.iter()
            .map(|p| (p.name.clone(), p.share, p.resources[0].debt))
            .collect::<Vec<_>>()
    };
    assert_eq!(debts(&before), debts(&after));
    s.reset_project(Some("b"), "op", T0.plus_secs(600)).unwrap();
    let b = s
        .snapshot(T0.plus_secs(600))
        .projects
        .into_iter()
        .find(|p| p.name == "b")
        .unwrap();
    assert_eq!(b.resources[0].debt, 0.0);
    assert!(s.reset_project(Some("nobody"), "op", T0).is_err());
}

#[test]
fn a_waiting_claim_of_a_share_0_project_is_refused_naming_the_share_and_the_fix() {
    let mut s = sched();
    s.set_share("idle", 0, "op", T0).unwrap();
    // Both GPUs taken: a waiting claim would queue.
    assert!(matches!(
        s.submit(req(json!({"nvidia.com/gpu": 2})), "op", T0),
        Submitted::Placed(_)
    ));
    let before = s.claims().count();
    let Submitted::ShareZero(e) = s.submit(
        req(json!({"num_gpus": 0.5, "wait": true, "project": "idle"})),
        "op",
        T0,
    ) else {
        panic!("a share-0 project's claim was queued")
    };
    let text = e.to_string();
    assert!(
        text.contains("`idle` has share 0") && text.contains("project set idle --share"),
        "{text}"
    );
    assert_eq!(s.claims().count(), before, "nothing was queued");
    // Another project's waiting claim still queues; one that fits now is placed, share 0
    // or not (it takes only what is free).
    assert!(matches!(
        s.submit(req(json!({"num_gpus": 0.5, "wait": true})), "op", T0),
        Submitted::Pending(_)
    ));
    s.release(ClaimId(1), "op", T0).unwrap();
    assert!(matches!(
        s.submit(req(json!({"num_gpus": 0.5, "project": "idle"})), "op", T0),
        Submitted::Placed(_)
    ));
}
