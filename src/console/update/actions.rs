//! Actions on a picked target: release (behind a confirmation), move (with a target
//! picker) and cordon.

use ratatui::crossterm::event::KeyEvent;

use crate::snapshot::ClaimState;
use crate::sources::Action;

use super::{act, flash, move_across};
use crate::console::keymap::{Context, KeyAction};
use crate::console::msg::Effect;
use crate::console::state::{Confirm, Mode, MovePick, State, View};

/// Opens the release confirmation for the selected claim (Claims view only).
pub(super) fn release(state: &mut State) -> Vec<Effect> {
    let Some(k) = (if state.view == View::Claims {
        state.selected_claim()
    } else {
        None
    }) else {
        flash(
            state,
            "select a claim in the Claims view to release it",
            true,
        );
        return Vec::new();
    };
    let Some((slot, c)) = state.claim(k) else {
        return Vec::new();
    };
    let place = crate::sources::endpoint::place(c);
    let body = vec![
        format!("Release claim {} on {}?", c.id, slot.name),
        format!(
            "project {}, holder {}, {}",
            c.project,
            c.holder.as_deref().unwrap_or("-"),
            c.form
        ),
        format!("at {place}, {} reserved", c.memory_reserved.iec()),
        "Its processes lose their reservation.".to_string(),
    ];
    let confirm = Confirm {
        source: k.source,
        action: Action::Release { id: c.id },
        title: "Release claim".to_string(),
        body,
        ok_focused: false,
    };
    state.mode = Mode::Confirm(Box::new(confirm));
    Vec::new()
}

/// Keys in the confirmation dialog: switch buttons, confirm or cancel.
pub(super) fn confirm_key(state: &mut State, mut c: Confirm, ev: KeyEvent) -> Vec<Effect> {
    match state.keymap.action(Context::Dialog, &ev) {
        Some(KeyAction::Cancel) => state.mode = Mode::Normal,
        Some(
            KeyAction::ChoiceLeft
            | KeyAction::ChoiceRight
            | KeyAction::NextField
            | KeyAction::PrevField,
        ) => {
            c.ok_focused = !c.ok_focused;
            state.mode = Mode::Confirm(Box::new(c));
        }
        Some(KeyAction::Confirm) => {
            state.mode = Mode::Normal;
            if c.ok_focused {
                return act(state, c.source, c.action);
            }
        }
        _ => state.mode = Mode::Confirm(Box::new(c)),
    }
    Vec::new()
}

/// Opens the move picker for the selected placed claim, listing the GPUs of every acting
/// source it could move to.
pub(super) fn open_move(state: &mut State) {
    let Some(k) = (if state.view == View::Claims {
        state.selected_claim()
    } else {
        None
    }) else {
        flash(
            state,
            "select a placed claim in the Claims view to move it",
            true,
        );
        return;
    };
    let Some((_, c)) = state.claim(k) else {
        return;
    };
    if c.state != ClaimState::Placed {
        let text = format!("claim {} is pending: nothing to move", c.id);
        flash(state, text, true);
        return;
    }
    let from = crate::sources::endpoint::place(c);
    let holds = c.shares.len().max(1);
    let id = c.id;
    let targets = move_across::rows(state, k.source, c);
    let pick = MovePick {
        source: k.source,
        id,
        from,
        targets,
        holds,
        selected: 0,
        sent: false,
        error: None,
        across: None,
    };
    state.mode = Mode::Move(Box::new(pick));
}

/// Keys in the move picker: pick a target (arrows, Tab, or the normal up/down keys such as
/// j/k: the picker has no text to type into), send the move, or cancel.
pub(super) fn move_key(state: &mut State, mut m: MovePick, ev: KeyEvent) -> Vec<Effect> {
    let n = m.targets.len();
    let mut out = Vec::new();
    let action = state.keymap.action(Context::Dialog, &ev).or_else(|| {
        match state.keymap.action(Context::Normal, &ev) {
            Some(KeyAction::Down) => Some(KeyAction::NextField),
            Some(KeyAction::Up) => Some(KeyAction::PrevField),
            _ => None,
        }
    });
    match action {
        Some(KeyAction::Cancel) => {
            state.mode = Mode::Normal;
            return out;
        }
        _ if m.sent => {}
        Some(KeyAction::NextField | KeyAction::ChoiceRight) if n > 0 => {
            m.selected = (m.selected + 1) % n;
        }
        Some(KeyAction::PrevField | KeyAction::ChoiceLeft) if n > 0 => {
            m.selected = (m.selected + n - 1) % n;
        }
        Some(KeyAction::Confirm) => match move_across::target(&m) {
            Ok(Some((to, target))) if to != m.source => {
                out = move_across::start(state, &mut m, to, target);
            }
            Ok(Some((_, target))) => {
                let action = Action::Move { id: m.id, target };
                out = act(state, m.source, action);
                m.sent = !out.is_empty();
                m.error = None;
            }
            Ok(None) => {}
            Err(why) => m.error = Some(why),
        },
        _ => {}
    }
    state.mode = Mode::Move(Box::new(m));
    out
}

/// Cordons (`Some(true)`), uncordons (`Some(false)`) or toggles (`None`) the selected GPU.
pub(super) fn cordon(state: &mut State, to: Option<bool>) -> Vec<Effect> {
    let key = match state.view {
        View::Detail => state
            .detail_device()
            .map(|(s, n, d)| (s, n.name.clone(), d.index, d.cordoned)),
        _ => state
            .selected_device()
            .filter(|_| state.view == View::Gpus)
            .and_then(|k| {
                let (_, n, d) = state.device(k)?;
                Some((k.source, n.name.clone(), d.index, d.cordoned))
            }),
    };
    let Some((source, node, index, now_cordoned)) = key else {
        flash(state, "select a GPU in the GPUs view to cordon it", true);
        return Vec::new();
    };
    let cordoned = to.unwrap_or(!now_cordoned);
    act(
        state,
        source,
        Action::Cordon {
            node,
            index,
            cordoned,
        },
    )
}
