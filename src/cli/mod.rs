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
mod claims;
mod run;
mod serve;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::client::{Client, ClientError};
use crate::endpoint::auth;
use crate::endpoint::store::default_data_dir;
use crate::ids::ClaimId;
use crate::wire::default_endpoint;

pub use act::{ActArgs, EXIT_ENGINE_REFUSED};
pub use admin::ProjectCommand;
pub use claims::ClaimArgs;
pub use run::{RunArgs, mps_limit};
pub use serve::ServeArgs;

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
    /// Act on an engine (Slurm, BOINC, Ray) of the config: cancel a job, set BOINC's GPU
    /// mode, stop a Ray job... (gpuboard act SOURCE --list).
    Act(ActArgs),
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

/// Runs one subcommand; `Ok` carries the exit code of a run that finished.
async fn dispatch(cmd: Command) -> anyhow::Result<u8> {
    match cmd {
        Command::Serve(a) => serve::serve(a).await.map(|()| 0),
        Command::Claim(a) => claims::claim(a).await.map(|()| 0),
        Command::Release { ids, conn } => claims::release(ids, &conn).await,
        Command::Move {
            id,
            node,
            devices,
            conn,
        } => claims::move_claim(id, node, devices, &conn).await,
        Command::Ls { conn } => claims::ls(&conn).await,
        Command::Renew { id, ttl, conn } => claims::renew(id, ttl, &conn).await,
        Command::Cordon { node, index, conn } => admin::cordon(node, index, &conn).await,
        Command::Uncordon { node, index, conn } => admin::uncordon(node, index, &conn).await,
        Command::Project(cmd) => admin::project(cmd).await,
        Command::Run(a) => run::run_command(a).await,
        Command::Act(a) => act::act(a).await,
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

/// A client for `conn`'s endpoint, with its token and timeout.
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

/// Pretty JSON on stdout, one value then a newline.
fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, v)?;
    writeln!(out)?;
    Ok(())
}

/// The user's login name: the default holder of a claim. `USER` when set, else the name
/// the password database gives this process's user (cron jobs and containers often have
/// no `USER`).
fn user() -> Option<String> {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(login_name)
}

fn login_name() -> Option<String> {
    let mut pwd = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut buf = vec![0 as libc::c_char; 4096];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes the record into `pwd` and its strings into `buf`, which
    // outlive the call; `found` is null or points at `pwd`. getuid cannot fail.
    let rc = unsafe {
        libc::getpwuid_r(
            libc::getuid(),
            pwd.as_mut_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
            &raw mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return None;
    }
    // SAFETY: the call succeeded, so `pwd` is initialised and `pw_name` is a
    // NUL-terminated string inside `buf`, still alive here.
    let name = unsafe { std::ffi::CStr::from_ptr((*found).pw_name) };
    name.to_str()
        .ok()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_login_name_comes_from_the_password_database() {
        let out = std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap();
        let expected = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert_eq!(login_name(), Some(expected));
    }
}
