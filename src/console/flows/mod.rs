//! Flows: the console's work that takes more than one answer. A flow is a value with an
//! id ([`FlowId`]), kept in one place ([`Flows`], `State::flows`) from the moment it
//! starts until its last answer: a move across sources ([`MoveAcross`]: claim on a
//! target, then release here), a claim whose answer was lost, asked again once the
//! claim landed elsewhere (`fleet::Lost`), the take-back of a claim a move's target
//! queued ([`TakeBack`]), a hand-over ([`HandoverRun`]: its steps one at a time).
//!
//! Every action a flow sends carries `Asker::Flow { flow, step }` (`msg::Asker`); the
//! driver hands it back with the answer (`Msg::Acted`, `Msg::Rechecked`), and
//! `update::flows::answered` gives the answer to that flow alone, by id: two flows in
//! flight never see each other's answers, and an answer whose flow is over (finished, or
//! replaced) is logged and changes nothing. A claim sent again after a lost answer keeps
//! the flow's id. `step` is the flow's own name for the send: a hand-over's step
//! position, a move's [`MOVE_CLAIM`] or [`MOVE_RELEASE`].
//!
//! This module holds the values and their store only: plain data, no I/O, no `State`.
//! How a flow goes on after an answer reads and changes the rest of the state (the
//! status line, the dialog showing it), so it lives in `update`, one file per kind.
//! Dialogs hold no copy of a flow: the confirmation holds the plan it starts
//! ([`Plan`], `Confirm::starts`), the move picker the id of the move it follows.
//!
//! Adding a flow: its value in a file here and a variant of [`Flow`] (with an accessor
//! on [`Flows`] if views read it); in `update/NAME.rs`, start it with
//! `state.flows.start(..)` and send its steps with `Asker::Flow { flow, step }`; add its
//! arm to `update::flows::answered` (and `rechecked` if it sends claims again), which
//! takes the flow out of the store, and put it back (`Flows::put`, same id) while it goes
//! on.

mod handover;
mod lost;
mod move_across;

use std::collections::BTreeMap;
use std::fmt;

pub use handover::{HandoverRun, StepPlan};
pub use lost::TakeBack;
pub use move_across::{MOVE_CLAIM, MOVE_RELEASE, MoveAcross};

/// A flow's id: new for each flow started, never reused in a console's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId(pub u64);

impl fmt::Display for FlowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "flow {}", self.0)
    }
}

/// One piece of work under way over several answers.
// A handful are under way at a time, each moved once per answer: boxing the move would
// buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Flow {
    /// A move of a claim to another source.
    Move(MoveAcross),
    /// A claim whose answer was lost, its source asked again once the claim landed.
    Lost(crate::fleet::Lost),
    /// A claim a move's target queued, being released there.
    TakeBack(TakeBack),
    /// A hand-over's steps, one at a time (kept once done, for its result pane).
    Handover(HandoverRun),
}

impl Flow {
    /// What kind of flow it is, in words (for the log).
    pub fn kind(&self) -> &'static str {
        match self {
            Flow::Move(_) => "move across sources",
            Flow::Lost(_) => "lost answer",
            Flow::TakeBack(_) => "take-back",
            Flow::Handover(_) => "hand-over",
        }
    }
}

/// A flow the operator is asked to confirm, not under way yet: the confirmation holds it
/// and OK starts it (`Confirm::starts`).
// Made once per confirmation (and kept boxed there): boxing the move would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// A move across sources (the confirmation's action is its first claim).
    Move(MoveAcross),
    /// A hand-over (the confirmation's action is its first step).
    Handover(HandoverRun),
}

/// The flows under way, by id: the one place their state is kept.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Flows {
    /// The last id given.
    last: u64,
    /// The flows, by id.
    live: BTreeMap<FlowId, Flow>,
}

impl Flows {
    /// A new id, for a flow to `put` once its first step is sent (a flow whose first
    /// step cannot be sent never starts).
    pub fn new_id(&mut self) -> FlowId {
        self.last += 1;
        FlowId(self.last)
    }

    /// Keeps `flow` under a new id, which its sends name.
    pub fn start(&mut self, flow: Flow) -> FlowId {
        let id = self.new_id();
        // One hand-over's pane at a time: a new one replaces the last (never one under
        // way: `update` refuses to start a second).
        if matches!(flow, Flow::Handover(_)) {
            self.live.retain(|_, f| !matches!(f, Flow::Handover(_)));
        }
        self.live.insert(id, flow);
        id
    }

    /// Takes flow `id` out to give it an answer (none: it is over).
    pub fn take(&mut self, id: FlowId) -> Option<Flow> {
        self.live.remove(&id)
    }

    /// Puts a flow taken out back under its id: it goes on.
    pub fn put(&mut self, id: FlowId, flow: Flow) {
        self.live.insert(id, flow);
    }

    /// Flow `id`, if it is under way.
    pub fn get(&self, id: FlowId) -> Option<&Flow> {
        self.live.get(&id)
    }

    /// How many flows are kept (a finished hand-over's included).
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// No flow is kept.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// The moves across sources under way, oldest first.
    pub fn moves(&self) -> Vec<&MoveAcross> {
        self.live
            .values()
            .filter_map(|f| match f {
                Flow::Move(m) => Some(m),
                _ => None,
            })
            .collect()
    }

    /// The move `id`, if it is under way.
    pub fn move_across(&self, id: FlowId) -> Option<&MoveAcross> {
        match self.live.get(&id) {
            Some(Flow::Move(m)) => Some(m),
            _ => None,
        }
    }

    /// The claims whose answer was lost, being asked again, oldest first.
    pub fn lost(&self) -> Vec<&crate::fleet::Lost> {
        self.live
            .values()
            .filter_map(|f| match f {
                Flow::Lost(l) => Some(l),
                _ => None,
            })
            .collect()
    }

    /// The last hand-over confirmed (under way or done), with its id.
    pub fn handover(&self) -> Option<(FlowId, &HandoverRun)> {
        self.live.iter().find_map(|(id, f)| match f {
            Flow::Handover(run) => Some((*id, run)),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::Action;

    fn run() -> Flow {
        Flow::Handover(HandoverRun::new(vec![StepPlan {
            source: 0,
            action: Action::Release {
                id: crate::ids::ClaimId(1),
            },
        }]))
    }

    #[test]
    fn ids_are_new_for_each_flow_and_a_flow_put_back_keeps_its_id() {
        let mut flows = Flows::default();
        let a = flows.start(run());
        let taken = flows.take(a).unwrap();
        assert!(flows.is_empty() && flows.take(a).is_none());
        flows.put(a, taken);
        let b = flows.start(run());
        assert_eq!((a, b), (FlowId(1), FlowId(2)));
        assert_eq!(
            flows.handover().map(|(id, _)| id),
            Some(b),
            "one pane: the last"
        );
        assert_eq!(flows.len(), 1);
        assert_eq!(b.to_string(), "flow 2");
    }
}
