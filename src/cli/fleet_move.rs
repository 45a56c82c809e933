//! `gpuboard move ENDPOINT/ID --to OTHER[/NODE]`: a move between endpoints, as
//! claim-then-release (never release-then-claim, so the holder never goes without GPUs).
//! The new claim keeps the old one's form, project, holder, labels and lease length; both
//! mutations carry one move id, which both endpoints write in their audit log. If the
//! release fails, both claims are shown with the error: the operator decides which to
//! keep.

use super::lost_answer::{self, phantom_warning};
use super::members::Members;
use crate::client::{ClaimOutcome, Client, ClientError};
use crate::fleet::{self, Lost};
use crate::ids::ClaimId;
use crate::placement::{AttemptRecheck, RESOLVE_WITHIN, moved_request};
use crate::snapshot::{ClaimState, ClaimView};

/// What a cross-endpoint move did.
#[derive(Debug)]
pub(super) enum Moved {
    /// Claimed on the target and released on the source.
    Done {
        /// The shared move id.
        move_id: String,
        /// Source member and the claim as it was.
        from: (usize, ClaimView),
        /// Target member and the new claim.
        to: (usize, ClaimView),
        /// Whether the release found the claim still there.
        released: bool,
    },
    /// Claimed on the target, but the source claim could not be released: both are held.
    ReleaseFailed {
        /// The shared move id.
        move_id: String,
        /// Source member and the claim still held there.
        from: (usize, ClaimView),
        /// Target member and the new claim.
        to: (usize, ClaimView),
        /// Why the release failed.
        error: ClientError,
    },
}

/// The target of a move did not answer its claim (`lost`, sent by `target`, the client
/// that sent it): asked again with the same key, its answer is the answer (said on stderr
/// when it placed it); still silent, the error stands and the target is named as a
/// possible phantom's holder.
async fn lost(
    members: &Members,
    target: &Client,
    lost: Lost,
    error: ClientError,
) -> Result<ClaimOutcome, ClientError> {
    let dst = lost.endpoint;
    let m = &members.list[dst];
    match fleet::reask(target, &lost.request, &lost.key, RESOLVE_WITHIN).await {
        (AttemptRecheck::Found, Ok(outcome)) => {
            eprintln!(
                "gpuboard: {} placed it; its answer was lost ({error}): found it as {} by its label {} \
                 (asked again with the same key)",
                m.name,
                members.label(dst, outcome.claim().id),
                lost.attempt.label()
            );
            Ok(outcome)
        }
        (AttemptRecheck::NoneThere, refused) => refused,
        (AttemptRecheck::Silent | AttemptRecheck::Found, _) => {
            eprintln!("gpuboard: {}", phantom_warning(members, &lost));
            Err(error)
        }
    }
}

/// Moves claim `from.1` of member `from.0` to member `to.0` (on node `to.1` when named,
/// on `devices` when given): claim on the target, then release on the source.
pub(super) async fn across(
    members: &Members,
    from: (usize, ClaimId),
    to: (usize, Option<String>),
    devices: Option<Vec<u32>>,
) -> Result<Moved, ClientError> {
    let (src, id) = from;
    let (dst, node) = to;
    let snap = members.list[src].client.snapshot().await?;
    let Some(old) = snap.claims.into_iter().find(|c| c.id == id) else {
        return Err(ClientError::NotFound {
            detail: format!("no claim {} on {}", id, members.list[src].name),
        });
    };
    if old.state != ClaimState::Placed {
        return Err(ClientError::Conflict {
            error: "nothing_to_move".to_string(),
            detail: format!(
                "claim {} is pending: nothing to move",
                members.label(src, id)
            ),
        });
    }
    let mut request = moved_request(&old.request, node, devices);
    // A fresh attempt label: if the target's answer is lost, it is asked for this claim.
    let attempt = fleet::new_attempt(lost_answer::now());
    attempt.put_on(&mut request.labels);
    let move_id = fleet::new_move_id(lost_answer::now());
    let target = members.list[dst].client.for_move(&move_id);
    let sent = lost_answer::now();
    let key = attempt.key(1);
    let first = target.claim_keyed(&request, Some(&key)).await;
    let answer = match first {
        Err(e) if lost_answer::no_answer(&e) => {
            let lost_claim = Lost {
                endpoint: dst,
                attempt,
                sent,
                request,
                key,
                move_id: Some(move_id.clone()),
                error: e.to_string(),
                adopt: false,
            };
            lost(members, &target, lost_claim, e).await?
        }
        other => other?,
    };
    let new = match answer {
        ClaimOutcome::Placed(v) => v,
        // Only a queued claim answers 202, and the request does not queue; should an
        // endpoint queue it anyway, it is taken back so that nothing is left half-done.
        ClaimOutcome::Pending(v) => {
            let _ = target.release(v.id).await;
            return Err(ClientError::Conflict {
                error: "queued".to_string(),
                detail: format!(
                    "{} queued the claim instead of placing it; took it back",
                    members.list[dst].name
                ),
            });
        }
    };
    match members.list[src]
        .client
        .for_move(&move_id)
        .release(id)
        .await
    {
        Ok(r) => Ok(Moved::Done {
            move_id,
            from: (src, old),
            to: (dst, new),
            released: r.released,
        }),
        Err(error) => Ok(Moved::ReleaseFailed {
            move_id,
            from: (src, old),
            to: (dst, new),
            error,
        }),
    }
}
