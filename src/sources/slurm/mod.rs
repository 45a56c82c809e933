//! A Slurm cluster read through slurmrestd (`OpenAPI` `v0.0.38`, Slurm 22.05), as a
//! read-only console source.
//!
//! Two GETs per fetch: `/slurm/v0.0.38/nodes` and `/slurm/v0.0.38/jobs`. slurmrestd is
//! reached over its unix socket (`unix:/path`, `rest_auth/local`: the peer's uid is the
//! identity) or over HTTP with a JWT (`X-SLURM-USER-TOKEN`). In the snapshot:
//! - each node is a node; each GPU of its `gpu` GRES is a device (indexes in the order the
//!   node lists its GPU types), with the node's shards split evenly over its GPUs, as Slurm
//!   does for a shard `Count` without `File`; node state maps to health and cordon (down
//!   and not responding are unhealthy, drained/draining/down are cordoned);
//! - each running job holding GPUs or shards is a placed claim per node (the user as holder,
//!   the account as project, partition and job id as labels) with whole GPUs at their
//!   `IDX:` indexes and shards as that part of their GPU;
//! - each pending job asking for GPUs or shards is a pending claim with Slurm's reason,
//!   and its `start_time`, where Slurm set one, is Slurm's own expected start
//!   (`Source::forecast`, labelled as the engine's: `estimate`).
//!
//! Slurm owns the GPUs: gpuboard's actions are refused (`refuse_action`); engine actions
//! (cancel, hold, release a job) go through slurmrestd (`actions`).
//!
//! Where things live: `answers` (the requests, the envelope, the readers of each answer),
//! `jobs` (a job as claims), `snapshot` (the sections assembled).

mod actions;
mod answers;
mod estimate;
mod jobs;
mod snapshot;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

pub use answers::{SlurmAnswerError, SlurmAnswerKind, SlurmAnswers, SlurmParseError};
pub use estimate::estimates;
pub use snapshot::snapshot;

use super::adapter::{self, Shell};
use super::error::SourceError;
use super::http::{Auth, JsonClient, PeerKind};
use super::kind::SourceKind;
use crate::clock::Clock;
use crate::snapshot::Snapshot;
use crate::sources::Failure;
use crate::wire::forecast::Forecast;

/// The `OpenAPI` version this source reads.
pub const API: &str = "v0.0.38";

/// How to reach slurmrestd.
#[derive(Clone, PartialEq)]
pub struct SlurmConfig {
    /// Display name of the endpoint; the cluster's address when empty.
    pub name: String,
    /// `unix:/path/to/slurmrestd.sock`, or `http://host:6820`.
    pub url: String,
    /// A JWT (`scontrol token`) for HTTP; not needed over the unix socket.
    pub token: Option<String>,
    /// The user the token belongs to, sent as `X-SLURM-USER-NAME`.
    pub user: Option<String>,
    /// Deadline for a whole fetch.
    pub timeout: Duration,
}

impl std::fmt::Debug for SlurmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlurmConfig")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("token", &adapter::hidden(self.token.as_ref()))
            .field("user", &self.user)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl SlurmConfig {
    /// A config with no token and a 5-second timeout.
    pub fn new(url: impl Into<String>) -> SlurmConfig {
        SlurmConfig {
            name: String::new(),
            url: url.into(),
            token: None,
            user: None,
            timeout: Duration::from_secs(5),
        }
    }
}

/// What the console shows when an operator tries to act on a Slurm source.
pub fn refuse_action(action: &str) -> String {
    adapter::refusal(
        "Slurm owns these GPUs",
        action,
        "Use Slurm itself: scancel or scontrol update for jobs, scontrol update \
         NodeName=... State=DRAIN/RESUME for nodes.",
    )
}

/// A Slurm cluster, through slurmrestd, as a console source.
#[derive(Clone)]
pub struct SlurmSource {
    shell: Shell<SlurmConfig, JsonClient>,
    /// The unix socket requests go through, when slurmrestd is reached that way.
    socket: Option<PathBuf>,
    /// Slurm's expected starts as the last fetch read them (shared by the copies a fetch
    /// runs on).
    starts: Arc<Mutex<Option<Forecast>>>,
}

impl std::fmt::Debug for SlurmSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlurmSource")
            .field("config", &self.shell.config)
            .finish_non_exhaustive()
    }
}

impl SlurmSource {
    /// A source reading the slurmrestd in `config`, on the wall clock.
    pub fn new(config: SlurmConfig) -> Result<SlurmSource, SourceError> {
        SlurmSource::with_clock(config, adapter::wall_clock())
    }

    /// A source on an injected clock (tests).
    pub fn with_clock(
        config: SlurmConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<SlurmSource, SourceError> {
        let auth = config.token.clone().map(|token| Auth::SlurmToken {
            user: config.user.clone(),
            token,
        });
        let url = config.url.trim();
        let (client, socket) = match url.strip_prefix("unix:") {
            Some(path) => {
                let path = PathBuf::from(path);
                (
                    JsonClient::unix(&path, auth, config.timeout, PeerKind::Slurm)?,
                    Some(path),
                )
            }
            None => (
                JsonClient::new(url, auth, config.timeout, PeerKind::Slurm)?,
                None,
            ),
        };
        Ok(SlurmSource {
            shell: Shell::new(config, client, clock),
            socket,
            starts: Arc::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SlurmConfig {
        &self.shell.config
    }

    /// Where requests go, for messages: the socket, or the URL.
    fn shown(&self) -> String {
        match &self.socket {
            Some(p) => format!("unix:{}", p.display()),
            None => self.shell.peer.base().to_string(),
        }
    }

    /// Reads slurmrestd's raw answers within the timeout.
    pub async fn fetch_answers(&self) -> Result<SlurmAnswers, SourceError> {
        let all = async {
            Ok::<_, SourceError>(SlurmAnswers {
                nodes: self.get(SlurmAnswerKind::Nodes).await?,
                jobs: self.get(SlurmAnswerKind::Jobs).await?,
            })
        };
        adapter::within(self.shell.config.timeout, self.shown(), all).await
    }

    /// Slurm's expected starts as the last fetch read them (none before the first).
    pub fn forecast_now(&self) -> Option<BoxFuture<'static, Result<Forecast, Failure>>> {
        let last = self
            .starts
            .lock()
            .map_or(None, |s| s.clone())
            .unwrap_or_else(|| Forecast {
                engine: Some(estimate::ENGINE.to_string()),
                ..Forecast::default()
            });
        Some(Box::pin(async move { Ok(last) }))
    }

    /// Reads slurmrestd and turns its answers into a snapshot, keeping Slurm's expected
    /// starts for `forecast_now`.
    pub async fn fetch(&self) -> Result<Snapshot, SourceError> {
        let answers = self.fetch_answers().await?;
        let name = if self.shell.config.name.is_empty() {
            self.shown()
        } else {
            self.shell.config.name.clone()
        };
        let now = self.shell.now();
        if let Ok(mut starts) = self.starts.lock() {
            *starts = Some(estimates(&answers, now));
        }
        snapshot(&answers, &name, now).map_err(|e| {
            let url = format!("{}{}", self.shown(), e.answer.path());
            match e.error {
                SlurmAnswerError::NotSlurm(why) => SourceError::NotSlurm { url, why },
                SlurmAnswerError::Failed(message) => SourceError::Peer {
                    url,
                    peer: "slurmrestd",
                    message,
                },
                SlurmAnswerError::Shape(what) => SourceError::Decode {
                    url,
                    what: what.to_string(),
                },
            }
        })
    }

    async fn get(&self, answer: SlurmAnswerKind) -> Result<Value, SourceError> {
        let url = self.shell.peer.url(&answer.path(), &[])?;
        let result = self.shell.peer.get_json(&url).await;
        // Over the socket, name the socket rather than the placeholder host.
        match (&self.socket, result) {
            (Some(_), Err(e)) => Err(self.relabel(e, &answer)),
            (_, r) => r,
        }
    }

    #[allow(clippy::trivially_copy_pass_by_ref)] // an answer kind reads as a reference here
    fn relabel(&self, e: SourceError, answer: &SlurmAnswerKind) -> SourceError {
        self.relabel_path(e, &answer.path())
    }

    /// Names the socket, not the placeholder host, in an error about `path` (the readers'
    /// answers and the actions' requests alike).
    fn relabel_path(&self, e: SourceError, path: &str) -> SourceError {
        let url = format!("{}/{path}", self.shown());
        match e {
            SourceError::Refused { peer, .. } => SourceError::Refused { url, peer },
            SourceError::Unreachable { detail, .. } => SourceError::Unreachable { url, detail },
            SourceError::Timeout { timeout, .. } => SourceError::Timeout { url, timeout },
            SourceError::Unauthorized {
                status, message, ..
            } => SourceError::Unauthorized {
                url,
                status,
                message,
            },
            SourceError::NotSlurm { why, .. } => SourceError::NotSlurm { url, why },
            SourceError::Http {
                status, message, ..
            } => SourceError::Http {
                url,
                status,
                message,
            },
            SourceError::Decode { what, .. } => SourceError::Decode { url, what },
            other => other,
        }
    }
}

// Slurm owns its GPUs: gpuboard's actions are refused with `refuse_action`; engine
// actions go through slurmrestd (`actions`).
adapter::engine_adapter!(
    SlurmSource,
    SourceKind::Slurm,
    refuse_action,
    forecast = SlurmSource::forecast_now
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_says_slurm_owns_the_gpus() {
        assert!(refuse_action("move claim 3").starts_with("Slurm owns these GPUs"));
    }
}
