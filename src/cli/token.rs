//! `gpuboard token add NAME --role operator|read [--expires DUR]`, `token ls`, `token
//! revoke NAME`: the named tokens of this host's endpoint, changed in its data directory
//! (the running endpoint reads the file again at its next request). The token is printed
//! once, by `add`; only its hash is kept.

use std::os::fd::AsRawFd as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, Subcommand};

use crate::clock::{Clock as _, SystemClock, Timestamp};
use crate::endpoint::auth;
use crate::endpoint::tokens::Role;
use crate::endpoint::tokens::{ADMIN_NAME, READ_NAME, TokenBook, TokenUsage, parse_expiry};
use crate::store::claims::default_data_dir;

/// `gpuboard token ...`.
#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Make a token for a person or a job; prints it once.
    Add {
        /// Its name, recorded as the actor of every change made with it.
        name: String,
        /// operator (reads and changes) or read (reads only).
        #[arg(long, value_parser = ["operator", "read"])]
        role: String,
        /// Lifetime, e.g. 90d, 12h, 2w (default: until revoked).
        #[arg(long, value_name = "DUR")]
        expires: Option<String>,
        #[command(flatten)]
        dir: DataDir,
    },
    /// List the tokens (names, roles, expiry; never the tokens).
    Ls {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        dir: DataDir,
    },
    /// Revoke a token: its next request gets 401.
    Revoke {
        /// The token's name.
        name: String,
        #[command(flatten)]
        dir: DataDir,
    },
}

/// The endpoint's data directory.
#[derive(Args, Debug, Clone)]
pub struct DataDir {
    /// The endpoint's data directory.
    #[arg(long, env = "GPUBOARD_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl DataDir {
    fn path(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(default_data_dir)
    }
}

/// Runs a token subcommand.
pub(super) fn run(cmd: TokenCommand) -> anyhow::Result<()> {
    let now = SystemClock.now();
    match cmd {
        TokenCommand::Add {
            name,
            role,
            expires,
            dir,
        } => {
            let dir = dir.path();
            let role = if role == "read" {
                Role::Reader
            } else {
                Role::Operator
            };
            let expires = expires
                .as_deref()
                .map(parse_expiry)
                .transpose()?
                .map(|secs| now.plus_secs(secs));
            // The endpoint's own tokens first: the directory is then made, private.
            auth::Tokens::load_or_create(&dir)?;
            let _lock = lock(&dir)?;
            let mut book = TokenBook::load(&dir)?;
            let secret = book.add(&name, role, expires, now)?;
            book.save(&dir)?;
            println!("{secret}");
            eprintln!(
                "gpuboard: token `{name}` ({role}) added in {}; it is shown only now: give it to \
                 its holder (e.g. a file of mode 600 passed with --token-file)",
                dir.display()
            );
            Ok(())
        }
        TokenCommand::Ls { json, dir } => list(&dir.path(), json, now),
        TokenCommand::Revoke { name, dir } => {
            let dir = dir.path();
            if name == ADMIN_NAME || name == READ_NAME {
                anyhow::bail!(
                    "`{name}` is the data directory's own token; to replace it, stop the \
                     endpoint, delete {} and start it again",
                    if name == ADMIN_NAME {
                        auth::OPERATOR_TOKEN_FILE
                    } else {
                        auth::READ_TOKEN_FILE
                    }
                );
            }
            let _lock = lock(&dir)?;
            let mut book = TokenBook::load(&dir)?;
            book.revoke(&name)?;
            book.save(&dir)?;
            println!("token `{name}` revoked");
            Ok(())
        }
    }
}

/// `token ls`: the data directory's own two tokens, then the named ones, with when each
/// was last used (as JSON with `--json`).
fn list(dir: &Path, json: bool, now: Timestamp) -> anyhow::Result<()> {
    let book = TokenBook::load(dir)?;
    // Written by the endpoint every minute and when it stops.
    let usage = TokenUsage::load(dir);
    if json {
        let rows: Vec<serde_json::Value> = book
            .tokens
            .iter()
            .map(|t| {
                let mut v = serde_json::to_value(t).unwrap_or_default();
                if let Some(m) = v.as_object_mut() {
                    m.insert(
                        "last_used".into(),
                        serde_json::json!(usage.last_used.get(&t.name)),
                    );
                }
                v
            })
            .collect();
        return super::print_json(&rows);
    }
    let zone = jiff::tz::TimeZone::system();
    let last = |name: &str| {
        usage.last_used.get(name).map_or_else(
            || "never".to_string(),
            |at| crate::clock::date_time(*at, &zone),
        )
    };
    println!(
        "{:<24} {:<9} {:<20} {:<20} LAST USED",
        "NAME", "ROLE", "CREATED", "EXPIRES"
    );
    println!(
        "{ADMIN_NAME:<24} {:<9} {:<20} {:<20} {}",
        "operator",
        "-",
        "never",
        last(ADMIN_NAME)
    );
    println!(
        "{READ_NAME:<24} {:<9} {:<20} {:<20} {}",
        "read",
        "-",
        "never",
        last(READ_NAME)
    );
    for t in &book.tokens {
        let expires = match t.expires {
            None => "never".to_string(),
            Some(e) if !t.live(now) => {
                format!("{} (expired)", crate::clock::date_time(e, &zone))
            }
            Some(e) => crate::clock::date_time(e, &zone),
        };
        println!(
            "{:<24} {:<9} {:<20} {expires:<20} {}",
            t.name,
            t.role.to_string(),
            crate::clock::date_time(t.created, &zone),
            last(&t.name)
        );
    }
    Ok(())
}

/// An exclusive lock on the token list, so two `token` commands never lose each other's
/// change; released when the file is dropped.
fn lock(dir: &Path) -> anyhow::Result<std::fs::File> {
    let path = dir.join(".tokens.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    // SAFETY: flock on a descriptor this function owns; it blocks until the lock is free.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    if rc != 0 {
        anyhow::bail!(
            "cannot lock {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(f)
}
