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
    use crate::snapshot::ClaimView;

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

    /// An endpoint that answers from a script, on a clock that moves only by the calls'
    /// patience (a call that gets no answer waits it out) and the pauses.
    struct Scripted {
        answers: std::sync::Mutex<Vec<Reply<'static>>>,
        t0: Instant,
        /// Milliseconds since `t0`.
        clock: std::sync::Mutex<u64>,
        /// The pauses and patiences asked, in order.
        asked: std::sync::Mutex<Vec<String>>,
    }

    struct Said(Reply<'static>);

    impl ClaimAnswer for Said {
        fn reply(&self) -> Reply<'_> {
            self.0
        }
    }

    impl Endpoint for Scripted {
        type Answer = Said;

        fn claim(
            &self,
            _: &ClaimRequest,
            key: &str,
            patience: Duration,
        ) -> impl std::future::Future<Output = Said> + Send {
            let reply = self.answers.lock().unwrap().remove(0);
            if reply == Reply::NoAnswer {
                *self.clock.lock().unwrap() += u64::try_from(patience.as_millis()).unwrap();
            }
            self.asked
                .lock()
                .unwrap()
                .push(format!("{key} within {} ms", patience.as_millis()));
            std::future::ready(Said(reply))
        }

        fn pause(&self, pause: Duration) -> impl std::future::Future<Output = ()> + Send {
            *self.clock.lock().unwrap() += u64::try_from(pause.as_millis()).unwrap();
            self.asked
                .lock()
                .unwrap()
                .push(format!("pause {} ms", pause.as_millis()));
            std::future::ready(())
        }

        fn now(&self) -> Instant {
            self.t0 + Duration::from_millis(*self.clock.lock().unwrap())
        }
    }

    fn scripted(answers: Vec<Reply<'static>>) -> Scripted {
        Scripted {
            answers: std::sync::Mutex::new(answers),
            t0: Instant::now(),
            clock: std::sync::Mutex::new(0),
            asked: std::sync::Mutex::new(Vec::new()),
        }
    }

    #[tokio::test]
    async fn asking_again_sends_the_same_key_until_a_definite_answer_or_the_time_is_out() {
        let request = super::super::a_claim().request;
        let placed: &'static ClaimView = Box::leak(Box::new(super::super::a_claim()));
        let e = scripted(vec![Reply::InFlight, Reply::InFlight, Reply::Claim(placed)]);
        let (what, last) = reask(&e, &request, "a.1", Duration::from_secs(2)).await;
        assert_eq!(
            (what, last.0),
            (AttemptRecheck::Found, Reply::Claim(placed))
        );
        assert_eq!(
            *e.asked.lock().unwrap(),
            [
                "a.1 within 2000 ms",
                "pause 250 ms",
                "a.1 within 1750 ms",
                "pause 250 ms",
                "a.1 within 1500 ms",
            ],
            "in flight: the same key again after a pause, each call as patient as the time left"
        );
        let e = scripted(vec![Reply::NotSent, Reply::Refused]);
        let (what, _) = reask(&e, &request, "a.2", Duration::from_secs(2)).await;
        assert_eq!(what, AttemptRecheck::NoneThere);
        let e = scripted(vec![Reply::NoAnswer, Reply::NoAnswer]);
        let (what, last) = reask(&e, &request, "a.3", Duration::from_secs(1)).await;
        assert_eq!((what, last.0), (AttemptRecheck::Silent, Reply::NoAnswer));
        assert_eq!(
            e.asked.lock().unwrap().len(),
            1,
            "silent until the time is out: one call that waited it all"
        );
    }
}
