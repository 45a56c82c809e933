//! Where the console's data comes from: every source turns what it reads into a
//! `Snapshot` and carries out the actions it owns. Engine sources (Ray, Prometheus, Slurm,
//! BOINC) read other systems and refuse gpuboard's own actions (BOINC takes one: "update
//! project"); Slurm, BOINC and Ray carry out engine actions (`actions`, `Action::Engine`).
//!
//! A source is polled by the console's driver, one request in flight at a time, under a
//! timeout, and fetched at once when it reports a change (`Source::changed`); a fetch
//! answers `Fetched::Unchanged` when the source knows nothing changed. The console keeps
//! each source's last good snapshot, its fetch time and its error, so a source that is
//! down never blanks the others. Implementations: the embedded scheduler (`embedded`), the demo fleet with a synthetic workload (`demo`),
//! gpuboard HTTP endpoints (`endpoint`, kept in sync by `watch` over a `feed`), engine adapters (`ray`, `prometheus`, `slurm`,
//! `boinc`), each implementing `Source` on the shared shell in `adapter`, and hosts read over SSH (`ssh`).

pub mod actions;
mod adapter;
pub mod boinc;
pub mod demo;
pub mod embedded;
pub mod endpoint;
pub mod endpoint_history;
pub mod error;
mod feed;
pub mod gres;
pub mod guirpc;
pub mod handover;
pub mod history;
pub mod http;
pub mod json;
pub mod kind;
pub mod kubernetes;
pub mod md5;
pub mod prometheus;
pub mod ray;
pub mod sections;
pub mod slurm;
pub mod ssh;
mod watch;
pub mod xml;

use std::sync::Arc;

use futures::future::BoxFuture;

pub use kind::{EndpointConfig, SourceKind, connect};

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::placement::{Allocation, MoveTarget};
use crate::request::ClaimRequest;
use crate::scheduler::{Scheduler, Submitted};
use crate::snapshot::{ClaimView, Snapshot};

/// Why a source could not answer, or refused an action. Messages are the source's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// An engine peer (Ray, Prometheus) failed, as its adapter describes it.
    #[error(transparent)]
    Peer(#[from] error::SourceError),
    /// No answer within the timeout.
    #[error("no answer within {0} ms")]
    Timeout(u64),
    /// Could not connect, or the connection broke before an answer came.
    #[error("unreachable: {detail}")]
    Unreachable {
        /// Why, in words.
        detail: String,
        /// Whether the request may have reached the source: `false` only when surely nothing
        /// was sent (no connection was made), so an action or claim is known not done.
        sent: bool,
    },
    /// The token was missing or refused.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// An HTTP error status with the endpoint's message.
    #[error("HTTP {status}: {message}")]
    Http {
        /// Status code.
        status: u16,
        /// The endpoint's error text.
        message: String,
    },
    /// The answer could not be read.
    #[error("unreadable answer: {0}")]
    Decode(String),
    /// The request was invalid (a validation rule, in the validator's words).
    #[error("{0}")]
    Invalid(String),
    /// The source refused the action, in its own words.
    #[error("{0}")]
    Refused(String),
    /// The source cannot act at all (an engine adapter, a read-only endpoint, `--readonly`).
    #[error("read-only: {0}")]
    ReadOnly(String),
    /// A keyed claim whose first send with that key is still being committed: it will
    /// land (or fail with the store); ask again with the same key.
    #[error("still in flight: {0}")]
    InFlight(String),
}

/// What a fetch found.
#[derive(Clone, Debug, PartialEq)]
pub enum Fetched {
    /// The source's state, changed since the last fetch (or the first one).
    Snapshot(Box<Snapshot>),
    /// The source's state, changed since the last fetch in what telemetry brings alone
    /// (`Snapshot::same_but_telemetry` holds between the two): the console takes it
    /// without comparing them.
    Telemetry(Box<Snapshot>),
    /// The source is live and nothing changed since the last fetch: the console marks it
    /// fresh and rebuilds nothing.
    Unchanged,
}

impl Fetched {
    /// The snapshot, when one came.
    pub fn snapshot(self) -> Option<Snapshot> {
        match self {
            Fetched::Snapshot(s) | Fetched::Telemetry(s) => Some(*s),
            Fetched::Unchanged => None,
        }
    }
}

impl From<Snapshot> for Fetched {
    fn from(s: Snapshot) -> Fetched {
        Fetched::Snapshot(Box::new(s))
    }
}

/// A change an operator asks a source to make.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create a claim.
    Claim {
        /// The validated request.
        request: ClaimRequest,
    },
    /// Release a claim.
    Release {
        /// The claim.
        id: ClaimId,
    },
    /// Reassign a placed claim.
    Move {
        /// The claim.
        id: ClaimId,
        /// Where to.
        target: MoveTarget,
    },
    /// Stop or resume new claims on a device.
    Cordon {
        /// Node.
        node: String,
        /// Device index.
        index: u32,
        /// Cordon (true) or uncordon.
        cordoned: bool,
    },
    /// Clear a project's backoffs and debts.
    ResetProject {
        /// The project.
        project: String,
    },
    /// Set a project's resource share (0 gets no work).
    SetShare {
        /// The project.
        project: String,
        /// Its new share (`fairshare::Share`'s range).
        share: u32,
    },
    /// An action on the engine itself (Slurm, BOINC, Ray): `actions`.
    Engine(actions::EngineAction),
}

impl Action {
    /// A short name for logs and messages.
    pub fn verb(&self) -> &'static str {
        match self {
            Action::Claim { .. } => "claim",
            Action::Release { .. } => "release",
            Action::Move { .. } => "move",
            Action::Cordon { cordoned: true, .. } => "cordon",
            Action::Cordon { .. } => "uncordon",
            Action::ResetProject { .. } => "reset",
            Action::SetShare { .. } => "share",
            Action::Engine(a) => a.verb.name(),
        }
    }

    /// What it acts on, in words.
    pub fn target(&self) -> String {
        match self {
            Action::Claim { request } => request.describe(),
            Action::Release { id } | Action::Move { id, .. } => format!("claim {id}"),
            Action::Cordon { node, index, .. } => format!("{node}:{index}"),
            Action::ResetProject { project } | Action::SetShare { project, .. } => {
                format!("project {project}")
            }
            Action::Engine(a) => a.describe_target(),
        }
    }
}

/// What an action did.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A claim was created (placed or pending).
    Claimed(Box<ClaimView>),
    /// A claim was released; where it was.
    Released {
        /// The claim.
        id: ClaimId,
        /// Where it was (`node:devices`, or `pending`); `None` when it was already gone.
        place: Option<String>,
    },
    /// A claim moved.
    Moved {
        /// The claim.
        id: ClaimId,
        /// The old place.
        from: String,
        /// The new place.
        to: String,
    },
    /// A device was cordoned or uncordoned.
    Cordoned {
        /// Node.
        node: String,
        /// Index.
        index: u32,
        /// New state.
        cordoned: bool,
    },
    /// A project's backoffs and debts were cleared.
    Reset {
        /// The project.
        project: String,
    },
    /// A project's resource share was set.
    ShareSet {
        /// The project.
        project: String,
        /// Its share now.
        share: u32,
    },
    /// An engine carried out an action; its answer.
    Engine(actions::EngineDone),
}

impl Outcome {
    /// The result in one line, for the status line and the events pane.
    pub fn message(&self) -> String {
        match self {
            Outcome::Claimed(c) => match c.place() {
                Some(place) => format!("claim {} placed at {place} ({})", c.id, c.form),
                None => format!("claim {} is pending ({})", c.id, c.form),
            },
            Outcome::Released { id, place: Some(p) } => format!("claim {id} released ({p})"),
            Outcome::Released { id, place: None } => format!("claim {id} was already gone"),
            Outcome::Moved { id, from, to } => format!("claim {id} moved from {from} to {to}"),
            Outcome::Cordoned {
                node,
                index,
                cordoned,
            } => format!(
                "{node}:{index} {}",
                if *cordoned { "cordoned" } else { "uncordoned" }
            ),
            Outcome::Reset { project } => format!("project {project}: backoffs and debts cleared"),
            Outcome::ShareSet { project, share } => {
                format!("project {project}: share set to {share}")
            }
            Outcome::Engine(done) => format!(
                "{} {}: {}",
                done.action.verb,
                done.action.describe_target(),
                done.answer
            ),
        }
    }
}

/// A source of snapshots, and the executor of the actions it owns.
///
/// Methods return `'static` futures so the driver can run them on their own task under a
/// timeout; implementations clone what they need out of `self`.
pub trait Source: Send + Sync {
    /// The name operators see.
    fn name(&self) -> &str;
    /// What it is.
    fn kind(&self) -> SourceKind;
    /// Whether it accepts gpuboard's actions (claim, release, move, cordon, reset). Engine
    /// actions (`Action::Engine`) are offered by the source's kind (`actions::offers`).
    fn can_act(&self) -> bool;
    /// A note shown beside the source (why there are no GPUs, how to see the demo).
    fn note(&self) -> Option<String> {
        None
    }
    /// Reads the current state: a snapshot when it changed since the last fetch (always
    /// for the first), `Fetched::Unchanged` when the source knows nothing changed.
    fn fetch(&self) -> BoxFuture<'static, Result<Fetched, Failure>>;
    /// Woken when the source's data changed, so the driver fetches it at once instead of
    /// at the next refresh; `None` (the default) for sources that are only polled.
    fn changed(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }
    /// Its recorded history, for rewinding; `None` (the default) when it keeps none.
    fn history(&self) -> Option<Arc<dyn history::SourceHistory>> {
        None
    }
    /// Every waiting claim's expected start, where the source computes one (a gpuboard
    /// endpoint's `GET /v1/forecast`); `None` (the default) for the others, which give none.
    fn forecast(
        &self,
    ) -> Option<BoxFuture<'static, Result<crate::wire::forecast::Forecast, Failure>>> {
        None
    }
    /// What `action` would do, worked out by the source on a copy of its state (a gpuboard
    /// endpoint's `POST /v1/preview`); `None` (the default) for sources that cannot say.
    fn preview(
        &self,
        action: crate::wire::forecast::PreviewAction,
    ) -> Option<BoxFuture<'static, Result<crate::wire::forecast::Preview, Failure>>> {
        let _ = action;
        None
    }
    /// Where a claim request would be placed now, without placing it.
    fn plan(&self, request: ClaimRequest) -> BoxFuture<'static, Result<Allocation, Failure>>;
    /// Carries out an action.
    fn act(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>>;
    /// Carries out one step of a move across sources (the claim on the target, the release
    /// on the claim's own source), tagged with the move's id so that both sides audit the
    /// same move (`wire::move_actor`). Sources without an audit log just act.
    fn act_in_move(
        &self,
        action: Action,
        move_id: &str,
    ) -> BoxFuture<'static, Result<Outcome, Failure>> {
        let _ = move_id;
        self.act(action)
    }
    /// Sends a claim with an idempotency `key` (tagged with `move_id` in a move across
    /// sources), waiting up to `patience` for the answer (longer than the source's own
    /// timeout when a late answer is asked for again): sent again with the same key and
    /// request, it answers what the first send did, never placing it twice. Sources whose
    /// answers cannot be lost (in-process ones) just act.
    fn claim_keyed(
        &self,
        request: ClaimRequest,
        key: String,
        move_id: Option<String>,
        patience: std::time::Duration,
    ) -> BoxFuture<'static, Result<Outcome, Failure>> {
        let _ = (key, patience);
        let action = Action::Claim { request };
        match move_id {
            Some(id) => self.act_in_move(action, &id),
            None => self.act(action),
        }
    }
}

/// Applies an action to an in-process scheduler (the embedded and demo sources).
pub fn apply(
    sched: &mut Scheduler,
    action: &Action,
    actor: &str,
    now: Timestamp,
) -> Result<Outcome, Failure> {
    match action {
        Action::Claim { request } => match sched.submit(request.clone(), actor, now) {
            Submitted::Placed(c) | Submitted::Pending(c) => {
                Ok(Outcome::Claimed(Box::new(crate::scheduler::claim_view(&c))))
            }
            Submitted::Refused(no) => Err(Failure::Refused(no.summary())),
            Submitted::ShareZero(e) => Err(Failure::Refused(e.to_string())),
        },
        Action::Release { id } => {
            let gone = sched.release(*id, actor, now);
            Ok(Outcome::Released {
                id: *id,
                place: gone.map(|c| {
                    c.allocation
                        .as_ref()
                        .map_or_else(|| "pending".to_string(), ToString::to_string)
                }),
            })
        }
        Action::Move { id, target } => {
            let from = sched
                .claim(*id)
                .and_then(|c| c.allocation.as_ref())
                .map(ToString::to_string)
                .unwrap_or_default();
            let moved = sched
                .move_claim(*id, target, actor, now)
                .map_err(|e| Failure::Refused(e.to_string()))?;
            let to = moved
                .allocation
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            Ok(Outcome::Moved { id: *id, from, to })
        }
        Action::Cordon {
            node,
            index,
            cordoned,
        } => {
            sched
                .set_cordon(node, *index, *cordoned, actor, now)
                .map_err(|e| Failure::Refused(e.to_string()))?;
            Ok(Outcome::Cordoned {
                node: node.clone(),
                index: *index,
                cordoned: *cordoned,
            })
        }
        Action::Engine(a) => Err(Failure::ReadOnly(not_an_engine(&a.verb))),
        Action::ResetProject { project } => {
            sched
                .reset_project(Some(project), actor, now)
                .map_err(|e| Failure::Refused(e.to_string()))?;
            Ok(Outcome::Reset {
                project: project.clone(),
            })
        }
        Action::SetShare { project, share } => {
            sched
                .set_share(project, *share, actor, now)
                .map_err(|e| Failure::Refused(e.to_string()))?;
            Ok(Outcome::ShareSet {
                project: project.clone(),
                share: *share,
            })
        }
    }
}

/// Why a gpuboard scheduler (embedded, demo, an endpoint) refuses an engine action.
pub fn not_an_engine(verb: &actions::EngineVerb) -> String {
    format!(
        "`{verb}` is a {} action; this source is a gpuboard scheduler, not a {} engine",
        verb.kind(),
        verb.kind()
    )
}

/// Plans a wire request on an in-process scheduler.
pub fn plan_on(sched: &Scheduler, request: &ClaimRequest) -> Result<Allocation, Failure> {
    sched
        .plan(request)
        .map_err(|no| Failure::Refused(no.summary()))
}

/// Plans a request against a snapshot (for sources whose API has no planner): rebuilds
/// the fleet from the snapshot's devices and placed claims, then asks placement. The
/// owner re-checks when the claim is submitted, so this is a preview, not a promise.
pub fn plan_on_snapshot(
    snapshot: &Snapshot,
    request: &ClaimRequest,
) -> Result<Allocation, Failure> {
    fleet_of_snapshot(snapshot)?
        .plan(request)
        .map_err(|no| Failure::Refused(no.summary()))
}

/// The placement fleet a snapshot describes: its devices (cordons and health included)
/// with its placed claims booked, under the endpoint's policy.
pub fn fleet_of_snapshot(snapshot: &Snapshot) -> Result<crate::placement::Fleet, Failure> {
    let mut fleet = crate::placement::Fleet::new(snapshot.endpoint.placement_policy());
    for n in &snapshot.nodes {
        fleet
            .add_node(n.spec())
            .map_err(|e| Failure::Decode(e.to_string()))?;
        for d in &n.devices {
            if d.cordoned {
                fleet
                    .set_cordon(&n.name, d.index, true)
                    .map_err(|e| Failure::Decode(e.to_string()))?;
            }
            if d.health != crate::placement::Health::Healthy {
                fleet
                    .set_health(&n.name, d.index, d.health.clone())
                    .map_err(|e| Failure::Decode(e.to_string()))?;
            }
        }
    }
    for c in &snapshot.claims {
        if let Some(node) = &c.node {
            let alloc = Allocation {
                node: node.clone(),
                shares: c.shares.clone(),
                cpus: c.request.cpus,
            };
            fleet
                .restore(c.id, &c.request, &alloc)
                .map_err(|e| Failure::Decode(e.to_string()))?;
        }
    }
    Ok(fleet)
}
