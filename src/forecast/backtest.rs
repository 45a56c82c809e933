//! The forecast backtest (`gpuboard simulate SCENARIO --backtest`): the scenario's claims
//! are replayed through the endpoint's scheduler on a simulated clock; when a claim has to
//! wait, its start is forecast at once, and once it starts the error is
//! |predicted - actual| / max(actual wait, 60 s). Twice: with every claim declaring its
//! duration (`expected_duration`), and with durations learned from the claims of the
//! replay that have ended so far. Beside each, the baseline "when the soonest lease
//! ends", each holder's lease taken as twice its duration from its start (a walltime asked
//! with a margin). The claims carry no `ttl` (their holders would renew it while they
//! wait); each is released when its duration is up.
//!
//! Only GPU streams are replayed (each host's GPUs as 80 GiB devices of their model); a
//! stream that names only `cpu` is counted as skipped.
//!
//! With `evaluate_until_s` (or `--evaluate-until`) only the claims submitted up to then
//! are forecast and evaluated, the replay going on until they have started (or the
//! scenario ends): arrivals after the window keep the queue as a workload that goes on
//! would, so the errors are not those of a workload's end, which no endpoint sees coming.

use std::fmt::Write as _;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use serde::Serialize;
use serde_json::json;

use super::{HoldSample, HoldTimes, forecast};
use crate::clock::Timestamp;
use crate::history::Record;
use crate::ids::ClaimId;
use crate::placement::{DeviceSpec, NodeSpec};
use crate::request::ClaimRequest;
use crate::scheduler::{Change, Scheduler, SchedulerConfig, Submitted};
use crate::simulate::{Scenario, ScenarioError};
use crate::snapshot::Snapshot;
use crate::units::Bytes;

/// The floor of the wait the error is divided by, in ms.
const FLOOR_MS: u64 = 60_000;

/// One arriving claim.
#[derive(Clone, Debug)]
pub(super) struct Arrival {
    pub(super) at: Timestamp,
    /// Its request, without `ttl` or `expected_duration` (the replay declares it or not).
    pub(super) request: ClaimRequest,
    /// How long it holds once placed; `None`: past the replay's end.
    pub(super) duration_ms: Option<u64>,
}

/// What a backtest replays: the fleet, the projects' shares and the claims arriving.
#[derive(Clone, Debug)]
pub(super) struct Workload {
    pub(super) nodes: Vec<NodeSpec>,
    pub(super) config: SchedulerConfig,
    pub(super) shares: Vec<(String, u32)>,
    /// In the order they arrive.
    pub(super) arrivals: Vec<Arrival>,
    /// Claims left out before the replay (a scenario's CPU-only streams, a history's claims
    /// that never started).
    pub(super) skipped: usize,
    /// The replay stops here at the latest.
    pub(super) end: Timestamp,
    /// The claims submitted up to here are evaluated.
    pub(super) until: Timestamp,
}

/// What keeps a backtest from running.
#[derive(Debug, thiserror::Error)]
pub enum BacktestError {
    /// The scenario is not valid.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The workload cannot be replayed (its fleet or shares are refused), with why.
    #[error("backtest: {0}")]
    Invalid(String),
}

/// One line of the table: a predictor's errors over the claims that waited.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ErrorRow {
    /// `declared` or `learned`.
    pub durations: String,
    /// `forecast` or `soonest lease end`.
    pub predictor: String,
    /// Claims that waited and started.
    pub claims: usize,
    /// Of those, how many the predictor gave no start for.
    pub unknown: usize,
    /// Claims that waited but had not started when the scenario ended (left out of the
    /// errors).
    pub not_started: usize,
    /// Median relative error, 0 to 1 and beyond.
    pub median: f64,
    /// 90th percentile relative error.
    pub p90: f64,
}

/// The backtest's answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Backtest {
    /// Claims replayed.
    pub claims: usize,
    /// Claims not replayed (CPU-only streams, or refused as they can never fit).
    pub skipped: usize,
    /// The claims submitted up to this second of the scenario are evaluated.
    pub evaluated_until_s: u64,
    /// One row per durations mode and predictor.
    pub rows: Vec<ErrorRow>,
    /// Every claim that waited, in each durations mode: what was predicted and what
    /// happened (for finding which claims make the errors).
    pub waits: Vec<Wait>,
}

/// One claim that waited, in one durations mode.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Wait {
    /// `declared` or `learned`.
    pub durations: String,
    /// Its project.
    pub project: String,
    /// Its request form.
    pub form: String,
    /// When it was submitted, in seconds of the scenario.
    pub submitted_s: f64,
    /// How many claims waited when it was submitted, itself included.
    pub queue: usize,
    /// The forecast's p50 start, in seconds of the scenario (`None`: unknown).
    pub forecast_s: Option<f64>,
    /// The baseline's start, in seconds of the scenario.
    pub baseline_s: Option<f64>,
    /// When it started, in seconds of the scenario (`None`: not within the scenario).
    pub started_s: Option<f64>,
}

/// A scenario's GPU streams as a workload, each host's GPUs as 80 GiB devices of their
/// model; `until_s`: the claims submitted up to then are evaluated.
fn from_scenario(scenario: &Scenario, until_s: u64) -> Result<Workload, ScenarioError> {
    let invalid = |why: String| ScenarioError::Invalid(why);
    let nodes: Vec<NodeSpec> = scenario
        .hosts
        .iter()
        .map(|h| NodeSpec {
            name: h.name.clone(),
            devices: h
                .gpus
                .iter()
                .flat_map(|(model, n)| std::iter::repeat_n(model.clone(), *n as usize))
                .enumerate()
                .map(|(i, model)| DeviceSpec {
                    index: i as u32,
                    model,
                    uuid: None,
                    memory: Some(Bytes::gib(80)),
                    link_group: None,
                })
                .collect(),
            cpus: None,
        })
        .collect();
    let config = SchedulerConfig {
        fairshare: scenario.fairshare.clone(),
        speeds: scenario.speeds.clone(),
        seed: scenario.seed,
        ..SchedulerConfig::default()
    };
    let shares = scenario
        .projects
        .iter()
        .map(|p| (p.name.as_str().to_string(), p.share.get()))
        .collect();
    let mut arrivals = Vec::new();
    let mut skipped = 0;
    for stream in &scenario.claims {
        let gpu = stream.on.iter().any(|o| o.starts_with("gpu"));
        if !gpu {
            skipped += stream.count as usize;
            continue;
        }
        let amount = stream.amount;
        let mut v = if amount < 1.0 {
            json!({"num_gpus": amount})
        } else {
            json!({"nvidia.com/gpu": amount.round() as u64})
        };
        let duration_s = stream.duration_s.max(1.0).round() as u64;
        v["project"] = json!(stream.project.as_str());
        v["wait"] = json!(true);
        let request = ClaimRequest::from_json(&v).map_err(|e| invalid(e.to_string()))?;
        for k in 0..stream.count {
            let at_s = stream.at_s + f64::from(k) * stream.every_s;
            arrivals.push(Arrival {
                at: Timestamp((at_s * 1000.0).round() as u64),
                request: request.clone(),
                duration_ms: Some(duration_s * 1000),
            });
        }
    }
    arrivals.sort_by_key(|a| a.at);
    Ok(Workload {
        nodes,
        config,
        shares,
        arrivals,
        skipped,
        end: Timestamp(scenario.duration_s.saturating_mul(1000)),
        until: Timestamp(until_s.saturating_mul(1000)),
    })
}

/// The scheduler a workload starts from.
fn scheduler(w: &Workload) -> Result<Scheduler, BacktestError> {
    let invalid = |why: String| BacktestError::Invalid(why);
    let mut s =
        Scheduler::new(w.config.clone(), w.nodes.clone()).map_err(|e| invalid(e.to_string()))?;
    for (project, share) in &w.shares {
        s.set_share(project, *share, "backtest", Timestamp(0))
            .map_err(|e| invalid(e.to_string()))?;
    }
    Ok(s)
}

/// What one replay saw of each claim that waited: submitted, forecast, baseline, started.
#[derive(Default)]
struct Seen {
    project: String,
    form: String,
    queue: usize,
    submitted: Timestamp,
    forecast: Option<Timestamp>,
    baseline: Option<Timestamp>,
    started: Option<Timestamp>,
}

/// One replay: the claims submitted by `until` that waited, with what was predicted and
/// what happened.
// One simulated clock: holders ending, the tick, arrivals, placements and predictions each
// read and move the loop's shared state (the heaps of ends and leases, who waits).
#[allow(clippy::too_many_lines)]
fn replay(w: &Workload, declared: bool) -> Result<(Vec<Seen>, usize, usize), BacktestError> {
    let mut s = scheduler(w)?;
    let (arrivals, mut skipped, end, until) = (&w.arrivals, w.skipped, w.end, w.until);
    let mut ends: BinaryHeap<Reverse<(Timestamp, ClaimId)>> = BinaryHeap::new();
    let mut duration: HashMap<ClaimId, Option<u64>> = HashMap::new();
    // Each holder's lease, for the baseline: twice its duration from its start.
    let mut leases: BinaryHeap<Reverse<(Timestamp, ClaimId)>> = BinaryHeap::new();
    let mut waiting: BTreeMap<ClaimId, Seen> = BTreeMap::new();
    let mut done: Vec<Seen> = Vec::new();
    let mut samples: Vec<HoldSample> = Vec::new();
    let mut holds = HoldTimes::default();
    let mut learned_from = usize::MAX;
    let mut arrived: Vec<(Timestamp, ClaimRequest)> = Vec::new();
    let mut next = 0;
    let mut t = Timestamp(0);
    let mut replayed = 0;
    loop {
        // Holders whose time is up leave; the tick hands on what they held.
        while let Some(&Reverse((at, id))) = ends.peek() {
            if at > t {
                break;
            }
            ends.pop();
            if let Some(c) = s.release(id, "backtest", t) {
                let placed = c.placed_at.unwrap_or(c.created_at);
                samples.push(HoldSample {
                    project: c.request.project.clone(),
                    form: c.request.describe(),
                    held_ms: t.millis_since(placed),
                });
            }
        }
        s.tick(t, &|_| true);
        let mut batch = Vec::new();
        while let Some(a) = arrivals.get(next).filter(|a| a.at <= t) {
            next += 1;
            let mut request = a.request.clone();
            if declared {
                request.expected_duration = a.duration_ms.map(|d| d.div_ceil(1000));
            }
            // As submitted: the arrivals a forecast expects again declare their durations
            // as these did (bare, they would hold for what no history says).
            arrived.push((t, request.clone()));
            match s.submit(request, "backtest", t) {
                Submitted::Placed(c) | Submitted::Pending(c) => {
                    duration.insert(c.id, a.duration_ms);
                    batch.push(c.id);
                    replayed += 1;
                }
                Submitted::Refused(_) | Submitted::ShareZero(_) => skipped += 1,
            }
        }
        // Who was placed, by the tick or the submits.
        for change in s.take_changes() {
            if let Change::Claim(c) = change
                && c.allocation.is_some()
                && c.placed_at == Some(t)
                && let Some(&d) = duration.get(&c.id)
                && !ends.iter().any(|Reverse((_, id))| *id == c.id)
            {
                // A claim that held past its recording's end holds past the replay's: it
                // has neither an end nor a lease.
                let d = d.unwrap_or(u64::MAX / 4);
                ends.push(Reverse((t.plus_millis(d), c.id)));
                leases.push(Reverse((t.plus_millis(d.saturating_mul(2)), c.id)));
                if let Some(mut seen) = waiting.remove(&c.id) {
                    seen.started = Some(t);
                    done.push(seen);
                }
            }
        }
        let still: Vec<ClaimId> = batch
            .into_iter()
            .filter(|id| s.claim(*id).is_some_and(|c| c.allocation.is_none()))
            .collect();
        if !still.is_empty() && t <= until {
            if samples.len() + arrived.len() != learned_from {
                let learned = if declared {
                    Vec::new()
                } else {
                    samples.clone()
                };
                // In the order they came: claims that came at one instant are expected
                // again in that order (reversed, the copy submits them the other way
                // round and places each where the other went).
                let from = arrived
                    .partition_point(|(at, _)| t.millis_since(*at) >= super::holds::ARRIVALS_MS);
                let recent = arrived.get(from..).unwrap_or_default().to_vec();
                holds = HoldTimes::from_samples(learned).with_arrivals(recent);
                learned_from = samples.len() + arrived.len();
            }
            let f = forecast(&s, t, &holds);
            while leases
                .peek()
                .is_some_and(|Reverse((_, id))| s.claim(*id).is_none())
            {
                leases.pop();
            }
            let soonest = leases.peek().map(|Reverse((at, _))| *at);
            let queue = s.waiting_claims().len();
            for id in still {
                let Some(c) = s.claim(id) else { continue };
                let (project, form) = (c.request.project.clone(), c.request.describe());
                waiting.insert(
                    id,
                    Seen {
                        project,
                        form,
                        queue,
                        submitted: t,
                        forecast: f.of(id).and_then(|e| e.start).map(|b| b.p50),
                        baseline: soonest,
                        started: None,
                    },
                );
            }
        }
        let wake = if waiting.is_empty() {
            None
        } else {
            s.next_wakeup(t)
        };
        let candidates = [
            ends.peek().map(|Reverse((at, _))| *at),
            arrivals.get(next).map(|a| a.at),
            wake,
        ];
        match candidates.into_iter().flatten().min() {
            // Past the window, once every claim evaluated has started, nothing is left to see.
            Some(_) if t > until && waiting.is_empty() => break,
            Some(n) if n <= end => t = n.max(t),
            _ => break,
        }
    }
    done.extend(waiting.into_values());
    Ok((done, replayed, skipped))
}

/// The relative error of each prediction of a claim that started, sorted, and how many
/// had none.
fn errors(seen: &[Seen], pick: impl Fn(&Seen) -> Option<Timestamp>) -> (Vec<f64>, usize) {
    let mut out = Vec::new();
    let mut unknown = 0;
    for s in seen {
        let Some(actual) = s.started else { continue };
        let Some(predicted) = pick(s) else {
            unknown += 1;
            continue;
        };
        let wait = actual.millis_since(s.submitted).max(FLOOR_MS);
        out.push(predicted.0.abs_diff(actual.0) as f64 / wait as f64);
    }
    out.sort_by(f64::total_cmp);
    (out, unknown)
}

/// The nearest-rank quantile of sorted values (0 when there are none).
fn nearest(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Runs the backtest over a scenario.
pub fn backtest(scenario: &Scenario) -> Result<Backtest, BacktestError> {
    let until_s = match scenario.evaluate_until_s {
        None => scenario.duration_s,
        Some(u) if u > 0 && u <= scenario.duration_s => u,
        Some(u) => {
            return Err(ScenarioError::Invalid(format!(
                "evaluate_until_s {u} must be from 1 to duration_s ({})",
                scenario.duration_s
            ))
            .into());
        }
    };
    run_workload(&from_scenario(scenario, until_s)?)
}

/// Runs the backtest over the claims a serve recorded (`start`, its history's first state,
/// and the versions after it; see `recorded::workload`); `until_s`: evaluate only the
/// claims submitted up to this second of the recording.
pub fn backtest_recorded(
    start: &Snapshot,
    records: &[Record],
    until_s: Option<u64>,
) -> Result<Backtest, BacktestError> {
    run_workload(&super::recorded::workload(start, records, until_s)?)
}

/// Both replays of a workload, and their errors.
fn run_workload(w: &Workload) -> Result<Backtest, BacktestError> {
    let until_s = w.until.0 / 1000;
    let mut rows = Vec::new();
    let mut waits = Vec::new();
    let mut claims = 0;
    let mut skipped = 0;
    for declared in [true, false] {
        let (seen, replayed, skip) = replay(w, declared)?;
        let not_started = seen.iter().filter(|s| s.started.is_none()).count();
        claims = replayed;
        skipped = skip;
        let durations = if declared { "declared" } else { "learned" };
        let secs = |t: Timestamp| t.0 as f64 / 1000.0;
        waits.extend(seen.iter().map(|s| Wait {
            durations: durations.to_string(),
            project: s.project.clone(),
            form: s.form.clone(),
            submitted_s: secs(s.submitted),
            queue: s.queue,
            forecast_s: s.forecast.map(secs),
            baseline_s: s.baseline.map(secs),
            started_s: s.started.map(secs),
        }));
        for (predictor, pick) in [
            (
                "forecast",
                (|s: &Seen| s.forecast) as fn(&Seen) -> Option<Timestamp>,
            ),
            ("soonest lease end", |s: &Seen| s.baseline),
        ] {
            let (errs, unknown) = errors(&seen, pick);
            rows.push(ErrorRow {
                durations: durations.to_string(),
                predictor: predictor.to_string(),
                claims: errs.len() + unknown,
                unknown,
                not_started,
                median: nearest(&errs, 0.5),
                p90: nearest(&errs, 0.9),
            });
        }
    }
    Ok(Backtest {
        claims,
        skipped,
        evaluated_until_s: until_s,
        rows,
        waits,
    })
}

/// The backtest as a table.
pub fn render(b: &Backtest) -> String {
    let mut out = format!(
        "forecast backtest: {} claims replayed, {} skipped; error = |predicted - actual| / max(actual wait, 60 s), over the claims submitted by {} s that waited\n",
        b.claims, b.skipped, b.evaluated_until_s
    );
    let _ = writeln!(
        out,
        "{:<10} {:<18} {:>7} {:>8} {:>8} {:>8} {:>8}",
        "durations", "predictor", "waited", "unknown", "unstarted", "median", "p90"
    );
    for r in &b.rows {
        let _ = writeln!(
            out,
            "{:<10} {:<18} {:>7} {:>8} {:>9} {:>7.1}% {:>7.1}%",
            r.durations,
            r.predictor,
            r.claims,
            r.unknown,
            r.not_started,
            r.median * 100.0,
            r.p90 * 100.0
        );
    }
    out
}
