//! `gpuboard doctor`'s endpoint checks: for every endpoint configured (or given with
//! `--endpoint`), whether it answers, which version it runs, whether the token is
//! accepted, whether its TLS certificate matches the pin, and how far its clock is from
//! this host's; each problem with what to do about it. The machine's own report comes
//! from `crate::doctor`.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::Conn;
use super::members::members;
use crate::client::{Client, ClientError};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::doctor::{DoctorArgs, EndpointChecks};
use crate::ids::ClaimId;

/// Clocks further apart than this are reported: leases, `events --since` and the
/// console's ages would be off by as much.
const SKEW_LIMIT_MS: u64 = 5_000;

/// What one endpoint's checks found.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct EndpointCheck {
    /// Its name.
    pub name: String,
    /// Its URL.
    pub url: String,
    /// It answered `/healthz`.
    pub reachable: bool,
    /// The gpuboard version it runs, when it answered.
    pub version: Option<String>,
    /// `operator`, `read-only`, `refused` or `unknown` (not reached).
    pub token: String,
    /// Its clock minus this host's, in whole seconds, when its answer carried a date.
    pub clock_skew_seconds: Option<i64>,
    /// Its telemetry is made up (`serve --simulate-telemetry`), as its note says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simulated_telemetry: Option<String>,
    /// Each problem, with what to do about it; empty when all is well.
    pub problems: Vec<String>,
    /// The exit code its worst fault maps to (README, "Exit codes"): 5 when it could not be
    /// reached or is not gpuboard, 6 when its token was refused, 0 for advice only.
    #[serde(skip)]
    pub exit: u8,
}

/// Checks every endpoint `conn` names, concurrently, in order.
async fn check_all(conn: &Conn) -> anyhow::Result<Vec<EndpointCheck>> {
    let members = members(conn)?;
    let checks = members
        .list
        .iter()
        .map(|m| check_one(&m.name, &m.client, SystemClock.now()));
    Ok(futures::future::join_all(checks).await)
}

/// One endpoint's checks; `now` is this host's clock when they began.
async fn check_one(name: &str, client: &Client, now: Timestamp) -> EndpointCheck {
    let mut check = EndpointCheck {
        name: name.to_string(),
        url: client.endpoint().trim_end_matches('/').to_string(),
        reachable: false,
        version: None,
        token: "unknown".to_string(),
        clock_skew_seconds: None,
        simulated_telemetry: None,
        problems: Vec::new(),
        exit: 0,
    };
    match client.server_date().await {
        Ok(health) => {
            check.reachable = true;
            for line in &health.says {
                check.problems.push(match line.strip_prefix("history:") {
                    Some(why) => format!(
                        "its history recording has stopped ({}): rewinds and reports miss \
                         what happens from then on; fix: see the endpoint's log \
                         (`journalctl -u gpuboard`), free its disk, and restart it",
                        why.trim()
                    ),
                    None => format!("it says {line}"),
                });
            }
            let date = health.date;
            if let Some(date) = date {
                let skew = date.0 as i64 - now.0 as i64;
                check.clock_skew_seconds = Some(skew / 1000);
                // The Date header has whole seconds: allow one more.
                if skew.unsigned_abs() > SKEW_LIMIT_MS + 1_000 {
                    check.problems.push(format!(
                        "its clock is {} s {} this host's: leases expire early or late and \
                         event times disagree; fix: run a time service (chrony, \
                         systemd-timesyncd) on both hosts",
                        skew.unsigned_abs() / 1000,
                        if skew > 0 { "ahead of" } else { "behind" }
                    ));
                }
            }
        }
        Err(e) => {
            check.problems.push(unreachable_fix(&e));
            check.exit = e.exit_code();
            return check;
        }
    }
    match client.snapshot().await {
        Ok(snap) => {
            let theirs = snap.endpoint.version.clone();
            let ours = env!("CARGO_PKG_VERSION");
            if theirs != ours {
                check.problems.push(format!(
                    "it runs gpuboard {theirs}, this client is {ours}; fix: install the same \
                     release on both (`gpuboard --version`)"
                ));
            }
            check.version = Some(theirs);
            if snap
                .devices()
                .any(|(_, d)| d.telemetry.as_ref().is_some_and(|t| t.simulated))
            {
                check
                    .simulated_telemetry
                    .clone_from(&snap.endpoint.telemetry_note);
            }
        }
        Err(e) => {
            check.problems.push(token_fix(&e));
            check.exit = e.exit_code();
        }
    }
    // A renewal of a claim that cannot exist: refused for a bad token (401) or a
    // read-only one (403) before the claim is looked up (404), and changes nothing.
    match client.renew(ClaimId(u64::MAX), Some(1)).await {
        Err(ClientError::Unauthorized { detail }) => {
            check.token = "refused".to_string();
            check.exit = crate::cli::EXIT_AUTH;
            let fix = token_fix(&ClientError::Unauthorized { detail });
            if !check.problems.contains(&fix) {
                check.problems.push(fix);
            }
        }
        Err(ClientError::Forbidden { .. }) => {
            check.token = "read-only".to_string();
            check.problems.push(
                "the token may only read: claims, releases and cordons will be refused; fix: \
                 use an operator token (operator.token, or `gpuboard token add NAME \
                 --role operator` on the endpoint's host)"
                    .to_string(),
            );
        }
        Ok(_)
        | Err(
            ClientError::NotFound { .. }
            | ClientError::Conflict { .. }
            | ClientError::Invalid { .. },
        ) => check.token = "operator".to_string(),
        Err(e) => check.problems.push(format!("the token check failed: {e}")),
    }
    check
}

/// What to do when the endpoint did not answer.
fn unreachable_fix(e: &ClientError) -> String {
    let text = e.to_string();
    if text.contains("TLS certificate mismatch") {
        format!(
            "{text}; fix: if the endpoint's certificate was renewed on purpose, pin the new \
             fingerprint (`gpuboard doctor` on that host prints it); else do not connect"
        )
    } else if matches!(e, ClientError::Timeout { .. }) {
        format!(
            "{text}; fix: check that `gpuboard serve` runs there and is not overloaded \
             (`systemctl status gpuboard`, `journalctl -u gpuboard`)"
        )
    } else {
        format!(
            "{text}; fix: start it (`systemctl start gpuboard` on that host), or check the \
             URL, the port and any firewall between"
        )
    }
}

/// What to do when a read was refused.
fn token_fix(e: &ClientError) -> String {
    match e {
        ClientError::Unauthorized { detail } => format!(
            "the token was refused ({detail}); fix: give a valid token (--token-file, \
             GPUBOARD_TOKEN, or the config's token_file), e.g. `gpuboard token add NAME` on \
             the endpoint's host"
        ),
        other => format!("reading its snapshot failed: {other}"),
    }
}

/// The checks as text, one block per endpoint.
pub fn text(checks: &[EndpointCheck]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "endpoints ({}):", checks.len());
    for c in checks {
        let verdict = if c.problems.is_empty() {
            "ok"
        } else {
            "PROBLEM"
        };
        let mut facts = vec![if c.reachable {
            "reachable".to_string()
        } else {
            "unreachable".to_string()
        }];
        if let Some(v) = &c.version {
            facts.push(format!("gpuboard {v}"));
        }
        if c.reachable {
            facts.push(format!("token {}", c.token));
        }
        if let Some(s) = c.clock_skew_seconds {
            facts.push(format!("clock {s:+} s"));
        }
        let _ = writeln!(
            out,
            "  {} {} {verdict}: {}",
            c.name,
            c.url,
            facts.join(", ")
        );
        if let Some(note) = &c.simulated_telemetry {
            let _ = writeln!(out, "    telemetry: {note}");
        }
        for p in &c.problems {
            let _ = writeln!(out, "    - {p}");
        }
    }
    out
}

/// `gpuboard doctor`: the machine's report, then the endpoints' checks when any endpoint
/// is configured or given.
pub fn run(args: DoctorArgs) -> anyhow::Result<i32> {
    // `--config` may name a flink-conf.yaml too: only a TOML file lists endpoints.
    let config = args
        .config
        .clone()
        .filter(|c| c.extension().is_some_and(|e| e == "toml"));
    let configured = !args.endpoints.is_empty()
        || crate::sources::kind::EndpointsFile::load(config.as_deref()).map_or(true, |f| {
            f.is_some_and(|(_, f)| {
                f.endpoints
                    .iter()
                    .any(|e| e.kind == crate::sources::SourceKind::Gpuboard)
            })
        });
    if !configured {
        let none = EndpointChecks {
            json: serde_json::Value::Array(Vec::new()),
            text: "endpoints: none configured (give --endpoint URL, or [[endpoints]] in the \
                   config file)\n"
                .to_string(),
            exit: 0,
        };
        return crate::doctor::run_with(args, Some(none));
    }
    let conn = Conn {
        endpoint: args.endpoints.clone(),
        config,
        tls_fingerprint: args.tls_fingerprint.clone(),
        tls_ca: args.tls_ca.clone(),
        token_file: args.token_file.clone(),
        data_dir: args.data_dir.clone(),
        timeout: args.timeout.max(1),
        json: args.json,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (checks, fault) = match rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(conn.timeout * 4 + 5), check_all(&conn)).await
    }) {
        Ok(Ok(checks)) => {
            // The first endpoint whose fault has an exit code is named on stderr too.
            let fault = checks.iter().find(|c| c.exit != 0).map(|c| {
                let first = c.problems.first().cloned().unwrap_or_default();
                (c.exit, format!("endpoint {} ({}): {first}", c.name, c.url))
            });
            let found = EndpointChecks {
                json: serde_json::to_value(&checks)?,
                text: text(&checks),
                exit: fault.as_ref().map_or(0, |(code, _)| *code),
            };
            (found, fault.map(|(_, words)| words))
        }
        Ok(Err(e)) => (
            EndpointChecks {
                json: serde_json::json!({ "error": format!("{e:#}") }),
                text: format!("endpoints: cannot check them: {e:#}\n"),
                exit: super::exit_code(&e),
            },
            Some(format!("cannot check the endpoints: {e:#}")),
        ),
        Err(_) => (
            EndpointChecks {
                json: serde_json::json!({ "error": "the checks did not finish in time" }),
                text: "endpoints: the checks did not finish in time\n".to_string(),
                exit: super::EXIT_UNREACHABLE,
            },
            Some("the endpoint checks did not finish in time".to_string()),
        ),
    };
    let code = crate::doctor::run_with(args, Some(checks))?;
    if let Some(words) = fault.filter(|_| code != 0) {
        eprintln!("gpuboard: doctor: {words}");
    }
    Ok(code)
}
