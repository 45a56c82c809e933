//! Commands that name their target on the `:` line: `:gpu NODE:INDEX` (its detail, from
//! any view), `:cordon`/`:uncordon NODE:INDEX`, `:release ID`, `:move ID [NODE:INDEX]`.
//! The target named is the one acted on, never the selected row; one that cannot be found
//! is refused, saying what there is. Without an argument each acts on the selection.

use super::actions::{ask_cordon, ask_release, open_move_for};
use super::flash;
use crate::console::msg::Effect;
use crate::console::state::{Mode, State};

/// `:gpu NODE:INDEX`: that GPU's detail (its holders, processes), from any view; a GPU
/// more than one source sees opens as one physical GPU with every engine's holders.
pub(super) fn gpu(state: &mut State, arg: &str) -> Vec<Effect> {
    if arg.is_empty() {
        flash(
            state,
            "gpu: name one as NODE:INDEX, as the screens print it (Tab completes)",
            true,
        );
        return Vec::new();
    }
    // Seen by more than one source (or asked from the by-GPU list): every engine's
    // holders and processes; `SOURCE/NODE:INDEX` is always that source's device.
    let across = !arg.contains('/') && (state.physical.by_gpu || state.physical_shared(arg));
    if across && state.open_physical_named(arg).is_some() {
        return Vec::new();
    }
    if let Err(why) = state.open_gpu_named(arg) {
        flash(state, why, true);
    }
    Vec::new()
}

/// `:cordon NODE:INDEX` / `:uncordon NODE:INDEX`: asks for that GPU, its name typed to
/// confirm; alone, the selected GPU.
pub(super) fn cordon(state: &mut State, arg: &str, to: bool) -> Vec<Effect> {
    if arg.is_empty() {
        return super::actions::cordon(state, Some(to));
    }
    let gpu = match state.find_gpu(arg) {
        Ok(g) => g,
        Err(why) => {
            let verb = if to { "cordon" } else { "uncordon" };
            flash(state, format!("{verb}: {why}; nothing sent"), true);
            return Vec::new();
        }
    };
    let now = state
        .sources
        .get(gpu.0)
        .and_then(|s| s.data.as_deref())
        .and_then(|d| d.nodes.iter().find(|n| n.name == gpu.1))
        .and_then(|n| n.devices.iter().find(|d| d.index == gpu.2))
        .map(|d| (d.cordoned, d.model.clone()));
    if let Some(now) = now {
        ask_cordon(state, gpu, now, to, Some(arg));
    }
    Vec::new()
}

/// `:release ID`: asks to release that claim; alone, the selected one.
pub(super) fn release(state: &mut State, arg: &str) -> Vec<Effect> {
    if arg.is_empty() {
        return super::actions::release(state);
    }
    match state.find_claim(arg) {
        Ok(k) => ask_release(state, k, Some(arg)),
        Err(why) => flash(state, format!("release: {why}; nothing sent"), true),
    }
    Vec::new()
}

/// `:move ID [NODE:INDEX]`: the move picker for that claim, on the GPU named when one is
/// (refused when the picker does not offer it); alone, the selected claim's.
pub(super) fn move_claim(state: &mut State, arg: &str) -> Vec<Effect> {
    let mut words = arg.split_whitespace();
    let Some(id) = words.next() else {
        super::actions::open_move(state);
        return Vec::new();
    };
    let to: Vec<&str> = words.collect();
    let k = match state.find_claim(id) {
        Ok(k) => k,
        Err(why) => {
            flash(state, format!("move: {why}; nothing sent"), true);
            return Vec::new();
        }
    };
    if !open_move_for(state, k) || to.is_empty() {
        return Vec::new();
    }
    let to = to.join(" ");
    let target = match state.find_gpu(&to) {
        Ok(g) => g,
        Err(why) => {
            state.mode = Mode::Normal;
            flash(state, format!("move: {why}; nothing sent"), true);
            return Vec::new();
        }
    };
    let Mode::Move(pick) = &mut state.mode else {
        return Vec::new();
    };
    let row = pick
        .targets
        .iter()
        .position(|r| !r.any && r.source == target.0 && r.node == target.1 && r.index == target.2);
    if let Some(i) = row {
        pick.selected = i;
    } else {
        let text = format!(
            "move: claim {} cannot move to {}:{} (cordoned, or where it is now); \
             nothing sent",
            pick.id, target.1, target.2
        );
        state.mode = Mode::Normal;
        flash(state, text, true);
    }
    Vec::new()
}
