//! What a tick must look at, kept as claims change so that an idle tick does not walk
//! every claim: leases by when they run out, the claims whose owner is a local process
//! (asked about on every tick: a process ending is not on any clock), and the claims
//! still waiting for devices.

use std::collections::HashMap;

use super::Claim;
use super::forms::Form;
use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::shared::SharedSet;

/// The tick's work lists. Every change to a claim's lease, owner or allocation goes
/// through `forget` (before) and `note` (after).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Due {
    /// Leases of claims without a local owner, by their end.
    leases: SharedSet<(Timestamp, ClaimId)>,
    /// Claims with a local owner's pid.
    owned: SharedSet<ClaimId>,
    /// Claims without an allocation.
    waiting: SharedSet<ClaimId>,
    /// The same, by form.
    forms: HashMap<Form, SharedSet<ClaimId>>,
}

impl Due {
    /// The lists for these claims.
    pub(super) fn of<'a>(claims: impl IntoIterator<Item = &'a Claim>) -> Due {
        let mut due = Due::default();
        for c in claims {
            due.note(c);
        }
        due
    }

    /// Adds a claim as it stands now.
    pub(super) fn note(&mut self, c: &Claim) {
        if c.request.pid.is_some() {
            self.owned.insert(c.id);
        } else if let Some(at) = c.lease_expires_at {
            self.leases.insert((at, c.id));
        }
        if c.allocation.is_none() && self.waiting.insert(c.id) {
            self.forms
                .entry(Form::of(&c.request))
                .or_default()
                .insert(c.id);
        }
    }

    /// Takes a claim out, as it stood when noted.
    pub(super) fn forget(&mut self, c: &Claim) {
        self.owned.remove(&c.id);
        if let Some(at) = c.lease_expires_at {
            self.leases.remove(&(at, c.id));
        }
        if self.waiting.remove(&c.id) {
            let form = Form::of(&c.request);
            if let Some(ids) = self.forms.get_mut(&form) {
                ids.remove(&c.id);
                if ids.is_empty() {
                    self.forms.remove(&form);
                }
            }
        }
    }

    /// The claims a tick at `now` must decide about, in id order: leases that ran out
    /// and every locally owned claim.
    pub(super) fn at(&self, now: Timestamp) -> Vec<ClaimId> {
        let mut ids: Vec<ClaimId> = self
            .leases
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|&(_, id)| id)
            .chain(self.owned.iter().copied())
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Whether every tick has work: claims wait for devices (work fetch), or have a local
    /// owner (whose end no clock foretells).
    pub(super) fn every_tick(&self) -> bool {
        !self.owned.is_empty() || !self.waiting.is_empty()
    }

    /// When the first lease runs out.
    pub(super) fn first_lease(&self) -> Option<Timestamp> {
        self.leases.first().map(|&(at, _)| at)
    }

    /// Claims without an allocation, in id order.
    pub(super) fn waiting(&self) -> &SharedSet<ClaimId> {
        &self.waiting
    }

    /// One waiting claim of each form (the oldest), in no set order.
    pub(super) fn one_per_form(&self) -> impl Iterator<Item = ClaimId> + '_ {
        self.forms.values().filter_map(|ids| ids.first().copied())
    }
}
