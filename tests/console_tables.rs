//! Responsive tables (issue 16, finding 2): identity columns are never cut mid-value at
//! 80, 120 or 200 columns; real-length host names stay tellable apart; PLACE shows every
//! device of a multi-GPU claim; MODEL carries the memory size.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::console_fixtures;

use console_fixtures::{NOW, feed, lab_snapshot, lab_state};
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::state::{State, View};
use gpuboard::console::theme::Theme;
use gpuboard::console::update::show_view;

/// The lab with production-length host names.
fn long_names() -> State {
    let mut snap = lab_snapshot();
    let rename = |n: &str| match n {
        "lab-a" => "prod-h100-node-017".to_string(),
        _ => "prod-h100-node-018".to_string(),
    };
    for n in &mut snap.nodes {
        n.name = rename(&n.name);
    }
    for c in &mut snap.claims {
        c.node = c.node.as_deref().map(rename);
    }
    let mut st = lab_state();
    feed(&mut st, 0, snap, NOW.0);
    st
}

fn screen(st: &State, w: u16, h: u16) -> String {
    buffer_text(&render(st, &Theme::plain(), w, h).unwrap())
}

#[test]
fn node_names_are_never_cut_into_the_same_text() {
    for (w, h) in [(80, 24), (120, 40), (200, 60)] {
        let mut st = long_names();
        show_view(&mut st, View::Gpus);
        let text = screen(&st, w, h);
        let rows: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.contains(" A100 ")
                    || l.contains(" A10G ")
                    || l.contains("A100-")
                    || l.contains("A10G")
            })
            .collect();
        assert_eq!(rows.len(), 4, "{w}x{h}:\n{text}");
        let node = |l: &str| {
            l.trim_start_matches('│')
                .split_whitespace()
                .next()
                .unwrap()
                .to_string()
        };
        let (a, b) = (node(rows[0]), node(rows[2]));
        assert_ne!(a, b, "{w}x{h}: two nodes read the same:\n{text}");
        for n in [&a, &b] {
            assert!(
                n.starts_with("prod-h") && (n.ends_with("-017") || n.ends_with("-018")),
                "{w}x{h}: `{n}` lost an end:\n{text}"
            );
        }
        if w >= 120 {
            assert!(
                text.contains("prod-h100-node-017"),
                "{w}x{h}: room for the whole name"
            );
        }
        // Memory size in MODEL; free memory and free compute named apart.
        assert!(
            text.contains("A100 40G") || text.contains("A100-SXM4-40GB"),
            "{text}"
        );
        assert!(
            text.contains("MEM FREE") && text.contains("GPU FREE"),
            "{text}"
        );
    }
}

#[test]
fn place_keeps_both_ends_and_every_device() {
    let mut snap = lab_snapshot();
    let c = snap.claims.iter_mut().find(|c| c.node.is_some()).unwrap();
    c.node = Some("prod-h100-node-018".into());
    let mut shares = Vec::new();
    for d in 2..8 {
        let mut s = c.shares[0];
        s.device = d;
        shares.push(s);
    }
    c.shares = shares;
    let id = c.id;
    let mut st = lab_state();
    feed(&mut st, 0, snap, NOW.0);
    show_view(&mut st, View::Claims);
    // At 60 columns lease and age make way: the place is still whole.
    for (w, h) in [(60, 20), (80, 24), (120, 40)] {
        let text = screen(&st, w, h);
        let row = text
            .lines()
            .find(|l| l.trim_start_matches('│').starts_with(&format!("{id} ")))
            .unwrap();
        assert!(row.contains(":2-7"), "{w}x{h}: {row}");
        assert!(
            row.contains("prod-h") && row.contains("-018:2-7"),
            "{w}x{h}: {row}"
        );
    }
}

#[test]
fn a_long_message_is_shown_whole_and_hints_use_human_names() {
    let mut st = lab_state();
    let words = "demo: move claim 12 refused: the target does not fit: node dgx-a100-80: 8/8 GPUs insufficient memory (has 2 GiB free, needs 10 GiB); node hgx-h100: 8/8 GPUs other accelerator type";
    st.flash = Some(gpuboard::console::state::Flash {
        text: words.to_string(),
        error: true,
        at: NOW,
    });
    let text = screen(&st, 80, 24);
    let joined: String = text
        .lines()
        .map(|l| l.trim_matches(|c| c == '│' || c == ' '))
        .collect::<Vec<_>>()
        .join(" ");
    for w in words.split_whitespace() {
        assert!(joined.contains(w), "`{w}` missing:\n{text}");
    }
    // Footer hints read as words and are never cut.
    st.flash = None;
    let text = screen(&st, 80, 24);
    let hints = text.lines().rev().nth(1).unwrap();
    assert!(!hints.contains('_'), "{hints}");
    assert!(
        hints.contains("? help") && hints.contains("q quit"),
        "{hints}"
    );
    let wide = screen(&st, 200, 60);
    let hints = wide.lines().rev().nth(1).unwrap();
    assert!(hints.contains("s sort next"), "{hints}");
}

#[test]
fn the_command_line_lists_its_candidates() {
    use gpuboard::console::state::Mode;
    // (typed, candidates listed)
    let cases = [
        ("so", vec!["sort", "source"]),
        ("sort ", vec!["node", "free", "util"]),
        ("filter ", vec!["idle", "unclaimed", "cordon"]),
    ];
    for (typed, want) in cases {
        let mut st = lab_state();
        show_view(&mut st, View::Gpus);
        st.mode = Mode::Command(typed.to_string());
        let text = screen(&st, 120, 40);
        let line = text.lines().find(|l| l.starts_with(':')).unwrap();
        for w in want {
            assert!(line.contains(w), "`:{typed}` lacks `{w}`: {line}");
        }
    }
}

#[test]
fn flags_stay_at_60_columns() {
    let mut st = lab_state();
    show_view(&mut st, View::Gpus);
    let wide = screen(&st, 80, 24);
    let narrow = screen(&st, 60, 20);
    assert!(narrow.contains("FLAGS"), "{narrow}");
    // Every flag shown at 80 columns is shown at 60 too.
    for flag in ["unclaimed", "cordoned", "idle", "lost", "unhealthy"] {
        assert_eq!(
            wide.contains(flag),
            narrow.contains(flag),
            "{flag}:\n{wide}\n{narrow}"
        );
    }
    assert!(
        ["unclaimed", "cordoned", "idle"]
            .iter()
            .any(|f| narrow.contains(f)),
        "the lab shows some flag: {narrow}"
    );
}
