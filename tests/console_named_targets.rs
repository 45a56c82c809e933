//! In the pure update: a `:` command that names its target acts on that target
//! (never the selected row) or refuses, naming what it could not find; a GPU is found by
//! the `NODE:INDEX` the screens print, by `:gpu` and by a filter; the typed id of a
//! confirmation moves the focus to OK; problem lists read `n/a` when nothing is measured;
//! the backoff's time left is read from one clock; the claim form fills the holder.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::console_fixtures;

use console_fixtures::{NOW, acts, code, feed, flash, k, lab_snapshot, lab_state, run};
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::msg::Effect;
use gpuboard::console::state::{FormField, Mode, State, View};
use gpuboard::console::theme::Theme;
use gpuboard::console::update::show_view;
use gpuboard::ids::ClaimId;
use gpuboard::sources::Action;
use ratatui::crossterm::event::KeyCode;

/// Types `text` on the `:` line and runs it.
fn command(st: &mut State, text: &str) -> Vec<Effect> {
    let mut msgs = vec![k(':')];
    msgs.extend(text.chars().map(k));
    msgs.push(code(KeyCode::Enter));
    run(st, msgs)
}

/// Types `text` (into whatever has the keyboard).
fn typed(st: &mut State, text: &str) -> Vec<Effect> {
    run(st, text.chars().map(k).collect())
}

fn dialog(st: &State) -> &gpuboard::console::state::Confirm {
    match &st.mode {
        Mode::Confirm(c) => c,
        other => panic!("no dialog: {other:?}; flash: {}", flash(st)),
    }
}

#[test]
fn cordon_named_by_command_is_that_gpu_and_asks_for_its_name_typed() {
    let mut st = lab_state();
    // The selected row is lab-a:0; the command names lab-b:0.
    assert_eq!(st.view, View::Gpus);
    assert!(command(&mut st, "cordon lab-b 0").is_empty());
    let c = dialog(&st);
    assert!(
        c.body.iter().any(|l| l.contains("Cordon GPU lab-b:0")),
        "{c:?}"
    );
    // Quoted as typed, not as the name it was read as.
    assert!(
        c.body.iter().any(|l| l == "You typed: cordon lab-b 0"),
        "{c:?}"
    );
    assert!(!c.body.iter().any(|l| l.contains("lab-a")), "{c:?}");
    assert_eq!(c.type_to_confirm.as_deref(), Some("lab-b:0"));
    // OK without the name: refused in the dialog, nothing sent.
    assert!(run(&mut st, vec![code(KeyCode::Tab), code(KeyCode::Enter)]).is_empty());
    assert!(dialog(&st).error.is_some());
    // Typed: OK has the focus, Enter sends exactly that GPU.
    let fx = typed(&mut st, "lab-b:0");
    assert!(fx.is_empty());
    assert!(dialog(&st).ok_focused);
    let fx = run(&mut st, vec![code(KeyCode::Enter)]);
    assert_eq!(
        acts(&fx),
        vec![Action::Cordon {
            node: "lab-b".into(),
            index: 0,
            cordoned: true
        }]
    );
}

#[test]
fn a_target_that_is_not_there_or_not_in_that_state_is_refused_and_nothing_is_sent() {
    let mut st = lab_state();
    for (text, want) in [
        ("cordon lab-z:3", "no node `lab-z`; nodes: lab-a, lab-b"),
        ("cordon lab-a:7", "node lab-a has no GPU 7; its GPUs: 0, 1"),
        ("cordon lab 3", "no node `lab`"),
        ("uncordon lab-a:0", "GPU lab-a:0 on lab is not cordoned"),
        ("cordon lab-b:1", "GPU lab-b:1 on lab is already cordoned"),
        ("release 99", "no claim `99`; claims: "),
        ("move 99", "no claim `99`"),
        ("move 1 lab-q:0", "no node `lab-q`"),
        ("gpu lab-a", "name it NODE:INDEX"),
        ("gpu lab-a:x", "`x` is not a device index"),
        ("freeze now", "`freeze` takes no argument"),
    ] {
        let fx = command(&mut st, text);
        assert!(fx.is_empty(), "{text}: {fx:?}");
        assert_eq!(st.mode, Mode::Normal, "{text}");
        assert!(flash(&st).contains(want), "{text}: {}", flash(&st));
    }
    assert!(!st.frozen, "`freeze now` ran nothing");
}

#[test]
fn uncordon_by_name_of_the_cordoned_gpu() {
    let mut st = lab_state();
    command(&mut st, "uncordon b:1");
    let c = dialog(&st);
    assert!(
        c.body.iter().any(|l| l.contains("Uncordon GPU lab-b:1")),
        "{c:?}"
    );
    typed(&mut st, "lab-b:1");
    let fx = run(&mut st, vec![code(KeyCode::Enter)]);
    assert_eq!(
        acts(&fx),
        vec![Action::Cordon {
            node: "lab-b".into(),
            index: 1,
            cordoned: false
        }]
    );
}

#[test]
fn release_by_id_is_that_claim_and_enter_after_the_typed_id_confirms() {
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    // Claim 1 (alice's) is selected; claim 3 is carol's: its id must be typed, and the
    // command typed it already: OK has the focus.
    command(&mut st, "release 3");
    let c = dialog(&st);
    assert_eq!(c.action, Action::Release { id: ClaimId(3) });
    assert!(c.body.iter().any(|l| l == "You typed: release 3"), "{c:?}");
    assert_eq!(c.type_to_confirm.as_deref(), Some("3"));
    assert!(c.ok_focused && c.typed_ok(), "{c:?}");
    // Typing over it with a wrong id and Enter: said in the dialog, not a silent cancel.
    run(&mut st, vec![code(KeyCode::Backspace)]);
    typed(&mut st, "4");
    assert!(run(&mut st, vec![code(KeyCode::Enter)]).is_empty());
    let c = dialog(&st);
    assert!(
        c.error
            .as_deref()
            .unwrap_or_default()
            .contains("`4` is not it"),
        "{c:?}"
    );
    // The right id: OK is focused, Enter releases claim 3 only.
    run(&mut st, vec![code(KeyCode::Backspace)]);
    typed(&mut st, "3");
    let fx = run(&mut st, vec![code(KeyCode::Enter)]);
    assert_eq!(acts(&fx), vec![Action::Release { id: ClaimId(3) }]);
}

#[test]
fn a_target_named_in_full_is_typed_once_and_enter_confirms() {
    let mut st = lab_state();
    // `:cordon lab-b:0` then Enter, Enter: the name is typed once.
    command(&mut st, "cordon lab-b:0");
    let c = dialog(&st);
    assert!(
        c.body.iter().any(|l| l == "You typed: cordon lab-b:0"),
        "{c:?}"
    );
    assert!(c.ok_focused && c.typed_ok(), "{c:?}");
    let fx = run(&mut st, vec![code(KeyCode::Enter)]);
    assert_eq!(
        acts(&fx),
        vec![Action::Cordon {
            node: "lab-b".into(),
            index: 0,
            cordoned: true
        }]
    );
    // Named by its unique end (`b:0`), the full name is still asked for.
    command(&mut st, "cordon b:0");
    let c = dialog(&st);
    assert!(c.body.iter().any(|l| l == "You typed: cordon b:0"), "{c:?}");
    assert!(!c.ok_focused && !c.typed_ok(), "{c:?}");
}

#[test]
fn move_by_id_opens_that_claims_picker_on_the_gpu_named() {
    let mut st = lab_state();
    command(&mut st, "move 1 lab-b:0");
    let Mode::Move(m) = &st.mode else {
        panic!("{:?} {}", st.mode, flash(&st))
    };
    assert_eq!(m.id, ClaimId(1));
    let row = &m.targets[m.selected];
    assert_eq!((row.node.as_str(), row.index), ("lab-b", 0));
    // The claim's own GPU is not a target: refused, nothing opened.
    let _ = run(&mut st, vec![code(KeyCode::Esc)]);
    command(&mut st, "move 1 lab-a:0");
    assert_eq!(st.mode, Mode::Normal);
    assert!(
        flash(&st).contains("cannot move to lab-a:0"),
        "{}",
        flash(&st)
    );
}

#[test]
fn gpu_command_and_filters_find_a_gpu_by_the_notation_the_screens_print() {
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    command(&mut st, "gpu lab-b:0");
    assert_eq!(st.view, View::Detail);
    assert_eq!(st.detail, Some((0, "lab-b".to_string(), 0)));
    // Esc goes back where it came from.
    run(&mut st, vec![code(KeyCode::Esc)]);
    assert_eq!(st.view, View::Claims);
    // A filter: exactly that GPU (`b:1`, `lab-b 1` alike), and the claims on a GPU.
    show_view(&mut st, View::Gpus);
    for f in ["lab-b:1", "b:1", "lab-b 1"] {
        run(&mut st, vec![code(KeyCode::Esc)]);
        let mut msgs = vec![k('/')];
        msgs.extend(f.chars().map(k));
        msgs.push(code(KeyCode::Enter));
        run(&mut st, msgs);
        assert_eq!(st.gpus.rows.len(), 1, "{f}");
        let (_, n, d) = st.device(st.gpus.rows[0]).unwrap();
        assert_eq!((n.name.as_str(), d.index), ("lab-b", 1), "{f}");
    }
    // Enter on it opens its detail.
    run(&mut st, vec![code(KeyCode::Enter)]);
    assert_eq!(st.detail, Some((0, "lab-b".to_string(), 1)));
    show_view(&mut st, View::Claims);
    let mut msgs = vec![k('/')];
    msgs.extend("lab-a:0".chars().map(k));
    msgs.push(code(KeyCode::Enter));
    run(&mut st, msgs);
    let ids: Vec<u64> = st
        .claims
        .rows
        .iter()
        .map(|k| st.claim(*k).unwrap().1.id.0)
        .collect();
    assert_eq!(ids, vec![1, 2]);
}

#[test]
fn problem_lists_read_na_when_nothing_is_measured() {
    let mut st = lab_state();
    let mut snap = lab_snapshot();
    for c in &mut snap.claims {
        c.memory_used = None;
        c.over_limit = false;
        c.idle = false;
    }
    for n in &mut snap.nodes {
        for d in &mut n.devices {
            d.telemetry = None;
            d.unclaimed_memory = None;
        }
    }
    feed(&mut st, 0, snap, NOW.0);
    show_view(&mut st, View::Claims);
    run(&mut st, vec![k('!')]);
    assert_eq!(st.filter(), "over-limit");
    assert!(
        flash(&st).contains("over-limit: n/a (no claim's use is measured)"),
        "{}",
        flash(&st)
    );
    let screen = buffer_text(&render(&st, &Theme::plain(), 100, 30).unwrap());
    assert!(screen.contains("Claims (n/a)"), "{screen}");
    assert!(!screen.contains("Claims (0)"), "{screen}");
    show_view(&mut st, View::Gpus);
    run(&mut st, vec![k('!')]);
    assert!(
        flash(&st).contains("idle: n/a (no telemetry)"),
        "{}",
        flash(&st)
    );
}

#[test]
fn time_left_of_a_backoff_is_read_from_the_one_clock() {
    let mut st = lab_state();
    let mut snap = lab_snapshot();
    // The source worded it when it answered, 24s before the backoff's end was 9m away.
    for p in &mut snap.projects {
        for r in &mut p.resources {
            if r.backoff_until.is_some() {
                r.reason = Some("backed off for 9m24s".into());
            }
        }
    }
    feed(&mut st, 0, snap, NOW.0);
    show_view(&mut st, View::Ledger);
    let screen = buffer_text(&render(&st, &Theme::plain(), 200, 40).unwrap());
    // `NOW + 540 s`: 9m left, in BACKED OFF UNTIL and WHY NOT NOW alike.
    assert!(screen.contains("12:09:00 (9m)"), "{screen}");
    assert!(screen.contains("backed off for 9m "), "{screen}");
    assert!(!screen.contains("9m24s"), "{screen}");
}

#[test]
fn the_claim_form_fills_the_operator_as_holder() {
    let mut st = lab_state();
    run(&mut st, vec![k('c')]);
    let Mode::Form(f) = &st.mode else {
        panic!("{:?}", st.mode)
    };
    assert_eq!(f.field(FormField::Holder), "alice");
    assert_eq!(f.draft().holder.as_deref(), Some("alice"));
}

#[test]
fn a_start_up_warning_outlives_the_first_tick() {
    // `--theme /nonexistent`: the warning is set before the console knows the time.
    let mut st = State::new(
        vec![gpuboard::console::state::SourceSlot::new(
            "lab",
            gpuboard::sources::SourceKind::Embedded,
            true,
            None,
        )],
        gpuboard::console::keymap::Keymap::builtin(),
        2_000,
        false,
    );
    st.flash = Some(gpuboard::console::state::Flash {
        text: "no theme `/nonexistent`".into(),
        error: true,
        at: gpuboard::clock::Timestamp(0),
    });
    let _ = gpuboard::console::update::update(&mut st, gpuboard::console::msg::Msg::Tick(NOW));
    assert!(
        flash(&st).contains("/nonexistent"),
        "cleared at the first tick"
    );
    let later = gpuboard::clock::Timestamp(NOW.0 + 9_000);
    let _ = gpuboard::console::update::update(&mut st, gpuboard::console::msg::Msg::Tick(later));
    assert!(st.flash.is_none(), "gone after its 8 s");
}

#[test]
fn releasing_anothers_claim_and_cordoning_by_name_take_few_keys() {
    // Cordon from the Overview: `x` opens `:cordon `, the name, Enter, Enter: three keys
    // besides the name.
    let mut st = lab_state();
    show_view(&mut st, View::Overview);
    let _ = run(&mut st, vec![k('x')]);
    assert_eq!(st.mode, Mode::Command("cordon ".into()));
    typed(&mut st, "lab-b:0");
    let _ = run(&mut st, vec![code(KeyCode::Enter)]);
    assert!(dialog(&st).ok_focused, "{:?}", dialog(&st));
    let fx = run(&mut st, vec![code(KeyCode::Enter)]);
    assert_eq!(
        acts(&fx),
        vec![Action::Cordon {
            node: "lab-b".into(),
            index: 0,
            cordoned: true
        }]
    );

    // By command on the GPUs view, another GPU selected: `:x NAME`, Enter, Enter.
    let mut st = lab_state();
    assert_eq!(st.view, View::Gpus);
    command(&mut st, "x lab-b:0");
    assert_eq!(
        dialog(&st).action,
        Action::Cordon {
            node: "lab-b".into(),
            index: 0,
            cordoned: true
        }
    );

    // Another holder's claim by id from the Claims view (alice's selected): `:r 3`, Enter,
    // Enter: five keys besides the id, typed once.
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    command(&mut st, "r 3");
    let c = dialog(&st);
    assert_eq!(c.action, Action::Release { id: ClaimId(3) });
    assert!(c.ok_focused && c.typed_ok(), "{c:?}");
    let fx = run(&mut st, vec![code(KeyCode::Enter)]);
    assert_eq!(acts(&fx), vec![Action::Release { id: ClaimId(3) }]);

    // A unique start of a command is that command; an ambiguous one is refused by name.
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    command(&mut st, "rel 3");
    assert_eq!(dialog(&st).action, Action::Release { id: ClaimId(3) });
    let mut st = lab_state();
    assert!(command(&mut st, "re 3").is_empty());
    assert_eq!(st.mode, Mode::Normal);
    assert!(
        flash(&st).contains("unknown command `re`"),
        "{}",
        flash(&st)
    );
}
