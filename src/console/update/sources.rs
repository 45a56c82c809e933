//! What arrives from the sources: ticks that schedule fetches (with backoff for failing
//! sources), fetched snapshots, placement previews and action results.

use crate::clock::Timestamp;
use crate::sources::{Action, Failure, Fetched, Outcome};

use super::flash;
use crate::console::msg::Effect;
use crate::console::state::{
    FLASH_MS, FormStage, Mode, STALE_AFTER_INTERVALS, SourceHealth, State, View,
};

/// Longest backoff between fetches of a failing source, in refresh intervals.
const MAX_BACKOFF_INTERVALS: u64 = 16;

fn health_signature(state: &State) -> Vec<u8> {
    state
        .sources
        .iter()
        .map(|s| match s.health(state.now, state.refresh_ms) {
            SourceHealth::Loading => 0,
            SourceHealth::Ok => 1,
            SourceHealth::Stale { .. } => 2,
            SourceHealth::Down { .. } => 3,
        })
        .collect()
}

/// Time passes: redraw when health or shown ages change, expire the message, fetch what is due.
pub(super) fn tick(state: &mut State, now: Timestamp) -> Vec<Effect> {
    let before = health_signature(state);
    state.now = now;
    if health_signature(state) != before {
        state.dirty = true;
        // A source turning stale (or fresh again) changes its GPUs' cells.
        state.rebuild_map();
    }
    // Claims and Fair share show ages to the second (`5m10s`): redraw each second there,
    // each minute elsewhere (stale and down sources redraw every tick, below).
    let unit = if matches!(state.view, View::Claims | View::Ledger) {
        1_000
    } else {
        60_000
    };
    let step = now.0 / unit;
    if step != state.age_step {
        state.age_step = step;
        state.dirty = true;
    }
    if state
        .sources
        .iter()
        .any(|s| !matches!(s.health(now, state.refresh_ms), SourceHealth::Ok))
    {
        state.dirty = true;
    }
    // A message from before the first tick (a bad theme, a bad keymap) is stamped with
    // the first time the console knows, so it is read rather than cleared at once.
    if let Some(f) = state.flash.as_mut()
        && f.at == crate::clock::Timestamp(0)
    {
        f.at = now;
    }
    if state
        .flash
        .as_ref()
        .is_some_and(|f| now.millis_since(f.at) >= FLASH_MS)
    {
        state.flash = None;
        state.dirty = true;
    }
    due_fetches(state, false)
}

/// Marks due sources in flight and asks the driver to fetch them: one in flight per source.
pub(super) fn due_fetches(state: &mut State, force: bool) -> Vec<Effect> {
    let now = state.now;
    let mut out = Vec::new();
    for (i, s) in state.sources.iter_mut().enumerate() {
        if !s.in_flight && (force || now >= s.next_fetch) {
            s.in_flight = true;
            out.push(Effect::Fetch(i));
        }
    }
    out
}

/// A source reported a change: fetch it now, or right after the fetch in flight.
pub(super) fn changed(state: &mut State, source: usize) -> Vec<Effect> {
    let Some(slot) = state.sources.get_mut(source) else {
        return Vec::new();
    };
    if slot.in_flight {
        slot.wanted = true;
        return Vec::new();
    }
    slot.in_flight = true;
    vec![Effect::Fetch(source)]
}

/// A round of fetches answered together (`Msg::FetchedMany`): each as `fetched`.
pub(super) fn fetched_many(
    state: &mut State,
    at: Timestamp,
    results: Vec<(usize, Result<Fetched, Failure>)>,
) -> Vec<Effect> {
    results
        .into_iter()
        .flat_map(|(source, result)| fetched(state, source, at, result))
        .collect()
}

/// A fetch answered: keep the data (or hold it while frozen), or record the failure and
/// back off. `Unchanged` only marks the source fresh: no rows, sorts or totals are rebuilt.
/// Fetches again at once when the source reported a change meanwhile.
pub(super) fn fetched(
    state: &mut State,
    source: usize,
    at: Timestamp,
    result: Result<Fetched, Failure>,
) -> Vec<Effect> {
    let Some(slot) = state.sources.get_mut(source) else {
        return Vec::new();
    };
    slot.in_flight = false;
    let again = std::mem::take(&mut slot.wanted);
    match result {
        Ok(fetched) => answered(state, source, at, fetched),
        Err(e) => failed(state, source, at, &e),
    }
    match state.sources.get_mut(source) {
        Some(slot) if again && !slot.in_flight => {
            slot.in_flight = true;
            vec![Effect::Fetch(source)]
        }
        _ => Vec::new(),
    }
}

/// A good answer: the source is fresh; a changed snapshot is stored, the rows rebuilt
/// at the next `State::settle`.
fn answered(state: &mut State, source: usize, at: Timestamp, fetched: Fetched) {
    let refresh = state.refresh_ms;
    let frozen = state.frozen;
    let Some(slot) = state.sources.get_mut(source) else {
        return;
    };
    let recovered = slot.error.take().is_some();
    slot.error_since = None;
    slot.failures = 0;
    slot.next_fetch = at.plus_millis(refresh);
    let was_stale = slot
        .fetched_at
        .is_none_or(|t| at.millis_since(t) > refresh * STALE_AFTER_INTERVALS);
    // Named only when it recovered (an unchanged answer comes every refresh per source).
    let name = recovered.then(|| slot.name.clone());
    let changed = match fetched {
        Fetched::Unchanged => {
            match &mut slot.held {
                Some((_, held_at)) if frozen => *held_at = at,
                _ => slot.fetched_at = Some(at),
            }
            false
        }
        Fetched::Snapshot(snap) | Fetched::Telemetry(snap) if frozen => {
            slot.held = Some((*snap, at));
            return;
        }
        // New figures: a change, and one of telemetry alone, without comparing.
        Fetched::Telemetry(snap) if slot.data.is_some() => {
            slot.fetched_at = Some(at);
            state.store_unsettled(source, *snap, true);
            true
        }
        Fetched::Snapshot(snap) | Fetched::Telemetry(snap) => {
            let changed = slot
                .raw
                .as_ref()
                .or(slot.data.as_deref())
                .is_none_or(|d| !d.same_but_time(&snap));
            slot.fetched_at = Some(at);
            if changed {
                state.store_unsettled(source, *snap, false);
            }
            changed
        }
    };
    if let Some(name) = name {
        state.push_log(format!("source {name}: answering again"));
    }
    if changed || recovered || was_stale {
        state.dirty = true;
    }
}

/// A failed fetch: keep the data, show the error, back off.
fn failed(state: &mut State, source: usize, at: Timestamp, e: &Failure) {
    let refresh = state.refresh_ms;
    let Some(slot) = state.sources.get_mut(source) else {
        return;
    };
    slot.failures = slot.failures.saturating_add(1);
    let backoff = 1u64 << slot.failures.min(4);
    slot.next_fetch = at.plus_millis(refresh * backoff.min(MAX_BACKOFF_INTERVALS));
    let message = e.to_string();
    let first = slot.error.as_deref() != Some(message.as_str());
    slot.error = Some(message.clone());
    slot.error_since = slot.error_since.or(Some(at));
    let name = slot.name.clone();
    if first {
        state.push_log(format!("source {name}: {message}"));
    }
    state.dirty = true;
}

/// The claim form's placement preview arrived.
pub(super) fn planned(
    state: &mut State,
    source: usize,
    result: Result<crate::placement::Allocation, Failure>,
) {
    let Mode::Form(form) = &mut state.mode else {
        return;
    };
    if form.source != source || form.stage != FormStage::Planning {
        return;
    }
    match result {
        Ok(alloc) => {
            let per: Vec<String> = alloc
                .shares
                .iter()
                .map(|s| format!("GPU {}: {} / {} GPU", s.device, s.memory.iec(), s.compute))
                .collect();
            form.stage = FormStage::Preview(format!("{alloc} ({})", per.join("; ")));
            form.error = None;
        }
        Err(e) => {
            form.stage = FormStage::Editing;
            form.error = Some(e.to_string());
        }
    }
    state.dirty = true;
}

/// An action's result that no flow and no form took: close its dialog or show its refusal
/// there, flash it, refetch.
pub(super) fn acted(
    state: &mut State,
    source: usize,
    action: &Action,
    result: Result<Outcome, Failure>,
) -> Vec<Effect> {
    let name = state
        .sources
        .get(source)
        .map_or_else(String::new, |s| s.name.clone());
    state.dirty = true;
    match result {
        Ok(outcome) => {
            let text = format!("{name}: {}", outcome.message());
            match &state.mode {
                Mode::Form(f) if matches!(action, Action::Claim { .. }) && f.source == source => {
                    state.mode = Mode::Normal;
                }
                Mode::Move(m) if matches!(action, Action::Move { id, .. } if *id == m.id) => {
                    state.mode = Mode::Normal;
                }
                _ => {}
            }
            if let Outcome::Moved { from, to, .. } = &outcome {
                tracing::info!(source = %name, "moved from {from} to {to}");
            }
            flash(state, text, false);
            // Show the change now rather than at the next refresh.
            if let Some(s) = state.sources.get_mut(source)
                && !s.in_flight
            {
                s.in_flight = true;
                return vec![Effect::Fetch(source)];
            }
            Vec::new()
        }
        Err(e) => {
            let words = e.to_string();
            match &mut state.mode {
                Mode::Form(f) if matches!(action, Action::Claim { .. }) && f.source == source => {
                    f.stage = FormStage::Editing;
                    f.error = Some(words.clone());
                }
                Mode::Move(m) if matches!(action, Action::Move { id, .. } if *id == m.id) => {
                    m.sent = false;
                    m.error = Some(words.clone());
                }
                _ => {}
            }
            flash(
                state,
                format!(
                    "{name}: {} {} refused: {words}",
                    action.verb(),
                    action.target()
                ),
                true,
            );
            Vec::new()
        }
    }
}
