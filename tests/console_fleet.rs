//! The console's move picker and claim form over a fleet of sources, through the pure
//! `update`: the picker lists the GPUs a claim fits on first and follows j/k, a claim on
//! two devices moves to two devices, and the claim form previews across every acting
//! source and sends the claim where the preview says.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use gpuboard::clock::Timestamp;
use gpuboard::console::flows::FlowId;
use gpuboard::console::keymap::Keymap;
use gpuboard::console::msg::{Asker, Effect, Msg};
use gpuboard::console::state::{FormStage, Mode, SourceSlot, State, View};
use gpuboard::console::update::{show_view, update};
use gpuboard::ids::ClaimId;
use gpuboard::placement::{
    DeviceSpec, MoveTarget, NodeSpec, Policy, RECHECK_WITHIN, RESOLVE_WITHIN,
};
use gpuboard::request::ClaimRequest;
use gpuboard::scheduler::{Scheduler, SchedulerConfig};
use gpuboard::snapshot::Snapshot;
use gpuboard::sources::{Action, Failure, Outcome};
use gpuboard::units::Bytes;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde_json::json;

const NOW: Timestamp = Timestamp(1_709_294_400_000);

fn k(c: char) -> Msg {
    Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
}
fn code(c: KeyCode) -> Msg {
    Msg::Key(KeyEvent::new(c, KeyModifiers::NONE))
}
/// Each message in turn, as the driver delivers them: an answer built by `answer` or
/// `rechecked` gets, when it is delivered, who its send named.
fn run(st: &mut State, msgs: Vec<Msg>) -> Vec<Effect> {
    let mut effects = Vec::new();
    for mut m in msgs {
        match &mut m {
            Msg::Acted {
                source,
                action,
                asker,
                ..
            } if *asker == FROM_THE_SEND => *asker = asker_of(*source, format!("{action:?}")).0,
            Msg::Rechecked {
                source,
                attempt,
                asker,
                ..
            } if *asker == FROM_THE_SEND => {
                *asker = asker_of(*source, format!("recheck {attempt}")).0;
            }
            _ => {}
        }
        let out = update(st, m);
        ASKERS.with(|a| a.borrow_mut().extend(out.iter().filter_map(sent)));
        effects.extend(out);
    }
    effects
}

/// In an answer built before its send: who the send named, filled in by `run` (flow ids
/// start at 1).
const FROM_THE_SEND: Asker = Asker::Flow {
    flow: FlowId(0),
    step: usize::MAX,
};

thread_local! {
    /// Who each send named, as the driver keeps it to hand back with the answer: by
    /// source and what was sent (the action, or `recheck ATTEMPT`), with its move id.
    static ASKERS: RefCell<HashMap<Sent, (Asker, Option<String>)>> =
        RefCell::new(HashMap::new());
}

/// A send in `ASKERS`: its source and what was sent.
type Sent = (usize, String);

/// A send's key in `ASKERS`, and who it names (with its move id).
fn sent(e: &Effect) -> Option<(Sent, (Asker, Option<String>))> {
    match e {
        Effect::Act {
            source,
            action,
            asker,
        } => Some(((*source, format!("{action:?}")), (*asker, None))),
        Effect::ActInMove {
            source,
            action,
            move_id,
            asker,
        } => Some((
            (*source, format!("{action:?}")),
            (*asker, Some(move_id.clone())),
        )),
        Effect::Claim {
            source,
            request,
            move_id,
            asker,
            ..
        } => {
            let action = Action::Claim {
                request: request.clone(),
            };
            Some(((*source, format!("{action:?}")), (*asker, move_id.clone())))
        }
        Effect::Recheck {
            source,
            attempt,
            move_id,
            asker,
            ..
        } => Some((
            (*source, format!("recheck {attempt}")),
            (*asker, move_id.clone()),
        )),
        _ => None,
    }
}

/// Who the last send of `what` to `source` named (and its move id).
fn asker_of(source: usize, what: String) -> (Asker, Option<String>) {
    ASKERS
        .with(|a| a.borrow().get(&(source, what.clone())).cloned())
        .unwrap_or_else(|| panic!("nothing sent to {source}: {what}"))
}

/// A source's snapshot: node `node` with `gpus` 40 GiB GPUs and these claims placed.
fn snapshot(name: &str, node: &str, gpus: u32, claims: &[serde_json::Value]) -> Snapshot {
    let nodes = vec![NodeSpec {
        name: node.to_string(),
        devices: (0..gpus)
            .map(|index| DeviceSpec {
                index,
                model: "NVIDIA A100-SXM4-40GB".to_string(),
                uuid: None,
                memory: Some(Bytes::gib(40)),
                link_group: None,
            })
            .collect(),
        cpus: None,
    }];
    let config = SchedulerConfig {
        name: name.into(),
        kind: "gpuboard".into(),
        policy: Policy::Binpack,
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(config, nodes).unwrap();
    for c in claims {
        s.submit(ClaimRequest::from_json(c).unwrap(), "operator", NOW);
    }
    s.snapshot(NOW)
}

/// A console over these sources (all acting), each fetched once.
fn console(sources: Vec<(&str, Snapshot)>) -> State {
    let mut st = State::new(
        sources
            .iter()
            .map(|(n, _)| SourceSlot::new(n, "gpuboard".parse().unwrap(), true, None))
            .collect(),
        Keymap::builtin(),
        2_000,
        false,
    );
    let _ = update(&mut st, Msg::Tick(NOW));
    for (i, (_, snap)) in sources.into_iter().enumerate() {
        st.sources[i].in_flight = true;
        let _ = update(
            &mut st,
            Msg::Fetched {
                source: i,
                at: NOW,
                result: Ok(snap.into()),
            },
        );
    }
    st
}

fn picker(st: &State) -> (Vec<String>, usize) {
    let Mode::Move(m) = &st.mode else {
        panic!("no picker: {:?}", st.mode)
    };
    (
        m.targets
            .iter()
            .map(|r| {
                if r.any {
                    "any".to_string()
                } else {
                    format!(
                        "{}:{}{}",
                        r.node,
                        r.index,
                        if r.fits { "" } else { " full" }
                    )
                }
            })
            .collect(),
        m.selected,
    )
}

#[test]
fn the_picker_lists_where_the_claim_fits_first_and_follows_j_and_k() {
    // Claim 1: 20 GiB on n:0. n:1 full (a whole GPU), n:2 half full, n:3 empty.
    let snap = snapshot(
        "a",
        "n",
        4,
        &[
            json!({"gpu_memory": "20Gi", "node": "n", "devices": [0]}),
            json!({"nvidia.com/gpu": 1, "node": "n", "devices": [1]}),
            json!({"gpu_memory": "30Gi", "node": "n", "devices": [2]}),
        ],
    );
    let mut st = console(vec![("a", snap)]);
    show_view(&mut st, View::Claims);
    run(&mut st, vec![k('m')]);
    let (rows, sel) = picker(&st);
    assert_eq!(rows, vec!["n:3", "n:2 full", "n:1 full"]);
    assert_eq!(sel, 0);
    run(&mut st, vec![k('j')]);
    assert_eq!(picker(&st).1, 1, "j goes down");
    run(&mut st, vec![k('j'), k('j')]);
    assert_eq!(picker(&st).1, 0, "and wraps");
    run(&mut st, vec![k('k')]);
    assert_eq!(picker(&st).1, 2, "k goes up");
    run(&mut st, vec![code(KeyCode::Down), code(KeyCode::Down)]);
    assert_eq!(picker(&st).1, 1, "the arrows still work");
    run(&mut st, vec![k('k')]);
    // Enter opens the confirmation (Cancel focused); Tab then Enter sends.
    assert!(run(&mut st, vec![code(KeyCode::Enter)]).is_empty());
    let eff = run(&mut st, vec![code(KeyCode::Tab), code(KeyCode::Enter)]);
    assert_eq!(
        eff,
        vec![Effect::Act {
            source: 0,
            action: Action::Move {
                id: ClaimId(1),
                target: MoveTarget {
                    node: Some("n".into()),
                    devices: Some(vec![3]),
                },
            },
            asker: Asker::Operator,
        }]
    );
}

#[test]
fn a_claim_on_two_devices_moves_to_two_devices() {
    // Claim 1: 10 GiB on each of n:0 and n:1 (gpu.shared = 2).
    let snap = snapshot(
        "a",
        "n",
        4,
        &[json!({"gpu-memory": "10Gi", "gpu.shared": 2, "node": "n", "devices": [0, 1]})],
    );
    let mut st = console(vec![("a", snap)]);
    show_view(&mut st, View::Claims);
    let eff = run(
        &mut st,
        vec![
            k('m'),
            code(KeyCode::Enter),
            code(KeyCode::Tab),
            code(KeyCode::Enter),
        ],
    );
    let Some(Effect::Act {
        action: Action::Move { id, target },
        ..
    }) = eff.first()
    else {
        panic!("{eff:?}")
    };
    assert_eq!(*id, ClaimId(1));
    assert_eq!(target.node.as_deref(), Some("n"));
    assert_eq!(
        target.devices,
        Some(vec![2, 3]),
        "as many devices as it holds"
    );

    // A node with fewer free GPUs than the claim holds is refused in the picker.
    let snap = snapshot(
        "a",
        "n",
        3,
        &[json!({"gpu-memory": "10Gi", "gpu.shared": 2, "node": "n", "devices": [0, 1]})],
    );
    let mut st = console(vec![("a", snap)]);
    show_view(&mut st, View::Claims);
    let eff = run(&mut st, vec![k('m'), code(KeyCode::Enter)]);
    assert!(eff.is_empty(), "{eff:?}");
    let Mode::Move(m) = &st.mode else { panic!() };
    assert!(
        m.error
            .as_deref()
            .unwrap()
            .contains("holds 2 GPUs; n has only 1"),
        "{:?}",
        m.error
    );
}

#[test]
fn the_claim_form_previews_across_sources_and_sends_where_it_said() {
    // Binpack across sources: b's half-full GPU is the best fit for 20 GiB.
    let a = snapshot("a", "na", 2, &[]);
    let b = snapshot(
        "b",
        "nb",
        2,
        &[json!({"gpu_memory": "20Gi", "node": "nb", "devices": [1]})],
    );
    let c = snapshot("c", "nc", 1, &[json!({"nvidia.com/gpu": 1})]);
    let mut st = console(vec![("a", a), ("b", b), ("c", c)]);
    let mut keys = vec![k('c')];
    // Amount: 10Gi -> 20Gi.
    keys.extend((0..4).map(|_| code(KeyCode::Backspace)));
    keys.extend("20Gi".chars().map(k));
    keys.push(code(KeyCode::Enter));
    let eff = run(&mut st, keys);
    assert!(eff.is_empty(), "previewed here, not by one source: {eff:?}");
    let Mode::Form(f) = &st.mode else {
        panic!("{:?}", st.mode)
    };
    let FormStage::Preview(p) = &f.stage else {
        panic!("{:?} {:?}", f.stage, f.error)
    };
    assert!(
        p.starts_with("b nb:1 (best of 2 that fit among 3 sources, binpack)"),
        "{p}"
    );
    assert_eq!(f.source, 1);
    let eff = run(&mut st, vec![code(KeyCode::Enter)]);
    // Across sources, sent with an idempotency key: its attempt's id and b's position.
    let (source, claim) = sent_claim(&eff);
    let Action::Claim { request } = &claim else {
        panic!()
    };
    assert_eq!(source, 1, "sent where the preview said");
    assert_eq!(request.node, None, "the source re-checks and places it");

    // Too big for every source: the form says so, per source.
    let mut keys = vec![code(KeyCode::Esc), k('c')];
    keys.extend((0..4).map(|_| code(KeyCode::Backspace)));
    keys.extend("50Gi".chars().map(k));
    keys.push(code(KeyCode::Enter));
    run(&mut st, keys);
    let Mode::Form(f) = &st.mode else { panic!() };
    let e = f.error.as_deref().unwrap();
    assert!(
        e.starts_with("fits on none of the 3 sources: a: infeasible"),
        "{e}"
    );
}

/// Sources `a` (claim 1: 20 GiB on na:0; na:1 taken whole) and `b` (empty), with the
/// picker opened on claim 1 and Enter pressed on the first row.
fn moved_to_b() -> (State, Vec<Effect>) {
    let a = snapshot(
        "a",
        "na",
        2,
        &[
            json!({"gpu_memory": "20Gi", "project": "p", "holder": "h", "ttl": 600, "node": "na", "devices": [0]}),
            json!({"nvidia.com/gpu": 1, "node": "na", "devices": [1]}),
        ],
    );
    let b = snapshot("b", "nb", 2, &[]);
    let mut st = console(vec![("a", a), ("b", b)]);
    show_view(&mut st, View::Claims);
    run(&mut st, vec![k('m')]);
    assert_eq!(picker(&st).0, vec!["nb:0", "nb:1", "na:1 full", "any"]);
    // Enter asks first (Cancel focused), naming both sources; Tab, Enter sends the claim.
    assert!(run(&mut st, vec![code(KeyCode::Enter)]).is_empty());
    let Mode::Confirm(c) = &st.mode else {
        panic!("no confirmation: {:?}", st.mode)
    };
    assert!(
        c.body[0].contains("from a") && c.body[0].contains("to b nb:0"),
        "{:?}",
        c.body
    );
    let eff = run(&mut st, vec![code(KeyCode::Tab), code(KeyCode::Enter)]);
    (st, eff)
}

fn flash(st: &State) -> String {
    st.flash
        .as_ref()
        .map(|f| f.text.clone())
        .unwrap_or_default()
}

/// The one step a move sent: its source, action and move id.
/// A step of a move: a release tagged with the move id, or the move's new claim, sent
/// with its idempotency key (the attempt's id and the source's position).
fn move_step(e: &Effect) -> Option<(usize, Action, String)> {
    match e {
        Effect::ActInMove {
            source,
            action,
            move_id,
            ..
        } => Some((*source, action.clone(), move_id.clone())),
        Effect::Claim {
            source,
            request,
            key,
            move_id: Some(move_id),
            ..
        } => {
            let claim = Action::Claim {
                request: request.clone(),
            };
            assert_eq!(key, &format!("{}.{source}", attempt_of(&claim)));
            Some((*source, claim, move_id.clone()))
        }
        _ => None,
    }
}

fn step(eff: &[Effect]) -> (usize, Action, String) {
    let steps: Vec<_> = eff.iter().filter_map(move_step).collect();
    let [one] = steps.as_slice() else {
        panic!("one move step expected: {eff:?}")
    };
    one.clone()
}

/// The answer to a move's step (its claim, release or take-back), to who sent it.
fn answer(source: usize, action: &Action, move_id: &str, result: Result<Outcome, Failure>) -> Msg {
    // A step sent already is one of this move's.
    if let Some((_, tag)) =
        ASKERS.with(|a| a.borrow().get(&(source, format!("{action:?}"))).cloned())
    {
        assert_eq!(tag.as_deref(), Some(move_id), "a step of move {move_id}");
    }
    Msg::Acted {
        source,
        action: action.clone(),
        asker: FROM_THE_SEND,
        result,
    }
}

/// A placed claim as source `name` would answer it (id 1, on its node's device 0).
fn placed(name: &str, node: &str) -> Box<gpuboard::snapshot::ClaimView> {
    Box::new(
        snapshot(
            name,
            node,
            2,
            &[json!({"gpu_memory": "20Gi", "project": "p"})],
        )
        .claims[0]
            .clone(),
    )
}

fn released() -> Outcome {
    Outcome::Released {
        id: ClaimId(1),
        place: Some("na:0".into()),
    }
}

#[test]
fn a_move_to_another_source_claims_there_then_releases_here_under_one_move_id() {
    let (mut st, eff) = moved_to_b();
    let (src, claim, move_id) = step(&eff);
    assert_eq!(src, 1, "claimed on b first");
    let Action::Claim { request } = &claim else {
        panic!("{claim:?}")
    };
    assert_eq!(request.node.as_deref(), Some("nb"));
    assert_eq!(request.devices, Some(vec![0]));
    assert_eq!((request.project.as_str(), request.ttl), ("p", Some(600)));
    // An id the endpoints accept in their audit actor.
    assert_eq!(
        gpuboard::wire::move_actor("admin", Some(&move_id)).unwrap(),
        format!("admin (move {move_id})")
    );
    // b took it: now the release on a, with the same move id.
    let eff = run(
        &mut st,
        vec![answer(
            1,
            &claim,
            &move_id,
            Ok(Outcome::Claimed(placed("b", "nb"))),
        )],
    );
    assert_eq!(
        step(&eff),
        (0, Action::Release { id: ClaimId(1) }, move_id.clone())
    );
    assert!(
        eff.contains(&Effect::Fetch(1)),
        "b's new claim shown: {eff:?}"
    );
    assert!(matches!(st.mode, Mode::Move(_)), "still under way");
    run(
        &mut st,
        vec![answer(
            0,
            &Action::Release { id: ClaimId(1) },
            &move_id,
            Ok(released()),
        )],
    );
    assert_eq!(st.mode, Mode::Normal);
    assert_eq!(
        flash(&st),
        format!("claim a/1 moved to b/1 (move {move_id})")
    );
    assert!(st.flows.moves().is_empty());
    // Each step is in the console's log (Events).
    let log: Vec<&String> = st.log.iter().filter(|l| l.contains(&move_id)).collect();
    assert!(
        log.iter()
            .any(|l| l.starts_with("b: claim") && l.ends_with(&format!("sent (move {move_id})")))
            && log
                .iter()
                .any(|l| l.starts_with("move ") && l.contains("b took claim 1 as b/1 at nb:0"))
            && log.iter().any(|l| l.starts_with("a: release claim 1 sent")),
        "{log:?}"
    );
}

#[test]
fn a_move_goes_on_when_the_picker_is_closed_meanwhile() {
    let (mut st, eff) = moved_to_b();
    let (_, claim, move_id) = step(&eff);
    run(&mut st, vec![code(KeyCode::Esc)]);
    assert_eq!(st.mode, Mode::Normal);
    let eff = run(
        &mut st,
        vec![answer(
            1,
            &claim,
            &move_id,
            Ok(Outcome::Claimed(placed("b", "nb"))),
        )],
    );
    assert_eq!(
        step(&eff).1,
        Action::Release { id: ClaimId(1) },
        "the release is still sent: never two claims by forgetting"
    );
    run(
        &mut st,
        vec![answer(
            0,
            &Action::Release { id: ClaimId(1) },
            &move_id,
            Ok(released()),
        )],
    );
    assert!(
        flash(&st).starts_with("claim a/1 moved to b/1"),
        "{}",
        flash(&st)
    );
    // A second move of the same claim while one is under way is refused in the picker.
    let (mut st, _) = moved_to_b();
    run(
        &mut st,
        vec![code(KeyCode::Esc), k('m'), code(KeyCode::Enter)],
    );
    let Mode::Move(m) = &st.mode else {
        panic!("{:?}", st.mode)
    };
    assert!(
        m.error
            .as_deref()
            .unwrap()
            .contains("is already moving (move mv-"),
        "{:?}",
        m.error
    );
}

#[test]
fn a_move_to_another_source_that_fails_says_what_is_held() {
    // The target refuses: nothing changed, the picker says so in the target's words.
    let (mut st, eff) = moved_to_b();
    let (_, claim, move_id) = step(&eff);
    let eff = run(
        &mut st,
        vec![answer(
            1,
            &claim,
            &move_id,
            Err(Failure::Refused("does not fit now".into())),
        )],
    );
    assert!(eff.is_empty(), "{eff:?}");
    let Mode::Move(m) = &st.mode else { panic!() };
    assert_eq!(
        m.error.as_deref(),
        Some(format!("move {move_id} of claim a/1: nothing changed, b: does not fit now").as_str())
    );
    assert!(!m.sent, "the operator can pick another target");
    assert!(st.flows.moves().is_empty());
    // The release fails after the claim: both claims are named, with their places.
    let (mut st, eff) = moved_to_b();
    let (_, claim, move_id) = step(&eff);
    run(
        &mut st,
        vec![
            answer(1, &claim, &move_id, Ok(Outcome::Claimed(placed("b", "nb")))),
            answer(
                0,
                &Action::Release { id: ClaimId(1) },
                &move_id,
                Err(Failure::Timeout(2000)),
            ),
        ],
    );
    assert_eq!(st.mode, Mode::Normal);
    let f = st.flash.clone().unwrap();
    assert!(f.error);
    assert_eq!(
        f.text,
        format!(
            "claimed b/1 but releasing a/1 failed: no answer within 2000 ms; both claims hold \
             GPUs now: a/1 (old, na:0) and b/1 (new, nb:0): release one (move {move_id})"
        )
    );
    assert!(st.flows.moves().is_empty());
}

/// Three sources: `a` holds claim 1 (20 GiB on na:0, na:1 taken whole); `b` and `c` are
/// empty (b's GPUs less free than c's, so binpack ranks b first); the picker is opened on
/// claim 1, "any source" picked and confirmed.
fn moved_anywhere() -> (State, Vec<Effect>) {
    let a = snapshot(
        "a",
        "na",
        2,
        &[
            json!({"gpu_memory": "20Gi", "project": "p", "node": "na", "devices": [0]}),
            json!({"nvidia.com/gpu": 1, "node": "na", "devices": [1]}),
        ],
    );
    let b = snapshot("b", "nb", 1, &[json!({"gpu_memory": "10Gi"})]);
    let c = snapshot("c", "nc", 1, &[]);
    let mut st = console(vec![("a", a), ("b", b), ("c", c)]);
    show_view(&mut st, View::Claims);
    run(&mut st, vec![k('m'), k('k')]);
    let (rows, sel) = picker(&st);
    assert_eq!(
        rows[sel], "any",
        "k from the top reaches `any source`: {rows:?}"
    );
    assert!(run(&mut st, vec![code(KeyCode::Enter)]).is_empty());
    let Mode::Confirm(c) = &st.mode else {
        panic!("no confirmation: {:?}", st.mode)
    };
    assert!(
        c.body[0].ends_with("to b (the best other source by placement; if it refuses: c)?"),
        "{:?}",
        c.body
    );
    let eff = run(&mut st, vec![code(KeyCode::Tab), code(KeyCode::Enter)]);
    (st, eff)
}

#[test]
fn a_move_to_any_source_tries_the_next_when_one_refuses() {
    let (mut st, eff) = moved_anywhere();
    let (src, claim, move_id) = step(&eff);
    assert_eq!(src, 1, "b first (binpack)");
    let Action::Claim { request } = &claim else {
        panic!()
    };
    assert_eq!(
        (request.node.as_deref(), request.devices.as_ref()),
        (None, None),
        "placed by the target"
    );
    // b refused since it was read (409): c is asked, under the same move id.
    let eff = run(
        &mut st,
        vec![answer(
            1,
            &claim,
            &move_id,
            Err(Failure::Refused(
                "does not fit now: nb:0 has 10 GiB free".into(),
            )),
        )],
    );
    let (src, again, id) = step(&eff);
    assert_eq!((src, &again, &id), (2, &claim, &move_id));
    assert_eq!(
        flash(&st),
        format!("move {move_id}: b refused (does not fit now: nb:0 has 10 GiB free); trying c")
    );
    let Mode::Move(m) = &st.mode else { panic!() };
    assert!(m.error.is_none() && m.sent);
    // c takes it; then the release on a.
    let eff = run(
        &mut st,
        vec![answer(
            2,
            &claim,
            &move_id,
            Ok(Outcome::Claimed(placed("c", "nc"))),
        )],
    );
    assert_eq!(
        step(&eff),
        (0, Action::Release { id: ClaimId(1) }, move_id.clone())
    );
    run(
        &mut st,
        vec![answer(
            0,
            &Action::Release { id: ClaimId(1) },
            &move_id,
            Ok(released()),
        )],
    );
    assert_eq!(
        flash(&st),
        format!(
            "claim a/1 moved to c/1 (move {move_id}) after b: does not fit now: nb:0 has 10 GiB free"
        )
    );

    // Every target refuses (b does not answer, c 409): nothing changed, both named.
    let (mut st, eff) = moved_anywhere();
    let (_, claim, move_id) = step(&eff);
    let eff = run(
        &mut st,
        vec![answer(1, &claim, &move_id, Err(Failure::Timeout(2000)))],
    );
    // No answer from b: it is sent the same claim with the same key first.
    let label = attempt_of(&claim);
    assert_eq!(eff, vec![resent(1, &claim, Some(&move_id), RESOLVE_WITHIN)]);
    let eff = run(
        &mut st,
        vec![rechecked(
            1,
            &label,
            Err(Failure::Refused("does not fit now".into())),
        )],
    );
    assert_eq!(step(&eff).0, 2);
    let eff = run(
        &mut st,
        vec![answer(
            2,
            &claim,
            &move_id,
            Err(Failure::Refused("does not fit now".into())),
        )],
    );
    assert!(eff.is_empty(), "{eff:?}");
    let f = st.flash.clone().unwrap();
    assert!(f.error);
    assert_eq!(
        f.text,
        format!(
            "move {move_id} of claim a/1: nothing changed, b: no answer within 2000 ms; sent again with the same key, it refused the claim labelled gpuboard.attempt={label} · c: does not fit now"
        )
    );
    // A refusal that would be the same everywhere (credentials) stops at once.
    let (mut st, eff) = moved_anywhere();
    let (_, claim, move_id) = step(&eff);
    let eff = run(
        &mut st,
        vec![answer(
            1,
            &claim,
            &move_id,
            Err(Failure::Unauthorized("token refused".into())),
        )],
    );
    assert!(eff.is_empty(), "{eff:?}");
    assert!(
        flash(&st).ends_with("nothing changed, b: unauthorized: token refused"),
        "{}",
        flash(&st)
    );
}

#[test]
fn a_move_to_any_source_needs_one_that_fits() {
    // Claim 1 is a whole GPU; the only other source's GPU is half taken.
    let a = snapshot("a", "na", 1, &[json!({"nvidia.com/gpu": 1})]);
    let b = snapshot("b", "nb", 1, &[json!({"gpu_memory": "20Gi"})]);
    let mut st = console(vec![("a", a), ("b", b)]);
    show_view(&mut st, View::Claims);
    let eff = run(&mut st, vec![k('m'), k('k'), code(KeyCode::Enter)]);
    assert!(eff.is_empty());
    let Mode::Move(m) = &st.mode else {
        panic!("{:?}", st.mode)
    };
    let e = m.error.as_deref().unwrap();
    assert!(e.starts_with("fits on none of the 1 sources: b: "), "{e}");
    // With one source only, there is no `any source` row.
    let a = snapshot("a", "na", 2, &[json!({"gpu_memory": "20Gi"})]);
    let mut st = console(vec![("a", a)]);
    show_view(&mut st, View::Claims);
    run(&mut st, vec![k('m')]);
    assert_eq!(picker(&st).0, vec!["na:1"]);
}

/// Three sources where a 20 GiB claim fits best on b, then a, then c (binpack); the
/// claim form filled in and previewed, then Enter sent it to b.
fn claimed_from_the_form() -> (State, Vec<Effect>) {
    let a = snapshot("a", "na", 1, &[json!({"gpu_memory": "10Gi"})]);
    let b = snapshot("b", "nb", 1, &[json!({"gpu_memory": "15Gi"})]);
    let c = snapshot("c", "nc", 1, &[]);
    let mut st = console(vec![("a", a), ("b", b), ("c", c)]);
    let mut keys = vec![k('c')];
    keys.extend((0..4).map(|_| code(KeyCode::Backspace)));
    keys.extend("20Gi".chars().map(k));
    keys.push(code(KeyCode::Enter));
    run(&mut st, keys);
    let Mode::Form(f) = &st.mode else { panic!() };
    let FormStage::Preview(p) = &f.stage else {
        panic!("{:?} {:?}", f.stage, f.error)
    };
    assert!(
        p.ends_with("(best of 3 that fit among 3 sources, binpack); if it refuses: a, then c"),
        "{p}"
    );
    let eff = run(&mut st, vec![code(KeyCode::Enter)]);
    (st, eff)
}

/// The attempt label's id a claim sent across sources carries.
fn attempt_of(claim: &Action) -> String {
    let Action::Claim { request } = claim else {
        panic!("{claim:?}")
    };
    request.labels["gpuboard.attempt"].clone()
}

/// The answer to a claim sent again, to who sent it again.
fn rechecked(source: usize, attempt: &str, result: Result<Outcome, Failure>) -> Msg {
    Msg::Rechecked {
        source,
        attempt: attempt.to_string(),
        asker: FROM_THE_SEND,
        result,
    }
}

/// The one claim sent, with its idempotency key (the attempt's id and the source's
/// position).
fn sent_claim(eff: &[Effect]) -> (usize, Action) {
    let [
        Effect::Claim {
            source,
            request,
            key,
            move_id: None,
            asker: Asker::Form,
        },
    ] = eff
    else {
        panic!("one keyed claim expected: {eff:?}")
    };
    let claim = Action::Claim {
        request: request.clone(),
    };
    assert_eq!(key, &format!("{}.{source}", attempt_of(&claim)));
    (*source, claim)
}

/// The same claim sent again with the same key to the same source, for `within`.
fn resent(source: usize, claim: &Action, move_id: Option<&str>, within: Duration) -> Effect {
    let Action::Claim { request } = claim else {
        panic!("{claim:?}")
    };
    let attempt = attempt_of(claim);
    Effect::Recheck {
        source,
        key: format!("{attempt}.{source}"),
        asker: asker_of(source, format!("recheck {attempt}")).0,
        attempt,
        request: request.clone(),
        move_id: move_id.map(str::to_string),
        within,
    }
}

/// b's claim labelled with the attempt, as b answers the keyed claim sent again.
fn b_claim(label: &str) -> Outcome {
    let b = snapshot(
        "b",
        "nb",
        1,
        &[
            json!({"gpu_memory": "15Gi"}),
            json!({"gpu_memory": "20Gi", "labels": {"gpuboard.attempt": label}}),
        ],
    );
    Outcome::Claimed(Box::new(b.claims[1].clone()))
}

#[test]
fn the_claim_form_tries_the_next_source_on_a_refusal_or_no_answer() {
    let (mut st, eff) = claimed_from_the_form();
    let (src, claim) = sent_claim(&eff);
    assert_eq!(src, 1, "b first");
    let eff = run(
        &mut st,
        vec![Msg::Acted {
            source: 1,
            action: claim.clone(),
            asker: Asker::Form,
            result: Err(Failure::Refused("does not fit now".into())),
        }],
    );
    assert_eq!(
        sent_claim(&eff),
        (0, claim.clone()),
        "then a, the same request"
    );
    assert_eq!(
        flash(&st),
        "b refused the claim (does not fit now); trying a"
    );
    // No answer from a: it is sent the same claim with the same key before c is tried.
    let eff = run(
        &mut st,
        vec![Msg::Acted {
            source: 0,
            action: claim.clone(),
            asker: Asker::Form,
            result: Err(Failure::Unreachable {
                detail: "127.0.0.1:9: connection refused".into(),
                sent: true,
            }),
        }],
    );
    let label = attempt_of(&claim);
    assert_eq!(eff, vec![resent(0, &claim, None, RESOLVE_WITHIN)]);
    let eff = run(
        &mut st,
        vec![rechecked(
            0,
            &label,
            Err(Failure::Refused("does not fit now".into())),
        )],
    );
    assert_eq!(sent_claim(&eff), (2, claim.clone()), "then c");
    let eff = run(
        &mut st,
        vec![Msg::Acted {
            source: 2,
            action: claim.clone(),
            asker: Asker::Form,
            result: Ok(Outcome::Claimed(placed("c", "nc"))),
        }],
    );
    assert_eq!(eff, vec![Effect::Fetch(2)]);
    assert_eq!(st.mode, Mode::Normal);
    assert_eq!(
        flash(&st),
        format!(
            "c: claim 1 placed at nc:0 (gpu_memory=20GiB) (after b: does not fit now · a: unreachable: 127.0.0.1:9: connection refused; sent again with the same key, it refused the claim labelled gpuboard.attempt={label})"
        )
    );
    // Each attempt is in Events.
    let tried: Vec<&String> = st
        .log
        .iter()
        .filter(|l| l.contains("claim") && l.ends_with(" sent"))
        .collect();
    assert_eq!(tried.len(), 3, "{tried:?}");
}

#[test]
fn the_claim_form_says_every_refusal_when_none_takes_it() {
    let (mut st, eff) = claimed_from_the_form();
    let (_, claim) = sent_claim(&eff);
    let refuse = |source: usize, words: &str| Msg::Acted {
        source,
        action: claim.clone(),
        asker: Asker::Form,
        result: Err(Failure::Refused(words.into())),
    };
    run(
        &mut st,
        vec![refuse(1, "b is full"), refuse(0, "a is full")],
    );
    let eff = run(&mut st, vec![refuse(2, "c is full")]);
    assert!(eff.is_empty(), "three tries, then no more: {eff:?}");
    let Mode::Form(f) = &st.mode else { panic!() };
    assert_eq!(
        f.stage,
        FormStage::Editing,
        "the form stays, to change and retry"
    );
    assert_eq!(
        f.error.as_deref(),
        Some(
            "claim refused by 3 sources, nothing claimed: b: b is full · a: a is full · c: c is full"
        )
    );
    // A refusal the next source would give too (bad request) is not retried.
    let (mut st, eff) = claimed_from_the_form();
    let (_, claim) = sent_claim(&eff);
    let eff = run(
        &mut st,
        vec![Msg::Acted {
            source: 1,
            action: claim,
            asker: Asker::Form,
            result: Err(Failure::Invalid("rule 3: bad".into())),
        }],
    );
    assert!(eff.is_empty());
    let Mode::Form(f) = &st.mode else { panic!() };
    assert_eq!(f.error.as_deref(), Some("rule 3: bad"));
}

#[test]
fn a_target_that_queues_the_move_is_taken_back_and_the_next_asked() {
    let (mut st, eff) = moved_anywhere();
    let (_, claim, move_id) = step(&eff);
    // b queues it (a move's claim never waits; an endpoint that queued it anyway).
    let queued = snapshot(
        "b",
        "nb",
        1,
        &[
            json!({"nvidia.com/gpu": 1}),
            json!({"gpu_memory": "20Gi", "wait": true}),
        ],
    )
    .claims[1]
        .clone();
    assert_eq!(queued.state, gpuboard::snapshot::ClaimState::Pending);
    let eff = run(
        &mut st,
        vec![answer(
            1,
            &claim,
            &move_id,
            Ok(Outcome::Claimed(Box::new(queued))),
        )],
    );
    let steps: Vec<(usize, Action)> = eff
        .iter()
        .filter_map(|e| {
            move_step(e)
                .filter(|(_, _, m)| *m == move_id)
                .map(|(source, action, _)| (source, action))
        })
        .collect();
    assert_eq!(
        steps,
        vec![(1, Action::Release { id: ClaimId(2) }), (2, claim.clone())],
        "taken back on b, then c asked"
    );
    // The take-back's answer does not disturb the move.
    run(
        &mut st,
        vec![answer(
            1,
            &Action::Release { id: ClaimId(2) },
            &move_id,
            Ok(Outcome::Released {
                id: ClaimId(2),
                place: None,
            }),
        )],
    );
    assert_eq!(st.flows.moves().len(), 1);
    assert!(
        st.flows.moves()[0].refused[0].starts_with("b: queued it as b/2 instead of placing it")
    );
    let eff = run(
        &mut st,
        vec![answer(
            2,
            &claim,
            &move_id,
            Ok(Outcome::Claimed(placed("c", "nc"))),
        )],
    );
    assert_eq!(step(&eff).1, Action::Release { id: ClaimId(1) });
}

fn screen(st: &State, w: u16, h: u16) -> String {
    use gpuboard::console::headless::{buffer_text, render};
    buffer_text(&render(st, &gpuboard::console::theme::Theme::plain(), w, h).unwrap())
}

#[test]
fn the_form_and_the_picker_show_each_attempt_at_80x24() {
    // The form after b refused: b's words, and the source asked now.
    let (mut st, eff) = claimed_from_the_form();
    let (_, claim) = sent_claim(&eff);
    run(
        &mut st,
        vec![Msg::Acted {
            source: 1,
            action: claim,
            asker: Asker::Form,
            result: Err(Failure::Refused("does not fit now".into())),
        }],
    );
    let text = screen(&st, 80, 24);
    assert!(text.contains("refused: b: does not fit now"), "{text}");
    assert!(text.contains("claiming on a…"), "{text}");
    // The picker during a move to any source, after b refused: the move id, c asked now.
    let (mut st, eff) = moved_anywhere();
    let (_, claim, move_id) = step(&eff);
    run(
        &mut st,
        vec![answer(
            1,
            &claim,
            &move_id,
            Err(Failure::Refused("full".into())),
        )],
    );
    let text = screen(&st, 80, 24);
    assert!(text.contains("claiming on c first…"), "{text}");
    assert!(text.contains(&move_id), "{text}");
    assert!(text.contains("refused: b: full"), "{text}");
    // And its last row offers any other source.
    assert!(
        text.contains("any other source: the best by placement"),
        "{text}"
    );
}

/// b (the best) placed the claim but its answer was lost: asked again, it shows the
/// claim with the attempt label, which is the answer; nothing else is tried.
#[test]
fn the_claim_form_finds_a_claim_whose_answer_was_lost() {
    let (mut st, eff) = claimed_from_the_form();
    let (src, claim) = sent_claim(&eff);
    assert_eq!(src, 1);
    let label = attempt_of(&claim);
    let eff = run(
        &mut st,
        vec![Msg::Acted {
            source: 1,
            action: claim.clone(),
            asker: Asker::Form,
            result: Err(Failure::Timeout(2_000)),
        }],
    );
    assert_eq!(eff, vec![resent(1, &claim, None, RESOLVE_WITHIN)]);
    let eff = run(&mut st, vec![rechecked(1, &label, Ok(b_claim(&label)))]);
    assert_eq!(st.mode, Mode::Normal);
    assert_eq!(
        eff,
        vec![Effect::Fetch(1)],
        "nothing else tried, b shown anew"
    );
    let text = flash(&st);
    assert!(
        text.starts_with("b placed it; its answer was lost (")
            && text.ends_with(&format!(
                "sent again with the same key, it answered b/2 (label gpuboard.attempt={label})"
            )),
        "{text}"
    );
    assert!(st.log.iter().any(|l| l == &text), "in Events");
}

/// b stays silent: c takes the claim; b, asked once more, holds it after all: it is
/// released, and said. Silent to the end instead: it is named with the label and lease.
#[test]
fn a_silent_source_is_asked_again_after_landing_and_its_phantom_released_or_named() {
    for comes_back in [true, false] {
        let (mut st, eff) = claimed_from_the_form();
        let (_, claim) = sent_claim(&eff);
        let label = attempt_of(&claim);
        let timeout = || -> Result<Outcome, Failure> { Err(Failure::Timeout(2_000)) };
        run(
            &mut st,
            vec![Msg::Acted {
                source: 1,
                action: claim.clone(),
                asker: Asker::Form,
                result: Err(Failure::Timeout(2_000)),
            }],
        );
        let mut eff = run(&mut st, vec![rechecked(1, &label, timeout())]);
        assert_eq!(sent_claim(&eff), (0, claim.clone()), "then a");
        eff = run(
            &mut st,
            vec![Msg::Acted {
                source: 0,
                action: claim.clone(),
                asker: Asker::Form,
                result: Ok(Outcome::Claimed(placed("a", "na"))),
            }],
        );
        assert!(
            eff.contains(&resent(1, &claim, None, RECHECK_WITHIN)),
            "b sent it once more: {eff:?}"
        );
        let text = flash(&st);
        assert!(
            text.starts_with("a: claim 1 placed at na:0")
                && text.ends_with("still no answer when sent again with the same key)"),
            "{text}"
        );
        if comes_back {
            let eff = run(&mut st, vec![rechecked(1, &label, Ok(b_claim(&label)))]);
            assert_eq!(
                eff,
                vec![Effect::Act {
                    source: 1,
                    action: Action::Release { id: ClaimId(2) },
                    asker: Asker::Operator,
                }]
            );
            assert_eq!(
                flash(&st),
                format!(
                    "b came back: it had placed the claim too, as b/2 (label gpuboard.attempt={label}), though its answer was lost; releasing it"
                )
            );
        } else {
            let eff = run(&mut st, vec![rechecked(1, &label, timeout())]);
            assert!(eff.is_empty(), "{eff:?}");
            let text = flash(&st);
            assert!(
                text.starts_with("b may hold a phantom claim: its answer was lost (")
                    && text.contains(&format!("(label gpuboard.attempt={label}) holds GPUs"))
                    && text.contains("look for the label in b's claims and release it"),
                "{text}"
            );
            assert!(st.flash.as_ref().unwrap().error);
        }
        assert!(st.flows.lost().is_empty());
    }
}

/// A move to any source whose target (b) placed the claim but lost its answer: asked
/// again, b shows it by its label, and the move goes on (the release on a). Another
/// where b stays silent: c takes it, a's claim is released, and b, asked once more, holds
/// the phantom after all: released.
#[test]
fn a_move_whose_target_lost_its_answer_goes_on_and_leaves_no_phantom() {
    let b_with = |label: &str| {
        let b = snapshot(
            "b",
            "nb",
            1,
            &[
                json!({"gpu_memory": "10Gi"}),
                json!({"gpu_memory": "20Gi", "project": "p", "labels": {"gpuboard.attempt": label}}),
            ],
        );
        Outcome::Claimed(Box::new(b.claims[1].clone()))
    };
    let (mut st, eff) = moved_anywhere();
    let (_, claim, move_id) = step(&eff);
    let label = attempt_of(&claim);
    run(
        &mut st,
        vec![answer(1, &claim, &move_id, Err(Failure::Timeout(2000)))],
    );
    let eff = run(&mut st, vec![rechecked(1, &label, Ok(b_with(&label)))]);
    assert_eq!(
        step(&eff),
        (0, Action::Release { id: ClaimId(1) }, move_id.clone()),
        "found on b: the move goes on"
    );
    assert!(
        st.log.iter().any(|l| l.contains(&format!(
            "b placed it; its answer was lost (no answer within 2000 ms): sent again with the same key, it answered b/2 (label gpuboard.attempt={label})"
        ))),
        "{:?}",
        st.log
    );

    let (mut st, eff) = moved_anywhere();
    let (_, claim, move_id) = step(&eff);
    let label = attempt_of(&claim);
    run(
        &mut st,
        vec![answer(1, &claim, &move_id, Err(Failure::Timeout(2000)))],
    );
    let eff = run(
        &mut st,
        vec![rechecked(1, &label, Err(Failure::Timeout(2000)))],
    );
    let (src, again, _) = step(&eff);
    assert_eq!((src, &again), (2, &claim), "then c");
    let eff = run(
        &mut st,
        vec![answer(
            2,
            &claim,
            &move_id,
            Ok(Outcome::Claimed(placed("c", "nc"))),
        )],
    );
    assert_eq!(step(&eff).0, 0, "the release on a");
    let eff = run(
        &mut st,
        vec![answer(
            0,
            &Action::Release { id: ClaimId(1) },
            &move_id,
            Ok(released()),
        )],
    );
    assert!(
        eff.contains(&resent(1, &claim, Some(&move_id), RECHECK_WITHIN)),
        "b sent it once more: {eff:?}"
    );
    let eff = run(&mut st, vec![rechecked(1, &label, Ok(b_with(&label)))]);
    assert_eq!(
        eff,
        vec![Effect::Act {
            source: 1,
            action: Action::Release { id: ClaimId(2) },
            asker: Asker::Operator,
        }]
    );
    assert!(flash(&st).starts_with("b came back: it had placed the claim too, as b/2"));
}
