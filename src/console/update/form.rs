//! The claim form: which source it goes to (the best of every acting source, by the
//! placement preview across them), and its keys (edit, choose, preview, claim).

use ratatui::crossterm::event::{KeyCode, KeyEvent};

use crate::placement::{Fleet, Policy, rank_hosts};
use crate::request::ClaimRequest;
use crate::sources::{Action, fleet_of_snapshot};

use super::keys::edit_line;
use super::{act, flash};
use crate::console::keymap::{Context, KeyAction};
use crate::console::msg::Effect;
use crate::console::state::{ClaimForm, FormField, FormKind, FormStage, Mode, State, View};

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

/// The placement preview across every acting source with data, when there are several
/// and no one source is shown alone: each source's last snapshot is planned on, the
/// sources that could take it are ranked by the placement policy across hosts (spread
/// when every source spreads, else binpack), and the best is where the claim goes. The
/// source re-checks when it is sent. `None` leaves the preview to the one source's own
/// planner.
fn fleet_preview(state: &State, request: &ClaimRequest) -> Option<Result<(usize, String), String>> {
    if state.source_filter.is_some() {
        return None;
    }
    let mut fleets = Vec::new();
    let mut of_fleet = Vec::new();
    let mut spread_all = true;
    for (i, s) in state.sources.iter().enumerate() {
        if !s.can_act {
            continue;
        }
        let Some(snap) = &s.data else { continue };
        if let Ok(f) = fleet_of_snapshot(snap) {
            spread_all &= f.policy() == Policy::Spread;
            fleets.push(f);
            of_fleet.push(i);
        }
    }
    if fleets.len() < 2 {
        return None;
    }
    let policy = if spread_all {
        Policy::Spread
    } else {
        Policy::Binpack
    };
    let refs: Vec<&Fleet> = fleets.iter().collect();
    let ranking = rank_hosts(&refs, request, policy);
    let name = |h: usize| state.sources[of_fleet[h]].name.as_str();
    let Some(best) = ranking.fits.first() else {
        let lines: Vec<String> = ranking
            .refused
            .iter()
            .map(|(h, no)| format!("{}: {}", name(*h), no.summary()))
            .collect();
        return Some(Err(format!(
            "fits on none of the {} sources: {}",
            fleets.len(),
            lines.join(" · ")
        )));
    };
    let policy = match policy {
        Policy::Binpack => "binpack",
        Policy::Spread => "spread",
    };
    Some(Ok((
        of_fleet[best.host],
        format!(
            "{} {} (best of {} that fit among {} sources, {policy})",
            name(best.host),
            best.allocation,
            ranking.fits.len(),
            fleets.len()
        ),
    )))
}

/// Opens the claim form on the claim source, unless that source is read-only.
pub(super) fn open_form(state: &mut State) {
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

/// Keys in the claim form: move between fields, choose, edit, preview, then claim.
pub(super) fn form_key(state: &mut State, mut form: ClaimForm, ev: KeyEvent) -> Vec<Effect> {
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
                if !form.handover.is_empty() {
                    return super::handover::with_form_claim(state, form, request);
                }
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
                    match fleet_preview(state, &request) {
                        Some(Ok((source, text))) => {
                            form.source = source;
                            form.stage = FormStage::Preview(text);
                        }
                        Some(Err(why)) => {
                            form.stage = FormStage::Editing;
                            form.error = Some(why);
                        }
                        None => {
                            form.stage = FormStage::Planning;
                            effects.push(Effect::Plan {
                                source: form.source,
                                request,
                            });
                        }
                    }
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
