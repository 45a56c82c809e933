//! What will happen, asked in the background: each source's forecast of its waiting
//! claims' starts (`Effect::Forecast`) when its state changed or the last answer is old,
//! one ask in flight per source; and the preview of the action a confirmation dialog or
//! the claim form shows (`Effect::Preview`), asked once when it opens. The answers only
//! change what is drawn; nothing waits for them.

use crate::console::msg::Effect;
use crate::console::state::{DialogPreview, FormStage, Mode, State};
use crate::sources::{Action, Failure};
use crate::wire::forecast::{Forecast, Preview, PreviewAction};

/// The background asks due now: forecasts of the sources whose state changed (or whose
/// answer is old), and the preview of a dialog just opened. The driver calls it after each
/// batch of messages, apart from `update`, whose effects are the operator's own.
pub fn due(state: &mut State) -> Vec<Effect> {
    let (now, refresh) = (state.now, state.refresh_ms);
    let mut effects = Vec::new();
    for (i, slot) in state.sources.iter_mut().enumerate() {
        let Some(snap) = slot.data.as_ref().filter(|_| !slot.rewound) else {
            continue;
        };
        if slot.forecast.due(snap, now, refresh) {
            slot.forecast.in_flight = true;
            slot.forecast.asked_at = Some(now);
            slot.forecast.asked_revision = snap.revision;
            effects.push(Effect::Forecast(i));
        }
    }
    effects.extend(preview_due(state));
    effects
}

/// The preview of the dialog (or the claim form) shown, when it has not been asked yet.
fn preview_due(state: &mut State) -> Option<Effect> {
    let (source, slot, action) = match &mut state.mode {
        Mode::Confirm(c) if c.preview == DialogPreview::Unasked => {
            let action = c
                .starts
                .is_none()
                .then(|| preview_action(&c.action))
                .flatten();
            (c.source, &mut c.preview, action)
        }
        Mode::Form(f) => match f.stage {
            // An edit drops the preview; the next placement preview asks again.
            FormStage::Editing => {
                f.what_if = DialogPreview::Unasked;
                return None;
            }
            FormStage::Planning | FormStage::Preview(_) if f.what_if == DialogPreview::Unasked => {
                // A hand-over's claim follows its releases: the claim alone is not it.
                let action = f.request().ok().filter(|_| f.handover.is_empty()).map(|r| {
                    PreviewAction::Claim {
                        request: Box::new(r),
                    }
                });
                (f.source, &mut f.what_if, action)
            }
            _ => return None,
        },
        _ => return None,
    };
    let Some(action) = action else {
        *slot = DialogPreview::NotOffered;
        return None;
    };
    *slot = DialogPreview::Asking;
    state.dirty = true;
    Some(Effect::Preview { source, action })
}

/// The preview a gpuboard action is asked as; `None` for an engine's action.
fn preview_action(action: &Action) -> Option<PreviewAction> {
    Some(match action {
        Action::Claim { request } => PreviewAction::Claim {
            request: Box::new(request.clone()),
        },
        Action::Release { id } => PreviewAction::Release { claim: *id },
        Action::Move { id, target } => PreviewAction::Move {
            claim: *id,
            node: target.node.clone(),
            devices: target.devices.clone(),
        },
        Action::Cordon {
            node,
            index,
            cordoned: true,
        } => PreviewAction::Cordon {
            node: node.clone(),
            index: *index,
        },
        Action::Cordon { node, index, .. } => PreviewAction::Uncordon {
            node: node.clone(),
            index: *index,
        },
        Action::ResetProject { project } => PreviewAction::Reset {
            project: Some(project.clone()),
        },
        Action::SetShare { project, share } => PreviewAction::Share {
            project: project.clone(),
            share: *share,
        },
        Action::Engine(_) => return None,
    })
}

/// A source's forecast answered: kept for the claim detail and the Claims list; a source
/// that gives none is not asked again.
pub(super) fn forecast_answered(
    state: &mut State,
    source: usize,
    result: Option<Result<Forecast, Failure>>,
) {
    let now = state.now;
    let Some(slot) = state.sources.get_mut(source) else {
        return;
    };
    let f = &mut slot.forecast;
    f.in_flight = false;
    f.took_ms = f.asked_at.map_or(0, |at| now.millis_since(at));
    match result {
        None => f.none = true,
        Some(Ok(forecast)) => {
            f.error = None;
            f.last = Some(forecast);
        }
        // An endpoint older than the forecast has no such route: it gives none.
        Some(Err(Failure::Http { status: 404, .. })) => {
            f.none = true;
            f.last = None;
        }
        Some(Err(e)) => f.error = Some(e.to_string()),
    }
    state.dirty = true;
}

/// A source's preview answered: shown by the dialog (or form) still asking it.
pub(super) fn previewed(
    state: &mut State,
    source: usize,
    action: &PreviewAction,
    result: Option<Box<Result<Preview, Failure>>>,
) {
    let slot = match &mut state.mode {
        Mode::Confirm(c)
            if c.source == source
                && c.preview == DialogPreview::Asking
                && preview_action(&c.action).as_ref() == Some(action) =>
        {
            &mut c.preview
        }
        Mode::Form(f)
            if f.source == source
                && f.what_if == DialogPreview::Asking
                && f.request().ok().is_some_and(|r| {
                    *action
                        == PreviewAction::Claim {
                            request: Box::new(r),
                        }
                }) =>
        {
            &mut f.what_if
        }
        _ => return,
    };
    *slot = match result.map(|r| *r) {
        Some(Ok(p)) => DialogPreview::Shown(Box::new(p)),
        None => DialogPreview::Unavailable(
            "no preview: this source cannot say what the action would do".to_string(),
        ),
        Some(Err(Failure::Http { status: 404, .. })) => DialogPreview::Unavailable(
            "no preview: this endpoint is older than previews (POST /v1/preview)".to_string(),
        ),
        Some(Err(e)) => DialogPreview::Unavailable(format!("no preview: {e}")),
    };
    state.dirty = true;
}
