//! `gpuboard act [--config FILE] SOURCE ACTION TARGET [--yes]`: an engine action (Slurm,
//! BOINC, Ray) on a source of the console's config file, the same executor the console
//! uses; and `gpuboard act SOURCE --list`, what that source offers and why not the rest.
//!
//! `--then ACTION TARGET` adds steps on the same source and `--then-claim ENDPOINT` with
//! `gpuboard claim`'s flags ends them with a claim on a gpuboard endpoint: a hand-over, run
//! in order and stopped at the first failure.
//!
//! It asks before acting (the target typed out for what frees GPUs) unless `--yes`, refuses
//! everything with `--readonly`, and writes the console's audit line to the console's log
//! (and stderr) for every attempt.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde_json::json;

mod then_claim;

pub use then_claim::ThenClaimArgs;

use super::{EXIT_AUTH, EXIT_INVALID, EXIT_UNREACHABLE, print_json, user};
use crate::client::TlsTrust;
use crate::request::ClaimRequest;
use crate::sources::actions::{EngineAction, EngineVerb, RAY_READ_ONLY, audit_line, offers};
use crate::sources::error::SourceError;
use crate::sources::handover::{HandoverStep, StepResult, hand_over};
use crate::sources::kind::EndpointsFile;
use crate::sources::{self, Action, EndpointConfig, Failure, Outcome, Source, SourceKind};

pub use crate::exit::EXIT_CONFLICT as EXIT_ENGINE_REFUSED;

/// `gpuboard act`.
#[derive(Args, Debug)]
#[allow(clippy::struct_excessive_bools)] // independent command-line switches
pub struct ActArgs {
    /// Config file naming the sources (default: ~/.config/gpuboard/config.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The source: an endpoint's name in the config, or its kind when only one has it.
    pub source: String,
    /// The action (--list shows them), e.g. cancel, gpu-mode, stop-job.
    #[arg(required_unless_present = "list")]
    pub action: Option<String>,
    /// What it acts on: a job id, node, project, task, GPU mode or Ray submission id.
    #[arg(required_unless_present = "list")]
    pub target: Option<String>,
    /// List what the source supports, and why not the rest.
    #[arg(long, conflicts_with_all = ["action", "target"])]
    pub list: bool,
    /// Then another action on the same source (repeatable): a hand-over in one step, such
    /// as hold 12 --then cancel 11; it stops at the first failure.
    #[arg(long, num_args = 2, value_names = ["ACTION", "TARGET"], conflicts_with = "list")]
    pub then: Vec<String>,
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
    /// A hand-over's last step: a claim on a gpuboard endpoint.
    #[command(flatten)]
    pub claim: ThenClaimArgs,
}

/// A refusal before anything reached the engine, with its exit code.
struct Stop(u8, String);

/// `gpuboard act ...`.
// Left whole for now: others are reworking `act` and the fleet protocol; it is to be
// split into resolving the source, the steps and their answers.
#[allow(clippy::too_many_lines)]
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
    // Every step is checked before anything is sent: nothing half-applied on bad input.
    let mut asked = vec![(verb_name.clone(), target.clone())];
    asked.extend(
        args.then
            .chunks(2)
            .map(|p| (p[0].clone(), p.get(1).cloned().unwrap_or_default())),
    );
    let mut actions = Vec::with_capacity(asked.len());
    for (verb, target) in &asked {
        match EngineVerb::parse(endpoint.kind, verb).and_then(|v| EngineAction::new(v, target)) {
            Ok(a) => actions.push(a),
            Err(e) => {
                eprintln!("gpuboard: {}: {e}; nothing was sent", endpoint.name);
                return Ok(EXIT_INVALID);
            }
        }
    }
    let actor = crate::identity::LocalUser::current().actor();
    // The claim that ends a hand-over, checked before anything is sent too.
    let claim = match &args.claim.then_claim {
        None => None,
        Some(name) => match claim_endpoint(&args, name) {
            Ok(found) => Some(found),
            Err(Stop(code, why)) => {
                eprintln!("gpuboard: {why}; nothing was sent");
                return Ok(code);
            }
        },
    };
    let mut planned: Vec<(String, Action)> = actions
        .iter()
        .map(|a| (endpoint.name.clone(), Action::Engine(a.clone())))
        .collect();
    if let Some((ep, request)) = &claim {
        planned.push((
            ep.name.clone(),
            Action::Claim {
                request: request.clone(),
            },
        ));
    }
    let audit = |source: &str, action: &Action, result: Result<&str, &str>| {
        let line = match action {
            Action::Engine(a) => audit_line(&actor, source, a, result),
            other => {
                let (status, words) = match result {
                    Ok(w) => ("done", w),
                    Err(w) => ("refused", w),
                };
                format!(
                    "actor={actor} source={source} action={} target={} {status}: {words}",
                    other.verb(),
                    other.target()
                )
            }
        };
        eprintln!("audit: {line}");
        append_to_log(&line);
    };
    if args.readonly {
        for (s, a) in &planned {
            audit(s, a, Err("read-only: gpuboard act was given --readonly"));
        }
        eprintln!("gpuboard: read-only: nothing was sent to {}", endpoint.name);
        return Ok(EXIT_AUTH);
    }
    if let Some((a, why)) = actions
        .iter()
        .find_map(|a| a.verb.unavailable().map(|w| (a, w)))
    {
        audit(&endpoint.name, &Action::Engine(a.clone()), Err(why));
        eprintln!(
            "gpuboard: {}: {} is not offered: {why}; nothing was sent",
            endpoint.name, a.verb
        );
        return Ok(EXIT_INVALID);
    }
    if !args.yes && !std::io::stdin().is_terminal() {
        eprintln!(
            "gpuboard: {}: {} {} needs confirming; add --yes to act without a terminal",
            endpoint.name, actions[0].verb, actions[0].target
        );
        return Ok(EXIT_INVALID);
    }
    if !args.yes && !confirmed(&planned)? {
        eprintln!("gpuboard: not confirmed; nothing was sent");
        return Ok(EXIT_INVALID);
    }
    let limit = Duration::from_secs(args.timeout.max(1));
    let source = match connect(&endpoint, limit) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gpuboard: {}: {e}", endpoint.name);
            return Ok(EXIT_INVALID);
        }
    };
    let mut steps: Vec<HandoverStep> = actions
        .iter()
        .map(|a| HandoverStep {
            source: Arc::clone(&source),
            action: Action::Engine(a.clone()),
        })
        .collect();
    if let Some((ep, request)) = claim {
        let token = match ep.file_token() {
            Ok(t) => t,
            Err(e) => {
                eprintln!("gpuboard: {}: {e:#}; nothing was sent", ep.name);
                return Ok(EXIT_INVALID);
            }
        };
        match sources::connect(&ep, token, &ep.trust(), limit, None) {
            Ok(http) => steps.push(HandoverStep {
                source: http,
                action: Action::Claim { request },
            }),
            Err(e) => {
                eprintln!("gpuboard: {}: {e:#}; nothing was sent", ep.name);
                return Ok(EXIT_INVALID);
            }
        }
    }
    let results = hand_over(&steps, limit).await;
    let mut code = 0;
    let mut rows = Vec::new();
    for ((source, action), r) in planned.iter().zip(&results) {
        let answer = match r {
            StepResult::Done(Outcome::Engine(done)) => done.answer.clone(),
            StepResult::Done(other) => other.message(),
            StepResult::Failed(e) => {
                code = exit_code(e);
                e.to_string()
            }
            StepResult::NotRun => "not run: an earlier step failed".to_string(),
        };
        match r {
            StepResult::Done(_) => {
                audit(source, action, Ok(&answer));
                if !args.json {
                    println!("{answer}");
                }
            }
            StepResult::Failed(_) => {
                audit(source, action, Err(&answer));
                eprintln!("gpuboard: {source}: {answer}");
            }
            StepResult::NotRun => {
                eprintln!(
                    "gpuboard: {source}: {} {}: {answer}",
                    action.verb(),
                    action.target()
                );
            }
        }
        let target = match action {
            Action::Engine(a) => a.target.clone(),
            other => other.target(),
        };
        let mut row = json!({
            "source": source,
            "action": action.verb(),
            "target": target,
            "done": matches!(r, StepResult::Done(_)),
            "answer": answer,
        });
        if let StepResult::Done(Outcome::Claimed(view)) = r {
            row["claim"] = json!(view.id.to_string());
        }
        rows.push(row);
    }
    if args.json {
        print_json(&if rows.len() == 1 {
            rows.swap_remove(0)
        } else {
            json!(rows)
        })?;
    }
    Ok(code)
}

/// The exit code of a failed engine action.
fn exit_code(e: &Failure) -> u8 {
    match e {
        Failure::Timeout(_) | Failure::Unreachable { .. } => EXIT_UNREACHABLE,
        Failure::Unauthorized(_) | Failure::ReadOnly(_) => EXIT_AUTH,
        Failure::Invalid(_) => EXIT_INVALID,
        Failure::Refused(_) | Failure::InFlight(_) => EXIT_ENGINE_REFUSED,
        Failure::Peer(p) => match p {
            SourceError::Refused { .. }
            | SourceError::Unreachable { .. }
            | SourceError::Timeout { .. } => EXIT_UNREACHABLE,
            SourceError::Unauthorized { .. } | SourceError::LoginRefused { .. } => EXIT_AUTH,
            SourceError::BadUrl { .. } | SourceError::SecretFile { .. } => EXIT_INVALID,
            SourceError::Peer { .. } => EXIT_ENGINE_REFUSED,
            SourceError::Http { status: 404, .. } => crate::exit::EXIT_NOT_FOUND,
            _ => 1,
        },
        Failure::Http { .. } | Failure::Decode(_) => 1,
    }
}

/// The config file's path and its endpoints.
fn read_config(args: &ActArgs) -> Result<(PathBuf, Vec<EndpointConfig>), Stop> {
    match EndpointsFile::load(args.config.as_deref()) {
        Ok(Some((path, file))) => Ok((path, file.endpoints)),
        Ok(None) => Err(Stop(
            EXIT_INVALID,
            "no config file names a source; give --config FILE".into(),
        )),
        Err(e) => Err(Stop(EXIT_INVALID, e.to_string())),
    }
}

/// The config's endpoint named `args.source`, or the only one of that kind.
fn find(args: &ActArgs) -> Result<EndpointConfig, Stop> {
    let (path, mut all) = read_config(args)?;
    if let Some(i) = all.iter().position(|e| e.name == args.source) {
        return Ok(all.swap_remove(i));
    }
    let of_kind: Vec<usize> = (0..all.len())
        .filter(|i| SourceKind::parse(&args.source).is_ok_and(|k| k == all[*i].kind))
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
fn list(endpoint: &EndpointConfig, as_json: bool) -> anyhow::Result<()> {
    let verbs = offers(endpoint.kind);
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
            "{} is a {} source: it takes no engine actions (engines with actions: slurm, boinc, ray, kubernetes)",
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
    if endpoint.kind == SourceKind::Ray {
        println!("(other Ray holders stay read-only: {RAY_READ_ONLY})");
    }
    Ok(())
}

/// Asks on the terminal: the targets typed out when a step frees GPUs, else y.
fn confirmed(steps: &[(String, Action)]) -> anyhow::Result<bool> {
    let mut err = std::io::stderr().lock();
    for (source, action) in steps {
        let effect = match action {
            Action::Engine(a) => a.verb.effect(),
            _ => "a claim on the endpoint",
        };
        writeln!(
            err,
            "{source}: {} {}: {effect}",
            action.verb(),
            action.target()
        )?;
    }
    let typed: Vec<&str> = steps
        .iter()
        .filter_map(|(_, a)| match a {
            Action::Engine(a) if a.verb.destructive() => Some(a.target.as_str()),
            _ => None,
        })
        .collect();
    if typed.is_empty() {
        write!(err, "Go ahead? [y/N] ")?;
    } else {
        write!(err, "Type `{}` to confirm: ", typed.join(" "))?;
    }
    err.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let answer = line.trim();
    Ok(if typed.is_empty() {
        answer.eq_ignore_ascii_case("y") || answer.eq_ignore_ascii_case("yes")
    } else {
        answer == typed.join(" ")
    })
}

/// The gpuboard endpoint `name` of the config and the claim to make there.
fn claim_endpoint(args: &ActArgs, name: &str) -> Result<(EndpointConfig, ClaimRequest), Stop> {
    let (path, all) = read_config(args)?;
    let Some(ep) = all.into_iter().find(|e| e.name == name) else {
        return Err(Stop(
            EXIT_INVALID,
            format!("--then-claim: no endpoint `{name}` in {}", path.display()),
        ));
    };
    if ep.kind != SourceKind::Gpuboard {
        return Err(Stop(
            EXIT_INVALID,
            format!(
                "--then-claim: {name} is a {} source: claims go to a gpuboard endpoint",
                ep.kind
            ),
        ));
    }
    let request = args
        .claim
        .request(user())
        .map_err(|e| Stop(EXIT_INVALID, format!("--then-claim {name}: {e}")))?;
    Ok((ep, request))
}

/// The engine source for `endpoint` (`sources::connect`), with its `token_file`'s token.
fn connect(endpoint: &EndpointConfig, timeout: Duration) -> anyhow::Result<Arc<dyn Source>> {
    if offers(endpoint.kind).is_empty() {
        anyhow::bail!("a {} source takes no engine actions", endpoint.kind);
    }
    let token = endpoint.file_token()?;
    sources::connect(endpoint, token, &TlsTrust::default(), timeout, None)
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
