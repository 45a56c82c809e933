//! The claim form: which source it goes to (the best of every acting source, by the
//! placement preview across them, then the next on a refusal or no answer), and its keys
//! (edit, choose, preview, claim).

use ratatui::crossterm::event::{KeyCode, KeyEvent};

use crate::request::ClaimRequest;
use crate::sources::{Action, Failure, Outcome};

use super::line::edit_line;

use super::{act, flash, lost, ranking};
use crate::console::keymap::{Context, KeyAction};
use crate::console::msg::{Asker, Effect};
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
/// and no one source is shown alone: the sources that could take it, best first (see
/// `ranking`), and the preview's words. The source re-checks when it is sent; if it
/// refuses or does not answer, the next is tried. `None` leaves the preview to the one
/// source's own planner.
fn fleet_preview(
    state: &State,
    request: &ClaimRequest,
) -> Option<Result<(Vec<usize>, String), String>> {
    if state.source_filter.is_some() {
        return None;
    }
    let acting = state
        .sources
        .iter()
        .filter(|s| s.can_act && s.data.is_some())
        .count();
    if acting < 2 {
        return None;
    }
    Some(ranking::rank(state, request, None).map(|r| {
        let name = |i: usize| state.sources[i].name.as_str();
        let mut text = format!(
            "{} {} (best of {} that fit among {} sources, {})",
            r.order.first().map_or("?", |i| name(*i)),
            r.best,
            r.fits,
            r.among,
            r.policy
        );
        if r.order.len() > 1 {
            let rest: Vec<&str> = r.order[1..].iter().map(|i| name(*i)).collect();
            text = format!("{text}; if it refuses: {}", rest.join(", then "));
        }
        (r.order, text)
    }))
}

/// A claim result while the form waits for it: on a refusal (409) or no answer, the next
/// source of the preview is tried, each attempt said on the status line and in Events;
/// once placed, or refused by the last, the answer names the earlier refusals. `None`
/// when the result is not the form's, or nothing was refused on the way (the plain
/// handling then says it).
pub(super) fn claimed(
    state: &mut State,
    source: usize,
    action: &Action,
    result: &Result<Outcome, Failure>,
) -> Option<Vec<Effect>> {
    let Mode::Form(f) = &state.mode else {
        return None;
    };
    if !matches!(action, Action::Claim { .. })
        || f.source != source
        || f.stage != FormStage::Submitting
    {
        return None;
    }
    let mut form = (**f).clone();
    let name = |i: usize| {
        state
            .sources
            .get(i)
            .map_or_else(|| "?".to_string(), |s| s.name.clone())
    };
    let here = name(source);
    match result {
        // No answer: it may have placed the claim; ask it before trying the next.
        Err(e) if lost::no_answer(e) && form.attempt.is_some() => {
            let request = match action {
                Action::Claim { request } => request.clone(),
                _ => return None,
            };
            Some(lost::ask_again(state, form, source, e, request))
        }
        Err(e) if ranking::try_next(e) && !form.next.is_empty() => {
            let next = form.next.remove(0);
            form.refused.push(format!("{here}: {e}"));
            flash(
                state,
                format!("{here} refused the claim ({e}); trying {}", name(next)),
                false,
            );
            form.source = next;
            let sent = act(state, next, action.clone(), Asker::Form);
            if sent.is_empty() {
                form.stage = FormStage::Editing;
                form.error = state.flash.as_ref().map(|f| f.text.clone());
            }
            state.mode = Mode::Form(Box::new(form));
            Some(sent)
        }
        _ if form.refused.is_empty() => None,
        Ok(outcome) => {
            let text = format!(
                "{here}: {} (after {})",
                outcome.message(),
                form.refused.join(" · ")
            );
            state.mode = Mode::Normal;
            flash(state, text, false);
            let mut out = Vec::new();
            if let Some(s) = state.sources.get_mut(source)
                && !s.in_flight
            {
                s.in_flight = true;
                out.push(Effect::Fetch(source));
            }
            out.extend(lost::settle(state, form.suspects, false));
            Some(out)
        }
        Err(e) => {
            form.refused.push(format!("{here}: {e}"));
            let text = format!(
                "claim refused by {} sources, nothing claimed: {}",
                form.refused.len(),
                form.refused.join(" · ")
            );
            let suspects = std::mem::take(&mut form.suspects);
            form.stage = FormStage::Editing;
            form.error = Some(text.clone());
            form.refused.clear();
            state.mode = Mode::Form(Box::new(form));
            flash(state, text, true);
            Some(lost::settle(state, suspects, true))
        }
    }
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
    state.mode = Mode::Form(Box::new(ClaimForm::for_holder(
        src,
        state.operator.as_deref(),
    )));
}

/// Keys in the claim form: move between fields, choose, edit, preview, then claim.
// Left whole for now: others are reworking the claim form with the fleet protocol; one
// arm per key of the form.
#[allow(clippy::too_many_lines)]
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
                    Ok(mut r) => {
                        // Across sources, one attempt label: a lost answer can be found.
                        if let Some(a) = &form.attempt {
                            a.put_on(&mut r.labels);
                        }
                        r
                    }
                    Err(e) => {
                        form.stage = FormStage::Editing;
                        form.error = Some(e.to_string());
                        return effects;
                    }
                };
                let src = form.source;
                form.refused.clear();
                form.suspects.clear();
                if !form.handover.is_empty() {
                    return super::handover::with_form_claim(state, form, request);
                }
                effects = act(state, src, Action::Claim { request }, Asker::Form);
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
                        Some(Ok((order, text))) => {
                            form.attempt = Some(crate::fleet::new_attempt(state.now));
                            form.source = order.first().copied().unwrap_or(form.source);
                            form.next = order.into_iter().skip(1).collect();
                            form.stage = FormStage::Preview(text);
                        }
                        Some(Err(why)) => {
                            form.stage = FormStage::Editing;
                            form.error = Some(why);
                        }
                        None => {
                            form.attempt = None;
                            form.next.clear();
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
