//! Engine actions from the console: `E` on a selected claim of a Slurm, BOINC or Ray
//! source opens the confirmation of its usual action (Slurm: cancel a running job, hold a
//! pending one; BOINC: suspend the task, resume one the GUI suspended; Ray: stop the
//! job), and `:act VERB [TARGET]` asks for any verb the selected claim's source offers, its target taken from the claim
//! when not given. Verbs the engine's API lacks are refused with why; the confirmation
//! and the executor are the endpoint actions' own (`actions::confirm_key`, the driver).
//! `:act ... then ...` is a hand-over (`handover`).

use crate::snapshot::{ClaimState, ClaimView};
use crate::sources::actions::{EngineAction, EngineVerb, offers};
use crate::sources::{Action, SourceKind};

use super::flash;
use crate::console::msg::Effect;
use crate::console::state::{Confirm, State, View};

/// `E`: the usual engine action on the selected claim.
pub(super) fn engine_key(state: &mut State) -> Vec<Effect> {
    open(state, None, None)
}

/// `:act VERB [TARGET]` (`:act` alone is `E`).
pub(super) fn engine_command(state: &mut State, arg: &str) -> Vec<Effect> {
    let mut words = arg.split_whitespace();
    let verb = words.next();
    let target = words.next();
    open(state, verb, target)
}

fn open(state: &mut State, verb: Option<&str>, target: Option<&str>) -> Vec<Effect> {
    let picked = (state.view == View::Claims)
        .then(|| state.selected_claim())
        .flatten()
        .and_then(|k| {
            state
                .claim(k)
                .map(|(s, c)| (k.source, s.kind, s.name.clone(), c.clone()))
        });
    let Some((source, kind, name, claim)) = picked else {
        // With verb and target, no claim is needed: the shown source, or the only one
        // offering the verb (BOINC's GPU mode, a job id typed out).
        if let (Some(v), Some(t)) = (verb, target) {
            return without_claim(state, v, t);
        }
        flash(
            state,
            "select a claim of a Slurm, BOINC or Ray source in the Claims view first, \
             or give :act VERB TARGET",
            true,
        );
        return Vec::new();
    };
    if offers(kind).is_empty() {
        flash(
            state,
            format!("{name} is a {kind} source: it takes no engine actions"),
            true,
        );
        return Vec::new();
    }
    let verb = match verb {
        None => usual_verb(kind, &claim),
        Some(v) => match EngineVerb::parse(kind, v) {
            Ok(v) => v,
            Err(e) => {
                flash(state, e.to_string(), true);
                return Vec::new();
            }
        },
    };
    if let Some(why) = verb.unavailable() {
        flash(state, format!("{name}: {verb} is not offered: {why}"), true);
        return Vec::new();
    }
    let own = target_of(verb, &claim);
    let typed = target.filter(|t| *t != own);
    let action = match EngineAction::new(verb, typed.unwrap_or(&own)) {
        Ok(a) => a,
        Err(e) => {
            flash(state, e.to_string(), true);
            return Vec::new();
        }
    };
    // A target typed on the `:` line is the one acted on, not the selected claim's: the
    // dialog repeats it and does not name the claim.
    let from = match typed {
        Some(t) => format!(
            "You typed: act {verb} {t} (not the selected claim {})",
            claim.shown_id()
        ),
        None => format!("from claim {}: {}", claim.shown_id(), claim.form),
    };
    let body = vec![
        format!("{verb} {} on {name}?", action.describe_target()),
        from,
        format!("The engine {}.", verb.effect().trim_end_matches('.')),
    ];
    ask_engine(state, source, action, format!("{kind}: {verb}"), body);
    Vec::new()
}

/// `:act VERB TARGET` with no claim selected: the source shown (`o`), else the only
/// source whose kind has the verb.
fn without_claim(state: &mut State, verb: &str, target: &str) -> Vec<Effect> {
    let fits: Vec<usize> = (0..state.sources.len())
        .filter(|i| state.source_filter.is_none_or(|f| f == *i))
        .filter(|i| EngineVerb::parse(state.sources[*i].kind, verb).is_ok())
        .collect();
    let [source] = fits[..] else {
        let why = if fits.is_empty() {
            format!("no source shown has the engine action `{verb}`")
        } else {
            format!(
                "{} sources have `{verb}`: pick one with `o` first",
                fits.len()
            )
        };
        flash(state, why, true);
        return Vec::new();
    };
    let slot = &state.sources[source];
    let (kind, name) = (slot.kind, slot.name.clone());
    let action = match EngineVerb::parse(kind, verb).and_then(|v| {
        if let Some(why) = v.unavailable() {
            return Err(crate::sources::actions::EngineActionError::BadTarget {
                verb: v,
                target: target.to_string(),
                why: format!("not offered: {why}"),
            });
        }
        EngineAction::new(v, target)
    }) {
        Ok(a) => a,
        Err(e) => {
            flash(state, e.to_string(), true);
            return Vec::new();
        }
    };
    let verb = action.verb;
    let body = vec![
        format!("{verb} {} on {name}?", action.describe_target()),
        format!("The engine {}.", verb.effect()),
    ];
    ask_engine(state, source, action, format!("{kind}: {verb}"), body);
    Vec::new()
}

/// What `E` does to a claim of this kind.
pub(super) fn usual_verb(kind: SourceKind, claim: &ClaimView) -> EngineVerb {
    match (kind, claim.state == ClaimState::Pending) {
        (SourceKind::Slurm, true) => EngineVerb::SlurmHold,
        (SourceKind::Slurm, false) => EngineVerb::SlurmCancel,
        // A task the GUI suspended is resumed; any other is suspended.
        (SourceKind::Boinc, _)
            if claim
                .request
                .labels
                .get("boinc.suspended")
                .is_some_and(|v| v == "true") =>
        {
            EngineVerb::BoincResumeTask
        }
        (SourceKind::Boinc, _) => EngineVerb::BoincSuspendTask,
        (SourceKind::Kubernetes, _) => EngineVerb::KubeEvict,
        _ => EngineVerb::RayStopJob,
    }
}

/// The target a verb takes from a claim: the Slurm job id, the BOINC task (its holder) or
/// project, the Ray job (its project, `ray-job-ID`); `auto` for BOINC's GPU mode.
pub(super) fn target_of(verb: EngineVerb, claim: &ClaimView) -> String {
    let label = |k: &str| claim.request.labels.get(k).cloned().unwrap_or_default();
    match verb.target_kind() {
        "JOB_ID" => label("slurm.job_id"),
        "TASK" => claim.holder.clone().unwrap_or_default(),
        "PROJECT" | "SUBMISSION_ID" => claim.project.clone(),
        "NODE" => claim.node.clone().unwrap_or_default(),
        "NAMESPACE/POD" => format!("{}/{}", claim.project, label("k8s.pod")),
        _ => "never".to_string(),
    }
}

/// Opens the one confirmation dialog for an engine action; cancelling a Slurm job asks for
/// its id to be typed, as releasing another holder's claim does.
fn ask_engine(
    state: &mut State,
    source: usize,
    action: EngineAction,
    title: String,
    body: Vec<String>,
) {
    let typed = matches!(
        action.verb,
        EngineVerb::SlurmCancel | EngineVerb::KubeDelete
    )
    .then(|| action.target.clone());
    let mut confirm = Confirm::new(source, Action::Engine(action), title, body);
    confirm.type_to_confirm = typed;
    super::ask(state, confirm);
}
