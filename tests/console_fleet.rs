//! The console's move picker and claim form over a fleet of sources, through the pure
//! `update`: the picker lists the GPUs a claim fits on first and follows j/k, a claim on
//! two devices moves to two devices, and the claim form previews across every acting
//! source and sends the claim where the preview says.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use gpuboard::clock::Timestamp;
use gpuboard::console::keymap::Keymap;
use gpuboard::console::msg::{Effect, Msg};
use gpuboard::console::state::{FormStage, Mode, SourceSlot, State, View};
use gpuboard::console::update::{show_view, update};
use gpuboard::ids::ClaimId;
use gpuboard::placement::{DeviceSpec, MoveTarget, NodeSpec, Policy};
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
fn run(st: &mut State, msgs: Vec<Msg>) -> Vec<Effect> {
    msgs.into_iter().flat_map(|m| update(st, m)).collect()
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
            .map(|(n, _)| SourceSlot::new(n, "gpuboard", true, None))
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
                format!(
                    "{}:{}{}",
                    r.node,
                    r.index,
                    if r.fits { "" } else { " full" }
                )
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
    let Some(Effect::Act {
        source,
        action: Action::Claim { request },
    }) = eff.first()
    else {
        panic!("{eff:?}")
    };
    assert_eq!(*source, 1, "sent where the preview said");
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
    assert_eq!(picker(&st).0, vec!["nb:0", "nb:1", "na:1 full"]);
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

#[test]
fn a_move_to_another_source_claims_there_then_releases_here() {
    let (mut st, eff) = moved_to_b();
    let [
        Effect::Act {
            source: 1,
            action: claim @ Action::Claim { request },
        },
    ] = eff.as_slice()
    else {
        panic!("{eff:?}")
    };
    assert_eq!(request.node.as_deref(), Some("nb"));
    assert_eq!(request.devices, Some(vec![0]));
    assert_eq!((request.project.as_str(), request.ttl), ("p", Some(600)));
    // b took it: now the release on a.
    let new = snapshot(
        "b",
        "nb",
        2,
        &[json!({"gpu_memory": "20Gi", "project": "p"})],
    )
    .claims[0]
        .clone();
    let eff = run(
        &mut st,
        vec![Msg::Acted {
            source: 1,
            action: claim.clone(),
            result: Ok(Outcome::Claimed(Box::new(new))),
        }],
    );
    assert!(
        eff.contains(&Effect::Act {
            source: 0,
            action: Action::Release { id: ClaimId(1) },
        }),
        "{eff:?}"
    );
    assert!(matches!(st.mode, Mode::Move(_)), "still under way");
    run(
        &mut st,
        vec![Msg::Acted {
            source: 0,
            action: Action::Release { id: ClaimId(1) },
            result: Ok(Outcome::Released {
                id: ClaimId(1),
                place: Some("na:0".into()),
            }),
        }],
    );
    assert_eq!(st.mode, Mode::Normal);
    assert_eq!(flash(&st), "claim a/1 moved to b/1");
}

#[test]
fn a_move_to_another_source_that_fails_says_what_is_held() {
    // The target refuses: nothing changed, the picker says so.
    let (mut st, eff) = moved_to_b();
    let Effect::Act { action, .. } = &eff[0] else {
        panic!()
    };
    let eff = run(
        &mut st,
        vec![Msg::Acted {
            source: 1,
            action: action.clone(),
            result: Err(Failure::Refused("does not fit now".into())),
        }],
    );
    assert!(eff.is_empty());
    let Mode::Move(m) = &st.mode else { panic!() };
    assert_eq!(
        m.error.as_deref(),
        Some("b refused the claim; nothing changed: does not fit now")
    );
    // The release fails after the claim: both claims are named.
    let (mut st, eff) = moved_to_b();
    let Effect::Act { action, .. } = &eff[0] else {
        panic!()
    };
    let new = snapshot("b", "nb", 2, &[json!({"gpu_memory": "20Gi"})]).claims[0].clone();
    run(
        &mut st,
        vec![
            Msg::Acted {
                source: 1,
                action: action.clone(),
                result: Ok(Outcome::Claimed(Box::new(new))),
            },
            Msg::Acted {
                source: 0,
                action: Action::Release { id: ClaimId(1) },
                result: Err(Failure::Timeout(2000)),
            },
        ],
    );
    assert_eq!(st.mode, Mode::Normal);
    let f = st.flash.clone().unwrap();
    assert!(f.error);
    assert!(
        f.text.starts_with("claimed b/1 but releasing a/1 failed: no answer within 2000 ms; both claims hold GPUs now"),
        "{}",
        f.text
    );
}
