//! A BOINC client read through its GUI RPC, as a console source.
//!
//! Each fetch logs in (when a password file is configured) and sends `<get_state/>` (host,
//! coprocessors, projects, app versions, tasks, the client's clock) and `<get_cc_status/>`
//! (why computing or the GPU is suspended, GPU mode). In the snapshot:
//! - the host is one node; each coprocessor instance is a device (index across types in
//!   the order the client lists them), cordoned when the client's GPU mode is "never";
//! - every task that uses a GPU is a claim: placed while BOINC has it scheduled, on the
//!   device the client names, with the app version's GPU fraction; pending otherwise, with
//!   why it waits;
//! - every project carries its resource share, BOINC's scheduling priority, and per
//!   resource type (`CPU`, `NVIDIA`, `ATI`, `intel_gpu`...) the work-fetch backoff the
//!   client reports (`rsc_backoff_time`, `rsc_backoff_interval`), what it uses, a target
//!   share of the instances, and why it cannot fetch work now, in the client's terms.
//!   BOINC 7 keeps no per-resource debt (it schedules by recent credit): `debt` is 0.
//!
//! Actions: "update project" (`<project_update>`) makes the client contact the project now,
//! which clears its work-fetch backoffs; it is the clear-backoff action. Engine actions
//! (project suspend, new tasks, GPU mode, task abort/suspend) are in `actions`; gpuboard's
//! other actions are refused (`refuse_action`): the client owns its tasks.
//!
//! Where things live: `answers` (the requests and small readers), `state` (the replies read
//! into structs), `tasks` (tasks as claims), `projects` (resource types and projects),
//! `snapshot` (the sections assembled).

mod actions;
mod answers;
mod projects;
mod snapshot;
mod state;
mod tasks;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

pub use answers::{BoincAnswerKind, BoincAnswers, BoincParseError};
pub use snapshot::snapshot;
pub use state::project_url;

use super::adapter::{self, Adapter, Shell};
use super::error::SourceError;
use super::guirpc::{GuiRpc, check_address};
use super::kind::SourceKind;
use super::{Action, Failure, Outcome};
use crate::clock::Clock;
use crate::snapshot::Snapshot;

/// How to reach a BOINC client.
#[derive(Clone, Debug, PartialEq)]
pub struct BoincConfig {
    /// Display name of the endpoint; the client's host name when empty.
    pub name: String,
    /// The GUI RPC address, `host:port` (port 31416 when left out).
    pub address: String,
    /// A file holding the GUI RPC password (the client's `gui_rpc_auth.cfg`); first line used.
    pub password_file: Option<PathBuf>,
    /// Deadline for a whole fetch or action.
    pub timeout: Duration,
}

impl BoincConfig {
    /// A config with no password and a 5-second timeout.
    pub fn new(address: impl Into<String>) -> BoincConfig {
        BoincConfig {
            name: String::new(),
            address: address.into(),
            password_file: None,
            timeout: Duration::from_secs(5),
        }
    }
}

/// What the console shows for an action a BOINC client cannot take from gpuboard.
pub fn refuse_action(action: &str) -> String {
    adapter::refusal(
        "the BOINC client owns its tasks",
        action,
        "It takes \"update project\" (contact the project now, clearing its backoffs) and \
         the engine actions (`:act`, `gpuboard act`: suspend a project or task, GPU mode...).",
    )
}

/// A BOINC client as a console source.
#[derive(Clone)]
pub struct BoincSource {
    /// The peer is the checked GUI RPC address, `host:port`.
    shell: Shell<BoincConfig, String>,
}

impl std::fmt::Debug for BoincSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoincSource")
            .field("address", &self.shell.peer)
            .field("password_file", &self.shell.config.password_file)
            .finish_non_exhaustive()
    }
}

impl BoincSource {
    /// A source reading the client in `config`, on the wall clock.
    pub fn new(config: BoincConfig) -> Result<BoincSource, SourceError> {
        BoincSource::with_clock(config, adapter::wall_clock())
    }

    /// A source on an injected clock (tests).
    pub fn with_clock(
        config: BoincConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<BoincSource, SourceError> {
        let address = check_address(&config.address)?;
        if config.timeout.is_zero() {
            return Err(SourceError::BadUrl {
                url: address,
                why: "the timeout must be more than zero".to_string(),
            });
        }
        Ok(BoincSource {
            shell: Shell::new(config, address, clock),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &BoincConfig {
        &self.shell.config
    }

    /// The password from the configured file, read at each connection so a changed
    /// password is picked up.
    fn password(&self) -> Result<Option<String>, SourceError> {
        let Some(path) = &self.shell.config.password_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path).map_err(|e| SourceError::SecretFile {
            url: self.shell.peer.clone(),
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        // The client uses the file's first line, without its line ending.
        Ok(Some(
            text.lines()
                .next()
                .unwrap_or_default()
                .trim_end()
                .to_string(),
        ))
    }

    async fn open(&self) -> Result<GuiRpc, SourceError> {
        let password = self.password()?;
        let mut rpc = GuiRpc::connect(&self.shell.peer, self.shell.config.timeout).await?;
        if let Some(pw) = password.filter(|p| !p.is_empty()) {
            rpc.login(&pw).await?;
        }
        Ok(rpc)
    }

    fn bounded<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, SourceError>>,
    ) -> impl std::future::Future<Output = Result<T, SourceError>> {
        adapter::within(self.shell.config.timeout, self.shell.peer.clone(), fut)
    }

    /// Reads the client's raw answers within the timeout.
    pub async fn fetch_answers(&self) -> Result<BoincAnswers, SourceError> {
        self.bounded(async {
            let mut rpc = self.open().await?;
            let state = rpc.request(BoincAnswerKind::State.request()).await?;
            let cc_status = rpc.request(BoincAnswerKind::CcStatus.request()).await?;
            Ok(BoincAnswers { state, cc_status })
        })
        .await
    }

    /// Reads the client and turns its answers into a snapshot.
    pub async fn fetch(&self) -> Result<Snapshot, SourceError> {
        let answers = self.fetch_answers().await?;
        snapshot(&answers, &self.shell.config.name, self.shell.now()).map_err(|e| {
            SourceError::Decode {
                url: self.shell.peer.clone(),
                what: e.to_string(),
            }
        })
    }

    /// "Update project" for a project the snapshot names (its name or its master URL):
    /// reads the client's state for the master URL, then asks for the update.
    pub async fn update_project_named(&self, project: &str) -> Result<(), SourceError> {
        let answers = self.fetch_answers().await?;
        let url = project_url(&answers.state, project).map_err(|e| SourceError::Decode {
            url: self.shell.peer.clone(),
            what: e.to_string(),
        })?;
        let Some(url) = url else {
            return Err(SourceError::Peer {
                url: self.shell.peer.clone(),
                peer: "BOINC client",
                message: format!("the client is not attached to a project named `{project}`"),
            });
        };
        self.update_project(&url).await
    }

    /// "Update project": asks the client to contact the project at `master_url` now, which
    /// clears its work-fetch backoffs. Needs the GUI RPC password.
    pub async fn update_project(&self, master_url: &str) -> Result<(), SourceError> {
        if master_url.trim().is_empty() || master_url.contains(['<', '>', '&']) {
            return Err(SourceError::BadUrl {
                url: master_url.to_string(),
                why: "a project is named by its master URL, as get_state lists it".to_string(),
            });
        }
        self.bounded(async {
            let mut rpc = self.open().await?;
            let reply = rpc
                .call(&format!(
                    "<project_update>\n<project_url>{}</project_url>\n</project_update>",
                    master_url.trim()
                ))
                .await?;
            if reply.has("success") {
                Ok(())
            } else {
                Err(SourceError::Peer {
                    url: self.shell.peer.clone(),
                    peer: "BOINC client",
                    message: format!(
                        "the client did not confirm the update of {master_url}: <{}>",
                        reply
                            .children
                            .first()
                            .map_or("nothing", |c| c.name.as_str())
                    ),
                })
            }
        })
        .await
    }
}

/// Reads the client; takes one action, "update project" (the project reset), and refuses
/// the rest with `refuse_action`.
impl Adapter for BoincSource {
    const KIND: SourceKind = SourceKind::Boinc;
    // One action (update project); `carry_out` refuses the rest with a message.
    const CAN_ACT: bool = true;
    fn source_name(&self) -> &str {
        &self.shell.config.name
    }
    fn read(&self) -> impl Future<Output = Result<Snapshot, SourceError>> + Send + '_ {
        BoincSource::fetch(self)
    }
    fn carry_out(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>> {
        match action {
            Action::ResetProject { project } => {
                let source = self.clone();
                Box::pin(async move {
                    source.update_project_named(&project).await?;
                    Ok(Outcome::Reset { project })
                })
            }
            Action::Engine(a) => {
                let source = self.clone();
                Box::pin(async move { Ok(Outcome::Engine(source.engine_act(&a).await?)) })
            }
            other => adapter::act_refused(refuse_action(other.verb())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_names_the_one_action() {
        let m = refuse_action("release claim 7");
        assert!(m.contains("cannot release claim 7"), "{m}");
        assert!(m.contains("update project"), "{m}");
    }
}
