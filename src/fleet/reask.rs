//! An answer that did not come (or came "in flight"): the same claim is sent again with
//! the same key until the endpoint says what the first send did or the time passes.

use std::time::{Duration, Instant};

use super::{ClaimAnswer, Endpoint, Reply};
use crate::placement::AttemptRecheck;
use crate::request::ClaimRequest;

/// The least a call of the asking is given, even when the time is almost out.
const MIN_PATIENCE: Duration = Duration::from_millis(100);

/// The wait after an answer that came at once without saying what happened ("in flight",
/// or a refused connection while the endpoint restarts): a commit held up, or a restart,
/// is not hammered.
const PAUSE: Duration = Duration::from_millis(250);

/// Asking one endpoint again, until `until`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reask {
    until: Instant,
}

/// What comes after one answer of the asking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Again {
    /// The asking is over: what it found.
    Done(AttemptRecheck),
    /// Ask again after this pause.
    After(Duration),
}

impl Reask {
    /// Asking from `now` for `within`.
    pub fn new(now: Instant, within: Duration) -> Reask {
        Reask {
            until: now + within,
        }
    }

    /// How long the next call may wait for its answer: the time left (a re-sent claim may
    /// wait behind the first's commit), at least `MIN_PATIENCE`.
    pub fn patience(&self, now: Instant) -> Duration {
        self.until.saturating_duration_since(now).max(MIN_PATIENCE)
    }

    /// After `reply` at `now`: done (placed, refused, failed, or out of time), or again.
    pub fn next(&self, reply: &Reply<'_>, now: Instant) -> Again {
        match reply {
            Reply::NoAnswer | Reply::InFlight | Reply::NotSent if now < self.until => {
                let pause = if matches!(reply, Reply::NoAnswer) {
                    // The call itself waited its patience out.
                    Duration::ZERO
                } else {
                    PAUSE.min(self.until - now)
                };
                Again::After(pause)
            }
            _ => Again::Done(reply.recheck()),
        }
    }
}

/// Sends `request` to `endpoint` again with its `key` until it answers what the first
/// send did or `within` passes: what that found (`Silent` when no definite answer came),
/// with the last answer.
pub async fn reask<E: Endpoint>(
    endpoint: &E,
    request: &ClaimRequest,
    key: &str,
    within: Duration,
) -> (AttemptRecheck, E::Answer) {
    let asking = Reask::new(endpoint.now(), within);
    loop {
        let answer = endpoint
            .claim(request, key, asking.patience(endpoint.now()))
            .await;
        match asking.next(&answer.reply(), endpoint.now()) {
            Again::Done(what) => return (what, answer),
            Again::After(pause) => {
                if !pause.is_zero() {
                    endpoint.pause(pause).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_asking_goes_on_while_no_answer_came_and_time_is_left() {
        let t0 = Instant::now();
        let asking = Reask::new(t0, Duration::from_secs(2));
        let view = super::super::a_claim();
        assert_eq!(asking.patience(t0), Duration::from_secs(2));
        assert_eq!(
            asking.patience(t0 + Duration::from_secs(5)),
            MIN_PATIENCE,
            "a call late in the asking still gets a moment"
        );
        let early = t0 + Duration::from_millis(1900);
        assert_eq!(
            asking.next(&Reply::NoAnswer, early),
            Again::After(Duration::ZERO)
        );
        assert_eq!(asking.next(&Reply::InFlight, t0), Again::After(PAUSE));
        assert_eq!(
            asking.next(&Reply::NotSent, early),
            Again::After(Duration::from_millis(100)),
            "the pause never runs past the time"
        );
        for (reply, what) in [
            (Reply::Claim(&view), AttemptRecheck::Found),
            (Reply::Refused, AttemptRecheck::NoneThere),
            (Reply::Failed, AttemptRecheck::Silent),
            (Reply::Other, AttemptRecheck::Silent),
        ] {
            assert_eq!(asking.next(&reply, t0), Again::Done(what), "{reply:?}");
        }
        let late = t0 + Duration::from_secs(2);
        for reply in [Reply::NoAnswer, Reply::InFlight, Reply::NotSent] {
            assert_eq!(
                asking.next(&reply, late),
                Again::Done(AttemptRecheck::Silent),
                "{reply:?} once the time is out"
            );
        }
    }
}
