//! A Ray cluster read through its dashboard, as a read-only console source.
//!
//! Six GETs per fetch, one at a time: `/api/version` (is it Ray, which version),
//! `/nodes?view=summary` (nodes, resource totals, and every worker's used resources per
//! GPU index, Ray's `resourceSlots`), `/api/cluster_status` (pending resource demands),
//! and the state API's `/api/v0/tasks`, `/api/v0/actors` and `/api/v0/placement_groups`
//! (names, jobs, pending work, placement-group bundles). The dashboard renames resources
//! in some answers (camelCase: `acceleratorType:A100`, `GPUGroup0Fa9Db...` for
//! `GPU_group_0_fa9db...`); `classify_resource` maps them back.
//!
//! In the snapshot, every actor, task and placement-group bundle holding GPU is a placed
//! claim with its shares per GPU index; tasks and actors running inside a bundle are
//! claims too, but their shares are carved out of the bundle's, so device allocation
//! counts the bundle once. Pending tasks and placement groups that want GPU are pending
//! claims with Ray's state and demand as reasons, marked infeasible when no node could
//! ever hold them. Ray owns these GPUs: the source refuses gpuboard's actions
//! (`refuse_action`) and carries out one engine action, stop a submitted job (`actions`).
//!
//! Where things live: `answers` (the requests and their envelopes), `resources` (Ray's
//! resource names), `nodes` and `work` (the readers of each answer), `claims` (a holder as
//! a claim), `pending` (pending tasks and placement groups), `snapshot` (the sections
//! assembled; a section that cannot be read is a warning, only the nodes are core).

mod actions;
mod answers;
mod claims;
mod nodes;
mod pending;
mod resources;
mod snapshot;
mod work;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

pub use answers::{RayAnswerError, RayAnswerKind, RayAnswers, RayParseError, parse_version};
pub use resources::{RayResource, classify_resource};
pub use snapshot::snapshot;

use super::adapter::{self, Shell};
use super::error::SourceError;
use super::http::{Auth, JsonClient, PeerKind};
use super::kind::SourceKind;
use crate::clock::Clock;
use crate::snapshot::Snapshot;

/// How to reach a Ray dashboard.
#[derive(Clone, Debug, PartialEq)]
pub struct RayConfig {
    /// Display name of the endpoint; the URL's host when empty.
    pub name: String,
    /// The dashboard's address, `http://head:8265` (a proxy path prefix is kept).
    pub url: String,
    /// Ray's auth token (`RAY_AUTH_MODE=token`), sent as `Authorization: Bearer`.
    pub token: Option<String>,
    /// Deadline for a whole fetch.
    pub timeout: Duration,
}

impl RayConfig {
    /// A config with no token and a 5-second timeout.
    pub fn new(url: impl Into<String>) -> RayConfig {
        RayConfig {
            name: String::new(),
            url: url.into(),
            token: None,
            timeout: Duration::from_secs(5),
        }
    }
}

/// What the console shows when an operator tries to claim, release or move on a Ray source.
pub fn refuse_action(action: &str) -> String {
    adapter::refusal(
        "Ray owns these GPUs",
        action,
        "Change the work through Ray itself (cancel the task, kill the actor, remove the \
         placement group, or resubmit the job with other resources).",
    )
}

/// A Ray dashboard as a console source.
#[derive(Clone)]
pub struct RaySource {
    shell: Shell<RayConfig, JsonClient>,
}

impl std::fmt::Debug for RaySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let config = &self.shell.config;
        f.debug_struct("RaySource")
            .field("url", &config.url)
            .field("token", &adapter::hidden(config.token.as_ref()))
            .finish_non_exhaustive()
    }
}

impl RaySource {
    /// A source reading the dashboard in `config`, on the wall clock.
    pub fn new(config: RayConfig) -> Result<RaySource, SourceError> {
        RaySource::with_clock(config, adapter::wall_clock())
    }

    /// A source on an injected clock (tests).
    pub fn with_clock(config: RayConfig, clock: Arc<dyn Clock>) -> Result<RaySource, SourceError> {
        let auth = config.token.clone().map(Auth::Bearer);
        let client = JsonClient::new(&config.url, auth, config.timeout, PeerKind::Ray)?;
        Ok(RaySource {
            shell: Shell::new(config, client, clock),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RayConfig {
        &self.shell.config
    }

    /// Reads the dashboard's raw answers, one request at a time, within the timeout.
    pub async fn fetch_answers(&self) -> Result<RayAnswers, SourceError> {
        let all = async {
            let version = self.get(RayAnswerKind::Version).await?;
            // Check the version answer first: a wrong address fails on one request.
            parse_version(&version).map_err(|e| self.error(e))?;
            Ok::<_, SourceError>(RayAnswers {
                version,
                nodes: self.get(RayAnswerKind::Nodes).await?,
                cluster_status: self.get(RayAnswerKind::ClusterStatus).await?,
                tasks: self.get(RayAnswerKind::Tasks).await?,
                actors: self.get(RayAnswerKind::Actors).await?,
                placement_groups: self.get(RayAnswerKind::PlacementGroups).await?,
            })
        };
        let base = self.shell.peer.base().to_string();
        adapter::within(self.shell.config.timeout, base, all).await
    }

    /// Reads the dashboard and turns its answers into a snapshot.
    pub async fn fetch(&self) -> Result<Snapshot, SourceError> {
        let answers = self.fetch_answers().await?;
        let name = adapter::name_or_host(&self.shell.config.name, self.shell.peer.base());
        snapshot(&answers, &name, self.shell.now()).map_err(|e| self.error(e))
    }

    async fn get(&self, answer: RayAnswerKind) -> Result<Value, SourceError> {
        let (path, query) = answer.request();
        let url = self.shell.peer.url(path, query)?;
        self.shell.peer.get_json(&url).await
    }

    fn error(&self, e: RayParseError) -> SourceError {
        let client = &self.shell.peer;
        let (path, query) = e.answer.request();
        let url = client
            .url(path, query)
            .map_or_else(|_| client.base().to_string(), |u| u.to_string());
        match e.error {
            RayAnswerError::NotRay(why) => SourceError::NotRayDashboard { url, why },
            RayAnswerError::Failed(message) => SourceError::Peer {
                url,
                peer: "Ray dashboard",
                message,
            },
            RayAnswerError::Shape(what) => SourceError::Decode {
                url,
                what: what.to_string(),
            },
        }
    }
}

// Ray owns its GPUs: gpuboard's actions are refused with `refuse_action`; engine actions
// run through the Jobs API (`actions`).
adapter::engine_adapter!(RaySource, SourceKind::Ray, refuse_action);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_says_ray_owns_the_gpus() {
        let m = refuse_action("release claim 7");
        assert!(m.starts_with("Ray owns these GPUs; gpuboard cannot release claim 7 here."));
    }
}
