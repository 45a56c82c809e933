//! Leases and owners: renewing a lease, and time passing (expired leases and claims
//! whose local owning process is gone are released).

use super::{Change, Claim, LEDGER_SAVE_MS, Scheduler};
use crate::clock::Timestamp;
use crate::ids::ClaimId;

/// Why a renewal was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RenewError {
    /// No such claim.
    #[error("no claim {0}")]
    UnknownClaim(ClaimId),
    /// The claim has no lease and no ttl was given.
    #[error("claim {0} has no lease to renew; give a ttl to start one")]
    NoLease(ClaimId),
}

impl Scheduler {
    /// Extends a lease by `ttl` seconds from now (or by the claim's own ttl).
    pub fn renew(
        &mut self,
        id: ClaimId,
        ttl: Option<u64>,
        actor: &str,
        now: Timestamp,
    ) -> Result<Claim, RenewError> {
        let claim = self
            .claims
            .get_mut(&id)
            .ok_or(RenewError::UnknownClaim(id))?;
        let ttl = ttl.or(claim.request.ttl).ok_or(RenewError::NoLease(id))?;
        claim.request.ttl = Some(ttl);
        claim.lease_expires_at = Some(now.plus_secs(ttl));
        let claim = claim.clone();
        self.journal.push(Change::Claim(Box::new(claim.clone())));
        self.audit(
            now,
            actor,
            "renew",
            format!("claim {id}"),
            format!("lease extended by {ttl} s"),
        );
        Ok(claim)
    }

    /// Time passes: leases expire, claims of dead local owners are released, and
    /// pending claims are placed where they now fit.
    pub fn tick(&mut self, now: Timestamp, owner_alive: &dyn Fn(u32) -> bool) {
        let expired: Vec<ClaimId> = self
            .claims
            .values()
            .filter(|c| c.lease_expires_at.is_some_and(|t| t <= now))
            .map(|c| c.id)
            .collect();
        for id in expired {
            self.remove(id, "lease", "expire", "lease expired, released", now);
        }
        let orphaned: Vec<ClaimId> = self
            .claims
            .values()
            .filter(|c| c.request.pid.is_some_and(|p| !owner_alive(p)))
            .map(|c| c.id)
            .collect();
        for id in orphaned {
            self.remove(
                id,
                "owner-check",
                "owner-gone",
                "owning process is gone, released",
                now,
            );
        }
        self.ledger.tick(now);
        self.place_pending(now);
        if self
            .ledger_saved_at
            .is_none_or(|t| now.millis_since(t) >= LEDGER_SAVE_MS || t > now)
        {
            self.save_ledger(now);
        }
    }
}
