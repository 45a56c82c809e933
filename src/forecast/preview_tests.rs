//! Preview equals outcome: over random states and actions, what the preview says follows
//! at once (placements and where, stranded claims, debts after the step) is what the
//! scheduler does when the action is then applied the way the endpoint applies it (the
//! action, then its next tick).

use proptest::prelude::*;
use rand::rngs::StdRng as Rng;
use rand::{RngExt, SeedableRng};
use serde_json::json;

use super::preview::{debts, placed_by, preview, stranded};
use super::*;
use crate::inventory::a100_node;
use crate::request::ClaimRequest;
use crate::scheduler::SchedulerConfig;
use crate::wire::forecast::PreviewAction;

const PROJECTS: [&str; 3] = ["vision", "nlp", "speech"];

fn random_request(rng: &mut Rng) -> ClaimRequest {
    let mut v = match rng.random_range(0..4) {
        0 => json!({"num_gpus": 0.5}),
        1 => json!({"num_gpus": 1}),
        2 => json!({"nvidia.com/gpu": 2}),
        _ => json!({"gpu_memory": "15Gi"}),
    };
    v["project"] = json!(PROJECTS[rng.random_range(0..3) as usize]);
    v["wait"] = json!(rng.random_range(0..5) != 0);
    if rng.random_range(0..2) == 0 {
        v["expected_duration"] = json!(60 + rng.random_range(0..3_600));
    }
    if rng.random_range(0..4) == 0 {
        v["ttl"] = json!(30 + rng.random_range(0..600));
    }
    ClaimRequest::from_json(&v).unwrap()
}

/// A random state: claims submitted, released and ticked over a while, some cordons and
/// shares.
fn random_state(rng: &mut Rng) -> (Scheduler, Timestamp) {
    let mut s = Scheduler::new(
        SchedulerConfig {
            seed: rng.random_range(0..1_000),
            ..SchedulerConfig::default()
        },
        vec![a100_node("a", 3), a100_node("b", 3)],
    )
    .unwrap();
    let mut now = Timestamp(1_000_000_000);
    for _ in 0..(5 + rng.random_range(0..30)) {
        now = now.plus_secs(rng.random_range(0..300));
        match rng.random_range(0..10) {
            0..6 => {
                s.submit(random_request(rng), "t", now);
            }
            6 => {
                let id = ClaimId(1 + rng.random_range(0..30));
                s.release(id, "t", now);
            }
            7 => {
                let node = ["a", "b"][rng.random_range(0..2) as usize];
                let _ = s.set_cordon(
                    node,
                    rng.random_range(0..3) as u32,
                    rng.random_range(0..3) != 0,
                    "t",
                    now,
                );
            }
            8 => {
                let p = PROJECTS[rng.random_range(0..3) as usize];
                let _ = s.set_share(p, 50 + rng.random_range(0..200) as u32, "t", now);
            }
            _ => s.tick(now, &|_| true),
        }
    }
    s.take_changes();
    (s, now.plus_secs(rng.random_range(0..30)))
}

fn random_action(rng: &mut Rng, s: &Scheduler) -> PreviewAction {
    let some_claim = || {
        let ids: Vec<ClaimId> = s.claims().map(|c| c.id).collect();
        ids
    };
    let ids = some_claim();
    let pick = |rng: &mut Rng| {
        if ids.is_empty() {
            ClaimId(1)
        } else {
            ids[rng.random_range(0..ids.len() as u64) as usize]
        }
    };
    let node = |rng: &mut Rng| ["a", "b"][rng.random_range(0..2) as usize].to_string();
    match rng.random_range(0..7) {
        0 => PreviewAction::Release { claim: pick(rng) },
        1 => PreviewAction::Move {
            claim: pick(rng),
            node: Some(node(rng)),
            devices: None,
        },
        2 => PreviewAction::Cordon {
            node: node(rng),
            index: rng.random_range(0..3) as u32,
        },
        3 => PreviewAction::Uncordon {
            node: node(rng),
            index: rng.random_range(0..3) as u32,
        },
        4 => PreviewAction::Share {
            project: PROJECTS[rng.random_range(0..3) as usize].to_string(),
            share: rng.random_range(0..300) as u32,
        },
        5 => PreviewAction::Reset {
            project: (rng.random_range(0..2) == 0)
                .then(|| PROJECTS[rng.random_range(0..3) as usize].to_string()),
        },
        _ => PreviewAction::Claim {
            request: Box::new(random_request(rng)),
        },
    }
}

/// The action as the endpoint applies it: the scheduler's method, then its next tick.
fn apply_for_real(s: &mut Scheduler, action: &PreviewAction, now: Timestamp) -> bool {
    let ok = match action {
        PreviewAction::Release { claim } => s.release(*claim, "t", now).is_some(),
        PreviewAction::Move {
            claim,
            node,
            devices,
        } => s
            .move_claim(
                *claim,
                &PreviewAction::move_target(node.clone(), devices.clone()),
                "t",
                now,
            )
            .is_ok(),
        PreviewAction::Cordon { node, index } => s.set_cordon(node, *index, true, "t", now).is_ok(),
        PreviewAction::Uncordon { node, index } => {
            s.set_cordon(node, *index, false, "t", now).is_ok()
        }
        PreviewAction::Share { project, share } => s.set_share(project, *share, "t", now).is_ok(),
        PreviewAction::Reset { project } => s.reset_project(project.as_deref(), "t", now).is_ok(),
        PreviewAction::Claim { request } => !matches!(
            s.submit((**request).clone(), "t", now),
            crate::scheduler::Submitted::Refused(_) | crate::scheduler::Submitted::ShareZero(_)
        ),
    };
    if ok {
        s.tick(now, &|_| true);
    }
    ok
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_preview_is_what_then_happens(seed in 1u64..) {
        let mut rng = Rng::seed_from_u64(seed);
        let (mut s, now) = random_state(&mut rng);
        let action = random_action(&mut rng, &s);
        let holds = HoldTimes::default();
        let before = forecast(&s, now, &holds);
        let p = preview(&s, &action, &holds, "t", now);
        let ok = apply_for_real(&mut s, &action, now);
        prop_assert_eq!(ok, p.refused.is_none(), "{:?}: {:?}", action, p.refused);
        if !ok {
            return Ok(());
        }
        prop_assert_eq!(&placed_by(&s.take_changes()), &p.placed, "{:?}", action);
        let after = forecast(&s, now, &holds);
        prop_assert_eq!(stranded(&before, &after), p.stranded.clone(), "{:?}", action);
        let step: Vec<(String, f64)> = p.debts.iter().map(|d| (d.project.clone(), d.after_step)).collect();
        let real: Vec<(String, f64)> = debts(&s.ledger_view(now)).into_iter().collect();
        prop_assert_eq!(step, real, "{:?}", action);
        if let Some(new) = &p.new_claim
            && let Some(a) = s.claim(new.claim).and_then(|c| c.allocation.as_ref())
        {
            // Placed by the step: the preview says where, starting now.
            prop_assert_eq!(Some(&a.node), new.node.as_ref());
            prop_assert_eq!(new.start.map(|b| b.p50), Some(now));
        }
    }
}
