//! The Overview's fleet map and sparklines: the arrows move a cursor from the totals into
//! the map and over its cells, Enter opens the GPU under it; `d` switches the sparklines
//! between the last hour and the last day; the points the sparklines lack are asked of
//! the sources' history in the background (`HistoryAsk::Trend`) and come back as
//! `HistoryAnswer::Trend`.

use crate::console::keymap::KeyAction;
use crate::console::msg::{Effect, HistoryAsk};
use crate::console::state::{OVERVIEW_JUMPS, State, TrendHistory, TrendPoints, View};
use crate::sources::Failure;

use super::flash;

/// A key in the Overview: `Some` when the map or the sparklines took it.
pub(super) fn key(state: &mut State, a: KeyAction) -> Option<Vec<Effect>> {
    if a == KeyAction::TrendSpan {
        state.trends.span = state.trends.span.other();
        let text = format!("sparklines: {}", state.trends.span.label());
        flash(state, text, false);
        return Some(Vec::new());
    }
    let layout = state.map_layout();
    if layout.units.is_empty() {
        // No map on screen (too small, or no GPUs): the keys are the totals'.
        state.map.cursor = None;
        return None;
    }
    let at = state
        .map
        .cursor
        .as_ref()
        .and_then(|c| layout.unit_of(&state.map, c));
    let last = layout.units.len() - 1;
    let page = isize::try_from(layout.area.height.max(1)).unwrap_or(1);
    let on_last_total = state.cursor_of(View::Overview).selected + 1 >= OVERVIEW_JUMPS.len();
    let to = match (a, at) {
        (KeyAction::Down, None) if on_last_total => Some(0),
        (KeyAction::Right, None) | (KeyAction::Top, Some(_)) => Some(0),
        (KeyAction::Up, Some(u)) => {
            let Some(v) = layout.vertical(u, -1) else {
                // Past the map's first row: back to the totals.
                state.map.cursor = None;
                state.dirty = true;
                return Some(Vec::new());
            };
            Some(v)
        }
        (KeyAction::Down, Some(u)) => Some(layout.vertical(u, 1).unwrap_or(u)),
        (KeyAction::PageUp, Some(u)) => Some(rows_away(&layout, u, -page)),
        (KeyAction::PageDown, Some(u)) => Some(rows_away(&layout, u, page)),
        (KeyAction::Left, Some(u)) => Some(u.saturating_sub(1)),
        (KeyAction::Right, Some(u)) => Some((u + 1).min(last)),
        (KeyAction::Bottom, Some(_)) => Some(last),
        (KeyAction::Open, Some(u)) => {
            let gpu = layout
                .units
                .get(u)
                .and_then(|unit| state.map.gpu(unit.shown));
            if let Some(gpu) = gpu {
                state.open_gpu(gpu);
            }
            state.dirty = true;
            return Some(Vec::new());
        }
        _ => None,
    }?;
    state.map.cursor = layout
        .units
        .get(to)
        .and_then(|unit| state.map.gpu(unit.shown));
    state.dirty = true;
    Some(Vec::new())
}

/// The unit `rows` rows from `from` (as far as the map goes).
fn rows_away(layout: &crate::console::state::MapLayout, from: usize, rows: isize) -> usize {
    let step = rows.signum();
    let mut at = from;
    for _ in 0..rows.unsigned_abs() {
        match layout.vertical(at, step) {
            Some(v) => at = v,
            None => break,
        }
    }
    at
}

/// After every message: the console's own point for a minute that began, and, on the
/// Overview, the history asks for the points its sparklines lack. Nothing is asked twice,
/// so an idle console asks nothing once its window is filled.
pub fn trends_due(state: &mut State) -> Vec<Effect> {
    let (target, rewound) = match state.rewind.as_mut() {
        Some(r) => (&mut *r.shown, true),
        None => (&mut *state, false),
    };
    // Before the first tick the console does not know the time.
    if target.now.0 == 0 {
        return Vec::new();
    }
    let mut redraw = false;
    if target.trends_behind() {
        target.record_trends();
        redraw = target.view == View::Overview;
    }
    let asks = if target.view == View::Overview {
        target.trends.due(target.now, target.sources.len())
    } else {
        Vec::new()
    };
    state.dirty |= redraw;
    asks.into_iter()
        .map(|(source, times)| {
            Effect::History(HistoryAsk::Trend {
                source,
                rewound,
                times,
            })
        })
        .collect()
}

/// A source's history answered a trend ask: its points join those known (the console's
/// own points stay).
pub(super) fn answer(
    state: &mut State,
    source: usize,
    rewound: bool,
    result: Option<Result<TrendPoints, Failure>>,
) {
    let target = if rewound {
        match state.rewind.as_mut() {
            Some(r) => &mut *r.shown,
            None => return,
        }
    } else {
        &mut *state
    };
    let s = target.trends.source_mut(source);
    match result {
        None => s.history = TrendHistory::NoHistory,
        Some(Err(e)) => s.history = TrendHistory::Failed(e.to_string()),
        Some(Ok(points)) => {
            s.history = TrendHistory::Recorded;
            for (at, p) in points {
                if let Some(p) = p {
                    let minute =
                        at.0 / crate::console::state::MINUTE_MS * crate::console::state::MINUTE_MS;
                    s.points.entry(minute).or_insert(p);
                }
            }
        }
    }
    state.dirty = true;
}
