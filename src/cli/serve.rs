//! `gpuboard serve`: the endpoint on this host. Finds the GPUs to serve (an inventory
//! file, else NVML, then holding the host's scheduler lock), binds its address, only then
//! opens the state and tokens in the data directory, and serves the HTTP API until
//! SIGTERM or SIGINT.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::clock::SystemClock;
use crate::endpoint::api::{self, ApiState};
use crate::endpoint::auth::{self, Tokens};
use crate::endpoint::engine::{Engine, EngineConfig, LocalProcesses};
use crate::endpoint::hostlock::{self, HostLock};
use crate::endpoint::listener::{self, ListenConfig};
use crate::endpoint::tls;
use crate::placement::{NodeSpec, Policy};
use crate::scheduler::SchedulerConfig;
use crate::store::claims::{SyncMode, default_data_dir};
use crate::telemetry::TelemetrySnapshot;
use crate::units::Bytes;
use crate::wire::DEFAULT_PORT;

/// `gpuboard serve`.
#[derive(Args, Debug)]
#[allow(clippy::struct_excessive_bools)] // command-line switches, each its own flag
pub struct ServeArgs {
    /// Inventory file of nodes and GPUs (TOML; see assets/demo-fleet.toml).
    #[arg(long)]
    pub inventory: Option<PathBuf>,
    /// Made-up telemetry for the inventory's GPUs that no driver reads, following the
    /// claims, deterministic for a SEED (default 1); labelled SIMULATED wherever it shows.
    #[arg(
        long,
        value_name = "SEED",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "1",
        requires = "inventory"
    )]
    pub simulate_telemetry: Option<u64>,
    /// Where state and tokens live (default: the user's data directory, gpuboard/).
    #[arg(long, env = "GPUBOARD_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free one (the bound address is printed).
    #[arg(long, default_value_t = SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)))]
    pub listen: SocketAddr,
    /// Let reads (snapshot, watch, metrics) through without a token.
    #[arg(long)]
    pub open_reads: bool,
    /// Placement policy: binpack (fullest device that fits) or spread.
    #[arg(long, default_value = "binpack", value_parser = ["binpack", "spread"])]
    pub policy: String,
    /// full: every acknowledged change survives power loss; normal: survives a crash
    /// of gpuboard (kill -9) but not of the machine.
    #[arg(long, value_enum, default_value_t = SyncMode::Full)]
    pub sync: SyncMode,
    /// Endpoint name shown to operators (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// Milliseconds between lease, owner and pending checks.
    #[arg(long, default_value_t = 1000)]
    pub tick_ms: u64,
    /// NVML library to load instead of the driver's libnvidia-ml.so.1 (a path).
    #[arg(
        long,
        alias = "nvml-library",
        env = "GPUBOARD_NVML_LIBRARY",
        value_name = "PATH"
    )]
    pub nvml_lib: Option<PathBuf>,
    /// Memory kept back from each GPU found through NVML (e.g. 1GiB).
    #[arg(long)]
    pub memory_headroom: Option<String>,
    /// Flink GPU coordination file whose records the snapshot lists.
    #[arg(long, default_value = crate::discovery::coordination::DEFAULT_COORDINATION_FILE)]
    pub coordination_file: PathBuf,
    /// Serve https (on by default when --listen is not a loopback address), with the
    /// certificate made on first start in the data directory unless --tls-cert is given.
    #[arg(long)]
    pub tls: bool,
    /// PEM certificate chain to serve instead of the generated one (implies --tls).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve plain HTTP on a non-loopback address (tokens then cross the network unencrypted).
    #[arg(long, conflicts_with_all = ["tls", "tls_cert"])]
    pub insecure_http: bool,
    /// Connections served at once; past it, only lease renewals and /healthz get through
    /// and everything else is answered 503 at once.
    #[arg(long, env = "GPUBOARD_MAX_CONNECTIONS", default_value_t = listener::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Milliseconds a client may take to send a request head (and a TLS handshake).
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// Milliseconds a connection may move no byte before it is closed.
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub idle_timeout_ms: u64,
    /// Print the systemd unit for this binary (assets/gpuboard.service) and exit.
    #[arg(long)]
    pub print_unit: bool,
    /// Days of history kept (state changes and telemetry, README "History"); 0 records none.
    #[arg(long, value_name = "DAYS", default_value_t = 30)]
    pub history_days: u32,
    /// The most the history may take on disk (`1GiB`, `500MB`); the oldest goes first.
    #[arg(long, value_name = "SIZE", default_value = "1GiB")]
    pub history_size: String,
    /// Caps the history file at this many pages, as a full disk would (tests).
    #[arg(long, hide = true)]
    pub history_max_pages: Option<u64>,
}

/// `gpuboard serve`: runs the endpoint until SIGTERM or SIGINT.
pub(super) async fn serve(a: ServeArgs) -> anyhow::Result<()> {
    if a.print_unit {
        print!("{}", super::systemd::unit_for(&std::env::current_exe()?));
        return Ok(());
    }
    init_logs();
    let headroom = match &a.memory_headroom {
        Some(text) => {
            Bytes::parse(text).map_err(|e| anyhow::anyhow!("--memory-headroom {text}: {e}"))?
        }
        None => Bytes(0),
    };
    let host = crate::endpoint::live::hostname();
    // NVML is opened in both cases: with an inventory it still gives telemetry.
    let (core, first) = crate::endpoint::live::open_local(
        a.nvml_lib.as_deref(),
        crate::telemetry::SamplerConfig::default(),
    );
    let nodes = nodes_to_serve(&a, &first, &host, headroom)?;
    let dir = a.data_dir.clone().unwrap_or_else(default_data_dir);
    let config = engine_config(&a);
    // One scheduler for this host's GPUs, whatever its data directory: taken before
    // anything else, so that a loser leaves nothing behind. An inventory's GPUs are the
    // operator's word, not this host's as NVML sees them: no host lock for those.
    let mut host_lock = match &a.inventory {
        Some(_) => None,
        None => Some(HostLock::acquire(&hostlock::default_path(), "")?),
    };
    let use_tls = wants_tls(a.listen, a.tls || a.tls_cert.is_some(), a.insecure_http);
    // Bound before the data directory is touched: a port in use creates nothing.
    let listener = tokio::net::TcpListener::bind(a.listen)
        .await
        .with_context(|| format!("cannot listen on {}", a.listen))?;
    let addr = listener.local_addr()?;
    let made = MadeHere::note(&dir);
    let (mut lock, private) = crate::endpoint::datadir::DataDirLock::acquire(&dir, "")?;
    for w in &private {
        warn(w);
    }
    let tokens = Tokens::load_or_create(&dir)?;
    let (engine, warnings) = Engine::open(
        config,
        nodes,
        &dir,
        a.sync,
        Arc::new(SystemClock),
        Arc::new(LocalProcesses),
    )
    .with_context(|| format!("cannot open the state in {}", dir.display()))?;
    for w in &warnings {
        warn(w);
    }
    let live = crate::endpoint::live::LiveConfig {
        coordination_file: Some(a.coordination_file.clone()),
        simulate: live_simulation(&a),
        ..crate::endpoint::live::LiveConfig::local(&host)
    };
    engine.attach_telemetry(core, Some(first), Arc::new(crate::clock::SystemClock), live)?;
    let simulation = start_simulation(&a, &engine);
    let (config, fingerprint) = listen_config(&a, use_tls, &host, &dir)?;
    if let Some(w) = exposure_warning(addr, use_tls) {
        warn(&w);
    }
    let scheme = if use_tls { "https" } else { "http" };
    let url = format!("{scheme}://{addr}");
    lock.set_address(&url)?;
    if let Some(h) = host_lock.as_mut() {
        h.set_holder(&url, Some(&dir))
            .with_context(|| format!("cannot write {}", h.path().display()))?;
    }
    made.keep();
    let ticker = engine.spawn_ticker();
    // Before anyone is told it listens: a SIGTERM from then on stops it cleanly.
    let shutdown = shutdown_signal();
    announce(&url, &dir, fingerprint.as_deref())?;
    let state = ApiState::new(engine, tokens, a.open_reads).with_token_dir(&dir);
    let (state, recorder) = start_recording(&a, &dir, state)?;
    super::systemd::notify_ready(&url);
    let watchdog = super::systemd::spawn_watchdog();
    let gate = Arc::clone(&state.gate);
    let usage = spawn_usage_flusher(Arc::clone(&gate));
    api::serve_with(listener, state, config, async {
        shutdown.await;
        super::systemd::notify_stopping();
    })
    .await?;
    if let Some(r) = recorder {
        r.abort();
    }
    ticker.abort();
    usage.abort();
    if let Some(s) = simulation {
        s.abort();
    }
    if let Err(e) = gate.flush_usage() {
        warn(&format!("cannot record when tokens were last used: {e}"));
    }
    if let Some(w) = watchdog {
        w.abort();
    }
    drop(lock);
    drop(host_lock);
    Ok(())
}

/// Logs to stderr at `RUST_LOG` (default `warn`).
fn init_logs() {
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // A failing stderr (`2>/dev/full`) loses log lines, never the thread that logs.
        .log_internal_errors(false);
    // The journal stamps each line itself and shows no colours.
    let _ = if super::systemd::under_journald() {
        logs.without_time().with_ansi(false).try_init()
    } else {
        logs.try_init()
    };
}

/// The listener's limits and, with TLS, its certificate (the flags' files, else the data
/// directory's, made on first start) and that certificate's fingerprint.
fn listen_config(
    a: &ServeArgs,
    use_tls: bool,
    host: &str,
    dir: &std::path::Path,
) -> anyhow::Result<(ListenConfig, Option<String>)> {
    let mut config = ListenConfig::with_cap(a.max_connections);
    config.header_timeout = Duration::from_millis(a.header_timeout_ms.max(1));
    config.idle_timeout = Duration::from_millis(a.idle_timeout_ms.max(1));
    let mut fingerprint = None;
    if use_tls {
        let identity = if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
            tls::ServerCert::from_files(cert, key)?
        } else {
            let names = tls::certificate_names(host, a.listen.ip());
            let (identity, made) = tls::ServerCert::load_or_create(dir, &names)?;
            if made {
                eprintln!(
                    "gpuboard serve: made a certificate for {} in {}",
                    names.join(", "),
                    tls::cert_path(dir).display()
                );
            }
            identity
        };
        fingerprint = Some(identity.fingerprint());
        config.tls = Some(identity.server_config()?);
    }
    Ok((config, fingerprint))
}

/// The first line of stdout says where it listens (tests and scripts wait for it), then the
/// certificate's fingerprint to pin.
fn announce(url: &str, dir: &std::path::Path, fingerprint: Option<&str>) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "gpuboard serve: listening on {url} (data dir {}, tokens {} and {})",
        dir.display(),
        auth::OPERATOR_TOKEN_FILE,
        auth::READ_TOKEN_FILE
    )?;
    if let Some(fp) = fingerprint {
        writeln!(
            out,
            "gpuboard serve: TLS certificate SHA-256 fingerprint {fp} (clients pin it with --tls-fingerprint)"
        )?;
    }
    out.flush()
}

/// Steps the simulated telemetry when `--simulate-telemetry` asks for it, saying so.
fn start_simulation(a: &ServeArgs, engine: &Engine) -> Option<tokio::task::JoinHandle<()>> {
    let sim = live_simulation(a)?;
    warn(&sim.note());
    engine
        .telemetry()
        .map(|feed| crate::endpoint::live::spawn_simulation(Arc::clone(feed)))
}

/// The simulation `--simulate-telemetry[=SEED]` asks for.
fn live_simulation(a: &ServeArgs) -> Option<crate::telemetry::simulated::Simulation> {
    a.simulate_telemetry
        .map(crate::telemetry::simulated::Simulation::new)
}

/// The API state recording into the data directory's history, and the recorder's feed,
/// unless `--history-days 0`.
fn start_recording(
    a: &ServeArgs,
    dir: &std::path::Path,
    state: ApiState,
) -> anyhow::Result<(ApiState, Option<tokio::task::JoinHandle<()>>)> {
    let Some(keep) = history_retention(a)? else {
        return Ok((state, None));
    };
    let history = match crate::endpoint::history_recorder::RecordedHistory::open_with(
        dir,
        keep,
        a.history_max_pages,
    ) {
        Ok(h) => h,
        Err(e) => {
            // A history that cannot be opened (a full disk) stops the recording, never the
            // serve: the scheduler goes on, and /healthz and every snapshot say why.
            let why = format!("stopped: cannot open the history in {}: {e}", dir.display());
            warn(&why);
            state.engine.set_history_stopped(Some(why));
            return Ok((state, None));
        }
    };
    let (state, feed) = state.recording(history);
    Ok((state, Some(feed)))
}

/// The data directory when this start made it: removed again if the start fails before
/// serving, so that a serve that could not start leaves no directory, tokens or database.
struct MadeHere(Option<PathBuf>);

impl MadeHere {
    fn note(dir: &std::path::Path) -> MadeHere {
        MadeHere((!dir.exists()).then(|| dir.to_path_buf()))
    }

    /// The start got as far as serving: the directory stays.
    fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for MadeHere {
    fn drop(&mut self) {
        if let Some(dir) = &self.0 {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The history's retention from `--history-days` and `--history-size`; `None` when off.
fn history_retention(a: &ServeArgs) -> anyhow::Result<Option<crate::store::history::Retention>> {
    let bytes = Bytes::parse(&a.history_size)
        .map_err(|e| anyhow::anyhow!("--history-size {}: {e}", a.history_size))?;
    Ok(
        (a.history_days > 0).then_some(crate::store::history::Retention {
            days: a.history_days,
            bytes,
        }),
    )
}

/// The warning for an endpoint reachable from other hosts, naming the address bound (the
/// port chosen, not the 0 asked for).
fn exposure_warning(addr: SocketAddr, tls: bool) -> Option<String> {
    (!addr.ip().is_loopback() && !tls).then(|| {
        format!(
            "listening on {addr} (not loopback) over plain HTTP (--insecure-http); tokens \
             travel unencrypted"
        )
    })
}

/// Writes down when tokens were last used every `USAGE_FLUSH` (in batches: a request
/// only touches memory).
fn spawn_usage_flusher(gate: Arc<crate::endpoint::gate::Gate>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(crate::endpoint::gate::USAGE_FLUSH);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        loop {
            every.tick().await;
            let gate = Arc::clone(&gate);
            // File I/O off the request threads.
            if let Ok(Err(e)) = tokio::task::spawn_blocking(move || gate.flush_usage()).await {
                tracing::warn!("cannot record when tokens were last used: {e}");
            }
        }
    })
}

/// A warning on stderr; one that cannot be written is dropped.
fn warn(w: &str) {
    let _ = writeln!(std::io::stderr(), "gpuboard serve: warning: {w}");
}

/// The nodes to serve: the inventory file's, else this host's GPUs as NVML's first round
/// found them (less `headroom` each). Having no GPU at all is an error that says why.
fn nodes_to_serve(
    a: &ServeArgs,
    first: &TelemetrySnapshot,
    host: &str,
    headroom: Bytes,
) -> anyhow::Result<Vec<NodeSpec>> {
    if let Some(inventory) = &a.inventory {
        let nodes = crate::inventory::load(inventory)?;
        if nodes.iter().all(|n| n.devices.is_empty()) {
            anyhow::bail!("inventory {} lists no GPU", inventory.display());
        }
        Ok(nodes)
    } else {
        let node = crate::endpoint::live::inventory(first, host, headroom);
        if node.devices.is_empty() {
            let why = match &first.backend {
                crate::telemetry::BackendStatus::Unavailable { reason, .. } => reason.to_string(),
                crate::telemetry::BackendStatus::Ready { .. } => {
                    "NVML is running but lists no GPU".to_string()
                }
            };
            anyhow::bail!(
                "no GPUs to serve: {why}. Give an inventory file with --inventory FILE \
                 (for example assets/demo-fleet.toml), or run `gpuboard --demo` to see the demo fleet"
            );
        }
        Ok(vec![node])
    }
}

/// The engine's settings from the flags: name (default: the host name), policy, tick.
fn engine_config(a: &ServeArgs) -> EngineConfig {
    let name = a.name.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map_or_else(|_| "gpuboard".to_string(), |h| h.trim().to_string())
    });
    EngineConfig {
        scheduler: SchedulerConfig {
            name,
            kind: "gpuboard".to_string(),
            policy: if a.policy == "spread" {
                Policy::Spread
            } else {
                Policy::Binpack
            },
            ..SchedulerConfig::default()
        },
        tick: Duration::from_millis(a.tick_ms.max(10)),
    }
}

/// Whether to serve https: when asked, and by default on any address but loopback, where
/// plain HTTP needs `--insecure-http`.
fn wants_tls(listen: SocketAddr, asked: bool, insecure_http: bool) -> bool {
    asked || !(listen.ip().is_loopback() || insecure_http)
}

/// Watches SIGTERM and SIGINT from the call on (so one that arrives right after readiness
/// is caught, not fatal) and resolves on the first (never, for one that cannot be watched).
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
    async move {
        tokio::select! {
            () = async { if let Some(s) = term.as_mut() { s.recv().await; } else { std::future::pending::<()>().await } } => {}
            () = async { if let Some(s) = int.as_mut() { s.recv().await; } else { std::future::pending::<()>().await } } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposure_warning_names_the_bound_port() {
        let w = exposure_warning(SocketAddr::from(([0, 0, 0, 0], 43_210)), false).unwrap();
        assert!(w.contains("0.0.0.0:43210"), "{w}");
        assert_eq!(
            exposure_warning(SocketAddr::from(([127, 0, 0, 1], 43_210)), false),
            None
        );
        // Over TLS the tokens do not travel in clear text.
        assert_eq!(
            exposure_warning(SocketAddr::from(([0, 0, 0, 0], 43_210)), true),
            None
        );
    }

    #[test]
    fn plain_http_off_loopback_needs_insecure_http() {
        let lo: SocketAddr = "127.0.0.1:7420".parse().unwrap();
        let lan: SocketAddr = "10.0.0.5:7420".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7420".parse().unwrap();
        assert!(!wants_tls(lo, false, false));
        assert!(wants_tls(lo, true, false));
        assert!(wants_tls(lan, false, false));
        assert!(wants_tls(any, false, false));
        assert!(!wants_tls(lan, false, true));
    }
}
