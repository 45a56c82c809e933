//! What the `:` command line accepts and could become as it is typed: `update` completes
//! with it and the hint line lists it.

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
    "act",
    "handover",
    "freeze",
    "refresh",
    "source",
    "sort",
    "filter",
];

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
                "reset" => state
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
