//! A fleet claim whose answer was lost, as the CLI asks and says it: the protocol is
//! `fleet`'s (attempt labels and keys, asking again, settling); here are the calls over
//! the HTTP client ([`fleet::Endpoint`] for `Client`) and the lines for the operator. An
//! endpoint that does not answer (or answers that the send is still in flight) is sent the
//! same claim with the same key again, until it answers what it did or `RESOLVE_WITHIN`
//! passes, before the next is tried (`placement::decide_attempt`). One still silent is a
//! suspect: once the claim landed elsewhere (or nowhere), it is asked once more, and a
//! claim it answers with is released (or, when nothing else took it, kept as the
//! answer); one silent to the end is named to the operator with the label, when its
//! lease lets go and the commands to check.

use std::future::Future;
use std::time::{Duration, Instant};

use super::members::Members;
use crate::client::{ClaimOutcome, Client, ClientError};
use crate::clock::{Clock as _, SystemClock, Timestamp};
use crate::fleet::{self, ClaimAnswer, Lost, Reply, Settled};
use crate::placement::{AttemptRecheck, RECHECK_WITHIN, RESOLVE_WITHIN};
use crate::request::ClaimRequest;

impl ClaimAnswer for Result<ClaimOutcome, ClientError> {
    fn reply(&self) -> Reply<'_> {
        match self {
            Ok(outcome) => Reply::Claim(outcome.claim()),
            Err(e) => error_reply(e),
        }
    }
}

/// What an error answers, in the protocol's terms.
fn error_reply(e: &ClientError) -> Reply<'static> {
    match e {
        ClientError::DoesNotFit { .. } => Reply::Refused,
        e if e.in_flight() => Reply::InFlight,
        e if e.never_sent() => Reply::NotSent,
        ClientError::Unreachable { .. } | ClientError::Timeout { .. } => Reply::NoAnswer,
        _ => Reply::Failed,
    }
}

/// Whether `e` leaves it open whether the endpoint placed the claim: no answer came (the
/// request may have gone out), or it is still being committed.
pub(super) fn no_answer(e: &ClientError) -> bool {
    error_reply(e).no_answer()
}

impl fleet::Endpoint for Client {
    type Answer = Result<ClaimOutcome, ClientError>;

    fn claim(
        &self,
        request: &ClaimRequest,
        key: &str,
        patience: Duration,
    ) -> impl Future<Output = Self::Answer> + Send {
        let patient = self.patiently(patience);
        async move { patient.claim_keyed(request, Some(key)).await }
    }

    fn pause(&self, pause: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(pause)
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// `fleet::reask` within `RESOLVE_WITHIN`, or less when the claim's deadline comes sooner.
pub(super) async fn resolve(
    client: &Client,
    request: &ClaimRequest,
    key: &str,
    deadline: Instant,
) -> (AttemptRecheck, Result<ClaimOutcome, ClientError>) {
    let left = deadline.saturating_duration_since(Instant::now());
    fleet::reask(client, request, key, left.min(RESOLVE_WITHIN)).await
}

/// The line saying a silent endpoint may hold a phantom claim: its label, when its lease
/// lets it go, and the commands that check and release it.
pub(super) fn phantom_warning(members: &Members, s: &Lost) -> String {
    let m = &members.list[s.endpoint];
    let mut until = s.until();
    if let Some(secs) = s.request.ttl {
        until = format!("{until} (ttl {secs} s from when it was sent)");
    }
    let again = members.again(s.endpoint);
    format!(
        "warning: endpoint {name} may hold a phantom claim: it was sent the claim but its answer \
         was lost ({err}) and it did not answer when asked again. If it placed it, that claim \
         (label {label}) holds GPUs {until}. Check: `gpuboard ls{again} --label {label}`; \
         release what it lists: `gpuboard release{again} {name}/ID`",
        name = m.name,
        err = s.error,
        label = s.attempt.label(),
    )
}

/// After the claim landed (`landed`, or nowhere): each suspect asked once more. A claim
/// found on one is released when the claim landed elsewhere, or becomes the answer when it
/// landed nowhere (the first found; any further one released). Returns that answer, if
/// any, and a line per suspect for the operator.
pub(super) async fn settle(
    members: &Members,
    suspects: Vec<Lost>,
    landed: bool,
) -> (Option<(usize, ClaimOutcome)>, Vec<String>) {
    let mut adopted = None;
    let mut lines = Vec::new();
    for mut s in fleet::settle(suspects, landed) {
        let m = &members.list[s.endpoint];
        let label = s.attempt.label();
        // Only the first claim found is the answer; any other is a copy.
        s.adopt &= adopted.is_none();
        // Asked with the same key: a send that never arrived is run now, and released
        // below like any other copy when the claim landed elsewhere.
        let (what, r) = fleet::reask(&m.client, &s.request, &s.key, RECHECK_WITHIN).await;
        match (s.settled(what), r) {
            (Settled::Adopt, Ok(outcome)) => {
                lines.push(format!(
                    "{} placed it; its answer was lost ({}): found it as {} by its label {label} \
                     (asked again with the same key)",
                    m.name,
                    s.error,
                    members.label(s.endpoint, outcome.claim().id),
                ));
                adopted = Some((s.endpoint, outcome));
            }
            (Settled::Release, Ok(outcome)) => {
                let claim = outcome.claim().id;
                let name = members.label(s.endpoint, claim);
                let line = match m.client.release(claim).await {
                    Ok(_) => format!(
                        "{} came back: it had placed the claim too, as {name} (label {label}), though its \
                         answer was lost; released {name}",
                        m.name,
                    ),
                    Err(e) => format!(
                        "warning: {} came back holding a phantom claim {name} (label {label}), but releasing \
                         it failed: {e}; release it with `gpuboard release{} {name}`",
                        m.name,
                        members.again(s.endpoint)
                    ),
                };
                lines.push(line);
            }
            (Settled::Phantom, _) => lines.push(phantom_warning(members, &s)),
            (Settled::NoneThere | Settled::Adopt | Settled::Release, _) => lines.push(format!(
                "{} answered again that it refused the claim labelled {label}: nothing placed there",
                m.name,
            )),
        }
    }
    (adopted, lines)
}

/// Now, by the system clock.
pub(super) fn now() -> Timestamp {
    SystemClock.now()
}
