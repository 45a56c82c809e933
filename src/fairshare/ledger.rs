//! The ledger and the work-fetch decision. Every hook takes the current time and first
//! accrues debt up to it with the state as it was, so accrual is exact between changes
//! however often (or seldom) the caller ticks.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::FairShareError;
use super::backoff::BackoffPolicy;
use super::claim::{PendingClaim, RunningClaim};
use super::project::{Account, Gflop, InstanceSecs, ProjectName, Share};
use super::resource::{ResourceId, ResourceType, instances_of};
use super::rr::{RrOutcome, RunningUse, simulate};
use super::targets::{Capacity, Demand, targets};
use super::time::{Timestamp, TimestampExt, secs};
use super::view::{
    AccountView, ClearCause, EventKind, FairShareEvent, FairShareState, FairShareView,
    LedgerProject, LedgerResource, ProjectState, WaitReason,
};
use crate::ids::ClaimId;
use crate::units::Units;

/// Events kept for [`Ledger::drain_events`]; older ones are dropped beyond this.
const MAX_EVENTS: usize = 10_000;
/// The persisted state's format version.
const STATE_VERSION: u32 = 1;

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
            horizon: Duration::from_secs(3_600),
        }
    }
}

impl LedgerConfig {
    /// Refuses a configuration that cannot work, naming the rule.
    pub fn validate(&self) -> Result<(), FairShareError> {
        self.backoff.validate()?;
        if self.horizon.is_zero() || self.horizon > Duration::from_secs(604_800) {
            return Err(FairShareError::BadHorizon(self.horizon.as_secs_f64()));
        }
        Ok(())
    }
}

/// Decides whether a pending claim fits on a resource type right now; placement
/// implements it. `units` is what the claim takes there.
pub trait Fit {
    /// Whether `claim` could be placed on `resource` now.
    fn fits(&mut self, claim: &PendingClaim, resource: &ResourceId, units: Units) -> bool;
}

impl<F: FnMut(&PendingClaim, &ResourceId, Units) -> bool> Fit for F {
    fn fits(&mut self, claim: &PendingClaim, resource: &ResourceId, units: Units) -> bool {
        self(claim, resource, units)
    }
}

/// What made work fetch look for work on a resource type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// It has idle capacity now.
    Idle,
    /// It will have idle capacity within the horizon.
    Shortfall,
}

/// A work-fetch decision: place this claim on this resource type. The caller places it
/// and then calls [`Ledger::placed`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fetch {
    /// The claim to place.
    pub claim: ClaimId,
    /// Its project.
    pub project: ProjectName,
    /// Where.
    pub resource: ResourceId,
    /// What it takes there.
    pub units: Units,
    /// Why the type was looking for work.
    pub trigger: Trigger,
}

/// A claim that now holds part of a resource type.
#[derive(Clone, Debug, PartialEq)]
pub struct Placed {
    /// Its identity (pending or not).
    pub id: ClaimId,
    /// Its project.
    pub project: ProjectName,
    /// Where it runs.
    pub resource: ResourceId,
    /// What it holds.
    pub units: Units,
    /// How long it is expected to run.
    pub expected_duration: Option<Duration>,
}

#[derive(Clone, Debug)]
struct Slot {
    name: ProjectName,
    share: Share,
    accounts: Vec<Account>,
    /// y(P,R), in instances, as of the last division.
    target: Vec<f64>,
    /// When work fetch last found none of its claims fits, per resource type.
    nothing_fit: Vec<Option<Timestamp>>,
    /// Pending claims, oldest first.
    queue: BTreeMap<u64, ClaimId>,
    pending_count: Vec<u32>,
    pending_units: Vec<u64>,
    running_units: Vec<u64>,
    running_count: usize,
}

impl Slot {
    fn new(name: ProjectName, share: Share, resources: usize) -> Slot {
        Slot {
            name,
            share,
            accounts: vec![Account::default(); resources],
            target: vec![0.0; resources],
            nothing_fit: vec![None; resources],
            queue: BTreeMap::new(),
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

#[derive(Clone, Debug)]
struct Waiting {
    claim: PendingClaim,
    project: usize,
    seq: u64,
    /// The types that could ever run it, with what it takes there.
    demand: Vec<(usize, Units)>,
}

#[derive(Clone, Debug)]
struct Holding {
    claim: RunningClaim,
    project: usize,
    resource: usize,
}

/// The fair-share ledger and scheduler of one endpoint.
#[derive(Clone, Debug)]
pub struct Ledger {
    config: LedgerConfig,
    resources: Vec<ResourceType>,
    resource_index: HashMap<ResourceId, usize>,
    projects: Vec<Slot>,
    project_index: HashMap<ProjectName, usize>,
    // Ordered maps: iteration order feeds float sums and choices, which must not vary run to run.
    pending: BTreeMap<ClaimId, Waiting>,
    running: BTreeMap<ClaimId, Holding>,
    next_seq: u64,
    last_seen: Option<Timestamp>,
    /// The targets no longer match the claims, shares or flags.
    stale: bool,
    events: VecDeque<FairShareEvent>,
}

impl Ledger {
    /// An empty ledger.
    pub fn new(config: LedgerConfig) -> Result<Ledger, FairShareError> {
        config.validate()?;
        Ok(Ledger {
            config,
            resources: Vec::new(),
            resource_index: HashMap::new(),
            projects: Vec::new(),
            project_index: HashMap::new(),
            pending: BTreeMap::new(),
            running: BTreeMap::new(),
            next_seq: 0,
            last_seen: None,
            stale: false,
            events: VecDeque::new(),
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
        match self.resource_index.get(&resource.id) {
            Some(&r) => self.resources[r] = resource,
            None => {
                self.resource_index
                    .insert(resource.id.clone(), self.resources.len());
                self.resources.push(resource);
                self.projects.iter_mut().for_each(Slot::grow);
            }
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
        self.pending.insert(
            claim.id,
            Waiting {
                claim,
                project: p,
                seq,
                demand,
            },
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
        self.running.insert(
            placed.id,
            Holding {
                claim,
                project: p,
                resource: r,
            },
        );
        self.stale = true;
        Ok(())
    }

    /// Forgets a claim, running or pending (released, expired, withdrawn). Returns
    /// whether it was known; releasing twice is harmless.
    pub fn released(&mut self, now: Timestamp, id: ClaimId) -> bool {
        self.advance(now);
        if let Some(holding) = self.running.remove(&id) {
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

    /// One work-fetch decision, in the source's order: idle GPU types, idle CPU, GPU
    /// shortfall, CPU shortfall. For the first type that has a project not backed off
    /// there with a claim that fits, it picks the project with the highest debt plus
    /// shortfall there (overall debt breaks ties) and returns its oldest claim that
    /// fits. Projects passed over because none of their claims fit are backed off there,
    /// so a large claim that does not fit never holds back smaller ones of others.
    pub fn work_fetch(
        &mut self,
        now: Timestamp,
        fit: &mut impl Fit,
        rng: &mut impl Rng,
    ) -> Option<Fetch> {
        self.tick(now);
        let outcome = self.rr(now);
        let overall: Vec<f64> = (0..self.projects.len())
            .map(|p| self.overall_debt(p).0)
            .collect();
        for (r, trigger) in self.triggers(&outcome) {
            if let Some(fetch) = self.fetch_on(now, r, trigger, &outcome, &overall, fit, rng) {
                return Some(fetch);
            }
        }
        None
    }

    /// The earliest time after `now` a backoff ends for a project with pending work:
    /// when work fetch should run again even if nothing else happens.
    pub fn next_wakeup(&self, now: Timestamp) -> Option<Timestamp> {
        self.projects
            .iter()
            .flat_map(|slot| {
                slot.accounts
                    .iter()
                    .zip(&slot.pending_count)
                    .filter(|(_, count)| **count > 0)
                    .filter_map(|(account, _)| account.backoff.until)
            })
            .filter(|&until| until > now)
            .min()
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

    /// Why a pending claim is not placed, per resource type that could run it; `None`
    /// when the claim is not pending.
    pub fn why_pending(
        &self,
        now: Timestamp,
        id: ClaimId,
    ) -> Option<Vec<(ResourceId, WaitReason)>> {
        let waiting = self.pending.get(&id)?;
        let outcome = self.rr(now);
        Some(
            waiting
                .demand
                .iter()
                .map(|&(r, _)| {
                    let reason = self.reason(now, waiting.project, r, &outcome);
                    (self.resources[r].id.clone(), reason)
                })
                .collect(),
        )
    }

    /// The ledger at `now` for the snapshot and the console. Call [`Ledger::tick`]
    /// first for up-to-date debts.
    pub fn view(&self, now: Timestamp) -> FairShareView {
        let outcome = self.rr(now);
        let horizon = self.config.horizon.as_secs_f64();
        let resources = self
            .resources
            .iter()
            .enumerate()
            .map(|(r, res)| LedgerResource {
                id: res.id.clone(),
                instances: res.instances,
                speed: res.speed,
                used_instances: instances_of(outcome.in_use[r]),
                idle_instances: instances_of(res.capacity().saturating_sub(outcome.in_use[r])),
                shortfall: InstanceSecs(self.shortfall(r, &outcome, horizon)),
            })
            .collect();
        let projects = self
            .projects
            .iter()
            .enumerate()
            .map(|(p, slot)| LedgerProject {
                name: slot.name.clone(),
                share: slot.share,
                overall_debt: self.overall_debt(p),
                pending: slot.queue.len(),
                running: slot.running_count,
                resources: (0..self.resources.len())
                    .map(|r| {
                        let account = &slot.accounts[r];
                        AccountView {
                            resource: self.resources[r].id.clone(),
                            debt: account.ltd,
                            accrue: account.accrue,
                            target_instances: slot.target[r],
                            used_instances: instances_of(slot.running_units[r]),
                            pending: slot.pending_count[r],
                            backoff_until: account.backoff.until,
                            backoff_left_s: account
                                .backoff
                                .until
                                .filter(|&until| until > now)
                                .map(|until| until.since(now).as_secs_f64()),
                            backoff_interval_s: account.backoff.interval.map(|d| d.as_secs_f64()),
                            reason: self.reason(now, p, r, &outcome),
                        }
                    })
                    .collect(),
            })
            .collect();
        FairShareView {
            at: now,
            resources,
            projects,
        }
    }

    /// Everything to persist.
    pub fn state(&self) -> FairShareState {
        let mut pending: Vec<&Waiting> = self.pending.values().collect();
        pending.sort_by_key(|w| w.seq);
        let mut running: Vec<&Holding> = self.running.values().collect();
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
            if let Some(w) = ledger.pending.get_mut(&id) {
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
            if let Some(h) = ledger.running.get_mut(&id) {
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

    // --- inner workings ---

    fn project(&mut self, name: &ProjectName) -> usize {
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

    fn remove_pending(&mut self, id: ClaimId) -> Option<Waiting> {
        let waiting = self.pending.remove(&id)?;
        let slot = &mut self.projects[waiting.project];
        slot.queue.remove(&waiting.seq);
        for &(r, units) in &waiting.demand {
            slot.pending_count[r] -= 1;
            slot.pending_units[r] -= u64::from(units.0);
            slot.settle(r);
        }
        self.stale = true;
        Some(waiting)
    }

    fn push_event(&mut self, at: Timestamp, kind: EventKind) {
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(FairShareEvent { at, kind });
    }

    /// Accrues debt from the last time seen to `now`; a clock that went backwards
    /// clears every backoff instead, since their absolute ends mean nothing any more.
    fn advance(&mut self, now: Timestamp) {
        let Some(last) = self.last_seen else {
            self.last_seen = Some(now);
            return;
        };
        if now < last {
            for slot in &mut self.projects {
                slot.accounts.iter_mut().for_each(|a| {
                    a.backoff.clear();
                });
            }
            self.push_event(
                now,
                EventKind::ClockWentBack {
                    from: last,
                    to: now,
                },
            );
            self.last_seen = Some(now);
            return;
        }
        if now == last {
            return;
        }
        if self.stale {
            self.divide();
        }
        let dt = now.since(last).as_secs_f64();
        for slot in &mut self.projects {
            for r in 0..slot.accounts.len() {
                let account = &mut slot.accounts[r];
                if account.accrue {
                    account.ltd.0 += (slot.target[r] - instances_of(slot.running_units[r])) * dt;
                }
            }
        }
        self.last_seen = Some(now);
    }

    /// Recomputes the targets y(P,R) over the projects with D(P,R) true and a share.
    fn divide(&mut self) {
        let m = self.resources.len();
        // Capacity held by projects outside the division is not theirs to divide.
        let mut outside = vec![0u64; m];
        for slot in &self.projects {
            for (r, used) in outside.iter_mut().enumerate() {
                if slot.share.get() == 0 || !slot.accounts[r].accrue {
                    *used += slot.running_units[r];
                }
            }
        }
        let capacities: Vec<Capacity> = self
            .resources
            .iter()
            .zip(&outside)
            .map(|(res, &held)| Capacity {
                instances: instances_of(res.capacity().saturating_sub(held)),
                speed: res.speed,
            })
            .collect();
        let demands: Vec<Demand> = self
            .projects
            .iter()
            .map(|slot| Demand {
                share: slot.share,
                caps: (0..m)
                    .map(|r| {
                        if slot.accounts[r].accrue {
                            instances_of(slot.running_units[r] + slot.pending_units[r])
                        } else {
                            0.0
                        }
                    })
                    .collect(),
            })
            .collect();
        let division = targets(&capacities, &demands);
        for (slot, row) in self.projects.iter_mut().zip(division) {
            slot.target = row;
        }
        self.stale = false;
    }

    fn rr(&self, now: Timestamp) -> RrOutcome {
        let uses = self.running.values().map(|h| RunningUse {
            project: h.project,
            resource: h.resource,
            units: h.claim.units,
            expected_end: h.claim.expected_end,
        });
        simulate(
            now,
            self.config.horizon,
            self.projects.len(),
            self.resources.len(),
            uses,
        )
    }

    fn shortfall(&self, r: usize, outcome: &RrOutcome, horizon_s: f64) -> f64 {
        (instances_of(self.resources[r].capacity()) * horizon_s - outcome.busy[r]).max(0.0)
    }

    fn overall_debt(&self, p: usize) -> Gflop {
        let slot = &self.projects[p];
        Gflop(
            slot.accounts
                .iter()
                .zip(&self.resources)
                .map(|(a, res)| a.ltd.0 * res.speed.gflops())
                .sum(),
        )
    }

    /// The source's order: idle GPU types, idle CPU, GPU shortfall, CPU shortfall.
    fn triggers(&self, outcome: &RrOutcome) -> Vec<(usize, Trigger)> {
        let horizon = self.config.horizon.as_secs_f64();
        let mut order: Vec<usize> = (0..self.resources.len()).collect();
        order.sort_by(|&a, &b| {
            let (ra, rb) = (&self.resources[a], &self.resources[b]);
            rb.id
                .is_gpu()
                .cmp(&ra.id.is_gpu())
                .then_with(|| ra.id.cmp(&rb.id))
        });
        let idle = order
            .iter()
            .filter(|&&r| outcome.in_use[r] < self.resources[r].capacity())
            .map(|&r| (r, Trigger::Idle));
        let short = order
            .iter()
            .filter(|&&r| self.shortfall(r, outcome, horizon) > 1e-9)
            .map(|&r| (r, Trigger::Shortfall));
        idle.chain(short).collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn fetch_on(
        &mut self,
        now: Timestamp,
        r: usize,
        trigger: Trigger,
        outcome: &RrOutcome,
        overall: &[f64],
        fit: &mut impl Fit,
        rng: &mut impl Rng,
    ) -> Option<Fetch> {
        let m = self.resources.len();
        let horizon = self.config.horizon.as_secs_f64();
        let mut candidates: Vec<(f64, usize)> = self
            .projects
            .iter()
            .enumerate()
            .filter(|(_, slot)| {
                slot.share.get() > 0
                    && slot.pending_count[r] > 0
                    && !slot.accounts[r].backoff.active(now)
            })
            .map(|(p, slot)| {
                let shortfall = slot.target[r] * horizon - outcome.project_busy[p * m + r];
                (slot.accounts[r].ltd.0 + shortfall, p)
            })
            .collect();
        candidates.sort_unstable_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then_with(|| overall[b.1].total_cmp(&overall[a.1]))
                .then_with(|| self.projects[a.1].name.cmp(&self.projects[b.1].name))
        });
        let resource = self.resources[r].id.clone();
        let mut passed_over = Vec::new();
        for (_, p) in candidates {
            let slot = &self.projects[p];
            let chosen = slot.queue.values().find_map(|id| {
                let waiting = self.pending.get(id)?;
                let &(_, units) = waiting.demand.iter().find(|(dr, _)| *dr == r)?;
                fit.fits(&waiting.claim, &resource, units)
                    .then_some((*id, units))
            });
            if let Some((claim, units)) = chosen {
                for q in passed_over {
                    self.back_off(now, q, r, rng);
                }
                self.projects[p].nothing_fit[r] = None;
                return Some(Fetch {
                    claim,
                    project: self.projects[p].name.clone(),
                    resource,
                    units,
                    trigger,
                });
            }
            passed_over.push(p);
        }
        // Nothing of anyone's fits: the type is full for what waits, which is no
        // project's fault, so nobody is backed off; each keeps the reason.
        for q in passed_over {
            self.projects[q].nothing_fit[r].get_or_insert(now);
        }
        None
    }

    fn back_off(&mut self, now: Timestamp, p: usize, r: usize, rng: &mut impl Rng) {
        let slot = &mut self.projects[p];
        let account = &mut slot.accounts[r];
        let until = account.backoff.grow(now, &self.config.backoff, rng);
        let interval_s = account.backoff.interval.map_or(0.0, |d| d.as_secs_f64());
        if slot.running_units[r] == 0 {
            account.accrue = false;
            self.stale = true;
        }
        slot.nothing_fit[r].get_or_insert(now);
        let event = EventKind::BackedOff {
            project: slot.name.clone(),
            resource: self.resources[r].id.clone(),
            until,
            interval_s,
        };
        self.push_event(now, event);
    }

    fn reason(&self, now: Timestamp, p: usize, r: usize, outcome: &RrOutcome) -> WaitReason {
        let slot = &self.projects[p];
        let account = &slot.accounts[r];
        if slot.pending_count[r] == 0 {
            return WaitReason::NoPendingWork;
        }
        if slot.share.get() == 0 {
            return WaitReason::ShareZero;
        }
        if let Some(until) = account.backoff.until.filter(|&until| until > now) {
            return WaitReason::BackedOff { until };
        }
        if let Some(since) = slot.nothing_fit[r] {
            return WaitReason::NothingFits { since };
        }
        let full = outcome.in_use[r] >= self.resources[r].capacity();
        if full && self.shortfall(r, outcome, self.config.horizon.as_secs_f64()) <= 1e-9 {
            return WaitReason::NoCapacity;
        }
        WaitReason::Queued
    }
}
