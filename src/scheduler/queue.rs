//! The pending queue: work fetch places waiting claims (the ledger picks whose turn it
//! is and on which resource type, placement finds the devices), and the claims still
//! waiting are told why.

use std::sync::Arc;

use super::due::Due;
use super::forms::FitsSeen;
use super::{Change, Claim, Scheduler, accounting};
use crate::clock::Timestamp;
use crate::fairshare::{self, PendingClaim, ResourceId};
use crate::ids::ClaimId;
use crate::placement::{Fleet, NoFit};
use crate::request::ClaimRequest;
use crate::shared::{SharedMap, SharedSet};
use crate::units::Units;

/// How one round of work fetch ended.
enum Round {
    /// A claim was placed.
    Placed,
    /// The chosen claim could not be taken; try again.
    Skipped,
    /// Nothing more can be placed now.
    Done,
}

impl Scheduler {
    /// Work fetch: the ledger picks which project's claim goes next on which resource
    /// type; placement finds the devices. A large claim that does not fit never holds
    /// back smaller ones (the ledger passes over it). Then the reasons of those still
    /// waiting are brought up to date.
    pub(super) fn place_pending(&mut self, now: Timestamp) {
        let waiting = self.waiting().len();
        let mut placed_any = false;
        // Each round places one claim; the bound guards against a ledger and a placement that disagree.
        for _ in 0..waiting {
            match self.place_next(now) {
                Round::Placed => placed_any = true,
                Round::Skipped => {}
                Round::Done => break,
            }
        }
        self.audit_ledger_events();
        // A waiting claim's reasons depend only on its request and the fleet: skip the
        // work (one explanation per distinct waiting request) while the fleet is as it
        // was when they were last worked out; revisions that only touch claims' records,
        // shares or leases leave them as they are.
        let at = self.reasons_key();
        if self.reasons_at != Some(at) && !self.copy {
            self.reasons_at = Some(at);
            self.refresh_reasons();
        }
        if placed_any {
            self.save_ledger(now);
        }
    }

    /// One work-fetch decision, carried out.
    fn place_next(&mut self, now: Timestamp) -> Round {
        #[cfg(test)]
        let reference = self.reference;
        #[cfg(not(test))]
        let reference = false;
        let mut fits = Fits {
            claims: &self.claims,
            fleet: &self.fleet,
            due: &self.due,
            seen: &mut self.fits_seen,
            reference,
        };
        let Some(fetch) = self.ledger.work_fetch(now, &mut fits, &mut self.rng.0) else {
            return Round::Done;
        };
        let id = fetch.claim;
        let Some(req) = self.claims.get(&id).map(|c| &c.request) else {
            self.ledger.released(now, fetch.claim);
            return Round::Skipped;
        };
        let Ok(alloc) = self.fleet.claim_on(id, req, fetch.resource.model()) else {
            return Round::Done;
        };
        accounting::record_placed(&mut self.ledger, &self.fleet, now, id, req, &alloc);
        let Some(claim) = self.claims.get_mut(&id).map(Arc::make_mut) else {
            return Round::Skipped;
        };
        self.due.forget(claim);
        claim.allocation = Some(alloc.clone());
        claim.placed_at = Some(now);
        claim.pending = None;
        self.due.note(claim);
        let claim = claim.clone();
        self.journal.push(Change::Claim(Box::new(claim)));
        if self.copy {
            self.audit(now, "scheduler", "place", String::new(), String::new());
            return Round::Placed;
        }
        let whose = self
            .claims
            .get(&id)
            .map(|c| c.request.whose())
            .unwrap_or_default();
        let trigger = match fetch.trigger {
            fairshare::Trigger::Idle => "idle",
            fairshare::Trigger::Shortfall => "shortfall",
        };
        self.audit(
            now,
            "scheduler",
            "place",
            format!("claim {id}"),
            format!(
                "work fetch ({trigger} {}) placed it at {alloc}; {whose}",
                fetch.resource
            ),
        );
        Round::Placed
    }

    /// The ledger's own events (backoffs, resets), as audit lines.
    fn audit_ledger_events(&mut self) {
        for event in self.ledger.drain_events() {
            // A copy keeps no audit: its events only count revisions.
            let detail = if self.copy {
                String::new()
            } else {
                serde_json::to_string(&event.kind).unwrap_or_default()
            };
            self.audit(
                event.at,
                "fairshare",
                "fairshare",
                "ledger".to_string(),
                detail,
            );
        }
    }

    /// The claims without an allocation, in id order.
    pub(super) fn waiting(&self) -> std::borrow::Cow<'_, SharedSet<ClaimId>> {
        #[cfg(test)]
        if self.reference {
            return std::borrow::Cow::Owned(
                self.claims
                    .values()
                    .filter(|c| c.allocation.is_none())
                    .map(|c| c.id)
                    .collect(),
            );
        }
        std::borrow::Cow::Borrowed(self.due.waiting())
    }

    /// What waiting claims' reasons were last worked out at: the fleet's generation (the
    /// reference mode of the tests: the revision, as before).
    pub(super) fn reasons_key(&self) -> u64 {
        #[cfg(test)]
        if self.reference {
            return self.revision;
        }
        self.fleet.generation()
    }

    /// Works out again where each waiting claim cannot go: once per distinct placement
    /// request (queues are mostly many claims of a few shapes), each answer shared.
    pub(super) fn refresh_reasons(&mut self) {
        let waiting: Vec<ClaimId> = self.waiting().iter().copied().collect();
        #[cfg(test)]
        let share = !self.reference;
        #[cfg(not(test))]
        let share = true;
        let mut seen: Vec<(ClaimId, Option<NoFit>)> = Vec::new();
        for id in waiting {
            let Some(claim) = self.claims.get(&id) else {
                continue;
            };
            let same = seen.iter().filter(|_| share).find(|(other, _)| {
                self.claims
                    .get(other)
                    .is_some_and(|o| same_placement(&o.request, &claim.request))
            });
            let reasons = if let Some((_, reasons)) = same {
                reasons.clone()
            } else {
                let reasons = self.fleet.plan(&claim.request).err();
                seen.push((id, reasons.clone()));
                reasons
            };
            if let Some(claim) = self.claims.get_mut(&id)
                && claim.pending != reasons
            {
                Arc::make_mut(claim).pending = reasons;
            }
        }
    }
}

/// Whether a waiting claim fits on a resource type, as work fetch asks placement.
struct Fits<'a> {
    claims: &'a SharedMap<ClaimId, Arc<Claim>>,
    fleet: &'a Fleet,
    due: &'a Due,
    seen: &'a mut FitsSeen,
    /// Tests: work out every fit afresh, claim by claim.
    reference: bool,
}

impl fairshare::Fit for Fits<'_> {
    fn fits(&mut self, c: &PendingClaim, r: &ResourceId, _: Units) -> bool {
        let Some(claim) = self.claims.get(&c.id) else {
            return false;
        };
        if self.reference {
            return self.fleet.plan_on(&claim.request, r.model()).is_ok();
        }
        let fleet = self.fleet;
        self.seen
            .fits(fleet.generation(), &claim.request, r.model(), || {
                fleet.fits_on(&claim.request, r.model())
            })
    }

    /// One question per form of the waiting claims, on any model.
    fn nothing_fits(&mut self) -> bool {
        if self.reference {
            return false;
        }
        let fleet = self.fleet;
        !self.due.one_per_form().any(|id| {
            self.claims.get(&id).is_some_and(|c| {
                self.seen.fits(fleet.generation(), &c.request, None, || {
                    fleet.fits_on(&c.request, None)
                })
            })
        })
    }
}

/// Whether two requests ask placement the same thing (so their reasons are the same).
pub(super) fn same_placement(a: &ClaimRequest, b: &ClaimRequest) -> bool {
    a.gpu == b.gpu
        && a.accelerator_type == b.accelerator_type
        && a.cpus == b.cpus
        && a.node == b.node
        && a.devices == b.devices
}
