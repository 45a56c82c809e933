//! A claim whose answer was lost (no answer, or "in flight"): the source may have placed
//! it. Asked again with the same key once the claim landed elsewhere (or nowhere), it is
//! a flow of its own; while a claim form or a move still waits on it, it is part of that
//! one (`ClaimForm::rechecking`, `MoveAcross::rechecking`). And the take-back of a claim
//! a move's target queued instead of placing.

use crate::ids::ClaimId;

/// A claim whose answer did not come from `source`: it may have been placed there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostClaim {
    /// The source.
    pub source: usize,
    /// The attempt label's id the claim carries.
    pub attempt: crate::placement::AttemptId,
    /// When it was sent.
    pub sent: crate::clock::Timestamp,
    /// The request sent (its lease length, `ttl`, says when a phantom lets go): sent
    /// again, the same, to ask what the first send did.
    pub request: crate::request::ClaimRequest,
    /// The idempotency key it was sent with (`placement::AttemptId::key`).
    pub key: String,
    /// The move's id, when it is a move's new claim.
    pub move_id: Option<String>,
    /// What the claim got instead of an answer.
    pub error: String,
    /// The claim landed nowhere else: a claim found there is the answer (else released).
    pub adopt: bool,
}

/// A claim a move's target queued instead of placing, being released there (tagged with
/// the move's id): its own flow, so its answer is said even once the move is over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TakeBack {
    /// The move's id (`wire::move_actor`).
    pub move_id: String,
    /// The target that queued it.
    pub source: usize,
    /// The queued claim.
    pub id: ClaimId,
}
