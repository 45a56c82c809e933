//! The endpoint and client subcommands: `serve`, `claim`, `release`, `move`, `ls`, `renew`,
//! `cordon`, `uncordon`, `project` and `run`. Human tables by default, `--json` for scripts;
//! exit codes say what kind of failure happened (README, "Exit codes").
//!
//! This file holds the `Command` tree, its dispatch, the connection flags every client
//! subcommand shares (`Conn`) and the output helpers; each subcommand lives in its own file:
//! `serve` (the endpoint), `claims` (claim, release, move, ls, renew), `admin` (cordon,
//! project) and `run` (a command under a claim).

// clap turns the flags' doc comments into `--help` text, where backticks would show.
#![allow(clippy::doc_markdown)]

mod act;
mod admin;
pub mod backtest;
mod claims;
pub mod completions;
pub mod doctor_fleet;
mod dry_run;
mod events;
mod fleet;
mod fleet_move;
mod lost_answer;
pub mod man;
mod members;
mod record;
mod record_joined;
pub mod report;
mod run;
mod run_group;
mod serve;
mod snapcache;
mod systemd;
mod token;
mod version;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::client::{Client, TlsTrust};
use crate::endpoint::{auth, tls};
use crate::store::claims::default_data_dir;
use crate::wire::forecast::PreviewAction;

pub use act::{ActArgs, EXIT_ENGINE_REFUSED};
pub use admin::ProjectCommand;
pub use claims::ClaimArgs;
pub use events::EventsArgs;
pub use fleet::PlaceArgs;
pub use members::ClaimRef;
pub use run::{RunArgs, mps_limit};
pub use serve::ServeArgs;
pub use token::TokenCommand;
pub use version::VERSION;

pub use crate::exit::UsageError as Usage;
pub use crate::exit::{
    EXIT_AUTH, EXIT_DOES_NOT_FIT, EXIT_INVALID, EXIT_NOT_FOUND, EXIT_UNREACHABLE, exit_code,
};

/// Endpoint and client subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the scheduler endpoint: hold claims, persist them, serve the HTTP API.
    Serve(ServeArgs),
    /// Claim GPU memory, a fraction, or whole GPUs.
    Claim(ClaimArgs),
    /// Release claims (idempotent).
    Release {
        /// Claim ids (`ENDPOINT/ID` when more than one endpoint is in play).
        #[arg(required = true)]
        ids: Vec<ClaimRef>,
        /// Show what it would do (placements, stranded claims, debts, expected starts)
        /// and change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Move a claim to other devices, another node, or another endpoint (`--to`).
    Move {
        /// Claim id (`ENDPOINT/ID` when more than one endpoint is in play).
        id: ClaimRef,
        /// Another endpoint, `OTHER` or `OTHER/NODE`: claim there first (same form,
        /// project, holder and lease), then release this claim.
        #[arg(long, value_name = "OTHER[/NODE]")]
        to: Option<String>,
        /// Target node.
        #[arg(long)]
        node: Option<String>,
        /// Target device indexes, comma-separated.
        #[arg(long, value_delimiter = ',')]
        devices: Option<Vec<u32>>,
        /// Show what it would do (placements, stranded claims, debts, expected starts)
        /// and change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// List claims.
    Ls {
        /// Only the claims carrying this label, `KEY=VALUE` (e.g. a fleet claim's
        /// `gpuboard.attempt=ID`).
        #[arg(long, value_name = "KEY=VALUE")]
        label: Option<String>,
        /// Only the waiting claims, with when each is expected to start and why then.
        #[arg(long)]
        pending: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Extend a claim's lease.
    Renew {
        /// Claim id (`ENDPOINT/ID` when more than one endpoint is in play).
        id: ClaimRef,
        /// Lease from now: seconds (600) or a duration (90s, 10m, 2h); never shortens a lease
        /// that already runs longer (default: the claim's own ttl).
        #[arg(long)]
        ttl: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Stop new claims on a device.
    Cordon {
        /// Node name.
        node: String,
        /// Device index.
        index: u32,
        /// Show what it would do (placements, stranded claims, debts, expected starts)
        /// and change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Resume new claims on a device.
    Uncordon {
        /// Node name.
        node: String,
        /// Device index.
        index: u32,
        /// Show what it would do (placements, stranded claims, debts, expected starts)
        /// and change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Projects: set a share, reset debts and backoffs.
    #[command(subcommand)]
    Project(ProjectCommand),
    /// Claim GPU memory, run CMD with the devices in its environment, release when it exits.
    Run(RunArgs),
    /// Act on an engine (Slurm, BOINC, Ray) of the config: cancel a job, set BOINC's GPU
    /// mode, stop a Ray job... (gpuboard act SOURCE --list).
    Act(ActArgs),
    /// Named tokens of this host's endpoint: add, ls, revoke (through the data directory).
    #[command(subcommand)]
    Token(TokenCommand),
    /// The audit history of the endpoints in play: who claimed, released, moved, cordoned...
    Events(EventsArgs),
    /// Record an engine's history (Ray, Slurm, BOINC, Prometheus) and serve it read-only,
    /// so the console rewinds it like an endpoint (README, "History").
    Record(record::RecordArgs),
    /// Where a window's GPU-hours went per project, what was done and what went wrong, from
    /// the endpoints' history, as Markdown or JSON (README, "gpuboard report").
    Report(report::ReportArgs),
}

/// How to reach an endpoint.
#[derive(Args, Debug, Clone)]
pub struct Conn {
    /// Endpoint: a URL (http://HOST:PORT, or https:// with --tls-fingerprint or --tls-ca),
    /// NAME=URL, or the name of an [[endpoints]] entry of the config. Repeat it (or
    /// separate with commas) for a fleet. Default: the config's gpuboard endpoints, else
    /// http://127.0.0.1:7420.
    #[arg(long, env = "GPUBOARD_ENDPOINT", value_delimiter = ',')]
    pub endpoint: Vec<String>,
    /// The config file whose [[endpoints]] (with their token files) the fleet comes from
    /// (default: ~/.config/gpuboard/config.toml, the console's).
    #[arg(long, env = "GPUBOARD_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// SHA-256 fingerprint of an https endpoint's certificate, as `gpuboard serve` printed
    /// it (default for an endpoint on this host: the data directory's certificate).
    #[arg(long, env = "GPUBOARD_TLS_FINGERPRINT", value_name = "SHA256")]
    pub tls_fingerprint: Option<String>,
    /// PEM file of CA certificates to trust for an https endpoint, instead of a fingerprint.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// File holding the bearer token (default: GPUBOARD_TOKEN, else operator.token in the
    /// data directory when the endpoint is on this host).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Data directory to find the token in.
    #[arg(long, env = "GPUBOARD_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Seconds to wait for an answer.
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs a subcommand to completion and returns the process exit code.
pub fn run(cmd: Command) -> ExitCode {
    // A claim or a release is a burst of requests, then exit: one thread does it without
    // handing sockets between workers (a 100-endpoint claim spent a tenth of its CPU
    // switching between them).
    let mut builder = if matches!(cmd, Command::Claim(_) | Command::Release { .. }) {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let rt = match builder.enable_all().build() {
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
            let code = exit_code(&e);
            ExitCode::from(code)
        }
    }
}

/// Runs one subcommand; `Ok` carries the exit code of a run that finished.
async fn dispatch(cmd: Command) -> anyhow::Result<u8> {
    match cmd {
        Command::Serve(a) => serve::serve(a).await.map(|()| 0),
        Command::Claim(a) => claims::claim(a).await,
        Command::Release {
            ids,
            dry_run: true,
            conn,
        } => {
            let mut code = 0;
            for r in &ids {
                let action = PreviewAction::Release { claim: r.id };
                code = code.max(dry_run::dry_run(action, Some(r), &conn).await?);
            }
            Ok(code)
        }
        Command::Release { ids, conn, .. } => claims::release(ids, &conn).await,
        Command::Move {
            id,
            to: None,
            node,
            devices,
            dry_run: true,
            conn,
        } => {
            let action = PreviewAction::Move {
                claim: id.id,
                node,
                devices,
            };
            dry_run::dry_run(action, Some(&id), &conn).await
        }
        Command::Move {
            id,
            to,
            node,
            devices,
            conn,
            dry_run,
        } => {
            if dry_run {
                eprintln!("gpuboard move: --dry-run previews a move within one endpoint, not --to");
                return Ok(EXIT_INVALID);
            }
            claims::move_claim(&id, to.as_deref(), node, devices, &conn).await
        }
        Command::Ls {
            label,
            pending,
            conn,
        } => claims::ls(&conn, label.as_deref(), pending).await,
        Command::Renew { id, ttl, conn } => claims::renew(&id, ttl.as_deref(), &conn).await,
        Command::Cordon {
            node,
            index,
            dry_run: true,
            conn,
        } => dry_run::dry_run(PreviewAction::Cordon { node, index }, None, &conn).await,
        Command::Cordon {
            node, index, conn, ..
        } => admin::cordon(node, index, &conn).await,
        Command::Uncordon {
            node,
            index,
            dry_run: true,
            conn,
        } => dry_run::dry_run(PreviewAction::Uncordon { node, index }, None, &conn).await,
        Command::Uncordon {
            node, index, conn, ..
        } => admin::uncordon(node, index, &conn).await,
        Command::Project(cmd) => admin::project(cmd).await,
        Command::Run(a) => run::run_command(a).await,
        Command::Act(a) => act::act(a).await,
        Command::Token(cmd) => token::run(cmd).map(|()| 0),
        Command::Events(a) => events::events(a).await,
        Command::Record(a) => record::record(a).await.map(|()| 0),
        Command::Report(a) => report::report(a).await,
    }
}

/// The token for `url`: `--token-file`, else `GPUBOARD_TOKEN`, else the data directory's
/// operator token when the endpoint is on this host.
pub(super) fn token_for(conn: &Conn, url: &str) -> anyhow::Result<Option<String>> {
    let dir = conn.data_dir.clone().unwrap_or_else(default_data_dir);
    Ok(auth::client_token(&auth::TokenSources {
        token_file: conn.token_file.as_deref(),
        env: std::env::var("GPUBOARD_TOKEN").ok(),
        data_dir: Some(&dir),
        local: endpoint_is_local(url),
        config_file: None,
    })?)
}

/// Where `token_for` found the token, in words for an error that refuses it.
pub(super) fn token_source(conn: &Conn, url: &str) -> String {
    if let Some(f) = &conn.token_file {
        return format!("--token-file {}", f.display());
    }
    if std::env::var("GPUBOARD_TOKEN").is_ok_and(|t| !t.is_empty()) {
        return "the GPUBOARD_TOKEN variable".to_string();
    }
    let dir = conn.data_dir.clone().unwrap_or_else(default_data_dir);
    if endpoint_is_local(url) {
        return format!("{}", dir.join("operator.token").display());
    }
    "nowhere".to_string()
}

/// Whether `url`'s host is this host.
fn endpoint_is_local(url: &str) -> bool {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(auth::is_local_host))
        .unwrap_or(false)
}

/// How to trust an https endpoint at `url`: the flags, else its config entry's, else, for
/// one on this host, the data directory's certificate.
pub(super) fn trust_for(conn: &Conn, url: &str, configured: TlsTrust) -> TlsTrust {
    let mut trust = TlsTrust {
        fingerprint: conn.tls_fingerprint.clone(),
        ca_file: conn.tls_ca.clone(),
    };
    if trust.is_empty() {
        trust = configured;
    }
    if trust.is_empty() && endpoint_is_local(url) {
        let dir = conn.data_dir.clone().unwrap_or_else(default_data_dir);
        trust.fingerprint = tls::local_fingerprint(&dir);
    }
    trust
}

/// A client for `conn`'s one endpoint, with its token, trust and timeout.
fn connect(conn: &Conn) -> anyhow::Result<Client> {
    Ok(members::members(conn)?.single()?.client.clone())
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

/// Pretty JSON on stdout, one value then a newline.
fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    // Buffered: stdout alone flushes at every newline, a write per line of pretty JSON
    // (about 40 for one claim; one per line of a whole snapshot for `ls --json`).
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut out, v)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// The default holder of a claim: who runs this process (`identity`), the same name the
/// console's claim form fills in.
#[allow(clippy::unnecessary_wraps)] // callers take an optional holder
fn user() -> Option<String> {
    Some(crate::identity::LocalUser::current().user)
}
