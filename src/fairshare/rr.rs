//! The source's round-robin simulation, reduced to what claims need: a claim holds a
//! fixed part of one resource type until it ends, with no time slicing, so the
//! simulation is each running claim holding its units until its expected end. It
//! yields the idle capacity now and the busy instance-seconds over the buffer horizon,
//! per resource type and per (project, resource type); the scheduler turns those into
//! shortfalls.

use std::time::Duration;

use super::time::TimestampExt;
use crate::clock::Timestamp;
use crate::units::Units;

/// One running claim, as the simulation sees it.
#[derive(Clone, Copy, Debug)]
pub struct RunningUse {
    /// Project index.
    pub project: usize,
    /// Resource type index.
    pub resource: usize,
    /// What it holds.
    pub units: Units,
    /// When it is expected to end; `None` runs past the horizon.
    pub expected_end: Option<Timestamp>,
}

/// What the simulation yields.
#[derive(Clone, Debug, Default)]
pub struct RrOutcome {
    /// Per resource type: units in use now.
    pub in_use: Vec<u64>,
    /// Per resource type: busy instance-seconds over the horizon.
    pub busy: Vec<f64>,
    /// Per (project, resource type), flattened `project * resources + resource`: busy
    /// instance-seconds over the horizon.
    pub project_busy: Vec<f64>,
}

/// Runs the simulation from `now` over `horizon` for `projects` x `resources`.
pub fn simulate(
    now: Timestamp,
    horizon: Duration,
    projects: usize,
    resources: usize,
    running: impl IntoIterator<Item = RunningUse>,
) -> RrOutcome {
    let mut out = RrOutcome {
        in_use: vec![0; resources],
        busy: vec![0.0; resources],
        project_busy: vec![0.0; projects * resources],
    };
    let horizon_s = horizon.as_secs_f64();
    for claim in running {
        if claim.resource >= resources || claim.project >= projects {
            continue;
        }
        out.in_use[claim.resource] += u64::from(claim.units.0);
        // A claim already past its expected end is taken to end now.
        let held_s = claim
            .expected_end
            .map_or(horizon_s, |end| end.since(now).as_secs_f64().min(horizon_s));
        let busy = claim.units.as_fraction() * held_s;
        out.busy[claim.resource] += busy;
        out.project_busy[claim.project * resources + claim.resource] += busy;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_hold_their_units_until_their_expected_end() {
        let now = Timestamp::from_secs(100);
        let running = [
            RunningUse {
                project: 0,
                resource: 0,
                units: Units(10_000),
                expected_end: Some(Timestamp::from_secs(1_900)),
            },
            RunningUse {
                project: 1,
                resource: 0,
                units: Units(5_000),
                expected_end: None,
            },
            RunningUse {
                project: 1,
                resource: 1,
                units: Units(2_500),
                expected_end: Some(Timestamp::from_secs(50)),
            },
        ];
        let out = simulate(now, Duration::from_hours(1), 2, 2, running);
        assert_eq!(out.in_use, vec![15_000, 2_500]);
        // 1 instance for 1800 s, plus 0.5 for the whole hour.
        assert!((out.busy[0] - (1_800.0 + 1_800.0)).abs() < 1e-9);
        // Overdue: ends now.
        assert_eq!(out.busy[1], 0.0);
        assert!((out.project_busy[0] - 1_800.0).abs() < 1e-9);
        assert!((out.project_busy[2] - 1_800.0).abs() < 1e-9);
    }
}
