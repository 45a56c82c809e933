//! The pure update: `update(&mut State, Msg) -> Vec<Effect>`. No I/O, no clock: time
//! arrives in `Msg::Tick`, data in `Msg::Fetched` (announced by `Msg::Changed`), results in `Msg::Planned`/`Msg::Acted`.
//! Keys go through `modes` (one handler per mode; browsing's key actions in `keys`), the
//! `:` line through `command`, the claim form through `form`, release/move/cordon through
//! `actions`; what the sources send back through `sources`, an answer to a flow
//! (`console::flows`) through `flows` to that flow alone (`move_across`, `lost`,
//! `handover` say what comes next). This file routes each message to one of them; the
//! parts import each other one way only (tests/layout.rs).

mod actions;
mod by_gpu;
mod command;
mod confirm;
mod engine;
mod fleet_map;
mod flows;
mod forecast;
mod form;
mod handover;
mod keys;
mod line;
mod lost;
mod modes;
mod move_across;
mod named;
mod navigate;
mod ranking;
mod rewind;
mod sources;
mod usage;

use ratatui::crossterm::event::KeyEventKind;

use crate::sources::Action;

use super::msg::{Asker, Effect, Msg};
use super::state::{Confirm, Flash, MINUTE_MS, Mode, State, View};

pub use command::complete;
pub use fleet_map::trends_due;
pub use forecast::due as asks_due;
pub use navigate::show_view;
pub use rewind::{BANNER_ROWS, refusal_text, rewind_to};
pub use usage::due as usage_due;

/// Applies one message; returns the effects for the driver.
pub fn update(state: &mut State, msg: Msg) -> Vec<Effect> {
    let effects = update_unsettled(state, msg);
    state.settle();
    effects
}

/// Settles the state (the rebuild `update_unsettled` left for the frame) and answers the
/// background join that rebuild asks for, if any.
pub fn settle(state: &mut State) -> Vec<Effect> {
    state.settle();
    by_gpu::join_due(state)
}

/// `update`, leaving the rebuild after fetched snapshots to `State::settle`, which the
/// driver calls before it draws: a burst of answers (a thousand hosts at start) costs one
/// rebuild per frame. A log line and a tick within the minute leave it there too (neither
/// reads the rows, totals or map; a tick that settled first made a second rebuild, and a
/// second frame, each second while telemetry streams in); a tick that begins a minute
/// settles first, so what came before is in the trends' point of the minute it came in.
/// Any other message sees the state settled first.
pub fn update_unsettled(state: &mut State, msg: Msg) -> Vec<Effect> {
    let settle_first = match &msg {
        Msg::Fetched { .. } | Msg::FetchedMany { .. } | Msg::Changed(_) | Msg::Log(_) => false,
        Msg::Tick(now) => now.0 / MINUTE_MS != state.now.0 / MINUTE_MS,
        _ => true,
    };
    if settle_first {
        state.settle();
    }
    let mut effects = step(state, msg);
    effects.extend(rewind::charts_due(state));
    effects.extend(usage::due(state));
    effects.extend(fleet_map::trends_due(state));
    effects.extend(by_gpu::join_due(state));
    effects
}

fn step(state: &mut State, msg: Msg) -> Vec<Effect> {
    match msg {
        Msg::Tick(now) => {
            let mut effects = sources::tick(state, now);
            effects.extend(rewind::tick(state, now));
            effects
        }
        Msg::Resize { width, height } => {
            state.size = (width, height);
            if let Some(r) = state.rewind.as_mut() {
                r.shown.size = (width, height.saturating_sub(BANNER_ROWS));
            }
            state.dirty = true;
            Vec::new()
        }
        Msg::History(answer) => rewind::answer(state, answer),
        Msg::Usage(answer) => {
            usage::answer(state, answer);
            Vec::new()
        }
        Msg::Key(ev) => {
            // Some terminals report releases and repeats too; act on presses only.
            if ev.kind != KeyEventKind::Press {
                return Vec::new();
            }
            state.dirty = true;
            if state.rewind.is_some() && state.mode == Mode::Normal {
                if let Some(done) = rewind::rewound_key(state, &ev) {
                    return done;
                }
                let Some(r) = state.rewind.as_mut() else {
                    return Vec::new();
                };
                let effects = modes::key(&mut r.shown, ev);
                return rewind::shown_took(state, &effects);
            }
            modes::key(state, ev)
        }
        Msg::Forecast { source, result } => {
            forecast::forecast_answered(state, source, result);
            Vec::new()
        }
        Msg::Previewed {
            source,
            action,
            result,
        } => {
            forecast::previewed(state, source, &action, result);
            Vec::new()
        }
        Msg::Fetched { source, at, result } => sources::fetched(state, source, at, result),
        Msg::Joined(fleet) => {
            by_gpu::joined(state, *fleet);
            Vec::new()
        }
        Msg::FetchedMany { at, results } => sources::fetched_many(state, at, results),
        Msg::Changed(source) => sources::changed(state, source),
        Msg::Planned { source, result } => {
            sources::planned(state, source, result);
            Vec::new()
        }
        Msg::Acted {
            source,
            action,
            asker,
            result,
        } => match asker {
            // The answer goes to who sent it: a flow's step to that flow, the claim form's
            // claim to the form; what neither takes is said by `sources`.
            Asker::Flow { flow, step } => flows::acted(state, flow, step, source, &action, result),
            Asker::Form => form::claimed(state, source, &action, &result)
                .unwrap_or_else(|| sources::acted(state, source, &action, result)),
            Asker::Operator => sources::acted(state, source, &action, result),
        },
        Msg::Rechecked {
            source,
            attempt,
            asker,
            result,
        } => {
            // Sent again for who sent it: a flow (a move, or a claim that landed elsewhere
            // or nowhere meanwhile) or the form; the operator sends no claim again.
            state.dirty = true;
            match asker {
                Asker::Flow { flow, .. } => flows::rechecked(state, flow, source, &attempt, result),
                Asker::Form => lost::for_the_form(state, source, &attempt, result),
                Asker::Operator => Vec::new(),
            }
        }
        Msg::Log(line) => {
            state.push_log(line);
            if state.view == View::Events {
                state.dirty = true;
            }
            Vec::new()
        }
        Msg::Signal(name) => {
            state.push_log(format!("{name}: leaving"));
            quit(state)
        }
        Msg::InputClosed(why) => {
            state.push_log(format!("terminal input closed ({why}): leaving"));
            quit(state)
        }
    }
}

/// Leaves the console.
pub(super) fn quit(state: &mut State) -> Vec<Effect> {
    state.quit = true;
    vec![Effect::Quit]
}

/// Shows a message on the status line and logs it.
pub(super) fn flash(state: &mut State, text: impl Into<String>, error: bool) {
    let text = text.into();
    state.push_log(text.clone());
    state.flash = Some(Flash {
        text,
        error,
        at: state.now,
    });
    state.dirty = true;
}

/// Why an action cannot be sent: the console is read-only or the source cannot act.
pub(super) fn refusal(state: &State, source: usize, action: &Action) -> Option<String> {
    let slot = state.sources.get(source)?;
    if state.readonly {
        return Some(format!(
            "read-only: {} {} refused",
            action.verb(),
            action.target()
        ));
    }
    if !slot.can_act && slot.kind == crate::sources::SourceKind::Ssh {
        // An SSH host says why: no serve read there, or its token unreadable.
        let note = slot
            .data
            .as_ref()
            .and_then(|d| d.endpoint.telemetry_note.clone());
        let why = note.as_deref().map_or("it has not been read yet", |n| {
            crate::sources::ssh::act::read_only_reason(n)
        });
        return Some(format!(
            "{}: read-only over ssh ({why}); {} {} refused",
            slot.name,
            action.verb(),
            action.target()
        ));
    }
    if !slot.can_act && !matches!(action, Action::Engine(_)) {
        // An engine's claim by its name, and the engine's own actions where it has some.
        let target = match action {
            Action::Release { id } | Action::Move { id, .. } => slot
                .data
                .as_ref()
                .and_then(|d| d.claims.iter().find(|c| c.id == *id))
                .map_or_else(|| action.target(), |c| format!("claim {}", c.shown_id())),
            _ => action.target(),
        };
        let verbs: Vec<String> = crate::sources::actions::offers(slot.kind)
            .iter()
            .filter(|v| v.unavailable().is_none())
            .map(ToString::to_string)
            .collect();
        let engine = if verbs.is_empty() {
            String::new()
        } else {
            format!(" (its engine's own: :act {})", verbs.join(", :act "))
        };
        return Some(format!(
            "{}: this {} source is read-only; {} {target} refused{engine}",
            slot.name,
            slot.kind,
            action.verb(),
        ));
    }
    None
}

/// Opens the confirmation for an action, unless the console is read-only or the source
/// cannot act (refused at once, with the words `act` would use).
pub(super) fn ask(state: &mut State, confirm: Confirm) {
    if let Some(text) = refusal(state, confirm.source, &confirm.action) {
        flash(state, text, true);
        return;
    }
    state.mode = Mode::Confirm(Box::new(confirm));
}

/// Sends an action to its source for `asker`, unless the console is read-only or the
/// source cannot act.
pub(super) fn act(state: &mut State, source: usize, action: Action, asker: Asker) -> Vec<Effect> {
    let Some(slot) = state.sources.get(source) else {
        return Vec::new();
    };
    let name = slot.name.clone();
    if let Some(text) = refusal(state, source, &action) {
        flash(state, text, true);
        return Vec::new();
    }
    state.push_log(format!(
        "{name}: {} {} sent",
        action.verb(),
        action.target()
    ));
    // Across sources, a claim carries an attempt label: it is sent with a key, so that a
    // lost answer can be asked for again without booking twice.
    if let Action::Claim { request } = &action
        && let Some(attempt) = crate::placement::AttemptId::of_labels(&request.labels)
    {
        return vec![Effect::Claim {
            source,
            request: request.clone(),
            key: lost::key(&attempt, source),
            move_id: None,
            asker,
        }];
    }
    vec![Effect::Act {
        source,
        action,
        asker,
    }]
}
