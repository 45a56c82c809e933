//! A hand-over the operator confirmed: its steps (an action on a source each) and each
//! step's result as it arrives. `update::handover` sends the steps one at a time through
//! the driver's executor (each named by its position, `Asker::Flow { step }`) and stops
//! at the first failure; drawing reads the results.

use crate::sources::Action;
use crate::sources::handover::StepResult;

/// One step of a hand-over: an action on a source, by position.
#[derive(Clone, Debug, PartialEq)]
pub struct StepPlan {
    /// The source that acts.
    pub source: usize,
    /// What it does.
    pub action: Action,
}

/// A hand-over under way or done (its id is its flow's).
#[derive(Clone, Debug, PartialEq)]
pub struct HandoverRun {
    /// The steps, in the order they run.
    pub steps: Vec<StepPlan>,
    /// One per step: `None` until its answer came (the first `None` is under way).
    pub results: Vec<Option<StepResult>>,
}

impl HandoverRun {
    /// A run of `steps`, none answered yet.
    pub fn new(steps: Vec<StepPlan>) -> HandoverRun {
        let results = vec![None; steps.len()];
        HandoverRun { steps, results }
    }

    /// The step waiting for its answer (none: the run is over).
    pub fn current(&self) -> Option<usize> {
        self.results.iter().position(Option::is_none)
    }

    /// The step that failed, if one did.
    pub fn failed_at(&self) -> Option<usize> {
        self.results
            .iter()
            .position(|r| matches!(r, Some(StepResult::Failed(_))))
    }

    /// Records step `i`'s answer; a failure marks every later step not run.
    pub fn record(&mut self, i: usize, result: StepResult) {
        let failed = matches!(result, StepResult::Failed(_));
        if let Some(slot) = self.results.get_mut(i) {
            *slot = Some(result);
        }
        if failed {
            for later in self.results.iter_mut().skip(i + 1) {
                *later = Some(StepResult::NotRun);
            }
        }
    }
}
