//! The journal and restarts: the durable changes every mutation appends, the audit
//! trail, and resuming from the state a store persisted.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Claim, EVENTS_KEPT, Scheduler, SchedulerConfig, SchedulerError, accounting};
use crate::clock::Timestamp;
use crate::fairshare::{FairShareState, Ledger, ProjectName, Share};
use crate::ids::ClaimId;
use crate::placement::NodeSpec;
use crate::snapshot::AuditEvent;

/// One durable change, in the order it happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Change {
    /// A claim was created or changed: store it whole.
    Claim(Box<Claim>),
    /// A claim is gone.
    ClaimRemoved(ClaimId),
    /// A device was cordoned or uncordoned.
    Cordon {
        /// Node.
        node: String,
        /// Device index.
        index: u32,
        /// New state.
        cordoned: bool,
    },
    /// A project's share was set.
    Share {
        /// Project.
        project: String,
        /// Share.
        share: u32,
    },
    /// An audit line.
    Audit(AuditEvent),
    /// The fair-share ledger (debts, flags, backoffs), whole.
    Ledger(Box<FairShareState>),
    /// The revision and the next claim id after this batch.
    Counters {
        /// Revision.
        revision: u64,
        /// Next claim id.
        next_id: ClaimId,
    },
}

/// Everything needed to resume after a restart.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Persisted {
    /// Claims, placed and pending.
    pub claims: Vec<Claim>,
    /// Cordoned devices.
    pub cordoned: Vec<(String, u32)>,
    /// Project shares that were set.
    pub shares: Vec<(String, u32)>,
    /// Recent audit events, oldest first.
    pub events: Vec<AuditEvent>,
    /// Revision.
    pub revision: u64,
    /// Next claim id.
    pub next_id: ClaimId,
    /// The fair-share ledger as last saved; rebuilt from the claims when absent.
    #[serde(default)]
    pub ledger: Option<FairShareState>,
}

impl Scheduler {
    /// (a GPU went away) is kept as pending, not dropped; each such case is returned as a warning.
    pub fn restore(
        config: SchedulerConfig,
        nodes: Vec<NodeSpec>,
        persisted: Persisted,
    ) -> Result<(Scheduler, Vec<String>), SchedulerError> {
        let mut s = Scheduler::new(config, nodes)?;
        let mut warnings = Vec::new();
        for (node, index) in &persisted.cordoned {
            if let Err(e) = s.fleet.set_cordon(node, *index, true) {
                warnings.push(format!("stored cordon of {node}:{index} ignored: {e}"));
            }
        }
        s.shares = persisted.shares.into_iter().collect();
        s.events = persisted.events.into_iter().collect();
        s.revision = persisted.revision;
        s.next_id = persisted.next_id.max(ClaimId::FIRST);
        for mut claim in persisted.claims {
            s.next_id = s.next_id.max(claim.id.next());
            if let Some(alloc) = &claim.allocation
                && let Err(e) = s.fleet.restore(claim.id, &claim.request, alloc)
            {
                warnings.push(format!(
                    "claim {} was at {alloc} but {e}; it is pending again",
                    claim.id
                ));
                claim.allocation = None;
                claim.placed_at = None;
            }
            s.claims.insert(claim.id, Arc::new(claim));
        }
        s.due = super::due::Due::of(s.claims.values().map(|c| &**c));
        s.restore_ledger(persisted.ledger, &mut warnings);
        // Stored reasons may predate the last placements: a waiting claim must not read
        // "fits now" on a full device before the first tick.
        s.refresh_reasons();
        s.reasons_at = Some(s.reasons_key());
        Ok((s, warnings))
    }

    /// The saved ledger, reconciled with the claims (the claims are the authority), or
    /// a new one rebuilt from them.
    fn restore_ledger(&mut self, saved: Option<FairShareState>, warnings: &mut Vec<String>) {
        let now = saved.as_ref().and_then(|s| s.last_seen).unwrap_or_default();
        let mut known = BTreeSet::new();
        if let Some(state) = saved {
            known.extend(state.pending.iter().map(|c| c.id));
            known.extend(state.running.iter().map(|c| c.id));
            match Ledger::from_state(self.config.fairshare.clone(), state) {
                Ok(l) => self.ledger = l,
                Err(e) => {
                    warnings.push(format!(
                        "stored fair-share ledger ignored, rebuilt from the claims: {e}"
                    ));
                    known.clear();
                }
            }
        }
        self.register_resources(now);
        for (project, share) in &self.shares {
            if let (Ok(p), Ok(s)) = (ProjectName::new(project), Share::new(*share)) {
                self.ledger.set_share(now, &p, s);
            }
        }
        for id in &known {
            if !self.claims.contains_key(id) {
                self.ledger.released(now, *id);
            }
        }
        for claim in self.claims.values() {
            if known.contains(&claim.id) {
                continue;
            }
            match &claim.allocation {
                Some(a) => accounting::record_placed(
                    &mut self.ledger,
                    &self.fleet,
                    now,
                    claim.id,
                    &claim.request,
                    a,
                ),
                None => {
                    accounting::record_pending(
                        &mut self.ledger,
                        &self.fleet,
                        now,
                        claim.id,
                        &claim.request,
                    );
                }
            }
        }
    }

    /// The changes since the last call, to persist before acknowledging.
    pub fn take_changes(&mut self) -> Vec<Change> {
        if self.journal.is_empty() {
            return Vec::new();
        }
        self.journal.push(Change::Counters {
            revision: self.revision,
            next_id: self.next_id,
        });
        std::mem::take(&mut self.journal)
    }

    /// Records an audit line: a new revision, kept in memory and journaled.
    pub(super) fn audit(
        &mut self,
        now: Timestamp,
        actor: &str,
        action: &str,
        target: String,
        detail: String,
    ) {
        self.revision += 1;
        if self.copy {
            return;
        }
        let event = AuditEvent {
            revision: self.revision,
            at: now,
            actor: actor.to_string(),
            action: action.to_string(),
            target,
            detail,
        };
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(event.clone());
        self.journal.push(Change::Audit(event));
    }

    /// Journals the whole fair-share ledger.
    pub(super) fn save_ledger(&mut self, now: Timestamp) {
        if self.copy {
            return;
        }
        self.journal
            .push(Change::Ledger(Box::new(self.ledger.state())));
        self.ledger_saved_at = Some((now, self.revision));
    }

    /// Audit events kept in memory with a revision above `after`, oldest first, and
    /// whether older ones were dropped (the watcher must then reload a snapshot).
    pub fn events_since(&self, after: u64) -> (Vec<AuditEvent>, bool) {
        let gap = self
            .events
            .front()
            .is_some_and(|e| e.revision > after.saturating_add(1));
        let events = self
            .events
            .iter()
            .filter(|e| e.revision > after)
            .cloned()
            .collect();
        (events, gap)
    }
}
