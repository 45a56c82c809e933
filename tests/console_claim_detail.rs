//! The claim detail (issue 16, "a claim detail"): Enter on a claim in Claims opens
//! everything its source's snapshot says about it (holder, pid, processes, per-GPU shares,
//! lease, form as written, every pending reason, the project's backoffs, its audit
//! history); Esc goes back to Claims with the same claim selected. Release and move act
//! from inside it on the claim it shows; `:claim ID` opens it. Snapshots at 80x24, 120x40
//! and 200x60 from the lab fixtures, and per-cell style maps in two themes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::console_fixtures;

use console_fixtures::{NOW, feed, flash, lab_snapshot, lab_state, with_down_source};
use gpuboard::clock::Timestamp;
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::msg::{Effect, Msg};
use gpuboard::console::state::candidates;
use gpuboard::console::state::{Mode, State, View};
use gpuboard::console::theme::{Theme, load_strict};
use gpuboard::console::update::{show_view, update};
use gpuboard::ids::ClaimId;
use gpuboard::snapshot::AuditEvent;
use gpuboard::sources::Action;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

fn key(st: &mut State, code: KeyCode) -> Vec<Effect> {
    update(st, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)))
}

/// Types `keys` one character at a time (`\n` is Enter, `\t` Tab), and collects what
/// the console asks to be done.
fn keys(st: &mut State, keys: &str) -> Vec<Effect> {
    keys.chars()
        .flat_map(|c| {
            key(
                st,
                match c {
                    '\n' => KeyCode::Enter,
                    '\t' => KeyCode::Tab,
                    c => KeyCode::Char(c),
                },
            )
        })
        .collect()
}

/// The id of the claim selected in Claims.
fn selected_id(st: &State) -> Option<ClaimId> {
    st.selected_claim()
        .and_then(|k| st.claim(k))
        .map(|(_, c)| c.id)
}

/// Selects claim `id` in Claims the way an operator does: from the top, `j` until it is
/// the selected one.
fn select(st: &mut State, id: u64) {
    show_view(st, View::Claims);
    key(st, KeyCode::Home);
    for _ in 0..st.claims.rows.len() {
        if selected_id(st) == Some(ClaimId(id)) {
            return;
        }
        key(st, KeyCode::Char('j'));
    }
    assert_eq!(selected_id(st), Some(ClaimId(id)), "claim {id} not listed");
}

fn text(st: &State, w: u16, h: u16) -> String {
    buffer_text(&render(st, &Theme::plain(), w, h).unwrap())
}

/// Opens claim `id`'s detail on the lab fixtures.
fn opened(id: u64) -> State {
    let mut st = lab_state();
    select(&mut st, id);
    key(&mut st, KeyCode::Enter);
    assert_eq!(st.view, View::ClaimDetail);
    st
}

#[test]
fn enter_opens_the_selected_claim_and_esc_returns() {
    // Every fixture claim: placed, over limit, idle, pending, backed-off project.
    for id in 1..=6u64 {
        let mut st = lab_state();
        select(&mut st, id);
        key(&mut st, KeyCode::Enter);
        assert_eq!(st.view, View::ClaimDetail, "claim {id}");
        assert_eq!(st.claim_detail, Some((0, ClaimId(id))), "claim {id}");
        let (_, c) = st.detail_claim().unwrap();
        assert_eq!(c.id, ClaimId(id));
        key(&mut st, KeyCode::Esc);
        assert_eq!(st.view, View::Claims, "claim {id}: Esc goes back to Claims");
        assert_eq!(
            selected_id(&st),
            Some(ClaimId(id)),
            "the same claim stays selected"
        );
    }
}

#[test]
fn the_detail_follows_its_claim_not_the_row() {
    let mut st = opened(2);
    // A refresh that removes claim 1 shifts every row; the detail still shows claim 2.
    let mut snap = lab_snapshot();
    snap.claims.retain(|c| c.id != ClaimId(1));
    feed(&mut st, 0, snap.clone(), NOW.0);
    assert_eq!(st.detail_claim().unwrap().1.id, ClaimId(2));
    // When claim 2 itself is gone the detail says so instead of showing another claim.
    snap.claims.retain(|c| c.id != ClaimId(2));
    feed(&mut st, 0, snap, NOW.0 + 1_000);
    assert!(st.detail_claim().is_none());
    let screen = text(&st, 80, 24);
    assert!(screen.contains("claim 2 is gone"), "{screen}");
}

#[test]
fn every_fact_of_the_snapshot_is_shown() {
    let st = opened(1);
    let (_, c) = st.detail_claim().unwrap();
    let screen = text(&st, 120, 40);
    for want in [
        "alice",
        "project vision",
        c.form.as_str(),
        "2024-03-01 12:35:00 (in 35m)",
        "OVER LIMIT",
        "lab-a:0",
        "pid 3001",
        "train-1",
    ] {
        assert!(screen.contains(want), "missing {want:?} in\n{screen}");
    }
    let events = st.detail_claim_events();
    assert!(!events.is_empty());
    assert!(screen.contains(&format!("Audit history ({})", events.len())));

    // Pending: every reason, one per node.
    let st = opened(6);
    let (_, c) = st.detail_claim().unwrap();
    assert!(c.pending_reasons.len() > 1, "{:?}", c.pending_reasons);
    let screen = text(&st, 200, 60);
    for r in &c.pending_reasons {
        assert!(
            screen.contains(r.as_str()),
            "missing reason {r:?} in\n{screen}"
        );
    }

    // A backed-off project: until when, absolute and relative, and why.
    let st = opened(5);
    let screen = text(&st, 120, 40);
    assert!(
        screen.contains("A100 backed off until 2024-03-01 12:09:00 (in 9m), interval 10m"),
        "{screen}"
    );
    assert!(screen.contains("no pending claim fits A100"), "{screen}");
}

#[test]
fn scrolls_to_the_last_line_and_no_further() {
    let mut st = opened(1);
    let full = text(&st, 120, 40);
    let last = full
        .lines()
        .rfind(|l| l.contains("by "))
        .unwrap()
        .to_string();
    assert!(!text(&st, 80, 12).contains(last.trim_start_matches('│').trim()));
    for _ in 0..60 {
        key(&mut st, KeyCode::Char('j'));
    }
    let small = text(&st, 80, 12);
    let needle: String = last
        .trim_start_matches('│')
        .trim()
        .chars()
        .take(40)
        .collect();
    assert!(small.contains(&needle), "{needle:?} not in\n{small}");
}

#[test]
fn snapshots() {
    for (id, name) in [(1, "placed"), (5, "backed_off"), (6, "pending")] {
        let st = opened(id);
        for (w, h) in [(80, 24), (120, 40), (200, 60)] {
            insta::assert_snapshot!(format!("claim_detail_{name}_{w}x{h}"), text(&st, w, h));
        }
    }
    // The one confirmation dialog, over the detail, naming the claim shown.
    let mut st = opened(2);
    keys(&mut st, "r");
    insta::assert_snapshot!("claim_detail_release_confirm_80x24", text(&st, 80, 24));
    // Styles: the over-limit figures, the warnings and the headings, per theme.
    let st = opened(1);
    for t in ["default", "mono"] {
        let th = load_strict(t, &[]).unwrap();
        insta::assert_snapshot!(
            format!("claim_detail_placed_80x24_{t}_styles"),
            style_map(&st, &th, 80, 24)
        );
    }
    let maps: Vec<String> = ["default", "light", "high-contrast", "ansi16", "mono"]
        .iter()
        .map(|t| style_map(&st, &load_strict(t, &[]).unwrap(), 80, 24))
        .collect();
    for (i, a) in maps.iter().enumerate() {
        for b in &maps[i + 1..] {
            assert_ne!(a, b, "two themes style the claim detail alike");
        }
    }
}

/// Every cell's style, one letter per distinct style (in order of first appearance),
/// then the legend.
fn style_map(st: &State, theme: &Theme, w: u16, h: u16) -> String {
    use std::fmt::Write;
    let buf = render(st, theme, w, h).unwrap();
    let mut styles: Vec<ratatui::style::Style> = Vec::new();
    let mut out = String::new();
    let letter = |i: usize| ('A'..='Z').chain('a'..='z').nth(i).unwrap_or('?');
    for y in 0..h {
        for x in 0..w {
            let style = buf.cell((x, y)).unwrap().style();
            let i = styles.iter().position(|s| *s == style).unwrap_or_else(|| {
                styles.push(style);
                styles.len() - 1
            });
            out.push(letter(i));
        }
        out.push('\n');
    }
    for (i, s) in styles.iter().enumerate() {
        writeln!(out, "{} = {s:?}", letter(i)).unwrap();
    }
    out
}

/// The action a confirmation dialog waits to send, if one is open.
fn confirming(st: &State) -> Option<(usize, Action)> {
    match &st.mode {
        Mode::Confirm(c) => Some((c.source, c.action.clone())),
        _ => None,
    }
}

#[test]
fn release_and_move_act_on_the_claim_shown() {
    // (case, claim opened, keys in the detail, the dialog's action, flash contains)
    let cases: Vec<(&str, u64, &str, Option<Action>, &str)> = vec![
        (
            "r asks to release the claim shown",
            2,
            "r",
            Some(Action::Release { id: ClaimId(2) }),
            "",
        ),
        ("Cancel is focused: Enter sends nothing", 1, "r\n", None, ""),
        (
            "the detail's claim even after j scrolled it",
            4,
            "jjjr",
            Some(Action::Release { id: ClaimId(4) }),
            "",
        ),
        ("m on a pending claim", 6, "m", None, "claim 6 is pending"),
    ];
    for (case, id, typed, want, says) in cases {
        let mut st = opened(id);
        // Another claim selected in Claims must not matter: the detail acts on its own.
        let effects = keys(&mut st, typed);
        assert!(
            effects.iter().all(|e| !matches!(e, Effect::Act { .. })),
            "{case}: nothing is sent without OK"
        );
        assert_eq!(confirming(&st).map(|(_, a)| a), want, "{case}");
        assert!(flash(&st).contains(says), "{case}: {:?}", flash(&st));
        assert_eq!(st.view, View::ClaimDetail, "{case}");
    }

    // OK releases the shown claim; once it is gone the detail says so.
    let mut st = opened(1);
    let effects = keys(&mut st, "r\t\n");
    let sent: Vec<&Action> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Act { action, .. } => Some(action),
            _ => None,
        })
        .collect();
    assert_eq!(sent, [&Action::Release { id: ClaimId(1) }]);
    let mut snap = lab_snapshot();
    snap.claims.retain(|c| c.id != ClaimId(1));
    feed(&mut st, 0, snap, NOW.0 + 1_000);
    assert!(text(&st, 80, 24).contains("claim 1 is gone"));
    // Acting on it now is refused by name.
    keys(&mut st, "r");
    assert_eq!(confirming(&st), None);
    assert!(
        flash(&st).contains("claim 1 on lab is gone"),
        "{}",
        flash(&st)
    );
    keys(&mut st, "m");
    assert!(matches!(st.mode, Mode::Normal));

    // m opens the move picker for the shown placed claim.
    let mut st = opened(4);
    keys(&mut st, "m");
    match &st.mode {
        Mode::Move(m) => assert_eq!(m.id, ClaimId(4)),
        other => panic!("no move picker: {other:?}"),
    }
}

#[test]
fn the_command_line_opens_a_claim_by_id() {
    // (case, command typed after `:`, the claim detail opened, flash contains)
    let cases: Vec<(&str, &str, Option<u64>, &str)> = vec![
        ("an id", "claim 3\n", Some(3), ""),
        ("a pending claim", "claim 6\n", Some(6), ""),
        (
            "an id nobody has",
            "claim 99\n",
            None,
            "no claim `99`; claims: 1, 2, 3, 4, 5, 6",
        ),
        (
            "not a number",
            "claim x1\n",
            None,
            "an id is a number or an engine's name, as the Claims view shows it (`claim 3`, \
             `claim NAMESPACE/POD`, `claim SOURCE/3`); claims: 1, 2",
        ),
        (
            "a source that is not there",
            "claim far/3\n",
            None,
            "no claim `far/3`",
        ),
        ("with its source", "claim lab/5\n", Some(5), ""),
    ];
    for (case, typed, want, says) in cases {
        let mut st = lab_state();
        show_view(&mut st, View::Gpus);
        keys(&mut st, ":");
        keys(&mut st, typed);
        let opened = st.detail_claim().map(|(_, c)| c.id.0);
        assert_eq!(opened, want, "{case}");
        assert!(flash(&st).contains(says), "{case}: {:?}", flash(&st));
        if want.is_some() {
            assert_eq!(st.view, View::ClaimDetail, "{case}");
            // Esc goes back where it came from; Claims has that claim selected.
            key(&mut st, KeyCode::Esc);
            assert_eq!(st.view, View::Gpus, "{case}");
            keys(&mut st, "3");
            assert_eq!(selected_id(&st).map(|c| c.0), want, "{case}");
        } else {
            assert_eq!(st.view, View::Gpus, "{case}: the view stays");
        }
    }
    // `claim` alone is still the claim form.
    let mut st = lab_state();
    keys(&mut st, ":claim\n");
    assert!(matches!(st.mode, Mode::Form(_)), "{:?}", st.mode);

    // Completion lists the claims; with two sources each is named with its source.
    let st = lab_state();
    assert_eq!(
        candidates(&st, "claim "),
        [
            "claim 1", "claim 2", "claim 3", "claim 4", "claim 5", "claim 6"
        ]
    );
    assert_eq!(candidates(&st, "claim 5"), ["claim 5"]);
    let mut st = with_down_source();
    assert!(candidates(&st, "claim ").contains(&"claim far/3".to_string()));
    keys(&mut st, ":claim 3\n");
    assert!(st.detail_claim().is_none());
    assert!(
        flash(&st).contains("claim 3 is on 2 sources: name one, lab/3 or far/3"),
        "{}",
        flash(&st)
    );
    keys(&mut st, ":claim far/3\n");
    assert_eq!(st.claim_detail, Some((1, ClaimId(3))));
}

fn event(at: u64, action: &str, target: &str, detail: &str) -> AuditEvent {
    AuditEvent {
        revision: at,
        at: Timestamp(NOW.0 - 600_000 + at * 1_000),
        actor: "operator".into(),
        action: action.into(),
        target: target.into(),
        detail: detail.into(),
    }
}

#[test]
fn the_history_has_the_events_that_concern_the_claim() {
    let mut snap = lab_snapshot();
    let mine = [
        event(1, "cordon", "lab-a:0", "cordoned"),
        event(2, "reset", "project vision", "debts and backoffs cleared"),
        event(
            3,
            "move",
            "claim 12",
            "moved from lab-a:1 to lab-a:0 beside claim 1",
        ),
        event(
            4,
            "fairshare",
            "ledger",
            r#"{"event":"backed_off","project":"vision","resource":"gpu:A10G"}"#,
        ),
        event(5, "reset", "all projects", "debts and backoffs cleared"),
    ];
    let others = [
        event(6, "cordon", "lab-a:1", "cordoned"),
        event(7, "share", "project nlp", "share set to 5"),
        event(8, "move", "claim 12", "moved beside claim 13"),
        event(9, "release", "claim 10", "released"),
        event(
            10,
            "fairshare",
            "ledger",
            r#"{"event":"backed_off","project":"nlp","resource":"gpu:A10G"}"#,
        ),
    ];
    snap.events.extend(mine.iter().cloned());
    snap.events.extend(others.iter().cloned());
    let mut st = opened(1);
    feed(&mut st, 0, snap, NOW.0);
    let got = st.detail_claim_events();
    let own = got.iter().filter(|e| e.target == "claim 1").count();
    assert!(own >= 1, "its own events stay");
    for e in &mine {
        assert!(got.contains(&e), "missing {e:?}");
    }
    for e in &others {
        assert!(!got.contains(&e), "not about claim 1: {e:?}");
    }
    assert_eq!(got.len(), own + mine.len());
    // Events on something else say what they were on.
    let screen = text(&st, 200, 60);
    assert!(
        screen.contains("cordon lab-a:0 by operator: cordoned"),
        "{screen}"
    );
}

/// `gpuboard --demo status --dump-screen ARG --size 120x40`: (success, stdout, stderr).
fn dump_screen(arg: &str) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args(["--demo", "status", "--dump-screen", arg, "--size", "120x40"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn dump_screen_draws_a_claim_named_by_id() {
    // An id no source lists: an error naming the ids there are.
    let (code, out, err) = dump_screen("claim:999999999");
    assert_ne!(code, Some(0), "{out}");
    assert!(
        err.contains("--dump-screen claim:999999999: no claim `999999999`; claims: "),
        "{err}"
    );
    // One of them draws that claim's detail.
    let listed = err.split("claims: ").nth(1).unwrap();
    let id: u64 = listed
        .split([',', ' '])
        .find_map(|w| w.trim().parse().ok())
        .unwrap_or_else(|| panic!("no id listed in {err}"));
    let (code, out, err) = dump_screen(&format!("claim:{id}"));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("claim {id} ")), "{out}");
    assert!(out.contains("Audit history"), "{out}");
    // Not a number, and no id at all: refused while the command line is read (exit 2).
    let (code, _, err) = dump_screen("claim:x");
    assert_ne!(code, Some(0));
    assert!(err.contains("an id is a number"), "{err}");
    let (code, _, err) = dump_screen("claim");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("claim:ID"), "{err}");
}

#[test]
fn a_pending_row_says_how_many_nodes_refused_and_enter_lists_them_all() {
    // (size, what PLACE says for claim 6: 2 nodes short of memory, 2 other kinds)
    let cases = [
        ((80, 24), "2 nodes: memory +2 "),
        ((120, 40), "2 nodes: memory +2 "),
        ((200, 60), "2 nodes: memory (+2 more) "),
    ];
    for ((w, h), want) in cases {
        let mut st = lab_state();
        st.size = (w, h);
        select(&mut st, 6);
        let screen = text(&st, w, h);
        let row = screen
            .lines()
            .find(|l| l.starts_with("│6 "))
            .unwrap_or_else(|| panic!("no row 6 in\n{screen}"));
        assert!(row.contains(want), "{w}x{h}: {row}");
        // The panel under the table says there are more than it shows.
        assert!(
            screen.contains("why pending (1 of 4, Enter lists all): node lab-a"),
            "{w}x{h}:\n{screen}"
        );
        key(&mut st, KeyCode::Enter);
        let detail = text(&st, w, h.max(40));
        assert!(detail.contains("Why pending (4 reasons)"), "{detail}");
    }
}
