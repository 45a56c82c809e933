//! One-line text inputs (the filter, the `:` line, the rewind prompt, the form's fields).

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// Text editing for one-line inputs: characters, backspace, ctrl-u.
pub(super) fn edit_line(mut text: String, ev: &KeyEvent) -> String {
    match ev.code {
        KeyCode::Backspace => {
            text.pop();
        }
        KeyCode::Char('u') if ev.modifiers.contains(KeyModifiers::CONTROL) => text.clear(),
        KeyCode::Char(c) if !ev.modifiers.contains(KeyModifiers::CONTROL) => text.push(c),
        _ => {}
    }
    text
}
