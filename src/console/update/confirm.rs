//! The one confirmation dialog: every mutating action (release, move, cordon, project
//! reset, and any engine action) is asked through `update::ask` and sent only from `confirm_key`,
//! once OK is focused and, where asked, the target's id typed. A move across sources or a
//! hand-over is asked with its plan (`flows::Plan`); OK starts that flow.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::act;
use crate::console::flows::Plan;
use crate::console::keymap::{Context, KeyAction};
use crate::console::msg::{Asker, Effect};
use crate::console::state::{Confirm, Mode, State};

/// Keys in the confirmation dialog: type the id (when asked), switch buttons, confirm or
/// cancel. Cancel is focused when it opens; Enter on Cancel closes it. Typing the id asked
/// for moves the focus to OK; Enter after a wrong id says so rather than cancelling.
pub(super) fn confirm_key(state: &mut State, mut c: Confirm, ev: KeyEvent) -> Vec<Effect> {
    let typing = c.type_to_confirm.is_some();
    let plain = !ev
        .modifiers
        .intersects(KeyModifiers::CONTROL | KeyModifiers::ALT);
    match ev.code {
        KeyCode::Char(ch) if typing && plain => {
            c.typed.push(ch);
            c.error = None;
            // Once the id is typed, OK has the focus: Enter then confirms.
            c.ok_focused = c.typed_ok();
            state.mode = Mode::Confirm(Box::new(c));
            return Vec::new();
        }
        KeyCode::Backspace if typing => {
            c.typed.pop();
            c.ok_focused = c.typed_ok();
            state.mode = Mode::Confirm(Box::new(c));
            return Vec::new();
        }
        _ => {}
    }
    match state.keymap.action(Context::Dialog, &ev) {
        Some(KeyAction::Cancel) => state.mode = c.back.map_or(Mode::Normal, |m| *m),
        Some(
            KeyAction::ChoiceLeft
            | KeyAction::ChoiceRight
            | KeyAction::NextField
            | KeyAction::PrevField,
        ) => {
            c.ok_focused = !c.ok_focused;
            state.mode = Mode::Confirm(Box::new(c));
        }
        // Something typed and Enter on Cancel: never a silent cancel (Esc cancels).
        Some(KeyAction::Confirm) if !c.ok_focused && (!typing || c.typed.is_empty()) => {
            state.mode = c.back.map_or(Mode::Normal, |m| *m);
        }
        Some(KeyAction::Confirm) if !c.typed_ok() => {
            let want = c.type_to_confirm.clone().unwrap_or_default();
            let wrong = if c.typed.trim().is_empty() {
                String::new()
            } else {
                format!("`{}` is not it: ", c.typed.trim())
            };
            c.error = Some(if c.steps().is_empty() {
                format!(
                    "{wrong}type `{want}` to {} {} (Esc cancels)",
                    c.action.verb(),
                    c.action.target()
                )
            } else {
                format!("{wrong}type `{want}` to run the hand-over (Esc cancels)")
            });
            state.mode = Mode::Confirm(Box::new(c));
        }
        Some(KeyAction::Confirm) => {
            let (flow, sent) = match c.starts.take().map(|p| *p) {
                Some(Plan::Handover(run)) => return super::handover::start(state, run),
                Some(Plan::Move(chain)) => super::move_across::start(state, chain),
                None => (None, act(state, c.source, c.action, Asker::Operator)),
            };
            state.mode = match c.then {
                Some(m) if !sent.is_empty() => {
                    let mut then = *m;
                    // The picker follows the move it started, by its id.
                    if let Mode::Move(pick) = &mut then {
                        pick.flow = flow;
                    }
                    then
                }
                _ => c.back.map_or(Mode::Normal, |m| *m),
            };
            return sent;
        }
        _ => state.mode = Mode::Confirm(Box::new(c)),
    }
    Vec::new()
}
