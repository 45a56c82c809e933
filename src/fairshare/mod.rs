//! Fair share between projects, after BOINC's GPU work fetch (docs/design.md#5-fair-share): per
//! (project, resource type) long-term debts accruing toward max-min fair targets, the
//! accrual flag D(P,R), speed-weighted overall debt, idle capacity and shortfall from a
//! simulation of running claims, work fetch in the source's order, and per-(project,
//! resource type) backoffs.
//!
//! Plain synchronous code with no I/O: the caller hands in the time and the random
//! source, and decides through [`Fit`] whether a claim fits now, so placement plugs in.

mod accrual;
mod backoff;
mod busy;
mod claim;
mod flow;
mod forms;
mod inspect;
mod ledger;
mod persist;
mod project;
mod resource;
mod rr;
mod targets;
mod time;
mod view;
mod workfetch;

use crate::ids::ClaimId;

pub use backoff::{Backoff, BackoffPolicy};
pub use claim::{PendingClaim, ResourceDemand, RunningClaim};
pub use ledger::{Ledger, LedgerConfig};
pub use project::{Account, Gflop, InstanceSecs, ProjectName, Share};
pub use resource::{
    CPU_CORE_GFLOPS, KNOWN_GPUS, ResourceId, ResourceType, Speed, UNKNOWN_GPU_GFLOPS, default_speed,
};
pub use rr::{RrOutcome, RunningUse, simulate as rr_simulate};
pub use targets::{Capacity, Demand, targets};
pub use time::{TimestampExt, opt_secs, secs};
pub use view::{
    AccountView, ClearCause, EventKind, FairShareEvent, FairShareState, FairShareView,
    LedgerProject, LedgerResource, ProjectState, WaitReason,
};
pub use workfetch::{Fetch, Fit, Placed, Trigger};

/// What the fair-share layer refuses, naming what was wrong and what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FairShareError {
    /// A resource type name that is neither `cpu` nor `gpu:MODEL`.
    #[error(
        "resource type `{0}` is not valid: use `cpu` or `gpu:MODEL` (a non-empty model name, at most 128 characters)"
    )]
    BadResource(String),
    /// A speed that is not a positive finite number.
    #[error("speed {0} is not valid: give a positive, finite number of GFLOPS per instance")]
    BadSpeed(f64),
    /// A project name with characters outside the allowed set.
    #[error("project name `{0}` is not valid: use 1 to 128 letters, digits, `.`, `_`, `-` or `/`")]
    BadProject(String),
    /// A share above the maximum.
    #[error("share {0} is not valid: use 0 to 1000000 (0 means the project gets no work)")]
    BadShare(u32),
    /// A backoff policy that cannot work.
    #[error("backoff policy is not valid: {0}")]
    BadBackoff(String),
    /// A horizon of zero or of more than a week.
    #[error("buffer horizon of {0} s is not valid: use more than 0 and at most 604800 s (a week)")]
    BadHorizon(f64),
    /// A resource type the endpoint does not have.
    #[error("resource type `{resource}` is not on this endpoint; it has: {known}")]
    UnknownResource {
        /// The name given.
        resource: ResourceId,
        /// The names it has, comma-separated.
        known: String,
    },
    /// A project that does not exist.
    #[error("project `{0}` does not exist")]
    UnknownProject(ProjectName),
    /// A claim id already in use.
    #[error("claim {0} is already known to the fair-share ledger")]
    DuplicateClaim(ClaimId),
    /// A pending claim with no resource type to run on.
    #[error("claim {0} names no resource type it could run on")]
    NoDemand(ClaimId),
    /// A claim that asks for nothing, or names a type twice.
    #[error("claim {claim} is not valid on `{resource}`: {why}")]
    BadDemand {
        /// The claim.
        claim: ClaimId,
        /// The resource type.
        resource: ResourceId,
        /// What is wrong.
        why: &'static str,
    },
    /// A claim larger than every resource type it names.
    #[error("claim {0} could never run: it is larger than every resource type it names")]
    NeverFits(ClaimId),
    /// A claim placed for a different project than it was submitted for.
    #[error("claim {claim} was submitted for project `{submitted}`, not `{placed}`")]
    ProjectMismatch {
        /// The claim.
        claim: ClaimId,
        /// The project it was submitted for.
        submitted: ProjectName,
        /// The project named on placement.
        placed: ProjectName,
    },
    /// Persisted state that does not hang together.
    #[error("fair-share state is not valid: {0}")]
    BadState(String),
}
