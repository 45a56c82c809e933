//! Finding problems in the lists (issue 16, finding 4 and 5): paging moves by what is
//! visible so Page Down visits every claim; `/idle`, `/uncl`, `/over`, `/pending`, `/backed`,
//! `/cordon`, `/stale` match states and flags, not only names; each view keeps its own
//! filter; Esc from the detail view returns where it was opened from; Events scroll.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::console_fixtures;

use std::collections::BTreeSet;

use console_fixtures::{code, k, lab_state, run, scaled_state};
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::msg::Msg;
use gpuboard::console::state::{State, View};
use gpuboard::console::theme::Theme;
use gpuboard::console::update::{show_view, update};
use gpuboard::snapshot::ClaimState;
use ratatui::crossterm::event::KeyCode;

fn typed(st: &mut State, text: &str) {
    run(st, text.chars().map(k).collect());
}
/// Claim ids in the Claims table on screen (the first column).
fn ids_on_screen(st: &State, w: u16, h: u16) -> BTreeSet<u64> {
    let text = buffer_text(&render(st, &Theme::plain(), w, h).unwrap());
    text.lines()
        .filter_map(|l| l.strip_prefix('│'))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn page_down_visits_every_claim() {
    // (width, height): the claim panel under the table shows from 16 body rows.
    for (w, h) in [(80, 24), (80, 16), (120, 40), (200, 60)] {
        let mut st = scaled_state(8, 8, 120).unwrap();
        update(
            &mut st,
            Msg::Resize {
                width: w,
                height: h,
            },
        );
        show_view(&mut st, View::Claims);
        let all: BTreeSet<u64> = st
            .claims
            .rows
            .iter()
            .map(|k| st.claim(*k).unwrap().1.id.0)
            .collect();
        assert!(all.len() > usize::from(h), "{w}x{h}: enough claims to page");
        let mut seen = ids_on_screen(&st, w, h);
        for _ in 0..all.len() {
            run(&mut st, vec![code(KeyCode::PageDown)]);
            seen.extend(ids_on_screen(&st, w, h));
        }
        assert_eq!(seen, all, "{w}x{h}: every claim shown while paging down");
        // And back up: the first claim comes back.
        for _ in 0..all.len() {
            run(&mut st, vec![code(KeyCode::PageUp)]);
        }
        assert_eq!(st.cursor_of(View::Claims).selected, 0);
    }
}

#[test]
fn page_size_is_the_visible_rows() {
    let mut st = scaled_state(8, 8, 120).unwrap();
    update(
        &mut st,
        Msg::Resize {
            width: 80,
            height: 24,
        },
    );
    show_view(&mut st, View::Claims);
    let shown = ids_on_screen(&st, 80, 24).len();
    run(&mut st, vec![code(KeyCode::PageDown)]);
    assert_eq!(st.cursor_of(View::Claims).selected, shown);
}

fn claim_is(st: &State, row: usize, f: fn(&gpuboard::snapshot::ClaimView) -> bool) -> bool {
    f(st.claim(st.claims.rows[row]).unwrap().1)
}

#[test]
fn filters_match_states_and_flags() {
    // (view, filter, what every listed row must be, at least this many rows)
    type Check = fn(&State, usize) -> bool;
    let cases: Vec<(View, &str, Check, usize)> = vec![
        (View::Claims, "idle", |st, r| claim_is(st, r, |c| c.idle), 1),
        (
            View::Claims,
            "over",
            |st, r| claim_is(st, r, |c| c.over_limit),
            1,
        ),
        (
            View::Claims,
            "pending",
            |st, r| claim_is(st, r, |c| c.state == ClaimState::Pending),
            1,
        ),
        (
            View::Gpus,
            "uncl",
            |st, r| {
                let (_, _, d) = st.device(st.gpus.rows[r]).unwrap();
                d.unclaimed_memory.is_some_and(|b| b.0 > 0)
            },
            1,
        ),
        (
            View::Gpus,
            "cordon",
            |st, r| st.device(st.gpus.rows[r]).unwrap().2.cordoned,
            1,
        ),
        (
            View::Gpus,
            "idle",
            |st, r| st.device(st.gpus.rows[r]).unwrap().2.allocated_but_idle(),
            0,
        ),
        (
            View::Ledger,
            "backed",
            |st, r| {
                let (_, p) = st.project(st.projects.rows[r]).unwrap();
                p.resources
                    .iter()
                    .any(|x| x.backoff_until.is_some_and(|t| t > st.now))
            },
            1,
        ),
    ];
    for (view, filter, check, min) in cases {
        let mut st = lab_state();
        show_view(&mut st, view);
        run(&mut st, vec![k('/')]);
        typed(&mut st, filter);
        run(&mut st, vec![code(KeyCode::Enter)]);
        let n = match view {
            View::Gpus => st.gpus.rows.len(),
            View::Claims => st.claims.rows.len(),
            _ => st.projects.rows.len(),
        };
        assert!(n >= min, "/{filter} in {view:?} lists {n}");
        for r in 0..n {
            assert!(
                check(&st, r),
                "/{filter} in {view:?}: row {r} does not match"
            );
        }
    }
}

#[test]
fn each_view_keeps_its_own_filter() {
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    let all_gpus = st.gpus.rows.len();
    run(&mut st, vec![k('/')]);
    typed(&mut st, "pending");
    run(&mut st, vec![code(KeyCode::Enter)]);
    assert!(st.claims.rows.len() < 6);
    show_view(&mut st, View::Gpus);
    assert_eq!(st.filter(), "");
    assert_eq!(
        st.gpus.rows.len(),
        all_gpus,
        "the claims filter stays in Claims"
    );
    show_view(&mut st, View::Claims);
    assert_eq!(st.filter(), "pending");
}

#[test]
fn esc_from_detail_returns_where_it_came_from() {
    // (view the detail is opened from, how, the detail it opens)
    for (from, keys, detail) in [
        (View::Claims, vec![code(KeyCode::Enter)], View::ClaimDetail),
        (View::Gpus, vec![code(KeyCode::Enter)], View::Detail),
        (View::Claims, vec![k('5')], View::Detail),
    ] {
        let mut st = lab_state();
        show_view(&mut st, from);
        run(&mut st, keys);
        assert_eq!(st.view, detail);
        run(&mut st, vec![code(KeyCode::Esc)]);
        assert_eq!(st.view, from);
    }
}

#[test]
fn events_scroll_and_filter() {
    let mut st = lab_state();
    show_view(&mut st, View::Events);
    let n = st.audit_events().len();
    assert!(n > 3);
    run(&mut st, vec![code(KeyCode::End)]);
    assert_eq!(st.cursor_of(View::Events).selected, n - 1);
    let text = buffer_text(&render(&st, &Theme::plain(), 80, 24).unwrap());
    let (_, oldest) = st.audit_events()[n - 1];
    assert!(
        text.contains(&oldest.target),
        "the oldest event is shown:\n{text}"
    );
    run(&mut st, vec![k('/')]);
    typed(&mut st, "release");
    run(&mut st, vec![code(KeyCode::Enter)]);
    assert!(st.audit_events().iter().all(|(_, e)| {
        [&e.action, &e.target, &e.detail, &e.actor]
            .iter()
            .any(|s| s.contains("release"))
    }));
}

#[test]
fn unknown_figures_read_n_a_never_zero() {
    let mut st = lab_state();
    let mut snap = console_fixtures::lab_snapshot();
    for n in &mut snap.nodes {
        for d in &mut n.devices {
            d.telemetry = None;
            d.unclaimed_memory = None;
        }
    }
    for c in &mut snap.claims {
        c.memory_used = None;
        c.over_limit = false;
        c.idle = false;
    }
    console_fixtures::feed(&mut st, 0, snap, console_fixtures::NOW.0);
    show_view(&mut st, View::Overview);
    let text = buffer_text(&render(&st, &Theme::plain(), 80, 24).unwrap());
    for label in ["Memory used", "Over limit", "Idle", "Unclaimed use"] {
        let line = text.lines().find(|l| l.contains(label)).unwrap();
        assert!(line.contains("n/a"), "{line}");
    }
}

#[test]
fn one_key_cycles_the_problem_lists() {
    // (view, the filters `!` sets in turn, then back to none)
    for view in [View::Claims, View::Gpus, View::Ledger] {
        let mut st = lab_state();
        show_view(&mut st, view);
        for want in view.problem_filters() {
            run(&mut st, vec![k('!')]);
            assert_eq!(st.filter(), *want, "{view:?}");
        }
        run(&mut st, vec![k('!')]);
        assert_eq!(st.filter(), "", "{view:?}: back to every row");
    }
    // The first press in Claims lists exactly the claims over their limit.
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    let over = st
        .claims
        .rows
        .iter()
        .filter(|k| st.claim(**k).unwrap().1.over_limit)
        .count();
    run(&mut st, vec![k('!')]);
    assert!(over > 0);
    assert_eq!(st.claims.rows.len(), over);
}

#[test]
fn claims_sort_by_over_limit() {
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    typed(&mut st, ":sort over");
    run(&mut st, vec![code(KeyCode::Enter)]);
    let first = st.claim(st.claims.rows[0]).unwrap().1;
    assert!(first.over_limit, "claim {} first", first.id);
}

#[test]
fn a_sort_typo_is_refused_naming_the_columns_and_changes_nothing() {
    use gpuboard::console::lists::ClaimColumn;
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    typed(&mut st, ":sort over");
    run(&mut st, vec![code(KeyCode::Enter)]);
    let rows = st.claims.rows.clone();
    typed(&mut st, ":sort ovr");
    run(&mut st, vec![code(KeyCode::Enter)]);
    let flash = st.flash.clone().unwrap();
    assert!(flash.error);
    assert_eq!(
        flash.text,
        "no column `ovr` here; sort by: id, project, memory, used, age, state, over"
    );
    assert_eq!(st.claims.sort, ClaimColumn::Over, "the sort stays");
    assert_eq!(st.claims.rows, rows);
    // `s` steps to the next column (after the last, the list's own order), `S` turns it.
    run(&mut st, vec![k('s')]);
    assert_eq!(st.claims.sort, ClaimColumn::Id);
    let by_id = st.claims.rows.clone();
    run(&mut st, vec![k('S')]);
    assert!(st.claims.reverse);
    let mut back = st.claims.rows.clone();
    back.reverse();
    assert_eq!(back, by_id);
    // A view without a list has no sort to set.
    show_view(&mut st, View::Events);
    typed(&mut st, ":sort id");
    run(&mut st, vec![code(KeyCode::Enter)]);
    assert_eq!(st.flash.unwrap().text, "the Events view has no sort");
}

#[test]
fn overview_counts_open_their_lists() {
    use gpuboard::console::state::OVERVIEW_JUMPS;
    for (row, (label, view, filter)) in OVERVIEW_JUMPS.iter().enumerate() {
        let mut st = lab_state();
        show_view(&mut st, View::Overview);
        run(&mut st, vec![code(KeyCode::Home)]);
        run(&mut st, (0..row).map(|_| k('j')).collect());
        let text = buffer_text(&render(&st, &Theme::plain(), 80, 24).unwrap());
        assert!(
            text.contains(&format!("▸{label}")),
            "{label} marked:\n{text}"
        );
        run(&mut st, vec![code(KeyCode::Enter)]);
        assert_eq!((st.view, st.filter()), (*view, *filter), "{label}");
        run(&mut st, vec![code(KeyCode::Esc)]);
        assert_eq!(st.view, View::Overview, "{label}: Esc goes back");
        assert_eq!(st.filter_of(*view), "", "{label}: its filter went with it");
    }
    // "Over limit" lists exactly the claims over their limit.
    let mut st = lab_state();
    show_view(&mut st, View::Overview);
    run(&mut st, vec![k('j'), k('j'), code(KeyCode::Enter)]);
    assert!(!st.claims.rows.is_empty());
    assert!(
        st.claims
            .rows
            .iter()
            .all(|k| st.claim(*k).unwrap().1.over_limit)
    );
}

#[test]
fn a_list_emptied_by_a_filter_says_so_without_the_sources_notes() {
    let mut st = lab_state();
    if let Some(d) = st.sources[0].data.as_mut().map(std::sync::Arc::make_mut) {
        d.endpoint.telemetry_note = Some("install the NVIDIA driver".to_string());
    }
    show_view(&mut st, View::Gpus);
    *st.filter_mut() = "no-such-gpu".to_string();
    st.reshape_rows();
    let screen = buffer_text(&render(&st, &Theme::plain(), 120, 40).unwrap());
    assert!(
        screen.contains("match the filter `no-such-gpu`"),
        "{screen}"
    );
    assert!(!screen.contains("install the NVIDIA driver"), "{screen}");
}
