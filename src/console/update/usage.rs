//! The Usage view's asks and answers: the window asked follows the view (its length, and
//! its end: the next whole minute live, the time shown rewound); each source has one ask
//! under way at most, and is asked again once it answered if the window moved meanwhile.

use super::flash;
use crate::console::lists::Cursor;
use crate::console::msg::{Effect, UsageAnswer, UsageAsk};
use crate::console::state::{State, UsageKey, View};
use crate::console::time::short_time;

/// The reports the Usage view on screen needs (none when it is not on screen); `update`
/// asks them after every message.
pub fn due(state: &mut State) -> Vec<Effect> {
    let live_now = state.now;
    let (target, rewound, key) = if let Some(r) = state.rewind.as_mut() {
        let window = r.shown.usage.window;
        let key = UsageKey { window, to: r.at };
        (&mut *r.shown, true, key)
    } else {
        let key = UsageKey::live(state.usage.window, live_now);
        (&mut *state, false, key)
    };
    // Before the first tick the console does not know the time.
    if target.view != View::Usage || live_now.0 == 0 {
        return Vec::new();
    }
    let count = target.sources.len();
    let asked = target.usage.asks_for(key, count);
    if !asked.is_empty() {
        target.dirty = true;
    }
    asked
        .into_iter()
        .map(|source| {
            Effect::Usage(UsageAsk {
                source,
                rewound,
                key,
            })
        })
        .collect()
}

/// A source's report came back.
pub(super) fn answer(state: &mut State, a: UsageAnswer) {
    let target = if a.rewound {
        match state.rewind.as_mut() {
            Some(r) => &mut *r.shown,
            None => return,
        }
    } else {
        &mut *state
    };
    target.usage.answered(a.source, a.key, a.said);
    target.rebuild_usage();
    target.dirty = true;
    state.dirty = true;
}

/// The window key: the Usage view's next window (asked at once).
pub(super) fn next_window(state: &mut State) {
    if state.view != View::Usage {
        flash(
            state,
            format!(
                "{} cycles the Usage view's window ({} opens it)",
                state
                    .keymap
                    .first_key(crate::console::keymap::KeyAction::UsageWindow),
                state
                    .keymap
                    .first_key(crate::console::keymap::KeyAction::ViewUsage)
            ),
            false,
        );
        return;
    }
    state.usage.window = state.usage.window.next();
    state.rebuild_usage();
}

/// Enter in the Usage view: the selected project's claims, or, in them, the selected
/// claim's detail as its source's state shown has it (rewound: as it was at the time
/// shown). A claim that state does not hold (it ended, or began later) is said in a flash.
pub(super) fn open(state: &mut State) {
    if state.usage.open.is_none() {
        if state.usage.open_selected() {
            state.rebuild_usage();
        }
        return;
    }
    let Some(c) = state.usage.selected_claim() else {
        return;
    };
    let (source, id) = (c.source, c.claim.claim);
    let Some(slot) = state.sources.get(source) else {
        return;
    };
    let name = slot.name.clone();
    let held = slot.data.as_deref().map(|d| d.claim(id).is_some());
    let when = state
        .usage
        .said_for_window(source)
        .map(|(key, _)| short_time(key.to, state.now, &state.zone));
    match (held, slot.rewound) {
        (Some(true), _) => {
            state.claim_detail = Some((source, id));
            state.panes.claim_detail.cursor = Cursor::default();
            state.came_from = Some(View::Usage);
            state.view = View::ClaimDetail;
        }
        (None, _) => flash(
            state,
            format!("claim {id}: {name}'s state is not loaded, so its detail cannot be shown"),
            true,
        ),
        (Some(false), true) => flash(
            state,
            format!(
                "claim {id} on {name} was not held at {} (the time shown): only its figures are known",
                when.unwrap_or_else(|| "the time shown".to_string())
            ),
            true,
        ),
        (Some(false), false) => flash(
            state,
            format!("claim {id} on {name} is no longer held: only its figures are known"),
            true,
        ),
    }
}
