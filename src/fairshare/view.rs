//! What the ledger shows and persists: the state to save and restore, the view for the
//! snapshot and the console (with the reason each project waits), and its events.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::claim::{PendingClaim, RunningClaim};
use super::project::{Account, Gflop, InstanceSecs, ProjectName, Share};
use super::resource::{ResourceId, ResourceType, Speed};
use crate::clock::Timestamp;

/// Everything the ledger needs to resume after a restart; serialize it as it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FairShareState {
    /// Format version (1).
    pub version: u32,
    /// The last time the ledger was given; debt accrues from here.
    pub last_seen: Option<Timestamp>,
    /// The resource types.
    pub resources: Vec<ResourceType>,
    /// The projects and their accounts.
    pub projects: Vec<ProjectState>,
    /// Pending claims, oldest first.
    pub pending: Vec<PendingClaim>,
    /// Running claims.
    pub running: Vec<RunningClaim>,
}

/// One project in the persisted state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProjectState {
    /// Its name.
    pub name: ProjectName,
    /// Its resource share.
    pub share: Share,
    /// Its account on each resource type.
    pub accounts: BTreeMap<ResourceId, Account>,
}

/// The ledger at one moment, for the snapshot, `/metrics` and the console.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FairShareView {
    /// The time it describes.
    pub at: Timestamp,
    /// Per resource type.
    pub resources: Vec<LedgerResource>,
    /// Per project.
    pub projects: Vec<LedgerProject>,
}

/// One resource type in the view.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LedgerResource {
    /// Its name.
    pub id: ResourceId,
    /// Its instances.
    pub instances: u32,
    /// Its speed.
    pub speed: Speed,
    /// Instances held by running claims.
    pub used_instances: f64,
    /// Instances free now (the source's nidle, fractional).
    pub idle_instances: f64,
    /// Idle instance-seconds expected over the buffer horizon.
    pub shortfall: InstanceSecs,
}

/// One project in the view.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LedgerProject {
    /// Its name.
    pub name: ProjectName,
    /// Its resource share.
    pub share: Share,
    /// Sum over resource types of debt x speed.
    pub overall_debt: Gflop,
    /// Its pending claims.
    pub pending: usize,
    /// Its running claims.
    pub running: usize,
    /// Its account on each resource type.
    pub resources: Vec<AccountView>,
}

/// One (project, resource type) in the view.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AccountView {
    /// The resource type.
    pub resource: ResourceId,
    /// LTD(P,R).
    pub debt: InstanceSecs,
    /// D(P,R).
    pub accrue: bool,
    /// y(P,R): the instances the project should hold now.
    pub target_instances: f64,
    /// The instances it holds.
    pub used_instances: f64,
    /// Its pending claims this type could run.
    pub pending: u32,
    /// End of its backoff, as an absolute time.
    pub backoff_until: Option<Timestamp>,
    /// Seconds of backoff left.
    pub backoff_left_s: Option<f64>,
    /// The current backoff interval before jitter, in seconds.
    pub backoff_interval_s: Option<f64>,
    /// Why it gets no work of this type now (`queued` when only its turn is missing).
    pub reason: WaitReason,
}

/// Why a project gets no work of a resource type now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WaitReason {
    /// Its share is 0.
    ShareZero,
    /// It has no pending claim this type could run.
    NoPendingWork,
    /// It is backed off for this type.
    BackedOff {
        /// Until when.
        until: Timestamp,
    },
    /// The last work fetch found none of its claims fits here now.
    NothingFits {
        /// Since when.
        since: Timestamp,
    },
    /// The type has no idle capacity and none expected within the horizon.
    NoCapacity,
    /// It is waiting for its turn: other projects are owed more.
    Queued,
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::ShareZero => f.write_str("share is 0"),
            WaitReason::NoPendingWork => f.write_str("no pending work for this resource"),
            WaitReason::BackedOff { until } => write!(f, "backed off until {} ms", until.0),
            WaitReason::NothingFits { since } => {
                write!(f, "no pending claim fits (since {} ms)", since.0)
            }
            WaitReason::NoCapacity => f.write_str("no idle capacity now or within the horizon"),
            WaitReason::Queued => f.write_str("waiting for its turn (others are owed more)"),
        }
    }
}

/// Something the ledger did that an operator may want in the audit log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FairShareEvent {
    /// When.
    pub at: Timestamp,
    /// What.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    /// A project was backed off for a resource type.
    BackedOff {
        /// The project.
        project: ProjectName,
        /// The resource type.
        resource: ResourceId,
        /// Until when.
        until: Timestamp,
        /// The interval before jitter, in seconds.
        interval_s: f64,
    },
    /// A backoff was cleared.
    BackoffCleared {
        /// The project.
        project: ProjectName,
        /// The resource type.
        resource: ResourceId,
        /// Why.
        cause: ClearCause,
    },
    /// The clock went backwards; every backoff was cleared.
    ClockWentBack {
        /// The last time seen.
        from: Timestamp,
        /// The earlier time given.
        to: Timestamp,
    },
    /// An operator reset a project's debts (all projects when `None`).
    DebtsReset {
        /// The project.
        project: Option<ProjectName>,
    },
}

/// Why a backoff was cleared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClearCause {
    /// A claim of the project was placed on the resource type.
    Placed,
    /// The project submitted a claim the resource type could run.
    NewClaim,
    /// An operator cleared it.
    Operator,
}
