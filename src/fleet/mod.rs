//! The protocol of one claim sent across several endpoints, as the CLI (`gpuboard claim`
//! and `gpuboard move` with several `--endpoint`s) and the console (the claim form, a move
//! across sources) both follow it. Plain Rust, no I/O: the front ends make the calls
//! through [`Endpoint`] and say what happened in their own words.
//!
//! - **Attempt keys.** Every claim sent across the fleet carries one attempt label
//!   ([`new_attempt`], `placement::AttemptId`) and each send an idempotency key, so an
//!   endpoint whose answer was lost can be asked what it did.
//! - **Answers.** A front end's answer reads as a [`Reply`] (trait [`ClaimAnswer`]);
//!   `placement::decide_attempt` says what comes next.
//! - **Lost and in-flight answers.** An endpoint that did not answer, or answered "in
//!   flight", is sent the same claim with the same key again ([`reask`], paced by
//!   [`Reask`]) until it says what it did or the time passes. The endpoint runs a key's
//!   request once, so asking again never books twice.
//! - **Settling.** One still silent is a [`Lost`] claim. Once the claim landed elsewhere
//!   (or nowhere) it is asked once more, and [`Lost::settled`] says what its answer means:
//!   the claim found there is the answer, or a copy to release, or nothing is there, or it
//!   may hold a phantom until its lease ends.
//! - **Ranking.** The members that could take a claim, best first ([`rank_members`]):
//!   by the policy asked for, else spread when every member spreads and binpack otherwise.
//! - **Move ids.** A move between endpoints tags both its steps with one id
//!   ([`new_move_id`]), which both endpoints audit (`wire::move_actor`).

mod ids;
mod lost;
mod reask;

use std::future::Future;
use std::time::{Duration, Instant};

pub use ids::{move_id, new_attempt, new_move_id};
pub use lost::{Lost, Settled, settle};
pub use reask::{Again, Reask, reask};

use crate::placement::{AttemptAnswer, AttemptRecheck, Fleet, HostRanking, Policy, rank_hosts};
use crate::request::ClaimRequest;
use crate::snapshot::ClaimView;

/// The members (each one's capacity as a [`Fleet`]) that could take `request`, best first,
/// and the policy used: `policy` when asked for, else spread when every member spreads and
/// binpack otherwise (one binpacking member would be emptied by spreading across it).
pub fn rank_members(
    members: &[&Fleet],
    request: &ClaimRequest,
    policy: Option<Policy>,
) -> (HostRanking, Policy) {
    let policy = policy.unwrap_or_else(|| {
        if members.iter().all(|f| f.policy() == Policy::Spread) {
            Policy::Spread
        } else {
            Policy::Binpack
        }
    });
    (rank_hosts(members, request, policy), policy)
}

/// An endpoint's answer to a claim, as the protocol reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reply<'a> {
    /// It placed or queued the claim: this one.
    Claim(&'a ClaimView),
    /// It answered, but with something other than a claim.
    Other,
    /// It does not fit there now (409): the next may take it.
    Refused,
    /// An earlier send with the key is still being committed there.
    InFlight,
    /// No connection was made: nothing was sent.
    NotSent,
    /// No answer came, though the request may have gone out.
    NoAnswer,
    /// Any other error: every endpoint would answer it alike.
    Failed,
}

impl Reply<'_> {
    /// The decision table's view of it (`placement::decide_attempt`).
    pub fn attempt(&self) -> AttemptAnswer {
        match self {
            Reply::Claim(_) | Reply::Other => AttemptAnswer::Answered,
            Reply::Refused => AttemptAnswer::Refused,
            Reply::InFlight => AttemptAnswer::InFlight,
            Reply::NotSent => AttemptAnswer::NotSent,
            Reply::NoAnswer => AttemptAnswer::NoAnswer,
            Reply::Failed => AttemptAnswer::Failed,
        }
    }

    /// Whether it leaves open whether the endpoint placed the claim: no answer came, or
    /// it is still being committed.
    pub fn no_answer(&self) -> bool {
        matches!(self, Reply::NoAnswer | Reply::InFlight)
    }

    /// What it says when it answers a claim sent again with its key: the claim placed
    /// (or queued), a refusal, or no definite answer.
    pub fn recheck(&self) -> AttemptRecheck {
        match self {
            Reply::Claim(_) => AttemptRecheck::Found,
            Reply::Refused => AttemptRecheck::NoneThere,
            _ => AttemptRecheck::Silent,
        }
    }
}

/// A front end's answer to a claim (the CLI's client result, the console's source
/// result), read as a [`Reply`].
pub trait ClaimAnswer {
    /// What it says, in the protocol's terms.
    fn reply(&self) -> Reply<'_>;
}

/// The endpoint calls the protocol makes, as one front end makes them: the CLI over its
/// HTTP client, the console over its source.
pub trait Endpoint {
    /// What a call answers.
    type Answer: ClaimAnswer;

    /// Sends `request` with the idempotency `key`, waiting up to `patience` for the answer.
    fn claim(
        &self,
        request: &ClaimRequest,
        key: &str,
        patience: Duration,
    ) -> impl Future<Output = Self::Answer> + Send;

    /// Waits `pause` before the next call.
    fn pause(&self, pause: Duration) -> impl Future<Output = ()> + Send;

    /// Now, by the front end's monotonic clock.
    fn now(&self) -> Instant;
}

/// A placed claim, for the tests of the protocol's parts.
#[cfg(test)]
fn a_claim() -> ClaimView {
    use crate::clock::Timestamp;
    use crate::ids::ClaimId;
    use crate::units::{Bytes, Units};
    ClaimView {
        id: ClaimId(7),
        name: None,
        state: crate::snapshot::ClaimState::Placed,
        project: "vision".into(),
        holder: None,
        form: "gpu_memory=1GiB".into(),
        request: ClaimRequest::memory(Bytes::gib(1), "vision"),
        node: Some("a".into()),
        shares: Vec::new(),
        memory_reserved: Bytes::gib(1),
        compute_reserved: Units(0),
        memory_used: None,
        over_limit: false,
        idle: false,
        created_at: Timestamp(0),
        lease_expires_at: None,
        pending_reasons: Vec::new(),
        infeasible: false,
    }
}

#[cfg(test)]
mod rank_tests {
    use super::*;
    use crate::placement::{DeviceSpec, NodeSpec};
    use crate::units::Bytes;

    /// A fleet of one node with one free 40 GiB GPU and a second one half taken.
    fn member(policy: Policy, node: &str) -> Fleet {
        let mut f = Fleet::new(policy);
        let gpu = |index| DeviceSpec {
            index,
            model: "A100".into(),
            uuid: None,
            memory: Some(Bytes::gib(40)),
            link_group: None,
        };
        f.add_node(NodeSpec {
            name: node.into(),
            devices: vec![gpu(0), gpu(1)],
            cpus: None,
        })
        .unwrap();
        f
    }

    #[test]
    fn the_default_policy_spreads_only_when_every_member_spreads() {
        let req = ClaimRequest::memory(Bytes::gib(1), "vision");
        let spread = [member(Policy::Spread, "a"), member(Policy::Spread, "b")];
        let refs: Vec<&Fleet> = spread.iter().collect();
        assert_eq!(rank_members(&refs, &req, None).1, Policy::Spread);
        let mixed = [member(Policy::Spread, "a"), member(Policy::Binpack, "b")];
        let refs: Vec<&Fleet> = mixed.iter().collect();
        let (ranking, policy) = rank_members(&refs, &req, None);
        assert_eq!(policy, Policy::Binpack);
        assert_eq!(ranking.fits.len(), 2);
        // Asked for, the policy is the one used whatever the members say.
        assert_eq!(
            rank_members(&refs, &req, Some(Policy::Spread)).1,
            Policy::Spread
        );
    }
}
