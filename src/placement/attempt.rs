//! Lost answers when one claim is sent across a fleet of endpoints. Each claim carries
//! an attempt label (`gpuboard.attempt=ID`, the same id on every endpoint it is sent to)
//! and each send an idempotency key (`AttemptId::key`), so that an endpoint whose answer
//! never came can be asked again, with the same key, what it did before the next endpoint
//! is tried: "no answer" may mean the claim was placed (or is still being committed) and
//! only the answer was lost, and trying the next blindly would book twice. The same key
//! makes asking again safe: the endpoint runs a key's request once and answers every
//! later send with its answer.
//!
//! The decision is a plain table here (`decide`); the CLI and the console do the I/O.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The label key every fleet claim attempt carries.
pub const ATTEMPT_LABEL: &str = "gpuboard.attempt";

/// How long an endpoint that did not answer a claim gets to say whether it holds it.
pub const RECHECK_WITHIN: Duration = Duration::from_secs(2);

/// How long an endpoint that did not answer a keyed claim, or answered "in flight", is
/// asked again (with the same key) before the next is tried: long enough to outlast a
/// commit held up a few seconds by a busy disk or another process's database lock.
pub const RESOLVE_WITHIN: Duration = Duration::from_secs(15);

/// The id of one claim's attempt across the fleet: when it started (ms since the epoch,
/// in hex), who sent it (a pid) and a sequence number, so two claims of one process, or of
/// two processes at once, never share it. Deterministic given its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptId(String);

impl AttemptId {
    /// The id made of `millis` (when), `pid` (who) and `seq` (which of the sender's claims).
    pub fn new(millis: u64, pid: u32, seq: u32) -> AttemptId {
        AttemptId(format!("{millis:x}-{pid}-{seq}"))
    }

    /// The attempt `labels` carry, if any.
    pub fn of_labels(labels: &BTreeMap<String, String>) -> Option<AttemptId> {
        labels.get(ATTEMPT_LABEL).map(|v| AttemptId(v.clone()))
    }

    /// As written in the label's value.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `gpuboard.attempt=ID`, as the operator types it to look for the claim.
    pub fn label(&self) -> String {
        format!("{ATTEMPT_LABEL}={}", self.0)
    }

    /// Whether `labels` carry this attempt.
    pub fn marks(&self, labels: &BTreeMap<String, String>) -> bool {
        labels.get(ATTEMPT_LABEL).map(String::as_str) == Some(self.as_str())
    }

    /// The idempotency key of this attempt's `send`-th send (`ID.N`): every re-send of
    /// that send carries it; a new send after a definite refusal takes the next.
    pub fn key(&self, send: u32) -> String {
        format!("{}.{send}", self.0)
    }

    /// `labels` with this attempt's label added (any earlier attempt's replaced).
    pub fn put_on(&self, labels: &mut BTreeMap<String, String>) {
        labels.insert(ATTEMPT_LABEL.to_string(), self.0.clone());
    }
}

impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How an endpoint answered the claim itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptAnswer {
    /// Placed or queued: done.
    Answered,
    /// 409, it does not fit there now: the next may take it.
    Refused,
    /// No answer (timeout, connection lost): it may have placed the claim anyway.
    NoAnswer,
    /// 409 `in_flight`: an earlier send with the key is still being committed there: it
    /// will land (unless the endpoint's store fails); only its answer is not known yet.
    InFlight,
    /// No connection was made: nothing was sent, nothing can have been placed.
    NotSent,
    /// Any other error (bad request, credentials): every endpoint would refuse alike.
    Failed,
}

/// What asking the silent endpoint again (the same claim with the same key) found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptRecheck {
    /// It placed or queued the claim: that is the claim.
    Found,
    /// It answered that the claim was refused: nothing landed there.
    NoneThere,
    /// No definite answer in time (silent, or still in flight): it may hold a phantom.
    Silent,
}

/// What to do next with one endpoint's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptStep {
    /// The answer is the claim: done.
    Done,
    /// Ask the same endpoint, briefly, whether it holds a claim with the label.
    Recheck,
    /// It placed the claim and its answer was lost: take that claim, try no other.
    Adopt,
    /// Try the next endpoint: this one holds nothing.
    TryNext,
    /// Try the next endpoint, remembering this one may hold a phantom claim (named to
    /// the operator, checked again once the claim landed, released if found).
    TryNextSuspect,
    /// Stop: the error would be the same everywhere.
    Stop,
}

/// The decision table: the endpoint's answer and, after no answer, what asking again
/// found (`None` before asking).
pub fn decide(answer: AttemptAnswer, recheck: Option<AttemptRecheck>) -> AttemptStep {
    match (answer, recheck) {
        (AttemptAnswer::Answered, _) => AttemptStep::Done,
        (AttemptAnswer::Refused | AttemptAnswer::NotSent, _)
        | (AttemptAnswer::NoAnswer | AttemptAnswer::InFlight, Some(AttemptRecheck::NoneThere)) => {
            AttemptStep::TryNext
        }
        (AttemptAnswer::Failed, _) => AttemptStep::Stop,
        (AttemptAnswer::NoAnswer | AttemptAnswer::InFlight, None) => AttemptStep::Recheck,
        (AttemptAnswer::NoAnswer | AttemptAnswer::InFlight, Some(AttemptRecheck::Found)) => {
            AttemptStep::Adopt
        }
        (AttemptAnswer::NoAnswer | AttemptAnswer::InFlight, Some(AttemptRecheck::Silent)) => {
            AttemptStep::TryNextSuspect
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AttemptAnswer as A;
    use AttemptRecheck as R;
    use AttemptStep as S;

    #[test]
    fn the_decision_table_covers_every_answer_and_recheck() {
        let rechecks = [None, Some(R::Found), Some(R::NoneThere), Some(R::Silent)];
        let table = [
            (A::Answered, [S::Done, S::Done, S::Done, S::Done]),
            (A::Refused, [S::TryNext, S::TryNext, S::TryNext, S::TryNext]),
            (A::NotSent, [S::TryNext, S::TryNext, S::TryNext, S::TryNext]),
            (A::Failed, [S::Stop, S::Stop, S::Stop, S::Stop]),
            (
                A::NoAnswer,
                [S::Recheck, S::Adopt, S::TryNext, S::TryNextSuspect],
            ),
            (
                A::InFlight,
                [S::Recheck, S::Adopt, S::TryNext, S::TryNextSuspect],
            ),
        ];
        for (answer, steps) in table {
            for (recheck, step) in rechecks.iter().zip(steps) {
                assert_eq!(decide(answer, *recheck), step, "{answer:?} {recheck:?}");
            }
        }
    }

    #[test]
    fn an_attempt_id_is_deterministic_and_marks_only_its_own_claims() {
        let id = AttemptId::new(0x18f_0000_0000, 4242, 7);
        assert_eq!(id.as_str(), "18f00000000-4242-7");
        assert_eq!(id.label(), "gpuboard.attempt=18f00000000-4242-7");
        assert_eq!(id.key(2), "18f00000000-4242-7.2");
        assert_ne!(id.key(2), id.key(3));
        let mut labels = BTreeMap::from([("team".to_string(), "cv".to_string())]);
        assert!(!id.marks(&labels));
        id.put_on(&mut labels);
        assert!(id.marks(&labels));
        assert_eq!(labels.len(), 2);
        assert!(!AttemptId::new(0x18f_0000_0000, 4242, 8).marks(&labels));
        assert!(!AttemptId::new(0x18f_0000_0000, 4243, 7).marks(&labels));
    }
}
