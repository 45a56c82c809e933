//! A claim from the claim form whose answer did not come (or came "in flight"), as the
//! console asks and says it (the protocol is `fleet`'s): every
//! claim sent across sources carries an attempt label and an idempotency key
//! (`AttemptId::key`, the source's position as the send's number: one attempt sends to
//! each source once), and the silent source is sent the same request with the same key
//! again (`Effect::Recheck`, for up to `placement::RESOLVE_WITHIN`) before the next source
//! is tried (`placement::decide_attempt`). The source runs a key's request once and
//! answers every later send with what it did, so asking again never books twice and a
//! claim still being committed is "in flight", never "not there". Placed: that is the
//! claim. Refused: the next. Still silent: the next, and once the claim landed (or
//! nowhere), the silent source is sent it once more: a claim it answers with is released
//! (or, when nothing else took it, kept as the answer); silent to the end, it is named
//! with the label and when its lease ends. A move across sources asks its target the same
//! way (a claim it answers with is the move's new claim; a phantom left by a silent target
//! is released when it comes back). Sent again, a claim keeps who waits for it (the form,
//! or the move's flow id); a silent source asked once more after landing is a flow of its
//! own (`flows::Flow::Lost`).

use std::time::Duration;

use crate::fleet::{self, ClaimAnswer, Lost, Reply, Settled};
use crate::placement::{
    AttemptAnswer, AttemptId, AttemptRecheck, AttemptStep, RECHECK_WITHIN, RESOLVE_WITHIN,
    decide_attempt,
};
use crate::request::ClaimRequest;
use crate::snapshot::{ClaimState, ClaimView};
use crate::sources::{Action, Failure, Outcome};

use super::{act, flash};
use crate::console::flows::Flow;
use crate::console::msg::{Asker, Effect};
use crate::console::state::{ClaimForm, Mode, State};

impl ClaimAnswer for Result<Outcome, Failure> {
    fn reply(&self) -> Reply<'_> {
        match self {
            Ok(Outcome::Claimed(view)) => Reply::Claim(view),
            Ok(_) => Reply::Other,
            Err(e) => failure_reply(e),
        }
    }
}

/// What a failure answers, in the protocol's terms.
fn failure_reply(e: &Failure) -> Reply<'static> {
    match e {
        Failure::Refused(_) => Reply::Refused,
        Failure::InFlight(_) => Reply::InFlight,
        Failure::Timeout(_) | Failure::Unreachable { sent: true, .. } => Reply::NoAnswer,
        Failure::Unreachable { sent: false, .. } => Reply::NotSent,
        _ => Reply::Failed,
    }
}

/// Whether a failure leaves it open whether the source placed the claim: no answer,
/// unless surely nothing was sent.
pub(super) fn no_answer(e: &Failure) -> bool {
    failure_reply(e).no_answer()
}

fn name(state: &State, source: usize) -> String {
    state
        .sources
        .get(source)
        .map_or_else(|| "?".to_string(), |s| s.name.clone())
}

/// The idempotency key of an attempt's send to `source`.
pub(super) fn key(attempt: &AttemptId, source: usize) -> String {
    attempt.key(u32::try_from(source).unwrap_or(u32::MAX))
}

/// The same request sent again with the same key to the same source, for up to `within`,
/// for `asker`.
pub(super) fn resend(lost: &Lost, within: Duration, asker: Asker) -> Effect {
    Effect::Recheck {
        source: lost.endpoint,
        attempt: lost.attempt.as_str().to_string(),
        request: lost.request.clone(),
        key: lost.key.clone(),
        move_id: lost.move_id.clone(),
        asker,
        within,
    }
}

/// The form's claim got no answer from `source`: send it again with its key (the form
/// waits).
pub(super) fn ask_again(
    state: &mut State,
    mut form: ClaimForm,
    source: usize,
    e: &Failure,
    request: ClaimRequest,
) -> Vec<Effect> {
    let Some(attempt) = form.attempt.clone() else {
        state.mode = Mode::Form(Box::new(form));
        return Vec::new();
    };
    let here = name(state, source);
    flash(
        state,
        format!(
            "{here} did not answer the claim ({e}); sending it again with the same key to learn what it did (label {})",
            attempt.label()
        ),
        false,
    );
    let lost = Lost {
        endpoint: source,
        key: key(&attempt, source),
        attempt,
        sent: state.now,
        request,
        move_id: None,
        error: e.to_string(),
        adopt: false,
    };
    let effect = resend(&lost, RESOLVE_WITHIN, Asker::Form);
    form.rechecking = Some(lost);
    state.mode = Mode::Form(Box::new(form));
    vec![effect]
}

/// The lost claim a request sent to `source` stands for, when it carries an attempt label.
pub(super) fn of_request(
    state: &State,
    source: usize,
    request: &ClaimRequest,
    e: &Failure,
    move_id: &str,
) -> Option<Lost> {
    let attempt = AttemptId::of_labels(&request.labels)?;
    Some(Lost {
        endpoint: source,
        key: key(&attempt, source),
        attempt,
        sent: state.now,
        request: request.clone(),
        move_id: Some(move_id.to_string()),
        error: e.to_string(),
        adopt: false,
    })
}

/// What sending again found: the claim the source placed (or queued), its refusal, or no
/// definite answer in time (silent, or still in flight).
pub(super) fn found(result: Result<Outcome, Failure>) -> (AttemptRecheck, Option<ClaimView>) {
    let what = result.reply().recheck();
    match result {
        Ok(Outcome::Claimed(view)) => (what, Some(*view)),
        _ => (what, None),
    }
}

/// The form's claim sent again: its decision, when the form still waits on that source
/// and attempt (a flow's goes to `flows::rechecked`).
pub(super) fn for_the_form(
    state: &mut State,
    source: usize,
    attempt: &str,
    result: Result<Outcome, Failure>,
) -> Vec<Effect> {
    let Mode::Form(f) = &state.mode else {
        return Vec::new();
    };
    let Some(lost) = f
        .rechecking
        .as_ref()
        .filter(|l| l.endpoint == source && l.attempt.as_str() == attempt)
    else {
        return Vec::new();
    };
    let (lost, mut form) = (lost.clone(), (**f).clone());
    form.rechecking = None;
    let (what, view) = found(result);
    for_form(
        state,
        form,
        lost,
        decide_attempt(AttemptAnswer::NoAnswer, Some(what)),
        view,
    )
}

/// The form's decision after asking again.
fn for_form(
    state: &mut State,
    mut form: ClaimForm,
    lost: Lost,
    step: AttemptStep,
    view: Option<ClaimView>,
) -> Vec<Effect> {
    let here = name(state, lost.endpoint);
    let label = lost.attempt.label();
    match (step, view) {
        (AttemptStep::Adopt, Some(view)) => {
            let text = format!(
                "{here} placed it; its answer was lost ({}): sent again with the same key, it answered {here}/{} (label {label})",
                lost.error, view.id
            );
            state.mode = Mode::Normal;
            flash(state, text, false);
            let mut out = refetch(state, lost.endpoint);
            out.extend(settle(state, form.suspects, false));
            out
        }
        (AttemptStep::TryNextSuspect, _) => {
            form.refused.push(format!(
                "{here}: {}; still no answer when sent again with the same key",
                lost.error
            ));
            form.suspects.push(lost);
            next_or_fail(state, form)
        }
        _ => {
            form.refused.push(format!(
                "{here}: {}; sent again with the same key, it refused the claim labelled {label}",
                lost.error
            ));
            next_or_fail(state, form)
        }
    }
}

/// The next source of the preview, or (none left) the form's failure, with any silent
/// source asked once more.
fn next_or_fail(state: &mut State, mut form: ClaimForm) -> Vec<Effect> {
    let request = match form.request() {
        Ok(mut r) => {
            if let Some(a) = &form.attempt {
                a.put_on(&mut r.labels);
            }
            r
        }
        Err(e) => {
            form.stage = crate::console::state::FormStage::Editing;
            form.error = Some(e.to_string());
            state.mode = Mode::Form(Box::new(form));
            return Vec::new();
        }
    };
    if !form.next.is_empty() {
        let next = form.next.remove(0);
        flash(state, format!("trying {}", name(state, next)), false);
        form.source = next;
        let sent = act(state, next, Action::Claim { request }, Asker::Form);
        if sent.is_empty() {
            form.stage = crate::console::state::FormStage::Editing;
            form.error = state.flash.as_ref().map(|f| f.text.clone());
        }
        state.mode = Mode::Form(Box::new(form));
        return sent;
    }
    let text = format!(
        "claim refused by {} sources, nothing claimed: {}",
        form.refused.len(),
        form.refused.join(" · ")
    );
    let suspects = std::mem::take(&mut form.suspects);
    form.stage = crate::console::state::FormStage::Editing;
    form.error = Some(text.clone());
    form.refused.clear();
    state.mode = Mode::Form(Box::new(form));
    flash(state, text, true);
    settle(state, suspects, true)
}

/// The claim landed (or, `nowhere`, did not): each silent source asked once more, each
/// a flow of its own.
pub(super) fn settle(state: &mut State, suspects: Vec<Lost>, nowhere: bool) -> Vec<Effect> {
    let mut out = Vec::new();
    for s in fleet::settle(suspects, !nowhere) {
        state.push_log(format!(
            "sending {} the claim labelled {} again with the same key, to learn what it did",
            name(state, s.endpoint),
            s.attempt.label()
        ));
        let flow = state.flows.new_id();
        out.push(resend(&s, RECHECK_WITHIN, Asker::Flow { flow, step: 0 }));
        state.flows.put(flow, Flow::Lost(s));
    }
    out
}

/// A silent source asked again once the claim landed elsewhere (or nowhere): its flow
/// ends here.
pub(super) fn after_landing(
    state: &mut State,
    lost: &Lost,
    result: Result<Outcome, Failure>,
) -> Vec<Effect> {
    let (what, view) = found(result);
    let here = name(state, lost.endpoint);
    let label = lost.attempt.label();
    match (lost.settled(what), view) {
        (Settled::Adopt, Some(view)) => {
            let text = format!(
                "{here} placed it; its answer was lost ({}): it is {here}/{} (label {label}){}",
                lost.error,
                view.id,
                if view.state == ClaimState::Pending {
                    ", pending"
                } else {
                    ""
                }
            );
            flash(state, text, false);
            refetch(state, lost.endpoint)
        }
        (Settled::Release, Some(view)) => {
            let text = format!(
                "{here} came back: it had placed the claim too, as {here}/{} (label {label}), though its answer was lost; releasing it",
                view.id
            );
            flash(state, text, false);
            act(
                state,
                lost.endpoint,
                Action::Release { id: view.id },
                Asker::Operator,
            )
        }
        (Settled::Phantom, _) => {
            let until = lost.until();
            let text = format!(
                "{here} may hold a phantom claim: its answer was lost ({}) and it did not answer again; \
                 if it placed it, that claim (label {label}) holds GPUs {until}: look for the label in {here}'s claims and release it",
                lost.error
            );
            flash(state, text, true);
            Vec::new()
        }
        _ => {
            state.push_log(format!(
                "{here} answered again that it refused the claim labelled {label}: nothing placed there"
            ));
            Vec::new()
        }
    }
}

/// A refreshed view of source `i`, unless one is already on its way.
fn refetch(state: &mut State, i: usize) -> Vec<Effect> {
    match state.sources.get_mut(i) {
        Some(s) if !s.in_flight => {
            s.in_flight = true;
            vec![Effect::Fetch(i)]
        }
        _ => Vec::new(),
    }
}
