//! Switching views, and pointing the detail view at the selection.

use crate::console::msg::Effect;
use crate::console::state::{Cursor, State, View};

/// Shows a view; the detail view opens on the selected GPU (or the selected claim's).
pub fn show_view(state: &mut State, v: View) {
    set_view(state, v);
    state.dirty = true;
}

/// Switches to a view (the detail view on the selection when none is open).
pub(super) fn set_view(state: &mut State, v: View) -> Vec<Effect> {
    if v == View::Detail && state.detail.is_none() {
        open_detail(state);
    }
    if v == View::Detail && state.view != View::Detail {
        state.came_from = Some(state.view);
    } else if v != View::Detail {
        state.came_from = None;
    }
    state.view = v;
    Vec::new()
}

/// Points the detail view at the selected GPU, or the selected claim's first GPU.
pub(super) fn open_detail(state: &mut State) {
    let key = match state.view {
        View::Claims => state.selected_claim().and_then(|k| {
            let (_, c) = state.claim(k)?;
            let node = c.node.clone()?;
            let dev = c.shares.first()?.device;
            Some((k.source, node, dev))
        }),
        _ => state.selected_device().and_then(|k| {
            let (_, n, d) = state.device(k)?;
            Some((k.source, n.name.clone(), d.index))
        }),
    };
    if key.is_some() {
        state.detail = key;
        *state.cursor_mut(View::Detail) = Cursor::default();
    }
}
