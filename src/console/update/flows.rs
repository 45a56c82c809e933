//! Answers to flows (`console::flows`): an answer whose asker names a flow goes to that
//! flow alone, taken out of `State::flows` by its id; the flow's own file decides what
//! comes next and puts it back while it goes on. An answer whose flow is over is logged
//! and changes nothing else.

use crate::console::flows::{Flow, FlowId};
use crate::console::msg::Effect;
use crate::console::state::State;
use crate::fleet::Lost;
use crate::sources::{Action, Failure, Outcome};

/// The answer to step `step` of flow `flow`: to that flow.
pub(super) fn acted(
    state: &mut State,
    flow: FlowId,
    step: usize,
    source: usize,
    action: &Action,
    result: Result<Outcome, Failure>,
) -> Vec<Effect> {
    let Some(taken) = state.flows.take(flow) else {
        let line = acted_line(state, source, action, &result);
        return over(state, flow, &line);
    };
    match taken {
        Flow::Move(chain) => {
            super::move_across::stepped(state, flow, chain, step, source, action, result)
        }
        Flow::TakeBack(back) => {
            super::move_across::took_back(state, &back, source, action, &result);
            Vec::new()
        }
        Flow::Handover(run) => super::handover::answered(state, flow, run, step, result),
        // A lost answer's flow only sends its claim again (`Msg::Rechecked`).
        kept @ Flow::Lost(_) => {
            let line = acted_line(state, source, action, &result);
            not_its(state, flow, kept, &line)
        }
    }
}

/// What sending a claim again found, for flow `flow`: a move asking its target again,
/// or a claim that landed elsewhere (or nowhere) meanwhile.
pub(super) fn rechecked(
    state: &mut State,
    flow: FlowId,
    source: usize,
    attempt: &str,
    result: Result<Outcome, Failure>,
) -> Vec<Effect> {
    let asked = |l: &Lost| l.endpoint == source && l.attempt.as_str() == attempt;
    match state.flows.take(flow) {
        Some(Flow::Move(mut chain)) => match chain.rechecking.take() {
            Some(lost) if asked(&lost) => {
                super::move_across::for_move(state, flow, chain, lost, result)
            }
            waiting => {
                chain.rechecking = waiting;
                let line = recheck_line(state, source, attempt, &result);
                not_its(state, flow, Flow::Move(chain), &line)
            }
        },
        Some(Flow::Lost(lost)) if asked(&lost) => super::lost::after_landing(state, &lost, result),
        Some(kept) => {
            let line = recheck_line(state, source, attempt, &result);
            not_its(state, flow, kept, &line)
        }
        None => {
            let line = recheck_line(state, source, attempt, &result);
            over(state, flow, &line)
        }
    }
}

/// An answer for a flow that is over (finished, or replaced): logged, nothing changed.
fn over(state: &mut State, flow: FlowId, line: &str) -> Vec<Effect> {
    state.push_log(format!("{line} (for {flow}, which is over: nothing done)"));
    Vec::new()
}

/// An answer its flow does not wait for (a step already answered): the flow is put back
/// as it was, and the answer logged.
fn not_its(state: &mut State, flow: FlowId, kept: Flow, line: &str) -> Vec<Effect> {
    let kind = kept.kind();
    state.flows.put(flow, kept);
    state.push_log(format!(
        "{line} (for {flow}, a {kind} that does not wait for it: nothing done)"
    ));
    Vec::new()
}

fn name(state: &State, source: usize) -> &str {
    state.sources.get(source).map_or("?", |s| s.name.as_str())
}

fn outcome(result: &Result<Outcome, Failure>) -> String {
    match result {
        Ok(o) => o.message(),
        Err(e) => format!("refused: {e}"),
    }
}

/// `source: verb target: outcome`, for the log.
fn acted_line(
    state: &State,
    source: usize,
    action: &Action,
    result: &Result<Outcome, Failure>,
) -> String {
    format!(
        "{}: {} {}: {}",
        name(state, source),
        action.verb(),
        action.target(),
        outcome(result)
    )
}

/// `source: the claim labelled A sent again: outcome`, for the log.
fn recheck_line(
    state: &State,
    source: usize,
    attempt: &str,
    result: &Result<Outcome, Failure>,
) -> String {
    format!(
        "{}: the claim labelled gpuboard.attempt={attempt} sent again: {}",
        name(state, source),
        outcome(result)
    )
}

#[cfg(test)]
mod tests;
