//! The ledger: the account book of one endpoint (resource types, projects with their
//! shares and per-type accounts, pending and running claims) and the hooks that keep
//! it. Every hook takes the current time and first accrues debt up to it with the state
//! as it was, so accrual is exact between changes however often (or seldom) the caller
//! ticks. Accrual, work fetch, the view and persistence live in their own files.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::FairShareError;
use super::backoff::BackoffPolicy;
use super::busy::Busy;
use super::claim::{PendingClaim, RunningClaim};
use super::forms::Forms;
use super::project::{Account, InstanceSecs, ProjectName, Share};
use super::resource::{ResourceId, ResourceType};
use super::rr::horizon_ms;
use super::targets::{Capacity, Demand, Divider};
use super::time::{TimestampExt, secs};
use super::view::{ClearCause, EventKind, FairShareEvent};
use super::workfetch::Placed;
use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::shared::SharedMap;
use crate::units::Units;

/// Events kept for [`Ledger::drain_events`]; older ones are dropped beyond this.
const MAX_EVENTS: usize = 10_000;

/// How the ledger behaves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LedgerConfig {
    /// How backoffs grow.
    pub backoff: BackoffPolicy,
    /// The work-buffer horizon over which shortfall is counted (default 3600 s).
    #[serde(with = "secs", rename = "horizon_s")]
    pub horizon: Duration,
}

impl Default for LedgerConfig {
    fn default() -> LedgerConfig {
        LedgerConfig {
            backoff: BackoffPolicy::default(),
            horizon: Duration::from_hours(1),
        }
    }
}

impl LedgerConfig {
    /// Refuses a configuration that cannot work, naming the rule.
    pub fn validate(&self) -> Result<(), FairShareError> {
        self.backoff.validate()?;
        if self.horizon.is_zero() || self.horizon > Duration::from_hours(168) {
            return Err(FairShareError::BadHorizon(self.horizon.as_secs_f64()));
        }
        Ok(())
    }
}

/// A project in the book: its share, accounts, targets and claims per resource type.
#[derive(Clone, Debug)]
pub(super) struct Slot {
    pub(super) name: ProjectName,
    pub(super) share: Share,
    pub(super) accounts: Vec<Account>,
    /// y(P,R), in instances, as of the last division.
    pub(super) target: Vec<f64>,
    /// When work fetch last found none of its claims fits, per resource type.
    pub(super) nothing_fit: Vec<Option<Timestamp>>,
    /// Pending claims, oldest first.
    pub(super) queue: SharedMap<u64, ClaimId>,
    /// The same claims by form, as work fetch asks about them.
    pub(super) forms: Forms,
    pub(super) pending_count: Vec<u32>,
    pub(super) pending_units: Vec<u64>,
    pub(super) running_units: Vec<u64>,
    pub(super) running_count: usize,
}

impl Slot {
    fn new(name: ProjectName, share: Share, resources: usize) -> Slot {
        Slot {
            name,
            share,
            accounts: vec![Account::default(); resources],
            target: vec![0.0; resources],
            nothing_fit: vec![None; resources],
            queue: SharedMap::new(),
            forms: Forms::default(),
            pending_count: vec![0; resources],
            pending_units: vec![0; resources],
            running_units: vec![0; resources],
            running_count: 0,
        }
    }

    fn grow(&mut self) {
        self.accounts.push(Account::default());
        self.target.push(0.0);
        self.nothing_fit.push(None);
        self.pending_count.push(0);
        self.pending_units.push(0);
        self.running_units.push(0);
    }

    /// D(P,R) goes false once the project neither runs nor waits on the type.
    fn settle(&mut self, r: usize) {
        if self.pending_count[r] == 0 {
            self.nothing_fit[r] = None;
            if self.running_units[r] == 0 {
                self.accounts[r].accrue = false;
            }
        }
    }
}

/// A pending claim, with its project and place in the queue.
#[derive(Clone, Debug)]
pub(super) struct Waiting {
    pub(super) claim: PendingClaim,
    pub(super) project: usize,
    pub(super) seq: u64,
    /// The types that could ever run it, with what it takes there.
    pub(super) demand: Vec<(usize, Units)>,
}

/// A running claim, with its project and resource type.
#[derive(Clone, Debug)]
pub(super) struct Holding {
    pub(super) claim: RunningClaim,
    pub(super) project: usize,
    pub(super) resource: usize,
}

/// The fair-share ledger and scheduler of one endpoint.
#[derive(Clone, Debug)]
pub struct Ledger {
    pub(super) config: LedgerConfig,
    pub(super) resources: Vec<ResourceType>,
    pub(super) resource_index: HashMap<ResourceId, usize>,
    pub(super) projects: Vec<Slot>,
    pub(super) project_index: HashMap<ProjectName, usize>,
    // Ordered maps: iteration order feeds float sums and choices, which must not vary run to run.
    // Each entry behind its own `Arc`: a copy of the ledger (the forecast's) shares them.
    pub(super) pending: SharedMap<ClaimId, Arc<Waiting>>,
    pub(super) running: SharedMap<ClaimId, Arc<Holding>>,
    pub(super) next_seq: u64,
    pub(super) last_seen: Option<Timestamp>,
    /// The targets no longer match the claims, shares or flags.
    pub(super) stale: bool,
    pub(super) events: VecDeque<FairShareEvent>,
    /// The running claims' use over the horizon, kept as they come and go.
    pub(super) busy: Busy,
    /// What the targets were divided for (or last found still fair for): the types'
    /// capacities and the projects' demands.
    pub(super) divided: Option<(Vec<Capacity>, Vec<Demand>)>,
    /// The inputs of the division before the last one, whose room the next fills.
    pub(super) spare: (Vec<Capacity>, Vec<Demand>),
    /// The divisions' flow network, kept between them.
    pub(super) divider: Divider,
}

impl Ledger {
    /// An empty ledger.
    pub fn new(config: LedgerConfig) -> Result<Ledger, FairShareError> {
        config.validate()?;
        Ok(Ledger {
            busy: Busy::new(horizon_ms(config.horizon)),
            config,
            resources: Vec::new(),
            resource_index: HashMap::new(),
            projects: Vec::new(),
            project_index: HashMap::new(),
            pending: SharedMap::new(),
            running: SharedMap::new(),
            next_seq: 0,
            last_seen: None,
            stale: false,
            events: VecDeque::new(),
            divided: None,
            spare: (Vec::new(), Vec::new()),
            divider: Divider::default(),
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &LedgerConfig {
        &self.config
    }

    /// The resource types, in the order they were added.
    pub fn resources(&self) -> &[ResourceType] {
        &self.resources
    }

    /// Adds a resource type or updates its instances and speed (devices appear and go).
    pub fn set_resource(&mut self, now: Timestamp, resource: ResourceType) {
        self.advance(now);
        if let Some(&r) = self.resource_index.get(&resource.id) {
            self.resources[r] = resource;
        } else {
            self.resource_index
                .insert(resource.id.clone(), self.resources.len());
            self.resources.push(resource);
            self.projects.iter_mut().for_each(Slot::grow);
        }
        self.stale = true;
    }

    /// Sets a project's share, creating the project if it is new.
    pub fn set_share(&mut self, now: Timestamp, project: &ProjectName, share: Share) {
        self.advance(now);
        let p = self.project(project);
        self.projects[p].share = share;
        self.stale = true;
    }

    /// A project's share, if the project exists.
    pub fn share(&self, project: &ProjectName) -> Option<Share> {
        self.project_index
            .get(project)
            .map(|&p| self.projects[p].share)
    }

    /// Queues a claim that waits for work fetch. Every type that could run it clears
    /// the project's backoff there and sets D(P,R). Nothing changes on error.
    pub fn submit(
        &mut self,
        now: Timestamp,
        mut claim: PendingClaim,
    ) -> Result<(), FairShareError> {
        self.advance(now);
        if self.pending.contains_key(&claim.id) || self.running.contains_key(&claim.id) {
            return Err(FairShareError::DuplicateClaim(claim.id));
        }
        if claim.demand.is_empty() {
            return Err(FairShareError::NoDemand(claim.id));
        }
        let mut demand = Vec::with_capacity(claim.demand.len());
        let mut seen = Vec::with_capacity(claim.demand.len());
        for d in &claim.demand {
            let r = self.resource_index_of(&d.resource)?;
            let bad = |why| FairShareError::BadDemand {
                claim: claim.id,
                resource: d.resource.clone(),
                why,
            };
            if d.units.0 == 0 {
                return Err(bad("it asks for no units"));
            }
            if seen.contains(&r) {
                return Err(bad("the type is named twice"));
            }
            seen.push(r);
            if self.resources[r].could_serve(d.units) {
                demand.push((r, d.units));
            }
        }
        if demand.is_empty() {
            return Err(FairShareError::NeverFits(claim.id));
        }
        let p = self.project(&claim.project);
        claim.submitted = now;
        let seq = self.next_seq;
        self.next_seq += 1;
        for &(r, units) in &demand {
            let slot = &mut self.projects[p];
            slot.pending_count[r] += 1;
            slot.pending_units[r] += u64::from(units.0);
            slot.accounts[r].accrue = true;
            if slot.accounts[r].backoff.clear() {
                let event = EventKind::BackoffCleared {
                    project: slot.name.clone(),
                    resource: self.resources[r].id.clone(),
                    cause: ClearCause::NewClaim,
                };
                self.push_event(now, event);
            }
        }
        self.projects[p].queue.insert(seq, claim.id);
        self.projects[p]
            .forms
            .insert(seq, claim.id, claim.form.as_deref(), &demand);
        self.pending.insert(
            claim.id,
            Arc::new(Waiting {
                claim,
                project: p,
                seq,
                demand,
            }),
        );
        self.stale = true;
        Ok(())
    }

    /// Records that a claim holds part of a resource type: one work fetch chose, or one
    /// placed directly. Clears the project's backoff there and sets D(P,R).
    pub fn placed(&mut self, now: Timestamp, placed: Placed) -> Result<(), FairShareError> {
        self.advance(now);
        let r = self.resource_index_of(&placed.resource)?;
        if self.running.contains_key(&placed.id) {
            return Err(FairShareError::DuplicateClaim(placed.id));
        }
        if let Some(waiting) = self.pending.get(&placed.id) {
            let submitted = &self.projects[waiting.project].name;
            if submitted != &placed.project {
                return Err(FairShareError::ProjectMismatch {
                    claim: placed.id,
                    submitted: submitted.clone(),
                    placed: placed.project,
                });
            }
            self.remove_pending(placed.id);
        }
        let p = self.project(&placed.project);
        let slot = &mut self.projects[p];
        slot.running_units[r] += u64::from(placed.units.0);
        slot.running_count += 1;
        slot.accounts[r].accrue = true;
        slot.nothing_fit[r] = None;
        let cleared = slot.accounts[r].backoff.clear();
        let claim = RunningClaim {
            id: placed.id,
            project: placed.project,
            resource: placed.resource,
            units: placed.units,
            started: now,
            expected_end: placed.expected_duration.map(|d| now.after(d)),
        };
        if cleared {
            let event = EventKind::BackoffCleared {
                project: claim.project.clone(),
                resource: claim.resource.clone(),
                cause: ClearCause::Placed,
            };
            self.push_event(now, event);
        }
        self.busy.insert(
            placed.id,
            p,
            r,
            u64::from(claim.units.0),
            claim.expected_end,
        );
        self.running.insert(
            placed.id,
            Arc::new(Holding {
                claim,
                project: p,
                resource: r,
            }),
        );
        self.stale = true;
        Ok(())
    }

    /// Forgets a claim, running or pending (released, expired, withdrawn). Returns
    /// whether it was known; releasing twice is harmless.
    pub fn released(&mut self, now: Timestamp, id: ClaimId) -> bool {
        self.advance(now);
        if let Some(holding) = self.running.remove(&id) {
            self.busy.remove(id);
            let slot = &mut self.projects[holding.project];
            slot.running_units[holding.resource] -= u64::from(holding.claim.units.0);
            slot.running_count -= 1;
            slot.settle(holding.resource);
            self.stale = true;
            return true;
        }
        self.remove_pending(id).is_some()
    }

    /// Accrues debt up to `now` and brings the targets up to date.
    pub fn tick(&mut self, now: Timestamp) {
        self.advance(now);
        if self.stale {
            self.divide();
        }
    }

    /// Operator: clears backoffs, for one project or all.
    pub fn clear_backoffs(
        &mut self,
        now: Timestamp,
        project: Option<&ProjectName>,
    ) -> Result<(), FairShareError> {
        self.advance(now);
        for p in self.selected(project)? {
            for r in 0..self.resources.len() {
                if self.projects[p].accounts[r].backoff.clear() {
                    let event = EventKind::BackoffCleared {
                        project: self.projects[p].name.clone(),
                        resource: self.resources[r].id.clone(),
                        cause: ClearCause::Operator,
                    };
                    self.push_event(now, event);
                }
            }
        }
        Ok(())
    }

    /// Operator: sets debts to zero and clears backoffs, for one project or all.
    pub fn reset(
        &mut self,
        now: Timestamp,
        project: Option<&ProjectName>,
    ) -> Result<(), FairShareError> {
        self.clear_backoffs(now, project)?;
        for p in self.selected(project)? {
            for account in &mut self.projects[p].accounts {
                account.ltd = InstanceSecs(0.0);
            }
        }
        self.push_event(
            now,
            EventKind::DebtsReset {
                project: project.cloned(),
            },
        );
        Ok(())
    }

    /// Takes the events since the last call.
    pub fn drain_events(&mut self) -> Vec<FairShareEvent> {
        self.events.drain(..).collect()
    }

    /// The pending claims of a project, oldest first.
    pub fn pending_of(&self, project: &ProjectName) -> Vec<&PendingClaim> {
        let Some(&p) = self.project_index.get(project) else {
            return Vec::new();
        };
        self.projects[p]
            .queue
            .values()
            .filter_map(|id| self.pending.get(id))
            .map(|w| &w.claim)
            .collect()
    }

    // --- inner workings ---

    /// The index of a project, creating it with the default share if it is new.
    pub(super) fn project(&mut self, name: &ProjectName) -> usize {
        if let Some(&p) = self.project_index.get(name) {
            return p;
        }
        let p = self.projects.len();
        self.projects.push(Slot::new(
            name.clone(),
            Share::DEFAULT,
            self.resources.len(),
        ));
        self.project_index.insert(name.clone(), p);
        self.stale = true;
        p
    }

    fn selected(&self, project: Option<&ProjectName>) -> Result<Vec<usize>, FairShareError> {
        match project {
            None => Ok((0..self.projects.len()).collect()),
            Some(name) => self
                .project_index
                .get(name)
                .map(|&p| vec![p])
                .ok_or_else(|| FairShareError::UnknownProject(name.clone())),
        }
    }

    fn resource_index_of(&self, id: &ResourceId) -> Result<usize, FairShareError> {
        self.resource_index
            .get(id)
            .copied()
            .ok_or_else(|| FairShareError::UnknownResource {
                resource: id.clone(),
                known: self
                    .resources
                    .iter()
                    .map(|r| r.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    fn remove_pending(&mut self, id: ClaimId) -> Option<Arc<Waiting>> {
        let waiting = self.pending.remove(&id)?;
        let slot = &mut self.projects[waiting.project];
        slot.queue.remove(&waiting.seq);
        slot.forms
            .remove(waiting.seq, waiting.claim.form.as_deref(), &waiting.demand);
        for &(r, units) in &waiting.demand {
            slot.pending_count[r] -= 1;
            slot.pending_units[r] -= u64::from(units.0);
            slot.settle(r);
        }
        self.stale = true;
        Some(waiting)
    }

    /// Keeps an event for [`Ledger::drain_events`], dropping the oldest beyond the cap.
    pub(super) fn push_event(&mut self, at: Timestamp, kind: EventKind) {
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(FairShareEvent { at, kind });
    }
}
