//! The scheduler: claims with their owners, leases and queue over a placement `Fleet`,
//! projects, audit events and a revision. Plain synchronous Rust with time passed in:
//! `gpuboard serve` wraps it with SQLite and HTTP, the console embeds it in-process,
//! and the simulator drives it on a simulated clock.
//!
//! Every mutation appends `Change`s to a journal that the owner drains with
//! `take_changes` and persists before acknowledging anything.

mod accounting;

use std::collections::{BTreeMap, VecDeque};

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::fairshare::{
    self, FairShareError, FairShareState, Ledger, LedgerConfig, ProjectName, Share,
};
use crate::ids::ClaimId;
use crate::placement::{
    Allocation, Fleet, FleetError, MoveError, MoveTarget, NoFit, NodeSpec, Policy,
};
use crate::request::ClaimRequest;
use crate::snapshot::{
    self, AuditEvent, ClaimState, ClaimView, DeviceView, EndpointInfo, NodeView, Snapshot,
};

/// A project's share when none was set.
pub const DEFAULT_SHARE: u32 = 100;
/// Audit events kept in memory for snapshots (all are persisted).
const EVENTS_KEPT: usize = 500;
/// How often the ledger (debts, backoffs) is persisted when nothing else changes it:
/// a crash loses at most this much debt accrual, never a claim.
const LEDGER_SAVE_MS: u64 = 30_000;

/// How the scheduler behaves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchedulerConfig {
    /// Endpoint name shown to operators.
    pub name: String,
    /// What kind of endpoint (`gpuboard`, `embedded`, `demo`).
    pub kind: String,
    /// Placement policy.
    pub policy: Policy,
    /// Fair-share backoffs and buffer horizon.
    #[serde(default)]
    pub fairshare: LedgerConfig,
    /// Speeds (GFLOPS per instance) by resource type (`cpu`, `gpu:MODEL`) or model name,
    /// overriding the built-in table.
    #[serde(default)]
    pub speeds: BTreeMap<String, f64>,
    /// Seed of the backoff jitter.
    #[serde(default)]
    pub seed: u64,
}

/// Why a scheduler could not be built or an operator change was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchedulerError {
    /// The inventory is inconsistent.
    #[error(transparent)]
    Fleet(#[from] FleetError),
    /// The fair-share configuration, a project name or a share is not valid.
    #[error(transparent)]
    Ledger(#[from] FairShareError),
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            name: "local".to_string(),
            kind: "gpuboard".to_string(),
            policy: Policy::Binpack,
            fairshare: LedgerConfig::default(),
            speeds: BTreeMap::new(),
            seed: 0,
        }
    }
}

/// A claim: its request, where it is (or why it waits), and its lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// Id, stable across moves and restarts.
    pub id: ClaimId,
    /// The validated request, with its original form.
    pub request: ClaimRequest,
    /// Where it is, when placed.
    pub allocation: Option<Allocation>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When its lease runs out, if it has a `ttl`.
    pub lease_expires_at: Option<Timestamp>,
    /// Why it waits (latest reasons), when pending.
    #[serde(default)]
    pub pending: Option<NoFit>,
}

impl Claim {
    /// Placed or pending.
    pub fn state(&self) -> ClaimState {
        if self.allocation.is_some() {
            ClaimState::Placed
        } else {
            ClaimState::Pending
        }
    }
}

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

/// What happened to a submitted claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Placed now.
    Placed(Claim),
    /// Queued: it asked to wait and does not fit now.
    Pending(Claim),
    /// Refused: it does not fit now (and did not ask to wait) or can never fit.
    Refused(NoFit),
}

/// Why a renewal was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RenewError {
    /// No such claim.
    #[error("no claim {0}")]
    UnknownClaim(ClaimId),
    /// The claim has no lease and no ttl was given.
    #[error("claim {0} has no lease to renew; give a ttl to start one")]
    NoLease(ClaimId),
}

/// The scheduler's state.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    fleet: Fleet,
    claims: BTreeMap<ClaimId, Claim>,
    shares: BTreeMap<String, u32>,
    events: VecDeque<AuditEvent>,
    revision: u64,
    next_id: ClaimId,
    journal: Vec<Change>,
    ledger: Ledger,
    rng: StdRng,
    ledger_saved_at: Option<Timestamp>,
    /// The revision at which waiting claims' reasons were last worked out.
    reasons_at: Option<u64>,
}

impl Scheduler {
    /// A scheduler over these nodes, with nothing claimed.
    pub fn new(config: SchedulerConfig, nodes: Vec<NodeSpec>) -> Result<Scheduler, SchedulerError> {
        let mut fleet = Fleet::new(config.policy);
        for n in nodes {
            fleet.add_node(n)?;
        }
        let ledger = Ledger::new(config.fairshare.clone())?;
        let rng = StdRng::seed_from_u64(config.seed);
        let mut s = Scheduler {
            config,
            fleet,
            claims: BTreeMap::new(),
            shares: BTreeMap::new(),
            events: VecDeque::new(),
            revision: 0,
            next_id: ClaimId::FIRST,
            journal: Vec::new(),
            ledger,
            rng,
            ledger_saved_at: None,
            reasons_at: None,
        };
        s.register_resources(Timestamp(0));
        Ok(s)
    }

    fn register_resources(&mut self, now: Timestamp) {
        for t in accounting::resource_types(&self.fleet, &self.config.speeds) {
            self.ledger.set_resource(now, t);
        }
    }

    /// Resumes from persisted state. A stored claim that no longer fits the inventory
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
            }
            s.claims.insert(claim.id, claim);
        }
        s.restore_ledger(persisted.ledger, &mut warnings);
        Ok((s, warnings))
    }

    /// The saved ledger, reconciled with the claims (the claims are the authority), or
    /// a new one rebuilt from them.
    fn restore_ledger(&mut self, saved: Option<FairShareState>, warnings: &mut Vec<String>) {
        let now = saved.as_ref().and_then(|s| s.last_seen).unwrap_or_default();
        let mut known = std::collections::BTreeSet::new();
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

    /// The placement fleet, read-only.
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// The current revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// A claim by id.
    pub fn claim(&self, id: ClaimId) -> Option<&Claim> {
        self.claims.get(&id)
    }

    /// All claims, by id.
    pub fn claims(&self) -> impl Iterator<Item = &Claim> {
        self.claims.values()
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

    fn audit(&mut self, now: Timestamp, actor: &str, action: &str, target: String, detail: String) {
        self.revision += 1;
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

    /// Where a request would go now, without placing it (the console's preview).
    pub fn plan(&self, req: &ClaimRequest) -> Result<Allocation, NoFit> {
        self.fleet.plan(req)
    }

    /// Places a claim, queues it (if it asked to wait), or refuses it with reasons.
    ///
    /// A claim that asked to wait joins its project's queue whenever others are already
    /// waiting, even if it would fit: work fetch, not arrival order, decides who goes
    /// next. A claim that did not ask to wait is placed at once if it fits.
    pub fn submit(&mut self, req: ClaimRequest, actor: &str, now: Timestamp) -> Submitted {
        let id = self.next_id;
        let queue_busy = req.wait && self.claims.values().any(|c| c.allocation.is_none());
        let placed = if queue_busy {
            self.fleet.plan(&req).map(|_| None)
        } else {
            self.fleet.claim(id, &req).map(Some)
        };
        let (allocation, pending) = match placed {
            Ok(Some(a)) => (Some(a), None),
            Ok(None) => (None, None),
            Err(no) if req.wait && !no.infeasible => (None, Some(no)),
            Err(no) => return Submitted::Refused(no),
        };
        match &allocation {
            Some(a) => accounting::record_placed(&mut self.ledger, &self.fleet, now, id, &req, a),
            None => {
                if !accounting::record_pending(&mut self.ledger, &self.fleet, now, id, &req) {
                    return Submitted::Refused(pending.unwrap_or_else(|| NoFit {
                        infeasible: true,
                        nodes: Vec::new(),
                    }));
                }
            }
        }
        self.next_id = self.next_id.next();
        let claim = Claim {
            id,
            lease_expires_at: req.ttl.map(|t| now.plus_secs(t)),
            request: req,
            allocation,
            created_at: now,
            pending,
        };
        let detail = match &claim.allocation {
            Some(a) => format!("{} placed at {a}", claim.request.describe()),
            None => format!("{} pending", claim.request.describe()),
        };
        self.claims.insert(id, claim.clone());
        self.journal.push(Change::Claim(Box::new(claim.clone())));
        self.audit(now, actor, "claim", format!("claim {id}"), detail);
        if claim.allocation.is_some() {
            return Submitted::Placed(claim);
        }
        // Work fetch may take it (or another waiting claim) right away.
        self.place_pending(now);
        match self.claims.get(&id) {
            Some(c) if c.allocation.is_some() => Submitted::Placed(c.clone()),
            Some(c) => Submitted::Pending(c.clone()),
            None => Submitted::Pending(claim),
        }
    }

    /// Releases a claim, placed or pending. Idempotent: an unknown id returns `None`.
    pub fn release(&mut self, id: ClaimId, actor: &str, now: Timestamp) -> Option<Claim> {
        self.remove(id, actor, "release", "released", now)
    }

    fn remove(
        &mut self,
        id: ClaimId,
        actor: &str,
        action: &str,
        why: &str,
        now: Timestamp,
    ) -> Option<Claim> {
        let claim = self.claims.remove(&id)?;
        self.fleet.release(id);
        self.ledger.released(now, id);
        self.journal.push(Change::ClaimRemoved(id));
        let place = claim
            .allocation
            .as_ref()
            .map_or("pending".to_string(), ToString::to_string);
        self.audit(
            now,
            actor,
            action,
            format!("claim {id}"),
            format!("{why} ({place})"),
        );
        Some(claim)
    }

    /// Moves a placed claim atomically; it keeps its id. On failure nothing changes.
    pub fn move_claim(
        &mut self,
        id: ClaimId,
        target: &MoveTarget,
        actor: &str,
        now: Timestamp,
    ) -> Result<Claim, MoveError> {
        let Some(claim) = self.claims.get(&id) else {
            return Err(MoveError::UnknownClaim(id));
        };
        if claim.allocation.is_none() {
            return Err(MoveError::NothingToMove(id));
        }
        let old = claim.allocation.clone();
        let new = self.fleet.move_claim(id, target)?;
        let Some(claim) = self.claims.get_mut(&id) else {
            return Err(MoveError::UnknownClaim(id));
        };
        claim.allocation = Some(new.clone());
        let claim = claim.clone();
        // The claim may now hold another model, or another amount of it.
        self.ledger.released(now, id);
        accounting::record_placed(&mut self.ledger, &self.fleet, now, id, &claim.request, &new);
        self.journal.push(Change::Claim(Box::new(claim.clone())));
        let from = old.map_or_else(String::new, |a| a.to_string());
        self.audit(
            now,
            actor,
            "move",
            format!("claim {id}"),
            format!("moved from {from} to {new}"),
        );
        Ok(claim)
    }

    /// Extends a lease by `ttl` seconds from now (or by the claim's own ttl).
    pub fn renew(
        &mut self,
        id: ClaimId,
        ttl: Option<u64>,
        actor: &str,
        now: Timestamp,
    ) -> Result<Claim, RenewError> {
        let claim = self
            .claims
            .get_mut(&id)
            .ok_or(RenewError::UnknownClaim(id))?;
        let ttl = ttl.or(claim.request.ttl).ok_or(RenewError::NoLease(id))?;
        claim.request.ttl = Some(ttl);
        claim.lease_expires_at = Some(now.plus_secs(ttl));
        let claim = claim.clone();
        self.journal.push(Change::Claim(Box::new(claim.clone())));
        self.audit(
            now,
            actor,
            "renew",
            format!("claim {id}"),
            format!("lease extended by {ttl} s"),
        );
        Ok(claim)
    }

    /// Stops or resumes new claims on a device.
    pub fn set_cordon(
        &mut self,
        node: &str,
        index: u32,
        cordoned: bool,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), FleetError> {
        self.fleet.set_cordon(node, index, cordoned)?;
        self.journal.push(Change::Cordon {
            node: node.to_string(),
            index,
            cordoned,
        });
        let action = if cordoned { "cordon" } else { "uncordon" };
        self.audit(
            now,
            actor,
            action,
            format!("{node}:{index}"),
            format!("{action}ed"),
        );
        Ok(())
    }

    /// Sets a project's resource share (0 to 1 000 000; 0 gets no work).
    pub fn set_share(
        &mut self,
        project: &str,
        share: u32,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), SchedulerError> {
        let name = ProjectName::new(project)?;
        self.ledger.set_share(now, &name, Share::new(share)?);
        self.shares.insert(project.to_string(), share);
        self.save_ledger(now);
        self.journal.push(Change::Share {
            project: project.to_string(),
            share,
        });
        self.audit(
            now,
            actor,
            "share",
            format!("project {project}"),
            format!("share set to {share}"),
        );
        Ok(())
    }

    /// Sets a project's debts to zero and clears its backoffs (or every project's).
    pub fn reset_project(
        &mut self,
        project: Option<&str>,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), SchedulerError> {
        let name = project.map(ProjectName::new).transpose()?;
        self.ledger.reset(now, name.as_ref())?;
        self.save_ledger(now);
        let target = project.map_or("all projects".to_string(), |p| format!("project {p}"));
        self.audit(
            now,
            actor,
            "reset",
            target,
            "debts and backoffs cleared".to_string(),
        );
        self.place_pending(now);
        Ok(())
    }

    fn save_ledger(&mut self, now: Timestamp) {
        self.journal
            .push(Change::Ledger(Box::new(self.ledger.state())));
        self.ledger_saved_at = Some(now);
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

    /// A project's share.
    pub fn share(&self, project: &str) -> u32 {
        self.shares.get(project).copied().unwrap_or(DEFAULT_SHARE)
    }

    /// Time passes: leases expire, claims of dead local owners are released, and
    /// pending claims are placed where they now fit.
    pub fn tick(&mut self, now: Timestamp, owner_alive: &dyn Fn(u32) -> bool) {
        let expired: Vec<ClaimId> = self
            .claims
            .values()
            .filter(|c| c.lease_expires_at.is_some_and(|t| t <= now))
            .map(|c| c.id)
            .collect();
        for id in expired {
            self.remove(id, "lease", "expire", "lease expired, released", now);
        }
        let orphaned: Vec<ClaimId> = self
            .claims
            .values()
            .filter(|c| c.request.pid.is_some_and(|p| !owner_alive(p)))
            .map(|c| c.id)
            .collect();
        for id in orphaned {
            self.remove(
                id,
                "owner-check",
                "owner-gone",
                "owning process is gone, released",
                now,
            );
        }
        self.ledger.tick(now);
        self.place_pending(now);
        if self
            .ledger_saved_at
            .is_none_or(|t| now.millis_since(t) >= LEDGER_SAVE_MS || t > now)
        {
            self.save_ledger(now);
        }
    }

    /// Work fetch: the ledger picks which project's claim goes next on which resource
    /// type; placement finds the devices. A large claim that does not fit never holds
    /// back smaller ones (the ledger passes over it). Then the reasons of those still
    /// waiting are brought up to date.
    fn place_pending(&mut self, now: Timestamp) {
        let waiting = self
            .claims
            .values()
            .filter(|c| c.allocation.is_none())
            .count();
        let mut placed_any = false;
        // Each round places one claim; the bound guards against a ledger and a placement that disagree.
        for _ in 0..waiting {
            let (claims, fleet) = (&self.claims, &self.fleet);
            let mut fits = |c: &fairshare::PendingClaim, r: &fairshare::ResourceId, _| {
                claims
                    .get(&c.id)
                    .is_some_and(|claim| fleet.plan_on(&claim.request, r.model()).is_ok())
            };
            let Some(fetch) = self.ledger.work_fetch(now, &mut fits, &mut self.rng) else {
                break;
            };
            let id = fetch.claim;
            let Some(req) = self.claims.get(&id).map(|c| c.request.clone()) else {
                self.ledger.released(now, fetch.claim);
                continue;
            };
            let Ok(alloc) = self.fleet.claim_on(id, &req, fetch.resource.model()) else {
                break;
            };
            accounting::record_placed(&mut self.ledger, &self.fleet, now, id, &req, &alloc);
            let Some(claim) = self.claims.get_mut(&id) else {
                continue;
            };
            claim.allocation = Some(alloc.clone());
            claim.pending = None;
            let claim = claim.clone();
            self.journal.push(Change::Claim(Box::new(claim)));
            let trigger = match fetch.trigger {
                fairshare::Trigger::Idle => "idle",
                fairshare::Trigger::Shortfall => "shortfall",
            };
            self.audit(
                now,
                "scheduler",
                "place",
                format!("claim {id}"),
                format!(
                    "work fetch ({trigger} {}) placed it at {alloc}",
                    fetch.resource
                ),
            );
            placed_any = true;
        }
        for event in self.ledger.drain_events() {
            let detail = serde_json::to_string(&event.kind).unwrap_or_default();
            self.audit(
                event.at,
                "fairshare",
                "fairshare",
                "ledger".to_string(),
                detail,
            );
        }
        // Reasons only change when the state does: skip the scan (one explanation per
        // waiting claim, linear in devices) on ticks where nothing happened.
        if self.reasons_at == Some(self.revision) {
            if placed_any {
                self.save_ledger(now);
            }
            return;
        }
        self.reasons_at = Some(self.revision);
        let waiting: Vec<ClaimId> = self
            .claims
            .values()
            .filter(|c| c.allocation.is_none())
            .map(|c| c.id)
            .collect();
        for id in waiting {
            if let Some(claim) = self.claims.get(&id) {
                let reasons = self.fleet.plan(&claim.request).err();
                if let Some(claim) = self.claims.get_mut(&id) {
                    claim.pending = reasons;
                }
            }
        }
        if placed_any {
            self.save_ledger(now);
        }
    }

    /// The state as a snapshot (without telemetry: the owner adds what it samples).
    pub fn snapshot(&self, now: Timestamp) -> Snapshot {
        let nodes = self
            .fleet
            .nodes()
            .iter()
            .map(|n| NodeView {
                name: n.name.clone(),
                cpus_milli: n.cpus.map(|c| c.0),
                cpus_allocated_milli: n.cpus_allocated.0,
                devices: n
                    .devices
                    .iter()
                    .map(|d| DeviceView {
                        index: d.spec.index,
                        model: d.spec.model.clone(),
                        uuid: d.spec.uuid.clone(),
                        memory_capacity: d.spec.memory,
                        memory_allocated: d.memory_allocated,
                        memory_free: d.memory_free(),
                        compute_allocated: d.compute_allocated,
                        compute_free: d.compute_free(),
                        slots_allocated: d.slots_allocated,
                        slots_free: d.slots_free(),
                        cordoned: d.cordoned,
                        health: d.health.clone(),
                        holders: d.holders.clone(),
                        telemetry: None,
                        unclaimed_memory: None,
                    })
                    .collect(),
            })
            .collect();
        let (projects, resources) = accounting::views(&self.ledger.view(now), now);
        let claims = self
            .claims
            .values()
            .map(|c| {
                let mut view = claim_view(c);
                if c.allocation.is_none() {
                    // Placement says where it cannot go; the ledger says whose turn it is.
                    if view.pending_reasons.is_empty() {
                        view.pending_reasons.push(
                            "fits now; waiting for its project's turn (fair share)".to_string(),
                        );
                    }
                    let account_reasons = projects
                        .iter()
                        .filter(|p| p.name == c.request.project)
                        .flat_map(|p| p.resources.iter())
                        .filter(|a| a.pending > 0)
                        .filter_map(|a| {
                            a.reason
                                .as_ref()
                                .map(|r| format!("fair share on {}: {r}", a.resource))
                        });
                    view.pending_reasons.extend(account_reasons);
                }
                view
            })
            .collect();
        Snapshot {
            schema: snapshot::SCHEMA_VERSION,
            endpoint: EndpointInfo {
                name: self.config.name.clone(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                kind: self.config.kind.clone(),
                policy: match self.config.policy {
                    Policy::Binpack => "binpack".to_string(),
                    Policy::Spread => "spread".to_string(),
                },
                actions: true,
                telemetry_note: None,
            },
            revision: self.revision,
            taken_at: now,
            nodes,
            claims,
            projects,
            resources,
            coordination: Vec::new(),
            host: None,
            events: self.events.iter().cloned().collect(),
        }
    }
}

/// A claim as the snapshot shows it.
pub fn claim_view(c: &Claim) -> ClaimView {
    let alloc = c.allocation.as_ref();
    ClaimView {
        id: c.id,
        state: c.state(),
        project: c.request.project.clone(),
        holder: c.request.holder.clone(),
        form: c.request.describe(),
        request: c.request.clone(),
        node: alloc.map(|a| a.node.clone()),
        shares: alloc.map(|a| a.shares.clone()).unwrap_or_default(),
        memory_reserved: alloc.map(Allocation::memory).unwrap_or_default(),
        compute_reserved: alloc.map(Allocation::compute).unwrap_or_default(),
        memory_used: None,
        over_limit: false,
        idle: false,
        created_at: c.created_at,
        lease_expires_at: c.lease_expires_at,
        pending_reasons: c.pending.as_ref().map(NoFit::lines).unwrap_or_default(),
        infeasible: c.pending.as_ref().is_some_and(|p| p.infeasible),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::a100_node;
    use crate::units::Bytes;
    use serde_json::json;

    fn sched() -> Scheduler {
        Scheduler::new(SchedulerConfig::default(), vec![a100_node("a", 2)]).unwrap()
    }

    fn req(v: serde_json::Value) -> ClaimRequest {
        ClaimRequest::from_json(&v).unwrap()
    }

    const T0: Timestamp = Timestamp(1_000_000);

    #[test]
    fn place_pend_refuse() {
        let mut s = sched();
        assert!(matches!(
            s.submit(req(json!({"nvidia.com/gpu": 2})), "op", T0),
            Submitted::Placed(_)
        ));
        assert!(matches!(
            s.submit(req(json!({"num_gpus": 0.5})), "op", T0),
            Submitted::Refused(_)
        ));
        let Submitted::Pending(p) = s.submit(req(json!({"num_gpus": 0.5, "wait": true})), "op", T0)
        else {
            panic!("expected pending")
        };
        assert_eq!(p.pending.as_ref().map(NoFit::lines).unwrap().len(), 1);
        assert!(
            matches!(s.submit(req(json!({"nvidia.com/gpu": 3, "wait": true})), "op", T0), Submitted::Refused(n) if n.infeasible)
        );
        s.release(ClaimId(1), "op", T0).unwrap();
        s.tick(T0, &|_| true);
        assert!(
            s.claim(p.id).unwrap().allocation.is_some(),
            "pending claim placed once capacity freed"
        );
        assert!(
            s.release(ClaimId(1), "op", T0).is_none(),
            "release is idempotent"
        );
    }

    #[test]
    fn leases_and_owners() {
        let mut s = sched();
        s.submit(req(json!({"num_gpus": 0.5, "ttl": 60})), "op", T0);
        s.submit(req(json!({"num_gpus": 0.5, "pid": 4242})), "op", T0);
        s.tick(T0.plus_secs(30), &|_| true);
        s.renew(ClaimId(1), None, "op", T0.plus_secs(30)).unwrap();
        s.tick(T0.plus_secs(80), &|_| true);
        assert!(s.claim(ClaimId(1)).is_some(), "renewed lease still valid");
        s.tick(T0.plus_secs(91), &|pid| pid != 4242);
        assert!(s.claim(ClaimId(1)).is_none(), "expired");
        assert!(s.claim(ClaimId(2)).is_none(), "owner gone");
        let actions: Vec<_> = s
            .snapshot(T0)
            .events
            .iter()
            .map(|e| e.action.clone())
            .collect();
        assert!(
            actions.contains(&"expire".to_string()) && actions.contains(&"owner-gone".to_string()),
            "{actions:?}"
        );
        assert_eq!(
            s.fleet().node("a").unwrap().devices[0].memory_allocated,
            Bytes(0)
        );
        assert_eq!(
            s.renew(ClaimId(9), Some(5), "op", T0),
            Err(RenewError::UnknownClaim(ClaimId(9)))
        );
    }

    #[test]
    fn journal_round_trips_through_persisted_state() {
        let mut s = sched();
        s.submit(
            req(json!({"gpu_memory": "10Gi", "project": "vision"})),
            "op",
            T0,
        );
        s.submit(req(json!({"nvidia.com/gpu": 2, "wait": true})), "op", T0);
        s.set_cordon("a", 1, true, "op", T0).unwrap();
        s.set_share("vision", 300, "op", T0).unwrap();
        let changes = s.take_changes();
        assert!(matches!(
            changes.last(),
            Some(Change::Counters {
                revision: 4,
                next_id: ClaimId(3)
            })
        ));
        assert!(s.take_changes().is_empty());
        // Apply the journal the way a store would.
        let mut p = Persisted::default();
        for c in changes {
            match c {
                Change::Claim(c) => {
                    p.claims.retain(|x| x.id != c.id);
                    p.claims.push(*c);
                }
                Change::ClaimRemoved(id) => p.claims.retain(|x| x.id != id),
                Change::Cordon {
                    node,
                    index,
                    cordoned: true,
                } => p.cordoned.push((node, index)),
                Change::Cordon { .. } => {}
                Change::Share { project, share } => p.shares.push((project, share)),
                Change::Audit(e) => p.events.push(e),
                Change::Ledger(l) => p.ledger = Some(*l),
                Change::Counters { revision, next_id } => {
                    p.revision = revision;
                    p.next_id = next_id;
                }
            }
        }
        let node = NodeSpec {
            name: "a".into(),
            devices: s.fleet().nodes()[0]
                .devices
                .iter()
                .map(|d| d.spec.clone())
                .collect(),
            cpus: None,
        };
        let (mut r, warnings) =
            Scheduler::restore(SchedulerConfig::default(), vec![node], p).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        // Volatile reasons ("nothing fits since...") come back at the first tick.
        r.tick(T0, &|_| true);
        s.tick(T0, &|_| true);
        let (a, b) = (s.snapshot(T0), r.snapshot(T0));
        assert_eq!(a.claims, b.claims);
        assert_eq!(a.nodes, b.nodes);
        assert_eq!(a.revision, b.revision);
        assert_eq!(r.share("vision"), 300);
    }

    #[test]
    fn moves_keep_the_id_and_are_audited() {
        let mut s = sched();
        s.submit(req(json!({"num_gpus": 0.5, "devices": [0]})), "op", T0);
        let c = s
            .move_claim(
                ClaimId(1),
                &MoveTarget {
                    node: None,
                    devices: Some(vec![1]),
                },
                "op",
                T0,
            )
            .unwrap();
        assert_eq!(c.allocation.unwrap().shares[0].device, 1);
        let last = s.snapshot(T0).events.last().cloned().unwrap();
        assert_eq!(last.detail, "moved from a:0 to a:1");
    }

    fn one_gpu() -> Scheduler {
        Scheduler::new(SchedulerConfig::default(), vec![a100_node("a", 1)]).unwrap()
    }

    #[test]
    fn work_fetch_serves_the_project_that_is_owed_most() {
        let mut s = one_gpu();
        let whole = |p: &str| req(json!({"num_gpus": 1, "project": p, "wait": true}));
        assert!(matches!(
            s.submit(whole("a"), "op", T0),
            Submitted::Placed(_)
        ));
        let Submitted::Pending(b) = s.submit(whole("b"), "op", T0) else {
            panic!("b waits")
        };
        let Submitted::Pending(a2) = s.submit(whole("a"), "op", T0.plus_secs(1)) else {
            panic!("a waits")
        };
        // An hour of A holding the GPU while B waited: B is owed, A is not.
        s.tick(T0.plus_secs(3600), &|_| true);
        let snap = s.snapshot(T0.plus_secs(3600));
        let debt = |p: &str| {
            snap.projects
                .iter()
                .find(|x| x.name == p)
                .unwrap()
                .resources[0]
                .debt
        };
        assert!(
            debt("b") > 0.0 && debt("a") < 0.0,
            "a {} b {}",
            debt("a"),
            debt("b")
        );
        s.release(ClaimId(1), "op", T0.plus_secs(3600));
        s.tick(T0.plus_secs(3601), &|_| true);
        assert!(
            s.claim(b.id).unwrap().allocation.is_some(),
            "B, owed most, goes first"
        );
        assert!(s.claim(a2.id).unwrap().allocation.is_none());
        let pending = s
            .snapshot(T0.plus_secs(3601))
            .claim(a2.id)
            .cloned()
            .unwrap();
        assert!(
            !pending.pending_reasons.is_empty(),
            "a pending claim says why"
        );
    }

    #[test]
    fn a_large_waiting_claim_does_not_hold_back_small_ones() {
        let mut s = sched();
        s.submit(
            req(json!({"num_gpus": 0.5, "devices": [0], "project": "x"})),
            "op",
            T0,
        );
        let Submitted::Pending(big) = s.submit(
            req(json!({"nvidia.com/gpu": 2, "project": "big", "wait": true})),
            "op",
            T0,
        ) else {
            panic!("two whole GPUs cannot fit while one is shared")
        };
        let small = s.submit(
            req(json!({"num_gpus": 0.25, "project": "small", "wait": true})),
            "op",
            T0.plus_secs(1),
        );
        assert!(matches!(small, Submitted::Placed(_)), "{small:?}");
        assert!(s.claim(big.id).unwrap().allocation.is_none());
    }

    #[test]
    fn shares_and_resets_are_validated_and_survive_a_restart() {
        let mut s = one_gpu();
        assert!(
            s.set_share("a b", 10, "op", T0).is_err(),
            "bad project name"
        );
        assert!(
            s.set_share("a", 2_000_000, "op", T0).is_err(),
            "share above the maximum"
        );
        s.set_share("a", 300, "op", T0).unwrap();
        s.submit(req(json!({"num_gpus": 1, "project": "a"})), "op", T0);
        s.submit(
            req(json!({"num_gpus": 1, "project": "b", "wait": true})),
            "op",
            T0,
        );
        s.tick(T0.plus_secs(600), &|_| true);
        let before = s.snapshot(T0.plus_secs(600)).projects;
        let mut p = Persisted::default();
        for c in s.take_changes() {
            match c {
                Change::Claim(c) => {
                    p.claims.retain(|x| x.id != c.id);
                    p.claims.push(*c);
                }
                Change::ClaimRemoved(id) => p.claims.retain(|x| x.id != id),
                Change::Share { project, share } => p.shares.push((project, share)),
                Change::Ledger(l) => p.ledger = Some(*l),
                Change::Counters { revision, next_id } => {
                    p.revision = revision;
                    p.next_id = next_id;
                }
                Change::Cordon { .. } | Change::Audit(_) => {}
            }
        }
        let node = NodeSpec {
            name: "a".into(),
            devices: s.fleet().nodes()[0]
                .devices
                .iter()
                .map(|d| d.spec.clone())
                .collect(),
            cpus: None,
        };
        let (r, warnings) = Scheduler::restore(SchedulerConfig::default(), vec![node], p).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let after = r.snapshot(T0.plus_secs(600)).projects;
        let debts = |v: &[crate::snapshot::ProjectView]| {
            v.iter()
                .map(|p| (p.name.clone(), p.share, p.resources[0].debt))
                .collect::<Vec<_>>()
        };
        assert_eq!(debts(&before), debts(&after));
        s.reset_project(Some("b"), "op", T0.plus_secs(600)).unwrap();
        let b = s
            .snapshot(T0.plus_secs(600))
            .projects
            .into_iter()
            .find(|p| p.name == "b")
            .unwrap();
        assert_eq!(b.resources[0].debt, 0.0);
        assert!(s.reset_project(Some("nobody"), "op", T0).is_err());
    }
}
