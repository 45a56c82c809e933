//! Leases and owners: renewing a lease, and time passing. A lease that runs out while its
//! claim's local owner (the process named by the claim's `pid`, with every process it
//! started: see `endpoint::owners`) still runs is extended, not expired: the work is still
//! using the devices. A claim is released when its lease runs out and it has no live
//! owner, or as soon as the last process of its owner is gone.

use std::sync::Arc;

use super::{Change, Claim, LEDGER_IDLE_SAVE_MS, LEDGER_SAVE_MS, Scheduler};
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

/// What is known of a claim's owner on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerState {
    /// The claim names no local process.
    None,
    /// The owner, or a process it started, still runs.
    Alive,
    /// The owner and every process it started have ended.
    Gone,
}

/// What a tick does to one claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseVerdict {
    /// Nothing.
    Keep,
    /// Its lease ran out while its owner runs: extended to `until`.
    Extend {
        /// The new end of the lease.
        until: Timestamp,
    },
    /// Its lease ran out and it has no owner here: released.
    Expire,
    /// Its owner's last process ended: released.
    OwnerGone,
}

/// The decision for one claim at `now`: a gone owner releases it whatever its lease says;
/// a lease that ran out is extended by `ttl` (at least a second) while the owner runs, and
/// expires when there is none.
pub fn verdict(
    expires_at: Option<Timestamp>,
    ttl: Option<u64>,
    owner: OwnerState,
    now: Timestamp,
) -> LeaseVerdict {
    let ran_out = expires_at.is_some_and(|t| t <= now);
    match owner {
        OwnerState::Gone => LeaseVerdict::OwnerGone,
        OwnerState::Alive if ran_out => LeaseVerdict::Extend {
            until: now.plus_secs(ttl.unwrap_or(1).max(1)),
        },
        OwnerState::None if ran_out => LeaseVerdict::Expire,
        OwnerState::Alive | OwnerState::None => LeaseVerdict::Keep,
    }
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
        let claim = self.claims.get(&id).ok_or(RenewError::UnknownClaim(id))?;
        let ttl = ttl.or(claim.request.ttl).ok_or(RenewError::NoLease(id))?;
        let asked = now.plus_secs(ttl);
        // A renewal never shortens a lease: an operator renewing for 100 s a claim with
        // 54 minutes left means "at least 100 s more", not "end in 100 s".
        if let Some(end) = claim.lease_expires_at.filter(|end| *end > asked) {
            let claim = Claim::clone(claim);
            self.audit(
                now,
                actor,
                "renew",
                format!("claim {id}"),
                format!(
                    "lease kept: it runs {} s more, past the {ttl} s asked",
                    end.millis_since(now) / 1000
                ),
            );
            return Ok(claim);
        }
        // Copied here only while a forward copy shares it.
        let Some(claim) = self.claims.get_mut(&id).map(Arc::make_mut) else {
            return Err(RenewError::UnknownClaim(id));
        };
        self.due.forget(claim);
        claim.request.ttl = Some(ttl);
        claim.lease_expires_at = Some(asked);
        self.due.note(claim);
        let claim = claim.clone();
        self.journal.push(Change::Claim(Box::new(claim.clone())));
        self.audit(
            now,
            actor,
            "renew",
            format!("claim {id}"),
            format!("lease renewed: it ends in {ttl} s"),
        );
        Ok(claim)
    }

    /// Time passes: leases run out (extended while their owner's processes run, else
    /// released), claims whose owner's last process ended are released, and pending claims
    /// are placed where they now fit. `owner_alive` is asked only about claims with a pid.
    /// Only the claims that are due are looked at: leases that ran out, and claims with
    /// an owner.
    pub fn tick(&mut self, now: Timestamp, owner_alive: &dyn Fn(u32) -> bool) {
        let verdicts: Vec<(ClaimId, Option<u32>, LeaseVerdict)> = self
            .due_at(now)
            .iter()
            .filter_map(|id| self.claims.get(id))
            .map(|c| {
                let owner = match c.request.pid {
                    None => OwnerState::None,
                    Some(p) if owner_alive(p) => OwnerState::Alive,
                    Some(_) => OwnerState::Gone,
                };
                let v = verdict(c.lease_expires_at, c.request.ttl, owner, now);
                (c.id, c.request.pid, v)
            })
            .filter(|(_, _, v)| *v != LeaseVerdict::Keep)
            .collect();
        for (id, pid, v) in verdicts {
            let pid = pid.unwrap_or_default();
            match v {
                LeaseVerdict::Keep => {}
                LeaseVerdict::Extend { until } => self.extend(id, pid, until, now),
                LeaseVerdict::Expire => {
                    self.remove(id, "lease", "expire", "lease expired, released", now);
                }
                LeaseVerdict::OwnerGone => {
                    self.remove(
                        id,
                        "owner-check",
                        "owner-gone",
                        &format!(
                            "the last process of its owner (pid {pid} and what it started) \
                             ended, released"
                        ),
                        now,
                    );
                }
            }
        }
        self.ledger.tick(now);
        self.place_pending(now);
        let saved = self.ledger_saved_at.map(|(t, _)| t);
        if self.ledger_due().is_none_or(|due| now >= due) || saved.is_some_and(|t| t > now) {
            self.save_ledger(now);
        }
    }

    /// Until when a tick would find nothing to do: `None` while every tick may (claims
    /// wait, or have a local owner); else the first lease to run out or the next save of
    /// the ledger, whichever comes first. A timer that ticks no earlier than this, and at
    /// least then, leaves the state as ticking every second would.
    pub fn idle_until(&self) -> Option<Timestamp> {
        if self.due.every_tick() {
            return None;
        }
        let save = self.ledger_due()?;
        Some(self.due.first_lease().map_or(save, |lease| lease.min(save)))
    }

    /// When the ledger is next saved: 30 s after the last save, or 10 minutes while
    /// nothing was revised since (`None`: never saved, at the next tick).
    fn ledger_due(&self) -> Option<Timestamp> {
        let (t, revision) = self.ledger_saved_at?;
        let wait = if revision == self.revision {
            LEDGER_IDLE_SAVE_MS
        } else {
            LEDGER_SAVE_MS
        };
        Some(t.plus_millis(wait))
    }

    /// The claims a tick at `now` must decide about, in id order.
    fn due_at(&self, now: Timestamp) -> Vec<ClaimId> {
        #[cfg(test)]
        if self.reference {
            return self.claims.keys().copied().collect();
        }
        self.due.at(now)
    }

    /// Extends a lease on behalf of its owner's running processes, audited.
    fn extend(&mut self, id: ClaimId, pid: u32, until: Timestamp, now: Timestamp) {
        let Some(claim) = self.claims.get_mut(&id).map(Arc::make_mut) else {
            return;
        };
        self.due.forget(claim);
        claim.lease_expires_at = Some(until);
        self.due.note(claim);
        let claim = claim.clone();
        self.journal.push(Change::Claim(Box::new(claim)));
        self.audit(
            now,
            "owner-check",
            "lease-extended",
            format!("claim {id}"),
            format!(
                "lease ran out while processes of its owner (pid {pid} and what it started) \
                 still run; extended by {} s",
                until.millis_since(now) / 1000
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp(1_000_000);

    #[test]
    fn a_lease_that_ran_out_follows_its_owner() {
        let at = T0.plus_secs(6);
        // Before it runs out nothing happens, owner or not.
        for owner in [OwnerState::None, OwnerState::Alive] {
            assert_eq!(verdict(Some(at), Some(6), owner, T0), LeaseVerdict::Keep);
        }
        // Ran out: extended by its ttl while the owner runs, expired without an owner.
        assert_eq!(
            verdict(Some(at), Some(6), OwnerState::Alive, at),
            LeaseVerdict::Extend {
                until: at.plus_secs(6)
            }
        );
        assert_eq!(
            verdict(Some(at), Some(6), OwnerState::None, at.plus_secs(1)),
            LeaseVerdict::Expire
        );
        // A gone owner releases at once, lease or none.
        assert_eq!(
            verdict(Some(at), Some(6), OwnerState::Gone, T0),
            LeaseVerdict::OwnerGone
        );
        assert_eq!(
            verdict(None, None, OwnerState::Gone, T0),
            LeaseVerdict::OwnerGone
        );
        // No lease: nothing to run out.
        assert_eq!(
            verdict(None, None, OwnerState::Alive, at),
            LeaseVerdict::Keep
        );
        // A ttl of 0 still moves the end forward.
        assert_eq!(
            verdict(Some(at), Some(0), OwnerState::Alive, at),
            LeaseVerdict::Extend {
                until: at.plus_secs(1)
            }
        );
    }

    #[test]
    fn a_claim_is_held_while_its_owner_runs_past_its_ttl_and_released_after() {
        use crate::request::ClaimRequest;
        use crate::scheduler::SchedulerConfig;
        use std::cell::Cell;
        let mut s = Scheduler::new(
            SchedulerConfig::default(),
            vec![crate::inventory::a100_node("a", 1)],
        )
        .unwrap();
        let req =
            ClaimRequest::from_json(&serde_json::json!({"num_gpus": 0.5, "ttl": 6, "pid": 4242}))
                .unwrap();
        s.submit(req, "op", T0);
        let id = ClaimId(1);
        let alive = Cell::new(true);
        let owner = |pid: u32| pid == 4242 && alive.get();
        // Far past the ttl, ticking each second: still held while the owner runs.
        for sec in 1..=30 {
            s.tick(T0.plus_secs(sec), &owner);
            assert!(s.claim(id).is_some(), "held at {sec} s");
        }
        alive.set(false);
        s.tick(T0.plus_secs(31), &owner);
        assert!(
            s.claim(id).is_none(),
            "released once the last process ended"
        );
        let events = s.snapshot(T0.plus_secs(31)).events;
        let extended = events
            .iter()
            .filter(|e| e.action == "lease-extended")
            .count();
        assert_eq!(extended, 5, "once per ttl that ran out: {events:?}");
        let gone = events.iter().find(|e| e.action == "owner-gone").unwrap();
        assert!(gone.detail.contains("last process"), "{gone:?}");
        assert!(!events.iter().any(|e| e.action == "expire"), "{events:?}");
    }
}
