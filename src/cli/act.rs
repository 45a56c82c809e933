//! `gpuboard act [--config FILE] SOURCE ACTION TARGET [--yes]`: an engine action (Slurm,
//! BOINC, Ray) on a source of the console's config file, the same executor the console
//! uses; and `gpuboard act SOURCE --list`, what that source offers and why not the rest.
//!
//! It asks before acting (the target typed out for what frees GPUs) unless `--yes`, refuses
//! everything with `--readonly`, and writes the console's audit line to the console's log
//! (and stderr) for every attempt.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use serde::Deserialize;
use serde_json::json;

use super::{EXIT_AUTH, EXIT_INVALID, EXIT_UNREACHABLE, print_json, user};
use crate::sources::actions::{EngineAction, EngineVerb, RAY_READ_ONLY, audit_line, offers};
use crate::sources::boinc::{BoincConfig, BoincSource};
use crate::sources::error::SourceError;
use crate::sources::ray::{RayConfig, RaySource};
use crate::sources::slurm::{SlurmConfig, SlurmSource};
use crate::sources::{Action, Failure, Outcome, Source};

/// Exit code: the engine does not know the target (HTTP 404).
pub const EXIT_NOT_FOUND: u8 = 7;
/// Exit code: the engine refused the action in its own words (job gone, not pending).
pub const EXIT_ENGINE_REFUSED: u8 = 8;

/// `gpuboard act`.
#[derive(Args, Debug)]
#[allow(clippy::struct_excessive_bools)] // independent command-line switches
pub struct ActArgs {
    /// Config file naming the sources (default: ~/.config/gpuboard/config.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The source: an endpoint's name in the config, or its kind when only one has it.
    pub source: String,
    /// The action (`--list` shows them), e.g. cancel, gpu-mode, stop-job.
    #[arg(required_unless_present = "list")]
    pub action: Option<String>,
    /// What it acts on: a job id, node, project, task, GPU mode or Ray submission id.
    #[arg(required_unless_present = "list")]
    pub target: Option<String>,
    /// List what the source supports, and why not the rest.
    #[arg(long, conflicts_with_all = ["action", "target"])]
    pub list: bool,
    /// Act without asking.
    #[arg(long)]
    pub yes: bool,
    /// Refuse every action (as the console's --readonly).
    #[arg(long)]
    pub readonly: bool,
    /// Seconds to wait for the engine.
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
    /// Print JSON instead of a sentence.
    #[arg(long)]
    pub json: bool,
}

/// The endpoints of the console's config file; the rest of the file is the console's.
#[derive(Debug, Deserialize)]
struct Endpoints {
    #[serde(default)]
    endpoints: Vec<Endpoint>,
}

#[derive(Debug, Deserialize)]
struct Endpoint {
    name: String,
    url: String,
    #[serde(default)]
    token_file: Option<PathBuf>,
    #[serde(default = "gpuboard_kind")]
    kind: String,
}

fn gpuboard_kind() -> String {
    "gpuboard".to_string()
}

/// A refusal before anything reached the engine, with its exit code.
struct Stop(u8, String);

/// `gpuboard act ...`.
pub(super) async fn act(args: ActArgs) -> anyhow::Result<u8> {
    let endpoint = match find(&args) {
        Ok(e) => e,
        Err(Stop(code, why)) => {
            eprintln!("gpuboard: {why}");
            return Ok(code);
        }
    };
    if args.list {
        list(&endpoint, args.json)?;
        return Ok(0);
    }
    let (Some(verb_name), Some(target)) = (&args.action, &args.target) else {
        eprintln!("gpuboard: give ACTION and TARGET, or --list");
        return Ok(EXIT_INVALID);
    };
    let action = match EngineVerb::parse(&endpoint.kind, verb_name)
        .and_then(|v| EngineAction::new(v, target))
    {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gpuboard: {}: {e}", endpoint.name);
            return Ok(EXIT_INVALID);
        }
    };
    let actor = user().unwrap_or_else(|| "?".to_string());
    let audit = |result: Result<&str, &str>| {
        let line = audit_line(&actor, &endpoint.name, &action, result);
        eprintln!("audit: {line}");
        append_to_log(&line);
    };
    if args.readonly {
        audit(Err("read-only: gpuboard act was given --readonly"));
        eprintln!("gpuboard: read-only: nothing was sent to {}", endpoint.name);
        return Ok(EXIT_AUTH);
    }
    if let Some(why) = action.verb.unavailable() {
        audit(Err(why));
        eprintln!(
            "gpuboard: {}: {} is not offered: {why}",
            endpoint.name, action.verb
        );
        return Ok(EXIT_INVALID);
    }
    if !args.yes && !std::io::stdin().is_terminal() {
        eprintln!(
            "gpuboard: {}: {} {} needs confirming; add --yes to act without a terminal",
            endpoint.name, action.verb, action.target
        );
        return Ok(EXIT_INVALID);
    }
    if !args.yes && !confirmed(&endpoint.name, &action)? {
        eprintln!("gpuboard: not confirmed; nothing was sent");
        return Ok(EXIT_INVALID);
    }
    let source = match connect(&endpoint, Duration::from_secs(args.timeout.max(1))) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gpuboard: {}: {e}", endpoint.name);
            return Ok(EXIT_INVALID);
        }
    };
    let limit = Duration::from_secs(args.timeout.max(1));
    let result = tokio::time::timeout(limit, source.act(Action::Engine(action.clone())))
        .await
        .unwrap_or(Err(Failure::Timeout(
            u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
        )));
    match result {
        Ok(Outcome::Engine(done)) => {
            audit(Ok(&done.answer));
            if args.json {
                print_json(&json!({
                    "source": endpoint.name,
                    "action": action.verb.name(),
                    "target": action.target,
                    "answer": done.answer,
                }))?;
            } else {
                println!("{}", done.answer);
            }
            Ok(0)
        }
        Ok(other) => {
            audit(Ok(&other.message()));
            println!("{}", other.message());
            Ok(0)
        }
        Err(e) => {
            let words = e.to_string();
            audit(Err(&words));
            eprintln!("gpuboard: {}: {words}", endpoint.name);
            Ok(exit_code(&e))
        }
    }
}

/// The exit code of a failed engine action.
fn exit_code(e: &Failure) -> u8 {
    match e {
        Failure::Timeout(_) | Failure::Unreachable(_) => EXIT_UNREACHABLE,
        Failure::Unauthorized(_) | Failure::ReadOnly(_) => EXIT_AUTH,
        Failure::Invalid(_) => EXIT_INVALID,
        Failure::Refused(_) => EXIT_ENGINE_REFUSED,
        Failure::Peer(p) => match p {
            SourceError::Refused { .. }
            | SourceError::Unreachable { .. }
            | SourceError::Timeout { .. } => EXIT_UNREACHABLE,
            SourceError::Unauthorized { .. } | SourceError::LoginRefused { .. } => EXIT_AUTH,
            SourceError::BadUrl { .. } => EXIT_INVALID,
            SourceError::Peer { .. } => EXIT_ENGINE_REFUSED,
            SourceError::Http { status: 404, .. } => EXIT_NOT_FOUND,
            _ => 1,
        },
        Failure::Http { .. } | Failure::Decode(_) => 1,
    }
}

/// The config's endpoint named `args.source`, or the only one of that kind.
fn find(args: &ActArgs) -> Result<Endpoint, Stop> {
    let path = args
        .config
        .clone()
        .or_else(|| dirs::config_dir().map(|d| d.join("gpuboard/config.toml")))
        .ok_or_else(|| {
            Stop(
                EXIT_INVALID,
                "no config directory; give --config FILE".into(),
            )
        })?;
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Stop(
            EXIT_INVALID,
            format!("cannot read config {}: {e}", path.display()),
        )
    })?;
    let file: Endpoints = toml::from_str(&text)
        .map_err(|e| Stop(EXIT_INVALID, format!("config {}: {e}", path.display())))?;
    let mut all = file.endpoints;
    if let Some(i) = all.iter().position(|e| e.name == args.source) {
        return Ok(all.swap_remove(i));
    }
    let of_kind: Vec<usize> = (0..all.len())
        .filter(|i| all[*i].kind == args.source)
        .collect();
    if let [i] = of_kind[..] {
        return Ok(all.swap_remove(i));
    }
    let names: Vec<String> = all
        .iter()
        .map(|e| format!("{} ({})", e.name, e.kind))
        .collect();
    Err(Stop(
        EXIT_INVALID,
        if of_kind.len() > 1 {
            format!(
                "{} sources are of kind {}; name one: {}",
                of_kind.len(),
                args.source,
                names.join(", ")
            )
        } else {
            format!(
                "no source `{}` in {}; it has: {}",
                args.source,
                path.display(),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )
        },
    ))
}

/// Prints what the endpoint's kind offers.
fn list(endpoint: &Endpoint, as_json: bool) -> anyhow::Result<()> {
    let verbs = offers(&endpoint.kind);
    if as_json {
        let rows: Vec<_> = verbs
            .iter()
            .map(|v| {
                json!({
                    "action": v.name(),
                    "target": v.target_kind(),
                    "effect": v.effect(),
                    "offered": v.unavailable().is_none(),
                    "why_not": v.unavailable(),
                })
            })
            .collect();
        return print_json(
            &json!({"source": endpoint.name, "kind": endpoint.kind, "actions": rows}),
        );
    }
    if verbs.is_empty() {
        println!(
            "{} is a {} source: it takes no engine actions (engines with actions: slurm, boinc, ray)",
            endpoint.name, endpoint.kind
        );
        return Ok(());
    }
    for v in &verbs {
        match v.unavailable() {
            None => println!("{:<16} {:<18} {}", v.name(), v.target_kind(), v.effect()),
            Some(why) => println!(
                "{:<16} {:<18} not offered: {why}",
                v.name(),
                v.target_kind()
            ),
        }
    }
    if endpoint.kind == "ray" {
        println!("(other Ray holders stay read-only: {RAY_READ_ONLY})");
    }
    Ok(())
}

/// Asks on the terminal: the target typed out for what frees GPUs, else y.
fn confirmed(source: &str, action: &EngineAction) -> anyhow::Result<bool> {
    let mut err = std::io::stderr().lock();
    if action.verb.destructive() {
        write!(
            err,
            "{source}: {} {} ({}). Type `{}` to confirm: ",
            action.verb,
            action.describe_target(),
            action.verb.effect(),
            action.target
        )?;
    } else {
        write!(
            err,
            "{source}: {} {} ({})? [y/N] ",
            action.verb,
            action.describe_target(),
            action.verb.effect()
        )?;
    }
    err.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let answer = line.trim();
    Ok(if action.verb.destructive() {
        answer == action.target
    } else {
        answer.eq_ignore_ascii_case("y") || answer.eq_ignore_ascii_case("yes")
    })
}

/// The engine source for `endpoint`.
fn connect(endpoint: &Endpoint, timeout: Duration) -> anyhow::Result<Arc<dyn Source>> {
    let token = || -> anyhow::Result<Option<String>> {
        endpoint
            .token_file
            .as_deref()
            .map(|p| {
                std::fs::read_to_string(p)
                    .map(|t| t.trim().to_string())
                    .with_context(|| format!("cannot read token_file {}", p.display()))
            })
            .transpose()
    };
    Ok(match endpoint.kind.as_str() {
        "slurm" => {
            let mut c = SlurmConfig::new(&endpoint.url);
            c.name.clone_from(&endpoint.name);
            c.token = token()?;
            c.timeout = timeout;
            Arc::new(SlurmSource::new(c)?)
        }
        "boinc" => {
            let mut c = BoincConfig::new(&endpoint.url);
            c.name.clone_from(&endpoint.name);
            c.password_file.clone_from(&endpoint.token_file);
            c.timeout = timeout;
            Arc::new(BoincSource::new(c)?)
        }
        "ray" => {
            let mut c = RayConfig::new(&endpoint.url);
            c.name.clone_from(&endpoint.name);
            c.token = token()?;
            c.timeout = timeout;
            Arc::new(RaySource::new(c)?)
        }
        other => anyhow::bail!("a {other} source takes no engine actions"),
    })
}

/// Appends the audit line to the console's log (`gpuboard/console.log` under the state
/// directory, where the console writes its own), so both front ends leave one record.
fn append_to_log(line: &str) {
    let dir = dirs::state_dir()
        .or_else(dirs::data_dir)
        .unwrap_or_else(std::env::temp_dir)
        .join("gpuboard");
    if let Err(e) = append(&dir, line) {
        eprintln!("gpuboard: the audit line is not in {}: {e}", dir.display());
    }
}

fn append(dir: &Path, line: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("console.log"))?;
    let now = jiff::Timestamp::now();
    writeln!(f, "{now}  INFO gpuboard::cli::act: {line}")
}
