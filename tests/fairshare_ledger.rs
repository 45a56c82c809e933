//! The ledger's hooks and work fetch, driven directly with a data-driven fit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use gpuboard::clock::Timestamp;
use gpuboard::fairshare::{
    ClearCause, EventKind, FairShareError, Ledger, LedgerConfig, PendingClaim, Placed, ProjectName,
    ResourceDemand, ResourceId, ResourceType, Share, TimestampExt, WaitReason,
};
use gpuboard::ids::ClaimId;
use gpuboard::units::Units;
use rand::SeedableRng;
use rand::rngs::StdRng;

fn gpu() -> ResourceId {
    ResourceId::gpu("NVIDIA A100").unwrap()
}

fn name(s: &str) -> ProjectName {
    ProjectName::new(s).unwrap()
}

fn claim(id: u64, project: &str, units: u32) -> PendingClaim {
    PendingClaim {
        id: ClaimId(id),
        project: name(project),
        demand: vec![ResourceDemand {
            resource: gpu(),
            units: Units(units),
        }],
        expected_duration: Some(Duration::from_mins(10)),
        submitted: Timestamp(0),
        form: None,
    }
}

/// Two A100s; `free` units of them are free (one device's worth at most fits one claim).
fn ledger() -> Ledger {
    let mut ledger = Ledger::new(LedgerConfig::default()).unwrap();
    ledger.set_resource(Timestamp(0), ResourceType::new(gpu(), 2));
    ledger
}

fn at(secs: u64) -> Timestamp {
    Timestamp::from_secs(secs)
}

fn backoffs(ledger: &mut Ledger) -> Vec<(String, f64)> {
    ledger
        .drain_events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::BackedOff {
                project,
                interval_s,
                ..
            } => Some((project.to_string(), interval_s)),
            _ => None,
        })
        .collect()
}

/// A placed claim holding a whole device, so one device stays free.
fn occupy_one(ledger: &mut Ledger) {
    let placed = Placed {
        id: ClaimId(999),
        project: name("other"),
        resource: gpu(),
        units: Units(10_000),
        expected_duration: None,
    };
    ledger.placed(at(0), placed).unwrap();
}

#[test]
fn a_large_claim_that_does_not_fit_does_not_block_smaller_ones_of_others() {
    let mut ledger = ledger();
    let mut rng = StdRng::seed_from_u64(3);
    occupy_one(&mut ledger);
    // "big" sorts first on ties, so it is asked first; its 2-GPU claim does not fit one free GPU.
    ledger.submit(at(0), claim(1, "big", 20_000)).unwrap();
    ledger.submit(at(0), claim(2, "small", 5_000)).unwrap();
    let mut fit =
        |c: &PendingClaim, _: &ResourceId, units: Units| units.0 <= 10_000 && c.id != ClaimId(999);
    let fetch = ledger.work_fetch(at(0), &mut fit, &mut rng).unwrap();
    assert_eq!(fetch.claim, ClaimId(2));
    assert_eq!(fetch.project, name("small"));
    assert_eq!(backoffs(&mut ledger), vec![("big".to_string(), 600.0)]);
    let view = ledger.view(at(0));
    let big = view
        .projects
        .iter()
        .find(|p| p.name == name("big"))
        .unwrap();
    assert!(
        matches!(big.resources[0].reason, WaitReason::BackedOff { .. }),
        "{:?}",
        big.resources[0].reason
    );
    assert!(
        !big.resources[0].accrue,
        "D(big, gpu) goes false when backed off with nothing running"
    );
    let why = ledger.why_pending(at(0), ClaimId(1)).unwrap();
    assert!(matches!(why[0].1, WaitReason::BackedOff { .. }));
}

#[test]
fn when_nothing_of_anyones_fits_nobody_is_backed_off() {
    let mut ledger = ledger();
    let mut rng = StdRng::seed_from_u64(3);
    occupy_one(&mut ledger);
    ledger.submit(at(0), claim(1, "a", 20_000)).unwrap();
    ledger.submit(at(0), claim(2, "b", 20_000)).unwrap();
    let mut fit = |_: &PendingClaim, _: &ResourceId, units: Units| units.0 <= 10_000;
    assert!(ledger.work_fetch(at(0), &mut fit, &mut rng).is_none());
    assert!(backoffs(&mut ledger).is_empty());
    let why = ledger.why_pending(at(0), ClaimId(1)).unwrap();
    assert_eq!(why[0].1, WaitReason::NothingFits { since: at(0) });
}

#[test]
fn backoff_doubles_caps_clears_on_new_claim_placement_and_clock_going_back() {
    let mut ledger = ledger();
    let mut rng = StdRng::seed_from_u64(11);
    occupy_one(&mut ledger);
    ledger.submit(at(0), claim(1, "big", 20_000)).unwrap();
    let mut fit = |_: &PendingClaim, _: &ResourceId, units: Units| units.0 <= 10_000;
    // Big waits long enough to be owed more than anyone, so it is asked first each
    // round (a backed-off project stops accruing, D false, but keeps its debt).
    let mut now = 10_000;
    ledger.tick(at(now));
    // Each round, a small claim of another project fits while big's does not.
    let mut seen = Vec::new();
    for round in 0..10u64 {
        ledger
            .submit(at(now), claim(100 + round, "small", 1_000))
            .unwrap();
        let fetch = ledger.work_fetch(at(now), &mut fit, &mut rng).unwrap();
        assert_eq!(fetch.project, name("small"));
        for (project, interval) in backoffs(&mut ledger) {
            assert_eq!(project, "big");
            seen.push(interval);
        }
        ledger.released(at(now), fetch.claim);
        // Wait until the backoff is over.
        let wake = ledger.next_wakeup(at(now)).unwrap();
        let left = wake.since(at(now)).as_secs_f64();
        let interval = *seen.last().unwrap();
        assert!(
            left >= 0.5 * interval - 0.01 && left <= 1.5 * interval + 0.01,
            "{left} for {interval}"
        );
        now = wake.0.div_ceil(1000);
    }
    assert_eq!(
        seen,
        vec![
            600.0, 1_200.0, 2_400.0, 4_800.0, 9_600.0, 19_200.0, 38_400.0, 76_800.0, 86_400.0,
            86_400.0
        ]
    );

    // A new claim the type could serve clears it and sets D.
    ledger.submit(at(now), claim(500, "small", 1_000)).unwrap();
    ledger.work_fetch(at(now), &mut fit, &mut rng).unwrap();
    assert_eq!(backoffs(&mut ledger).len(), 1);
    ledger.submit(at(now), claim(2, "big", 10_000)).unwrap();
    let cleared: Vec<_> = ledger.drain_events().into_iter().map(|e| e.kind).collect();
    assert!(cleared.iter().any(|k| matches!(
        k,
        EventKind::BackoffCleared {
            cause: ClearCause::NewClaim,
            ..
        }
    )));
    let big = ledger
        .view(at(now))
        .projects
        .into_iter()
        .find(|p| p.name == name("big"))
        .unwrap();
    assert!(big.resources[0].accrue && big.resources[0].backoff_until.is_none());

    // Placement clears it.
    ledger.submit(at(now), claim(501, "small2", 1_000)).unwrap();
    let mut only_small = |c: &PendingClaim, _: &ResourceId, _: Units| c.project != name("big");
    ledger
        .work_fetch(at(now), &mut only_small, &mut rng)
        .unwrap();
    assert_eq!(backoffs(&mut ledger).len(), 1);
    let placed = Placed {
        id: ClaimId(2),
        project: name("big"),
        resource: gpu(),
        units: Units(10_000),
        expected_duration: None,
    };
    ledger.placed(at(now), placed).unwrap();
    let kinds: Vec<_> = ledger.drain_events().into_iter().map(|e| e.kind).collect();
    assert!(kinds.iter().any(|k| matches!(
        k,
        EventKind::BackoffCleared {
            cause: ClearCause::Placed,
            ..
        }
    )));

    ledger.released(at(now), ClaimId(2));

    // A clock that goes backwards clears every backoff.
    ledger.submit(at(now), claim(502, "small3", 1_000)).unwrap();
    ledger
        .work_fetch(at(now), &mut only_small, &mut rng)
        .unwrap();
    assert_eq!(backoffs(&mut ledger).len(), 1);
    assert!(ledger.next_wakeup(at(now)).is_some());
    ledger.tick(at(now - 5));
    assert!(ledger.next_wakeup(at(now - 5)).is_none());
    assert!(
        ledger
            .drain_events()
            .iter()
            .any(|e| matches!(e.kind, EventKind::ClockWentBack { .. }))
    );
}

#[test]
fn share_zero_gets_no_work_and_says_so() {
    let mut ledger = ledger();
    let mut rng = StdRng::seed_from_u64(1);
    ledger.set_share(at(0), &name("idle"), Share::new(0).unwrap());
    ledger.submit(at(0), claim(1, "idle", 1_000)).unwrap();
    let mut fit = |_: &PendingClaim, _: &ResourceId, _: Units| true;
    assert!(ledger.work_fetch(at(0), &mut fit, &mut rng).is_none());
    assert_eq!(
        ledger.why_pending(at(0), ClaimId(1)).unwrap()[0].1,
        WaitReason::ShareZero
    );
}

#[test]
fn debt_accrues_toward_targets_and_resets() {
    let mut ledger = ledger();
    ledger.submit(at(0), claim(1, "a", 10_000)).unwrap();
    ledger.submit(at(0), claim(2, "b", 10_000)).unwrap();
    ledger.submit(at(0), claim(3, "b", 10_000)).unwrap();
    // b holds both GPUs for 100 s while a waits: targets are 1 each.
    for id in [2, 3] {
        let placed = Placed {
            id: ClaimId(id),
            project: name("b"),
            resource: gpu(),
            units: Units(10_000),
            expected_duration: None,
        };
        ledger.placed(at(0), placed).unwrap();
    }
    ledger.tick(at(100));
    let view = ledger.view(at(100));
    let debt = |p: &str| {
        view.projects
            .iter()
            .find(|v| v.name == name(p))
            .unwrap()
            .resources[0]
            .debt
            .0
    };
    assert!((debt("a") - 100.0).abs() < 1e-6, "{}", debt("a"));
    assert!((debt("b") + 100.0).abs() < 1e-6, "{}", debt("b"));
    ledger.reset(at(100), Some(&name("a"))).unwrap();
    let view = ledger.view(at(100));
    assert_eq!(
        view.projects
            .iter()
            .find(|v| v.name == name("a"))
            .unwrap()
            .resources[0]
            .debt
            .0,
        0.0
    );
    assert!(matches!(
        ledger.reset(at(100), Some(&name("nobody"))),
        Err(FairShareError::UnknownProject(_))
    ));
}

#[test]
fn state_survives_a_round_trip() {
    let mut ledger = ledger();
    let mut rng = StdRng::seed_from_u64(5);
    occupy_one(&mut ledger);
    ledger.submit(at(0), claim(1, "big", 20_000)).unwrap();
    ledger.submit(at(0), claim(2, "small", 5_000)).unwrap();
    ledger.submit(at(1), claim(3, "small", 5_000)).unwrap();
    let mut fit = |_: &PendingClaim, _: &ResourceId, units: Units| units.0 <= 10_000;
    ledger.work_fetch(at(10), &mut fit, &mut rng).unwrap();
    ledger.tick(at(50));
    let state = ledger.state();
    let json = serde_json::to_string(&state).unwrap();
    let restored = Ledger::from_state(
        LedgerConfig::default(),
        serde_json::from_str(&json).unwrap(),
    )
    .unwrap();
    assert_eq!(restored.state(), state);
    assert_eq!(restored.view(at(50)).projects, ledger.view(at(50)).projects);

    let mut broken = state.clone();
    broken.projects.push(broken.projects[0].clone());
    let err = Ledger::from_state(LedgerConfig::default(), broken).unwrap_err();
    assert!(err.to_string().contains("appears twice"), "{err}");
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let mut ledger = ledger();
    ledger.submit(at(0), claim(1, "a", 5_000)).unwrap();
    let before = ledger.state();
    assert!(matches!(
        ledger.submit(at(0), claim(1, "a", 5_000)),
        Err(FairShareError::DuplicateClaim(_))
    ));
    assert!(matches!(
        ledger.submit(at(0), claim(2, "a", 30_000)),
        Err(FairShareError::NeverFits(_))
    ));
    let mut unknown = claim(3, "a", 1);
    unknown.demand[0].resource = ResourceId::cpu();
    let err = ledger.submit(at(0), unknown).unwrap_err();
    assert!(err.to_string().contains("it has: gpu:NVIDIA A100"), "{err}");
    let mismatch = Placed {
        id: ClaimId(1),
        project: name("b"),
        resource: gpu(),
        units: Units(5_000),
        expected_duration: None,
    };
    assert!(matches!(
        ledger.placed(at(0), mismatch),
        Err(FairShareError::ProjectMismatch { .. })
    ));
    assert_eq!(ledger.state(), before);
    assert!(ledger.released(at(0), ClaimId(1)));
    assert!(!ledger.released(at(0), ClaimId(1)));
}
