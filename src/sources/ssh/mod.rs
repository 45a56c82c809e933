//! A host read over SSH, with nothing of ours installed there: each host is one source,
//! read through the system `ssh` (so `~/.ssh/config`, the agent, `ProxyJump` and
//! `known_hosts` apply) by a script that says which of gpuboard's readers the host has and
//! prints nvidia-smi's CSV. The GPUs come in as telemetry-only devices (kind `ssh`: no
//! claims, no actions), joined into other sources' devices like Prometheus's.
//!
//! Each host is read by its own task, every `interval`, so a slow host never holds up a
//! fetch: `fetch` answers the newest reading (waiting a little for the first). A host
//! that fails says why (`failure`): authentication, host key, timeout, no nvidia-smi, an
//! unreadable answer. Where things live: `command` (running ssh), `probe` (the script and
//! its answer), `nvidia_smi` (the CSV), `failure` (why a run failed), `hosts` (which hosts).

pub mod command;
pub mod failure;
pub mod hosts;
pub mod nvidia_smi;
pub mod probe;

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{Notify, Semaphore, watch};

use self::command::SshOptions;
use self::failure::{HostFailure, classify};
use self::probe::{Probed, Reader};
use super::adapter::{self, wall_clock};
use super::kind::SourceKind;
use super::{Action, Failure, Fetched, Outcome, Source};
use crate::clock::Clock;
use crate::placement::Allocation;
use crate::request::ClaimRequest;
use crate::snapshot::{EndpointInfo, NodeView, SCHEMA_VERSION, Snapshot, SourceWarning};

/// How to reach one host and how often to read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshConfig {
    /// What the screens call it.
    pub name: String,
    /// What ssh is given (an alias, `USER@HOST`, `ssh://USER@HOST:PORT`).
    pub destination: String,
    /// How ssh is run.
    pub options: SshOptions,
    /// Time between readings.
    pub interval: Duration,
    /// How long one reading may take, connecting included.
    pub timeout: Duration,
    /// How long the first fetch waits for the first reading.
    pub first_wait: Duration,
}

impl SshConfig {
    /// A host with the defaults: `ssh` from the PATH, `~/.ssh/config`, the default control
    /// directory, connections kept 60 s, 10 s to connect, read every 2 s within 20 s.
    pub fn new(name: &str, destination: &str) -> SshConfig {
        SshConfig {
            name: name.to_string(),
            destination: destination.to_string(),
            options: SshOptions {
                program: "ssh".into(),
                config_file: None,
                control_dir: command::default_control_dir(),
                control_persist: Duration::from_mins(1),
                connect_timeout: Duration::from_secs(10),
            },
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(20),
            first_wait: Duration::from_millis(800),
        }
    }
}

/// The newest reading and where the console is with it.
#[derive(Default)]
struct Latest {
    /// The newest reading: the host's snapshot, or why there is none.
    result: Option<Result<Snapshot, HostFailure>>,
    /// How many readings there have been.
    generation: u64,
    /// The generation the console last got as a snapshot.
    shown: u64,
    /// A connection is up (the last reading got through), so the next needs no permit.
    connected: bool,
}

struct Inner {
    config: SshConfig,
    clock: Arc<dyn Clock>,
    connects: Arc<Semaphore>,
    changed: Arc<Notify>,
    latest: Mutex<Latest>,
    /// The generation, for a first fetch to wait on.
    readings: watch::Sender<u64>,
    started: std::sync::Once,
}

/// One host read over SSH.
#[derive(Clone)]
pub struct SshSource {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SshSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshSource")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl SshSource {
    /// A source for `config`, sharing this process's bound on new connections; its
    /// control directory is made (private) now.
    ///
    /// # Errors
    /// A control directory that is not this user's alone.
    pub fn new(config: SshConfig) -> Result<SshSource, command::ControlDirError> {
        SshSource::with(config, command::shared_connects(), wall_clock())
    }

    /// A source with its own bound on connections and clock (tests).
    ///
    /// # Errors
    /// A control directory that is not this user's alone.
    pub fn with(
        config: SshConfig,
        connects: Arc<Semaphore>,
        clock: Arc<dyn Clock>,
    ) -> Result<SshSource, command::ControlDirError> {
        command::private_dir(&config.options.control_dir)?;
        Ok(SshSource {
            inner: Arc::new(Inner {
                config,
                clock,
                connects,
                changed: Arc::new(Notify::new()),
                latest: Mutex::new(Latest::default()),
                readings: watch::channel(0).0,
                started: std::sync::Once::new(),
            }),
        })
    }

    /// Starts the host's reading task (once; it ends when the source is dropped).
    fn start(&self) {
        let weak = Arc::downgrade(&self.inner);
        self.inner.started.call_once(|| {
            tokio::spawn(read_forever(weak));
        });
    }

    /// The newest reading: a snapshot when it is new to the console, `Unchanged` when the
    /// console has it, the failure when the last reading failed.
    pub async fn newest(&self) -> Result<Fetched, Failure> {
        self.start();
        let mut rx = self.inner.readings.subscribe();
        // The first fetch waits a little, so a quick host shows on the first frame; a
        // slow one is shown connecting and comes in when it answers.
        let _ = tokio::time::timeout(self.inner.config.first_wait, rx.wait_for(|g| *g > 0)).await;
        let mut latest = self
            .inner
            .latest
            .lock()
            .map_err(|_| Failure::Decode("the host's reading task failed".to_string()))?;
        let generation = latest.generation;
        match &latest.result {
            None => Err(Failure::Unreachable {
                detail: format!(
                    "connecting to {} (no answer yet)",
                    self.inner.config.destination
                ),
                sent: false,
            }),
            Some(Err(e)) => Err(e.clone().into()),
            Some(Ok(_)) if latest.shown == generation => Ok(Fetched::Unchanged),
            Some(Ok(s)) => {
                let s = s.clone();
                latest.shown = generation;
                Ok(s.into())
            }
        }
    }

    /// Reads the host once: runs the script, and turns its answer into a snapshot or the
    /// reason there is none.
    pub async fn read_once(&self) -> Result<Snapshot, HostFailure> {
        let inner = &self.inner;
        let connected = inner.latest.lock().is_ok_and(|l| l.connected);
        // Only a new connection takes a permit: reuse of a kept one is not bounded.
        let permit = if connected {
            None
        } else {
            Arc::clone(&inner.connects).acquire_owned().await.ok()
        };
        let run = inner
            .config
            .options
            .run(
                &inner.config.destination,
                &probe::remote_command(),
                inner.config.timeout,
            )
            .await;
        drop(permit);
        let answer = probe::read(&run.stdout);
        let result = match classify(&run.ended, &run.stderr, &answer) {
            Some(f) => Err(f),
            None => Ok(self.snapshot(&answer)),
        };
        if let Ok(mut l) = inner.latest.lock() {
            l.connected = answer.reached;
        }
        result
    }

    /// The host's snapshot from an answer that has GPUs to read.
    fn snapshot(&self, answer: &Probed) -> Snapshot {
        let now = self.inner.clock.now();
        let mut warnings: Vec<SourceWarning> = Vec::new();
        let (gpus, _) = answer.gpus.clone().unwrap_or_default();
        let mut devices = nvidia_smi::devices(&gpus, now, &mut warnings);
        match &answer.apps {
            Some((apps, Some(0))) => {
                nvidia_smi::attach_processes(apps, &mut devices, &mut warnings);
            }
            Some((apps, status)) => warnings.push(SourceWarning {
                section: "nvidia-smi --query-compute-apps".to_string(),
                path: "exit status".to_string(),
                found: format!(
                    "{}: {}",
                    status.map_or_else(|| "cut off".to_string(), |s| format!("exit {s}")),
                    apps.lines().next().unwrap_or("(no output)")
                ),
                left_out: "the GPUs' processes".to_string(),
            }),
            None => {}
        }
        let node = answer
            .hostname
            .clone()
            .unwrap_or_else(|| self.inner.config.name.clone());
        Snapshot {
            schema: SCHEMA_VERSION,
            endpoint: EndpointInfo {
                name: self.inner.config.name.clone(),
                version: "nvidia-smi over ssh".to_string(),
                kind: SourceKind::Ssh.as_str().to_string(),
                policy: String::new(),
                actions: false,
                telemetry_note: Some(reader_note(&answer.reader())),
                warnings,
                store_failed: None,
            },
            revision: 0,
            taken_at: now,
            nodes: vec![NodeView {
                name: node,
                cpus_milli: None,
                cpus_allocated_milli: 0,
                devices,
            }],
            ..Snapshot::default()
        }
    }
}

/// Which reader is in use, and what better one the host has.
pub fn reader_note(reader: &Reader) -> String {
    match reader {
        Reader::NvidiaSmi => "reader: nvidia-smi (nothing of gpuboard's on the host)".to_string(),
        Reader::Binary(v) => format!(
            "reader: nvidia-smi ({} is on the host; reading its NVML telemetry is not built yet)",
            if v.is_empty() { "gpuboard" } else { v }
        ),
        Reader::Serve(pid) => format!(
            "reader: nvidia-smi, read-only (a gpuboard serve runs on the host, pid {pid}; \
             watching it over ssh is not built yet)"
        ),
    }
}

/// A host's reading task: reads, stores, wakes the console, waits, until the source is
/// dropped.
async fn read_forever(weak: Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else {
            return;
        };
        let source = SshSource {
            inner: Arc::clone(&inner),
        };
        let result = source.read_once().await;
        let interval = inner.config.interval;
        let generation = match inner.latest.lock() {
            Ok(mut l) => {
                l.result = Some(result);
                l.generation += 1;
                l.generation
            }
            Err(_) => return,
        };
        inner.readings.send_replace(generation);
        inner.changed.notify_one();
        drop((source, inner));
        tokio::time::sleep(interval).await;
    }
}

impl Source for SshSource {
    fn name(&self) -> &str {
        &self.inner.config.name
    }
    fn kind(&self) -> SourceKind {
        SourceKind::Ssh
    }
    fn can_act(&self) -> bool {
        false
    }
    fn fetch(&self) -> BoxFuture<'static, Result<Fetched, Failure>> {
        let source = self.clone();
        Box::pin(async move { source.newest().await })
    }
    fn changed(&self) -> Option<Arc<Notify>> {
        Some(Arc::clone(&self.inner.changed))
    }
    fn plan(&self, _request: ClaimRequest) -> BoxFuture<'static, Result<Allocation, Failure>> {
        adapter::plan_refused(&self.inner.config.name, SourceKind::Ssh)
    }
    fn act(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>> {
        adapter::act_refused(adapter::refusal(
            "this host is read over ssh with nvidia-smi, read-only",
            &format!("{} {}", action.verb(), action.target()),
            "Run `gpuboard serve` on it and add it as an endpoint to act there.",
        ))
    }
}
