//! A hand-over in one confirmed step: actions on one or more sources run in order (hold a
//! pending Slurm job, cancel a running one, set BOINC's GPU mode to never, then claim the
//! freed GPU on a gpuboard endpoint), stopping at the first failure. Every step's result is
//! kept, and the steps that did not run are named, so no GPU is released without the
//! operator seeing what happened after it.

use std::sync::Arc;
use std::time::Duration;

use super::{Action, Failure, Outcome, Source};

/// One step: an action on a source.
#[derive(Clone)]
pub struct HandoverStep {
    /// Who acts.
    pub source: Arc<dyn Source>,
    /// What.
    pub action: Action,
}

impl std::fmt::Debug for HandoverStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandoverStep")
            .field("source", &self.source.name())
            .field("action", &self.action)
            .finish()
    }
}

/// What became of one step.
#[derive(Clone, Debug, PartialEq)]
pub enum StepResult {
    /// It ran and the source did it.
    Done(Outcome),
    /// It ran and failed: the source's words. Later steps did not run.
    Failed(Failure),
    /// It did not run: an earlier step failed.
    NotRun,
}

impl StepResult {
    /// One line for the console and `gpuboard act`.
    pub fn line(&self, source: &str, action: &Action) -> String {
        let what = format!("{source}: {} {}", action.verb(), action.target());
        match self {
            StepResult::Done(o) => format!("{what}: done: {}", o.message()),
            StepResult::Failed(e) => format!("{what}: FAILED: {e}"),
            StepResult::NotRun => format!("{what}: not run (an earlier step failed)"),
        }
    }
}

/// Runs `steps` in order, each within `timeout`, and stops at the first failure; the result
/// has one entry per step.
pub async fn hand_over(steps: &[HandoverStep], timeout: Duration) -> Vec<StepResult> {
    let limit = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let mut out = Vec::with_capacity(steps.len());
    let mut failed = false;
    for step in steps {
        if failed {
            out.push(StepResult::NotRun);
            continue;
        }
        let result = tokio::time::timeout(timeout, step.source.act(step.action.clone()))
            .await
            .unwrap_or(Err(Failure::Timeout(limit)));
        out.push(match result {
            Ok(o) => StepResult::Done(o),
            Err(e) => {
                failed = true;
                StepResult::Failed(e)
            }
        });
    }
    out
}
