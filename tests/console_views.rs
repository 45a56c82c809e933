//! Snapshot tests of every view on fixture data, at 80x24 and 160x48, in the default and
//! mono themes; plus the claim form, the release confirmation, the help overlay and a
//! source that is down; and colour checks of the over-limit and stale cells.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::console_fixtures;

use console_fixtures::{lab_state, with_down_source};
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::msg::Msg;
use gpuboard::console::state::{State, View};
use gpuboard::console::theme::{Theme, load_strict};
use gpuboard::console::update::{show_view, update};
use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::style::{Color, Modifier};

fn theme(name: &str) -> Theme {
    load_strict(name, &[]).unwrap()
}

fn key(st: &mut State, code: KeyCode) {
    update(st, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)));
}

fn text(st: &State, theme: &Theme, w: u16, h: u16) -> String {
    buffer_text(&render(st, theme, w, h).unwrap())
}

/// Every cell's style as a map: one letter per cell (a letter per distinct style, in order
/// of first appearance), then the legend. Two themes that style anything differently
/// give different maps.
fn style_map(st: &State, theme: &Theme, w: u16, h: u16) -> String {
    use std::fmt::Write;
    let letters: Vec<char> = ('A'..='Z').chain('a'..='z').chain('0'..='9').collect();
    let letter = |i: usize| letters.get(i).copied().unwrap_or('?');
    let buf = render(st, theme, w, h).unwrap();
    let mut styles: Vec<ratatui::style::Style> = Vec::new();
    let mut out = String::new();
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

#[test]
fn every_view_at_three_sizes_in_two_themes() {
    for t in ["default", "mono"] {
        let th = theme(t);
        for v in View::ALL {
            for (w, h) in [(80u16, 24u16), (120, 40), (200, 60)] {
                let mut st = lab_state();
                st.size = (w, h);
                show_view(&mut st, v);
                insta::assert_snapshot!(
                    format!("{}_{}_{w}x{h}_{t}", v.name(), "lab"),
                    text(&st, &th, w, h)
                );
                if (w, h) == (80, 24) {
                    insta::assert_snapshot!(
                        format!("{}_{}_{w}x{h}_{t}_styles", v.name(), "lab"),
                        style_map(&st, &th, w, h)
                    );
                }
            }
        }
    }
}

#[test]
fn themes_differ_in_their_styles_and_mono_tells_over_limit_from_selection() {
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    let names = ["default", "light", "high-contrast", "ansi16", "mono"];
    let maps: Vec<String> = names
        .iter()
        .map(|t| style_map(&st, &theme(t), 80, 24))
        .collect();
    for i in 0..maps.len() {
        for j in i + 1..maps.len() {
            assert_ne!(
                maps[i], maps[j],
                "{} and {} style alike",
                names[i], names[j]
            );
        }
    }
    let mono = theme("mono");
    assert_ne!(mono.over_limit, mono.selection);
    assert_ne!(mono.selection.patch(mono.over_limit), mono.selection);
}

#[test]
fn claim_form_release_confirm_help_and_down_source() {
    let th = theme("default");
    let mut st = lab_state();
    key(&mut st, KeyCode::Char('c'));
    insta::assert_snapshot!("claim_form_80x24", text(&st, &th, 80, 24));
    // The form shows the placement preview before confirming.
    update(
        &mut st,
        Msg::Planned {
            source: 0,
            result: Err(gpuboard::sources::Failure::Refused(
                "does not fit now: node lab-a: 2/2 GPUs insufficient memory".into(),
            )),
        },
    );
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    key(&mut st, KeyCode::Char('r'));
    insta::assert_snapshot!("release_confirm_80x24", text(&st, &th, 80, 24));
    let mut st = lab_state();
    key(&mut st, KeyCode::Char('?'));
    insta::assert_snapshot!("help_160x48", text(&st, &th, 160, 48));
    insta::assert_snapshot!("help_80x24", text(&st, &th, 80, 24));
    // At 80x24 the help does not fit: it scrolls to its last lines, and no further.
    st.size = (80, 24);
    assert!(!text(&st, &th, 80, 24).contains("play slower (rewound)"));
    for _ in 0..3 {
        key(&mut st, KeyCode::PageDown);
    }
    let scrolled = text(&st, &th, 80, 24);
    assert!(scrolled.contains("play slower (rewound)"), "{scrolled}");
    key(&mut st, KeyCode::Home);
    assert!(text(&st, &th, 80, 24).contains("quit the console"));
    let mut st = with_down_source();
    show_view(&mut st, View::Overview);
    insta::assert_snapshot!("down_source_overview_120x30", text(&st, &th, 120, 30));
    show_view(&mut st, View::Gpus);
    insta::assert_snapshot!("down_source_gpus_120x30", text(&st, &th, 120, 30));
}

fn find(buf: &Buffer, needle: &str) -> (u16, u16) {
    let lines = buffer_text(buf);
    for (y, line) in lines.lines().enumerate() {
        if let Some(byte) = line.find(needle) {
            let x = line[..byte].chars().count();
            return (x as u16, y as u16);
        }
    }
    panic!("`{needle}` not on screen:\n{lines}");
}

#[test]
fn over_limit_and_stale_cells_are_coloured() {
    for (name, check) in [
        (
            "default",
            Box::new(|c: &ratatui::buffer::Cell| c.bg == Color::Red)
                as Box<dyn Fn(&ratatui::buffer::Cell) -> bool>,
        ),
        (
            "mono",
            // Not reversed: that is the selection's mark.
            Box::new(|c: &ratatui::buffer::Cell| {
                c.modifier.contains(Modifier::UNDERLINED | Modifier::ITALIC)
                    && !c.modifier.contains(Modifier::REVERSED)
            }),
        ),
    ] {
        let th = theme(name);
        let mut st = lab_state();
        show_view(&mut st, View::Claims);
        // Move the selection off claim 1 so its row shows the cell's own style.
        key(&mut st, KeyCode::Down);
        let buf = render(&st, &th, 160, 48).unwrap();
        let (x, y) = find(&buf, "12G!");
        let cell = buf.cell((x, y)).unwrap();
        assert!(check(cell), "{name}: over-limit cell is {cell:?}");
        let plain = buf.cell((x, y + 2)).unwrap();
        assert!(
            !check(plain),
            "{name}: an ordinary cell is not styled as over-limit"
        );

        let st = with_down_source();
        let buf = render(&st, &th, 160, 48).unwrap();
        let (x, y) = find(&buf, "✖ DOWN");
        let cell = buf.cell((x, y)).unwrap();
        let want = th.stale;
        assert_eq!(
            cell.bg,
            want.bg.unwrap_or(Color::Reset),
            "{name}: stale badge {cell:?}"
        );
        assert_eq!(
            cell.fg,
            want.fg.unwrap_or(Color::Reset),
            "{name}: stale badge {cell:?}"
        );
        assert!(cell.modifier.contains(want.add_modifier), "{name}");
        let (x, y) = find(&buf, "stale");
        assert_eq!(
            buf.cell((x, y)).unwrap().bg,
            want.bg.unwrap_or(Color::Reset),
            "{name}: stale flag"
        );
    }
}
