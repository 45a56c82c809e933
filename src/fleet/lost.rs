//! A claim whose answer was lost and stayed lost when asked again: the endpoint may hold
//! it. Once the claim landed elsewhere (or nowhere) it is asked once more, and what it
//! answers then decides what becomes of it.

use crate::clock::{Timestamp, date_time};
use crate::placement::{AttemptId, AttemptRecheck};
use crate::request::ClaimRequest;

/// A claim sent to `endpoint` whose answer did not come: it may have been placed there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    /// The endpoint, by its position among the front end's (a CLI member, a console source).
    pub endpoint: usize,
    /// The attempt label's id the claim carries.
    pub attempt: AttemptId,
    /// When it was sent.
    pub sent: Timestamp,
    /// The request sent (its lease length, `ttl`, says when a phantom lets go): sent
    /// again, the same, to ask what the first send did.
    pub request: ClaimRequest,
    /// The idempotency key it was sent with (`placement::AttemptId::key`).
    pub key: String,
    /// The move's id, when it is a move's new claim.
    pub move_id: Option<String>,
    /// What the claim got instead of an answer.
    pub error: String,
    /// The claim landed nowhere else: a claim found there is the answer (else released).
    pub adopt: bool,
}

/// What a lost claim's last asking means, once the claim landed elsewhere (or nowhere).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// It placed the claim and nothing else took it: that is the claim.
    Adopt,
    /// It placed the claim too, though it landed elsewhere: release this copy.
    Release,
    /// It refused the claim: nothing is there.
    NoneThere,
    /// Silent to the end: it may hold a phantom claim until its lease ends.
    Phantom,
}

impl Lost {
    /// What `what` (the last asking's finding) means for this claim.
    pub fn settled(&self, what: AttemptRecheck) -> Settled {
        match what {
            AttemptRecheck::Found if self.adopt => Settled::Adopt,
            AttemptRecheck::Found => Settled::Release,
            AttemptRecheck::NoneThere => Settled::NoneThere,
            AttemptRecheck::Silent => Settled::Phantom,
        }
    }

    /// How long a phantom it may hold keeps its GPUs: `until its lease ends, about DATE
    /// UTC`, or `until it is released (it has no lease)`.
    pub fn until(&self) -> String {
        match self.request.ttl {
            Some(secs) => format!(
                "until its lease ends, about {} UTC",
                date_time(self.sent.plus_secs(secs), &jiff::tz::TimeZone::UTC)
            ),
            None => "until it is released (it has no lease)".to_string(),
        }
    }
}

/// The lost claims to ask once more, now that the claim landed (`landed`) or did not: a
/// claim found where nothing else took it is the answer.
pub fn settle(suspects: Vec<Lost>, landed: bool) -> Vec<Lost> {
    suspects
        .into_iter()
        .map(|s| Lost {
            adopt: !landed,
            ..s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost(ttl: Option<u64>) -> Lost {
        let mut request = super::super::a_claim().request;
        request.ttl = ttl;
        Lost {
            endpoint: 1,
            attempt: AttemptId::new(1, 2, 3),
            sent: Timestamp(1_700_000_000_000),
            request,
            key: "1-2-3.1".into(),
            move_id: None,
            error: "no answer within 5000 ms".into(),
            adopt: false,
        }
    }

    #[test]
    fn a_lost_claim_found_is_the_answer_only_where_nothing_else_took_it() {
        let landed = settle(vec![lost(None)], true);
        let nowhere = settle(vec![lost(None)], false);
        assert_eq!(landed[0].settled(AttemptRecheck::Found), Settled::Release);
        assert_eq!(nowhere[0].settled(AttemptRecheck::Found), Settled::Adopt);
        for s in [&landed[0], &nowhere[0]] {
            assert_eq!(s.settled(AttemptRecheck::NoneThere), Settled::NoneThere);
            assert_eq!(s.settled(AttemptRecheck::Silent), Settled::Phantom);
        }
    }

    #[test]
    fn a_phantom_lets_go_when_its_lease_ends() {
        assert_eq!(
            lost(Some(3600)).until(),
            "until its lease ends, about 2023-11-14 23:13:20 UTC"
        );
        assert_eq!(lost(None).until(), "until it is released (it has no lease)");
    }
}
