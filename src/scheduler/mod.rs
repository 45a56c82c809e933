//! The scheduler: claims with their owners, leases and queue over a placement `Fleet`,
//! projects, audit events and a revision. Plain synchronous Rust with time passed in:
//! `gpuboard serve` wraps it with `SQLite` and HTTP, the console embeds it in-process,
//! and the simulator drives it on a simulated clock.
//!
//! Every mutation appends `Change`s to a journal that the owner drains with
//! `take_changes` and persists before acknowledging anything.
//!
//! Where things live: [`Scheduler`] and its configuration here; claims (submit, release,
//! move) in `claims`; leases and owner checks in `leases`; the pending queue and work
//! fetch in `queue`; operator changes (cordons, shares, resets) in `operator`; the
//! journal and restart in `journal`; the snapshot in `views`; the glue to the fair-share
//! ledger in `accounting`.

mod accounting;
mod ahead;
mod claims;
mod due;
#[cfg(test)]
mod equivalence;
mod forms;
mod journal;
mod leases;
mod operator;
mod queue;
#[cfg(test)]
mod tests;
mod views;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use chacha20::ChaCha12Rng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::fairshare::{FairShareError, Ledger, LedgerConfig};
use crate::ids::ClaimId;
use crate::placement::{Allocation, Fleet, FleetError, NoFit, NodeSpec, Policy};
use crate::request::ClaimRequest;
use crate::shared::SharedMap;
use crate::snapshot::AuditEvent;

pub use claims::{Claim, ShareZero, Submitted, claim_view};
pub use journal::{Change, Persisted};
pub use leases::RenewError;

/// A project's share when none was set.
pub const DEFAULT_SHARE: u32 = 100;
/// Audit events kept in memory for snapshots (all are persisted).
const EVENTS_KEPT: usize = 500;
/// How often the ledger (debts, backoffs) is persisted when nothing else changes it:
/// a crash loses at most this much debt accrual, never a claim.
const LEDGER_SAVE_MS: u64 = 30_000;
/// The same while the revision has not moved since the last save (no claim, release,
/// renewal, share or ledger event): only debts accrued at the same rates since then,
/// which a restart accrues again from the saved time with the same claims, so nothing
/// is lost; an idle endpoint with 20 000 claims then skips writing them every 30 s.
const LEDGER_IDLE_SAVE_MS: u64 = 600_000;

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

/// The scheduler's state. A clone is a copy to run forward (`copy`): the forecast and the
/// preview apply the endpoint's own code to it.
#[derive(Clone, Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    fleet: Fleet,
    /// Shared with copies (`crate::shared`), and each claim behind its own `Arc`: a copy
    /// to run forward shares the table, and a change to one claim copies the table's nodes
    /// on its path and that claim only while a copy still shares them (`Arc::make_mut`).
    claims: SharedMap<ClaimId, Arc<Claim>>,
    shares: BTreeMap<String, u32>,
    events: VecDeque<AuditEvent>,
    revision: u64,
    next_id: ClaimId,
    journal: Vec<Change>,
    ledger: Ledger,
    rng: Jitter,
    /// When the ledger was last journaled, and the revision then.
    ledger_saved_at: Option<(Timestamp, u64)>,
    /// The fleet generation at which waiting claims' reasons were last worked out.
    reasons_at: Option<u64>,
    /// What a tick must look at (leases by their end, owned claims, waiting claims).
    due: due::Due,
    /// Whether a waiting claim fits on a resource type, as worked out at the fleet's
    /// generation: work fetch asks again every tick, and the answer only changes with the
    /// fleet.
    fits_seen: forms::FitsSeen,
    /// A copy run forward to see what would happen (`copy`): it journals, audits and
    /// explains nothing, since nothing of it is kept or shown, and a forecast steps
    /// through hundreds of instants.
    copy: bool,
    /// Tests: scan every claim and work out every fit afresh, as before the lists above.
    #[cfg(test)]
    reference: bool,
}

/// The backoff jitter's random source: `rand`'s standard generator (the same stream for a
/// seed), held directly so that a copy of the scheduler continues the very same sequence.
struct Jitter(ChaCha12Rng);

impl Clone for Jitter {
    fn clone(&self) -> Jitter {
        let mut rng = ChaCha12Rng::from_seed(self.0.get_seed());
        rng.set_stream(self.0.get_stream());
        rng.set_word_pos(self.0.get_word_pos());
        Jitter(rng)
    }
}

impl std::fmt::Debug for Jitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Jitter(word {})", self.0.get_word_pos())
    }
}

impl Scheduler {
    /// A scheduler over these nodes, with nothing claimed.
    pub fn new(config: SchedulerConfig, nodes: Vec<NodeSpec>) -> Result<Scheduler, SchedulerError> {
        let mut fleet = Fleet::new(config.policy);
        for n in nodes {
            fleet.add_node(n)?;
        }
        let ledger = Ledger::new(config.fairshare.clone())?;
        let rng = Jitter(ChaCha12Rng::seed_from_u64(config.seed));
        let mut s = Scheduler {
            config,
            fleet,
            claims: SharedMap::new(),
            shares: BTreeMap::new(),
            events: VecDeque::new(),
            revision: 0,
            next_id: ClaimId::FIRST,
            journal: Vec::new(),
            ledger,
            rng,
            ledger_saved_at: None,
            reasons_at: None,
            due: due::Due::default(),
            fits_seen: forms::FitsSeen::default(),
            copy: false,
            #[cfg(test)]
            reference: false,
        };
        s.register_resources(Timestamp(0));
        Ok(s)
    }

    fn register_resources(&mut self, now: Timestamp) {
        for t in accounting::resource_types(&self.fleet, &self.config.speeds) {
            self.ledger.set_resource(now, t);
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

    /// Whether `id` was ever handed out here (ids are never reused).
    pub fn issued(&self, id: ClaimId) -> bool {
        id >= ClaimId::FIRST && id < self.next_id
    }

    /// A claim by id.
    pub fn claim(&self, id: ClaimId) -> Option<&Claim> {
        self.claims.get(&id).map(|c| &**c)
    }

    /// All claims, by id.
    pub fn claims(&self) -> impl Iterator<Item = &Claim> {
        self.claims.values().map(|c| &**c)
    }

    /// Where a request would go now, without placing it (the console's preview).
    pub fn plan(&self, req: &ClaimRequest) -> Result<Allocation, NoFit> {
        self.fleet.plan(req)
    }

    /// A project's share.
    pub fn share(&self, project: &str) -> u32 {
        self.shares.get(project).copied().unwrap_or(DEFAULT_SHARE)
    }
}
