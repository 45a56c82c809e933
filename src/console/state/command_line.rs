//! What the `:` command line accepts and could become as it is typed: `update` completes
//! with it and the hint line lists it.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::console::keymap::{Context, KeyAction};

use super::State;

/// The commands the `:` line accepts (beyond view names and key actions).
const COMMANDS: &[&str] = &[
    "overview",
    "gpus",
    "gpu",
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
    "share",
    "act",
    "handover",
    "freeze",
    "refresh",
    "source",
    "sort",
    "filter",
];

/// The command a typed head stands for: itself; the one command or key action it starts
/// (`rel` is `release`); or, for the actions that take a target, the key that does them
/// (`:r 17` releases claim 17 as `r` releases the selected one, `:x 80:6` cordons).
/// `None` when it is none of these, or starts several.
pub fn command_word(state: &State, head: &str) -> Option<String> {
    let names = || {
        COMMANDS.iter().map(|c| (*c).to_string()).chain(
            KeyAction::ALL
                .iter()
                .filter(|a| a.context() == Context::Normal)
                .map(|a| a.name().to_string()),
        )
    };
    if head.is_empty() {
        return None;
    }
    if names().any(|n| n == head) {
        return Some(head.to_string());
    }
    let mut chars = head.chars();
    if let (Some(c), None) = (chars.next(), chars.next()) {
        let ev = KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE);
        let taking = match state.keymap.action(Context::Normal, &ev) {
            Some(KeyAction::Release) => Some("release"),
            Some(KeyAction::Cordon) => Some("cordon"),
            Some(KeyAction::Move) => Some("move"),
            _ => None,
        };
        if let Some(word) = taking {
            return Some(word.to_string());
        }
    }
    let starting: std::collections::BTreeSet<String> =
        names().filter(|n| n.starts_with(head)).collect();
    let mut starting = starting.into_iter();
    match (starting.next(), starting.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

/// What Enter would do with a command line that no candidate extends, in words for the
/// hint: the target it names in full (`:gpu 40:5` names `dgx-a100-40:5`), why the target
/// cannot be found, or `None` when the command itself is unknown.
pub fn command_hint(state: &State, text: &str) -> Option<String> {
    let (typed, arg) = text
        .trim_start()
        .split_once(' ')
        .map_or((text.trim(), ""), |(h, a)| (h, a.trim()));
    // A head that stands for a command (`rel`, `x`) reads as it once something follows.
    let word = command_word(state, typed).filter(|_| !arg.is_empty());
    let head = word.as_deref().unwrap_or(typed);
    let gpu = |verb: &str, arg: &str| match state.find_gpu(arg) {
        Ok((_, node, index)) => format!("Enter: {verb} {node}:{index}"),
        Err(why) => why,
    };
    let claim = |verb: &str, arg: &str| match state.find_claim(arg) {
        Ok(k) => state.claim(k).map_or_else(
            || format!("no claim `{arg}`"),
            |(_, c)| format!("Enter: {verb} claim {}", c.shown_id()),
        ),
        Err(why) => why,
    };
    let known = COMMANDS.contains(&head)
        || KeyAction::ALL
            .iter()
            .any(|a| a.context() == Context::Normal && a.name() == head);
    Some(match head {
        "gpu" | "cordon" | "uncordon" if !arg.is_empty() => {
            gpu(if head == "gpu" { "open" } else { head }, arg)
        }
        "claim" | "release" if !arg.is_empty() => {
            claim(if head == "claim" { "open" } else { head }, arg)
        }
        "move" if !arg.is_empty() => {
            let (id, to) = arg.split_once(' ').unwrap_or((arg, ""));
            match (state.find_claim(id), to.trim()) {
                (Err(why), _) => why,
                (Ok(_), "") => claim("move", id),
                (Ok(_), to) => match state.find_gpu(to) {
                    Ok((_, node, index)) => format!("Enter: move claim {id} to {node}:{index}"),
                    Err(why) => why,
                },
            }
        }
        _ if known => "Enter run".to_string(),
        _ => return None,
    })
}

/// What the command line could become: the commands (or a command's arguments) that
/// start with what is typed, sorted. The command line shows them as it is typed.
pub fn candidates(state: &State, text: &str) -> Vec<String> {
    let (head, arg) = match text.split_once(' ') {
        Some((h, a)) => (h, Some(a)),
        None => (text, None),
    };
    let options: Vec<String> = match arg {
        None => COMMANDS
            .iter()
            .map(|c| (*c).to_string())
            .chain(
                KeyAction::ALL
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
                "sort" => state.sort_names().into_iter().map(str::to_string).collect(),
                "reset" | "share" => state
                    .projects
                    .rows
                    .iter()
                    .filter_map(|k| state.project(*k).map(|(_, p)| p.name.clone()))
                    .collect(),
                "claim" | "release" | "move" => state.claim_names(),
                "gpu" | "cordon" | "uncordon" => state.gpu_names(),
                "filter" => state
                    .view
                    .problem_filters()
                    .iter()
                    .map(|c| (*c).to_string())
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
    options
}
