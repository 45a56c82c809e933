//! Slurm's own expected starts: a pending job's `start_time`, which the backfill
//! scheduler sets from the time limits of the jobs ahead of it. Given as the engine's
//! estimate (`Forecast::engine`), a time alone: gpuboard does not forecast a Slurm cluster,
//! and a job Slurm gives no time for (`start_time` 0, not yet looked at by backfill) has
//! none.

use super::answers::{SlurmAnswers, parse_jobs};
use super::jobs::{ShardsPerGpu, job_claims};
use crate::clock::Timestamp;
use crate::snapshot::ClaimState;
use crate::wire::forecast::{Band, ExpectedStart, Forecast};

/// The engine's name on its estimates.
pub const ENGINE: &str = "Slurm";

/// The pending GPU jobs' starts as Slurm expects them, read from `answers` at `at`; none
/// when the jobs answer cannot be read (the snapshot says why).
pub fn estimates(answers: &SlurmAnswers, at: Timestamp) -> Forecast {
    let mut skipped = Vec::new();
    let jobs = parse_jobs(&answers.jobs, &mut skipped).unwrap_or_default();
    let none = ShardsPerGpu::new();
    let mut starts: Vec<ExpectedStart> = jobs
        .iter()
        .filter(|j| j.start_s > 0)
        .flat_map(|j| {
            let when = Timestamp(j.start_s.saturating_mul(1000));
            job_claims(j, &none)
                .into_iter()
                .filter(|c| c.state == ClaimState::Pending)
                .map(move |c| ExpectedStart {
                    claim: c.id,
                    project: c.project,
                    start: Some(Band {
                        p10: when,
                        p50: when,
                        p90: when,
                    }),
                    node: None,
                    devices: Vec::new(),
                    freed_by: None,
                    ahead: 0,
                    unknown: None,
                })
        })
        .collect();
    starts.sort_by_key(|s| s.claim);
    Forecast {
        revision: 0,
        at,
        starts,
        engine: Some(ENGINE.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, state: &str, start: u64, tres: &str) -> serde_json::Value {
        serde_json::json!({
            "job_id": id, "name": "j", "user_name": "ana", "account": "physics",
            "partition": "gpu", "job_state": state, "state_reason": "Resources",
            "tres_per_node": tres, "start_time": start, "submit_time": 1_795_449_000u64,
        })
    }

    #[test]
    fn only_pending_gpu_jobs_with_a_start_time_have_an_estimate() {
        let answers = SlurmAnswers {
            nodes: serde_json::json!({}),
            jobs: serde_json::json!({
                "meta": {}, "errors": [],
                "jobs": [
                    job(4, "PENDING", 1_795_452_000, "gres:gpu:a100:2"),
                    // Not looked at by backfill yet: no time, none invented.
                    job(5, "PENDING", 0, "gres:gpu:a100:1"),
                    // No GPU asked: not a claim.
                    job(6, "PENDING", 1_795_452_000, ""),
                    job(7, "RUNNING", 1_795_449_100, "gres:gpu:a100:1"),
                ],
            }),
        };
        let f = estimates(&answers, Timestamp(1_795_449_200_000));
        assert_eq!(f.engine.as_deref(), Some("Slurm"));
        assert_eq!(f.starts.len(), 1, "{f:?}");
        let e = &f.starts[0];
        assert_eq!(e.project, "physics");
        assert_eq!(e.start.map(|b| b.p50), Some(Timestamp(1_795_452_000_000)));
        assert!(e.freed_by.is_none() && e.node.is_none());
    }
}
