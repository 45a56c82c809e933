//! `gpuboard record --config FILE`: every source of a config read together and joined into
//! physical GPUs (`physical::join`, with the config's `[aliases]`), as the console joins
//! them, so that what only several engines together show is kept: a Slurm job and a pod
//! on one GPU (double-booked), a pod's process no one else explains, a Slurm job's GPU idle
//! by dcgm's telemetry. Records the flags' episodes into `history.sqlite` (not the sources'
//! snapshots: each engine's own `record` or `serve` keeps those) and serves them to
//! `gpuboard report` (`/v1/history/report`) and Prometheus (`/metrics`).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;

use crate::client::TlsTrust;
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::endpoint::history_recorder::RecordedHistory;
use crate::endpoint::record_api::{RecordState, record_router};
use crate::physical::{Aliases, FlagTracker, SourceView, join};
use crate::snapshot::Snapshot;
use crate::sources::Source;
use crate::sources::kind::EndpointsFile;
use crate::store::history::{HistoryStore, Retention};

/// Retention runs this often.
const RETAIN_EVERY_MS: u64 = 600_000;

/// The config's sources, each built as the console builds it (an engine's token from its
/// `token_file`; a gpuboard endpoint's too, or none).
fn sources(config: &Path, timeout: Duration) -> anyhow::Result<(Vec<Arc<dyn Source>>, Aliases)> {
    let (path, file) = EndpointsFile::load(Some(config))?
        .with_context(|| format!("cannot read {}", config.display()))?;
    if file.endpoints.is_empty() {
        anyhow::bail!(
            "config {} lists no [[endpoints]]: record --config joins the sources a config names",
            path.display()
        );
    }
    let mut out = Vec::new();
    for ep in &file.endpoints {
        let token = ep.file_token()?;
        let trust = if ep.kind == crate::sources::SourceKind::Gpuboard {
            ep.trust()
        } else {
            TlsTrust::default()
        };
        out.push(
            crate::sources::connect(ep, token, &trust, timeout, None)
                .with_context(|| format!("config {}: endpoint {}", path.display(), ep.name))?,
        );
    }
    Ok((out, Aliases::new(&file.aliases)))
}

/// Where and how `record --config` records (its flags, as `record` takes them).
pub(super) struct JoinedArgs<'a> {
    /// `--data-dir`.
    pub data_dir: &'a Path,
    /// `--listen`.
    pub listen: SocketAddr,
    /// `--every-ms`.
    pub every_ms: u64,
    /// `--history-days` and `--history-size`.
    pub keep: Retention,
}

/// `gpuboard record --config FILE`.
pub(super) async fn record(config: &Path, a: JoinedArgs<'_>) -> anyhow::Result<()> {
    let keep = a.keep;
    let timeout = Duration::from_millis(a.every_ms.clamp(10_000, 30_000));
    let (sources, aliases) = sources(config, timeout)?;
    std::fs::create_dir_all(a.data_dir)
        .with_context(|| format!("cannot make {}", a.data_dir.display()))?;
    let history = RecordedHistory::open(a.data_dir, keep)
        .with_context(|| format!("cannot open the history in {}", a.data_dir.display()))?;
    let writer = HistoryStore::open(a.data_dir)
        .with_context(|| format!("cannot open the history in {}", a.data_dir.display()))?;
    let listener = tokio::net::TcpListener::bind(a.listen)
        .await
        .with_context(|| format!("cannot listen on {}", a.listen))?;
    let addr = listener.local_addr()?;
    {
        let names: Vec<String> = sources
            .iter()
            .map(|s| format!("{} ({})", s.name(), s.kind()))
            .collect();
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "gpuboard record: joining {} and recording their flags into {}; serving http://{addr}",
            names.join(", "),
            a.data_dir
                .join(crate::store::history::HISTORY_FILE)
                .display()
        )?;
        out.flush()?;
    }
    let poller = tokio::spawn(poll(
        Joined {
            sources,
            aliases,
            history: Arc::clone(&history),
            writer: Arc::new(Mutex::new(writer)),
            keep,
        },
        Duration::from_millis(a.every_ms.max(100)),
        timeout,
    ));
    let router = record_router(RecordState {
        history,
        latest: Arc::new(Mutex::new(None)),
        joined: true,
    });
    let served = axum::serve(listener, router)
        .with_graceful_shutdown(stopped())
        .await;
    poller.abort();
    served.context("the history API failed")
}

/// What the poller works with.
struct Joined {
    sources: Vec<Arc<dyn Source>>,
    aliases: Aliases,
    history: Arc<RecordedHistory>,
    writer: Arc<Mutex<HistoryStore>>,
    keep: Retention,
}

/// Reads every source every `every`, joins what they answered, and writes the episodes
/// that began or ended. A source that fails is left out of that join (its holders' flags
/// end), and said on stderr.
async fn poll(j: Joined, every: Duration, timeout: Duration) {
    let mut last: Vec<Option<Arc<Snapshot>>> = vec![None; j.sources.len()];
    let mut tracker = FlagTracker::default();
    let mut retained: Option<Timestamp> = None;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let reads = j
            .sources
            .iter()
            .map(|s| tokio::time::timeout(timeout, s.fetch()));
        let answers = futures::future::join_all(reads).await;
        for ((slot, source), answer) in last.iter_mut().zip(&j.sources).zip(answers) {
            match answer {
                Ok(Ok(fetched)) => {
                    if let Some(snap) = fetched.snapshot() {
                        *slot = Some(Arc::new(snap));
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!("record: reading {} failed: {e}", source.name());
                    *slot = None;
                }
                Err(_) => {
                    tracing::warn!("record: {} did not answer in time", source.name());
                    *slot = None;
                }
            }
        }
        let views: Vec<SourceView<'_>> = last
            .iter()
            .zip(&j.sources)
            .enumerate()
            .filter_map(|(i, (snap, s))| {
                Some(SourceView {
                    source: i,
                    name: s.name(),
                    engine: s.kind().gpu_engine(),
                    snapshot: snap.as_deref()?,
                })
            })
            .collect();
        let now = SystemClock.now();
        let mut fleet = join(&views, &j.aliases);
        let changes = tracker.observe(&mut fleet, now);
        j.history.publish_flags(tracker.open().to_vec());
        let retain = retained.is_none_or(|t| now.millis_since(t) >= RETAIN_EVERY_MS);
        if retain {
            retained = Some(now);
        }
        let (writer, keep) = (Arc::clone(&j.writer), j.keep);
        let wrote = tokio::task::spawn_blocking(move || {
            let mut w = writer
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            w.record_flags(&changes)?;
            if retain {
                w.retain(keep, now)?;
            }
            Ok::<_, crate::store::history::HistoryError>(())
        })
        .await;
        match wrote {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("record: the flags not written: {e}"),
            Err(e) => tracing::warn!("record: the flags' writer failed: {e}"),
        }
    }
}

/// Returns on SIGTERM or SIGINT.
pub(super) async fn stopped() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}
