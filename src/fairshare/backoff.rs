//! Per-(project, resource) backoff: after a project had nothing to run on a resource
//! type when asked, it is not asked again for a while; the interval doubles up to a cap
//! and each wait is scaled by a random jitter, as the shipped BOINC client does.

use std::time::Duration;

use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

use super::FairShareError;
use super::time::{TimestampExt, opt_secs, secs};
use crate::clock::Timestamp;

/// How backoffs grow. Defaults: 600 s first, doubling, capped at 86 400 s, jitter in [0.5, 1.5].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackoffPolicy {
    /// The first interval.
    #[serde(with = "secs", rename = "min_s")]
    pub min: Duration,
    /// The largest interval before jitter.
    #[serde(with = "secs", rename = "max_s")]
    pub max: Duration,
    /// Each further backoff multiplies the interval by this (2: doubling).
    pub factor: f64,
    /// Smallest jitter multiplier.
    pub jitter_min: f64,
    /// Largest jitter multiplier.
    pub jitter_max: f64,
}

impl Default for BackoffPolicy {
    fn default() -> BackoffPolicy {
        BackoffPolicy {
            min: Duration::from_mins(10),
            max: Duration::from_hours(24),
            factor: 2.0,
            jitter_min: 0.5,
            jitter_max: 1.5,
        }
    }
}

impl BackoffPolicy {
    /// Refuses a policy that would never back off, shrink, or go negative.
    pub fn validate(&self) -> Result<(), FairShareError> {
        let bad = |why: &str| Err(FairShareError::BadBackoff(why.to_string()));
        if self.min.is_zero() {
            return bad("min_s must be positive");
        }
        if self.max < self.min {
            return bad("max_s must be at least min_s");
        }
        if !(self.factor.is_finite() && self.factor >= 1.0) {
            return bad("factor must be a finite number of at least 1");
        }
        let jitter_ok = self.jitter_min.is_finite()
            && self.jitter_max.is_finite()
            && self.jitter_min > 0.0
            && self.jitter_min <= self.jitter_max
            && self.jitter_max <= 10.0;
        if !jitter_ok {
            return bad(
                "jitter_min and jitter_max must satisfy 0 < jitter_min <= jitter_max <= 10",
            );
        }
        Ok(())
    }
}

/// One (project, resource) backoff; persisted, with the end as an absolute time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Backoff {
    /// The interval before jitter; `None` when not backed off since the last clear.
    #[serde(with = "opt_secs", rename = "interval_s")]
    pub interval: Option<Duration>,
    /// Until when the project is not asked for work of this type.
    pub until: Option<Timestamp>,
}

impl Backoff {
    /// Backs off once more from `now`: the first interval, or the last one times the
    /// factor, capped, then scaled by a jitter drawn from `rng`. Returns the end.
    pub fn grow(
        &mut self,
        now: Timestamp,
        policy: &BackoffPolicy,
        rng: &mut impl Rng,
    ) -> Timestamp {
        let interval = match self.interval {
            None => policy.min,
            Some(last) => last.mul_f64(policy.factor).min(policy.max),
        };
        let jitter = if policy.jitter_min < policy.jitter_max {
            rng.random_range(policy.jitter_min..=policy.jitter_max)
        } else {
            policy.jitter_min
        };
        let until = now.after(interval.mul_f64(jitter));
        self.interval = Some(interval);
        self.until = Some(until);
        until
    }

    /// Forgets the backoff; returns whether there was one.
    pub fn clear(&mut self) -> bool {
        let had = self.interval.is_some() || self.until.is_some();
        *self = Backoff::default();
        had
    }

    /// Whether the project must not be asked at `now`.
    pub fn active(&self, now: Timestamp) -> bool {
        self.until.is_some_and(|until| until > now)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn doubles_caps_and_jitters_within_bounds() {
        let policy = BackoffPolicy::default();
        let mut rng = StdRng::seed_from_u64(7);
        let mut backoff = Backoff::default();
        let now = Timestamp::from_secs(1_000);
        let mut expected = 600.0_f64;
        for _ in 0..12 {
            let until = backoff.grow(now, &policy, &mut rng);
            assert_eq!(backoff.interval.unwrap().as_secs_f64(), expected);
            let waited = until.since(now).as_secs_f64();
            assert!(
                waited >= 0.5 * expected - 0.001 && waited <= 1.5 * expected + 0.001,
                "{waited} vs {expected}"
            );
            assert!(backoff.active(now) && !backoff.active(until));
            expected = (expected * 2.0).min(86_400.0);
        }
        assert_eq!(backoff.interval, Some(Duration::from_hours(24)));
        assert!(backoff.clear());
        assert!(!backoff.active(now));
        assert!(!backoff.clear());
    }

    #[test]
    fn jitter_spreads_over_its_range() {
        let policy = BackoffPolicy::default();
        let mut rng = StdRng::seed_from_u64(1);
        let now = Timestamp(0);
        let waits: Vec<f64> = (0..400)
            .map(|_| {
                Backoff::default()
                    .grow(now, &policy, &mut rng)
                    .since(now)
                    .as_secs_f64()
            })
            .collect();
        let low = waits.iter().copied().fold(f64::MAX, f64::min);
        let high = waits.iter().copied().fold(0.0, f64::max);
        assert!((300.0..330.0).contains(&low), "{low}");
        assert!(high <= 900.0 && high > 870.0, "{high}");
    }

    #[test]
    fn policy_validation_names_the_rule() {
        let mut policy = BackoffPolicy {
            min: Duration::ZERO,
            ..BackoffPolicy::default()
        };
        assert!(policy.validate().unwrap_err().to_string().contains("min_s"));
        policy = BackoffPolicy {
            jitter_min: 2.0,
            jitter_max: 1.0,
            ..BackoffPolicy::default()
        };
        assert!(
            policy
                .validate()
                .unwrap_err()
                .to_string()
                .contains("jitter")
        );
        policy = BackoffPolicy {
            max: Duration::from_secs(1),
            ..BackoffPolicy::default()
        };
        assert!(policy.validate().unwrap_err().to_string().contains("max_s"));
        assert!(BackoffPolicy::default().validate().is_ok());
    }
}
