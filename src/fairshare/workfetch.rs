//! Work fetch, after BOINC's: which resource types look for work (idle now, or idle
//! within the horizon), which project's claim goes next there, and backing off the
//! projects passed over. The caller decides through [`Fit`] whether a claim fits now.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::claim::PendingClaim;
use super::ledger::Ledger;
use super::project::ProjectName;
use super::resource::{ResourceId, instances_of};
use super::rr::RrOutcome;
use super::view::EventKind;
use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::units::Units;

/// Decides whether a pending claim fits on a resource type right now; placement
/// implements it. `units` is what the claim takes there.
pub trait Fit {
    /// Whether `claim` could be placed on `resource` now.
    fn fits(&mut self, claim: &PendingClaim, resource: &ResourceId, units: Units) -> bool;

    /// Whether no pending claim fits anywhere now, so that `fits` would answer no to
    /// each: work fetch then asks none of them (a full endpoint's queue is long). `false`
    /// when not known.
    fn nothing_fits(&mut self) -> bool {
        false
    }
}

impl<F: FnMut(&PendingClaim, &ResourceId, Units) -> bool> Fit for F {
    fn fits(&mut self, claim: &PendingClaim, resource: &ResourceId, units: Units) -> bool {
        self(claim, resource, units)
    }
}

/// What made work fetch look for work on a resource type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// It has idle capacity now.
    Idle,
    /// It will have idle capacity within the horizon.
    Shortfall,
}

/// A work-fetch decision: place this claim on this resource type. The caller places it
/// and then calls [`Ledger::placed`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fetch {
    /// The claim to place.
    pub claim: ClaimId,
    /// Its project.
    pub project: ProjectName,
    /// Where.
    pub resource: ResourceId,
    /// What it takes there.
    pub units: Units,
    /// Why the type was looking for work.
    pub trigger: Trigger,
}

/// A claim that now holds part of a resource type.
#[derive(Clone, Debug, PartialEq)]
pub struct Placed {
    /// Its identity (pending or not).
    pub id: ClaimId,
    /// Its project.
    pub project: ProjectName,
    /// Where it runs.
    pub resource: ResourceId,
    /// What it holds.
    pub units: Units,
    /// How long it is expected to run.
    pub expected_duration: Option<Duration>,
}

impl Ledger {
    /// One work-fetch decision, in the source's order: idle GPU types, idle CPU, GPU
    /// shortfall, CPU shortfall. For the first type that has a project not backed off
    /// there with a claim that fits, it picks the project with the highest debt plus
    /// shortfall there (overall debt breaks ties) and returns its oldest claim that
    /// fits. Projects passed over because none of their claims fit are backed off there,
    /// so a large claim that does not fit never holds back smaller ones of others.
    pub fn work_fetch(
        &mut self,
        now: Timestamp,
        fit: &mut impl Fit,
        rng: &mut impl Rng,
    ) -> Option<Fetch> {
        self.tick(now);
        let outcome = self.rr(now);
        let overall: Vec<f64> = (0..self.projects.len())
            .map(|p| self.overall_debt(p).0)
            .collect();
        for (r, trigger) in self.triggers(&outcome) {
            if let Some(fetch) = self.fetch_on(now, r, trigger, &outcome, &overall, fit, rng) {
                return Some(fetch);
            }
        }
        None
    }

    /// The earliest time after `now` a backoff ends for a project with pending work:
    /// when work fetch should run again even if nothing else happens.
    pub fn next_wakeup(&self, now: Timestamp) -> Option<Timestamp> {
        self.projects
            .iter()
            .flat_map(|slot| {
                slot.accounts
                    .iter()
                    .zip(&slot.pending_count)
                    .filter(|(_, count)| **count > 0)
                    .filter_map(|(account, _)| account.backoff.until)
            })
            .filter(|&until| until > now)
            .min()
    }

    /// A simulation of the running claims over the horizon: what is busy, and when
    /// (the totals kept as claims come and go, `busy`).
    pub(super) fn rr(&self, now: Timestamp) -> RrOutcome {
        self.busy
            .outcome(now, self.projects.len(), self.resources.len())
    }

    /// Instance-seconds of type `r` left idle over the horizon.
    pub(super) fn shortfall(&self, r: usize, outcome: &RrOutcome, horizon_s: f64) -> f64 {
        (instances_of(self.resources[r].capacity()) * horizon_s - outcome.busy[r]).max(0.0)
    }

    /// The source's order: idle GPU types, idle CPU, GPU shortfall, CPU shortfall.
    fn triggers(&self, outcome: &RrOutcome) -> Vec<(usize, Trigger)> {
        let horizon = self.config.horizon.as_secs_f64();
        let mut order: Vec<usize> = (0..self.resources.len()).collect();
        order.sort_by(|&a, &b| {
            let (ra, rb) = (&self.resources[a], &self.resources[b]);
            rb.id
                .is_gpu()
                .cmp(&ra.id.is_gpu())
                .then_with(|| ra.id.cmp(&rb.id))
        });
        let idle = order
            .iter()
            .filter(|&&r| outcome.in_use[r] < self.resources[r].capacity())
            .map(|&r| (r, Trigger::Idle));
        let short = order
            .iter()
            .filter(|&&r| self.shortfall(r, outcome, horizon) > 1e-9)
            .map(|&r| (r, Trigger::Shortfall));
        idle.chain(short).collect()
    }

    #[allow(clippy::too_many_arguments)]
    /// Work fetch on one resource type: the most owed project with a claim that fits.
    fn fetch_on(
        &mut self,
        now: Timestamp,
        r: usize,
        trigger: Trigger,
        outcome: &RrOutcome,
        overall: &[f64],
        fit: &mut impl Fit,
        rng: &mut impl Rng,
    ) -> Option<Fetch> {
        let m = self.resources.len();
        let horizon = self.config.horizon.as_secs_f64();
        let mut candidates: Vec<(f64, usize)> = self
            .projects
            .iter()
            .enumerate()
            .filter(|(_, slot)| {
                slot.share.get() > 0
                    && slot.pending_count[r] > 0
                    && !slot.accounts[r].backoff.active(now)
            })
            .map(|(p, slot)| {
                let shortfall = slot.target[r] * horizon - outcome.project_busy[p * m + r];
                (slot.accounts[r].ltd.0 + shortfall, p)
            })
            .collect();
        candidates.sort_unstable_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then_with(|| overall[b.1].total_cmp(&overall[a.1]))
                .then_with(|| self.projects[a.1].name.cmp(&self.projects[b.1].name))
        });
        let resource = self.resources[r].id.clone();
        let mut passed_over = Vec::new();
        let nothing = fit.nothing_fits();
        // What was asked in this decision, by form: each project's queue has the same
        // few forms, and the fleet does not change between two projects.
        let mut asked: Vec<(&str, Units, bool)> = Vec::new();
        for (_, p) in candidates {
            let chosen = if nothing {
                None
            } else {
                self.first_fitting(p, r, &resource, fit, &mut asked)
            };
            if let Some((claim, units)) = chosen {
                for q in passed_over {
                    self.back_off(now, q, r, rng);
                }
                self.projects[p].nothing_fit[r] = None;
                return Some(Fetch {
                    claim,
                    project: self.projects[p].name.clone(),
                    resource,
                    units,
                    trigger,
                });
            }
            passed_over.push(p);
        }
        // Nothing of anyone's fits: the type is full for what waits, which is no
        // project's fault, so nobody is backed off; each keeps the reason.
        for q in passed_over {
            self.projects[q].nothing_fit[r].get_or_insert(now);
        }
        None
    }

    /// Project `p`'s oldest claim that fits on type `r`, with what it takes there: the
    /// oldest of each form is asked about (the others of its form fit alike and come
    /// after it), the claims without a form one by one, up to the oldest that fits.
    fn first_fitting<'a>(
        &'a self,
        p: usize,
        r: usize,
        resource: &ResourceId,
        fit: &mut impl Fit,
        asked: &mut Vec<(&'a str, Units, bool)>,
    ) -> Option<(ClaimId, Units)> {
        let forms = &self.projects[p].forms;
        let mut best: Option<(u64, ClaimId, Units)> = None;
        for group in &forms.groups {
            let Some(&(_, units)) = group.demand.iter().find(|(dr, _)| *dr == r) else {
                continue;
            };
            let Some((&seq, &id)) = group.queue.first_key_value() else {
                continue;
            };
            if best.is_some_and(|(b, ..)| b < seq) {
                continue;
            }
            let known = asked
                .iter()
                .find(|(form, u, _)| *form == group.form && *u == units)
                .map(|&(.., answer)| answer);
            let fits = if let Some(answer) = known {
                answer
            } else {
                let Some(waiting) = self.pending.get(&id) else {
                    continue;
                };
                let answer = fit.fits(&waiting.claim, resource, units);
                asked.push((&group.form, units, answer));
                answer
            };
            if fits {
                best = Some((seq, id, units));
            }
        }
        let before = best.map_or(u64::MAX, |(seq, ..)| seq);
        forms
            .alone
            .range(..before)
            .find_map(|(_, id)| {
                let waiting = self.pending.get(id)?;
                let &(_, units) = waiting.demand.iter().find(|(dr, _)| *dr == r)?;
                fit.fits(&waiting.claim, resource, units)
                    .then_some((*id, units))
            })
            .or(best.map(|(_, id, units)| (id, units)))
    }

    /// Backs a project off on a type after none of its claims fit there.
    fn back_off(&mut self, now: Timestamp, p: usize, r: usize, rng: &mut impl Rng) {
        let slot = &mut self.projects[p];
        let account = &mut slot.accounts[r];
        let until = account.backoff.grow(now, &self.config.backoff, rng);
        let interval_s = account.backoff.interval.map_or(0.0, |d| d.as_secs_f64());
        if slot.running_units[r] == 0 {
            account.accrue = false;
            self.stale = true;
        }
        slot.nothing_fit[r].get_or_insert(now);
        let event = EventKind::BackedOff {
            project: slot.name.clone(),
            resource: self.resources[r].id.clone(),
            until,
            interval_s,
        };
        self.push_event(now, event);
    }
}
