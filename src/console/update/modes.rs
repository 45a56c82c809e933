//! Keys, one handler per mode: browsing goes to `keys` (the key actions), help, the
//! filter and command lines are here; the dialogs' handlers live with their dialogs.

use ratatui::crossterm::event::{KeyCode, KeyEvent};

use super::actions::move_key;
use super::command::{command, complete};
use super::confirm::confirm_key;
use super::form::form_key;
use super::keys::normal_key;
use super::line::edit_line;
use crate::console::keymap::{Context, KeyAction};
use crate::console::msg::Effect;
use crate::console::state::{Mode, State};

/// A key press, handled by whatever has the keyboard.
pub(super) fn key(state: &mut State, ev: KeyEvent) -> Vec<Effect> {
    match state.mode.clone() {
        Mode::Normal => normal_key(state, ev),
        Mode::Help => {
            let a = state.keymap.action(Context::Normal, &ev);
            let page = state.size.1.saturating_sub(4).max(1);
            match a {
                Some(KeyAction::Help | KeyAction::Back | KeyAction::Quit) => {
                    state.mode = Mode::Normal;
                    state.help_scroll = 0;
                }
                _ if ev.code == KeyCode::Esc => {
                    state.mode = Mode::Normal;
                    state.help_scroll = 0;
                }
                Some(KeyAction::Down) => state.help_scroll = state.help_scroll.saturating_add(1),
                Some(KeyAction::Up) => state.help_scroll = state.help_scroll.saturating_sub(1),
                Some(KeyAction::PageDown) => {
                    state.help_scroll = state.help_scroll.saturating_add(page);
                }
                Some(KeyAction::PageUp) => {
                    state.help_scroll = state.help_scroll.saturating_sub(page);
                }
                Some(KeyAction::Top) => state.help_scroll = 0,
                _ => {}
            }
            state.dirty = true;
            Vec::new()
        }
        Mode::Filter(text) => {
            let text = edit_line(text, &ev);
            let before = state.filter().to_string();
            match ev.code {
                KeyCode::Esc => {
                    state.filter_mut().clear();
                    state.mode = Mode::Normal;
                }
                KeyCode::Enter => state.mode = Mode::Normal,
                _ => {
                    state.filter_mut().clone_from(&text);
                    state.mode = Mode::Filter(text);
                }
            }
            if state.filter() != before {
                state.reshape_rows();
            }
            Vec::new()
        }
        Mode::Command(text) => match ev.code {
            KeyCode::Esc => {
                state.mode = Mode::Normal;
                Vec::new()
            }
            KeyCode::Enter => {
                state.mode = Mode::Normal;
                command(state, &text)
            }
            KeyCode::Tab => {
                state.mode = Mode::Command(complete(state, &text));
                Vec::new()
            }
            _ => {
                state.mode = Mode::Command(edit_line(text, &ev));
                Vec::new()
            }
        },
        Mode::Form(form) => form_key(state, *form, ev),
        Mode::Confirm(c) => confirm_key(state, *c, ev),
        Mode::Move(m) => move_key(state, *m, ev),
        Mode::Handover => super::handover::pane_key(state, ev),
        Mode::Why(scroll) => {
            why_key(state, scroll, &ev);
            Vec::new()
        }
        Mode::RewindTo(text) => super::rewind::prompt_key(state, text, &ev),
    }
}

/// Keys in the Fair share reasons popup: scroll, or Esc (Enter, `q`) back.
fn why_key(state: &mut State, scroll: u16, ev: &KeyEvent) {
    let page = state.size.1.saturating_sub(6).max(1);
    let max = state.why_scroll_max();
    state.mode = match state.keymap.action(Context::Normal, ev) {
        Some(KeyAction::Back | KeyAction::Open | KeyAction::Quit) => Mode::Normal,
        _ if ev.code == KeyCode::Esc => Mode::Normal,
        Some(KeyAction::Down) => Mode::Why(scroll.saturating_add(1).min(max)),
        Some(KeyAction::Up) => Mode::Why(scroll.saturating_sub(1)),
        Some(KeyAction::PageDown) => Mode::Why(scroll.saturating_add(page).min(max)),
        Some(KeyAction::PageUp) => Mode::Why(scroll.saturating_sub(page)),
        Some(KeyAction::Top) => Mode::Why(0),
        Some(KeyAction::Bottom) => Mode::Why(max),
        _ => Mode::Why(scroll),
    };
    state.dirty = true;
}
