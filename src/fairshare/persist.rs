//! Saving and resuming the ledger: its whole state as one value, and checking that a
//! saved state hangs together before resuming from it.

use std::sync::Arc;

use super::FairShareError;
use super::ledger::{Holding, Ledger, LedgerConfig, Waiting};
use super::project::Account;
use super::view::{FairShareState, ProjectState};
use super::workfetch::Placed;

/// The persisted state's format version.
const STATE_VERSION: u32 = 1;

impl Ledger {
    /// Everything to persist.
    pub fn state(&self) -> FairShareState {
        let mut pending: Vec<&Waiting> = self.pending.values().map(|w| &**w).collect();
        pending.sort_by_key(|w| w.seq);
        let mut running: Vec<&Holding> = self.running.values().map(|h| &**h).collect();
        running.sort_by_key(|h| h.claim.id);
        FairShareState {
            version: STATE_VERSION,
            last_seen: self.last_seen,
            resources: self.resources.clone(),
            projects: self
                .projects
                .iter()
                .map(|slot| ProjectState {
                    name: slot.name.clone(),
                    share: slot.share,
                    accounts: self
                        .resources
                        .iter()
                        .zip(&slot.accounts)
                        .map(|(res, account)| (res.id.clone(), account.clone()))
                        .collect(),
                })
                .collect(),
            pending: pending.into_iter().map(|w| w.claim.clone()).collect(),
            running: running.into_iter().map(|h| h.claim.clone()).collect(),
        }
    }

    /// Resumes from persisted state, checking that it hangs together.
    pub fn from_state(
        config: LedgerConfig,
        state: FairShareState,
    ) -> Result<Ledger, FairShareError> {
        let bad = |why: String| Err(FairShareError::BadState(why));
        if state.version != STATE_VERSION {
            return bad(format!(
                "version {} is not supported (this build reads {STATE_VERSION})",
                state.version
            ));
        }
        let mut ledger = Ledger::new(config)?;
        for res in state.resources {
            if ledger.resource_index.contains_key(&res.id) {
                return bad(format!("resource type `{}` appears twice", res.id));
            }
            ledger
                .resource_index
                .insert(res.id.clone(), ledger.resources.len());
            ledger.resources.push(res);
        }
        for project in state.projects {
            if ledger.project_index.contains_key(&project.name) {
                return bad(format!("project `{}` appears twice", project.name));
            }
            let p = ledger.project(&project.name);
            ledger.projects[p].share = project.share;
            for (id, account) in project.accounts {
                let Some(&r) = ledger.resource_index.get(&id) else {
                    return bad(format!(
                        "project `{}` has an account on unknown resource type `{id}`",
                        project.name
                    ));
                };
                ledger.projects[p].accounts[r] = account;
            }
        }
        // Claims go back in through the hooks at the time they were last seen, without
        // touching the persisted flags and backoffs.
        let at = state.last_seen.unwrap_or_default();
        ledger.last_seen = Some(at);
        let saved: Vec<Vec<Account>> = ledger.projects.iter().map(|s| s.accounts.clone()).collect();
        for claim in state.pending {
            let submitted = claim.submitted;
            let id = claim.id;
            ledger
                .submit(at, claim)
                .map_err(|e| FairShareError::BadState(format!("pending claim {id}: {e}")))?;
            if let Some(w) = ledger.pending.get_mut(&id).map(Arc::make_mut) {
                w.claim.submitted = submitted;
            }
        }
        for claim in state.running {
            let id = claim.id;
            let placed = Placed {
                id,
                project: claim.project.clone(),
                resource: claim.resource.clone(),
                units: claim.units,
                expected_duration: None,
            };
            ledger
                .placed(at, placed)
                .map_err(|e| FairShareError::BadState(format!("running claim {id}: {e}")))?;
            if let Some(h) = ledger.running.get_mut(&id).map(Arc::make_mut) {
                let units = u64::from(claim.units.0);
                ledger
                    .busy
                    .insert(id, h.project, h.resource, units, claim.expected_end);
                h.claim = claim;
            }
        }
        for (slot, accounts) in ledger.projects.iter_mut().zip(saved) {
            slot.accounts.truncate(accounts.len());
            for (kept, account) in slot.accounts.iter_mut().zip(accounts) {
                *kept = account;
            }
        }
        ledger.events.clear();
        ledger.divide();
        Ok(ledger)
    }
}
