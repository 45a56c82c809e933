//! A host read over SSH, with nothing installed there or with gpuboard: each host is one
//! source, read through the system `ssh` (so `~/.ssh/config`, the agent, `ProxyJump` and
//! `known_hosts` apply). A script says which of gpuboard's readers the host has and
//! prints a first nvidia-smi reading (`probe`); then the best reader streams, over one
//! long-lived ssh child: a running serve's delta watch (`serve_watch`), a gpuboard
//! binary's NVML telemetry (`telemetry`), or nvidia-smi with `-l` (`smi_stream`). A
//! reader that cannot start says why and the next one is tried. The host is a source of
//! kind `ssh`; its devices join other sources' devices like Prometheus's. A host whose
//! serve is read takes actions when its SSH user can read that serve's operator token
//! (`act`: each is relayed to the serve by `gpuboard relay` there); any other is read-only.
//!
//! Each host is read by its own task, so a slow host never holds up a fetch: `fetch`
//! answers the newest reading (waiting a little for the first). A host that fails says
//! why (`failure`): authentication, host key, timeout, no nvidia-smi, an unreadable line,
//! a stream gone silent; it is read again after a wait that grows. Where things live:
//! `command` (running ssh), `probe` (the script and its answer), `nvidia_smi` (the CSV),
//! `failure` (why a run failed), `hosts` (which hosts), `act` (actions).

pub mod act;
pub mod command;
pub mod failure;
pub mod hosts;
pub mod nvidia_smi;
pub mod probe;
mod serve_watch;
mod session;
pub mod smi_stream;
mod telemetry;

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{Notify, Semaphore, watch};

use self::act::{Acting, SshRelay};
use self::command::SshOptions;
use self::failure::{HostFailure, classify};
use self::probe::Start;
use self::session::Opened;
use super::adapter::{self, wall_clock};
use super::kind::SourceKind;
use super::watch::{Model, ReconnectDelay};
use super::{Action, Failure, Fetched, Outcome as ActOutcome, Source};
use crate::client::Client;
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
    /// How often a host read without a serve is asked whether one has started there.
    pub reprobe: Duration,
}

impl SshConfig {
    /// A host with the defaults: `ssh` from the PATH, `~/.ssh/config`, the default control
    /// directory, connections kept 60 s, 10 s to connect, read every 2 s within 20 s, asked
    /// for a serve started since every 60 s.
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
            reprobe: Duration::from_mins(1),
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
    /// The last snapshot read, kept through failures (a claim's preview, a move's origin).
    last_good: Option<Snapshot>,
    /// Whether actions can go to the host's serve now.
    acting: Acting,
}

struct Inner {
    config: SshConfig,
    clock: Arc<dyn Clock>,
    connects: Arc<Semaphore>,
    changed: Arc<Notify>,
    latest: Mutex<Latest>,
    /// The generation, for a first fetch to wait on.
    readings: watch::Sender<u64>,
    /// The host's reading task: it holds the source weakly, and is stopped (its ssh child
    /// with it) when the source goes.
    task: OnceLock<tokio::task::JoinHandle<()>>,
    /// When the source was made: the log's stages count from it.
    born: std::time::Instant,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(t) = self.task.get() {
            t.abort();
        }
    }
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
                task: OnceLock::new(),
                born: std::time::Instant::now(),
            }),
        })
    }

    /// Starts the host's reading task (once; it ends when the source is dropped).
    fn start(&self) {
        let weak = Arc::downgrade(&self.inner);
        self.inner
            .task
            .get_or_init(|| tokio::spawn(read_forever(weak)));
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
}

/// What a host's readers need: how to reach it, and the clock.
pub(crate) struct Context {
    config: SshConfig,
    clock: Arc<dyn Clock>,
    connects: Arc<Semaphore>,
}

impl Context {
    /// The streams' period in whole seconds (what `-l` takes), at least 1.
    fn period_secs(&self) -> u64 {
        (self.config.interval.as_secs_f64().round() as u64).max(1)
    }

    /// How long a stream may say nothing before it counts as hung: three periods.
    fn silent_after(&self) -> Duration {
        Duration::from_secs(3 * self.period_secs())
    }
}

/// Where a reader puts what it reads: the source's shared state, while the source lives.
pub(crate) struct Outlet {
    inner: Weak<Inner>,
}

impl Outlet {
    /// Stores a reading and wakes the console; `false` once the source is gone.
    fn publish(&self, result: Result<Snapshot, HostFailure>) -> bool {
        let Some(inner) = self.inner.upgrade() else {
            return false;
        };
        let generation = match inner.latest.lock() {
            Ok(mut l) => {
                if let Ok(s) = &result {
                    if l.last_good.is_none() {
                        tracing::debug!(host = %inner.config.name, ms = since(inner.born), "ssh: first reading");
                    }
                    l.last_good = Some(s.clone());
                }
                l.result = Some(result);
                l.generation += 1;
                l.generation
            }
            Err(_) => return false,
        };
        inner.readings.send_replace(generation);
        inner.changed.notify_one();
        true
    }
}

impl Outlet {
    /// Says whether actions can go to the host's serve now.
    fn set_acting(&self, acting: Acting) {
        if let Some(inner) = self.inner.upgrade()
            && let Ok(mut l) = inner.latest.lock()
        {
            l.acting = acting;
        }
    }
}

/// How a reader's turn ended.
pub(crate) enum Turn {
    /// It never read anything, and says why: the next reader is tried.
    Unavailable(String),
    /// It read, then stopped (why): the host is read again soon.
    Stopped(HostFailure),
    /// It failed without reading (why): the host is read again after a growing wait.
    Failed(HostFailure),
    /// A better reader can start now (why): the host is read again at once.
    Again(String),
    /// The source is gone.
    Gone,
}

/// A reader's snapshot as this host shows it: under the host's name, of kind `ssh`, taking
/// actions only when it did and `acts`, its NOTE saying which reader is in use.
fn relabel(snap: &mut Snapshot, name: &str, note: &str, acts: bool) {
    snap.endpoint.name = name.to_string();
    snap.endpoint.kind = SourceKind::Ssh.as_str().to_string();
    snap.endpoint.actions &= acts;
    snap.endpoint.telemetry_note = Some(match snap.endpoint.telemetry_note.take() {
        Some(own) if !own.is_empty() => format!("{note}; {own}"),
        _ => note.to_string(),
    });
}

/// A host's snapshot from nvidia-smi's CSV: the `--query-gpu` lines, and the
/// `--query-compute-apps` lines with that query's exit status.
fn smi_snapshot(
    ctx: &Context,
    hostname: Option<&str>,
    gpus: &str,
    apps: Option<(&str, Option<i32>)>,
    note: &str,
) -> Snapshot {
    let now = ctx.clock.now();
    let mut warnings: Vec<SourceWarning> = Vec::new();
    let mut devices = nvidia_smi::devices(gpus, now, &mut warnings);
    match apps {
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
    let name = &ctx.config.name;
    Snapshot {
        schema: SCHEMA_VERSION,
        endpoint: EndpointInfo {
            name: name.clone(),
            version: "nvidia-smi over ssh".to_string(),
            kind: SourceKind::Ssh.as_str().to_string(),
            policy: String::new(),
            actions: false,
            telemetry_note: Some(note.to_string()),
            warnings,
            store_failed: None,
        },
        revision: 0,
        taken_at: now,
        nodes: vec![NodeView {
            name: hostname.map_or_else(|| name.clone(), str::to_string),
            cpus_milli: None,
            cpus_allocated_milli: 0,
            devices,
        }],
        ..Snapshot::default()
    }
}

/// A host's reading task: reads with the best reader until the source is dropped, and
/// after each failure or end waits (growing from the interval to 30 s while it fails).
async fn read_forever(weak: Weak<Inner>) {
    let Some(ctx) = weak.upgrade().map(|i| Context {
        config: i.config.clone(),
        clock: Arc::clone(&i.clock),
        connects: Arc::clone(&i.connects),
    }) else {
        return;
    };
    let outlet = Outlet { inner: weak };
    let mut backoff = ReconnectDelay::default();
    // The serve's state as its watch left it, so a reconnect resumes with `since`.
    let mut model = Model::default();
    loop {
        let failure = match read_host(&ctx, &outlet, &mut model).await {
            Turn::Gone => return,
            Turn::Again(why) => {
                tracing::info!(host = %ctx.config.name, "reading the host again: {why}");
                backoff.reset();
                continue;
            }
            Turn::Stopped(f) => {
                backoff.reset();
                f
            }
            Turn::Failed(f) => f,
            Turn::Unavailable(why) => HostFailure::Unreadable(why),
        };
        if !outlet.publish(Err(failure)) {
            return;
        }
        let wait = backoff.next(rand::random::<f64>()).max(ctx.config.interval);
        tokio::time::sleep(wait).await;
    }
}

/// Milliseconds since `t`, for the log.
fn since(t: std::time::Instant) -> u64 {
    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// One connection's worth of reading: the probe's session, which starts the best reader
/// the host has; a reader that cannot start says why, and a session starting the next one
/// down is opened.
async fn read_host(ctx: &Context, outlet: &Outlet, model: &mut Model) -> Turn {
    let mut from = Start::Serve;
    let mut why_not: Vec<String> = Vec::new();
    loop {
        let since = if from == Start::Serve {
            model.since()
        } else {
            None
        };
        let (answer, started, child) = match session::open(ctx, from, since).await {
            Opened::Ended {
                answer,
                ended,
                stderr,
            } => {
                // The script ended without starting a reader: why is the host's failure.
                let f = classify(&ended, &stderr, &answer).unwrap_or_else(|| {
                    HostFailure::Unreadable(format!(
                        "the host's script ended without starting a reader (first line: `{}`)",
                        answer.first_line.as_deref().unwrap_or("(nothing)")
                    ))
                });
                return Turn::Failed(with_tried(f, &why_not));
            }
            Opened::Reader {
                answer,
                started,
                child,
            } => (answer, started, *child),
        };
        let no_smi = answer.no_nvidia_smi;
        let turn = match (started, answer.serve, &answer.gpuboard) {
            (Start::Serve, Some(pid), _) => {
                let acting = Acting::from_check(answer.relay.as_deref());
                outlet.set_acting(acting.clone());
                let turn = serve_watch::follow(ctx, outlet, pid, model, &acting, child).await;
                outlet.set_acting(Acting::NoServe);
                match turn {
                    Turn::Unavailable(why) => Turn::Unavailable(format!(
                        "a gpuboard serve runs on the host (pid {pid}), but watching it failed: \
                         {why}"
                    )),
                    other => other,
                }
            }
            (Start::Telemetry, _, Some(version)) => {
                let version = if version.is_empty() {
                    "gpuboard"
                } else {
                    version
                };
                match until_a_serve(ctx, telemetry::follow(ctx, outlet, version, child)).await {
                    Turn::Unavailable(why) => Turn::Unavailable(format!(
                        "{version} is on the host, but its telemetry failed: {why}"
                    )),
                    other => other,
                }
            }
            (Start::NvidiaSmi, _, _) => {
                return read_smi(ctx, outlet, &answer, &why_not, child).await;
            }
            _ => {
                let _ = child.stop().await;
                return Turn::Failed(HostFailure::Unreadable(format!(
                    "the host's script started {started:?} without saying what it found"
                )));
            }
        };
        match turn {
            Turn::Unavailable(why) => why_not.push(why),
            other => return other,
        }
        // The next reader down; without nvidia-smi there is none after gpuboard's.
        from = match started {
            Start::Serve => Start::Telemetry,
            Start::Telemetry | Start::NvidiaSmi => Start::NvidiaSmi,
        };
        if from == Start::NvidiaSmi && no_smi {
            return Turn::Failed(with_tried(HostFailure::NoNvidiaSmi, &why_not));
        }
    }
}

/// `f`, with why gpuboard's readers could not start when they were tried.
fn with_tried(f: HostFailure, why_not: &[String]) -> HostFailure {
    if why_not.is_empty() {
        f
    } else {
        HostFailure::NoReader {
            last: Box::new(f),
            tried: why_not.join("; "),
        }
    }
}

/// Reads nvidia-smi's stream (`child`) after the first reading the script printed; a
/// first reading listing no GPU ends the session with why.
async fn read_smi(
    ctx: &Context,
    outlet: &Outlet,
    answer: &probe::Probed,
    why_not: &[String],
    child: command::Streaming,
) -> Turn {
    if let Some(f) = classify(&failure::Ended::Exited(Some(0)), "", answer) {
        let _ = child.stop().await;
        return Turn::Failed(with_tried(f, why_not));
    }
    let note = format!(
        "reader: nvidia-smi -l {} ({})",
        ctx.period_secs(),
        if why_not.is_empty() {
            "nothing of gpuboard's on the host".to_string()
        } else {
            why_not.join("; ")
        }
    );
    let (gpus, _) = answer.gpus.clone().unwrap_or_default();
    let apps = answer.apps.as_ref().map(|(t, s)| (t.as_str(), *s));
    let first = smi_snapshot(ctx, answer.hostname.as_deref(), &gpus, apps, &note);
    if !outlet.publish(Ok(first)) {
        return Turn::Gone;
    }
    until_a_serve(
        ctx,
        smi_stream::follow(ctx, outlet, answer.hostname.as_deref(), &note, child),
    )
    .await
}

/// Runs a reader of a host without a serve, asking the host every `reprobe` (over the kept
/// connection: one short command) whether a serve has started there; one found ends the
/// reader's turn, so that the host is probed again at once and read by the serve.
async fn until_a_serve(ctx: &Context, reader: impl Future<Output = Turn>) -> Turn {
    let mut reader = std::pin::pin!(reader);
    loop {
        tokio::select! {
            turn = &mut reader => return turn,
            () = tokio::time::sleep(ctx.config.reprobe) => {}
        }
        let run = ctx
            .config
            .options
            .run(
                &ctx.config.destination,
                &probe::serve_command(),
                ctx.config.timeout,
            )
            .await;
        if let Some(pid) = probe::read(&run.stdout).serve {
            return Turn::Again(format!("a gpuboard serve runs on the host now (pid {pid})"));
        }
    }
}

impl SshSource {
    /// The API client whose requests are relayed to the host's serve, when actions can go
    /// there now; else why not.
    fn acting_client(&self, move_id: Option<&str>) -> Result<Client, Failure> {
        let acting = self
            .inner
            .latest
            .lock()
            .map(|l| l.acting.clone())
            .unwrap_or_default();
        if let Some(why) = acting.refusal() {
            return Err(Failure::ReadOnly(format!(
                "{}: {why}",
                self.inner.config.name
            )));
        }
        let relay = Arc::new(SshRelay {
            options: self.inner.config.options.clone(),
            destination: self.inner.config.destination.clone(),
        });
        let client = Client::relayed(relay, self.inner.config.timeout)
            .map_err(|e| Failure::Decode(e.to_string()))?;
        Ok(match move_id {
            Some(id) => client.for_move(id),
            None => client,
        })
    }

    /// The last snapshot read, through failures since.
    fn last_good(&self) -> Option<Snapshot> {
        self.inner
            .latest
            .lock()
            .ok()
            .and_then(|l| l.last_good.clone())
    }

    /// `action` through the host's serve (tagged with `move_id` in a move across sources).
    fn act_on(
        &self,
        action: Action,
        move_id: Option<&str>,
    ) -> BoxFuture<'static, Result<ActOutcome, Failure>> {
        let client = self.acting_client(move_id);
        let name = self.inner.config.name.clone();
        // A move is answered with the new place only; the old one is the last seen.
        let from = match &action {
            Action::Move { id, .. } => self
                .last_good()
                .and_then(|s| s.claim(*id).map(super::endpoint::place)),
            _ => None,
        };
        Box::pin(async move {
            super::endpoint::act_through(client?, action, from, move |e| act::failure(&name, e))
                .await
        })
    }
}

impl Source for SshSource {
    fn name(&self) -> &str {
        &self.inner.config.name
    }
    fn kind(&self) -> SourceKind {
        SourceKind::Ssh
    }
    /// Whether its serve takes actions now (read, and its operator token readable).
    fn can_act(&self) -> bool {
        self.inner.latest.lock().is_ok_and(|l| l.acting.can())
    }
    fn fetch(&self) -> BoxFuture<'static, Result<Fetched, Failure>> {
        let source = self.clone();
        Box::pin(async move { source.newest().await })
    }
    fn changed(&self) -> Option<Arc<Notify>> {
        Some(Arc::clone(&self.inner.changed))
    }
    fn forecast(
        &self,
    ) -> Option<BoxFuture<'static, Result<crate::wire::forecast::Forecast, Failure>>> {
        let client = self.acting_client(None).ok()?;
        let name = self.inner.config.name.clone();
        Some(Box::pin(async move {
            client.forecast().await.map_err(|e| act::failure(&name, e))
        }))
    }
    fn preview(
        &self,
        action: crate::wire::forecast::PreviewAction,
    ) -> Option<BoxFuture<'static, Result<crate::wire::forecast::Preview, Failure>>> {
        let client = self.acting_client(None).ok()?;
        let name = self.inner.config.name.clone();
        Some(Box::pin(async move {
            client
                .preview(&action)
                .await
                .map_err(|e| act::failure(&name, e))
        }))
    }
    /// A preview on the last snapshot of the host's serve, which re-checks the claim when
    /// it is sent; refused on a host that takes no actions.
    fn plan(&self, request: ClaimRequest) -> BoxFuture<'static, Result<Allocation, Failure>> {
        if !self.can_act() {
            return adapter::plan_refused(&self.inner.config.name, SourceKind::Ssh);
        }
        let last = self.last_good();
        Box::pin(async move {
            let snap = last.ok_or_else(|| {
                Failure::Refused("no snapshot from this host yet to preview against".into())
            })?;
            super::plan_on_snapshot(&snap, &request)
        })
    }
    fn act(&self, action: Action) -> BoxFuture<'static, Result<ActOutcome, Failure>> {
        self.act_on(action, None)
    }
    fn act_in_move(
        &self,
        action: Action,
        move_id: &str,
    ) -> BoxFuture<'static, Result<ActOutcome, Failure>> {
        self.act_on(action, Some(move_id))
    }
    fn claim_keyed(
        &self,
        request: ClaimRequest,
        key: String,
        move_id: Option<String>,
        patience: Duration,
    ) -> BoxFuture<'static, Result<ActOutcome, Failure>> {
        let client = self.acting_client(move_id.as_deref());
        let name = self.inner.config.name.clone();
        Box::pin(async move {
            super::endpoint::claim_through(client?, request, key, patience, move |e| {
                act::failure(&name, e)
            })
            .await
        })
    }
}
