//! The `:` command line: its commands, Tab completion, and switching views.

use super::actions::{ask_reset, ask_share};
use super::keys::normal_action;
use super::navigate::set_view;
use super::{flash, quit};
use crate::console::keymap::{Context, KeyAction};
use crate::console::msg::Effect;
use crate::console::state::{Mode, State, View, candidates, command_word};

/// Completes the command line: the longest common prefix of the matching commands.
pub fn complete(state: &State, text: &str) -> String {
    let arg = text.split_once(' ').map(|(_, a)| a);
    let options = candidates(state, text);
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

/// Runs a `:` command line.
pub(super) fn command(state: &mut State, text: &str) -> Vec<Effect> {
    let mut words = text.split_whitespace();
    let Some(head) = words.next() else {
        return Vec::new();
    };
    let arg = words.collect::<Vec<_>>().join(" ");
    if let Some(v) = View::parse(head) {
        return set_view(state, v);
    }
    let word = command_word(state, head);
    let head = word.as_deref().unwrap_or(head);
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
            state.reshape_rows();
            Vec::new()
        }
        "sort" => {
            match state.sort_by_name(&arg) {
                Ok(()) => state.reshape_rows(),
                Err(e) => flash(state, e.to_string(), true),
            }
            Vec::new()
        }
        "filter" => {
            *state.filter_mut() = arg;
            state.reshape_rows();
            Vec::new()
        }
        "cordon" | "uncordon" => super::named::cordon(state, &arg, head == "cordon"),
        "gpu" => super::named::gpu(state, &arg),
        "release" => super::named::release(state, &arg),
        "move" => super::named::move_claim(state, &arg),
        // `claim ID` opens that claim's detail; `claim` alone, the claim form.
        "claim" if !arg.is_empty() => {
            if let Err(why) = state.open_claim_named(&arg) {
                flash(state, why, true);
            }
            Vec::new()
        }
        // `:act VERB TARGET then ...` is a hand-over.
        "act" if arg.split_whitespace().any(|w| w == "then") => {
            super::handover::command(state, &arg)
        }
        "act" => super::engine::engine_command(state, &arg),
        "handover" => super::handover::command(state, &arg),
        "reset" => reset(state, &arg),
        "share" => ask_share(state, &arg),
        other => {
            if let Some(a) = crate::console::keymap::KeyAction::ALL
                .iter()
                .find(|a| a.name() == other && a.context() == Context::Normal)
            {
                // A key's action takes no target: one typed after it is refused, never
                // dropped in favour of the selected row.
                if !arg.is_empty() {
                    flash(
                        state,
                        format!(
                            "`{other}` takes no argument (it acts on the selection); `{other} {arg}` not run"
                        ),
                        true,
                    );
                    return Vec::new();
                }
                normal_action(state, *a)
            } else {
                flash(
                    state,
                    format!("unknown command `{other}`; Tab completes, `help` lists the keys"),
                    true,
                );
                Vec::new()
            }
        }
    }
}

/// `:reset` clears the selected source's backoff; `:reset PROJECT` asks to reset that
/// project's debts.
fn reset(state: &mut State, arg: &str) -> Vec<Effect> {
    if arg.is_empty() {
        return normal_action(state, KeyAction::ClearBackoff);
    }
    let found = state
        .projects
        .rows
        .iter()
        .find(|k| state.project(**k).is_some_and(|(_, p)| p.name == arg))
        .copied();
    if let Some(k) = found {
        ask_reset(state, k)
    } else {
        flash(state, format!("no project `{arg}` in view"), true);
        Vec::new()
    }
}
