//! `gpuboard record`: the time machine for engines without a gpuboard endpoint (Ray,
//! Slurm, BOINC, Prometheus, Kubernetes: its events expire after an hour, this does not).
//! Polls the source, records its snapshots into the same history a `serve` keeps, and
//! serves it read-only so the console rewinds it as an endpoint. With `--config`, every
//! source of a config joined instead: the flags only several engines together show
//! (`record_joined`). Runs until SIGTERM or SIGINT.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use crate::client::TlsTrust;
use crate::endpoint::history_recorder::{RecordedHistory, SAMPLE_MS};
use crate::endpoint::record_api::{RecordState, record_router};
use crate::sources::{EndpointConfig, Source, SourceKind};
use crate::store::history::Retention;
use crate::units::Bytes;

/// `gpuboard record` flags.
#[derive(Args, Debug)]
pub struct RecordArgs {
    /// The engine: `ray`, `slurm`, `boinc`, `prometheus` or `kubernetes`.
    #[arg(long, value_parser = engine_kind, required_unless_present = "config")]
    pub kind: Option<SourceKind>,
    /// Instead of one engine: every source of this config file (`[[endpoints]]`, with its
    /// `[aliases]`), joined into physical GPUs; records their flags (double-booked,
    /// unexplained, idle) and serves them to `report` and `/metrics`, not their snapshots.
    #[arg(long, value_name = "FILE", conflicts_with_all =
          ["kind", "url", "kubeconfig", "kube_context", "name", "secret_file"])]
    pub config: Option<PathBuf>,
    /// Its address: the Ray dashboard, slurmrestd, Prometheus URL, or BOINC's HOST:PORT
    /// (not for kubernetes: see --kubeconfig).
    #[arg(long)]
    pub url: Option<String>,
    /// For kubernetes: the kubeconfig file (default: what kube finds, or in-cluster).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// For kubernetes: the kubeconfig context (default: the file's current one).
    #[arg(long, value_name = "NAME")]
    pub kube_context: Option<String>,
    /// The name the console shows (default: the kind).
    #[arg(long)]
    pub name: Option<String>,
    /// A file holding the source's token (Ray, Slurm, Prometheus) or GUI RPC password (BOINC).
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// Where `history.sqlite` goes.
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,
    /// Where the read-only history API listens (loopback by default; reads need no token).
    #[arg(long, default_value = "127.0.0.1:7071")]
    pub listen: SocketAddr,
    /// Milliseconds between reads of the source.
    #[arg(long, value_name = "MS", default_value_t = SAMPLE_MS)]
    pub every_ms: u64,
    /// Days of history kept.
    #[arg(long, value_name = "DAYS", default_value_t = 30)]
    pub history_days: u32,
    /// The most the history may take on disk.
    #[arg(long, value_name = "SIZE", default_value = "1GiB")]
    pub history_size: String,
}

/// A kind `record` can poll: an engine (a gpuboard endpoint records its own history).
fn engine_kind(s: &str) -> Result<SourceKind, String> {
    match SourceKind::parse(s) {
        Ok(
            k @ (SourceKind::Ray
            | SourceKind::Slurm
            | SourceKind::Boinc
            | SourceKind::Prometheus
            | SourceKind::Kubernetes),
        ) => Ok(k),
        Ok(SourceKind::Ssh) => Err(
            "an ssh host is read live only; record takes ray, slurm, boinc, prometheus or \
             kubernetes"
                .to_string(),
        ),
        Ok(k) => Err(format!(
            "a {k} endpoint records its own history (`serve --history-days`); record takes \
             ray, slurm, boinc, prometheus or kubernetes"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The source `a` names, built as every configured source is (`sources::connect`).
fn source(a: &RecordArgs, kind: SourceKind) -> anyhow::Result<Arc<dyn Source>> {
    let name = a.name.clone().unwrap_or_else(|| kind.to_string());
    let mut entry = if kind == SourceKind::Kubernetes {
        if let Some(url) = &a.url {
            anyhow::bail!(
                "--url {url}: a kubernetes source is reached through its kubeconfig; name it \
                 with --kubeconfig FILE (and --kube-context NAME), or leave both out for \
                 kube's own search"
            );
        }
        let mut e = EndpointConfig::kubernetes(a.kubeconfig.clone(), a.kube_context.clone());
        e.name.clone_from(&name);
        e
    } else {
        if a.kubeconfig.is_some() || a.kube_context.is_some() {
            anyhow::bail!("--kubeconfig and --kube-context are for --kind kubernetes only");
        }
        let url = a.url.as_deref().with_context(|| {
            format!("--url is required for --kind {kind} (the engine's address)")
        })?;
        EndpointConfig::named(&name, url, kind)
    };
    entry.token_file.clone_from(&a.secret_file);
    let secret = entry.file_token()?;
    // A slow answer is waited for a while: a read that times out records nothing.
    let timeout = Duration::from_millis(a.every_ms.clamp(10_000, 30_000));
    crate::sources::connect(&entry, secret, &TlsTrust::default(), timeout, None)
}

/// `gpuboard record`.
pub(super) async fn record(a: RecordArgs) -> anyhow::Result<()> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .log_internal_errors(false)
        .try_init();
    let bytes = Bytes::parse(&a.history_size)
        .map_err(|e| anyhow::anyhow!("--history-size {}: {e}", a.history_size))?;
    if a.history_days == 0 {
        anyhow::bail!("--history-days must be at least 1: recording is all `record` does");
    }
    let keep = Retention {
        days: a.history_days,
        bytes,
    };
    let kind = match (&a.config, a.kind) {
        (Some(config), _) => {
            let to = super::record_joined::JoinedArgs {
                data_dir: &a.data_dir,
                listen: a.listen,
                every_ms: a.every_ms,
                keep,
            };
            return super::record_joined::record(config, to).await;
        }
        (None, Some(kind)) => kind,
        (None, None) => {
            anyhow::bail!("give --kind (one engine) or --config FILE (every source of it)")
        }
    };
    let source = source(&a, kind)?;
    std::fs::create_dir_all(&a.data_dir)
        .with_context(|| format!("cannot make {}", a.data_dir.display()))?;
    let history = RecordedHistory::open_for(&a.data_dir, keep, None, kind.gpu_engine())
        .with_context(|| format!("cannot open the history in {}", a.data_dir.display()))?;
    let latest = Arc::new(Mutex::new(None));
    let listener = tokio::net::TcpListener::bind(a.listen)
        .await
        .with_context(|| format!("cannot listen on {}", a.listen))?;
    let addr = listener.local_addr()?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "gpuboard record: recording {kind} {} into {}; serving http://{addr}",
            a.url.as_deref().unwrap_or_else(|| source.name()),
            a.data_dir
                .join(crate::store::history::HISTORY_FILE)
                .display()
        )?;
        out.flush()?;
    }
    let poller = tokio::spawn(poll(
        source,
        Arc::clone(&history),
        Arc::clone(&latest),
        Duration::from_millis(a.every_ms.max(100)),
    ));
    let router = record_router(RecordState {
        history,
        latest,
        joined: false,
    });
    let served = axum::serve(listener, router)
        .with_graceful_shutdown(super::record_joined::stopped())
        .await;
    poller.abort();
    served.context("the history API failed")
}

/// Reads the source every `every`, feeding what it answers to the history. A failed read
/// is logged and retried; nothing is recorded for it.
async fn poll(
    source: Arc<dyn Source>,
    history: Arc<RecordedHistory>,
    latest: Arc<Mutex<Option<Arc<crate::snapshot::Snapshot>>>>,
    every: Duration,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match source.fetch().await {
            Ok(fetched) => {
                if let Some(snap) = fetched.snapshot() {
                    let snap = Arc::new(snap);
                    history.feed(Arc::clone(&snap));
                    *latest
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(snap);
                }
            }
            Err(e) => tracing::warn!("record: reading {} failed: {}", source.name(), e),
        }
    }
}
