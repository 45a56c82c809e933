//! Rewinding: `g` and the time, the rewound keys (`}`/`{` next/previous change, `]`/`[`
//! one sample, space play, `G`/Esc live), the history's answers, and the charts of the
//! device in detail. The live state is never changed by a rewind: the rewound fleet is a
//! second `State` in `State::rewind`, drawn instead of the live one; the watch keeps
//! updating the live state underneath, so returning to live is dropping the second one.

use ratatui::crossterm::event::{KeyCode, KeyEvent};

use super::flash;
use super::line::edit_line;
use crate::clock::{Timestamp, date_time};
use crate::console::keymap::{Context, KeyAction};
use crate::console::msg::{Effect, HistoryAnswer, HistoryAsk};
use crate::console::state::{
    ChartKey, Charts, DEFAULT_SPEED, FLASH_MS, Mode, Rewind, SPEEDS, STEP_MS, Seeking, Shown,
    State, View, chart_window,
};
use crate::console::time::short_time;
use crate::console::when::parse_when;
use crate::sources::history::AtTime;
use crate::wire::history::{Direction, GpuRef, Target};

/// Rows the banner takes above the rewound views.
pub const BANNER_ROWS: u16 = 2;

/// The refusal of an action while rewound.
pub fn refusal_text(state: &State, at: Timestamp) -> String {
    format!(
        "rewound to {}: actions act on the present; G returns to live",
        short_time(at, state.now, &state.zone)
    )
}

/// A key while the time is being typed.
pub(super) fn prompt_key(state: &mut State, text: String, ev: &KeyEvent) -> Vec<Effect> {
    state.dirty = true;
    match ev.code {
        KeyCode::Esc => {
            state.mode = Mode::Normal;
            Vec::new()
        }
        KeyCode::Enter => match parse_when(&text, state.now, &state.zone) {
            Ok(at) => {
                state.mode = Mode::Normal;
                rewind_to(state, at)
            }
            // `12:50 node-b:3`: the time, then a GPU whose detail opens at that time.
            Err(e) if text.split_whitespace().count() > 1 => {
                let (time, gpu) = text.trim().rsplit_once(' ').unwrap_or((&text, ""));
                match (
                    parse_when(time, state.now, &state.zone),
                    state.find_gpu(gpu),
                ) {
                    (Ok(at), Ok(key)) => {
                        state.mode = Mode::Normal;
                        let effects = rewind_to(state, at);
                        // Found among the live sources: the rewound ones are still asked.
                        if let Some(r) = state.rewind.as_mut() {
                            r.shown.open_gpu(key);
                        }
                        effects
                    }
                    (Ok(_), Err(why)) => {
                        flash(state, why, true);
                        Vec::new()
                    }
                    (Err(_), _) => {
                        flash(state, e.to_string(), true);
                        Vec::new()
                    }
                }
            }
            Err(e) => {
                // The prompt stays open with the text, to be corrected.
                flash(state, e.to_string(), true);
                if let Some(r) = state.rewind.as_mut() {
                    flash(&mut r.shown, e.to_string(), true);
                }
                Vec::new()
            }
        },
        _ => {
            state.mode = Mode::RewindTo(edit_line(text, ev));
            Vec::new()
        }
    }
}

/// Shows the fleet as it was at `at`: rewinds (keeping the live state as it is), or
/// moves the rewound console to another time. Asks every source for its state then.
pub fn rewind_to(state: &mut State, at: Timestamp) -> Vec<Effect> {
    let at = at.min(state.now);
    show_at(state, at)
}

/// Shows the fleet at `at`, uncapped: a change a source found is shown at its time even
/// when that is past the console's clock, which moves a second at a time (capped, it would
/// show the state before the change it names).
fn show_at(state: &mut State, at: Timestamp) -> Vec<Effect> {
    state.dirty = true;
    if state.rewind.is_none() {
        let mut shown = state.clone();
        shown.charts = None;
        shown.usage.forget();
        shown.readonly = true;
        shown.mode = Mode::Normal;
        shown.flash = None;
        shown.frozen = false;
        shown.size = (state.size.0, state.size.1.saturating_sub(BANNER_ROWS));
        for slot in &mut shown.sources {
            slot.data = None;
            slot.raw = None;
            slot.held = None;
            slot.error = None;
            slot.error_since = None;
            slot.in_flight = false;
            slot.wanted = false;
            slot.note = Some("loading its history".to_string());
            slot.rewound = true;
        }
        let sources = vec![(Shown::Loading, 0); state.sources.len()];
        state.rewind = Some(Box::new(Rewind {
            at,
            generation: 0,
            sources,
            shown: Box::new(shown),
            playing: false,
            speed: DEFAULT_SPEED,
            seeking: None,
            flash_since: None,
        }));
    }
    let Some(r) = state.rewind.as_mut() else {
        return Vec::new();
    };
    r.at = at;
    r.generation += 1;
    r.shown.now = at;
    r.shown.fetched_at_all(at);
    r.shown.reshape_rows();
    let generation = r.generation;
    (0..state.sources.len())
        .map(|source| {
            Effect::History(HistoryAsk::At {
                source,
                generation,
                at,
            })
        })
        .collect()
}

/// Leaves the rewound view: the live state shows again, as the watch kept it, in the view,
/// filter and selection the operator was looking at while rewound.
pub(super) fn to_live(state: &mut State) {
    if let Some(r) = state.rewind.take() {
        state.browse_as(&r.shown);
    }
    state.dirty = true;
}

/// A key while rewound: the rewind's own keys and refusals of actions; `None` for the rest,
/// which the rewound state takes itself (its views, cursors and filters are its own) and
/// `shown_took` then answers for.
pub(super) fn rewound_key(state: &mut State, ev: &KeyEvent) -> Option<Vec<Effect>> {
    state.dirty = true;
    let Some(refused) = state.rewind.as_ref().map(|r| refusal_text(state, r.at)) else {
        return Some(Vec::new());
    };
    let Some(r) = state.rewind.as_mut() else {
        return Some(Vec::new());
    };
    let browsing = r.shown.mode == Mode::Normal;
    let action = state.keymap.action(Context::Normal, ev);
    if browsing && let Some(a) = action {
        match a {
            KeyAction::Live => {
                to_live(state);
                return Some(Vec::new());
            }
            KeyAction::Back if nothing_to_close(&r.shown) => {
                to_live(state);
                return Some(Vec::new());
            }
            KeyAction::Rewind => {
                state.mode = Mode::RewindTo(String::new());
                return Some(Vec::new());
            }
            KeyAction::NextChange => return Some(seek(state, Direction::Next)),
            KeyAction::PrevChange => return Some(seek(state, Direction::Prev)),
            KeyAction::StepForward => {
                let at = r.at.plus_millis(STEP_MS);
                return Some(rewind_to(state, at));
            }
            KeyAction::StepBack => {
                let at = Timestamp(r.at.0.saturating_sub(STEP_MS));
                return Some(rewind_to(state, at));
            }
            KeyAction::Play => {
                r.playing = !r.playing;
                return Some(Vec::new());
            }
            KeyAction::Faster => {
                r.speed = (r.speed + 1).min(SPEEDS.len() - 1);
                return Some(Vec::new());
            }
            KeyAction::Slower => {
                r.speed = r.speed.saturating_sub(1);
                return Some(Vec::new());
            }
            KeyAction::Refresh => {
                let at = r.at;
                return Some(rewind_to(state, at));
            }
            KeyAction::Freeze => {
                flash(
                    &mut r.shown,
                    "rewound: the time shown holds still already (space plays)",
                    false,
                );
                return Some(Vec::new());
            }
            a if a.mutates() => {
                flash(&mut r.shown, refused, true);
                return Some(Vec::new());
            }
            _ => {}
        }
    }
    None
}

/// The rewound state took a key: a command that would act was refused there, in
/// read-only words, and is said again in the rewind's; nothing it asks reaches a source
/// but leaving.
pub(super) fn shown_took(state: &mut State, effects: &[Effect]) -> Vec<Effect> {
    let Some(refused) = state.rewind.as_ref().map(|r| refusal_text(state, r.at)) else {
        return Vec::new();
    };
    let Some(r) = state.rewind.as_mut() else {
        return Vec::new();
    };
    if r.shown
        .flash
        .as_ref()
        .is_some_and(|f| f.text.starts_with("read-only"))
    {
        flash(&mut r.shown, refused, true);
    }
    if effects.contains(&Effect::Quit) {
        return super::quit(state);
    }
    Vec::new()
}

/// The rewound state has nothing for Esc to close: Esc then returns to live.
fn nothing_to_close(s: &State) -> bool {
    s.flash.is_none()
        && !matches!(s.view, View::Detail | View::ClaimDetail)
        && !(s.view == View::Usage && s.usage.open.is_some())
        && s.came_from.is_none()
        && s.filter().is_empty()
}

/// `}`/`{`: asks for the next (previous) change of what is selected in the rewound
/// view, or of anything when nothing is.
fn seek(state: &mut State, dir: Direction) -> Vec<Effect> {
    let Some(r) = state.rewind.as_mut() else {
        return Vec::new();
    };
    let (only, what) = selected(&r.shown);
    // One ms past the time shown, so a change at exactly that time is not found again.
    let at = match dir {
        Direction::Next => r.at.plus_millis(1),
        Direction::Prev => Timestamp(r.at.0.saturating_sub(1)),
    };
    r.generation += 1;
    let generation = r.generation;
    let asked: Vec<usize> = match only {
        Some(s) => vec![s],
        None => (0..r.sources.len())
            .filter(|i| !matches!(r.sources[*i].0, Shown::NoHistory))
            .collect(),
    };
    if asked.is_empty() {
        flash(&mut r.shown, "no source here keeps a history", true);
        return Vec::new();
    }
    r.seeking = Some(Seeking {
        dir,
        what: what.clone(),
        generation,
        waiting: asked.len(),
        best: None,
    });
    asked
        .into_iter()
        .map(|source| {
            Effect::History(HistoryAsk::Seek {
                source,
                generation,
                at,
                dir,
                what: what.clone(),
            })
        })
        .collect()
}

/// What `}`/`{` follow: the GPU, claim or project selected (or shown in detail), with
/// its source; anything, over every source, otherwise.
fn selected(s: &State) -> (Option<usize>, Option<Target>) {
    let gpu = |src: usize, node: &str, index: u32| {
        (
            Some(src),
            Some(Target::Gpu(GpuRef {
                node: node.to_string(),
                index,
            })),
        )
    };
    match s.view {
        View::Detail => {
            if let Some((src, node, index)) = &s.detail {
                return gpu(*src, node, *index);
            }
        }
        View::Gpus => {
            if let Some((_, n, d)) = s.selected_device().and_then(|k| s.device(k)) {
                let src = s.selected_device().map_or(0, |k| k.source);
                return gpu(src, &n.name, d.index);
            }
        }
        View::ClaimDetail => {
            if let Some((src, id)) = &s.claim_detail {
                return (Some(*src), Some(Target::Claim(*id)));
            }
        }
        View::Claims => {
            if let Some(k) = s.selected_claim()
                && let Some((_, c)) = s.claim(k)
            {
                return (Some(k.source), Some(Target::Claim(c.id)));
            }
        }
        View::Ledger => {
            if let Some(k) = s.selected_project()
                && let Some((_, p)) = s.project(k)
            {
                return (Some(k.source), Some(Target::Project(p.name.clone())));
            }
        }
        View::Overview | View::Events | View::Usage => {}
    }
    (None, None)
}

/// A history answered.
pub(super) fn answer(state: &mut State, a: HistoryAnswer) -> Vec<Effect> {
    match a {
        HistoryAnswer::At {
            source,
            generation,
            result,
        } => {
            shown_at(state, source, generation, result);
            Vec::new()
        }
        HistoryAnswer::Sought {
            source,
            generation,
            result,
        } => sought(state, source, generation, result),
        HistoryAnswer::Trend {
            source,
            rewound,
            result,
        } => {
            super::fleet_map::answer(state, source, rewound, result);
            Vec::new()
        }
        HistoryAnswer::Telemetry {
            rewound,
            key,
            result,
        } => {
            let target = if rewound {
                state.rewind.as_mut().map(|r| &mut r.shown.charts)
            } else {
                Some(&mut state.charts)
            };
            if let Some(charts) = target
                && let Some(c) = charts.as_mut()
                && c.key == key
            {
                c.loading = false;
                match result {
                    None => c.no_history = true,
                    Some(Ok(samples)) => c.samples = samples,
                    Some(Err(e)) => c.error = Some(e.to_string()),
                }
                state.dirty = true;
            }
            Vec::new()
        }
    }
}

/// A source's state at the time asked (or why there is none).
fn shown_at(
    state: &mut State,
    source: usize,
    generation: u64,
    result: Option<Result<AtTime, crate::sources::Failure>>,
) {
    let zone = state.zone.clone();
    let Some(r) = state.rewind.as_mut() else {
        return;
    };
    let Some((shown, got)) = r.sources.get_mut(source) else {
        return;
    };
    // An older answer than the one shown (they may cross when stepping fast).
    if generation <= *got {
        return;
    }
    *got = generation;
    let Some(slot) = r.shown.sources.get_mut(source) else {
        return;
    };
    match result {
        Some(Ok(AtTime::Shown { snapshot, at })) => {
            *shown = Shown::At(at);
            slot.data = Some(std::sync::Arc::new(*snapshot));
            slot.note = None;
        }
        Some(Ok(AtTime::Before { from })) => {
            *shown = Shown::Before(from);
            slot.data = None;
            slot.note = Some(format!(
                "its history begins at {}, after the time shown",
                date_time(from, &zone)
            ));
        }
        None => {
            *shown = Shown::NoHistory;
            slot.data = None;
            slot.note = Some("no history for this source".to_string());
        }
        Some(Err(e)) => {
            *shown = Shown::Failed(e.to_string());
            slot.data = None;
            slot.note = Some(format!("its history could not be read: {e}"));
        }
    }
    // Once every source has answered this time, its GPUs are joined as they were then, so
    // the by-GPU view and `:gpu` show that time's holders and flags (not live time's). At
    // once, not in the background: one join per step of the rewind.
    if r.sources.iter().all(|(_, g)| *g >= r.generation) {
        let fleet = r.shown.join_input().join();
        r.shown.take_joined(fleet);
    }
    r.shown.reshape_rows();
    state.dirty = true;
}

/// A source answered a seek; once all have, the nearest change is shown.
fn sought(
    state: &mut State,
    source: usize,
    generation: u64,
    result: Option<Result<Option<Timestamp>, crate::sources::Failure>>,
) -> Vec<Effect> {
    let Some(r) = state.rewind.as_mut() else {
        return Vec::new();
    };
    let Some(s) = r.seeking.as_mut().filter(|s| s.generation == generation) else {
        return Vec::new();
    };
    s.waiting = s.waiting.saturating_sub(1);
    match result {
        Some(Ok(Some(t))) => {
            s.best = Some(match (s.best, s.dir) {
                (None, _) => t,
                (Some(b), Direction::Next) => b.min(t),
                (Some(b), Direction::Prev) => b.max(t),
            });
        }
        Some(Ok(None)) | None => {}
        Some(Err(e)) => {
            let name = r
                .shown
                .sources
                .get(source)
                .map_or_else(String::new, |s| s.name.clone());
            r.shown.push_log(format!("{name}: seek failed: {e}"));
        }
    }
    if s.waiting > 0 {
        return Vec::new();
    }
    let Some(done) = r.seeking.take() else {
        return Vec::new();
    };
    let what = done
        .what
        .as_ref()
        .map_or_else(|| "anything".to_string(), ToString::to_string);
    let Some(t) = done.best else {
        let text = match done.dir {
            Direction::Next => format!("no later change of {what} (G returns to live)"),
            Direction::Prev => format!("no earlier change of {what} in the history"),
        };
        flash(&mut r.shown, text, false);
        state.dirty = true;
        return Vec::new();
    };
    let word = match done.dir {
        Direction::Next => "next",
        Direction::Prev => "previous",
    };
    let text = format!(
        "{word} change of {what}: {}",
        short_time(t, state.now, &state.zone)
    );
    let effects = show_at(state, t);
    if let Some(r) = state.rewind.as_mut() {
        flash(&mut r.shown, text, false);
    }
    effects
}

/// The rewind keys while live: `g` asks for a time, `{` and `[` rewind from now; the
/// others only make sense rewound.
pub(super) fn live_action(state: &mut State, a: KeyAction) -> Vec<Effect> {
    match a {
        KeyAction::Rewind => {
            state.mode = Mode::RewindTo(String::new());
            Vec::new()
        }
        KeyAction::StepBack => {
            let at = Timestamp(state.now.0.saturating_sub(STEP_MS));
            rewind_to(state, at)
        }
        KeyAction::PrevChange => {
            let now = state.now;
            let mut effects = rewind_to(state, now);
            effects.extend(seek(state, Direction::Prev));
            effects
        }
        _ => {
            flash(state, "live already: g rewinds to a time", false);
            Vec::new()
        }
    }
}

/// Time passed: plays forward, expires the rewound state's message; catching up with
/// live stops the play.
pub(super) fn tick(state: &mut State, now: Timestamp) -> Vec<Effect> {
    let Some(r) = state.rewind.as_mut() else {
        return Vec::new();
    };
    match (&r.shown.flash, r.flash_since) {
        (None, _) => r.flash_since = None,
        (Some(_), None) => r.flash_since = Some(now),
        (Some(_), Some(t)) if now.millis_since(t) >= FLASH_MS => {
            r.shown.flash = None;
            r.flash_since = None;
            state.dirty = true;
        }
        _ => {}
    }
    if !r.playing {
        // The banner says how far behind live: it grows each second.
        state.dirty = true;
        return Vec::new();
    }
    let next =
        r.at.plus_millis(crate::console::time::TICK_MS * u64::from(r.speed_x()));
    if next >= now {
        r.playing = false;
        flash(
            &mut r.shown,
            "caught up with live: G returns to live",
            false,
        );
    }
    rewind_to(state, next)
}

/// The charts the device in detail needs (live: the last hour; rewound: the hour around
/// the time shown), asked when the device or the window changed.
pub(super) fn charts_due(state: &mut State) -> Vec<Effect> {
    let live_now = state.now;
    let (target, rewound, at) = match state.rewind.as_mut() {
        Some(r) => (&mut *r.shown, true, Some(r.at)),
        None => (&mut *state, false, None),
    };
    if target.view != View::Detail {
        return Vec::new();
    }
    let Some((source, node, index)) = target.detail.clone() else {
        return Vec::new();
    };
    let (from, to) = chart_window(live_now, at);
    let key = ChartKey {
        source,
        node,
        index,
        from,
        to,
    };
    if target.charts.as_ref().is_some_and(|c| c.key == key) {
        return Vec::new();
    }
    // Keep the samples drawn until the new window's arrive.
    let kept = target.charts.take().filter(|c| {
        c.key.source == key.source && c.key.node == key.node && c.key.index == key.index
    });
    let mut charts = Charts::loading(key.clone());
    if let Some(old) = kept {
        charts.samples = old.samples;
        charts.no_history = old.no_history;
    }
    target.charts = Some(charts);
    vec![Effect::History(HistoryAsk::Telemetry { rewound, key })]
}

impl State {
    /// Marks every source's data as of `at` (the rewound state: not stale, whatever the
    /// time shown).
    fn fetched_at_all(&mut self, at: Timestamp) {
        for s in &mut self.sources {
            s.fetched_at = Some(at);
        }
    }
}
