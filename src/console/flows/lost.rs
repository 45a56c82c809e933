//! The take-back of a claim a move's target queued instead of placing. (A claim whose
//! answer was lost is `fleet::Lost`: asked again once the claim landed elsewhere, or
//! nowhere, it is a flow of its own; while a claim form or a move still waits on it, it
//! is part of that one: `ClaimForm::rechecking`, `MoveAcross::rechecking`.)

use crate::ids::ClaimId;

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
