//! The claim detail (issue 16, "a claim detail"): Enter on a claim in Claims opens
//! everything its source's snapshot says about it (holder, pid, processes, per-GPU shares,
//! lease, form as written, every pending reason, the project's backoffs, its audit
//! history); Esc goes back to Claims with the same claim selected. Snapshots at 80x24 and
//! 120x40 from the lab fixtures.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "common/console_fixtures.rs"]
mod console_fixtures;

use console_fixtures::{NOW, feed, lab_snapshot, lab_state};
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::msg::Msg;
use gpuboard::console::state::{State, View};
use gpuboard::console::theme::Theme;
use gpuboard::console::update::{show_view, update};
use gpuboard::ids::ClaimId;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

fn key(st: &mut State, code: KeyCode) {
    update(st, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)));
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
    key(st, KeyCode::Char('g'));
    for _ in 0..st.rows_claims.len() {
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
        for (w, h) in [(80, 24), (120, 40)] {
            insta::assert_snapshot!(format!("claim_detail_{name}_{w}x{h}"), text(&st, w, h));
        }
    }
}
