//! A fleet claim whose answer was lost: every claim sent across several endpoints carries
//! one attempt label (`placement::AttemptId`) and each send an idempotency key; an
//! endpoint that does not answer (or answers that the send is still in flight) is sent
//! the same claim with the same key again, until it answers what it did or
//! `RESOLVE_WITHIN` passes, before the next is tried (`placement::decide_attempt`). The
//! endpoint runs a key's request once, so asking again never books twice, and an answer
//! still being committed is "in flight", never "not there". One still silent is a
//! suspect: once the claim landed elsewhere (or nowhere), it is asked once more, and a
//! claim it answers with is released (or, when nothing else took it, kept as the
//! answer); one silent to the end is named to the operator with the label, when its
//! lease lets go and the commands to check.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::fleet::Members;
use crate::client::{ClaimOutcome, Client, ClientError};
use crate::clock::{Clock as _, SystemClock, Timestamp, date_time};
use crate::placement::{AttemptAnswer, AttemptId, AttemptRecheck, RECHECK_WITHIN, RESOLVE_WITHIN};
use crate::request::ClaimRequest;

/// The sender's claims so far, so that two claims of one process differ.
static SEQ: AtomicU32 = AtomicU32::new(0);

/// A new attempt id: now, this process, the next sequence number.
pub(super) fn new_attempt(now: Timestamp) -> AttemptId {
    AttemptId::new(
        now.0,
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
    )
}

/// The decision table's view of a claim's result.
pub(super) fn answer_of(r: &Result<ClaimOutcome, ClientError>) -> AttemptAnswer {
    match r {
        Ok(_) => AttemptAnswer::Answered,
        Err(ClientError::DoesNotFit { .. }) => AttemptAnswer::Refused,
        Err(e) if e.in_flight() => AttemptAnswer::InFlight,
        Err(e) if e.never_sent() => AttemptAnswer::NotSent,
        Err(e) if no_answer(e) => AttemptAnswer::NoAnswer,
        Err(_) => AttemptAnswer::Failed,
    }
}

/// Whether `e` leaves it open whether the endpoint acted (no answer came, though the
/// request may have gone out).
pub(super) fn no_answer(e: &ClientError) -> bool {
    !e.never_sent()
        && matches!(
            e,
            ClientError::Unreachable { .. } | ClientError::Timeout { .. }
        )
}

/// Sends `request` to `client` again with its idempotency `key`, until it answers what
/// the first send did or `within` passes: the claim (found), a refusal (none there), or
/// no definite answer (silent; the last error with it). An answer "in flight" is asked
/// again; so is one that could not connect (the endpoint may be restarting).
pub(super) async fn reask(
    client: &Client,
    request: &ClaimRequest,
    key: &str,
    within: Duration,
) -> (AttemptRecheck, Result<ClaimOutcome, ClientError>) {
    let until = Instant::now() + within;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let r = client
            .patiently(left.max(Duration::from_millis(100)))
            .claim_keyed(request, Some(key))
            .await;
        let what = match answer_of(&r) {
            AttemptAnswer::Answered => AttemptRecheck::Found,
            AttemptAnswer::Refused => AttemptRecheck::NoneThere,
            AttemptAnswer::Failed => AttemptRecheck::Silent,
            AttemptAnswer::NoAnswer | AttemptAnswer::InFlight | AttemptAnswer::NotSent => {
                if Instant::now() >= until {
                    return (AttemptRecheck::Silent, r);
                }
                if answer_of(&r) == AttemptAnswer::NotSent {
                    // Refused at once: do not spin while it restarts.
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                continue;
            }
        };
        return (what, r);
    }
}

/// `reask` within `RESOLVE_WITHIN`, or less when the claim's deadline comes sooner.
pub(super) async fn resolve(
    client: &Client,
    request: &ClaimRequest,
    key: &str,
    deadline: Instant,
) -> (AttemptRecheck, Result<ClaimOutcome, ClientError>) {
    let left = deadline.saturating_duration_since(Instant::now());
    reask(client, request, key, left.min(RESOLVE_WITHIN)).await
}

/// An endpoint that took the request and never answered, even when asked again.
#[derive(Debug)]
pub(super) struct Suspect {
    /// The member.
    pub member: usize,
    /// What the claim got from it.
    pub error: String,
    /// When the request was sent.
    pub sent: Timestamp,
    /// The idempotency key it was sent with.
    pub key: String,
}

/// The line saying a silent endpoint may hold a phantom claim: its label, when its lease
/// lets it go, and the commands that check and release it.
pub(super) fn phantom_warning(
    members: &Members,
    s: &Suspect,
    id: &AttemptId,
    ttl: Option<u64>,
) -> String {
    let m = &members.list[s.member];
    let until = match ttl {
        Some(secs) => format!(
            "until its lease ends, about {} UTC (ttl {secs} s from when it was sent)",
            date_time(s.sent.plus_secs(secs), &jiff::tz::TimeZone::UTC)
        ),
        None => "until it is released (it has no lease)".to_string(),
    };
    let again = members.again(s.member);
    format!(
        "warning: endpoint {name} may hold a phantom claim: it was sent the claim but its answer \
         was lost ({err}) and it did not answer when asked again. If it placed it, that claim \
         (label {label}) holds GPUs {until}. Check: `gpuboard ls{again} --label {label}`; \
         release what it lists: `gpuboard release{again} {name}/ID`",
        name = m.name,
        err = s.error,
        label = id.label(),
    )
}

/// After the claim landed on `landed` (or nowhere): each suspect asked once more. A claim
/// found on one is released when the claim landed elsewhere, or becomes the answer when it
/// landed nowhere (the first found; any further one released). Returns that answer, if
/// any, and a line per suspect for the operator.
pub(super) async fn settle(
    members: &Members,
    suspects: &[Suspect],
    (id, request): (&AttemptId, &ClaimRequest),
    mut landed: Option<usize>,
) -> (Option<(usize, ClaimOutcome)>, Vec<String>) {
    let ttl = request.ttl;
    let mut adopted = None;
    let mut lines = Vec::new();
    for s in suspects {
        let m = &members.list[s.member];
        // Asked with the same key: a send that never arrived is run now, and released
        // below like any other copy when the claim landed elsewhere.
        let (what, r) = reask(&m.client, request, &s.key, RECHECK_WITHIN).await;
        match (what, r) {
            (AttemptRecheck::Found, Ok(outcome)) if landed.is_none() => {
                lines.push(format!(
                    "{} placed it; its answer was lost ({}): found it as {} by its label {} \
                     (asked again with the same key)",
                    m.name,
                    s.error,
                    members.label(s.member, outcome.claim().id),
                    id.label()
                ));
                landed = Some(s.member);
                adopted = Some((s.member, outcome));
            }
            (AttemptRecheck::Found, Ok(outcome)) => {
                let claim = outcome.claim().id;
                let name = members.label(s.member, claim);
                let line = match m.client.release(claim).await {
                    Ok(_) => format!(
                        "{} came back: it had placed the claim too, as {name} (label {}), though its \
                         answer was lost; released {name}",
                        m.name,
                        id.label()
                    ),
                    Err(e) => format!(
                        "warning: {} came back holding a phantom claim {name} (label {}), but releasing \
                         it failed: {e}; release it with `gpuboard release{} {name}`",
                        m.name,
                        id.label(),
                        members.again(s.member)
                    ),
                };
                lines.push(line);
            }
            (AttemptRecheck::NoneThere | AttemptRecheck::Found, _) => lines.push(format!(
                "{} answered again that it refused the claim labelled {}: nothing placed there",
                m.name,
                id.label()
            )),
            (AttemptRecheck::Silent, _) => lines.push(phantom_warning(members, s, id, ttl)),
        }
    }
    (adopted, lines)
}

/// Now, by the system clock.
pub(super) fn now() -> Timestamp {
    SystemClock.now()
}
