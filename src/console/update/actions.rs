//! Actions on a picked target: release, move (with a target picker), cordon and project
//! reset, each asked through the one confirmation dialog (`confirm`). An action names
//! its target by identity; when the picked item is gone it is refused with a message.

use ratatui::crossterm::event::KeyEvent;

use crate::snapshot::ClaimState;
use crate::sources::Action;

use super::{ask, flash, move_across};
use crate::console::keymap::{Context, KeyAction};
use crate::console::msg::Effect;
use crate::console::state::{ClaimKey, Confirm, GpuName, Mode, MovePick, ProjKey, State, View};

/// What an action does when nothing is picked for it.
enum Unpicked<'a> {
    /// Opens the `:` line with this command typed.
    Command(&'a str),
    /// Says where to select one.
    Hint(&'a str),
}

/// Refuses an action whose picked item is gone. With nothing picked, an action that takes
/// a target (`command`) opens the `:` line with its command typed, so the target is named
/// there once (Tab completes); the others say where to select one.
fn nothing_selected(state: &mut State, view: View, verb: &str, otherwise: Unpicked<'_>) {
    // The claim detail acts on the claim it shows, which may be gone.
    let gone = state.detail_claim_gone().or_else(|| state.pick_gone(view));
    let text = match gone {
        Some(what) if state.view == View::ClaimDetail => format!(
            "{what} is gone (released, moved or finished since the detail opened): \
             nothing to {verb}"
        ),
        Some(what) if state.view == view => format!(
            "{what} is gone (released, moved or filtered out since you selected it): \
             nothing to {verb}; select again"
        ),
        _ => match otherwise {
            Unpicked::Command(command) => {
                state.mode = Mode::Command(format!("{command} "));
                return;
            }
            Unpicked::Hint(hint) => hint.to_string(),
        },
    };
    flash(state, text, true);
}

/// Opens the release confirmation for the selected claim (in Claims, or the claim the
/// claim detail shows); releasing another holder's claim asks for its id to be typed.
pub(super) fn release(state: &mut State) -> Vec<Effect> {
    let Some(k) = state.acted_claim() else {
        nothing_selected(state, View::Claims, "release", Unpicked::Command("release"));
        return Vec::new();
    };
    ask_release(state, k, None);
    Vec::new()
}

/// Asks to release the claim at `k`; `named` when the operator typed its id on the `:`
/// line (the dialog then says so). Releasing another holder's claim asks for its id.
pub(super) fn ask_release(state: &mut State, k: ClaimKey, named: Option<&str>) {
    let Some((slot, c)) = state.claim(k) else {
        return;
    };
    let place = crate::sources::endpoint::place(c);
    let body = vec![
        format!("Release claim {} on {}?", c.shown_id(), slot.name),
        format!(
            "project {}, holder {}, {}",
            c.project,
            c.holder.as_deref().unwrap_or("-"),
            c.form
        ),
        format!("at {place}, {} reserved", c.memory_reserved.iec()),
        "Its processes lose their reservation.".to_string(),
    ];
    let mut confirm = Confirm::new(
        k.source,
        Action::Release { id: c.id },
        "Release claim",
        body,
    );
    let foreign = c
        .holder
        .as_deref()
        .is_some_and(|h| state.operator.as_deref() != Some(h));
    if let Some(typed) = named {
        confirm
            .body
            .insert(0, format!("You typed: release {}", typed.trim()));
    }
    if foreign {
        // The id as typed after `:release`, its source's name before it or not.
        let source = format!("{}/", slot.name);
        let bare = named.map(|n| n.trim().strip_prefix(&source).unwrap_or(n));
        confirm.type_unless_named(c.shown_id(), bare);
    }
    ask(state, confirm);
}

/// Opens the move picker for the selected placed claim (in Claims, or the claim detail's),
/// listing the GPUs of every acting source it could move to.
pub(super) fn open_move(state: &mut State) {
    let Some(k) = state.acted_claim() else {
        nothing_selected(state, View::Claims, "move", Unpicked::Command("move"));
        return;
    };
    open_move_for(state, k);
}

/// Opens the move picker for the claim at `k` (refused, with why, when it is pending).
pub(super) fn open_move_for(state: &mut State, k: ClaimKey) -> bool {
    let Some((_, c)) = state.claim(k) else {
        return false;
    };
    if c.state != ClaimState::Placed {
        let text = format!("claim {} is pending: nothing to move", c.id);
        flash(state, text, true);
        return false;
    }
    let from = crate::sources::endpoint::place(c);
    let holds = c.shares.len().max(1);
    let id = c.id;
    let targets = move_across::rows(state, k.source, c);
    let pick = MovePick {
        source: k.source,
        id,
        from,
        targets,
        holds,
        selected: 0,
        sent: false,
        error: None,
        flow: None,
    };
    state.mode = Mode::Move(Box::new(pick));
    true
}

/// Keys in the move picker: pick a target (arrows, Tab, or the normal up/down keys such as
/// j/k: the picker has no text to type into), send the move, or cancel.
pub(super) fn move_key(state: &mut State, mut m: MovePick, ev: KeyEvent) -> Vec<Effect> {
    let n = m.targets.len();
    let action = state.keymap.action(Context::Dialog, &ev).or_else(|| {
        match state.keymap.action(Context::Normal, &ev) {
            Some(KeyAction::Down) => Some(KeyAction::NextField),
            Some(KeyAction::Up) => Some(KeyAction::PrevField),
            _ => None,
        }
    });
    match action {
        Some(KeyAction::Cancel) => {
            state.mode = Mode::Normal;
            return Vec::new();
        }
        _ if m.sent => {}
        Some(KeyAction::NextField | KeyAction::ChoiceRight) if n > 0 => {
            m.selected = (m.selected + 1) % n;
        }
        Some(KeyAction::PrevField | KeyAction::ChoiceLeft) if n > 0 => {
            m.selected = (m.selected + n - 1) % n;
        }
        Some(KeyAction::Confirm) => match move_across::target(&m) {
            Ok(Some((to, target))) if to != m.source => {
                if move_across::ask(state, &mut m, Some((to, target))) {
                    return Vec::new();
                }
            }
            Ok(None) if m.targets.get(m.selected).is_some_and(|r| r.any) => {
                if move_across::ask(state, &mut m, None) {
                    return Vec::new();
                }
            }
            Ok(Some((_, target))) => {
                let place = format!(
                    "{}:{}",
                    target.node.as_deref().unwrap_or("?"),
                    target
                        .devices
                        .as_ref()
                        .map(|d| d.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
                        .unwrap_or_default()
                );
                let model = m
                    .targets
                    .get(m.selected)
                    .map(|r| r.model.clone())
                    .unwrap_or_default();
                let action = Action::Move { id: m.id, target };
                m.error = None;
                let body = vec![
                    format!("Move claim {} from {} to {place} ({model})?", m.id, m.from),
                    "Its processes must be restarted on the new GPU.".to_string(),
                ];
                let mut confirm = Confirm::new(m.source, action, "Move claim", body);
                confirm.back = Some(Box::new(Mode::Move(Box::new(m.clone()))));
                m.sent = true;
                confirm.then = Some(Box::new(Mode::Move(Box::new(m))));
                ask(state, confirm);
                return Vec::new();
            }
            Ok(None) => {}
            Err(why) => m.error = Some(why),
        },
        _ => {}
    }
    state.mode = Mode::Move(Box::new(m));
    Vec::new()
}

/// Cordons (`Some(true)`), uncordons (`Some(false)`) or toggles (`None`) the selected GPU,
/// after confirmation.
pub(super) fn cordon(state: &mut State, to: Option<bool>) -> Vec<Effect> {
    let key = match state.view {
        View::Detail => state
            .detail_device()
            .map(|(s, n, d)| (s, n.name.clone(), d.index, d.cordoned, d.model.clone())),
        _ => state
            .selected_device()
            .filter(|_| state.view == View::Gpus)
            .and_then(|k| {
                let (_, n, d) = state.device(k)?;
                Some((
                    k.source,
                    n.name.clone(),
                    d.index,
                    d.cordoned,
                    d.model.clone(),
                ))
            }),
    };
    let Some((source, node, index, now_cordoned, model)) = key else {
        nothing_selected(
            state,
            View::Gpus,
            "cordon",
            Unpicked::Command(if to == Some(false) {
                "uncordon"
            } else {
                "cordon"
            }),
        );
        return Vec::new();
    };
    let gpu = (source, node, index);
    ask_cordon(
        state,
        gpu,
        (now_cordoned, model),
        to.unwrap_or(!now_cordoned),
        None,
    );
    Vec::new()
}

/// Asks to cordon (or uncordon) a GPU: source, node, index, with whether it is cordoned
/// now and its model. One named on the `:` line (`named`, the words as typed) has its
/// `NODE:INDEX` typed to confirm, as it was not seen selected, unless those words were
/// already that name in full; cordoning a cordoned GPU (or the reverse) is
/// refused, saying so.
pub(super) fn ask_cordon(
    state: &mut State,
    gpu: GpuName,
    (now_cordoned, model): (bool, String),
    cordoned: bool,
    named: Option<&str>,
) {
    let (source, node, index) = gpu;
    let src = state.sources.get(source).map_or("", |s| s.name.as_str());
    if now_cordoned == cordoned {
        let text = if cordoned {
            format!("GPU {node}:{index} on {src} is already cordoned: nothing to cordon")
        } else {
            format!("GPU {node}:{index} on {src} is not cordoned: nothing to uncordon")
        };
        flash(state, text, true);
        return;
    }
    let (title, what, then) = if cordoned {
        (
            "Cordon GPU",
            "Cordon",
            "No new claim is placed on it; claims there keep running.",
        )
    } else {
        (
            "Uncordon GPU",
            "Uncordon",
            "New claims may be placed on it again.",
        )
    };
    let mut body = vec![
        format!("{what} GPU {node}:{index} ({model}) on {src}?"),
        then.to_string(),
    ];
    let word = format!("{node}:{index}");
    if let Some(typed) = named {
        body.insert(
            0,
            format!("You typed: {} {}", what.to_lowercase(), typed.trim()),
        );
    }
    let action = Action::Cordon {
        node,
        index,
        cordoned,
    };
    let mut confirm = Confirm::new(source, action, title, body);
    if let Some(typed) = named {
        // `SOURCE/node:index` names it in full too.
        confirm.type_unless_named(word, Some(typed.rsplit('/').next().unwrap_or(typed)));
    }
    ask(state, confirm);
}

/// Asks to clear the selected project's backoffs and debts (Fair share view).
pub(super) fn reset_project(state: &mut State) -> Vec<Effect> {
    let Some(k) = state
        .selected_project()
        .filter(|_| state.view == View::Ledger)
    else {
        nothing_selected(
            state,
            View::Ledger,
            "reset",
            Unpicked::Hint("select a project in the Fair share view first"),
        );
        return Vec::new();
    };
    ask_reset(state, k)
}

/// Asks to clear one project's backoffs and debts.
pub(super) fn ask_reset(state: &mut State, k: ProjKey) -> Vec<Effect> {
    let Some((slot, p)) = state.project(k) else {
        return Vec::new();
    };
    let backoffs: Vec<String> = p
        .resources
        .iter()
        .filter(|r| r.backoff_until.is_some())
        .map(|r| r.resource.clone())
        .collect();
    let body = vec![
        format!(
            "Clear project {}'s backoffs and debts on {}?",
            p.name, slot.name
        ),
        if backoffs.is_empty() {
            "It is backed off on no resource now.".to_string()
        } else {
            format!("Backed off now on: {}.", backoffs.join(", "))
        },
        debts_line(p),
    ];
    let action = Action::ResetProject {
        project: p.name.clone(),
    };
    ask(state, Confirm::new(k.source, action, "Reset project", body));
    Vec::new()
}

/// `:share PROJECT N`: asks to set that project's resource share on its source, saying
/// what part of the shares it holds now and would hold after.
pub(super) fn ask_share(state: &mut State, arg: &str) -> Vec<Effect> {
    const USAGE: &str =
        "usage: share PROJECT N (N a whole number from 0 to 1000000; 0 gets no new work)";
    let words: Vec<&str> = arg.split_whitespace().collect();
    let [name, n] = words.as_slice() else {
        flash(state, USAGE.to_string(), true);
        return Vec::new();
    };
    let share = match n.parse::<u32>() {
        Ok(v) if v <= crate::fairshare::Share::MAX => v,
        _ => {
            flash(state, format!("share `{n}` is not allowed; {USAGE}"), true);
            return Vec::new();
        }
    };
    let Some(k) = state
        .projects
        .rows
        .iter()
        .find(|k| state.project(**k).is_some_and(|(_, p)| p.name == *name))
        .copied()
    else {
        flash(state, format!("no project `{name}` in view"), true);
        return Vec::new();
    };
    let Some((slot, p)) = state.project(k) else {
        return Vec::new();
    };
    let others: u64 = slot.data.as_ref().map_or(0, |d| {
        d.projects
            .iter()
            .filter(|q| q.name != p.name)
            .map(|q| u64::from(q.share))
            .sum()
    });
    let part = |mine: u32| {
        let total = others + u64::from(mine);
        if total == 0 {
            "none of the shares".to_string()
        } else {
            // Shares are at most a million each: far inside f64's exact integers.
            #[allow(clippy::cast_precision_loss)]
            let pct = u64::from(mine) as f64 * 100.0 / total as f64;
            format!("{pct:.0}% of the shares")
        }
    };
    let mut body = vec![
        format!(
            "Set project {}'s share on {} from {} to {share}?",
            p.name, slot.name, p.share
        ),
        format!(
            "It holds {} now and would hold {}.",
            part(p.share),
            part(share)
        ),
    ];
    if share == 0 {
        body.push("At 0 it gets no new work; what it holds runs on.".to_string());
    }
    let action = Action::SetShare {
        project: p.name.clone(),
        share,
    };
    ask(state, Confirm::new(k.source, action, "Set share", body));
    Vec::new()
}

/// The project's debts as the Fair share table shows them (per resource type, under half
/// a unit reading `0`), and that they go back to zero.
fn debts_line(p: &crate::snapshot::ProjectView) -> String {
    let shown = |d: f64| {
        if d.abs() <= 0.5 {
            "0".to_string()
        } else {
            format!("{d:.0}")
        }
    };
    let debts: Vec<String> = p
        .resources
        .iter()
        .map(|r| {
            let model = r.resource.strip_prefix("gpu:").unwrap_or(&r.resource);
            format!("{} on {model}", shown(r.debt))
        })
        .collect();
    if debts.is_empty() {
        "Its debts go back to zero: it loses its place in line.".to_string()
    } else {
        format!(
            "Its debts ({}) go back to zero: it loses its place in line.",
            debts.join(", ")
        )
    }
}
