//! Routing answers to flows: by the flow's id alone, with two flows in flight at once, an
//! answer for a flow that is over, and a claim sent again after a lost answer.

use crate::console::flows::{FlowId, MOVE_CLAIM, MoveAcross};
use crate::console::keymap::Keymap;
use crate::console::msg::{Asker, Effect, Msg};
use crate::console::state::{SourceSlot, State};
use crate::console::update::update;
use crate::fleet::Lost;
use crate::ids::ClaimId;
use crate::placement::AttemptId;
use crate::request::ClaimRequest;
use crate::sources::{Action, Failure, Outcome};

/// Three acting sources, `a`, `b` and `c`.
fn state() -> State {
    let slot = |n: &str| SourceSlot::new(n, "gpuboard".parse().unwrap(), true, None);
    State::new(
        vec![slot("a"), slot("b"), slot("c")],
        Keymap::builtin(),
        2_000,
        false,
    )
}

fn request(attempt: u32) -> ClaimRequest {
    let mut r = ClaimRequest::from_json(&serde_json::json!({"gpu_memory": "10Gi"})).unwrap();
    AttemptId::new(1, 1, attempt).put_on(&mut r.labels);
    r
}

/// A move of a's claim `id` to `target`, then `next`, under way in `st`: its flow id.
fn moving(st: &mut State, id: u64, target: usize, next: Vec<usize>) -> FlowId {
    let flow = st.flows.new_id();
    let chain = MoveAcross {
        move_id: format!("mv-{id}"),
        source: 0,
        id: ClaimId(id),
        from: "na:0".into(),
        request: request(u32::try_from(id).unwrap()),
        target,
        next,
        refused: Vec::new(),
        claimed: None,
        rechecking: None,
        suspects: Vec::new(),
    };
    st.flows.put(flow, crate::console::flows::Flow::Move(chain));
    flow
}

fn claim_of(st: &State, flow: FlowId) -> Action {
    Action::Claim {
        request: st.flows.move_across(flow).unwrap().request.clone(),
    }
}

/// The answer to the claim step of move `flow`, from `source`.
fn claim_answer(st: &State, flow: FlowId, source: usize, result: Result<Outcome, Failure>) -> Msg {
    Msg::Acted {
        source,
        action: claim_of(st, flow),
        asker: Asker::Flow {
            flow,
            step: MOVE_CLAIM,
        },
        result,
    }
}

#[test]
fn a_result_for_one_flow_never_changes_another() {
    let mut st = state();
    // Two moves in flight at once, both waiting on b's answer to the same kind of step.
    let one = moving(&mut st, 1, 1, vec![2]);
    let two = moving(&mut st, 2, 1, Vec::new());
    let before_two = st.flows.move_across(two).cloned();
    let msg = claim_answer(
        &st,
        one,
        1,
        Err(Failure::Refused("does not fit now".into())),
    );
    let out = update(&mut st, msg);
    // The first goes on to c, under its own id; the second is as it was.
    assert!(
        matches!(
            out.as_slice(),
            [Effect::Claim { source: 2, asker: Asker::Flow { flow, step: MOVE_CLAIM }, .. }]
                if *flow == one
        ),
        "{out:?}"
    );
    assert_eq!(st.flows.move_across(one).unwrap().target, 2);
    assert_eq!(st.flows.move_across(two).cloned(), before_two);
    // The second's refusal ends it alone.
    let before_one = st.flows.move_across(one).cloned();
    let msg = claim_answer(
        &st,
        two,
        1,
        Err(Failure::Refused("does not fit now".into())),
    );
    assert!(update(&mut st, msg).is_empty());
    assert!(
        st.flows.move_across(two).is_none(),
        "over: nothing else to try"
    );
    assert_eq!(st.flows.move_across(one).cloned(), before_one);
    assert_eq!(st.flows.len(), 1);
}

#[test]
fn a_result_whose_flow_is_over_is_logged_and_changes_nothing() {
    let mut st = state();
    let flow = moving(&mut st, 1, 1, Vec::new());
    let other = moving(&mut st, 2, 2, Vec::new());
    let answer = claim_answer(&st, flow, 1, Err(Failure::Refused("full".into())));
    update(&mut st, answer.clone());
    assert!(st.flows.move_across(flow).is_none());
    // The same answer again (a duplicate, or one for a flow cancelled meanwhile): said in
    // the log, and nothing else moves.
    let (flows, mode, flash, log) = (
        st.flows.clone(),
        st.mode.clone(),
        st.flash.clone(),
        st.log.len(),
    );
    assert!(update(&mut st, answer).is_empty());
    assert_eq!((&st.flows, &st.mode, &st.flash), (&flows, &mode, &flash));
    assert_eq!(st.log.len(), log + 1);
    let line = st.log.back().unwrap();
    assert!(
        line.starts_with("b: claim ")
            && line.ends_with(&format!("(for {flow}, which is over: nothing done)")),
        "{line}"
    );
    // A claim sent again for a flow that is over: the same.
    let recheck = Msg::Rechecked {
        source: 1,
        attempt: "x".into(),
        asker: Asker::Flow { flow, step: 0 },
        result: Err(Failure::Timeout(10)),
    };
    assert!(update(&mut st, recheck).is_empty());
    assert_eq!(&st.flows, &flows);
    assert!(st.flows.move_across(other).is_some());
}

#[test]
fn a_lost_answers_resend_keeps_its_flow_id() {
    let mut st = state();
    let flow = moving(&mut st, 1, 1, vec![2]);
    let other = moving(&mut st, 2, 2, Vec::new());
    let msg = claim_answer(&st, flow, 1, Err(Failure::Timeout(2_000)));
    let out = update(&mut st, msg);
    let [
        Effect::Recheck {
            source: 1,
            asker,
            attempt,
            ..
        },
    ] = out.as_slice()
    else {
        panic!("{out:?}")
    };
    assert_eq!(
        *asker,
        Asker::Flow {
            flow,
            step: MOVE_CLAIM
        },
        "the move's own id"
    );
    // Still silent: the next target, under the same id; b is a suspect of that move.
    let out = update(
        &mut st,
        Msg::Rechecked {
            source: 1,
            attempt: attempt.clone(),
            asker: *asker,
            result: Err(Failure::Timeout(2_000)),
        },
    );
    assert!(
        matches!(out.as_slice(), [Effect::Claim { source: 2, asker: Asker::Flow { flow: f, .. }, .. }] if *f == flow),
        "{out:?}"
    );
    assert_eq!(st.flows.move_across(flow).unwrap().suspects.len(), 1);
    // c refuses: the move is over; b, asked once more, is a flow of its own.
    let msg = claim_answer(&st, flow, 2, Err(Failure::Refused("full".into())));
    let out = update(&mut st, msg);
    let [
        Effect::Recheck {
            source: 1,
            asker: lost,
            ..
        },
    ] = out.as_slice()
    else {
        panic!("{out:?}")
    };
    let Asker::Flow { flow: lost, .. } = *lost else {
        panic!("{lost:?}")
    };
    assert!(st.flows.move_across(flow).is_none());
    let kept: Vec<&Lost> = st.flows.lost();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].endpoint, 1);
    // Its answer goes to it alone and ends it; the other move never moved.
    let before = st.flows.move_across(other).cloned();
    update(
        &mut st,
        Msg::Rechecked {
            source: 1,
            attempt: attempt.clone(),
            asker: Asker::Flow {
                flow: lost,
                step: 0,
            },
            result: Err(Failure::Refused("none here".into())),
        },
    );
    assert!(st.flows.lost().is_empty());
    assert_eq!(st.flows.move_across(other).cloned(), before);
    assert_eq!(st.flows.len(), 1);
}

#[test]
fn a_hand_overs_answer_goes_to_it_alone_beside_a_move() {
    use crate::console::flows::{Flow, HandoverRun, StepPlan};
    let mut st = state();
    let mv = moving(&mut st, 1, 1, vec![2]);
    let release = |id| Action::Release { id: ClaimId(id) };
    let steps = vec![
        StepPlan {
            source: 1,
            action: release(7),
        },
        StepPlan {
            source: 2,
            action: release(8),
        },
    ];
    let run = st.flows.start(Flow::Handover(HandoverRun::new(steps)));
    let before = st.flows.move_across(mv).cloned();
    // The hand-over's first step answered by b, the very source the move waits on.
    let out = update(
        &mut st,
        Msg::Acted {
            source: 1,
            action: release(7),
            asker: Asker::Flow { flow: run, step: 0 },
            result: Ok(Outcome::Released {
                id: ClaimId(7),
                place: None,
            }),
        },
    );
    assert!(
        out.contains(&Effect::Act {
            source: 2,
            action: release(8),
            asker: Asker::Flow { flow: run, step: 1 },
        }),
        "{out:?}"
    );
    assert_eq!(st.flows.handover().unwrap().1.current(), Some(1));
    assert_eq!(st.flows.move_across(mv).cloned(), before);
    // And the move's refusal moves the move alone.
    let msg = claim_answer(&st, mv, 1, Err(Failure::Refused("full".into())));
    update(&mut st, msg);
    assert_eq!(st.flows.move_across(mv).unwrap().target, 2);
    assert_eq!(st.flows.handover().unwrap().1.current(), Some(1));
}
