//! `gpuboard move ENDPOINT/ID --to OTHER[/NODE]`: a move between endpoints, as
//! claim-then-release (never release-then-claim, so the holder never goes without GPUs).
//! The new claim keeps the old one's form, project, holder, labels and lease length; both
//! mutations carry one move id, which both endpoints write in their audit log. If the
//! release fails, both claims are shown with the error: the operator decides which to
//! keep.

use serde_json::json;

use super::claims::{print_claim, refused, with_endpoint};
use super::fleet::Members;
use super::lost_answer::{self, Suspect, new_attempt, no_answer, phantom_warning};
use super::print_json;
use crate::client::{ClaimOutcome, Client, ClientError};
use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::placement::{AttemptId, AttemptRecheck, RESOLVE_WITHIN, moved_request};
use crate::request::ClaimRequest;
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

/// A fresh move id: time, process and chance, so two moves never share one.
fn new_move_id() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!(
        "mv-{millis:x}-{:x}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// The target of a move did not answer its claim: asked again with the same key (by
/// `target`, the client that sent it), its answer is the answer (said on stderr when it
/// placed it); still silent, the error stands and the target is named as a possible
/// phantom's holder.
async fn lost(
    members: &Members,
    (dst, target): (usize, &Client),
    (attempt, key): (&AttemptId, &str),
    request: &ClaimRequest,
    error: ClientError,
    sent: Timestamp,
) -> Result<ClaimOutcome, ClientError> {
    let m = &members.list[dst];
    match lost_answer::reask(target, request, key, RESOLVE_WITHIN).await {
        (AttemptRecheck::Found, Ok(outcome)) => {
            eprintln!(
                "gpuboard: {} placed it; its answer was lost ({error}): found it as {} by its label {} \
                 (asked again with the same key)",
                m.name,
                members.label(dst, outcome.claim().id),
                attempt.label()
            );
            Ok(outcome)
        }
        (AttemptRecheck::NoneThere, refused) => refused,
        (AttemptRecheck::Silent | AttemptRecheck::Found, _) => {
            let suspect = Suspect {
                member: dst,
                error: error.to_string(),
                sent,
                key: key.to_string(),
            };
            eprintln!(
                "gpuboard: {}",
                phantom_warning(members, &suspect, attempt, request.ttl)
            );
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
    let attempt = new_attempt(lost_answer::now());
    attempt.put_on(&mut request.labels);
    let move_id = new_move_id();
    let target = members.list[dst].client.for_move(&move_id);
    let sent = lost_answer::now();
    let key = attempt.key(1);
    let answer = match target.claim_keyed(&request, Some(&key)).await {
        Err(e) if no_answer(&e) || e.in_flight() => {
            lost(members, (dst, &target), (&attempt, &key), &request, e, sent).await?
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

/// Prints a move's outcome and returns the exit code: 0 when done, the release error's
/// code when both claims are held.
pub(super) fn report(
    members: &Members,
    moved: Result<Moved, ClientError>,
    as_json: bool,
) -> anyhow::Result<u8> {
    let name = |m: usize| members.list[m].name.as_str();
    match moved {
        Err(e) => {
            if !as_json && matches!(e, ClientError::DoesNotFit { .. }) {
                eprintln!("gpuboard move: the target refused the claim; nothing changed");
            }
            refused(e, as_json)
        }
        Ok(Moved::Done {
            move_id,
            from,
            to,
            released,
        }) => {
            if as_json {
                print_json(&json!({
                    "move": move_id,
                    "from": with_endpoint(&from.1, name(from.0))?,
                    "released": released,
                    "to": with_endpoint(&to.1, name(to.0))?,
                }))?;
            } else {
                println!(
                    "claim {} moved to {} (move {move_id}){}",
                    members.label(from.0, from.1.id),
                    members.label(to.0, to.1.id),
                    if released {
                        ""
                    } else {
                        "; the old claim was already gone"
                    }
                );
                print_claim(&to.1, Some(name(to.0)), false)?;
            }
            Ok(0)
        }
        Ok(Moved::ReleaseFailed {
            move_id,
            from,
            to,
            error,
        }) => {
            let old = members.label(from.0, from.1.id);
            let new = members.label(to.0, to.1.id);
            if as_json {
                print_json(&json!({
                    "move": move_id,
                    "from": with_endpoint(&from.1, name(from.0))?,
                    "released": false,
                    "to": with_endpoint(&to.1, name(to.0))?,
                    "error": error.to_string(),
                }))?;
            }
            eprintln!(
                "gpuboard move: claimed {new} but releasing {old} failed: {error} (move {move_id})"
            );
            eprintln!("both claims hold GPUs now:");
            eprintln!("  {old}  (old) {}", place(&from.1));
            eprintln!("  {new}  (new) {}", place(&to.1));
            eprintln!(
                "release one of them: `gpuboard release {old}` once it answers, or `gpuboard release {new}` to stay"
            );
            Ok(error.exit_code())
        }
    }
}

/// Where a claim sits and what it holds, for the release-failure lines.
fn place(c: &ClaimView) -> String {
    format!("{}, {}", super::claims::holding(c), c.form)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn move_ids_differ_and_are_valid_headers() {
        assert_ne!(new_move_id(), new_move_id());
        assert!(crate::wire::move_actor("operator", Some(&new_move_id())).is_ok());
    }
}
