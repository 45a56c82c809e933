//! The Fair share view's WHY NOT NOW at every width (issue 16): under 170 columns the
//! selected project's reasons are spelled out whole in a pane under the table (SHARE and
//! RUN move there), and a reason cut in the table ends in `…`. Snapshots at 80x24, 120x40
//! and 200x60 with the backed-off project selected. Where the reasons overflow the pane,
//! its last line says how many more there are and Enter opens them whole in a popup that
//! scrolls (j/k) and closes with Esc.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::console_fixtures;

use console_fixtures::{NOW, feed, lab_snapshot, lab_state};
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::msg::Msg;
use gpuboard::console::state::{Mode, Picked, State, View};
use gpuboard::console::theme::Theme;
use gpuboard::console::update::{show_view, update};
use gpuboard::snapshot::ProjectResourceView;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

const REASON: &str = "backed off: no pending claim fits A100";

/// The lab at `w`x`h` on Fair share with `project` selected (by `j` from the top).
fn on_project(project: &str, w: u16, h: u16) -> State {
    let mut st = lab_state();
    st.size = (w, h);
    show_view(&mut st, View::Ledger);
    for _ in 0..st.projects.rows.len() {
        if st.projects.picked == Some(Picked::Project(0, project.into())) {
            return st;
        }
        update(
            &mut st,
            Msg::Key(KeyEvent::new(KeyCode::Char('j'), KeyModifiers::NONE)),
        );
    }
    panic!("{project} not listed");
}

/// The "Why not now" pane's text, its wrapped lines joined by spaces.
fn pane_text(screen: &str) -> Option<String> {
    let lines: Vec<&str> = screen.lines().collect();
    let top = lines.iter().position(|l| l.contains("Why not now"))?;
    let words: Vec<&str> = lines[top + 1..]
        .iter()
        .take_while(|l| !l.starts_with('└'))
        .map(|l| l.trim_matches(|c| c == '│' || c == ' '))
        .filter(|l| !l.is_empty())
        .collect();
    Some(words.join(" "))
}

fn text(st: &State, w: u16, h: u16) -> String {
    buffer_text(&render(st, &Theme::plain(), w, h).unwrap())
}

#[test]
fn why_not_now_is_whole_at_every_size() {
    for (w, h) in [(80, 24), (120, 40), (200, 60)] {
        let st = on_project("robotics", w, h);
        let screen = text(&st, w, h);
        let pane = pane_text(&screen);
        assert_eq!(
            pane.is_some(),
            w < 170,
            "{w}x{h}: the pane shows under 170 columns"
        );
        match pane {
            Some(pane) => {
                let want = format!("A100: {REASON} (until 2024-03-01 12:09:00, in 9m)");
                assert!(pane.contains(&want), "{w}x{h}: {want:?} not in {pane:?}");
                assert!(pane.contains("robotics share 100, running 1, pending 0"));
            }
            None => assert!(screen.contains(REASON), "{w}x{h}: not whole in\n{screen}"),
        }
        insta::assert_snapshot!(format!("fairshare_backed_off_{w}x{h}"), screen);
    }
    // A project with nothing holding it back says so.
    let st = on_project("batch", 80, 24);
    let pane = pane_text(&text(&st, 80, 24)).unwrap();
    assert!(pane.contains("nothing holds it back"), "{pane}");
    // Too short for the pane: the table alone, the cut reason ending in `…`.
    let st = on_project("robotics", 80, 16);
    let screen = text(&st, 80, 16);
    assert!(!screen.contains("Why not now"), "{screen}");
    assert!(screen.contains("backed off: no…"), "{screen}");
}

/// The lab with robotics also backed off on A10G for a reason too long for one line: at
/// 80x24 its reasons take more lines than the pane's five.
fn overflowing(w: u16, h: u16) -> State {
    let mut snap = lab_snapshot();
    let robotics = snap
        .projects
        .iter_mut()
        .find(|p| p.name == "robotics")
        .unwrap();
    robotics.resources.push(ProjectResourceView {
        resource: "A10G".into(),
        debt: 300.0,
        target: 0.25,
        used: 0.0,
        eligible: false,
        backoff_until: Some(NOW.plus_secs(1_200)),
        backoff_interval_s: Some(1_200),
        pending: 0,
        reason: Some(
            "backed off: no pending claim fits A10G: lab-b:0 has 8 GiB free and lab-b:1 is \
             cordoned, while its smallest pending claim needs 24 GiB on one device"
                .to_string(),
        ),
    });
    let mut st = on_project("robotics", w, h);
    feed(&mut st, 0, snap, NOW.0 - 500);
    st
}

fn key(st: &mut State, code: KeyCode) {
    update(st, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)));
}

#[test]
fn an_overflowing_pane_says_how_much_more_and_enter_shows_it_whole() {
    let mut st = overflowing(80, 24);
    let screen = text(&st, 80, 24);
    let pane = pane_text(&screen).unwrap();
    // The pane: its first lines, then how many more Enter shows.
    assert!(pane.contains("robotics share 100"), "{pane}");
    let more = pane
        .split("(+")
        .nth(1)
        .and_then(|r| r.split(" more lines: Enter)").next())
        .unwrap_or_else(|| panic!("no `(+N more lines: Enter)` in {pane:?}\n{screen}"));
    let more: usize = more.parse().unwrap();
    assert!(more >= 1, "{pane}");
    assert!(
        !pane.contains("on one device"),
        "the end is past the pane: {pane}"
    );
    insta::assert_snapshot!("fairshare_overflow_80x24", screen);
    // Enter: every reason whole, with both backoffs' ends.
    key(&mut st, KeyCode::Enter);
    assert_eq!(st.mode, Mode::Why(0));
    let popup = text(&st, 80, 24);
    let joined: String = popup
        .lines()
        .map(|l| l.trim_matches(|c| c == '│' || c == ' ').to_string())
        .collect::<Vec<_>>()
        .join(" ");
    for want in [
        "Why not now: robotics",
        REASON,
        "(until 2024-03-01 12:09:00, in 9m)",
        "needs 24 GiB on one device",
        "(until 2024-03-01 12:20:00, in 20m)",
    ] {
        assert!(joined.contains(want), "{want:?} not in\n{popup}");
    }
    insta::assert_snapshot!("fairshare_why_popup_80x24", popup);
    // Esc: back to the table, the same project selected.
    key(&mut st, KeyCode::Esc);
    assert_eq!(st.mode, Mode::Normal);
    assert_eq!(st.view, View::Ledger);
    assert_eq!(
        st.projects.picked,
        Some(Picked::Project(0, "robotics".into()))
    );
    // What fits says no more.
    let st = on_project("robotics", 80, 24);
    assert!(!text(&st, 80, 24).contains("more lines"));
}

#[test]
fn keys_in_the_reasons_popup() {
    use KeyCode::{Char, Down, End, Enter, Esc, Home, PageDown, PageUp, Up};
    // (size, keys after opening it with Enter, the mode after them). At 80x24 the
    // reasons fit the popup: nothing to scroll. At 40x12 they take 11 lines in 8 rows:
    // it scrolls up to 3 lines, and no further.
    let cases: &[((u16, u16), &[KeyCode], Mode)] = &[
        ((80, 24), &[], Mode::Why(0)),
        ((80, 24), &[Char('j'), Char('j')], Mode::Why(0)),
        ((80, 24), &[PageDown], Mode::Why(0)),
        ((40, 12), &[Char('j'), Char('j')], Mode::Why(2)),
        ((40, 12), &[Down, Up, Up], Mode::Why(0)),
        ((40, 12), &[Char('j'), Char('k')], Mode::Why(0)),
        ((40, 12), &[PageDown], Mode::Why(3)),
        ((40, 12), &[PageDown, Char('j'), Char('k')], Mode::Why(2)),
        ((40, 12), &[End], Mode::Why(3)),
        ((40, 12), &[End, PageUp], Mode::Why(0)),
        ((40, 12), &[Char('j'), Home], Mode::Why(0)),
        ((80, 24), &[Char('x')], Mode::Why(0)),
        ((80, 24), &[Esc], Mode::Normal),
        ((80, 24), &[Enter], Mode::Normal),
        ((80, 24), &[Char('q')], Mode::Normal),
    ];
    for ((w, h), keys, want) in cases {
        let mut st = overflowing(*w, *h);
        key(&mut st, Enter);
        for k in *keys {
            key(&mut st, *k);
        }
        assert_eq!(&st.mode, want, "{w}x{h} {keys:?}");
        assert!(!st.quit, "{keys:?}: q closes the popup, not the console");
        assert_eq!(st.view, View::Ledger, "{keys:?}");
    }
    // Scrolled to the end at 40x12, the popup shows the last reason's end; at the top,
    // the project's line.
    let mut st = overflowing(40, 12);
    key(&mut st, Enter);
    assert!(text(&st, 40, 12).contains("robotics share 100"));
    key(&mut st, End);
    let end = text(&st, 40, 12);
    assert!(end.contains("in 20m)"), "{end}");
    assert!(!end.contains("robotics share 100"), "{end}");
    // Enter in other views is not the popup.
    let mut st = overflowing(80, 24);
    show_view(&mut st, View::Claims);
    key(&mut st, Enter);
    assert_ne!(st.mode, Mode::Why(0));
}
