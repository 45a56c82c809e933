//! The Fair share view's WHY NOT NOW at every width (issue 16): under 170 columns the
//! selected project's reasons are spelled out whole in a pane under the table (SHARE and
//! RUN move there), and a reason cut in the table ends in `…`. Snapshots at 80x24, 120x40
//! and 200x60 with the backed-off project selected.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "common/console_fixtures.rs"]
mod console_fixtures;

use console_fixtures::lab_state;
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::msg::Msg;
use gpuboard::console::state::{Picked, State, View};
use gpuboard::console::theme::Theme;
use gpuboard::console::update::{show_view, update};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

const REASON: &str = "backed off: no pending claim fits A100";

/// The lab at `w`x`h` on Fair share with `project` selected (by `j` from the top).
fn on_project(project: &str, w: u16, h: u16) -> State {
    let mut st = lab_state();
    st.size = (w, h);
    show_view(&mut st, View::Ledger);
    for _ in 0..st.rows_projects.len() {
        if st.picked[View::Ledger.position()] == Some(Picked::Project(0, project.into())) {
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
