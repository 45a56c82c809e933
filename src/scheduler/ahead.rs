//! Copies run forward: the forecast and the preview take a copy of the scheduler and step
//! it on a simulated clock with the same code a tick runs (work fetch, placement, the
//! ledger), so what they say is what this scheduler would do, not what a second model of
//! it guesses.

use super::{Change, Scheduler};
use crate::clock::Timestamp;
use crate::fairshare::FairShareView;
use crate::ids::ClaimId;

impl Scheduler {
    /// A copy of the whole state to run forward. It journals, audits and explains nothing
    /// (none of it is kept): only what it places and where.
    #[must_use]
    pub fn forward_copy(&self) -> Scheduler {
        // Field by field, leaving out the audit events and the journal (not cloned only to
        // be cleared: a forecast makes three copies).
        let Scheduler {
            config,
            fleet,
            claims,
            shares,
            events: _,
            revision,
            next_id,
            journal: _,
            ledger,
            rng,
            ledger_saved_at,
            reasons_at,
            due,
            fits_seen,
            copy: _,
            #[cfg(test)]
            reference,
        } = self;
        Scheduler {
            config: config.clone(),
            fleet: fleet.clone(),
            claims: claims.clone(),
            shares: shares.clone(),
            events: std::collections::VecDeque::new(),
            revision: *revision,
            next_id: *next_id,
            journal: Vec::new(),
            ledger: ledger.clone(),
            rng: rng.clone(),
            ledger_saved_at: *ledger_saved_at,
            reasons_at: *reasons_at,
            due: due.clone(),
            fits_seen: fits_seen.clone(),
            copy: true,
            #[cfg(test)]
            reference: *reference,
        }
    }

    /// A copy that behaves exactly as this scheduler does, journal and reasons included:
    /// what a preview applies an action to.
    #[must_use]
    pub fn exact_copy(&self) -> Scheduler {
        let mut copy = self.clone();
        copy.journal.clear();
        copy
    }

    /// Time passes on a forward copy: the claims in `ending` end (as a release would take
    /// them out: placement, ledger, claims), the ledger accrues to `now`, and work fetch
    /// runs as a tick runs it. Answers the claims placed since the last step (a submit to
    /// the copy places some too), in the order placed.
    pub fn advance(&mut self, now: Timestamp, ending: &[ClaimId]) -> Vec<ClaimId> {
        let mut freed: Vec<String> = Vec::new();
        for &id in ending {
            if let Some(claim) = self.claims.remove(&id) {
                self.due.forget(&claim);
                self.fleet.release(id);
                self.ledger.released(now, id);
                if let Some(a) = &claim.allocation
                    && !freed.contains(&a.node)
                {
                    freed.push(a.node.clone());
                }
            }
        }
        // Work fetch places only claims that fit: when no waiting claim fits what the
        // step freed, it would place nothing and back no one off, so it is skipped (most
        // holder ends of a busy endpoint free less than any waiting claim needs). Claims
        // that fitted before and were passed over wait on a backoff, whose end is a step
        // of its own (`ending` empty: the whole fleet is asked). The targets are divided
        // when work fetch runs; the endpoint divides on every tick, which moves debts only
        // by how the targets changed between two such steps.
        let nodes = (!ending.is_empty()).then_some(freed.as_slice());
        if self.any_waiting_fits(nodes) {
            self.ledger.tick(now);
            self.place_pending(now);
        }
        let placed = placed_in(&self.journal);
        self.journal.clear();
        placed
    }

    /// Whether some waiting claim fits the fleet now, on one of `nodes` when given (asked
    /// once per form of the waiting claims).
    fn any_waiting_fits(&self, nodes: Option<&[String]>) -> bool {
        self.due.one_per_form().any(|id| {
            let Some(c) = self.claims.get(&id) else {
                return false;
            };
            match nodes {
                None => self.fleet.fits_on(&c.request, None),
                Some(nodes) => nodes.iter().any(|n| {
                    c.request.node.as_ref().is_none_or(|pin| pin == n)
                        && self.fleet.fits_at(&c.request, n)
                }),
            }
        })
    }

    /// The claims waiting for devices, in id order.
    pub fn waiting_claims(&self) -> Vec<ClaimId> {
        self.waiting().iter().copied().collect()
    }

    /// When the next backoff of a project with waiting work ends: work fetch may then
    /// place what it passed over.
    pub fn next_wakeup(&self, now: Timestamp) -> Option<Timestamp> {
        self.ledger.next_wakeup(now)
    }

    /// The fair-share ledger as the snapshot shows it (debts, shares, reasons) at `now`.
    pub fn ledger_view(&self, now: Timestamp) -> FairShareView {
        self.ledger.view(now)
    }

    /// The journal so far, without taking it (a preview reads what its action did).
    pub fn pending_changes(&self) -> &[Change] {
        &self.journal
    }
}

/// The claims a journal shows placed, in order (a claim stored with an allocation that was
/// placed by work fetch or a submit).
fn placed_in(journal: &[Change]) -> Vec<ClaimId> {
    journal
        .iter()
        .filter_map(|c| match c {
            Change::Claim(claim) if claim.allocation.is_some() => Some(claim.id),
            _ => None,
        })
        .collect()
}
