//! The source's round-robin simulation, reduced to what claims need: a claim holds a
//! fixed part of one resource type until it ends, with no time slicing, so the
//! simulation is each running claim holding its units until its expected end. It
//! yields the idle capacity now and the busy instance-seconds over the buffer horizon,
//! per resource type and per (project, resource type); the scheduler turns those into
//! shortfalls.

use std::time::Duration;

use crate::clock::Timestamp;
use crate::units::{UNITS_PER_DEVICE, Units};

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

/// Milliseconds a claim ending at `end` holds over `horizon_ms` from `now`: a claim
/// already past its expected end is taken to end now, one without an end holds it all.
pub(super) fn held_ms(end: Option<Timestamp>, now: Timestamp, horizon_ms: u64) -> u64 {
    end.map_or(horizon_ms, |end| end.millis_since(now).min(horizon_ms))
}

/// The horizon in whole milliseconds, as the simulation counts it.
pub(super) fn horizon_ms(horizon: Duration) -> u64 {
    u64::try_from(horizon.as_millis()).unwrap_or(u64::MAX)
}

/// Unit-milliseconds per instance-second.
const UNIT_MS_PER_INSTANCE_SEC: f64 = UNITS_PER_DEVICE as f64 * 1000.0;

impl RrOutcome {
    /// The outcome from units in use per type and busy unit-milliseconds per (project,
    /// type), flattened `project * resources + resource`. The sums are integers, so any
    /// order of counting gives the same figures.
    pub(super) fn from_unit_ms(in_use: Vec<u64>, busy: &[u128], resources: usize) -> RrOutcome {
        let mut per_type = vec![0u128; resources];
        for (i, b) in busy.iter().enumerate() {
            per_type[i % resources.max(1)] += b;
        }
        let secs = |b: &u128| *b as f64 / UNIT_MS_PER_INSTANCE_SEC;
        RrOutcome {
            in_use,
            busy: per_type.iter().map(secs).collect(),
            project_busy: busy.iter().map(secs).collect(),
        }
    }
}

/// Runs the simulation from `now` over `horizon` for `projects` x `resources`.
pub fn simulate(
    now: Timestamp,
    horizon: Duration,
    projects: usize,
    resources: usize,
    running: impl IntoIterator<Item = RunningUse>,
) -> RrOutcome {
    let mut in_use = vec![0; resources];
    let mut busy = vec![0u128; projects * resources];
    let horizon_ms = horizon_ms(horizon);
    for claim in running {
        if claim.resource >= resources || claim.project >= projects {
            continue;
        }
        in_use[claim.resource] += u64::from(claim.units.0);
        busy[claim.project * resources + claim.resource] +=
            u128::from(claim.units.0) * u128::from(held_ms(claim.expected_end, now, horizon_ms));
    }
    RrOutcome::from_unit_ms(in_use, &busy, resources)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fairshare::TimestampExt;

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
