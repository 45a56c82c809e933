//! Selection by identity and the one confirmation dialog (issue 16, finding 1): the cursor
//! follows the picked GPU, claim or project across refreshes that re-sort, add or remove
//! rows; an action targets exactly the picked item, or is refused when it is gone; every
//! mutating action waits in a dialog with Cancel focused; releasing another holder's claim
//! asks for its id.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::console_fixtures;

use console_fixtures::{NOW, acts, code, feed, flash, k, lab_snapshot, lab_state, run};
use gpuboard::console::msg::Msg;
use gpuboard::console::state::{Mode, State, View};
use gpuboard::console::update::show_view;
use gpuboard::ids::ClaimId;
use gpuboard::snapshot::Snapshot;
use gpuboard::sources::Action;
use ratatui::crossterm::event::KeyCode;

/// The GPU highlighted in the GPUs view, as `node:index`.
fn shown_gpu(st: &State) -> Option<String> {
    let k = st.selected_device()?;
    let (_, n, d) = st.device(k)?;
    Some(format!("{}:{}", n.name, d.index))
}
fn shown_claim(st: &State) -> Option<ClaimId> {
    let k = st.selected_claim()?;
    Some(st.claim(k)?.1.id)
}
/// The lab with its nodes listed in the other order (as a peer may send them).
fn nodes_reversed() -> Snapshot {
    let mut s = lab_snapshot();
    s.nodes.reverse();
    s
}
/// The lab without one claim (released elsewhere).
fn without_claim(id: u64) -> Snapshot {
    let mut s = lab_snapshot();
    s.claims.retain(|c| c.id != ClaimId(id));
    s
}
/// The lab with utilisation set per GPU (node, index, percent): re-sorts by `util`.
fn with_util(util: &[(&str, u32, u32)]) -> Snapshot {
    let mut s = lab_snapshot();
    for n in &mut s.nodes {
        for d in &mut n.devices {
            if let Some(t) = d.telemetry.as_mut()
                && let Some((_, _, u)) = util
                    .iter()
                    .find(|(nn, i, _)| *nn == n.name && *i == d.index)
            {
                t.utilization_gpu = Some(*u);
            }
        }
    }
    s
}

#[test]
fn the_selection_follows_the_item_across_refreshes() {
    // (name, view, keys before, snapshot delivered, what stays selected)
    type Case = (&'static str, View, Vec<Msg>, Snapshot, &'static str);
    let cases: Vec<Case> = vec![
        (
            "nodes come back in another order",
            View::Gpus,
            vec![k('j')],
            nodes_reversed(),
            "lab-a:1",
        ),
        (
            "sorted by util, a refresh re-sorts",
            View::Gpus,
            vec![k('s'), k('s'), k('s'), k('j'), k('j')],
            with_util(&[
                ("lab-a", 0, 90),
                ("lab-a", 1, 80),
                ("lab-b", 0, 10),
                ("lab-b", 1, 5),
            ]),
            "",
        ),
        (
            "a claim above the selection is released",
            View::Claims,
            vec![k('j'), k('j')],
            without_claim(1),
            "3",
        ),
    ];
    for (name, view, keys, snap, want) in cases {
        let mut st = lab_state();
        show_view(&mut st, view);
        run(&mut st, keys);
        let before = match view {
            View::Gpus => shown_gpu(&st).unwrap(),
            _ => shown_claim(&st).unwrap().to_string(),
        };
        if !want.is_empty() {
            assert_eq!(before, want, "{name}: selected before the refresh");
        }
        feed(&mut st, 0, snap, NOW.0);
        let after = match view {
            View::Gpus => shown_gpu(&st),
            _ => shown_claim(&st).map(|c| c.to_string()),
        };
        assert_eq!(after.as_deref(), Some(before.as_str()), "{name}");
    }
}

#[test]
fn resort_then_cordon_acts_on_the_selected_gpu() {
    let mut st = lab_state();
    show_view(&mut st, View::Gpus);
    // Sort by util, pick the third row.
    run(&mut st, vec![k('s'), k('s'), k('s'), k('j'), k('j')]);
    let picked = shown_gpu(&st).unwrap();
    // A refresh turns the order upside down.
    let mut util: Vec<(&str, u32, u32)> = Vec::new();
    for (i, (n, d)) in [("lab-a", 0), ("lab-a", 1), ("lab-b", 0), ("lab-b", 1)]
        .into_iter()
        .enumerate()
    {
        let rank = if format!("{n}:{d}") == picked {
            99
        } else {
            10 * u32::try_from(i).unwrap()
        };
        util.push((n, d, rank));
    }
    feed(&mut st, 0, with_util(&util), NOW.0);
    assert_eq!(st.cursor_of(View::Gpus).selected, 0, "now sorted first");
    let got = acts(&run(
        &mut st,
        vec![k('x'), code(KeyCode::Tab), code(KeyCode::Enter)],
    ));
    let (node, index) = picked.split_once(':').unwrap();
    match got.as_slice() {
        [
            Action::Cordon {
                node: n, index: i, ..
            },
        ] => {
            assert_eq!((n.as_str(), i.to_string().as_str()), (node, index));
        }
        other => panic!("expected one cordon of {picked}, got {other:?}"),
    }
}

#[test]
fn an_action_on_a_gone_item_is_refused() {
    // (name, view, keys to pick, snapshot that drops it, action keys, words in the refusal)
    type Case = (&'static str, View, Vec<Msg>, Snapshot, Msg, &'static str);
    let mut no_b = lab_snapshot();
    no_b.nodes.retain(|n| n.name != "lab-b");
    let mut no_proj = lab_snapshot();
    let gone = no_proj.projects[0].name.clone();
    no_proj.projects.remove(0);
    let cases: Vec<Case> = vec![
        (
            "release",
            View::Claims,
            vec![k('j')],
            without_claim(2),
            k('r'),
            "claim 2 on lab is gone",
        ),
        (
            "move",
            View::Claims,
            vec![k('j')],
            without_claim(2),
            k('m'),
            "claim 2 on lab is gone",
        ),
        (
            "cordon",
            View::Gpus,
            vec![code(KeyCode::End)],
            no_b,
            k('x'),
            "GPU lab-b:1 on lab is gone",
        ),
        ("reset", View::Ledger, vec![], no_proj, k('b'), "is gone"),
    ];
    for (name, view, pick, snap, key, words) in cases {
        let mut st = lab_state();
        show_view(&mut st, view);
        run(&mut st, pick);
        feed(&mut st, 0, snap, NOW.0);
        let eff = run(&mut st, vec![key]);
        assert!(acts(&eff).is_empty(), "{name}: nothing is sent");
        assert_eq!(st.mode, Mode::Normal, "{name}: no dialog opened");
        assert!(flash(&st).contains(words), "{name}: {}", flash(&st));
        if name == "reset" {
            assert!(flash(&st).contains(&gone), "{}", flash(&st));
        }
        // Moving the cursor picks again, and the action works.
        run(&mut st, vec![code(KeyCode::Home)]);
        assert!(st.pick_gone(view).is_none(), "{name}: picked again");
    }
}

#[test]
fn every_mutating_action_waits_for_ok_with_cancel_focused() {
    // (name, view, keys opening the dialog)
    let cases: Vec<(&str, View, Vec<Msg>)> = vec![
        ("release", View::Claims, vec![k('r')]),
        ("move", View::Claims, vec![k('m'), code(KeyCode::Enter)]),
        ("cordon", View::Gpus, vec![k('x')]),
        ("uncordon", View::Gpus, vec![code(KeyCode::End), k('x')]),
        ("reset", View::Ledger, vec![k('b')]),
        (
            "reset by command",
            View::Ledger,
            "reset".chars().map(k).collect(),
        ),
    ];
    for (name, view, mut keys) in cases {
        let mut st = lab_state();
        show_view(&mut st, view);
        if name == "reset by command" {
            keys.insert(0, k(':'));
            keys.push(code(KeyCode::Enter));
        }
        let eff = run(&mut st, keys);
        assert!(acts(&eff).is_empty(), "{name}: nothing sent before OK");
        let Mode::Confirm(c) = &st.mode else {
            panic!("{name}: no dialog: {:?}", st.mode)
        };
        assert!(!c.ok_focused, "{name}: Cancel is focused");
        assert!(
            c.body[0].contains(&c.action.target().replace("claim ", ""))
                || c.body[0].contains(&c.action.target()),
            "{name}: the dialog names the target: {:?}",
            c.body
        );
        // Enter on the focused Cancel sends nothing.
        let eff = run(&mut st, vec![code(KeyCode::Enter)]);
        assert!(acts(&eff).is_empty(), "{name}: Enter on Cancel");
        assert!(!matches!(st.mode, Mode::Confirm(_)), "{name}: closed");
    }
}

#[test]
fn releasing_another_holders_claim_asks_for_its_id() {
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    // Claim 2 is bob's; the operator is alice.
    run(&mut st, vec![k('j'), k('r')]);
    let Mode::Confirm(c) = &st.mode else {
        panic!("no dialog")
    };
    assert_eq!(c.type_to_confirm.as_deref(), Some("2"));
    // OK without the id does nothing and says why.
    let eff = run(&mut st, vec![code(KeyCode::Tab), code(KeyCode::Enter)]);
    assert!(acts(&eff).is_empty());
    let Mode::Confirm(c) = &st.mode else {
        panic!("the dialog stays")
    };
    assert!(c.error.as_deref().unwrap_or("").contains("type `2`"));
    // A wrong id neither.
    let eff = run(&mut st, vec![k('3'), code(KeyCode::Enter)]);
    assert!(acts(&eff).is_empty());
    let eff = run(
        &mut st,
        vec![code(KeyCode::Backspace), k('2'), code(KeyCode::Enter)],
    );
    assert_eq!(acts(&eff), vec![Action::Release { id: ClaimId(2) }]);
    // Her own claim needs no typing.
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    run(&mut st, vec![k('r')]);
    let Mode::Confirm(c) = &st.mode else {
        panic!("no dialog")
    };
    assert_eq!(c.type_to_confirm, None);
}

#[test]
fn cancelling_a_move_confirmation_returns_to_the_picker() {
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    run(&mut st, vec![k('m'), code(KeyCode::Enter)]);
    assert!(matches!(st.mode, Mode::Confirm(_)));
    run(&mut st, vec![code(KeyCode::Esc)]);
    assert!(matches!(st.mode, Mode::Move(_)), "{:?}", st.mode);
}
