//! The engine: the one owner of a `Scheduler`, its durable `Store` and its `Clock`.
//! `gpuboard serve` puts HTTP in front of it; the console embeds it in-process.
//!
//! Every mutation runs under a short lock: the scheduler changes, its journal is handed to
//! the store's writer (a channel send, no I/O), the lock is dropped, and only then does the
//! caller wait for the commit. Callers get their answer after their change is durable.
//! Watchers see revisions only once they are committed.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use crate::clock::{Clock, Timestamp};
use crate::endpoint::live::{LiveConfig, LiveFeed, LiveRound};
use crate::fairshare::FairShareError;
use crate::ids::ClaimId;
use crate::placement::{Allocation, FleetError, MoveError, MoveTarget, NoFit, NodeSpec};
use crate::request::ClaimRequest;
use crate::scheduler::{Claim, RenewError, Scheduler, SchedulerConfig, SchedulerError, Submitted};
use crate::snapshot::{AuditEvent, Snapshot};
use crate::store::claims::{Store, StoreError, StoreStats, SyncMode};
use crate::store::idempotency::{Fingerprint, KeyAnswer, KeyRecord, KeyTable, Lookup};
use crate::telemetry::{Sampler, SamplerCore, TelemetrySnapshot};

/// The largest project share accepted.
pub const MAX_SHARE: u32 = crate::fairshare::Share::MAX;

/// Whether a local process still runs: how claims with a `pid` find their owner gone.
pub trait OwnerCheck: Send + Sync {
    /// True while `pid` runs on this host.
    fn alive(&self, pid: u32) -> bool;
}

/// The variable `gpuboard run` sets in its command's environment to its own pid: the
/// command's processes (children included) own the claim `run` made as long as they run.
pub use crate::endpoint::owners::RUN_PID_ENV;

/// Processes on this host, seen through `kill(pid, 0)` and `/proc` (a zombie counts as gone).
/// A pid is alive while it runs, or while any process of its group runs (what `gpuboard
/// run` started, even once `run` itself is gone: see `owners`).
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalProcesses;

impl OwnerCheck for LocalProcesses {
    fn alive(&self, pid: u32) -> bool {
        runs(pid) || crate::endpoint::owners::group_runs(pid)
    }
}

/// Whether `pid` exists and is not a zombie.
fn runs(pid: u32) -> bool {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let rc = unsafe { libc::kill(raw, 0) };
    let exists = rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    if !exists {
        return false;
    }
    // An exited child that was not reaped yet still answers kill(); it runs no more.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state != "Z" && state != "X"),
        Err(_) => true,
    }
}

/// Why an engine operation failed. Nothing changed when it did, except for `Store`.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A move was refused.
    #[error(transparent)]
    Move(#[from] MoveError),
    /// A renewal was refused.
    #[error(transparent)]
    Renew(#[from] RenewError),
    /// A cordon named no such node or device.
    #[error(transparent)]
    Fleet(#[from] FleetError),
    /// A project name or share out of range.
    #[error("{0}")]
    Invalid(String),
    /// A project the endpoint does not have.
    #[error("{0}")]
    UnknownProject(String),
    /// The state could not be made durable; the endpoint stops accepting changes.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An idempotency key came back with another request than its first.
    #[error(
        "idempotency key `{0}` was first used for another claim request (or by another \
         caller); a key names one request: send a new key for a new request"
    )]
    KeyReused(String),
}

/// How long a request whose key's first request is still being committed waits for that
/// commit before it is answered "in flight".
pub const IN_FLIGHT_WAIT: Duration = Duration::from_secs(1);

/// A claim request with an idempotency key.
#[derive(Clone, Debug)]
pub struct Keyed {
    /// The key, as the client sent it.
    pub key: String,
    /// What the request is (caller and canonical body).
    pub fingerprint: Fingerprint,
}

/// The answer to a keyed claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyedAnswer {
    /// This request ran; its answer is durable.
    First(KeyAnswer),
    /// An earlier request with the key ran; this is its (durable) answer.
    Replayed(KeyAnswer),
    /// An earlier request with the key ran and its answer is still being committed.
    InFlight(KeyAnswer),
}

/// How to build an engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Scheduler name, kind and policy.
    pub scheduler: SchedulerConfig,
    /// How often leases, owners and pending claims are checked.
    pub tick: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            scheduler: SchedulerConfig::default(),
            tick: Duration::from_secs(1),
        }
    }
}

struct Inner {
    sched: Mutex<Scheduler>,
    /// What the scheduler was built from, to rebuild it from disk after a failed commit.
    config: SchedulerConfig,
    nodes: Vec<NodeSpec>,
    /// Set once, by the first failed commit: no change applies after it.
    frozen: OnceLock<String>,
    /// Turns true with `frozen`, to wake snapshot watchers.
    frozen_seen: watch::Sender<bool>,
    /// Why the history stopped recording (full disk...), while it is stopped: the scheduler
    /// goes on, and every snapshot says so, so the console shows it beside the source.
    history_stopped: Mutex<Option<String>>,
    /// Whether `history_stopped` is set, to wake snapshot watchers when it turns.
    history_seen: watch::Sender<bool>,
    store: Store,
    clock: Arc<dyn Clock>,
    owners: Arc<dyn OwnerCheck>,
    committed: watch::Receiver<u64>,
    tick: Duration,
    live: OnceLock<Arc<LiveFeed>>,
    sampler: Mutex<Option<Sampler>>,
    /// Idempotency keys and their answers; taken under the scheduler's lock.
    keys: Mutex<KeyTable>,
}

/// The longest wait between two ticks of an idle engine (the ledger is saved every
/// 30 s, so it is rarely reached).
const IDLE_TICK_MAX: Duration = Duration::from_secs(30);

/// What a snapshot of the engine is built from, besides the clock: the committed revision
/// and the live feed's generation. Equal keys give the same snapshot (but for its time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateKey {
    /// The latest durable revision.
    pub revision: u64,
    /// The live feed's generation (0 without telemetry).
    pub telemetry: u64,
    /// A commit has failed: the endpoint refuses changes.
    pub frozen: bool,
    /// The history stopped recording.
    pub history_stopped: bool,
}

/// Wakes its holder when the engine's `StateKey` may have changed.
#[derive(Debug)]
pub struct StateKeyWatch {
    revision: watch::Receiver<u64>,
    telemetry: Option<watch::Receiver<u64>>,
    frozen: watch::Receiver<bool>,
    history: watch::Receiver<bool>,
}

impl StateKeyWatch {
    /// Returns once the key may have changed since the last call (or since this watch was
    /// made); never once nothing can change any more.
    pub async fn changed(&mut self) {
        let StateKeyWatch {
            revision,
            telemetry,
            frozen,
            history,
        } = self;
        let frozen = async {
            if frozen.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let history = async {
            if history.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let revision = async {
            if revision.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let telemetry = async {
            let alive = match telemetry {
                Some(t) => t.changed().await.is_ok(),
                None => false,
            };
            if !alive {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = revision => {}
            () = telemetry => {}
            () = frozen => {}
            () = history => {}
        }
    }
}

/// A cheap, cloneable handle to the one scheduler.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.inner.store)
            .finish()
    }
}

/// The reason a failed store gives, without the advice to restart (said where it is shown).
fn failure_reason(e: StoreError) -> String {
    match e {
        StoreError::Commit(reason) => reason,
        other => other.to_string(),
    }
}

/// Waits for a batch handed to the store.
async fn durable(rx: oneshot::Receiver<Result<(), StoreError>>) -> Result<(), EngineError> {
    rx.await.map_err(|_| StoreError::WriterGone)??;
    Ok(())
}

impl Engine {
    /// Opens the state in `data_dir` and resumes from it over `nodes`. Returns the engine
    /// and warnings about stored state that no longer matches the inventory.
    pub fn open(
        config: EngineConfig,
        nodes: Vec<NodeSpec>,
        data_dir: &Path,
        sync: SyncMode,
        clock: Arc<dyn Clock>,
        owners: Arc<dyn OwnerCheck>,
    ) -> anyhow::Result<(Engine, Vec<String>)> {
        let (store, persisted) = Store::open(data_dir, sync)?;
        Self::build(config, nodes, store, persisted, clock, owners)
    }

    /// An engine whose state lives only in memory (the console's demo mode, tests).
    pub fn in_memory(
        config: EngineConfig,
        nodes: Vec<NodeSpec>,
        clock: Arc<dyn Clock>,
        owners: Arc<dyn OwnerCheck>,
    ) -> anyhow::Result<Engine> {
        let (store, persisted) = Store::in_memory()?;
        Ok(Self::build(config, nodes, store, persisted, clock, owners)?.0)
    }

    fn build(
        config: EngineConfig,
        nodes: Vec<NodeSpec>,
        store: Store,
        persisted: crate::scheduler::Persisted,
        clock: Arc<dyn Clock>,
        owners: Arc<dyn OwnerCheck>,
    ) -> anyhow::Result<(Engine, Vec<String>)> {
        let (sched, warnings) =
            Scheduler::restore(config.scheduler.clone(), nodes.clone(), persisted)?;
        let committed = store.committed();
        let keys = KeyTable::restored(store.take_keys(), clock.now());
        let engine = Engine {
            inner: Arc::new(Inner {
                sched: Mutex::new(sched),
                config: config.scheduler,
                nodes,
                frozen: OnceLock::new(),
                frozen_seen: watch::channel(false).0,
                history_stopped: Mutex::new(None),
                history_seen: watch::channel(false).0,
                store,
                clock,
                owners,
                committed,
                tick: config.tick,
                live: OnceLock::new(),
                sampler: Mutex::new(None),
                keys: Mutex::new(keys),
            }),
        };
        Ok((engine, warnings))
    }

    fn lock(&self) -> MutexGuard<'_, Scheduler> {
        // A panic inside the scheduler would be a bug; keep serving what is there.
        self.inner
            .sched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// Runs `f` on the scheduler under the lock, hands its journal to the store, and waits
    /// (without the lock) until that is durable. With nothing to write it still waits for
    /// earlier writes, so an answer never rests on state that is not yet durable.
    ///
    /// Once a commit has failed nothing runs: the answer is that failure.
    async fn mutate<T>(
        &self,
        f: impl FnOnce(&mut Scheduler, Timestamp) -> T,
    ) -> Result<T, EngineError> {
        let now = self.now();
        let (out, pending) = {
            let mut s = self.lock();
            if let Some(reason) = self.inner.frozen.get() {
                return Err(StoreError::Commit(reason.clone()).into());
            }
            let out = f(&mut s, now);
            let changes = s.take_changes();
            (out, self.inner.store.write(changes))
        };
        if let Err(e) = durable(pending).await {
            self.freeze();
            return Err(e);
        }
        Ok(out)
    }

    /// After a failed commit: puts the scheduler back to what the database holds (the
    /// writer read it back before answering anyone) and refuses every later change. Runs
    /// its work once; later calls find it done.
    fn freeze(&self) {
        let mut s = self.lock();
        if self.inner.frozen.get().is_some() {
            return;
        }
        let reason = self.inner.store.failure().map_or_else(
            || "the state writer has stopped".to_string(),
            failure_reason,
        );
        match self.inner.store.take_recovered() {
            Some(Ok(persisted)) => match Scheduler::restore(
                self.inner.config.clone(),
                self.inner.nodes.clone(),
                persisted,
            ) {
                Ok((restored, _)) => *s = restored,
                Err(e) => tracing::error!("cannot return to the durable state: {e}"),
            },
            Some(Err(e)) => tracing::error!("cannot read back the durable state: {e}"),
            None => {}
        }
        let _ = self.inner.frozen.set(reason);
        self.inner.frozen_seen.send_replace(true);
    }

    /// Why the endpoint stopped accepting changes, once a commit has failed.
    pub fn failure(&self) -> Option<&str> {
        self.inner.frozen.get().map(String::as_str)
    }

    /// How long changes have waited on a database another process holds locked (`None`
    /// while they are not waiting).
    pub fn store_busy_for(&self) -> Option<std::time::Duration> {
        self.inner.store.busy_for()
    }

    /// Places, queues or refuses a claim. `Refused` changed nothing.
    pub async fn submit(&self, req: ClaimRequest, actor: &str) -> Result<Submitted, EngineError> {
        self.mutate(|s, now| s.submit(req, actor, now)).await
    }

    /// Places, queues or refuses a claim sent with an idempotency key, once: the first
    /// request with `keyed.key` runs, and `answer` (what the API sends for its result) is
    /// recorded with it in the same commit; a later one with the same key and request
    /// gets that answer (`Replayed` once durable, `InFlight` when the commit is still
    /// pending after `IN_FLIGHT_WAIT`); another request under the key is refused.
    pub async fn submit_keyed(
        &self,
        req: ClaimRequest,
        actor: &str,
        keyed: Keyed,
        answer: impl FnOnce(&Submitted) -> KeyAnswer,
    ) -> Result<KeyedAnswer, EngineError> {
        let now = self.now();
        // The first request with the key waits for its own batch; a later one for a
        // barrier behind the batch that carries the first.
        let (first, answer, pending) = {
            let mut s = self.lock();
            if let Some(reason) = self.inner.frozen.get() {
                return Err(StoreError::Commit(reason.clone()).into());
            }
            let mut keys = self
                .inner
                .keys
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match keys.lookup(&keyed.key, &keyed.fingerprint) {
                Lookup::Reused => return Err(EngineError::KeyReused(keyed.key)),
                Lookup::Seen(e) if e.batch <= self.inner.store.durable_batches() => {
                    return Ok(KeyedAnswer::Replayed(e.record.answer.clone()));
                }
                Lookup::Seen(e) => (
                    false,
                    e.record.answer.clone(),
                    self.inner.store.write(Vec::new()),
                ),
                Lookup::Unknown => {
                    let out = s.submit(req, actor, now);
                    let record = KeyRecord {
                        key: keyed.key,
                        fingerprint: keyed.fingerprint,
                        answer: answer(&out),
                        recorded: now,
                    };
                    let answer = record.answer.clone();
                    let (batch, rx) = self
                        .inner
                        .store
                        .write_keyed(s.take_changes(), Some(record.clone()));
                    keys.insert(record, batch, now);
                    (true, answer, rx)
                }
            }
        };
        if first {
            if let Err(e) = durable(pending).await {
                self.freeze();
                return Err(e);
            }
            return Ok(KeyedAnswer::First(answer));
        }
        match tokio::time::timeout(IN_FLIGHT_WAIT, durable(pending)).await {
            Ok(Ok(())) => Ok(KeyedAnswer::Replayed(answer)),
            Ok(Err(e)) => {
                self.freeze();
                Err(e)
            }
            Err(_) => Ok(KeyedAnswer::InFlight(answer)),
        }
    }

    /// Releases a claim; `None` when there was no such claim (release is idempotent).
    pub async fn release(&self, id: ClaimId, actor: &str) -> Result<Option<Claim>, EngineError> {
        self.mutate(|s, now| s.release(id, actor, now)).await
    }

    /// Moves a placed claim to other devices or another node of this endpoint; it keeps its id.
    pub async fn move_claim(
        &self,
        id: ClaimId,
        target: MoveTarget,
        actor: &str,
    ) -> Result<Claim, EngineError> {
        Ok(self
            .mutate(|s, now| s.move_claim(id, &target, actor, now))
            .await??)
    }

    /// Extends a claim's lease by `ttl` seconds (or its own ttl) from now.
    pub async fn renew(
        &self,
        id: ClaimId,
        ttl: Option<u64>,
        actor: &str,
    ) -> Result<Claim, EngineError> {
        Ok(self.mutate(|s, now| s.renew(id, ttl, actor, now)).await??)
    }

    /// Stops (`true`) or resumes new claims on a device.
    pub async fn cordon(
        &self,
        node: &str,
        index: u32,
        cordoned: bool,
        actor: &str,
    ) -> Result<(), EngineError> {
        Ok(self
            .mutate(|s, now| s.set_cordon(node, index, cordoned, actor, now))
            .await??)
    }

    /// Sets a project's resource share (0 to `MAX_SHARE`; 0 gets no work).
    pub async fn set_share(
        &self,
        project: &str,
        share: u32,
        actor: &str,
    ) -> Result<(), EngineError> {
        self.mutate(|s, now| s.set_share(project, share, actor, now))
            .await?
            .map_err(|e| EngineError::Invalid(e.to_string()))
    }

    /// Clears a project's debts and backoffs.
    pub async fn reset_project(&self, project: &str, actor: &str) -> Result<(), EngineError> {
        self.mutate(|s, now| s.reset_project(Some(project), actor, now))
            .await?
            .map_err(|e| match e {
                // Named but not there: not found (404, exit 7), as a claim id never issued.
                SchedulerError::Ledger(e @ FairShareError::UnknownProject(_)) => {
                    EngineError::UnknownProject(e.to_string())
                }
                e => EngineError::Invalid(e.to_string()),
            })
    }

    /// Expires leases, releases claims of dead local owners, places pending claims, and
    /// feeds the latest telemetry round to the idle tracker.
    pub async fn tick(&self) -> Result<(), EngineError> {
        let owners = Arc::clone(&self.inner.owners);
        self.mutate(|s, now| s.tick(now, &|pid| owners.alive(pid)))
            .await?;
        if let Some(feed) = self.inner.live.get() {
            feed.track_idle(|| self.lock().snapshot(self.now()));
        }
        Ok(())
    }

    /// Joins live telemetry in: `first` (a round already taken, e.g. for the inventory)
    /// is published now, then `core` samples on its own thread, each round completed with
    /// process origins and coordination records there. Snapshots only read the latest
    /// round. A second call is refused.
    pub fn attach_telemetry(
        &self,
        core: SamplerCore,
        first: Option<TelemetrySnapshot>,
        clock: Arc<dyn Clock>,
        config: LiveConfig,
    ) -> anyhow::Result<()> {
        let feed = Arc::new(LiveFeed::new(config));
        if self.inner.live.set(Arc::clone(&feed)).is_err() {
            anyhow::bail!("telemetry is already attached to this engine");
        }
        if let Some(first) = first {
            feed.publish(LiveRound::gather(first, feed.config()));
        }
        let sink_feed = Arc::clone(&feed);
        let sampler = Sampler::spawn(
            core,
            clock,
            Box::new(move |round| {
                let round = LiveRound::gather(round, sink_feed.config());
                sink_feed.publish(round);
            }),
        )?;
        *self
            .inner
            .sampler
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(sampler);
        Ok(())
    }

    /// The live feed, when telemetry is attached.
    pub fn telemetry(&self) -> Option<&Arc<LiveFeed>> {
        self.inner.live.get()
    }

    /// How long the ticker may wait before the next tick: `EngineConfig::tick`, or longer
    /// while nothing is due before then (no claim waits or has a local owner, no lease
    /// runs out, the ledger is saved; and no telemetry round shows devices, which the idle
    /// tracker follows on every tick). At most `IDLE_TICK_MAX`.
    fn next_tick_in(&self) -> Duration {
        let every = self.inner.tick;
        let devices = self.inner.live.get().is_some_and(|feed| {
            feed.latest()
                .is_some_and(|round| !round.telemetry.devices.is_empty())
        });
        if devices {
            return every;
        }
        let now = self.now();
        let Some(until) = self.lock().idle_until() else {
            return every;
        };
        Duration::from_millis(until.millis_since(now)).clamp(every, IDLE_TICK_MAX.max(every))
    }

    /// Ticks until the engine's store fails, logging failures: every `EngineConfig::tick`
    /// while something may be due, else when the first thing is (see `next_tick_in`). A
    /// commit may bring that nearer (a lease, a waiting claim, an owner), never later.
    pub fn spawn_ticker(&self) -> tokio::task::JoinHandle<()> {
        let engine = self.clone();
        tokio::spawn(async move {
            let mut commits = engine.subscribe();
            let mut next = tokio::time::Instant::now();
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(next) => {}
                    changed = commits.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        next = next.min(tokio::time::Instant::now() + engine.next_tick_in());
                        continue;
                    }
                }
                if let Err(e) = engine.tick().await {
                    tracing::error!("tick failed: {e}");
                    if matches!(e, EngineError::Store(_)) {
                        return;
                    }
                }
                next = tokio::time::Instant::now() + engine.next_tick_in();
            }
        })
    }

    /// The whole durable state: taken in memory, answered only once everything it shows
    /// is on disk, so no client sees a claim or revision a crash could take back. After a
    /// failed commit it is the state read back from disk.
    pub async fn durable_snapshot(&self) -> Snapshot {
        let now = self.now();
        let (mut snap, barrier) = {
            let s = self.lock();
            let snap = s.snapshot(now);
            // The barrier is queued behind every batch the snapshot includes.
            let settled = self.inner.frozen.get().is_some() || self.inner.store.all_durable();
            (snap, (!settled).then(|| self.inner.store.write(Vec::new())))
        };
        if let Some(barrier) = barrier
            && durable(barrier).await.is_err()
        {
            self.freeze();
            snap = self.lock().snapshot(now);
        }
        if let Some(feed) = self.inner.live.get() {
            feed.merge_into(&mut snap);
        }
        snap.endpoint.store_failed = self.failure().map(str::to_string);
        let stopped = self
            .inner
            .history_stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(why) = stopped {
            snap.endpoint.warnings.push(crate::snapshot::SourceWarning {
                section: "history".to_string(),
                path: "history.sqlite".to_string(),
                found: format!("recording {why}"),
                left_out: "the history while it is stopped (the scheduler goes on; recording \
                           resumes by itself once a write succeeds)"
                    .to_string(),
            });
        }
        snap
    }

    /// Whether the history records (`None`) or why it stopped: every snapshot says so while
    /// it is stopped.
    pub fn set_history_stopped(&self, why: Option<String>) {
        let mut slot = self
            .inner
            .history_stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *slot != why {
            let stopped = why.is_some();
            *slot = why;
            drop(slot);
            self.inner.history_seen.send_replace(stopped);
        }
    }

    /// Why the history stopped recording, if it did.
    pub fn history_stopped(&self) -> Option<String> {
        self.inner
            .history_stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The whole state in memory now, with the latest telemetry round joined in when
    /// attached; it may include changes still being committed (in-process readers).
    pub fn snapshot(&self) -> Snapshot {
        let now = self.now();
        let mut snap = self.lock().snapshot(now);
        if let Some(feed) = self.inner.live.get() {
            feed.merge_into(&mut snap);
        }
        snap
    }

    /// Whether `id` was ever handed out by this endpoint.
    pub fn issued(&self, id: ClaimId) -> bool {
        self.lock().issued(id)
    }

    /// A claim as it stands now.
    pub fn claim(&self, id: ClaimId) -> Option<Claim> {
        self.lock().claim(id).cloned()
    }

    /// A copy of the scheduler and the time now, to run forward (the forecast, a preview):
    /// only the copy is taken under the lock.
    pub fn scheduler_copy(&self, exact: bool) -> (Scheduler, Timestamp) {
        let now = self.now();
        let s = self.lock();
        let copy = if exact {
            s.exact_copy()
        } else {
            s.forward_copy()
        };
        (copy, now)
    }

    /// Where a request would go now, without placing it (the console's claim preview).
    pub fn plan(&self, req: &ClaimRequest) -> Result<Allocation, NoFit> {
        self.lock().plan(req)
    }

    /// The latest durable revision, as it changes: the feed behind `GET /v1/watch`.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.committed.clone()
    }

    /// What the next snapshot would be built from: cheap to read, to know whether a cached
    /// snapshot is still current.
    pub fn state_key(&self) -> StateKey {
        StateKey {
            revision: *self.inner.committed.borrow(),
            telemetry: self.inner.live.get().map_or(0, |feed| feed.generation()),
            frozen: self.inner.frozen.get().is_some(),
            history_stopped: *self.inner.history_seen.borrow(),
        }
    }

    /// Wakes when `state_key` may have changed (a commit, a telemetry round).
    pub fn state_changes(&self) -> StateKeyWatch {
        let mut revision = self.inner.committed.clone();
        revision.borrow_and_update();
        StateKeyWatch {
            revision,
            telemetry: self.inner.live.get().map(|feed| feed.subscribe()),
            frozen: self.inner.frozen_seen.subscribe(),
            history: self.inner.history_seen.subscribe(),
        }
    }

    /// Durable audit events after revision `after` (up to `upto`), and whether some were
    /// dropped from memory (the watcher should then reload the snapshot).
    pub fn events_between(&self, after: u64, upto: u64) -> (Vec<AuditEvent>, bool) {
        let (mut events, gap) = self.lock().events_since(after);
        events.retain(|e| e.revision <= upto);
        (events, gap)
    }

    /// Commit counters of the store.
    pub fn store_stats(&self) -> &StoreStats {
        self.inner.store.stats()
    }

    /// The clock the engine reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::units::Bytes;
    use serde_json::json;
    use std::collections::BTreeSet;

    /// Owners whose pids are listed are alive.
    struct Alive(Mutex<BTreeSet<u32>>);
    impl OwnerCheck for Alive {
        fn alive(&self, pid: u32) -> bool {
            self.0.lock().unwrap().contains(&pid)
        }
    }

    fn nodes() -> Vec<NodeSpec> {
        vec![crate::inventory::a100_node("a", 2)]
    }

    fn req(v: serde_json::Value) -> ClaimRequest {
        ClaimRequest::from_json(&v).unwrap()
    }

    #[tokio::test]
    async fn leases_expire_and_dead_owners_release_on_an_injected_clock() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(Timestamp(1_000_000));
        let alive = Arc::new(Alive(Mutex::new([77].into())));
        let open = || {
            Engine::open(
                EngineConfig::default(),
                nodes(),
                dir.path(),
                SyncMode::Full,
                Arc::new(clock.clone()),
                alive.clone(),
            )
            .unwrap()
            .0
        };
        let engine = open();
        let leased = engine
            .submit(req(json!({"num_gpus": 0.5, "ttl": 60})), "op")
            .await
            .unwrap();
        let owned = engine
            .submit(req(json!({"num_gpus": 0.5, "pid": 77})), "op")
            .await
            .unwrap();
        let (Submitted::Placed(leased), Submitted::Placed(owned)) = (leased, owned) else {
            panic!("both fit")
        };
        clock.advance_millis(59_000);
        engine.tick().await.unwrap();
        assert!(
            engine.snapshot().claim(leased.id).is_some(),
            "lease still valid at 59 s"
        );
        engine.renew(leased.id, Some(10), "op").await.unwrap();
        clock.advance_millis(9_000);
        engine.tick().await.unwrap();
        assert!(engine.snapshot().claim(leased.id).is_some(), "renewed");
        clock.advance_millis(1_000);
        engine.tick().await.unwrap();
        assert!(
            engine.snapshot().claim(leased.id).is_none(),
            "expired at 10 s after renewal"
        );
        assert!(
            engine.snapshot().claim(owned.id).is_some(),
            "owner 77 alive"
        );
        alive.0.lock().unwrap().clear();
        engine.tick().await.unwrap();
        let snap = engine.snapshot();
        assert!(snap.claim(owned.id).is_none(), "owner gone");
        let actions: Vec<&str> = snap.events.iter().map(|e| e.action.as_str()).collect();
        assert!(
            actions.contains(&"expire") && actions.contains(&"owner-gone"),
            "{actions:?}"
        );
        // Both releases are durable: a restarted engine has no claim and the same revision.
        let rev = snap.revision;
        drop(engine);
        let again = open().snapshot();
        assert!(again.claims.is_empty());
        assert_eq!(again.revision, rev);
        assert!(again.devices().all(|(_, d)| d.memory_allocated == Bytes(0)));
    }

    #[tokio::test]
    async fn watchers_see_committed_revisions_and_events() {
        let clock = ManualClock::new(Timestamp(5));
        let engine = Engine::in_memory(
            EngineConfig::default(),
            nodes(),
            Arc::new(clock),
            Arc::new(LocalProcesses),
        )
        .unwrap();
        let mut rx = engine.subscribe();
        assert_eq!(*rx.borrow_and_update(), 0);
        engine.cordon("a", 1, true, "op").await.unwrap();
        engine.set_share("vision", 300, "op").await.unwrap();
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 2);
        let (events, gap) = engine.events_between(1, 2);
        assert!(!gap);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].action, "share");
        assert!(matches!(
            engine.cordon("nope", 0, true, "op").await,
            Err(EngineError::Fleet(FleetError::UnknownNode(_)))
        ));
        assert!(matches!(
            engine.set_share("vision", 2_000_000, "op").await,
            Err(EngineError::Invalid(_))
        ));
        assert_eq!(engine.snapshot().revision, 2, "refusals change nothing");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snapshot_waits_for_the_commit_of_what_it_shows() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(
            EngineConfig::default(),
            nodes(),
            dir.path(),
            SyncMode::Full,
            Arc::new(ManualClock::new(Timestamp(1_000))),
            Arc::new(LocalProcesses),
        )
        .unwrap()
        .0;
        // Another connection holds the write lock: the writer's commit waits for it.
        let blocker =
            rusqlite::Connection::open(dir.path().join(crate::store::claims::DB_FILE)).unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        let submitting = engine.clone();
        let submit =
            tokio::spawn(
                async move { submitting.submit(req(json!({"num_gpus": 0.5})), "op").await },
            );
        while engine.snapshot().claims.is_empty() {
            tokio::task::yield_now().await;
        }
        let durable = engine.durable_snapshot();
        tokio::pin!(durable);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut durable)
                .await
                .is_err(),
            "a snapshot showing an uncommitted claim was answered"
        );
        blocker.execute_batch("ROLLBACK").unwrap();
        let snap = durable.await;
        assert_eq!(snap.claims.len(), 1);
        assert!(matches!(submit.await.unwrap(), Ok(Submitted::Placed(_))));
        assert_eq!(*engine.subscribe().borrow(), snap.revision);
    }

    #[tokio::test]
    async fn a_restored_waiting_claim_says_why_before_the_first_tick() {
        let dir = tempfile::tempdir().unwrap();
        let open = || {
            Engine::open(
                EngineConfig::default(),
                nodes(),
                dir.path(),
                SyncMode::Normal,
                Arc::new(ManualClock::new(Timestamp(1_000))),
                Arc::new(LocalProcesses),
            )
            .unwrap()
            .0
        };
        let engine = open();
        engine
            .submit(req(json!({"num_gpus": 2})), "op")
            .await
            .unwrap();
        let waiting = engine
            .submit(req(json!({"num_gpus": 1, "wait": true})), "op")
            .await
            .unwrap();
        let Submitted::Pending(waiting) = waiting else {
            panic!("both devices are taken: {waiting:?}")
        };
        drop(engine);
        // Stored without reasons, as a claim is that queued behind others while it still
        // fitted (reasons found later live only in memory).
        let db =
            rusqlite::Connection::open(dir.path().join(crate::store::claims::DB_FILE)).unwrap();
        db.execute(
            "UPDATE claims SET body = json_set(body, '$.pending', json('null')) WHERE id = ?1",
            [i64::try_from(waiting.id.0).unwrap()],
        )
        .unwrap();
        drop(db);
        let snap = open().durable_snapshot().await;
        let view = snap.claim(waiting.id).unwrap();
        assert!(!view.pending_reasons.is_empty());
        assert!(
            view.pending_reasons.iter().all(|r| !r.contains("fits now")),
            "{:?}",
            view.pending_reasons
        );
    }

    #[test]
    fn local_processes_tell_live_from_gone() {
        let owners = LocalProcesses;
        assert!(owners.alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!owners.alive(pid), "an exited, reaped child is gone");
        assert!(!owners.alive(0));
    }
}
