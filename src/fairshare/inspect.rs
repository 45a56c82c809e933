//! Reading the ledger: the view for the snapshot and the console, and why a pending
//! claim waits on each resource type that could run it.

use super::ledger::Ledger;
use super::project::InstanceSecs;
use super::resource::{ResourceId, instances_of};
use super::rr::RrOutcome;
use super::time::TimestampExt;
use super::view::{AccountView, FairShareView, LedgerProject, LedgerResource, WaitReason};
use crate::clock::Timestamp;
use crate::ids::ClaimId;

impl Ledger {
    /// Why a pending claim is not placed, per resource type that could run it; `None`
    /// when the claim is not pending.
    pub fn why_pending(
        &self,
        now: Timestamp,
        id: ClaimId,
    ) -> Option<Vec<(ResourceId, WaitReason)>> {
        let waiting = self.pending.get(&id)?;
        let outcome = self.rr(now);
        Some(
            waiting
                .demand
                .iter()
                .map(|&(r, _)| {
                    let reason = self.reason(now, waiting.project, r, &outcome);
                    (self.resources[r].id.clone(), reason)
                })
                .collect(),
        )
    }

    /// The ledger at `now` for the snapshot and the console. Call [`Ledger::tick`]
    /// first for up-to-date debts.
    pub fn view(&self, now: Timestamp) -> FairShareView {
        let outcome = self.rr(now);
        let horizon = self.config.horizon.as_secs_f64();
        let resources = self
            .resources
            .iter()
            .enumerate()
            .map(|(r, res)| LedgerResource {
                id: res.id.clone(),
                instances: res.instances,
                speed: res.speed,
                used_instances: instances_of(outcome.in_use[r]),
                idle_instances: instances_of(res.capacity().saturating_sub(outcome.in_use[r])),
                shortfall: InstanceSecs(self.shortfall(r, &outcome, horizon)),
            })
            .collect();
        let projects = self
            .projects
            .iter()
            .enumerate()
            .map(|(p, slot)| LedgerProject {
                name: slot.name.clone(),
                share: slot.share,
                overall_debt: self.overall_debt(p),
                pending: slot.queue.len(),
                running: slot.running_count,
                resources: (0..self.resources.len())
                    .map(|r| {
                        let account = &slot.accounts[r];
                        AccountView {
                            resource: self.resources[r].id.clone(),
                            debt: account.ltd,
                            accrue: account.accrue,
                            target_instances: slot.target[r],
                            used_instances: instances_of(slot.running_units[r]),
                            pending: slot.pending_count[r],
                            backoff_until: account.backoff.until,
                            backoff_left_s: account
                                .backoff
                                .until
                                .filter(|&until| until > now)
                                .map(|until| until.since(now).as_secs_f64()),
                            backoff_interval_s: account.backoff.interval.map(|d| d.as_secs_f64()),
                            reason: self.reason(now, p, r, &outcome),
                        }
                    })
                    .collect(),
            })
            .collect();
        FairShareView {
            at: now,
            resources,
            projects,
        }
    }

    /// Why project `p` gets no work on type `r` now.
    fn reason(&self, now: Timestamp, p: usize, r: usize, outcome: &RrOutcome) -> WaitReason {
        let slot = &self.projects[p];
        let account = &slot.accounts[r];
        if slot.pending_count[r] == 0 {
            return WaitReason::NoPendingWork;
        }
        if slot.share.get() == 0 {
            return WaitReason::ShareZero;
        }
        if let Some(until) = account.backoff.until.filter(|&until| until > now) {
            return WaitReason::BackedOff { until };
        }
        if let Some(since) = slot.nothing_fit[r] {
            return WaitReason::NothingFits { since };
        }
        let full = outcome.in_use[r] >= self.resources[r].capacity();
        if full && self.shortfall(r, outcome, self.config.horizon.as_secs_f64()) <= 1e-9 {
            return WaitReason::NoCapacity;
        }
        WaitReason::Queued
    }
}
