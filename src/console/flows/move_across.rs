//! A move of a claim to another source: claimed on a target first (the next candidate
//! when one refuses or does not answer), then released on the claim's own source, never
//! the reverse. `update::move_across` drives it.

use crate::fleet::Lost;

/// A move's step that claims on the target (its answer: placed, refused, or lost).
pub const MOVE_CLAIM: usize = 0;
/// A move's step that releases the claim on its own source, once the target placed it.
pub const MOVE_RELEASE: usize = 1;

/// A move to another source in flight: claimed on a target first (the next candidate
/// when one refuses or does not answer), then released on the claim's own source. Both
/// steps carry `move_id`, which both endpoints write in their audit log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveAcross {
    /// The move's id (`wire::move_actor`).
    pub move_id: String,
    /// The source owning the claim.
    pub source: usize,
    /// The claim.
    pub id: crate::ids::ClaimId,
    /// Where it is now, in words.
    pub from: String,
    /// What is claimed on the target: the claim's own request, moved.
    pub request: crate::request::ClaimRequest,
    /// The target source asked now.
    pub target: usize,
    /// The sources to ask next if it refuses or does not answer (a move to any source).
    pub next: Vec<usize>,
    /// The targets that refused, each `name: words`.
    pub refused: Vec<String>,
    /// The new claim's id and place, once a target took it (the release is then sent).
    pub claimed: Option<(crate::ids::ClaimId, String)>,
    /// The target that did not answer the claim, being asked again for its attempt label
    /// (the request carries `gpuboard.attempt`).
    pub rechecking: Option<Lost>,
    /// Targets still silent when asked again: asked once more when the move ends.
    pub suspects: Vec<Lost>,
}
