//! Keys of the GPUs view's "by GPU" list: `v` toggles it with the by-source list; while
//! it shows, the cursor keys move over physical GPUs, Enter opens a GPU's holder tree
//! (the keys then scroll it, Esc closes it) and `!` steps the flag filter. And the join
//! itself, in the live console off the update step: asked for when a source's data
//! changed, one at a time, its answer shown when it comes.

use crate::console::keymap::KeyAction;
use crate::console::msg::Effect;
use crate::console::state::{State, View};
use crate::physical::PhysicalFleet;

/// Asks for a join when a source's data changed and none is in flight: one at a time,
/// so the changes that come meanwhile are joined next, together, from the latest data.
pub(super) fn join_due(state: &mut State) -> Vec<Effect> {
    let b = &mut state.physical.background;
    if !b.on || !b.stale || b.in_flight {
        return Vec::new();
    }
    b.stale = false;
    b.in_flight = true;
    vec![Effect::Join(Box::new(state.join_input()))]
}

/// A join came back: the by-GPU list, the fleet map and the totals show it.
pub(super) fn joined(state: &mut State, fleet: PhysicalFleet) {
    state.physical.background.in_flight = false;
    state.take_joined(fleet);
    state.rebuild_map();
    state.recompute_totals();
    state.dirty = true;
}

/// Handles `a` when it is the toggle or the by-GPU list shows; `None` leaves it to the
/// by-source handling.
pub(super) fn action(state: &mut State, a: KeyAction) -> Option<Vec<Effect>> {
    if a == KeyAction::ByGpu {
        if state.view == View::Gpus {
            state.physical.by_gpu = !state.physical.by_gpu;
        } else {
            state.came_from = None;
            state.view = View::Gpus;
            state.physical.by_gpu = true;
        }
        state.physical.open = None;
        state.dirty = true;
        return Some(Vec::new());
    }
    if state.view != View::Gpus || !state.physical.by_gpu {
        return None;
    }
    let page = state.visible_rows();
    if let Some((_, scroll)) = &mut state.physical.open {
        let step = u16::try_from(page).unwrap_or(u16::MAX);
        match a {
            KeyAction::Up => *scroll = scroll.saturating_sub(1),
            KeyAction::Down => *scroll = scroll.saturating_add(1),
            KeyAction::PageUp => *scroll = scroll.saturating_sub(step),
            KeyAction::PageDown => *scroll = scroll.saturating_add(step),
            KeyAction::Top => *scroll = 0,
            KeyAction::Back | KeyAction::Open => {
                state.physical.open = None;
                if let Some(v) = state.physical.back_to.take() {
                    state.view = v;
                }
            }
            _ => return None,
        }
        state.dirty = true;
        return Some(Vec::new());
    }
    let n = state.physical.rows.len();
    let c = &mut state.physical.cursor;
    let last = n.saturating_sub(1);
    match a {
        KeyAction::Up => c.selected = c.selected.saturating_sub(1),
        KeyAction::Down => c.selected = (c.selected + 1).min(last),
        KeyAction::PageUp => c.selected = c.selected.saturating_sub(page),
        KeyAction::PageDown => c.selected = (c.selected + page).min(last),
        KeyAction::Top => c.selected = 0,
        KeyAction::Bottom => c.selected = last,
        KeyAction::Open => {
            let id = state.physical.selected()?.id();
            state.physical.back_to = None;
            state.open_physical(&id);
            return Some(Vec::new());
        }
        KeyAction::Problems => {
            state.next_physical_filter();
            return Some(Vec::new());
        }
        KeyAction::Back if state.physical.flag_filter.is_some() => {
            state.physical.flag_filter = None;
            state.rebuild_rows();
        }
        _ => return None,
    }
    let c = &mut state.physical.cursor;
    if c.selected < c.offset {
        c.offset = c.selected;
    } else if c.selected >= c.offset + page {
        c.offset = c.selected + 1 - page;
    }
    state.dirty = true;
    Some(Vec::new())
}
