//! `gpuboard report`: where a window's GPU time went per project, what was done (each
//! audited action with its target's state just before and just after) and what went wrong,
//! from every endpoint in play, as Markdown for a ticket or as JSON ([`SCHEMA`], documented
//! in docs/reference/report.md). Each endpoint computes its part from its own history
//! (`GET /v1/history/report`); this merges them, and names any endpoint that did not answer.

pub mod render;

use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};

use super::members::members;
use super::{Conn, Usage};
use crate::accounting::flags::{FlagTotals, add_up};
use crate::accounting::trouble::{DeviceTrouble, LongPending, OverLimit};
use crate::accounting::usage::{ClaimGpuTime, sort_projects};
use crate::accounting::{
    Ask, AuditedAction, BackoffSpan, ByShare, GpuSeconds, IdleRule, PENDING_MS, ProjectGpuTime,
    WindowReport,
};
use crate::client::{ClientError, ReportAt};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::physical::FlagEpisode;
use crate::when::parse_when;

/// The JSON's schema name and version.
pub const SCHEMA: &str = "gpuboard.report/1";

/// How the report is printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// For a ticket, readable at 100 columns.
    #[default]
    Markdown,
    /// `gpuboard.report/1` (docs/reference/report.md).
    Json,
}

/// `gpuboard report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The window: the last SPAN (`2h`, `30m`, `1d`, `1h30m`), or since a TIME as `--from`
    /// takes it. Default: the last 24 hours.
    #[arg(long, value_name = "SPAN|TIME", allow_hyphen_values = true,
          conflicts_with_all = ["from", "to"])]
    pub since: Option<String>,
    /// The window's start: `03:12`, `-10m`, `2026-11-25 03:12` (local), RFC 3339, or ms
    /// since the epoch.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub from: Option<String>,
    /// The window's end (default: now), as `--from`.
    #[arg(
        long,
        value_name = "TIME",
        requires = "from",
        allow_hyphen_values = true
    )]
    pub to: Option<String>,
    /// Markdown or JSON.
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// A claim is idle below this GPU utilization, percent.
    #[arg(long, value_name = "PCT", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub idle_below: u32,
    /// ...for at least this many minutes (then the whole idle run counts).
    #[arg(long, value_name = "MIN", default_value_t = 15)]
    pub idle_for: u64,
    /// Claims pending at least this many minutes are listed.
    #[arg(long, value_name = "MIN", default_value_t = PENDING_MS / 60_000)]
    pub pending_over: u64,
    #[command(flatten)]
    pub conn: Conn,
}

/// An item of one endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tagged<T> {
    /// The endpoint's name.
    pub endpoint: String,
    /// The item.
    #[serde(flatten)]
    pub item: T,
}

/// Whether an endpoint's part is in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answered {
    /// It is.
    Ok,
    /// The window is before its history begins (or it has none).
    NoHistory,
    /// It did not answer, or answered an error.
    Unreachable,
}

/// One endpoint asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointPart {
    /// Its name.
    pub name: String,
    /// Its URL.
    pub url: String,
    /// Whether its part is in.
    pub status: Answered,
    /// Where its history begins, when it said.
    pub history_from: Option<Timestamp>,
    /// The window it accounted, when cut to where its history begins.
    pub accounted_from: Option<Timestamp>,
    /// Why not, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// GPU time across the endpoints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetUsage {
    /// Devices times the window.
    pub physical: GpuSeconds,
    /// What no claim reserved.
    pub unallocated: ByShare,
    /// Per project across endpoints, biggest idle-allocated first.
    pub projects: Vec<ProjectGpuTime>,
    /// Per claim, biggest idle-allocated first.
    pub claims: Vec<Tagged<ClaimGpuTime>>,
}

/// What went wrong across the endpoints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetTrouble {
    /// GPUs stale, unhealthy or cordoned.
    pub gpus: Vec<Tagged<DeviceTrouble>>,
    /// Claims over their memory.
    pub over_limit: Vec<Tagged<OverLimit>>,
    /// Claims that waited long.
    pub long_pending: Vec<Tagged<LongPending>>,
    /// Projects backed off.
    pub backoffs: Vec<Tagged<BackoffSpan>>,
}

/// The flags the endpoints recorded on their GPUs, and what they add up to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetFlags {
    /// GPU-hours per flag, and idle GPU-hours per owner (Slurm account, Kubernetes
    /// namespace, Ray job, gpuboard project).
    #[serde(flatten)]
    pub totals: FlagTotals,
    /// Every episode overlapping the window, by start.
    pub episodes: Vec<Tagged<FlagEpisode>>,
}

/// The whole report, as `--format json` prints it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FleetReport {
    /// [`SCHEMA`].
    pub schema: String,
    /// The window's start.
    pub from: Timestamp,
    /// The window's end.
    pub to: Timestamp,
    /// When a claim counted as idle.
    pub idle: IdleRule,
    /// Claims pending this long or longer are listed, ms.
    pub pending_over_ms: u64,
    /// Every endpoint asked, in order.
    pub endpoints: Vec<EndpointPart>,
    /// GPU time.
    pub usage: FleetUsage,
    /// Audited actions, oldest first.
    pub timeline: Vec<Tagged<AuditedAction>>,
    /// What went wrong.
    pub trouble: FleetTrouble,
    /// Flags: double-booked, unexplained, idle.
    #[serde(default)]
    pub flags: FleetFlags,
}

fn tag<T: Clone>(endpoint: &str, items: &[T]) -> impl Iterator<Item = Tagged<T>> {
    items.iter().map(move |i| Tagged {
        endpoint: endpoint.to_string(),
        item: i.clone(),
    })
}

/// What one endpoint answered: its name, URL, and its part or why not.
pub type Answer = (String, String, Result<ReportAt, String>);

impl FleetReport {
    /// Merges the endpoints' answers for `ask`.
    pub fn merge(ask: &Ask, answers: Vec<Answer>) -> FleetReport {
        let mut r = FleetReport {
            schema: SCHEMA.to_string(),
            from: ask.from,
            to: ask.to,
            idle: ask.idle,
            pending_over_ms: ask.pending_ms,
            endpoints: Vec::new(),
            usage: FleetUsage::default(),
            timeline: Vec::new(),
            trouble: FleetTrouble::default(),
            flags: FleetFlags::default(),
        };
        let mut projects: std::collections::BTreeMap<String, ProjectGpuTime> =
            std::collections::BTreeMap::new();
        for (name, url, answer) in answers {
            let mut part = EndpointPart {
                name: name.clone(),
                url,
                status: Answered::Ok,
                history_from: None,
                accounted_from: None,
                detail: None,
            };
            match answer {
                Err(e) => {
                    part.status = Answered::Unreachable;
                    part.detail = Some(e);
                }
                Ok(ReportAt::BeforeHistory { history_from }) => {
                    part.status = Answered::NoHistory;
                    part.history_from = history_from;
                }
                Ok(ReportAt::Shown(w)) => {
                    part.history_from = w.history_from;
                    part.accounted_from = (w.from > ask.from).then_some(w.from);
                    r.add(&name, &w, &mut projects);
                }
            }
            r.endpoints.push(part);
        }
        r.usage.projects = projects.into_values().collect();
        sort_projects(&mut r.usage.projects);
        let idle = |c: &Tagged<ClaimGpuTime>| c.item.figures.idle_allocated.0;
        r.usage.claims.sort_by(|a, b| idle(b).total_cmp(&idle(a)));
        r.timeline.sort_by_key(|a| a.item.at);
        r.trouble.gpus.sort_by_key(|t| t.item.from);
        r.trouble.over_limit.sort_by_key(|t| t.item.from);
        r.trouble.long_pending.sort_by_key(|t| t.item.from);
        r.trouble.backoffs.sort_by_key(|t| t.item.from);
        r.flags.episodes.sort_by_key(|e| e.item.started);
        let episodes: Vec<&FlagEpisode> = r.flags.episodes.iter().map(|e| &e.item).collect();
        r.flags.totals = add_up(&episodes, ask.from, ask.to);
        r
    }

    fn add(
        &mut self,
        name: &str,
        w: &WindowReport,
        projects: &mut std::collections::BTreeMap<String, ProjectGpuTime>,
    ) {
        let u = &w.usage;
        self.usage.physical += u.physical;
        self.usage.unallocated.compute += u.unallocated.compute;
        self.usage.unallocated.memory += u.unallocated.memory;
        for p in &u.projects {
            let e = projects
                .entry(p.project.clone())
                .or_insert_with(|| ProjectGpuTime {
                    project: p.project.clone(),
                    ..ProjectGpuTime::default()
                });
            e.claims += p.claims;
            let (f, g) = (&mut e.figures, &p.figures);
            f.reserved.compute += g.reserved.compute;
            f.reserved.memory += g.reserved.memory;
            f.used += g.used;
            f.idle_allocated += g.idle_allocated;
        }
        self.usage.claims.extend(tag(name, &u.claims));
        self.timeline.extend(tag(name, &w.actions));
        self.trouble.gpus.extend(tag(name, &w.trouble.devices));
        self.trouble
            .over_limit
            .extend(tag(name, &w.trouble.over_limit));
        self.trouble
            .long_pending
            .extend(tag(name, &w.trouble.long_pending));
        self.trouble.backoffs.extend(tag(name, &w.trouble.backoffs));
        self.flags.episodes.extend(tag(name, &w.flags));
    }
}

/// The window `args` names, `now` being now in `zone`.
pub fn window(
    args: &ReportArgs,
    now: Timestamp,
    zone: &jiff::tz::TimeZone,
) -> Result<(Timestamp, Timestamp), String> {
    let when = |flag: &str, t: &str| parse_when(t, now, zone).map_err(|e| format!("--{flag}: {e}"));
    let (from, to) = match (&args.since, &args.from) {
        (Some(since), _) => {
            // A span ago (`2h`), or a time as `--from` takes it.
            let span = since.trim().trim_start_matches('-');
            let from = parse_when(&format!("-{span}"), now, zone)
                .or_else(|_| parse_when(since, now, zone))
                .map_err(|e| format!("--since: {e}"))?;
            (from, now)
        }
        (None, Some(from)) => {
            let to = args.to.as_deref().map_or(Ok(now), |t| when("to", t))?;
            (when("from", from)?, to)
        }
        (None, None) => (Timestamp(now.0.saturating_sub(86_400_000)), now),
    };
    if from >= to {
        return Err("the window is empty: --from must be before --to".to_string());
    }
    Ok((from, to))
}

/// `gpuboard report`.
pub async fn report(args: ReportArgs) -> anyhow::Result<u8> {
    let now = SystemClock.now();
    let zone = jiff::tz::TimeZone::system();
    let (from, to) = window(&args, now, &zone).map_err(Usage)?;
    let ask = Ask {
        from,
        to,
        idle: IdleRule {
            idle_below_pct: args.idle_below,
            idle_for_ms: args.idle_for.saturating_mul(60_000),
        },
        pending_ms: args.pending_over.saturating_mul(60_000),
    };
    let members = members(&args.conn)?;
    let deadline = Duration::from_secs(args.conn.timeout.max(1) * 3);
    let calls = members.list.iter().map(|m| async move {
        let answer = match tokio::time::timeout(deadline, m.client.history_report(&ask)).await {
            Ok(Ok(a)) => Ok(a),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ClientError::Timeout {
                endpoint: m.client.endpoint().to_string(),
                secs: deadline.as_secs(),
            }),
        };
        (
            m.name.clone(),
            m.client.endpoint().trim_end_matches('/').to_string(),
            answer,
        )
    });
    let answers = futures::future::join_all(calls).await;
    // Each endpoint that failed is named on stderr; the exit code is the first one's, as
    // `events` does, and the report still covers the others.
    let mut code = 0;
    let answers: Vec<_> = answers
        .into_iter()
        .map(|(name, url, answer)| {
            let answer = answer.map_err(|e| {
                eprintln!("gpuboard: endpoint {name}: {e}");
                if code == 0 {
                    code = e.exit_code();
                }
                e.to_string()
            });
            (name, url, answer)
        })
        .collect();
    let report = FleetReport::merge(&ask, answers);
    let json = args.format == Format::Json || args.conn.json;
    let text = if json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        render::markdown(&report)
    };
    print!("{text}");
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ReportArgs,
    }

    fn window_of(argv: &[&str]) -> Result<(Timestamp, Timestamp), String> {
        let cli = Cli::try_parse_from(std::iter::once("report").chain(argv.iter().copied()))
            .map_err(|e| e.to_string())?;
        window(
            &cli.args,
            Timestamp(1_795_568_400_000),
            &jiff::tz::TimeZone::UTC,
        )
    }

    #[test]
    fn windows_read_as_the_console_reads_times() {
        let now = 1_795_568_400_000;
        assert_eq!(
            window_of(&[]),
            Ok((Timestamp(now - 86_400_000), Timestamp(now)))
        );
        assert_eq!(
            window_of(&["--since", "2h"]),
            Ok((Timestamp(now - 7_200_000), Timestamp(now)))
        );
        assert_eq!(
            window_of(&["--since", "2026-11-25T00:00:00Z"]),
            Ok((Timestamp(now - 3_600_000), Timestamp(now)))
        );
        assert_eq!(
            window_of(&["--from", "00:30", "--to", "-10m"]),
            Ok((Timestamp(now - 1_800_000), Timestamp(now - 600_000)))
        );
        let e = window_of(&["--from", "-10m", "--to", "-1h"]).unwrap_err();
        assert!(e.contains("--from must be before --to"), "{e}");
        let e = window_of(&["--since", "yesterday"]).unwrap_err();
        assert!(e.contains("--since") && e.contains("03:12"), "{e}");
        assert!(
            window_of(&["--since", "2h", "--from", "-1h"]).is_err(),
            "one or the other"
        );
        assert!(window_of(&["--to", "-1h"]).is_err(), "--to needs --from");
    }
}
