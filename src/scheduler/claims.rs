//! Claims: what one is, submitting, releasing and moving them, and how the snapshot
//! shows one.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Change, Scheduler, accounting};
use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::placement::{Allocation, MoveError, MoveTarget, NoFit};
use crate::request::ClaimRequest;
use crate::snapshot::{ClaimState, ClaimView};

/// A claim: its request, where it is (or why it waits), and its lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// Id, stable across moves and restarts.
    pub id: ClaimId,
    /// The validated request, with its original form.
    pub request: ClaimRequest,
    /// Where it is, when placed.
    pub allocation: Option<Allocation>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When its lease runs out, if it has a `ttl`.
    pub lease_expires_at: Option<Timestamp>,
    /// Why it waits (latest reasons), when pending.
    #[serde(default)]
    pub pending: Option<NoFit>,
    /// When it was last placed (a move keeps it): how long it has held its devices,
    /// which the forecast weighs against the hold times of claims like it. Claims stored
    /// before it was kept read `None` and count from `created_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_at: Option<Timestamp>,
}

impl Claim {
    /// Placed or pending.
    pub fn state(&self) -> ClaimState {
        if self.allocation.is_some() {
            ClaimState::Placed
        } else {
            ClaimState::Pending
        }
    }
}

/// What happened to a submitted claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Placed now.
    Placed(Claim),
    /// Queued: it asked to wait and does not fit now.
    Pending(Claim),
    /// Refused: it does not fit now (and did not ask to wait) or can never fit.
    Refused(NoFit),
    /// Refused: it would wait, but its project's share is 0, so it would never run.
    ShareZero(ShareZero),
}

/// A claim that would wait in the queue of a project whose share is 0. Work fetch gives
/// such a project nothing, so the claim would wait forever: it is refused, saying how to
/// change the share, rather than accepted as pending for good.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "project `{project}` has share 0, so a waiting claim of it would never run (work fetch \
     gives a share-0 project nothing); give the project a share first (`gpuboard project set \
     {project} --share 100`, or PUT /v1/projects/{project} with {{\"share\": 100}}), or \
     claim without waiting to take only what is free now"
)]
pub struct ShareZero {
    /// The project.
    pub project: String,
}

impl Scheduler {
    /// Places a claim, queues it (if it asked to wait), or refuses it with reasons.
    ///
    /// A claim that asked to wait joins its project's queue whenever others are already
    /// waiting, even if it would fit: work fetch, not arrival order, decides who goes
    /// next. A claim that did not ask to wait is placed at once if it fits.
    pub fn submit(&mut self, req: ClaimRequest, actor: &str, now: Timestamp) -> Submitted {
        let id = self.next_id;
        // The waiting list, not a walk of every claim: a submit costs the same at 20 000.
        let queue_busy = req.wait && !self.waiting().is_empty();
        let placed = if queue_busy {
            self.fleet.plan(&req).map(|_| None)
        } else {
            self.fleet.claim(id, &req).map(Some)
        };
        let (allocation, pending) = match placed {
            Ok(Some(a)) => (Some(a), None),
            Ok(None) => (None, None),
            Err(no) if req.wait && !no.infeasible => (None, Some(no)),
            Err(no) => return Submitted::Refused(no),
        };
        if allocation.is_none() && self.share(&req.project) == 0 {
            return Submitted::ShareZero(ShareZero {
                project: req.project,
            });
        }
        match &allocation {
            Some(a) => accounting::record_placed(&mut self.ledger, &self.fleet, now, id, &req, a),
            None => {
                if !accounting::record_pending(&mut self.ledger, &self.fleet, now, id, &req) {
                    return Submitted::Refused(pending.unwrap_or_else(|| NoFit {
                        infeasible: true,
                        nodes: Vec::new(),
                        fleet: None,
                    }));
                }
            }
        }
        self.next_id = self.next_id.next();
        let claim = Claim {
            id,
            lease_expires_at: req.ttl.map(|t| now.plus_secs(t)),
            request: req,
            placed_at: allocation.as_ref().map(|_| now),
            allocation,
            created_at: now,
            pending,
        };
        let detail = match &claim.allocation {
            Some(a) => format!("{} placed at {a}", claim.request.describe()),
            None => format!("{} pending", claim.request.describe()),
        };
        let detail = format!("{detail}; {}", claim.request.whose());
        self.due.note(&claim);
        self.claims.insert(id, Arc::new(claim.clone()));
        self.journal.push(Change::Claim(Box::new(claim.clone())));
        self.audit(now, actor, "claim", format!("claim {id}"), detail);
        if claim.allocation.is_some() {
            return Submitted::Placed(claim);
        }
        // Work fetch may take it (or another waiting claim) right away.
        self.place_pending(now);
        match self.claims.get(&id) {
            Some(c) if c.allocation.is_some() => Submitted::Placed(Claim::clone(c)),
            Some(c) => Submitted::Pending(Claim::clone(c)),
            None => Submitted::Pending(claim),
        }
    }

    /// Releases a claim, placed or pending. Idempotent: an unknown id returns `None`.
    pub fn release(&mut self, id: ClaimId, actor: &str, now: Timestamp) -> Option<Claim> {
        self.remove(id, actor, "release", "released", now)
    }

    /// Takes a claim out of placement, the ledger and the claims, and audits why.
    pub(super) fn remove(
        &mut self,
        id: ClaimId,
        actor: &str,
        action: &str,
        why: &str,
        now: Timestamp,
    ) -> Option<Claim> {
        let claim = Arc::unwrap_or_clone(self.claims.remove(&id)?);
        self.due.forget(&claim);
        self.fleet.release(id);
        self.ledger.released(now, id);
        self.journal.push(Change::ClaimRemoved(id));
        let place = claim
            .allocation
            .as_ref()
            .map_or("pending".to_string(), ToString::to_string);
        self.audit(
            now,
            actor,
            action,
            format!("claim {id}"),
            format!("{why} ({place}); {}", claim.request.whose()),
        );
        Some(claim)
    }
    /// Moves a placed claim atomically; it keeps its id. On failure nothing changes.
    pub fn move_claim(
        &mut self,
        id: ClaimId,
        target: &MoveTarget,
        actor: &str,
        now: Timestamp,
    ) -> Result<Claim, MoveError> {
        let Some(claim) = self.claims.get(&id) else {
            return Err(MoveError::UnknownClaim(id));
        };
        if claim.allocation.is_none() {
            return Err(MoveError::NothingToMove(id));
        }
        let old = claim.allocation.clone();
        let new = self.fleet.move_claim(id, target)?;
        let Some(claim) = self.claims.get_mut(&id).map(Arc::make_mut) else {
            return Err(MoveError::UnknownClaim(id));
        };
        claim.allocation = Some(new.clone());
        let claim = claim.clone();
        // The claim may now hold another model, or another amount of it.
        self.ledger.released(now, id);
        accounting::record_placed(&mut self.ledger, &self.fleet, now, id, &claim.request, &new);
        self.journal.push(Change::Claim(Box::new(claim.clone())));
        let from = old.map_or_else(String::new, |a| a.to_string());
        self.audit(
            now,
            actor,
            "move",
            format!("claim {id}"),
            format!("moved from {from} to {new}; {}", claim.request.whose()),
        );
        Ok(claim)
    }
}

/// A claim as the snapshot shows it.
pub fn claim_view(c: &Claim) -> ClaimView {
    let alloc = c.allocation.as_ref();
    ClaimView {
        id: c.id,
        name: None,
        state: c.state(),
        project: c.request.project.clone(),
        holder: c.request.holder.clone(),
        form: c.request.describe(),
        request: c.request.clone(),
        node: alloc.map(|a| a.node.clone()),
        shares: alloc.map(|a| a.shares.clone()).unwrap_or_default(),
        memory_reserved: alloc.map(Allocation::memory).unwrap_or_default(),
        compute_reserved: alloc.map(Allocation::compute).unwrap_or_default(),
        memory_used: None,
        over_limit: false,
        idle: false,
        created_at: c.created_at,
        lease_expires_at: c.lease_expires_at,
        pending_reasons: c.pending.as_ref().map(NoFit::lines).unwrap_or_default(),
        infeasible: c.pending.as_ref().is_some_and(|p| p.infeasible),
    }
}
