//! A hand-over in one confirmed step: `:handover STEP then STEP ...` (or `:act ... then
//! ...`, or `H` on a claim of an engine, which writes the line for the operator to finish)
//! composes engine actions and a claim on an endpoint; one confirmation lists every step;
//! once confirmed the steps go one at a time through the driver's executor (its
//! read-only refusal and audit line per step), each answer is logged to the Events view
//! and shown in the result pane, and the first failure stops the rest: a GPU freed by an
//! earlier step is never left unclaimed without the pane and the status line saying so.
//!
//! A step is `[SOURCE] VERB TARGET` (an engine action: `cluster cancel 11`) or
//! `claim [SOURCE] FLAGS` with `gpuboard claim`'s flags (`claim lab --gpus 2 --node
//! gpunode --devices 0,1 --project p`); a last `claim [SOURCE]` with no flags opens the
//! claim form, whose submission opens the one confirmation.

use std::fmt::Write as _;

use ratatui::crossterm::event::KeyEvent;

use crate::snapshot::ClaimState;
use crate::sources::actions::{EngineAction, EngineVerb, offers};
use crate::sources::handover::StepResult;
use crate::sources::{Action, Failure, Outcome};
use crate::wire::ClaimDraft;

use super::{act, flash, refusal};
use crate::console::flows::{Flow, FlowId, HandoverRun, Plan, StepPlan};
use crate::console::keymap::{Context, KeyAction};
use crate::console::msg::{Asker, Effect};
use crate::console::state::{ClaimForm, Confirm, FormStage, Mode, State, View};
use crate::request::ClaimRequest;

/// The word between steps.
const THEN: &str = "then";

/// `:handover STEP then STEP ...`; alone, it reopens the last hand-over's result pane.
pub(super) fn command(state: &mut State, arg: &str) -> Vec<Effect> {
    if arg.trim().is_empty() {
        if state.flows.handover().is_some() {
            state.mode = Mode::Handover;
        } else {
            flash(
                state,
                "usage: :handover [SOURCE] VERB TARGET then ... then claim [SOURCE] --gpus N \
                 --node NODE --devices 0,1 --project P",
                true,
            );
        }
        return Vec::new();
    }
    if under_way(state) {
        return Vec::new();
    }
    match parse(state, arg) {
        Ok((steps, None)) => ask(state, steps, None),
        Ok((before, Some(source))) => open_form(state, before, source),
        Err(why) => flash(state, format!("hand-over: {why}; nothing was sent"), true),
    }
    Vec::new()
}

/// A last step `claim [SOURCE]` with no flags: the claim form on that source, the steps
/// before it kept in the form; submitting it opens the one confirmation.
fn open_form(state: &mut State, before: Vec<StepPlan>, source: usize) {
    if before.is_empty() {
        flash(
            state,
            "hand-over: give a step before the claim (c alone makes a plain claim); \
             nothing was sent",
            true,
        );
        return;
    }
    if refused(state, &before) {
        return;
    }
    let n = before.len() + 1;
    let name = state.sources.get(source).map_or("?", |s| s.name.as_str());
    let text = format!(
        "hand-over: the claim on {name} is step {n} of {n}; Enter previews it, Enter again \
         lists every step to confirm"
    );
    let mut form = ClaimForm::for_holder(source, state.operator.as_deref());
    form.handover = before;
    state.mode = Mode::Form(Box::new(form));
    flash(state, text, false);
}

/// The claim form of a hand-over was submitted: the one confirmation of its steps and the
/// claim (Cancel goes back to the form).
pub(super) fn with_form_claim(
    state: &mut State,
    mut form: ClaimForm,
    request: ClaimRequest,
) -> Vec<Effect> {
    let mut steps = form.handover.clone();
    steps.push(StepPlan {
        source: form.source,
        action: Action::Claim { request },
    });
    form.stage = FormStage::Editing;
    let back = Mode::Form(Box::new(form));
    state.mode = back.clone();
    ask(state, steps, Some(back));
    Vec::new()
}

/// Refuses a new hand-over while one is under way: a second run would leave the first
/// one's later steps unsent.
fn under_way(state: &mut State) -> bool {
    let Some((i, n)) = state
        .flows
        .handover()
        .and_then(|(_, r)| r.current().map(|i| (i, r.steps.len())))
    else {
        return false;
    };
    flash(
        state,
        format!(
            "a hand-over is under way (step {} of {n}): wait for it to end \
             (:handover shows it); nothing was sent",
            i + 1
        ),
        true,
    );
    true
}

/// `H`: writes the hand-over line for the selected claim of an engine on the command line
/// (its usual action, then a claim of its GPUs on the one endpoint that takes claims), for
/// the operator to finish (the project) and run.
pub(super) fn key(state: &mut State) -> Vec<Effect> {
    let picked = (state.view == View::Claims)
        .then(|| state.selected_claim())
        .flatten()
        .and_then(|k| state.claim(k).map(|(s, c)| (s.clone(), c.clone())));
    let Some((slot, claim)) = picked.filter(|(s, _)| !offers(s.kind).is_empty()) else {
        flash(
            state,
            "select a claim of a Slurm, BOINC or Ray source in the Claims view first, \
             or type :handover STEP then STEP",
            true,
        );
        return Vec::new();
    };
    let verb = super::engine::usual_verb(slot.kind, &claim);
    let target = super::engine::target_of(verb, &claim);
    let mut line = format!("handover {} {verb} {target} {THEN} ", slot.name);
    let endpoints: Vec<&str> = state
        .sources
        .iter()
        .filter(|s| s.can_act)
        .map(|s| s.name.as_str())
        .collect();
    if claim.state == ClaimState::Placed {
        line.push_str("claim ");
        if let [one] = endpoints[..] {
            line.push_str(one);
            line.push(' ');
        }
        if let Some(node) = &claim.node {
            let devices: Vec<String> = claim.shares.iter().map(|s| s.device.to_string()).collect();
            let _ = write!(
                line,
                "--gpus {} --node {node} --devices {} ",
                devices.len().max(1),
                devices.join(",")
            );
        }
        line.push_str("--project ");
    }
    state.mode = Mode::Command(line);
    Vec::new()
}

/// One step as typed: an action, or a claim to fill in the claim form (on that source).
// Parsed once per command line; boxing the plan would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Step {
    Plan(StepPlan),
    Form(usize),
}

/// The steps `text` names, checked before anything is sent, and the source of a last
/// claim left to the claim form.
fn parse(state: &State, text: &str) -> Result<(Vec<StepPlan>, Option<usize>), String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let parts: Vec<&[&str]> = words.split(|w| *w == THEN).collect();
    let mut steps = Vec::new();
    for (n, part) in parts.iter().enumerate() {
        match parse_step(state, part).map_err(|e| format!("step {}: {e}", n + 1))? {
            Step::Plan(p) => steps.push(p),
            Step::Form(source) if n + 1 == parts.len() => return Ok((steps, Some(source))),
            Step::Form(_) => {
                return Err(format!(
                    "step {}: a claim without flags (filled in the form) must be the last step",
                    n + 1
                ));
            }
        }
    }
    Ok((steps, None))
}

fn parse_step(state: &State, words: &[&str]) -> Result<Step, String> {
    let named = words
        .first()
        .and_then(|w| state.sources.iter().position(|s| s.name == *w));
    let (source, rest) = match named {
        Some(i) => (Some(i), &words[1..]),
        None => (None, words),
    };
    match rest {
        [] => Err(format!(
            "give VERB TARGET or claim FLAGS after `{}`",
            words.join(" ")
        )),
        ["claim", tail @ ..] => {
            // `claim lab --gpus 1` as well as `lab claim --gpus 1`.
            match tail
                .first()
                .and_then(|w| state.sources.iter().position(|s| s.name == *w))
            {
                Some(i) if source.is_none() => claim_step(state, Some(i), &tail[1..]),
                _ => claim_step(state, source, tail),
            }
        }
        [verb, target] => engine_step(state, source, verb, target).map(Step::Plan),
        _ => Err(format!(
            "`{}`: an engine action is VERB TARGET (one target), such as `cancel 11`",
            rest.join(" ")
        )),
    }
}

/// An engine action; without a source named, the only shown source whose kind has it.
fn engine_step(
    state: &State,
    source: Option<usize>,
    verb: &str,
    target: &str,
) -> Result<StepPlan, String> {
    let source = if let Some(i) = source {
        i
    } else {
        let fits: Vec<usize> = state
            .shown_sources()
            .filter(|(_, s)| EngineVerb::parse(s.kind, verb).is_ok())
            .map(|(i, _)| i)
            .collect();
        match fits[..] {
            [one] => one,
            [] => return Err(format!("no source shown has the engine action `{verb}`")),
            _ => {
                return Err(format!(
                    "{} sources have `{verb}`: name one (SOURCE {verb} {target})",
                    fits.len()
                ));
            }
        }
    };
    let slot = &state.sources[source];
    let v = EngineVerb::parse(slot.kind, verb).map_err(|e| format!("{}: {e}", slot.name))?;
    if let Some(why) = v.unavailable() {
        return Err(format!("{}: {v} is not offered: {why}", slot.name));
    }
    let action = EngineAction::new(v, target).map_err(|e| e.to_string())?;
    Ok(StepPlan {
        source,
        action: Action::Engine(action),
    })
}

/// A claim with `gpuboard claim`'s flags (none: filled in the claim form); without a
/// source named, the only source that takes claims.
fn claim_step(state: &State, source: Option<usize>, flags: &[&str]) -> Result<Step, String> {
    let source = match source {
        Some(i) if state.sources[i].can_act => i,
        Some(i) => {
            let s = &state.sources[i];
            return Err(format!(
                "{} is a {} source: it takes no claims; claim on a gpuboard endpoint",
                s.name, s.kind
            ));
        }
        None => {
            let acting: Vec<usize> = (0..state.sources.len())
                .filter(|i| state.sources[*i].can_act)
                .collect();
            match acting[..] {
                [one] => one,
                [] => return Err("no source takes claims (no gpuboard endpoint)".to_string()),
                _ => {
                    let names: Vec<&str> = acting
                        .iter()
                        .map(|i| state.sources[*i].name.as_str())
                        .collect();
                    return Err(format!(
                        "name the endpoint to claim on: claim {} ...",
                        names.join("|")
                    ));
                }
            }
        }
    };
    if flags.is_empty() {
        return Ok(Step::Form(source));
    }
    let mut draft = ClaimDraft {
        holder: state.operator.clone(),
        ..ClaimDraft::default()
    };
    let mut rest = flags.iter();
    while let Some(flag) = rest.next() {
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some((*v).to_string())),
            None => (*flag, None),
        };
        if name == "--wait" {
            draft.wait = true;
            continue;
        }
        let mut value = || {
            inline
                .clone()
                .or_else(|| rest.next().map(|v| (*v).to_string()))
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match name {
            "--memory" => draft.memory = Some(value()?),
            "--fraction" => draft.fraction = Some(value()?),
            "--gpus" => draft.gpus = Some(value()?),
            "--cpus" => draft.cpus = Some(value()?),
            "--project" => draft.project = Some(value()?),
            "--holder" => draft.holder = Some(value()?),
            "--ttl" => draft.ttl = Some(value()?),
            "--node" => draft.node = Some(value()?),
            "--accelerator" => draft.accelerator_type = Some(value()?),
            "--devices" => {
                let text = value()?;
                let list = text
                    .split(',')
                    .map(|d| d.trim().parse::<u32>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| {
                        format!("--devices is device indexes, such as 0,1 (not `{text}`)")
                    })?;
                draft.devices = Some(list);
            }
            other => {
                return Err(format!(
                    "claim: unknown flag `{other}`; flags: --gpus --memory --fraction --cpus \
                     --project --holder --ttl --node --devices --accelerator --wait"
                ));
            }
        }
    }
    let request = draft
        .to_request(serde_json::Map::new())
        .map_err(|e| format!("claim: {e}"))?;
    Ok(Step::Plan(StepPlan {
        source,
        action: Action::Claim { request },
    }))
}

/// Whether a step would be refused before sending (read-only, a source that cannot act):
/// says so, naming the first, and nothing of the hand-over is sent.
fn refused(state: &mut State, steps: &[StepPlan]) -> bool {
    let Some(why) = steps
        .iter()
        .find_map(|s| refusal(state, s.source, &s.action))
    else {
        return false;
    };
    flash(
        state,
        format!("hand-over refused, nothing was sent: {why}"),
        true,
    );
    true
}

/// Opens the one confirmation listing every step (Cancel focused; the job ids of Slurm
/// cancels typed out), unless the console is read-only or a step's source cannot act.
fn ask(state: &mut State, steps: Vec<StepPlan>, back: Option<Mode>) {
    let Some(first) = steps.first().cloned() else {
        return;
    };
    if under_way(state) {
        return;
    }
    if refused(state, &steps) {
        return;
    }
    let name = |i: usize| state.sources.get(i).map_or("?", |s| s.name.as_str());
    let mut body: Vec<String> = steps
        .iter()
        .enumerate()
        .map(|(n, s)| {
            let effect = match &s.action {
                Action::Engine(a) => format!(" ({})", a.verb.effect().trim_end_matches('.')),
                _ => String::new(),
            };
            format!(
                "{}. {}: {} {}{effect}",
                n + 1,
                name(s.source),
                s.action.verb(),
                s.action.target()
            )
        })
        .collect();
    body.push("They run in this order; the first failure stops the rest.".to_string());
    let typed: Vec<String> = steps
        .iter()
        .filter_map(|s| match &s.action {
            Action::Engine(a) if a.verb == EngineVerb::SlurmCancel => Some(a.target.clone()),
            _ => None,
        })
        .collect();
    let title = format!("Hand-over: {} steps", steps.len());
    let mut confirm = Confirm::new(first.source, first.action, title, body);
    confirm.type_to_confirm = (!typed.is_empty()).then(|| typed.join(" "));
    confirm.starts = Some(Box::new(Plan::Handover(HandoverRun::new(steps))));
    confirm.back = back.map(Box::new);
    super::ask(state, confirm);
}

/// OK in the confirmation: the run starts with its first step, its pane open (a flow,
/// which replaces the last hand-over's pane).
pub(super) fn start(state: &mut State, run: HandoverRun) -> Vec<Effect> {
    let n = run.steps.len();
    state.push_log(format!("hand-over confirmed: {n} steps"));
    let flow = state.flows.start(Flow::Handover(run));
    state.mode = Mode::Handover;
    send_current(state, flow)
}

/// Sends the step under way of hand-over `flow`, or records its refusal when the console
/// cannot send it.
fn send_current(state: &mut State, flow: FlowId) -> Vec<Effect> {
    let Some(Flow::Handover(run)) = state.flows.get(flow) else {
        return Vec::new();
    };
    let Some((i, step)) = run.current().map(|i| (i, run.steps[i].clone())) else {
        return Vec::new();
    };
    if let Some(why) = refusal(state, step.source, &step.action) {
        let Some(Flow::Handover(run)) = state.flows.take(flow) else {
            return Vec::new();
        };
        return recorded(state, flow, run, i, Err(Failure::ReadOnly(why)));
    }
    act(
        state,
        step.source,
        step.action,
        Asker::Flow { flow, step: i },
    )
}

/// The answer to step `step` of hand-over `flow` (taken out of `State::flows`): recorded,
/// logged, and the next step sent (or, after a failure, the rest marked not run). An
/// answer for a step not waiting is only logged.
pub(super) fn answered(
    state: &mut State,
    flow: FlowId,
    run: HandoverRun,
    step: usize,
    result: Result<Outcome, Failure>,
) -> Vec<Effect> {
    if run.current() != Some(step) {
        state.flows.put(flow, Flow::Handover(run));
        state.push_log(format!(
            "hand-over ({flow}) step {}: an answer when it waits for none: nothing done",
            step + 1
        ));
        return Vec::new();
    }
    recorded(state, flow, run, step, result)
}

fn recorded(
    state: &mut State,
    flow: FlowId,
    mut run: HandoverRun,
    i: usize,
    result: Result<Outcome, Failure>,
) -> Vec<Effect> {
    let ok = result.is_ok();
    run.record(
        i,
        match result {
            Ok(o) => StepResult::Done(o),
            Err(e) => StepResult::Failed(e),
        },
    );
    // Kept once done too, for its result pane.
    state.flows.put(flow, Flow::Handover(run.clone()));
    let total = run.steps.len();
    let names: Vec<String> = state.sources.iter().map(|s| s.name.clone()).collect();
    let name = |s: usize| names.get(s).map_or("?", String::as_str).to_string();
    let mut effects = Vec::new();
    for (n, (plan, result)) in run.steps.iter().zip(&run.results).enumerate().skip(i) {
        let Some(result) = result else { break };
        let line = result.line(&name(plan.source), &plan.action);
        state.push_log(format!("hand-over step {}/{total}: {line}", n + 1));
    }
    state.dirty = true;
    let source = run.steps[i].source;
    if ok {
        // Show the freed (or claimed) GPUs now rather than at the next refresh (right
        // after the fetch in flight, which may have left before the step).
        effects.extend(super::sources::changed(state, source));
    }
    match (run.current(), run.failed_at()) {
        (Some(_), _) => effects.extend(send_current(state, flow)),
        (None, Some(at)) => {
            let words = match &run.results[at] {
                Some(StepResult::Failed(e)) => e.to_string(),
                _ => String::new(),
            };
            let done = run.results[..at]
                .iter()
                .filter(|r| matches!(r, Some(StepResult::Done(_))))
                .count();
            flash(
                state,
                format!(
                    "hand-over STOPPED at step {}/{total} ({}): {words}; {done} step(s) done \
                     before it, {} not run",
                    at + 1,
                    name(run.steps[at].source),
                    total - at - 1
                ),
                true,
            );
            // The operator sees what stopped it even after closing the pane.
            if state.mode == Mode::Normal {
                state.mode = Mode::Handover;
            }
        }
        (None, None) => flash(state, format!("hand-over done: {total} steps"), false),
    }
    effects
}

/// Keys in the result pane: Esc or Enter closes it (a run under way goes on; `:handover`
/// reopens it).
pub(super) fn pane_key(state: &mut State, ev: KeyEvent) -> Vec<Effect> {
    let closes = matches!(
        state.keymap.action(Context::Dialog, &ev),
        Some(KeyAction::Cancel | KeyAction::Confirm)
    ) || matches!(
        state.keymap.action(Context::Normal, &ev),
        Some(KeyAction::Back | KeyAction::Quit)
    );
    if closes {
        state.mode = Mode::Normal;
    }
    Vec::new()
}
