//! The pure update: `update(&mut State, Msg) -> Vec<Effect>`. No I/O, no clock: time
//! arrives in `Msg::Tick`, data in `Msg::Fetched`, results in `Msg::Planned`/`Msg::Acted`.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::clock::Timestamp;
use crate::placement::MoveTarget;
use crate::snapshot::{ClaimState, Snapshot};
use crate::sources::{Action, Failure, Outcome};

use super::keymap::{Context, KeyAction};
use super::msg::{Effect, Msg};
use super::state::{
    ClaimForm, Confirm, FLASH_MS, Flash, FormField, FormKind, FormStage, Mode, MovePick,
    SourceHealth, State, View,
};

/// Longest backoff between fetches of a failing source, in refresh intervals.
const MAX_BACKOFF_INTERVALS: u64 = 16;

/// The commands the `:` line accepts (beyond view names and key actions).
pub const COMMANDS: &[&str] = &[
    "overview",
    "gpus",
    "claims",
    "fairshare",
    "detail",
    "events",
    "quit",
    "help",
    "claim",
    "release",
    "move",
    "cordon",
    "uncordon",
    "reset",
    "freeze",
    "refresh",
    "source",
    "sort",
    "filter",
];

/// Applies one message; returns the effects for the driver.
pub fn update(state: &mut State, msg: Msg) -> Vec<Effect> {
    match msg {
        Msg::Tick(now) => tick(state, now),
        Msg::Resize { width, height } => {
            state.size = (width, height);
            state.dirty = true;
            Vec::new()
        }
        Msg::Key(ev) => {
            // Some terminals report releases and repeats too; act on presses only.
            if ev.kind != KeyEventKind::Press {
                return Vec::new();
            }
            state.dirty = true;
            key(state, ev)
        }
        Msg::Fetched { source, at, result } => {
            fetched(state, source, at, result);
            Vec::new()
        }
        Msg::Planned { source, result } => {
            planned(state, source, result);
            Vec::new()
        }
        Msg::Acted {
            source,
            action,
            result,
        } => acted(state, source, &action, result),
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

fn quit(state: &mut State) -> Vec<Effect> {
    state.quit = true;
    vec![Effect::Quit]
}

fn flash(state: &mut State, text: impl Into<String>, error: bool) {
    let text = text.into();
    state.push_log(text.clone());
    state.flash = Some(Flash {
        text,
        error,
        at: state.now,
    });
    state.dirty = true;
}

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

fn tick(state: &mut State, now: Timestamp) -> Vec<Effect> {
    let before = health_signature(state);
    state.now = now;
    if health_signature(state) != before {
        state.dirty = true;
    }
    // Ages on screen count in minutes (and stale ages in seconds): redraw only then.
    let minute = now.0 / 60_000;
    if minute != state.minute {
        state.minute = minute;
        state.dirty = true;
    }
    if state
        .sources
        .iter()
        .any(|s| !matches!(s.health(now, state.refresh_ms), SourceHealth::Ok))
    {
        state.dirty = true;
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
fn due_fetches(state: &mut State, force: bool) -> Vec<Effect> {
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

/// Whether two snapshots differ in anything but when they were taken.
fn same_content(a: &Snapshot, b: &Snapshot) -> bool {
    a.revision == b.revision
        && a.nodes == b.nodes
        && a.claims == b.claims
        && a.projects == b.projects
        && a.resources == b.resources
        && a.events == b.events
        && a.coordination == b.coordination
        && a.host == b.host
        && a.endpoint == b.endpoint
}

fn fetched(state: &mut State, source: usize, at: Timestamp, result: Result<Snapshot, Failure>) {
    let refresh = state.refresh_ms;
    let frozen = state.frozen;
    let Some(slot) = state.sources.get_mut(source) else {
        return;
    };
    slot.in_flight = false;
    match result {
        Ok(snap) => {
            let recovered = slot.error.take().is_some();
            slot.error_since = None;
            slot.failures = 0;
            slot.next_fetch = at.plus_millis(refresh);
            if frozen {
                slot.held = Some((snap, at));
                return;
            }
            let changed = slot
                .raw
                .as_ref()
                .or(slot.data.as_ref())
                .is_none_or(|d| !same_content(d, &snap));
            let was_stale = slot
                .fetched_at
                .is_none_or(|t| at.millis_since(t) > refresh * super::state::STALE_AFTER_INTERVALS);
            slot.fetched_at = Some(at);
            let name = slot.name.clone();
            state.store_snapshot(source, snap);
            if recovered {
                state.push_log(format!("source {name}: answering again"));
            }
            if changed {
                state.rebuild_rows();
            }
            if changed || recovered || was_stale {
                state.dirty = true;
            }
        }
        Err(e) => {
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
    }
}

fn planned(
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

fn acted(
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

fn key(state: &mut State, ev: KeyEvent) -> Vec<Effect> {
    match state.mode.clone() {
        Mode::Normal => normal_key(state, ev),
        Mode::Help => {
            let a = state.keymap.action(Context::Normal, &ev);
            let page = state.size.1.saturating_sub(4).max(1);
            match a {
                Some(KeyAction::Help | KeyAction::Back | KeyAction::Quit) => {
                    state.mode = Mode::Normal;
                    state.help_scroll = 0;
                }
                _ if ev.code == KeyCode::Esc => {
                    state.mode = Mode::Normal;
                    state.help_scroll = 0;
                }
                Some(KeyAction::Down) => state.help_scroll = state.help_scroll.saturating_add(1),
                Some(KeyAction::Up) => state.help_scroll = state.help_scroll.saturating_sub(1),
                Some(KeyAction::PageDown) => {
                    state.help_scroll = state.help_scroll.saturating_add(page);
                }
                Some(KeyAction::PageUp) => {
                    state.help_scroll = state.help_scroll.saturating_sub(page);
                }
                Some(KeyAction::Top) => state.help_scroll = 0,
                _ => {}
            }
            state.dirty = true;
            Vec::new()
        }
        Mode::Filter(text) => {
            let text = edit_line(text, &ev);
            match ev.code {
                KeyCode::Esc => {
                    state.filter.clear();
                    state.mode = Mode::Normal;
                }
                KeyCode::Enter => state.mode = Mode::Normal,
                _ => {
                    state.filter.clone_from(&text);
                    state.mode = Mode::Filter(text);
                }
            }
            state.rebuild_rows();
            Vec::new()
        }
        Mode::Command(text) => match ev.code {
            KeyCode::Esc => {
                state.mode = Mode::Normal;
                Vec::new()
            }
            KeyCode::Enter => {
                state.mode = Mode::Normal;
                command(state, &text)
            }
            KeyCode::Tab => {
                state.mode = Mode::Command(complete(state, &text));
                Vec::new()
            }
            _ => {
                state.mode = Mode::Command(edit_line(text, &ev));
                Vec::new()
            }
        },
        Mode::Form(form) => form_key(state, *form, ev),
        Mode::Confirm(c) => confirm_key(state, *c, ev),
        Mode::Move(m) => move_key(state, *m, ev),
    }
}

/// Text editing for one-line inputs: characters, backspace, ctrl-u.
fn edit_line(mut text: String, ev: &KeyEvent) -> String {
    match ev.code {
        KeyCode::Backspace => {
            text.pop();
        }
        KeyCode::Char('u') if ev.modifiers.contains(KeyModifiers::CONTROL) => text.clear(),
        KeyCode::Char(c) if !ev.modifiers.contains(KeyModifiers::CONTROL) => text.push(c),
        _ => {}
    }
    text
}

/// Completes the command line: the longest common prefix of the matching commands.
pub fn complete(state: &State, text: &str) -> String {
    let (head, arg) = match text.split_once(' ') {
        Some((h, a)) => (h, Some(a)),
        None => (text, None),
    };
    let options: Vec<String> = match arg {
        None => COMMANDS
            .iter()
            .map(|c| (*c).to_string())
            .chain(
                crate::console::keymap::KeyAction::ALL
                    .iter()
                    .filter(|a| a.context() == Context::Normal)
                    .filter(|a| !(state.readonly && a.mutates()))
                    .map(|a| a.name().to_string()),
            )
            .filter(|c| c.starts_with(head))
            .collect(),
        Some(a) => {
            let args: Vec<String> = match head {
                "source" => std::iter::once("all".to_string())
                    .chain(state.sources.iter().map(|s| s.name.clone()))
                    .collect(),
                "sort" => state
                    .view
                    .sort_columns()
                    .iter()
                    .map(|c| (*c).to_string())
                    .collect(),
                "reset" => state
                    .rows_projects
                    .iter()
                    .filter_map(|k| state.project(*k).map(|(_, p)| p.name.clone()))
                    .collect(),
                _ => Vec::new(),
            };
            args.into_iter()
                .filter(|x| x.starts_with(a))
                .map(|x| format!("{head} {x}"))
                .collect()
        }
    };
    let mut options = options;
    options.sort();
    options.dedup();
    match options.as_slice() {
        [] => text.to_string(),
        [one] => {
            if arg.is_none() {
                format!("{one} ")
            } else {
                one.clone()
            }
        }
        many => {
            let first = &many[0];
            let mut n = first.len();
            for o in &many[1..] {
                n = n.min(
                    first
                        .chars()
                        .zip(o.chars())
                        .take_while(|(a, b)| a == b)
                        .count(),
                );
            }
            first.chars().take(n.max(text.len())).collect()
        }
    }
}

fn command(state: &mut State, text: &str) -> Vec<Effect> {
    let mut words = text.split_whitespace();
    let Some(head) = words.next() else {
        return Vec::new();
    };
    let arg = words.collect::<Vec<_>>().join(" ");
    if let Some(v) = View::parse(head) {
        return set_view(state, v);
    }
    match head {
        "quit" | "q" => quit(state),
        "help" => {
            state.mode = Mode::Help;
            Vec::new()
        }
        "source" => {
            if arg.is_empty() || arg == "all" {
                state.source_filter = None;
            } else if let Some(i) = state.sources.iter().position(|s| s.name == arg) {
                state.source_filter = Some(i);
            } else {
                let names: Vec<&str> = state.sources.iter().map(|s| s.name.as_str()).collect();
                flash(
                    state,
                    format!("no source `{arg}`; sources: all, {}", names.join(", ")),
                    true,
                );
                return Vec::new();
            }
            state.rebuild_rows();
            Vec::new()
        }
        "sort" => {
            let cols = state.view.sort_columns();
            match cols.iter().position(|c| *c == arg) {
                Some(i) => {
                    state.sort[state.view.position()] = i;
                    state.rebuild_rows();
                }
                None if cols.is_empty() => {
                    flash(
                        state,
                        format!("the {} view has no sort", state.view.title()),
                        true,
                    );
                }
                None => flash(
                    state,
                    format!("no column `{arg}` here; sort by: {}", cols.join(", ")),
                    true,
                ),
            }
            Vec::new()
        }
        "filter" => {
            state.filter = arg;
            state.rebuild_rows();
            Vec::new()
        }
        "cordon" | "uncordon" => cordon(state, Some(head == "cordon")),
        "reset" => {
            if arg.is_empty() {
                return normal_action(state, KeyAction::ClearBackoff);
            }
            let found = state
                .rows_projects
                .iter()
                .filter_map(|k| state.project(*k).map(|(s, p)| (k.source, s, p)))
                .find(|(_, _, p)| p.name == arg)
                .map(|(i, _, _)| i);
            match found {
                Some(src) => act(state, src, Action::ResetProject { project: arg }),
                None => {
                    flash(state, format!("no project `{arg}` in view"), true);
                    Vec::new()
                }
            }
        }
        other => match crate::console::keymap::KeyAction::ALL
            .iter()
            .find(|a| a.name() == other && a.context() == Context::Normal)
        {
            Some(a) => normal_action(state, *a),
            None => {
                flash(
                    state,
                    format!("unknown command `{other}`; Tab completes, `help` lists the keys"),
                    true,
                );
                Vec::new()
            }
        },
    }
}

/// Shows a view; the detail view opens on the selected GPU (or the selected claim's).
pub fn show_view(state: &mut State, v: View) {
    set_view(state, v);
    state.dirty = true;
}

fn set_view(state: &mut State, v: View) -> Vec<Effect> {
    if v == View::Detail && state.detail.is_none() {
        open_detail(state);
    }
    state.view = v;
    Vec::new()
}

fn open_detail(state: &mut State) {
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
        state.cursor[View::Detail.position()] = Default::default();
    }
}

fn normal_key(state: &mut State, ev: KeyEvent) -> Vec<Effect> {
    match state.keymap.action(Context::Normal, &ev) {
        Some(a) => normal_action(state, a),
        None => Vec::new(),
    }
}

fn move_cursor(state: &mut State, delta: isize) {
    let n = state.row_count();
    let page = usize::from(state.size.1.saturating_sub(6)).max(1);
    let c = &mut state.cursor[state.view.position()];
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
}

fn normal_action(state: &mut State, a: KeyAction) -> Vec<Effect> {
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
    let page = isize::try_from(state.size.1.saturating_sub(6).max(1)).unwrap_or(10);
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
        KeyAction::Up => move_cursor(state, -1),
        KeyAction::Down => move_cursor(state, 1),
        KeyAction::PageUp => move_cursor(state, -page),
        KeyAction::PageDown => move_cursor(state, page),
        KeyAction::Top => move_cursor(state, isize::MIN),
        KeyAction::Bottom => move_cursor(state, isize::MAX),
        KeyAction::Open => {
            if matches!(state.view, View::Gpus | View::Claims) {
                open_detail(state);
                if state.detail.is_some() {
                    state.view = View::Detail;
                }
            }
        }
        KeyAction::Back => {
            if state.flash.is_some() {
                state.flash = None;
            } else if state.view == View::Detail {
                state.view = View::Gpus;
            } else if !state.filter.is_empty() {
                state.filter.clear();
                state.rebuild_rows();
            }
        }
        KeyAction::Filter => state.mode = Mode::Filter(state.filter.clone()),
        KeyAction::Command => state.mode = Mode::Command(String::new()),
        KeyAction::SortNext => {
            let cols = state.view.sort_columns();
            if !cols.is_empty() {
                let p = state.view.position();
                state.sort[p] = (state.sort[p] + 1) % cols.len();
                state.rebuild_rows();
            }
        }
        KeyAction::SortReverse => {
            let p = state.view.position();
            state.sort_reverse[p] = !state.sort_reverse[p];
            state.rebuild_rows();
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
            state.rebuild_rows();
        }
        KeyAction::Refresh => return due_fetches(state, true),
        KeyAction::Claim => open_form(state),
        KeyAction::Release => return release(state),
        KeyAction::Move => open_move(state),
        KeyAction::Cordon => return cordon(state, None),
        KeyAction::ClearBackoff => {
            let Some(k) = state.selected_project() else {
                flash(state, "select a project in the Fair share view first", true);
                return Vec::new();
            };
            let Some((_, p)) = state.project(k) else {
                return Vec::new();
            };
            let project = p.name.clone();
            return act(state, k.source, Action::ResetProject { project });
        }
        KeyAction::Confirm
        | KeyAction::Cancel
        | KeyAction::NextField
        | KeyAction::PrevField
        | KeyAction::ChoiceLeft
        | KeyAction::ChoiceRight => {}
    }
    Vec::new()
}

/// Sends an action to its source, unless the console is read-only or the source cannot act.
fn act(state: &mut State, source: usize, action: Action) -> Vec<Effect> {
    let Some(slot) = state.sources.get(source) else {
        return Vec::new();
    };
    if state.readonly {
        flash(
            state,
            format!("read-only: {} {} refused", action.verb(), action.target()),
            true,
        );
        return Vec::new();
    }
    if !slot.can_act {
        let text = format!(
            "{}: this {} source is read-only; {} {} refused",
            slot.name,
            slot.kind,
            action.verb(),
            action.target()
        );
        flash(state, text, true);
        return Vec::new();
    }
    state.push_log(format!(
        "{}: {} {} sent",
        slot.name,
        action.verb(),
        action.target()
    ));
    vec![Effect::Act { source, action }]
}

/// The source new claims go to: the one shown alone, else the selected GPU's, else the
/// first that can act.
fn claim_source(state: &State) -> Option<usize> {
    if let Some(i) = state.source_filter {
        return Some(i);
    }
    if state.view == View::Gpus
        && let Some(k) = state.selected_device()
    {
        return Some(k.source);
    }
    state
        .sources
        .iter()
        .position(|s| s.can_act)
        .or(if state.sources.is_empty() {
            None
        } else {
            Some(0)
        })
}

fn open_form(state: &mut State) {
    let Some(src) = claim_source(state) else {
        flash(state, "no source to claim from", true);
        return;
    };
    if let Some(s) = state.sources.get(src)
        && !s.can_act
    {
        let text = format!(
            "{}: this {} source is read-only; claim refused",
            s.name, s.kind
        );
        flash(state, text, true);
        return;
    }
    state.mode = Mode::Form(Box::new(ClaimForm::new(src)));
}

fn form_key(state: &mut State, mut form: ClaimForm, ev: KeyEvent) -> Vec<Effect> {
    let visible = form.visible();
    let focus_field = visible
        .get(form.focus)
        .copied()
        .unwrap_or(FormField::Amount);
    let action = state.keymap.action(Context::Dialog, &ev);
    let busy = matches!(form.stage, FormStage::Planning | FormStage::Submitting);
    let mut effects = Vec::new();
    match action {
        Some(KeyAction::Cancel) => {
            state.mode = Mode::Normal;
            return Vec::new();
        }
        _ if busy => {}
        Some(KeyAction::NextField) => form.focus = (form.focus + 1) % visible.len(),
        Some(KeyAction::PrevField) => {
            form.focus = (form.focus + visible.len() - 1) % visible.len();
        }
        Some(KeyAction::ChoiceLeft | KeyAction::ChoiceRight) => {
            let right = action == Some(KeyAction::ChoiceRight);
            match focus_field {
                FormField::Kind => {
                    let n = FormKind::ALL.len();
                    let i = FormKind::ALL
                        .iter()
                        .position(|k| *k == form.kind)
                        .unwrap_or(0);
                    let j = if right { (i + 1) % n } else { (i + n - 1) % n };
                    form.kind = FormKind::ALL[j];
                    form.text[1] = match form.kind {
                        FormKind::Memory => "10Gi",
                        FormKind::Fraction => "0.25",
                        FormKind::Share => "50%",
                        FormKind::Whole => "1",
                    }
                    .to_string();
                    if form.kind == FormKind::Share && form.text[3].is_empty() {
                        form.text[3] = "1".to_string();
                    }
                    form.focus = 0;
                }
                FormField::Wait => form.wait = !form.wait,
                _ => {}
            }
            form.stage = FormStage::Editing;
        }
        Some(KeyAction::Confirm) => match &form.stage {
            FormStage::Preview(_) => {
                let request = match form.request() {
                    Ok(r) => r,
                    Err(e) => {
                        form.stage = FormStage::Editing;
                        form.error = Some(e.to_string());
                        return effects;
                    }
                };
                let src = form.source;
                effects = act(state, src, Action::Claim { request });
                if effects.is_empty() {
                    // Refused before sending (read-only): leave the form open with why.
                    form.error = state.flash.as_ref().map(|f| f.text.clone());
                } else {
                    form.stage = FormStage::Submitting;
                }
            }
            // The validator runs here, before any source is asked: its message names
            // the field at fault.
            _ => match form.request() {
                Ok(request) => {
                    form.error = None;
                    form.stage = FormStage::Planning;
                    effects.push(Effect::Plan {
                        source: form.source,
                        request,
                    });
                }
                Err(e) => {
                    form.stage = FormStage::Editing;
                    form.error = Some(e.to_string());
                }
            },
        },
        _ => {
            if matches!(focus_field, FormField::Kind | FormField::Wait) {
                if ev.code == KeyCode::Char(' ') {
                    if focus_field == FormField::Wait {
                        form.wait = !form.wait;
                    }
                    form.stage = FormStage::Editing;
                }
            } else if let Some(i) = FormField::ALL.iter().position(|f| *f == focus_field) {
                let before = form.text[i].clone();
                form.text[i] = edit_line(before.clone(), &ev);
                if form.text[i] != before {
                    form.stage = FormStage::Editing;
                }
            }
        }
    }
    state.mode = Mode::Form(Box::new(form));
    effects
}

fn release(state: &mut State) -> Vec<Effect> {
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

fn confirm_key(state: &mut State, mut c: Confirm, ev: KeyEvent) -> Vec<Effect> {
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

fn open_move(state: &mut State) {
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
    let Some((slot, c)) = state.claim(k) else {
        return;
    };
    if c.state != ClaimState::Placed {
        let text = format!("claim {} is pending: nothing to move", c.id);
        flash(state, text, true);
        return;
    }
    let from = crate::sources::endpoint::place(c);
    let held: Vec<u32> = c.shares.iter().map(|s| s.device).collect();
    let node = c.node.clone().unwrap_or_default();
    let targets: Vec<(String, u32, String, String)> = slot
        .data
        .iter()
        .flat_map(|d| d.nodes.iter())
        .flat_map(|n| n.devices.iter().map(move |d| (n, d)))
        .filter(|(n, d)| !(d.cordoned || (n.name == node && held.contains(&d.index))))
        .map(|(n, d)| {
            (
                n.name.clone(),
                d.index,
                d.model.clone(),
                format!("{} free, {} GPU free", d.memory_free.iec(), d.compute_free),
            )
        })
        .collect();
    let pick = MovePick {
        source: k.source,
        id: c.id,
        from,
        targets,
        selected: 0,
        sent: false,
        error: None,
    };
    state.mode = Mode::Move(Box::new(pick));
}

fn move_key(state: &mut State, mut m: MovePick, ev: KeyEvent) -> Vec<Effect> {
    let n = m.targets.len();
    let mut out = Vec::new();
    match state.keymap.action(Context::Dialog, &ev) {
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
        Some(KeyAction::Confirm) => {
            if let Some((node, index, _, _)) = m.targets.get(m.selected).cloned() {
                let action = Action::Move {
                    id: m.id,
                    target: MoveTarget {
                        node: Some(node),
                        devices: Some(vec![index]),
                    },
                };
                out = act(state, m.source, action);
                m.sent = !out.is_empty();
                m.error = None;
            }
        }
        _ => {}
    }
    state.mode = Mode::Move(Box::new(m));
    out
}

/// Cordons (`Some(true)`), uncordons (`Some(false)`) or toggles (`None`) the selected GPU.
fn cordon(state: &mut State, to: Option<bool>) -> Vec<Effect> {
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
