//! Browsing: the key actions of normal mode (also reached from the command line), and
//! the cursor and problem lists they move. Which mode has the keyboard is `modes`'.

use ratatui::crossterm::event::KeyEvent;

use super::actions::{cordon, open_move, release, reset_project};
use super::form::open_form;
use super::navigate::{open_detail, set_view};
use super::sources::due_fetches;
use super::{flash, quit};
use crate::console::keymap::{Context, KeyAction};
use crate::console::msg::Effect;
use crate::console::state::{Mode, OVERVIEW_JUMPS, State, View};

/// A key in browsing mode: its key action, if it has one.
pub(super) fn normal_key(state: &mut State, ev: KeyEvent) -> Vec<Effect> {
    match state.keymap.action(Context::Normal, &ev) {
        Some(a) => normal_action(state, a),
        None => Vec::new(),
    }
}

fn move_cursor(state: &mut State, delta: isize) {
    let n = state.row_count();
    let page = state.visible_rows();
    let c = state.cursor_mut(state.view);
    let last = n.saturating_sub(1);
    c.selected = if delta == isize::MIN {
        0
    } else if delta == isize::MAX {
        last
    } else if delta < 0 {
        c.selected.saturating_sub(delta.unsigned_abs())
    } else {
        c.selected.saturating_add(delta.unsigned_abs()).min(last)
    };
    if c.selected < c.offset {
        c.offset = c.selected;
    } else if c.selected >= c.offset + page {
        c.offset = c.selected + 1 - page;
    }
    state.pick_under_cursor(state.view);
}

/// A key action while browsing (also reached from the command line).
// One arm per key action, each a few lines: the keymap's whole repertoire in one match,
// which a reader looks up by action. (Also being reworked with the console's flow.)
#[allow(clippy::too_many_lines)]
pub(super) fn normal_action(state: &mut State, a: KeyAction) -> Vec<Effect> {
    if a.mutates() && state.readonly {
        flash(
            state,
            format!(
                "read-only: `{}` is refused (started with --readonly)",
                a.name()
            ),
            true,
        );
        return Vec::new();
    }
    if let Some(effects) = super::by_gpu::action(state, a) {
        return effects;
    }
    if state.view == View::Overview
        && let Some(effects) = super::fleet_map::key(state, a)
    {
        return effects;
    }
    let page = isize::try_from(state.visible_rows()).unwrap_or(10);
    match a {
        KeyAction::Quit => return quit(state),
        KeyAction::Help => state.mode = Mode::Help,
        KeyAction::NextView | KeyAction::PrevView => {
            let n = View::ALL.len();
            let i = state.view.position();
            let j = if a == KeyAction::NextView {
                (i + 1) % n
            } else {
                (i + n - 1) % n
            };
            return set_view(state, View::ALL[j]);
        }
        KeyAction::ViewOverview => return set_view(state, View::Overview),
        KeyAction::ViewGpus => return set_view(state, View::Gpus),
        KeyAction::ViewClaims => return set_view(state, View::Claims),
        KeyAction::ViewFairShare => return set_view(state, View::Ledger),
        KeyAction::ViewDetail => return set_view(state, View::Detail),
        KeyAction::ViewEvents => return set_view(state, View::Events),
        KeyAction::ViewUsage => return set_view(state, View::Usage),
        KeyAction::UsageWindow => super::usage::next_window(state),
        KeyAction::Up => move_cursor(state, -1),
        KeyAction::Down => move_cursor(state, 1),
        KeyAction::PageUp => move_cursor(state, -page),
        KeyAction::PageDown => move_cursor(state, page),
        KeyAction::Top => move_cursor(state, isize::MIN),
        KeyAction::Bottom => move_cursor(state, isize::MAX),
        KeyAction::Open if state.view == View::Overview => {
            // The selected count's list: its view, filtered to it.
            let row = state.cursor_of(View::Overview).selected;
            if let Some((_, view, filter)) = OVERVIEW_JUMPS.get(row) {
                *state.filter_of_mut(*view) = (*filter).to_string();
                state.view = *view;
                state.came_from = Some(View::Overview);
                state.reshape_rows();
            }
        }
        KeyAction::Open if state.view == View::Claims => {
            if state.open_claim_detail() {
                state.came_from = Some(View::Claims);
                state.view = View::ClaimDetail;
            } else if let Some(gone) = state.pick_gone(View::Claims) {
                flash(state, format!("{gone} is gone"), true);
            }
        }
        KeyAction::Open if state.view == View::Usage => super::usage::open(state),
        KeyAction::Open if state.view == View::Ledger => {
            // The selected project's reasons, whole (the pane under the table is cut).
            if state.selected_project().is_some() {
                state.mode = Mode::Why(0);
            }
        }
        KeyAction::Open => {
            if state.view == View::Gpus {
                open_detail(state);
                if state.detail.is_some() {
                    state.came_from = Some(state.view);
                    state.view = View::Detail;
                }
            }
        }
        KeyAction::Back => {
            if state.flash.is_some() {
                state.flash = None;
            } else if state.view == View::Usage && state.usage.open.is_some() {
                state.usage.open = None;
                state.rebuild_usage();
            } else if state.view == View::ClaimDetail {
                state.view = state.came_from.take().unwrap_or(View::Claims);
            } else if state.view == View::Detail {
                state.view = state.came_from.take().unwrap_or(View::Gpus);
            } else if let Some(back) = state.came_from.take() {
                // Opened from an Overview count: its filter goes with it.
                state.filter_mut().clear();
                state.reshape_rows();
                state.view = back;
            } else if !state.filter().is_empty() {
                state.filter_mut().clear();
                state.reshape_rows();
            }
        }
        KeyAction::Filter => state.mode = Mode::Filter(state.filter().to_string()),
        KeyAction::Command => state.mode = Mode::Command(String::new()),
        KeyAction::SortNext => {
            if state.next_sort() {
                state.reshape_rows();
            }
        }
        KeyAction::Problems => problems(state),
        KeyAction::SortReverse => {
            state.reverse_sort();
            state.reshape_rows();
        }
        KeyAction::Freeze => {
            state.frozen = !state.frozen;
            if !state.frozen {
                let mut changed = false;
                for i in 0..state.sources.len() {
                    if let Some((snap, at)) = state.sources[i].held.take() {
                        state.sources[i].fetched_at = Some(at);
                        state.store_snapshot(i, snap);
                        changed = true;
                    }
                }
                if changed {
                    state.rebuild_rows();
                }
            }
        }
        KeyAction::NextSource => {
            let n = state.sources.len();
            state.source_filter = match state.source_filter {
                None if n > 1 => Some(0),
                Some(i) if i + 1 < n => Some(i + 1),
                _ => None,
            };
            state.reshape_rows();
        }
        KeyAction::Refresh => return due_fetches(state, true),
        KeyAction::Claim => open_form(state),
        KeyAction::Release => return release(state),
        KeyAction::Move => open_move(state),
        KeyAction::Cordon => return cordon(state, None),
        KeyAction::EngineAct => return super::engine::engine_key(state),
        KeyAction::HandOver => return super::handover::key(state),
        KeyAction::ClearBackoff => return reset_project(state),
        KeyAction::Rewind
        | KeyAction::Live
        | KeyAction::NextChange
        | KeyAction::PrevChange
        | KeyAction::StepForward
        | KeyAction::StepBack
        | KeyAction::Play
        | KeyAction::Faster
        | KeyAction::Slower => return super::rewind::live_action(state, a),
        // `ByGpu` is handled by `by_gpu::action` above, the map's keys by `fleet_map::key`.
        KeyAction::ByGpu
        | KeyAction::Left
        | KeyAction::Right
        | KeyAction::TrendSpan
        | KeyAction::Confirm
        | KeyAction::Cancel
        | KeyAction::NextField
        | KeyAction::PrevField
        | KeyAction::ChoiceLeft
        | KeyAction::ChoiceRight => {}
    }
    Vec::new()
}

/// `!`: the current view's next problem list (its filter set to the next problem word),
/// and back to everything after the last.
fn problems(state: &mut State) {
    let words = state.view.problem_filters();
    if words.is_empty() {
        flash(
            state,
            "problem lists are in GPUs, Claims and Fair share",
            true,
        );
        return;
    }
    let next = match words.iter().position(|w| *w == state.filter()) {
        Some(i) if i + 1 < words.len() => words[i + 1],
        Some(_) => "",
        None => words[0],
    };
    *state.filter_mut() = next.to_string();
    state.reshape_rows();
    let count = match state.unmeasured() {
        Some(why) => format!("n/a ({why})"),
        None if state.view == View::Overview => {
            let n = state.map.cells.iter().filter(|c| !c.dim).count();
            format!("{n} GPUs of {}", state.map.cells.len())
        }
        None => match state.row_count() {
            1 => "1 row".to_string(),
            n => format!("{n} rows"),
        },
    };
    let text = if next.is_empty() {
        "all rows again".to_string()
    } else {
        format!(
            "{} {next}: {count} (! for the next kind: {})",
            state.view.title(),
            words.join(", ")
        )
    };
    flash(state, text, false);
}
