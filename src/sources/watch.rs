//! An endpoint's state mirrored in the console: the last snapshot and its version (the
//! `Model`), kept in step by one watch task per endpoint that applies the endpoint's deltas,
//! reconnects with backoff and jitter, resumes with `since` and reloads after a `resync`;
//! or, for an endpoint without a delta watch, by conditional polling at each fetch.
//!
//! `Mirror::fetch` answers from the model: the snapshot when it changed since the last
//! fetch, `Fetched::Unchanged` when not, and an error naming why while the stream is down
//! or silent past `wire::SILENT_AFTER` (the console then shows the source stale, keeping its
//! data). Each change wakes the console through `Mirror::changed`.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use tokio::sync::Notify;

use super::feed::{Conditional, DeltaBody, Feed, SnapshotVersion, WatchEvent};
use super::{Failure, Fetched};
use crate::client::ClientError;
use crate::clock::{Clock, Timestamp};
use crate::snapshot::{Snapshot, apply};
use crate::wire::HEARTBEAT;

/// Silence after which the stream counts as down.
pub const SILENT_AFTER: Duration = crate::wire::SILENT_AFTER;
/// The first wait before reconnecting.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(500);
/// The longest wait before reconnecting.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The watch task's waits and randomness, injected so tests run without real time.
pub trait Pace: Send + Sync + 'static {
    /// Waits `d`.
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()>;
    /// A number in `[0, 1)`, for jitter.
    fn jitter(&self) -> f64;
}

/// Real time and real randomness.
pub struct RealPace;

impl Pace for RealPace {
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(d))
    }
    fn jitter(&self) -> f64 {
        rand::random::<f64>()
    }
}

/// Reconnection waits: 0.5 s doubling to 30 s, each shortened by up to half at random so
/// consoles cut off together do not come back together.
#[derive(Clone, Debug)]
pub struct ReconnectDelay {
    step: Duration,
}

impl Default for ReconnectDelay {
    fn default() -> ReconnectDelay {
        ReconnectDelay {
            step: BACKOFF_FIRST,
        }
    }
}

impl ReconnectDelay {
    /// The wait before the next attempt (`jitter` in `[0, 1)`); the step then doubles.
    pub fn next(&mut self, jitter: f64) -> Duration {
        let step = self.step;
        self.step = (step * 2).min(BACKOFF_MAX);
        step.mul_f64(1.0 - 0.5 * jitter.clamp(0.0, 1.0))
    }

    /// Back to the first step (after a connection that delivered events).
    pub fn reset(&mut self) {
        self.step = BACKOFF_FIRST;
    }
}

/// What an event did to the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The snapshot changed.
    Changed,
    /// The snapshot changed in what telemetry brings alone
    /// (`SnapshotChange::telemetry_alone`).
    Telemetry,
    /// Nothing to show changed.
    Same,
    /// The stream is out of step with the model (why): reconnect with `since`.
    Reconnect(String),
}

/// The last snapshot from an endpoint and its version.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Model {
    /// The state, once the first snapshot arrived.
    pub snapshot: Option<Snapshot>,
    /// Its version (`None` from an endpoint that sends none).
    pub version: Option<SnapshotVersion>,
    /// A `resync` arrived: the next snapshot replaces the model, and a reconnect asks for
    /// a whole snapshot.
    pub resync: bool,
}

impl Model {
    /// Where a reconnect resumes: the model's version, unless a resync is pending.
    pub fn since(&self) -> Option<SnapshotVersion> {
        if self.resync || self.snapshot.is_none() {
            None
        } else {
            self.version
        }
    }

    /// Applies one watch event.
    pub fn apply(&mut self, event: WatchEvent) -> Step {
        match event {
            WatchEvent::Snapshot { version, snapshot } => {
                self.resync = false;
                if self.version == Some(version) && self.snapshot.is_some() {
                    return Step::Same;
                }
                self.version = Some(version);
                self.snapshot = Some(*snapshot);
                Step::Changed
            }
            WatchEvent::Delta(body) => self.delta(body),
            WatchEvent::Resync { reason } => {
                tracing::info!("endpoint asks for a resync: {reason}");
                self.resync = true;
                Step::Same
            }
            WatchEvent::Heartbeat { version } => match self.version {
                _ if self.resync => Step::Same,
                Some(v) if v != version => {
                    Step::Reconnect(format!("heartbeat at {version} while the model is at {v}"))
                }
                _ => Step::Same,
            },
        }
    }

    fn delta(&mut self, body: DeltaBody) -> Step {
        let (Some(snap), Some(at), false) = (&mut self.snapshot, self.version, self.resync) else {
            return Step::Reconnect(format!("a delta to {} before any snapshot", body.to));
        };
        if at == body.to {
            return Step::Same;
        }
        if at != body.from {
            return Step::Reconnect(format!(
                "a delta from {} while the model is at {at}",
                body.from
            ));
        }
        let alone = body
            .changes
            .iter()
            .all(|c| c.telemetry_alone(snap.revision));
        apply(snap, &body.changes);
        self.version = Some(body.to);
        if body.changes.is_empty() {
            Step::Same
        } else if alone {
            Step::Telemetry
        } else {
            Step::Changed
        }
    }

    /// Takes a conditional read's answer; `true` when the snapshot changed.
    pub fn polled(&mut self, answer: Conditional) -> bool {
        let Conditional::Fresh { snapshot, version } = answer else {
            return false;
        };
        let same = match (&self.snapshot, version, self.version) {
            (Some(_), Some(new), Some(old)) => new == old,
            (Some(old), None, _) => old.same_but_time(&snapshot),
            _ => false,
        };
        self.version = version;
        if !same {
            self.snapshot = Some(*snapshot);
        }
        !same
    }
}

/// How the mirror follows the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Through the delta watch.
    Watch,
    /// By conditional reads at each fetch (the endpoint has no delta watch).
    Poll,
}

/// The mirror's shared state.
struct Shared {
    model: Model,
    /// Bumped at each change of the snapshot.
    generation: u64,
    /// The generation the last fetch answered with.
    delivered: u64,
    /// Whether anything but telemetry changed since the last fetch answered (or none did).
    whole: bool,
    mode: Mode,
    /// Why the stream is down, while it is.
    down: Option<Failure>,
    /// When the stream last said anything.
    heard: Option<Timestamp>,
}

/// What the mirror and its task share.
struct Inner {
    name: String,
    feed: Arc<dyn Feed>,
    fail: Box<dyn Fn(ClientError) -> Failure + Send + Sync>,
    clock: Arc<dyn Clock>,
    pace: Arc<dyn Pace>,
    shared: Mutex<Shared>,
    /// Bumped at every change of `shared`, for a first fetch waiting for an answer.
    progress: tokio::sync::watch::Sender<u64>,
    changed: Arc<Notify>,
}

/// One endpoint's state, mirrored; its watch task starts with the first fetch and stops
/// with the mirror.
pub struct Mirror {
    inner: Arc<Inner>,
    task: OnceLock<tokio::task::JoinHandle<()>>,
}

impl Drop for Mirror {
    fn drop(&mut self) {
        if let Some(t) = self.task.get() {
            t.abort();
        }
    }
}

impl Mirror {
    /// A mirror of the endpoint `feed` reads, named `name` in messages; `fail` words the
    /// feed's errors for the console.
    pub fn new(
        name: &str,
        feed: Arc<dyn Feed>,
        fail: Box<dyn Fn(ClientError) -> Failure + Send + Sync>,
        clock: Arc<dyn Clock>,
        pace: Arc<dyn Pace>,
    ) -> Mirror {
        Mirror {
            inner: Arc::new(Inner {
                name: name.to_string(),
                feed,
                fail,
                clock,
                pace,
                shared: Mutex::new(Shared {
                    model: Model::default(),
                    generation: 0,
                    delivered: 0,
                    whole: true,
                    mode: Mode::Watch,
                    down: None,
                    heard: None,
                }),
                progress: tokio::sync::watch::Sender::new(0),
                changed: Arc::new(Notify::new()),
            }),
            task: OnceLock::new(),
        }
    }

    /// Notified at each change of the snapshot.
    pub fn changed(&self) -> Arc<Notify> {
        Arc::clone(&self.inner.changed)
    }

    /// The last snapshot, if any.
    pub fn last(&self) -> Option<Snapshot> {
        self.inner.lock().model.snapshot.clone()
    }

    /// `f` of the last snapshot, if any (without copying it).
    pub fn with_last<R>(&self, f: impl FnOnce(&Snapshot) -> R) -> Option<R> {
        self.inner.lock().model.snapshot.as_ref().map(f)
    }

    /// The state now: see the module's doc. Starts the watch task on the first call made
    /// inside a runtime.
    pub fn fetch(&self) -> BoxFuture<'static, Result<Fetched, Failure>> {
        if tokio::runtime::Handle::try_current().is_ok() {
            self.task
                .get_or_init(|| tokio::spawn(follow(Arc::clone(&self.inner))));
        }
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let mut progress = inner.progress.subscribe();
            loop {
                let (mode, ready) = {
                    let s = inner.lock();
                    (s.mode, s.model.snapshot.is_some() || s.down.is_some())
                };
                if mode == Mode::Poll {
                    return inner.poll().await;
                }
                if ready || progress.changed().await.is_err() {
                    break;
                }
            }
            inner.answer()
        })
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the shared state, then wakes a waiting fetch (and the console, when the
    /// snapshot changed or the stream came back).
    fn update(&self, f: impl FnOnce(&mut Shared) -> bool) {
        let wake = f(&mut self.lock());
        self.progress.send_modify(|n| *n = n.wrapping_add(1));
        if wake {
            self.changed.notify_one();
        }
    }

    /// The answer to a fetch from the model (watch mode).
    fn answer(&self) -> Result<Fetched, Failure> {
        let now = self.clock.now();
        let mut s = self.lock();
        if let Some(why) = &s.down {
            return Err(why.clone());
        }
        if let Some(heard) = s.heard {
            let silent = now.millis_since(heard);
            if u128::from(silent) > SILENT_AFTER.as_millis() {
                return Err(Failure::Unreachable {
                    detail: format!(
                        "{}: the watch stream has been silent for {} s (a heartbeat is due every {} s)",
                        self.name,
                        silent / 1000,
                        HEARTBEAT.as_secs()
                    ),
                    sent: true,
                });
            }
        }
        deliver(&mut s)
    }

    /// A conditional read (poll mode).
    async fn poll(&self) -> Result<Fetched, Failure> {
        let known = self.lock().model.since();
        let answer = self
            .feed
            .snapshot_if_changed(known)
            .await
            .map_err(|e| (self.fail)(e))?;
        let mut s = self.lock();
        if s.model.polled(answer) {
            s.generation += 1;
            s.whole = true;
        }
        deliver(&mut s)
    }

    /// The stream said something: it is up.
    fn heard(&self, step: &Step) {
        let now = self.clock.now();
        self.update(|s| {
            s.heard = Some(now);
            let back = s.down.take().is_some();
            let changed = matches!(step, Step::Changed | Step::Telemetry);
            if changed {
                s.generation += 1;
                s.whole |= *step == Step::Changed;
            }
            back || changed
        });
    }

    fn down(&self, why: Failure) {
        tracing::debug!(source = %self.name, "watch stream down: {why}");
        self.update(|s| {
            s.down = Some(why);
            false
        });
    }
}

/// The snapshot when it changed since the last fetch (`Fetched::Telemetry` when only
/// telemetry did), `Unchanged` when not.
fn deliver(s: &mut Shared) -> Result<Fetched, Failure> {
    let Some(snap) = &s.model.snapshot else {
        return Err(Failure::Decode(
            "the endpoint answered `not modified` to the first read".to_string(),
        ));
    };
    if s.generation == s.delivered {
        return Ok(Fetched::Unchanged);
    }
    s.delivered = s.generation;
    let snap = Box::new(snap.clone());
    if std::mem::take(&mut s.whole) {
        Ok(Fetched::Snapshot(snap))
    } else {
        Ok(Fetched::Telemetry(snap))
    }
}

/// Connections being opened at once across every endpoint source of the process (until
/// each one's first event, usually the whole snapshot, has arrived): a console started on
/// a hundred endpoints loads them a few at a time instead of all at once.
pub const MAX_CONNECTING: usize = 16;
static CONNECTING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_CONNECTING);

/// The watch task: connects, applies events, and reconnects after a wait when the stream
/// ends; switches the mirror to polling when the endpoint has no delta watch.
async fn follow(inner: Arc<Inner>) {
    let mut backoff = ReconnectDelay::default();
    loop {
        let since = inner.lock().model.since();
        // Held until the first event arrives; a closed semaphore cannot happen (static).
        let mut permit = CONNECTING.acquire().await.ok();
        match inner.feed.watch(since).await {
            Err(ClientError::NotFound { .. } | ClientError::Invalid { .. }) => {
                tracing::info!(source = %inner.name, "no delta watch: polling instead");
                inner.update(|s| {
                    s.mode = Mode::Poll;
                    s.down = None;
                    true
                });
                return;
            }
            Err(e) => inner.down((inner.fail)(e)),
            Ok(mut stream) => loop {
                match stream.next().await {
                    Some(Ok(event)) => {
                        drop(permit.take());
                        backoff.reset();
                        let step = inner.lock().model.apply(event);
                        inner.heard(&step);
                        if let Step::Reconnect(why) = step {
                            tracing::info!(source = %inner.name, "reconnecting: {why}");
                            break;
                        }
                    }
                    Some(Err(e)) => {
                        inner.down((inner.fail)(e));
                        break;
                    }
                    None => {
                        inner.down(Failure::Unreachable {
                            detail: format!("{}: the watch stream closed", inner.name),
                            sent: true,
                        });
                        break;
                    }
                }
            },
        }
        drop(permit);
        let wait = backoff.next(inner.pace.jitter());
        inner.pace.sleep(wait).await;
    }
}

#[cfg(test)]
mod tests;
