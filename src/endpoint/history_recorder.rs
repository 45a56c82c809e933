//! The recorder: one thread that owns the history's writing connection and turns the
//! snapshots it is fed into versions and samples, and the feed that hands it the endpoint's
//! snapshots (on every commit, and every sampling interval). Fed through a bounded channel
//! that never blocks: when the recorder falls behind, a snapshot is skipped, never a claim
//! delayed. A failed write (a full disk) stops recording with a reason that `/healthz`
//! shows; the next write that succeeds clears it. Each snapshot's GPUs are joined
//! (`physical`) and their flags kept as episodes; the open ones are `/metrics`' flags.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::clock::Timestamp;
use crate::endpoint::versions::SnapshotVersions;
use crate::history::{Recording, samples_of};
use crate::physical::{Aliases, FlagEpisode, FlagTracker, GpuEngine, SourceView};
use crate::snapshot::Snapshot;
use crate::store::RecordingGap;
use crate::store::history::{HistoryError, HistoryStore, Retention};
use crate::wire::history::{GpuRef, HistoryInfo};

/// Telemetry is recorded every this many milliseconds per device while its figures move as
/// the screens show them; steady ones make a new version, and so a sample, once a minute
/// (the host's refresh, `endpoint::live::HOST_REFRESH_MS`).
pub const SAMPLE_MS: u64 = 5_000;
/// How often the feed looks for a new version when no device has telemetry to sample (a
/// version held back by the telemetry pace is looked for when the pace allows).
const IDLE_FEED_MS: u64 = 60_000;
/// Retention runs this often (in recorded time).
const RETAIN_EVERY_MS: u64 = 600_000;
/// Snapshots waiting for the recorder before new ones are skipped.
const QUEUE: usize = 64;
/// A commit is recorded after this pause, so a burst of commits makes one version. At 20 ms
/// a saturating claim load (32 clients, `--sync full`) lost ~20 % of its throughput to the
/// snapshot builds the history asked for; at 100 ms it is within noise (docs/performance.md,
/// "History").
const COALESCE: Duration = Duration::from_millis(100);
/// How often a snapshot older than the commit that woke the feed is asked again.
const OWED_TRIES: u32 = 50;
/// A stopped recording is said to go on only once writes have succeeded for this long
/// since the last failure: on a nearly full disk a small write squeezes in between failing
/// ones, and the warning must not come and go with each.
const RESUME_AFTER: Duration = Duration::from_mins(1);

/// An endpoint's history: the recorder's thread and a reading connection.
#[derive(Debug)]
pub struct RecordedHistory {
    reader: Mutex<HistoryStore>,
    /// Where the history is: long reads open their own connection to it.
    dir: PathBuf,
    keep: Retention,
    stopped: Arc<watch::Sender<Option<String>>>,
    /// Since when it is stopped (the first snapshot not written).
    since: Arc<Mutex<Option<Timestamp>>>,
    feed: SyncSender<Arc<Snapshot>>,
    /// The flags' episodes open as of the last snapshot recorded.
    flags: Arc<Mutex<Vec<FlagEpisode>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RecordedHistory {
    /// Opens the history in `dir` and starts its recorder.
    pub fn open(dir: &Path, keep: Retention) -> Result<Arc<RecordedHistory>, HistoryError> {
        Self::open_with(dir, keep, None)
    }

    /// The same, with the writer's file capped at `max_pages` pages (a full disk, for tests).
    pub fn open_with(
        dir: &Path,
        keep: Retention,
        max_pages: Option<u64>,
    ) -> Result<Arc<RecordedHistory>, HistoryError> {
        Self::open_for(dir, keep, max_pages, GpuEngine::Gpuboard)
    }

    /// The same, for snapshots of `engine` (`gpuboard record`): its holders are that
    /// engine's in the flags' episodes.
    pub fn open_for(
        dir: &Path,
        keep: Retention,
        max_pages: Option<u64>,
        engine: GpuEngine,
    ) -> Result<Arc<RecordedHistory>, HistoryError> {
        let mut writer = HistoryStore::open(dir)?;
        if let Some(p) = max_pages {
            writer.limit_pages(p)?;
        }
        // What was open when the last recorder stopped ended then, as far as is known.
        if let Some(last) = writer.last_recorded()? {
            writer.close_open_flags(last)?;
        }
        let recording = Recording::after(writer.last_state()?);
        let reader = HistoryStore::open(dir)?;
        let (feed, rx) = sync_channel(QUEUE);
        let stopped = Arc::new(watch::Sender::new(None));
        let thread_stopped = Arc::clone(&stopped);
        let since = Arc::new(Mutex::new(None));
        let thread_since = Arc::clone(&since);
        let flags = Arc::new(Mutex::new(Vec::new()));
        let thread_flags = Flags {
            engine,
            tracker: FlagTracker::default(),
            open: Arc::clone(&flags),
        };
        std::thread::Builder::new()
            .name("history".to_string())
            .spawn(move || {
                record(
                    writer,
                    recording,
                    &rx,
                    keep,
                    (&thread_stopped, &thread_since),
                    thread_flags,
                );
            })
            .map_err(|e| HistoryError::Damaged(format!("cannot start the recorder: {e}")))?;
        Ok(Arc::new(RecordedHistory {
            reader: Mutex::new(reader),
            dir: dir.to_path_buf(),
            keep,
            stopped,
            since,
            feed,
            flags,
        }))
    }

    /// The flags' episodes open as of the last snapshot recorded.
    pub fn open_flags(&self) -> Vec<FlagEpisode> {
        lock(&self.flags).clone()
    }

    /// Shows `open` as the flags open now (`gpuboard record --config`, which joins its
    /// sources itself and feeds no snapshot).
    pub fn publish_flags(&self, open: Vec<FlagEpisode>) {
        *lock(&self.flags) = open;
    }

    /// Hands a snapshot to the recorder; skipped when it is behind.
    pub fn feed(&self, snap: Arc<Snapshot>) {
        if let Err(TrySendError::Full(_)) = self.feed.try_send(snap) {
            tracing::debug!("history recorder behind: a snapshot skipped");
        }
    }

    /// Why recording has stopped, if it has.
    pub fn stopped(&self) -> Option<String> {
        self.stopped.borrow().clone()
    }

    /// The gap recording is in now, if it is stopped.
    pub fn stopped_gap(&self) -> Option<RecordingGap> {
        let why = self.stopped()?;
        let start = (*lock(&self.since))?;
        Some(RecordingGap {
            start,
            end: None,
            why,
        })
    }

    /// Why recording has stopped, as it turns (for the feed to tell the engine at once).
    fn watch_stopped(&self) -> watch::Receiver<Option<String>> {
        self.stopped.subscribe()
    }

    /// Retention settings.
    pub fn retention(&self) -> Retention {
        self.keep
    }

    /// Runs `f` on the reading connection, off the async threads.
    pub async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&HistoryStore) -> Result<T, HistoryError> + Send + 'static,
    ) -> Result<T, HistoryError> {
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || f(&lock(&me.reader)))
            .await
            .map_err(|e| HistoryError::Damaged(format!("history reader failed: {e}")))?
    }

    /// Runs `f` on a reading connection of its own, off the async threads: for long reads
    /// (a report over days), which must not hold up the short ones (a seek) on the shared
    /// connection. `SQLite`'s WAL lets readers go side by side.
    pub async fn read_apart<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&HistoryStore) -> Result<T, HistoryError> + Send + 'static,
    ) -> Result<T, HistoryError> {
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || f(&HistoryStore::open_reader(&dir)?))
            .await
            .map_err(|e| HistoryError::Damaged(format!("history reader failed: {e}")))?
    }

    /// How far back, how large, and whether recording has stopped.
    pub async fn info(self: &Arc<Self>) -> Result<HistoryInfo, HistoryError> {
        let keep = self.keep;
        let mut info = self.read(move |s| s.info(keep)).await?;
        info.stopped = self.stopped();
        Ok(info)
    }
}

/// Feeds the history from an endpoint's snapshot versions: after every commit, after every
/// telemetry round that changed what snapshots show, and every `SAMPLE_MS` while some
/// device has telemetry to sample (or recording has stopped, so a write is tried again);
/// else only every `IDLE_FEED_MS` (an idle endpoint without GPUs otherwise woke every 5 s to
/// feed the version it had fed), or when telemetry held back by the pace may be built.
/// Whether or not anyone watches. Ends when `versions` is gone.
pub fn spawn_feed(
    history: Arc<RecordedHistory>,
    versions: Arc<SnapshotVersions>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut commits = versions.engine().subscribe();
        let mut stopped = history.watch_stopped();
        let mut rounds = versions.engine().telemetry().map(|feed| feed.subscribe());
        // Until the first snapshot says whether any device has telemetry.
        let mut sampling = true;
        let mut next = tokio::time::Instant::now();
        loop {
            // The revision a commit woke the feed for: its snapshot must be recorded.
            let mut owed = None;
            tokio::select! {
                changed = commits.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    tokio::time::sleep(COALESCE).await;
                    owed = Some(*commits.borrow_and_update());
                }
                () = tokio::time::sleep_until(next) => {}
                // With devices sampled, rounds change every second: the 5 s pace holds.
                () = news(&mut rounds), if !sampling => {}
                // The recorder stopped or went on: every snapshot says so from now on.
                turned = stopped.changed() => {
                    if turned.is_err() {
                        return;
                    }
                    let why = stopped.borrow_and_update().clone();
                    versions.engine().set_history_stopped(why);
                    continue;
                }
            }
            // A snapshot older than that commit (the cached one, while the store was busy)
            // is not the end of it: asked again shortly, not at the next sampling seconds
            // later, when the change would be recorded late (and `}` miss it).
            for _ in 0..OWED_TRIES {
                match versions.current().await {
                    Ok(built) => {
                        sampling = !samples_of(&built.snapshot).is_empty();
                        history.feed(Arc::clone(&built.snapshot));
                        if owed.is_none_or(|r| built.snapshot.revision >= r) {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::warn!("history: cannot build the snapshot: {e}");
                        break;
                    }
                }
                tokio::time::sleep(COALESCE).await;
            }
            let every = if sampling || history.stopped().is_some() {
                SAMPLE_MS
            } else {
                IDLE_FEED_MS
            };
            next = tokio::time::Instant::now() + Duration::from_millis(every);
            // A round held back by the pace (it came too soon after the last version) is
            // built once the pace allows: with steady readings no further round wakes the
            // feed, so waiting for the idle interval recorded the first sample a minute late.
            if let Some(held) = versions.telemetry_held_until() {
                next = next.min(tokio::time::Instant::from_std(held));
            }
        }
    })
}

/// Returns when the live feed's generation moves (a telemetry round that changed what
/// snapshots show); never without telemetry, or once the feed is gone.
async fn news(rounds: &mut Option<watch::Receiver<u64>>) {
    let moved = match rounds {
        Some(rx) => rx.changed().await.is_ok(),
        None => false,
    };
    if !moved {
        std::future::pending::<()>().await;
    }
}

/// The recorder's flags: the engine its snapshots speak for, the episodes as they go,
/// and where the open ones are shown.
struct Flags {
    engine: GpuEngine,
    tracker: FlagTracker,
    open: Arc<Mutex<Vec<FlagEpisode>>>,
}

impl Flags {
    /// Joins `snap`'s GPUs, and writes the episodes that began or ended.
    fn observe(&mut self, store: &mut HistoryStore, snap: &Snapshot) -> Result<(), HistoryError> {
        // Without telemetry a serve's GPUs carry no flag (its scheduler never books one
        // twice): an inventory without telemetry is not joined every few seconds for nothing.
        // An engine's may (two device plugins in one cluster), so theirs always are.
        if self.engine == GpuEngine::Gpuboard
            && self.tracker.open().is_empty()
            && snap.devices().all(|(_, d)| d.telemetry.is_none())
        {
            return Ok(());
        }
        let view = SourceView {
            source: 0,
            name: &snap.endpoint.name,
            engine: self.engine,
            snapshot: snap,
        };
        let mut fleet = crate::physical::join(&[view], &Aliases::default());
        let changes = self.tracker.observe(&mut fleet, snap.taken_at);
        *lock(&self.open) = self.tracker.open().to_vec();
        store.record_flags(&changes)
    }
}

/// The recorder thread: until every feeder is gone.
fn record(
    mut store: HistoryStore,
    mut recording: Recording,
    rx: &Receiver<Arc<Snapshot>>,
    keep: Retention,
    (stopped, since): (&watch::Sender<Option<String>>, &Mutex<Option<Timestamp>>),
    mut flags: Flags,
) {
    let mut sampled: BTreeMap<GpuRef, Timestamp> = BTreeMap::new();
    let mut retained: Option<Timestamp> = None;
    let mut health = Stop::default();
    let mut recorded: Option<Arc<Snapshot>> = None;
    while let Ok(snap) = rx.recv() {
        // The very version recorded last (an idle endpoint's sampling tick): nothing in it
        // is new, and comparing its 20 000 claims with the last state was most of an idle
        // endpoint's CPU. Only while recording is well: after a failure each is tried.
        if health.why.is_none() && recorded.as_ref().is_some_and(|r| Arc::ptr_eq(r, &snap)) {
            continue;
        }
        let now = snap.taken_at;
        let result = step(&mut store, &mut recording, &mut sampled, &snap).and_then(|wrote| {
            flags.observe(&mut store, &snap)?;
            if retained.is_none_or(|t| now.millis_since(t) >= RETAIN_EVERY_MS) {
                retained = Some(now);
                store.retain(keep, now)?;
            }
            Ok(wrote)
        });
        recorded = result.is_ok().then(|| Arc::clone(&snap));
        let before = health.why.clone();
        let said = match result {
            Ok(wrote) => health.went(wrote, Instant::now()),
            Err(e) => {
                // What was not written must not be the base of the next delta.
                recording.force_keyframe();
                health.failed(&e, Instant::now())
            }
        };
        if let Some(gap) = health.gap(before, now)
            && let Err(e) = store.record_gap(&gap)
        {
            tracing::warn!("history: the stop from {} not kept: {e}", gap.start.0);
        }
        *lock(since) = health.since;
        stopped.send_if_modified(|slot| {
            if *slot == said {
                return false;
            }
            match &said {
                Some(why) if slot.is_none() => tracing::warn!("history: recording {why}"),
                None => tracing::info!("history: recording again"),
                Some(_) => {}
            }
            slot.clone_from(&said);
            true
        });
    }
}

/// Whether recording is stopped, and since when it has failed: stopped at the first failed
/// write, going on again only once the version owed since has been written and writes have
/// succeeded for [`RESUME_AFTER`] since the last failure.
#[derive(Debug, Default)]
struct Stop {
    why: Option<String>,
    /// The time of the first snapshot not written, while stopped.
    since: Option<Timestamp>,
    last_failure: Option<Instant>,
    /// A version failed to be written and none has been since.
    owed: bool,
}

impl Stop {
    /// A write failed at `now`: stopped, saying why.
    fn failed(&mut self, e: &HistoryError, now: Instant) -> Option<String> {
        self.why = Some(format!("stopped: {e}"));
        self.last_failure = Some(now);
        self.owed = true;
        self.why.clone()
    }

    /// After the snapshot taken `at`, with `before` the stop before it: starts the gap
    /// when this one stopped the recording, and hands it over, ended, when this one let
    /// recording go on.
    fn gap(&mut self, before: Option<String>, at: Timestamp) -> Option<RecordingGap> {
        if self.why.is_some() {
            self.since.get_or_insert(at);
            return None;
        }
        let why = before?;
        Some(RecordingGap {
            start: self.since.take().unwrap_or(at),
            end: Some(at),
            why,
        })
    }

    /// A snapshot was recorded at `now` (`wrote`: with a version written).
    fn went(&mut self, wrote: bool, now: Instant) -> Option<String> {
        if wrote {
            self.owed = false;
        }
        let quiet = self
            .last_failure
            .is_none_or(|t| now.saturating_duration_since(t) >= RESUME_AFTER);
        if !self.owed && quiet {
            self.why = None;
        }
        self.why.clone()
    }
}

/// Records one snapshot: its state when it changed, its samples when due. Whether a
/// version was written.
fn step(
    store: &mut HistoryStore,
    recording: &mut Recording,
    sampled: &mut BTreeMap<GpuRef, Timestamp>,
    snap: &Snapshot,
) -> Result<bool, HistoryError> {
    let mut wrote = false;
    if let Some(rec) = recording.observe(snap) {
        store.append(&rec)?;
        wrote = true;
    }
    // A sample is due once most of the interval has passed since the device's last one.
    let due: Vec<_> = samples_of(snap)
        .into_iter()
        .filter(|(gpu, s)| {
            sampled
                .get(gpu)
                .is_none_or(|last| s.at > *last && s.at.millis_since(*last) >= SAMPLE_MS * 4 / 5)
        })
        .collect();
    if !due.is_empty() {
        store.add_samples(&due)?;
        for (gpu, s) in due {
            sampled.insert(gpu, s.at);
        }
    }
    Ok(wrote)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long read on a connection of its own (a report, held here at a gate while it
    /// "computes") does not hold up a seek on the shared one; the old report held the
    /// shared connection throughout, so the seek would wait for the gate and time out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_seek_is_answered_while_a_report_is_held() {
        use crate::accounting::{Ask, IdleRule, PENDING_MS, Parts};
        use crate::endpoint::report_api::window_report;
        use crate::store::history::StateAt;
        let dir = tempfile::tempdir().unwrap();
        let h = RecordedHistory::open(dir.path(), Retention::default()).unwrap();
        let t0 = 1_795_442_400_000;
        h.feed(Arc::new(Snapshot {
            schema: 1,
            revision: 1,
            taken_at: Timestamp(t0),
            ..Snapshot::default()
        }));
        let deadline = Instant::now() + Duration::from_mins(2);
        while h.read(HistoryStore::from).await.unwrap().is_none() {
            assert!(Instant::now() < deadline, "the recorder wrote nothing");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (reached_tx, reached) = std::sync::mpsc::channel();
        let (open, gate) = std::sync::mpsc::channel::<()>();
        let ask = Ask {
            from: Timestamp(t0),
            to: Timestamp(t0 + 60_000),
            idle: IdleRule::default(),
            pending_ms: PENDING_MS,
        };
        let report = tokio::spawn({
            let h = Arc::clone(&h);
            async move {
                h.read_apart(move |s| {
                    reached_tx.send(()).unwrap();
                    gate.recv().unwrap();
                    window_report(s, ask, Parts::All)
                })
                .await
            }
        });
        tokio::task::spawn_blocking(move || reached.recv().unwrap())
            .await
            .unwrap();
        let seek = tokio::time::timeout(
            Duration::from_mins(1),
            h.read(move |s| s.state_at(Timestamp(t0 + 1_000))),
        )
        .await
        .expect("the seek waited for the report")
        .unwrap();
        assert!(matches!(seek, StateAt::Shown(_, _)), "{seek:?}");
        assert!(
            !report.is_finished(),
            "the report is still held at its gate"
        );
        open.send(()).unwrap();
        let r = report.await.unwrap().unwrap().unwrap();
        assert_eq!(r.history_from, Some(Timestamp(t0)));
    }

    /// Telemetry that first comes just after a version without it is held back by the pace;
    /// with steady readings no later round wakes the feed, which must still record it once
    /// the pace allows, not at its idle interval a minute later.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn telemetry_held_back_by_the_pace_is_recorded_once_the_pace_allows() {
        use crate::clock::ManualClock;
        use crate::endpoint::engine::{Engine, EngineConfig, LocalProcesses};
        use crate::endpoint::live::LiveConfig;
        use crate::telemetry::fake::{FakeBackend, FakeGpu};
        use crate::telemetry::{DeviceMetrics, SamplerConfig, SamplerCore};
        let engine = Engine::in_memory(
            EngineConfig::default(),
            vec![crate::inventory::a100_node("a", 1)],
            Arc::new(ManualClock::new(Timestamp(1_000))),
            Arc::new(LocalProcesses),
        )
        .unwrap();
        let versions = Arc::new(SnapshotVersions::new(engine, 1));
        // A version without telemetry is built; the readings come within its pace (the
        // sampler's first round, at once) and never change (the next is an hour away).
        versions.current().await.unwrap();
        let config = SamplerConfig {
            metrics_interval: Duration::from_hours(1),
            ..SamplerConfig::default()
        };
        let gpu = FakeGpu {
            metrics: DeviceMetrics {
                utilization_gpu_percent: Some(40),
                ..DeviceMetrics::default()
            },
            ..FakeGpu::default()
        };
        let core = SamplerCore::new(Box::new(FakeBackend::new(vec![gpu])), None, config);
        let live = LiveConfig {
            coordination_file: None,
            ..LiveConfig::local("a")
        };
        let clock = Arc::new(ManualClock::new(Timestamp(1_500)));
        versions
            .engine()
            .attach_telemetry(core, None, clock, live)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let history = RecordedHistory::open(dir.path(), Retention::default()).unwrap();
        let feed = spawn_feed(Arc::clone(&history), Arc::clone(&versions));
        // Well inside the idle interval (a minute), well beyond the pace (two seconds).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let info = history
                .read(|s| s.info(Retention::default()))
                .await
                .unwrap();
            if info.samples > 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the held-back telemetry waited for the idle interval"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        feed.abort();
    }

    fn full() -> HistoryError {
        HistoryError::Full("a version".to_string())
    }

    #[test]
    fn a_stop_holds_through_writes_that_squeeze_in_and_lifts_once_they_keep_succeeding() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut stop = Stop::default();
        assert_eq!(stop.went(true, at(0)), None);
        let why = stop.failed(&full(), at(1));
        assert_eq!(why.as_deref(), Some("stopped: disk full writing a version"));
        // Nothing to write, then a small write between failures: still stopped.
        assert_eq!(stop.went(false, at(2)), why);
        assert_eq!(stop.went(true, at(3)), why);
        assert_eq!(stop.failed(&full(), at(4)), why);
        assert_eq!(stop.went(true, at(30)), why);
        // Long after the last failure, but the version owed was never written: stopped.
        let mut owing = Stop::default();
        owing.failed(&full(), at(0));
        assert_eq!(owing.went(false, at(600)), why);
        // Written, and no failure for a minute: recording again.
        assert_eq!(stop.went(false, at(4 + 59)), why);
        assert_eq!(stop.went(false, at(4 + 60)), None);
    }

    #[test]
    fn a_stop_is_kept_as_a_gap_from_its_first_unwritten_snapshot_until_it_lifts() {
        let t0 = Instant::now();
        let mut stop = Stop::default();
        assert_eq!(stop.gap(None, Timestamp(1_000)), None);
        let before = stop.why.clone();
        stop.failed(&full(), t0);
        assert_eq!(stop.gap(before, Timestamp(2_000)), None);
        assert_eq!(stop.since, Some(Timestamp(2_000)));
        // Failing again: still the first snapshot's time.
        let before = stop.why.clone();
        stop.failed(&full(), t0 + Duration::from_secs(1));
        assert_eq!(stop.gap(before, Timestamp(3_000)), None);
        let before = stop.why.clone();
        stop.went(true, t0 + Duration::from_mins(2));
        assert_eq!(
            stop.gap(before, Timestamp(9_000)),
            Some(RecordingGap {
                start: Timestamp(2_000),
                end: Some(Timestamp(9_000)),
                why: "stopped: disk full writing a version".into(),
            })
        );
        assert_eq!(stop.since, None);
    }
}
