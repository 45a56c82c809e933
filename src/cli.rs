//! The endpoint and client subcommands: `serve`, `claim`, `release`, `move`, `ls`, `renew`,
//! `cordon`, `uncordon`, `project` and `run`. Human tables by default, `--json` for scripts;
//! exit codes say what kind of failure happened (README, "Exit codes").

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use crate::client::{ClaimOutcome, Client, ClientError};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::endpoint::api::{self, ApiState};
use crate::endpoint::auth::{self, Tokens};
use crate::endpoint::engine::{Engine, EngineConfig, LocalProcesses};
use crate::endpoint::store::{SyncMode, default_data_dir};
use crate::ids::ClaimId;
use crate::placement::{MoveTarget, Policy};
use crate::request::ClaimRequest;
use crate::scheduler::SchedulerConfig;
use crate::snapshot::{ClaimState, ClaimView};
use crate::units::Bytes;
use crate::wire::{ClaimDraft, DEFAULT_PORT, default_endpoint};

/// Exit code: the request was invalid (422, 400, 413, bad flags or endpoint URL).
pub const EXIT_INVALID: u8 = 3;
/// Exit code: the claim does not fit (409).
pub const EXIT_DOES_NOT_FIT: u8 = 4;
/// Exit code: the endpoint could not be reached or did not answer in time.
pub const EXIT_UNREACHABLE: u8 = 5;
/// Exit code: no token, a wrong one, or a read token on a mutation (401, 403).
pub const EXIT_AUTH: u8 = 6;

/// Endpoint and client subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the scheduler endpoint: hold claims, persist them, serve the HTTP API.
    Serve(ServeArgs),
    /// Claim GPU memory, a fraction, or whole GPUs.
    Claim(ClaimArgs),
    /// Release claims (idempotent).
    Release {
        /// Claim ids.
        #[arg(required = true)]
        ids: Vec<ClaimId>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Move a claim to other devices or another node of its endpoint.
    Move {
        /// Claim id.
        id: ClaimId,
        /// Target node.
        #[arg(long)]
        node: Option<String>,
        /// Target device indexes, comma-separated.
        #[arg(long, value_delimiter = ',')]
        devices: Option<Vec<u32>>,
        #[command(flatten)]
        conn: Conn,
    },
    /// List claims.
    Ls {
        #[command(flatten)]
        conn: Conn,
    },
    /// Extend a claim's lease.
    Renew {
        /// Claim id.
        id: ClaimId,
        /// New lease length in seconds (default: the claim's own ttl).
        #[arg(long)]
        ttl: Option<u64>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Stop new claims on a device.
    Cordon {
        /// Node name.
        node: String,
        /// Device index.
        index: u32,
        #[command(flatten)]
        conn: Conn,
    },
    /// Resume new claims on a device.
    Uncordon {
        /// Node name.
        node: String,
        /// Device index.
        index: u32,
        #[command(flatten)]
        conn: Conn,
    },
    /// Projects: set a share, reset debts and backoffs.
    #[command(subcommand)]
    Project(ProjectCommand),
    /// Claim GPU memory, run CMD with the devices in its environment, release when it exits.
    Run(RunArgs),
}

/// `gpuboard project ...`.
#[derive(Subcommand, Debug)]
pub enum ProjectCommand {
    /// Set a project's resource share.
    Set {
        /// Project name.
        name: String,
        /// Share (default 100; a project with 200 gets twice the processing of one with 100).
        #[arg(long)]
        share: u32,
        #[command(flatten)]
        conn: Conn,
    },
    /// Clear a project's debts and backoffs.
    Reset {
        /// Project name.
        name: String,
        #[command(flatten)]
        conn: Conn,
    },
}

/// How to reach an endpoint.
#[derive(Args, Debug, Clone)]
pub struct Conn {
    /// Endpoint URL (http:// only: this build has no TLS).
    #[arg(long, env = "GPUBOARD_ENDPOINT", default_value_t = default_endpoint())]
    pub endpoint: String,
    /// File holding the bearer token (default: operator.token in the data directory;
    /// the GPUBOARD_TOKEN environment variable takes precedence over the default).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Data directory to find the token in.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Seconds to wait for an answer.
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `gpuboard serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Inventory file of nodes and GPUs (TOML; see assets/demo-fleet.toml).
    #[arg(long)]
    pub inventory: Option<PathBuf>,
    /// Where state and tokens live.
    #[arg(long)]
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
    #[arg(long)]
    pub nvml_lib: Option<PathBuf>,
    /// Memory kept back from each GPU found through NVML (e.g. 1GiB).
    #[arg(long)]
    pub memory_headroom: Option<String>,
    /// Flink GPU coordination file whose records the snapshot lists.
    #[arg(long, default_value = crate::discovery::coordination::DEFAULT_COORDINATION_FILE)]
    pub coordination_file: PathBuf,
}

/// `gpuboard claim`.
#[derive(Args, Debug)]
pub struct ClaimArgs {
    /// GPU memory (20GiB, 512Mi, 40G): Ray's gpu_memory, or Koordinator's gpu-memory with --shared/--core.
    #[arg(long)]
    pub memory: Option<String>,
    /// A fraction of one GPU (Ray num_gpus, 0 < f < 1).
    #[arg(long)]
    pub fraction: Option<f64>,
    /// Whole GPUs, exclusive (nvidia.com/gpu).
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Percent of each GPU's memory (Koordinator gpu-memory-ratio).
    #[arg(long)]
    pub ratio: Option<u32>,
    /// Percent of compute (Koordinator gpu-core).
    #[arg(long)]
    pub core: Option<u32>,
    /// Devices to spread a Koordinator share over (gpu.shared).
    #[arg(long)]
    pub shared: Option<u32>,
    /// CPU cores.
    #[arg(long)]
    pub cpus: Option<f64>,
    /// Project to account.
    #[arg(long)]
    pub project: Option<String>,
    /// Holder name (default: the user).
    #[arg(long)]
    pub holder: Option<String>,
    /// Lease in seconds; renew with `gpuboard renew`.
    #[arg(long)]
    pub ttl: Option<u64>,
    /// Queue when it does not fit now (answer 202) instead of failing.
    #[arg(long)]
    pub wait: bool,
    /// Only this node.
    #[arg(long)]
    pub node: Option<String>,
    /// Only these device indexes, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub devices: Option<Vec<u32>>,
    /// Only this accelerator type (NVIDIA_A100, H100...).
    #[arg(long)]
    pub accelerator: Option<String>,
    /// The whole request as a JSON object (any accepted form); other request flags are added to it.
    #[arg(long)]
    pub request: Option<String>,
    #[command(flatten)]
    pub conn: Conn,
}

/// `gpuboard run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// GPU memory per device (20GiB, 512Mi, 40G).
    #[arg(long)]
    pub memory: String,
    /// Lease in seconds, renewed every third of it while CMD runs.
    #[arg(long, default_value_t = 60)]
    pub ttl: u64,
    /// Project to account.
    #[arg(long)]
    pub project: Option<String>,
    /// Holder name (default: the user).
    #[arg(long)]
    pub holder: Option<String>,
    /// Only this node.
    #[arg(long)]
    pub node: Option<String>,
    /// Only this accelerator type.
    #[arg(long)]
    pub accelerator: Option<String>,
    #[command(flatten)]
    pub conn: Conn,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub cmd: Vec<String>,
}

/// Runs a subcommand to completion and returns the process exit code.
pub fn run(cmd: Command) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gpuboard: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(dispatch(cmd)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("gpuboard: {e:#}");
            let code = e
                .downcast_ref::<ClientError>()
                .map_or(1, ClientError::exit_code);
            ExitCode::from(code)
        }
    }
}

async fn dispatch(cmd: Command) -> anyhow::Result<u8> {
    match cmd {
        Command::Serve(a) => serve(a).await.map(|()| 0),
        Command::Claim(a) => claim(a).await.map(|()| 0),
        Command::Release { ids, conn } => {
            let c = connect(&conn)?;
            let mut out = Vec::new();
            for id in ids {
                let r = c.release(id).await?;
                if !conn.json {
                    println!(
                        "claim {id}: {}",
                        if r.released {
                            "released"
                        } else {
                            "already released"
                        }
                    );
                }
                out.push(json!({"id": r.id, "released": r.released}));
            }
            if conn.json {
                print_json(&out)?;
            }
            Ok(0)
        }
        Command::Move {
            id,
            node,
            devices,
            conn,
        } => {
            if node.is_none() && devices.is_none() {
                eprintln!("gpuboard move: give --node, --devices, or both");
                return Ok(EXIT_INVALID);
            }
            let c = connect(&conn)?;
            let view = c.move_claim(id, &MoveTarget { node, devices }).await?;
            print_claim(&view, conn.json)?;
            Ok(0)
        }
        Command::Ls { conn } => {
            let c = connect(&conn)?;
            let snap = c.snapshot().await?;
            if conn.json {
                print_json(&snap.claims)?;
            } else {
                print!("{}", claims_table(&snap.claims, SystemClock.now()));
            }
            Ok(0)
        }
        Command::Renew { id, ttl, conn } => {
            let c = connect(&conn)?;
            let view = c.renew(id, ttl).await?;
            print_claim(&view, conn.json)?;
            Ok(0)
        }
        Command::Cordon { node, index, conn } => {
            connect(&conn)?.cordon(&node, index).await?;
            done(
                &conn,
                json!({"node": node, "index": index, "cordoned": true}),
                || format!("{node}:{index} cordoned"),
            )?;
            Ok(0)
        }
        Command::Uncordon { node, index, conn } => {
            connect(&conn)?.uncordon(&node, index).await?;
            done(
                &conn,
                json!({"node": node, "index": index, "cordoned": false}),
                || format!("{node}:{index} uncordoned"),
            )?;
            Ok(0)
        }
        Command::Project(ProjectCommand::Set { name, share, conn }) => {
            connect(&conn)?.set_share(&name, share).await?;
            done(&conn, json!({"project": name, "share": share}), || {
                format!("project {name}: share {share}")
            })?;
            Ok(0)
        }
        Command::Project(ProjectCommand::Reset { name, conn }) => {
            connect(&conn)?.reset_project(&name).await?;
            done(&conn, json!({"project": name, "reset": true}), || {
                format!("project {name}: debts and backoffs cleared")
            })?;
            Ok(0)
        }
        Command::Run(a) => run_command(a).await,
    }
}

/// The token: `--token-file`, else `GPUBOARD_TOKEN`, else the data directory's operator token.
fn token(conn: &Conn) -> anyhow::Result<Option<String>> {
    if let Some(path) = &conn.token_file {
        return Ok(Some(auth::read_token_file(path)?));
    }
    if let Ok(t) = std::env::var("GPUBOARD_TOKEN")
        && !t.trim().is_empty()
    {
        return Ok(Some(t.trim().to_string()));
    }
    let dir = conn.data_dir.clone().unwrap_or_else(default_data_dir);
    let path = auth::default_token_path(&dir);
    if path.exists() {
        return Ok(Some(auth::read_token_file(&path)?));
    }
    Ok(None)
}

fn connect(conn: &Conn) -> anyhow::Result<Client> {
    Ok(Client::new(
        &conn.endpoint,
        token(conn)?,
        Duration::from_secs(conn.timeout.max(1)),
    )?)
}

/// Reports a finished action: `json` with `--json`, else the sentence.
fn done(conn: &Conn, json: Value, sentence: impl FnOnce() -> String) -> anyhow::Result<()> {
    if conn.json {
        print_json(&json)
    } else {
        println!("{}", sentence());
        Ok(())
    }
}

fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, v)?;
    writeln!(out)?;
    Ok(())
}

fn print_claim(c: &ClaimView, as_json: bool) -> anyhow::Result<()> {
    if as_json {
        return print_json(c);
    }
    match c.state {
        ClaimState::Placed => println!(
            "claim {} placed on {}:{} ({} memory, {} GPU)",
            c.id,
            c.node.as_deref().unwrap_or("?"),
            devices_of(c),
            c.memory_reserved.iec(),
            c.compute_reserved
        ),
        ClaimState::Pending => {
            println!("claim {} pending:", c.id);
            for r in &c.pending_reasons {
                println!("  {r}");
            }
        }
    }
    Ok(())
}

fn devices_of(c: &ClaimView) -> String {
    c.shares
        .iter()
        .map(|s| s.device.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn claims_table(claims: &[ClaimView], now: Timestamp) -> String {
    let mut rows = vec![
        [
            "ID", "STATE", "PROJECT", "HOLDER", "WHERE", "FORM", "MEMORY", "GPU", "LEASE", "AGE",
        ]
        .map(str::to_string),
    ];
    for c in claims {
        let place = match (&c.node, c.state) {
            (Some(n), _) => format!("{n}:{}", devices_of(c)),
            (None, _) => "-".to_string(),
        };
        let lease = c.lease_expires_at.map_or("-".to_string(), |t| {
            format!("{}s", t.millis_since(now) / 1000)
        });
        rows.push([
            c.id.to_string(),
            match c.state {
                ClaimState::Placed => "placed".to_string(),
                ClaimState::Pending => "pending".to_string(),
            },
            c.project.clone(),
            c.holder.clone().unwrap_or_else(|| "-".to_string()),
            place,
            c.form.clone(),
            c.memory_reserved.iec(),
            c.compute_reserved.to_string(),
            lease,
            format!("{}s", now.millis_since(c.created_at) / 1000),
        ]);
    }
    let mut widths = [0usize; 10];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    if claims.is_empty() {
        out.push_str("(no claims)\n");
    }
    out
}

fn user() -> Option<String> {
    std::env::var("USER").ok().filter(|u| !u.is_empty())
}

/// The flags as typed; `wire::ClaimDraft` decides which wire field each becomes.
fn claim_draft(a: &ClaimArgs) -> ClaimDraft {
    ClaimDraft {
        memory: a.memory.clone(),
        fraction: a.fraction.map(|f| f.to_string()),
        gpus: a.gpus.map(|g| g.to_string()),
        ratio: a.ratio.map(|r| r.to_string()),
        core: a.core.map(|c| c.to_string()),
        shared: a.shared.map(|s| s.to_string()),
        cpus: a.cpus.map(|c| c.to_string()),
        accelerator_type: a.accelerator.clone(),
        project: a.project.clone(),
        holder: a.holder.clone().or_else(user),
        ttl: a.ttl.map(|t| t.to_string()),
        node: a.node.clone(),
        devices: a.devices.clone(),
        wait: a.wait,
        koordinator: false,
    }
}

/// The `--request` JSON object the flags are added to.
fn base_request(a: &ClaimArgs) -> anyhow::Result<Map<String, Value>> {
    let Some(text) = &a.request else {
        return Ok(Map::new());
    };
    match serde_json::from_str(text)
        .with_context(|| format!("--request is not valid JSON: {text}"))?
    {
        Value::Object(m) => Ok(m),
        _ => anyhow::bail!("--request must be a JSON object, e.g. '{{\"gpu_memory\": \"10Gi\"}}'"),
    }
}

/// The validated request the flags describe: refused here, by the endpoint's own
/// validator, before anything is sent.
fn claim_request(a: &ClaimArgs) -> anyhow::Result<ClaimRequest> {
    let base = base_request(a)?;
    claim_draft(a)
        .to_request(base)
        .map_err(|e| ClientError::from(e).into())
}

async fn claim(a: ClaimArgs) -> anyhow::Result<()> {
    let request = claim_request(&a)?;
    let c = connect(&a.conn)?;
    match c.claim(&request).await {
        Ok(ClaimOutcome::Placed(v) | ClaimOutcome::Pending(v)) => print_claim(&v, a.conn.json),
        Err(e @ ClientError::DoesNotFit { .. }) if !a.conn.json => {
            // One node a line, then the typed error for the exit code.
            if let ClientError::DoesNotFit { reasons, .. } = &e {
                eprintln!("does not fit:");
                for r in reasons {
                    eprintln!("  {r}");
                }
            }
            Err(e.into())
        }
        Err(e) => Err(e.into()),
    }
}

async fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
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
    let nodes = match &a.inventory {
        Some(inventory) => {
            let nodes = crate::inventory::load(inventory)?;
            if nodes.iter().all(|n| n.devices.is_empty()) {
                anyhow::bail!("inventory {} lists no GPU", inventory.display());
            }
            nodes
        }
        None => {
            let node = crate::endpoint::live::inventory(&first, &host, headroom);
            if node.devices.is_empty() {
                let why = match &first.backend {
                    crate::telemetry::BackendStatus::Unavailable { reason, .. } => {
                        reason.to_string()
                    }
                    crate::telemetry::BackendStatus::Ready { .. } => {
                        "NVML is running but lists no GPU".to_string()
                    }
                };
                anyhow::bail!(
                    "no GPUs to serve: {why}. Give an inventory file with --inventory FILE \
                     (for example assets/demo-fleet.toml), or run `gpuboard --demo` to see the demo fleet"
                );
            }
            vec![node]
        }
    };
    let dir = a.data_dir.clone().unwrap_or_else(default_data_dir);
    let name = a.name.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "gpuboard".to_string())
    });
    let config = EngineConfig {
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
    };
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
    for w in warnings {
        eprintln!("gpuboard serve: warning: {w}");
    }
    let live = crate::endpoint::live::LiveConfig {
        coordination_file: Some(a.coordination_file.clone()),
        ..crate::endpoint::live::LiveConfig::local(&host)
    };
    engine.attach_telemetry(core, Some(first), Arc::new(crate::clock::SystemClock), live)?;
    if !a.listen.ip().is_loopback() {
        eprintln!(
            "gpuboard serve: warning: listening on {} (not loopback) over plain HTTP; tokens travel unencrypted",
            a.listen
        );
    }
    let listener = tokio::net::TcpListener::bind(a.listen)
        .await
        .with_context(|| format!("cannot listen on {}", a.listen))?;
    let addr = listener.local_addr()?;
    let ticker = engine.spawn_ticker();
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "gpuboard serve: listening on http://{addr} (data dir {}, tokens {} and {})",
            dir.display(),
            auth::OPERATOR_TOKEN_FILE,
            auth::READ_TOKEN_FILE
        )?;
        out.flush()?;
    }
    let state = ApiState::new(engine, tokens, a.open_reads);
    api::serve(listener, state, shutdown_signal()).await?;
    ticker.abort();
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
    tokio::select! {
        _ = async { if let Some(s) = term.as_mut() { s.recv().await; } else { std::future::pending::<()>().await } } => {}
        _ = async { if let Some(s) = int.as_mut() { s.recv().await; } else { std::future::pending::<()>().await } } => {}
    }
}

/// Whether the endpoint runs on this host, so that a pid means something to it.
fn endpoint_is_local(endpoint: &str) -> bool {
    reqwest::Url::parse(endpoint).ok().is_some_and(|u| {
        let host = u.host_str().unwrap_or_default();
        host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}

/// `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` for `count` visible devices each limited to `limit`:
/// `0=20G,1=20G` (ordinals as CMD sees them; whole GiB as `G`, else MiB as `M`, rounded down
/// so that the limit never exceeds the reservation).
pub fn mps_limit(count: usize, limit: Bytes) -> String {
    let value = if limit.0.is_multiple_of(1 << 30) {
        format!("{}G", limit.0 >> 30)
    } else {
        format!("{}M", limit.0 >> 20)
    };
    (0..count)
        .map(|i| format!("{i}={value}"))
        .collect::<Vec<_>>()
        .join(",")
}

async fn run_command(a: RunArgs) -> anyhow::Result<u8> {
    Bytes::parse(&a.memory).map_err(|e| ClientError::Invalid {
        rule: None,
        rule_number: None,
        field: Some("memory".into()),
        detail: format!("--memory {}: {e}", a.memory),
    })?;
    let ttl = a.ttl.max(3);
    let c = connect(&a.conn)?;
    let mut base = Map::new();
    base.insert(
        "labels".into(),
        json!({"command": a.cmd.first().cloned().unwrap_or_default()}),
    );
    // On this host the endpoint also releases the claim if this process dies.
    if endpoint_is_local(&a.conn.endpoint) {
        base.insert("pid".into(), json!(std::process::id()));
    }
    let draft = ClaimDraft {
        memory: Some(a.memory.clone()),
        ttl: Some(ttl.to_string()),
        project: a.project.clone(),
        holder: a.holder.clone().or_else(user),
        node: a.node.clone(),
        accelerator_type: a.accelerator.clone(),
        ..ClaimDraft::default()
    };
    let request = draft.to_request(base).map_err(ClientError::from)?;
    let claim = match c.claim(&request).await? {
        ClaimOutcome::Placed(v) => v,
        ClaimOutcome::Pending(v) => {
            let _ = c.release(v.id).await;
            anyhow::bail!("claim {} was queued instead of placed; released it", v.id);
        }
    };
    let limit = claim
        .shares
        .iter()
        .map(|s| s.memory)
        .min()
        .unwrap_or_default();
    let visible = devices_of(&claim);
    let mut child = tokio::process::Command::new(&a.cmd[0]);
    child
        .args(&a.cmd[1..])
        .env("CUDA_VISIBLE_DEVICES", &visible)
        .env("GPUBOARD_MEMORY_LIMIT", limit.0.to_string())
        .env(
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
            mps_limit(claim.shares.len(), limit),
        )
        .env("GPUBOARD_CLAIM_ID", claim.id.to_string())
        .env("GPUBOARD_ENDPOINT", &a.conn.endpoint);
    let status = match child.spawn() {
        Ok(mut child) => supervise(&c, claim.id, ttl, &mut child).await,
        Err(e) => Err(anyhow::anyhow!("cannot start `{}`: {e}", a.cmd[0])),
    };
    release_with_retry(&c, claim.id).await;
    let status = status?;
    Ok(exit_code_of(status))
}

/// Waits for CMD, renewing the lease every third of `ttl` and forwarding SIGTERM/SIGINT/SIGHUP.
async fn supervise(
    c: &Client,
    id: ClaimId,
    ttl: u64,
    child: &mut tokio::process::Child,
) -> anyhow::Result<std::process::ExitStatus> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut renew = tokio::time::interval(Duration::from_secs((ttl / 3).max(1)));
    renew.tick().await;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    loop {
        let sig = tokio::select! {
            status = child.wait() => return Ok(status?),
            _ = renew.tick() => {
                if let Err(e) = c.renew(id, Some(ttl)).await {
                    eprintln!("gpuboard run: renewing claim {id} failed: {e}");
                }
                continue;
            }
            _ = term.recv() => libc::SIGTERM,
            _ = int.recv() => libc::SIGINT,
            _ = hup.recv() => libc::SIGHUP,
        };
        if let Some(pid) = child.id().and_then(|p| libc::pid_t::try_from(p).ok()) {
            // SAFETY: sending a signal to our own child process.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    }
}

async fn release_with_retry(c: &Client, id: ClaimId) {
    for attempt in 0..3 {
        match c.release(id).await {
            Ok(_) => return,
            Err(e) if attempt == 2 => {
                eprintln!(
                    "gpuboard run: could not release claim {id}: {e} (its lease will expire)"
                );
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn exit_code_of(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(1),
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mps_limits_are_per_visible_device() {
        assert_eq!(mps_limit(1, Bytes::gib(20)), "0=20G");
        assert_eq!(mps_limit(2, Bytes::gib(20)), "0=20G,1=20G");
        assert_eq!(
            mps_limit(1, Bytes(Bytes::gib(1).0 + (1 << 20) + 5)),
            "0=1025M"
        );
    }

    #[test]
    fn local_endpoints_are_recognised() {
        assert!(endpoint_is_local("http://127.0.0.1:7420"));
        assert!(endpoint_is_local("http://localhost:1"));
        assert!(endpoint_is_local("http://[::1]:1"));
        assert!(!endpoint_is_local("http://10.0.0.1:7420"));
        assert!(!endpoint_is_local("garbage"));
    }

    #[test]
    fn claim_flags_build_the_right_form() {
        let args = |extra: &[&str]| {
            #[derive(clap::Parser)]
            struct T {
                #[command(flatten)]
                a: ClaimArgs,
            }
            let mut v = vec!["t"];
            v.extend_from_slice(extra);
            <T as clap::Parser>::parse_from(v).a
        };
        let body = |a: ClaimArgs| claim_draft(&a).to_json(base_request(&a).unwrap());
        let b = body(args(&["--memory", "20GiB", "--holder", "h"]));
        assert_eq!(b, json!({"gpu_memory": "20GiB", "holder": "h"}));
        let b = body(args(&[
            "--memory", "20GiB", "--shared", "2", "--holder", "h",
        ]));
        assert_eq!(
            b,
            json!({"gpu-memory": "20GiB", "gpu.shared": 2, "holder": "h"})
        );
        let b = body(args(&[
            "--gpus",
            "2",
            "--devices",
            "0,1",
            "--wait",
            "--holder",
            "h",
        ]));
        assert_eq!(
            b,
            json!({"nvidia.com/gpu": 2, "devices": [0, 1], "wait": true, "holder": "h"})
        );
        assert!(claim_request(&args(&["--request", "[1]"])).is_err());
        let e = claim_request(&args(&["--memory", "lots", "--holder", "h"])).unwrap_err();
        let e = e.downcast_ref::<ClientError>().unwrap();
        assert_eq!(e.exit_code(), 3, "refused locally as invalid: {e}");
    }
}
