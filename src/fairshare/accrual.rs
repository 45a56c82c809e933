//! Debt accrual: between two changes every project with D(P,R) set accrues its target
//! share minus what it runs, and the targets y(P,R) are the max-min fair division of
//! each resource type over the projects that want it.

use super::ledger::Ledger;
use super::project::Gflop;
use super::resource::instances_of;
use super::targets::{Afresh, Capacity, Demand, Narrowed};
use super::time::TimestampExt;
use super::view::EventKind;
use crate::clock::Timestamp;

impl Ledger {
    /// Accrues debt from the last time seen to `now`; a clock that went backwards
    /// clears every backoff instead, since their absolute ends mean nothing any more.
    pub(super) fn advance(&mut self, now: Timestamp) {
        self.busy.settle(now);
        let Some(last) = self.last_seen else {
            self.last_seen = Some(now);
            return;
        };
        if now < last {
            for slot in &mut self.projects {
                slot.accounts.iter_mut().for_each(|a| {
                    a.backoff.clear();
                });
            }
            self.push_event(
                now,
                EventKind::ClockWentBack {
                    from: last,
                    to: now,
                },
            );
            self.last_seen = Some(now);
            return;
        }
        if now == last {
            return;
        }
        if self.stale {
            self.divide();
        }
        let dt = now.since(last).as_secs_f64();
        for slot in &mut self.projects {
            for r in 0..slot.accounts.len() {
                let account = &mut slot.accounts[r];
                if account.accrue {
                    account.ltd.0 += (slot.target[r] - instances_of(slot.running_units[r])) * dt;
                }
            }
        }
        self.last_seen = Some(now);
    }

    /// Recomputes the targets y(P,R) over the projects with D(P,R) true and a share.
    pub(super) fn divide(&mut self) {
        let m = self.resources.len();
        // Capacity held by projects outside the division is not theirs to divide.
        let mut outside = vec![0u64; m];
        for slot in &self.projects {
            for (r, used) in outside.iter_mut().enumerate() {
                if slot.share.get() == 0 || !slot.accounts[r].accrue {
                    *used += slot.running_units[r];
                }
            }
        }
        // Filled in place of the inputs before the last ones: a busy ledger divides at
        // every instant a claim ends, and these were a score of allocations each time.
        let (mut capacities, mut demands) = std::mem::take(&mut self.spare);
        capacities.clear();
        capacities.extend(
            self.resources
                .iter()
                .zip(&outside)
                .map(|(res, &held)| Capacity {
                    instances: instances_of(res.capacity().saturating_sub(held)),
                    speed: res.speed,
                }),
        );
        demands.truncate(self.projects.len());
        for (p, slot) in self.projects.iter().enumerate() {
            let caps = (0..m).map(|r| {
                if slot.accounts[r].accrue {
                    instances_of(slot.running_units[r] + slot.pending_units[r])
                } else {
                    0.0
                }
            });
            if let Some(d) = demands.get_mut(p) {
                d.share = slot.share;
                d.caps.clear();
                d.caps.extend(caps);
            } else {
                demands.push(Demand {
                    share: slot.share,
                    caps: caps.collect(),
                });
            }
        }
        // Most changes only narrow what the last division was made for: its targets then
        // stand, or are split again (`narrowed`), and a busy endpoint divides again far
        // less often.
        let now: Vec<&[f64]> = self.projects.iter().map(|s| s.target.as_slice()).collect();
        let kept = match &self.divided {
            Some((res, dem)) => self
                .divider
                .narrowed((res, dem), (&capacities, &demands), &now),
            None => Err(Afresh::Changed),
        };
        // What each division was, for counting them (benches/forecast.rs with
        // `BENCH_DIVISIONS`); with nothing listening this costs one check of a static.
        tracing::trace!(target: "gpuboard::division", outcome = match &kept {
            Ok(Narrowed::Stands) => "stands",
            Ok(Narrowed::Split(_)) => "split again",
            Err(Afresh::Changed) => "afresh: projects, types, shares or speeds changed",
            Err(Afresh::TypeGrew(_)) => "afresh: a type grew",
            Err(Afresh::CapGrew(p, r)) => match self.divided.as_ref().and_then(|(_, d)| d.get(*p)?.caps.get(*r)) {
                Some(&c) if c <= 0.0 => "afresh: a cap grew from 0",
                _ => "afresh: a cap grew",
            },
            Err(Afresh::NotCarried { own: true }) => "afresh: a project's caps below its part",
            Err(Afresh::NotCarried { own: false }) => "afresh: the types cannot carry the parts",
        });
        let division = match kept {
            Ok(Narrowed::Stands) => None,
            Ok(Narrowed::Split(division)) => Some(division),
            Err(_) => Some(self.divider.targets(&capacities, &demands)),
        };
        for (slot, row) in self.projects.iter_mut().zip(division.into_iter().flatten()) {
            slot.target = row;
        }
        if let Some(last) = self.divided.replace((capacities, demands)) {
            self.spare = last;
        }
        self.stale = false;
    }

    /// A project's debts over all resource types, weighted by their speed.
    pub(super) fn overall_debt(&self, p: usize) -> Gflop {
        let slot = &self.projects[p];
        Gflop(
            slot.accounts
                .iter()
                .zip(&self.resources)
                .map(|(a, res)| a.ltd.0 * res.speed.gflops())
                .sum(),
        )
    }
}
