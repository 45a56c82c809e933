//! `gpuboard simulate SCENARIO.toml`: runs the fair-share scheduler on a simulated clock
//! over a scenario (projects and shares, hosts, arriving claims with durations) and
//! reports each project's share of each resource type over time, the debts at the end
//! and the backoff events. The scheduler code is the one the endpoint runs; only the
//! clock and the capacity are simulated.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use crate::fairshare::{
    EventKind, FairShareError, FairShareEvent, Ledger, LedgerConfig, PendingClaim, Placed,
    ProjectName, ResourceDemand, ResourceId, ResourceType, Share, Speed, Timestamp, TimestampExt,
};
use crate::ids::ClaimId;
use crate::units::{UNITS_PER_DEVICE, Units};

/// A scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// How long to simulate, in seconds.
    pub duration_s: u64,
    /// Length of each reported window, in seconds (default 3600).
    #[serde(default = "default_report_every")]
    pub report_every_s: u64,
    /// Seed of the random source (backoff jitter).
    #[serde(default)]
    pub seed: u64,
    /// Backoff policy and buffer horizon.
    #[serde(default)]
    pub fairshare: LedgerConfig,
    /// Speeds in GFLOPS per instance, by resource type (`cpu`, `gpu:MODEL`), overriding
    /// the defaults.
    #[serde(default)]
    pub speeds: BTreeMap<String, f64>,
    /// The hosts.
    pub hosts: Vec<HostSpec>,
    /// The projects.
    pub projects: Vec<ProjectSpec>,
    /// Streams of arriving claims.
    #[serde(default)]
    pub claims: Vec<ClaimStream>,
}

fn default_report_every() -> u64 {
    3_600
}

/// A simulated host.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Its name.
    pub name: String,
    /// CPU cores.
    #[serde(default)]
    pub cpus: u32,
    /// GPUs by model: how many of each.
    #[serde(default)]
    pub gpus: BTreeMap<String, u32>,
}

/// A project and its share.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectSpec {
    /// Its name.
    pub name: ProjectName,
    /// Its resource share (default 100).
    #[serde(default)]
    pub share: Share,
}

/// `count` claims of one project arriving from `at_s`, one every `every_s`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimStream {
    /// The project.
    pub project: ProjectName,
    /// Where its claims could run: `cpu`, `gpu` (any GPU model) or `gpu:MODEL`.
    pub on: Vec<String>,
    /// Devices or cores each claim takes: a fraction up to 1, or a whole number.
    #[serde(default = "default_amount")]
    pub amount: f64,
    /// How long each runs, in seconds (also its expected duration).
    pub duration_s: f64,
    /// When the first arrives, in seconds.
    #[serde(default)]
    pub at_s: f64,
    /// How many arrive.
    #[serde(default = "default_count")]
    pub count: u32,
    /// Seconds between arrivals (0: all at once).
    #[serde(default)]
    pub every_s: f64,
}

fn default_amount() -> f64 {
    1.0
}

fn default_count() -> u32 {
    1
}

/// What is wrong with a scenario.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// A rule the scenario breaks.
    #[error("scenario: {0}")]
    Invalid(String),
    /// The fair-share layer refused something.
    #[error("scenario: {0}")]
    Ledger(#[from] FairShareError),
}

fn invalid(why: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid(why.into())
}

/// What the simulator places on: whether a claim of `units` fits a resource type now, and
/// taking and giving it back. [`Hosts`] models devices and cores; placement's fleet can
/// stand in.
pub trait SimHosts {
    /// Whether `units` of `resource` fit now.
    fn fits(&self, resource: &ResourceId, units: Units) -> bool;
    /// Takes `units` of `resource` for `claim`; false if it does not fit.
    fn place(&mut self, claim: ClaimId, resource: &ResourceId, units: Units) -> bool;
    /// Gives back what `claim` holds.
    fn release(&mut self, claim: ClaimId);
}

/// Hosts with CPU cores and GPUs: a claim up to one device takes part of one device
/// (the fullest that fits), a larger one whole devices of one host, a CPU claim cores of
/// one host, all in units (10 000 per device or core).
#[derive(Clone, Debug, Default)]
pub struct Hosts {
    hosts: Vec<HostPool>,
    held: HashMap<ClaimId, Held>,
}

#[derive(Clone, Debug, Default)]
struct HostPool {
    cpu_free: u64,
    gpus: BTreeMap<ResourceId, Vec<u32>>,
}

#[derive(Clone, Debug)]
struct Held {
    host: usize,
    resource: ResourceId,
    cpu: u64,
    devices: Vec<(usize, u32)>,
}

impl Hosts {
    /// Builds the hosts of a scenario.
    pub fn new(specs: &[HostSpec]) -> Result<Hosts, ScenarioError> {
        let mut hosts = Vec::with_capacity(specs.len());
        for spec in specs {
            let mut gpus = BTreeMap::new();
            for (model, &count) in &spec.gpus {
                let id = ResourceId::gpu(model)?;
                gpus.insert(id, vec![UNITS_PER_DEVICE; count as usize]);
            }
            hosts.push(HostPool {
                cpu_free: u64::from(spec.cpus) * u64::from(UNITS_PER_DEVICE),
                gpus,
            });
        }
        Ok(Hosts {
            hosts,
            held: HashMap::new(),
        })
    }

    fn plan(&self, resource: &ResourceId, units: Units) -> Option<Held> {
        let want = u64::from(units.0);
        for (h, host) in self.hosts.iter().enumerate() {
            if !resource.is_gpu() {
                if host.cpu_free >= want {
                    return Some(Held {
                        host: h,
                        resource: resource.clone(),
                        cpu: want,
                        devices: Vec::new(),
                    });
                }
                continue;
            }
            let Some(devices) = host.gpus.get(resource) else {
                continue;
            };
            if units.0 <= UNITS_PER_DEVICE {
                // Binpack: the fullest device that still fits.
                let best = devices
                    .iter()
                    .enumerate()
                    .filter(|(_, free)| **free >= units.0)
                    .min_by_key(|(_, free)| **free);
                if let Some((d, _)) = best {
                    return Some(Held {
                        host: h,
                        resource: resource.clone(),
                        cpu: 0,
                        devices: vec![(d, units.0)],
                    });
                }
            } else if units.0.is_multiple_of(UNITS_PER_DEVICE) {
                let need = (units.0 / UNITS_PER_DEVICE) as usize;
                let whole: Vec<(usize, u32)> = devices
                    .iter()
                    .enumerate()
                    .filter(|(_, free)| **free == UNITS_PER_DEVICE)
                    .map(|(d, _)| (d, UNITS_PER_DEVICE))
                    .take(need)
                    .collect();
                if whole.len() == need {
                    return Some(Held {
                        host: h,
                        resource: resource.clone(),
                        cpu: 0,
                        devices: whole,
                    });
                }
            }
        }
        None
    }
}

impl SimHosts for Hosts {
    fn fits(&self, resource: &ResourceId, units: Units) -> bool {
        self.plan(resource, units).is_some()
    }

    fn place(&mut self, claim: ClaimId, resource: &ResourceId, units: Units) -> bool {
        let Some(held) = self.plan(resource, units) else {
            return false;
        };
        let host = &mut self.hosts[held.host];
        host.cpu_free -= held.cpu;
        if let Some(devices) = host.gpus.get_mut(&held.resource) {
            for &(d, u) in &held.devices {
                devices[d] -= u;
            }
        }
        self.held.insert(claim, held);
        true
    }

    fn release(&mut self, claim: ClaimId) {
        let Some(held) = self.held.remove(&claim) else {
            return;
        };
        let host = &mut self.hosts[held.host];
        host.cpu_free += held.cpu;
        if let Some(devices) = host.gpus.get_mut(&held.resource) {
            for &(d, u) in &held.devices {
                devices[d] += u;
            }
        }
    }
}

/// A project's share of a resource type's capacity over some time (0 to 1).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Usage {
    /// The project.
    pub project: ProjectName,
    /// The resource type.
    pub resource: ResourceId,
    /// Instance-seconds used over instance-seconds available.
    pub share: f64,
}

/// One reported window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Window {
    /// Start, in seconds.
    pub start_s: f64,
    /// End, in seconds.
    pub end_s: f64,
    /// Usage per (project, resource type).
    pub usage: Vec<Usage>,
}

/// A project's debt on one resource type at the end.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DebtRow {
    /// The project.
    pub project: ProjectName,
    /// The resource type.
    pub resource: ResourceId,
    /// LTD(P,R) in instance-seconds.
    pub debt_instance_s: f64,
    /// D(P,R).
    pub accrue: bool,
    /// y(P,R) in instances.
    pub target_instances: f64,
}

/// A project's claims over the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProjectOutcome {
    /// The project.
    pub project: ProjectName,
    /// Its overall debt at the end, in GFLOP.
    pub overall_debt_gflop: f64,
    /// Claims that arrived.
    pub submitted: u64,
    /// Claims placed.
    pub placed: u64,
    /// Claims still pending at the end.
    pub pending_at_end: u64,
}

/// A resource type of the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResourceSummary {
    /// Its name.
    pub id: ResourceId,
    /// Its instances.
    pub instances: u32,
    /// Its speed, GFLOPS per instance.
    pub speed_gflops: f64,
}

/// What a run yields (`--json` prints it as it is).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimReport {
    /// Simulated seconds.
    pub duration_s: f64,
    /// The resource types.
    pub resources: Vec<ResourceSummary>,
    /// Usage per window.
    pub windows: Vec<Window>,
    /// Usage over the whole run.
    pub totals: Vec<Usage>,
    /// Debts at the end.
    pub debts: Vec<DebtRow>,
    /// Per project.
    pub projects: Vec<ProjectOutcome>,
    /// Backoffs set and cleared, and clock events.
    pub backoff_events: Vec<FairShareEvent>,
}

impl SimReport {
    /// The usage share of `project` on `resource` over the whole run.
    pub fn total(&self, project: &str, resource: &str) -> Option<f64> {
        self.totals
            .iter()
            .find(|u| u.project.as_str() == project && u.resource.as_str() == resource)
            .map(|u| u.share)
    }
}

/// The longest run accepted: a year.
const MAX_DURATION_S: u64 = 365 * 86_400;
/// The most claims a scenario may create.
const MAX_CLAIMS: u64 = 1_000_000;

/// Runs a scenario on its hosts.
pub fn run_scenario(scenario: &Scenario) -> Result<SimReport, ScenarioError> {
    let mut hosts = Hosts::new(&scenario.hosts)?;
    run_with(scenario, &mut hosts)
}

struct Arrival {
    at: Timestamp,
    project: usize,
    demand: Vec<ResourceDemand>,
    duration: Duration,
}

/// Runs a scenario on the given capacity (whose resource types must be the hosts').
pub fn run_with(
    scenario: &Scenario,
    capacity: &mut impl SimHosts,
) -> Result<SimReport, ScenarioError> {
    if scenario.duration_s == 0 || scenario.duration_s > MAX_DURATION_S {
        return Err(invalid(format!(
            "duration_s must be from 1 to {MAX_DURATION_S} (a year)"
        )));
    }
    if scenario.report_every_s == 0 {
        return Err(invalid("report_every_s must be positive"));
    }
    let resources = resource_types(scenario)?;
    let mut ledger = Ledger::new(scenario.fairshare.clone())?;
    let start = Timestamp(0);
    for res in &resources {
        ledger.set_resource(start, res.clone());
    }
    let mut names: Vec<ProjectName> = Vec::new();
    for project in &scenario.projects {
        if names.contains(&project.name) {
            return Err(invalid(format!(
                "project `{}` is listed twice",
                project.name
            )));
        }
        ledger.set_share(start, &project.name, project.share);
        names.push(project.name.clone());
    }
    let mut arrivals = arrivals(scenario, &resources, &names)?;
    arrivals.sort_by_key(|a| a.at);

    let m = resources.len();
    let n = names.len();
    let index: HashMap<&ResourceId, usize> = resources
        .iter()
        .enumerate()
        .map(|(r, res)| (&res.id, r))
        .collect();
    let end = Timestamp::from_secs(scenario.duration_s);
    let report_every = Duration::from_secs(scenario.report_every_s);
    let mut rng = StdRng::seed_from_u64(scenario.seed);
    let mut next_arrival = 0;
    let mut durations: HashMap<ClaimId, (usize, Duration)> = HashMap::new();
    let mut ends: BinaryHeap<Reverse<(Timestamp, ClaimId)>> = BinaryHeap::new();
    let mut running: HashMap<ClaimId, (usize, usize, Units)> = HashMap::new();
    let mut in_window = vec![0.0; n * m];
    let mut in_total = vec![0.0; n * m];
    let mut windows = Vec::new();
    let mut window_start = start;
    let mut submitted = vec![0u64; n];
    let mut placed = vec![0u64; n];
    let mut events = Vec::new();
    let mut now = start;
    loop {
        while let Some(&Reverse((at, id))) = ends.peek() {
            if at > now {
                break;
            }
            ends.pop();
            capacity.release(id);
            ledger.released(now, id);
            running.remove(&id);
        }
        while let Some(arrival) = arrivals.get(next_arrival).filter(|a| a.at <= now) {
            let id = ClaimId(next_arrival as u64);
            let claim = PendingClaim {
                id,
                project: names[arrival.project].clone(),
                demand: arrival.demand.clone(),
                expected_duration: Some(arrival.duration),
                submitted: now,
            };
            ledger.submit(now, claim)?;
            durations.insert(id, (arrival.project, arrival.duration));
            submitted[arrival.project] += 1;
            next_arrival += 1;
        }
        let fetch = {
            let mut fit = |_: &PendingClaim, resource: &ResourceId, units: Units| {
                capacity.fits(resource, units)
            };
            ledger.work_fetch(now, &mut fit, &mut rng)
        };
        let placed_now = fetch.is_some();
        if let Some(fetch) = fetch {
            let &(p, duration) = durations.get(&fetch.claim).ok_or_else(|| {
                invalid(format!("work fetch chose unknown claim {}", fetch.claim))
            })?;
            if !capacity.place(fetch.claim, &fetch.resource, fetch.units) {
                return Err(invalid(format!(
                    "capacity refused claim {} on {} after saying it fits",
                    fetch.claim, fetch.resource
                )));
            }
            let r = index.get(&fetch.resource).copied().unwrap_or(0);
            running.insert(fetch.claim, (p, r, fetch.units));
            ends.push(Reverse((now.after(duration), fetch.claim)));
            placed[p] += 1;
            ledger.placed(
                now,
                Placed {
                    id: fetch.claim,
                    project: fetch.project,
                    resource: fetch.resource,
                    units: fetch.units,
                    expected_duration: Some(duration),
                },
            )?;
        }
        events.extend(ledger.drain_events().into_iter().filter(|e| {
            matches!(
                e.kind,
                EventKind::BackedOff { .. }
                    | EventKind::BackoffCleared { .. }
                    | EventKind::ClockWentBack { .. }
            )
        }));
        if placed_now {
            // Decide again at the same instant, with the capacity updated.
            continue;
        }
        if now >= end {
            break;
        }
        let window_end = window_start.after(report_every).min(end);
        let mut next = window_end;
        if let Some(Reverse((at, _))) = ends.peek() {
            next = next.min(*at);
        }
        if let Some(arrival) = arrivals.get(next_arrival) {
            next = next.min(arrival.at);
        }
        if let Some(wake) = ledger.next_wakeup(now) {
            next = next.min(wake);
        }
        let dt = next.since(now).as_secs_f64();
        for &(p, r, units) in running.values() {
            let used = units.as_fraction() * dt;
            in_window[p * m + r] += used;
            in_total[p * m + r] += used;
        }
        now = next;
        if now == window_end {
            windows.push(Window {
                start_s: window_start.secs(),
                end_s: now.secs(),
                usage: usage_rows(
                    &names,
                    &resources,
                    &in_window,
                    now.since(window_start).as_secs_f64(),
                ),
            });
            in_window.iter_mut().for_each(|u| *u = 0.0);
            window_start = now;
        }
    }
    ledger.tick(end);
    let view = ledger.view(end);
    let mut debts = Vec::new();
    let mut projects = Vec::new();
    for project in &view.projects {
        for account in &project.resources {
            debts.push(DebtRow {
                project: project.name.clone(),
                resource: account.resource.clone(),
                debt_instance_s: account.debt.0,
                accrue: account.accrue,
                target_instances: account.target_instances,
            });
        }
        let p = names
            .iter()
            .position(|name| name == &project.name)
            .unwrap_or(0);
        projects.push(ProjectOutcome {
            project: project.name.clone(),
            overall_debt_gflop: project.overall_debt.0,
            submitted: submitted[p],
            placed: placed[p],
            pending_at_end: project.pending as u64,
        });
    }
    Ok(SimReport {
        duration_s: end.secs(),
        resources: resources
            .iter()
            .map(|r| ResourceSummary {
                id: r.id.clone(),
                instances: r.instances,
                speed_gflops: r.speed.gflops(),
            })
            .collect(),
        windows,
        totals: usage_rows(&names, &resources, &in_total, end.secs()),
        debts,
        projects,
        backoff_events: events,
    })
}

fn usage_rows(
    names: &[ProjectName],
    resources: &[ResourceType],
    used: &[f64],
    span_s: f64,
) -> Vec<Usage> {
    let m = resources.len();
    let mut rows = Vec::with_capacity(names.len() * m);
    for (p, name) in names.iter().enumerate() {
        for (r, res) in resources.iter().enumerate() {
            let available = f64::from(res.instances) * span_s;
            let share = if available > 0.0 {
                used[p * m + r] / available
            } else {
                0.0
            };
            rows.push(Usage {
                project: name.clone(),
                resource: res.id.clone(),
                share,
            });
        }
    }
    rows
}

/// The resource types the hosts have, at their default or configured speeds.
fn resource_types(scenario: &Scenario) -> Result<Vec<ResourceType>, ScenarioError> {
    if scenario.hosts.is_empty() {
        return Err(invalid(
            "no hosts: give at least one [[hosts]] with cpus or gpus",
        ));
    }
    let mut instances: BTreeMap<ResourceId, u32> = BTreeMap::new();
    for host in &scenario.hosts {
        if host.cpus > 0 {
            *instances.entry(ResourceId::cpu()).or_default() += host.cpus;
        }
        for (model, &count) in &host.gpus {
            if count > 0 {
                *instances.entry(ResourceId::gpu(model)?).or_default() += count;
            }
        }
    }
    let mut types: Vec<ResourceType> = instances
        .into_iter()
        .map(|(id, n)| ResourceType::new(id, n))
        .collect();
    for (name, &gflops) in &scenario.speeds {
        let id = ResourceId::parse(name)?;
        let known = types
            .iter()
            .map(|t| t.id.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let Some(t) = types.iter_mut().find(|t| t.id == id) else {
            return Err(invalid(format!(
                "speeds names `{name}`, which no host has; the hosts have: {known}"
            )));
        };
        t.speed = Speed::new(gflops)?;
    }
    Ok(types)
}

fn arrivals(
    scenario: &Scenario,
    types: &[ResourceType],
    names: &[ProjectName],
) -> Result<Vec<Arrival>, ScenarioError> {
    let mut out = Vec::new();
    let mut total: u64 = 0;
    for (i, stream) in scenario.claims.iter().enumerate() {
        let which = format!("claims[{i}] (project `{}`)", stream.project);
        let p = names
            .iter()
            .position(|n| n == &stream.project)
            .ok_or_else(|| invalid(format!("{which}: the project is not in [[projects]]")))?;
        let amount = stream.amount;
        let whole = amount >= 1.0 && amount.fract() == 0.0;
        if !(amount.is_finite() && amount > 0.0 && (amount <= 1.0 || whole) && amount <= 1_024.0) {
            return Err(invalid(format!(
                "{which}: amount {amount} is not valid: give a fraction up to 1 or a whole number up to 1024"
            )));
        }
        // Checked above: 0 < amount <= 1024.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let units = Units((amount * f64::from(UNITS_PER_DEVICE)).round() as u32);
        if units.0 == 0 {
            return Err(invalid(format!(
                "{which}: amount {amount} is below the 0.0001 grain"
            )));
        }
        let mut demand = Vec::new();
        for on in &stream.on {
            let matching: Vec<&ResourceType> = match on.as_str() {
                "gpu" => types.iter().filter(|t| t.id.is_gpu()).collect(),
                name => {
                    let id = ResourceId::parse(name)?;
                    types.iter().filter(|t| t.id == id).collect()
                }
            };
            if matching.is_empty() {
                let known = types
                    .iter()
                    .map(|t| t.id.to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(invalid(format!(
                    "{which}: no host has `{on}`; use `gpu` or one of: {known}"
                )));
            }
            for t in matching {
                if !demand.iter().any(|d: &ResourceDemand| d.resource == t.id) {
                    demand.push(ResourceDemand {
                        resource: t.id.clone(),
                        units,
                    });
                }
            }
        }
        if demand.is_empty() {
            return Err(invalid(format!(
                "{which}: `on` is empty; use `cpu`, `gpu` or `gpu:MODEL`"
            )));
        }
        let secs = |v: f64, field: &str| {
            Duration::try_from_secs_f64(v).map_err(|_| {
                invalid(format!(
                    "{which}: {field} {v} is not a finite, non-negative number of seconds"
                ))
            })
        };
        let duration = secs(stream.duration_s, "duration_s")?;
        if duration.is_zero() {
            return Err(invalid(format!("{which}: duration_s must be positive")));
        }
        let first = secs(stream.at_s, "at_s")?;
        let every = secs(stream.every_s, "every_s")?;
        total += u64::from(stream.count);
        if total > MAX_CLAIMS {
            return Err(invalid(format!("more than {MAX_CLAIMS} claims in all")));
        }
        for k in 0..stream.count {
            out.push(Arrival {
                at: Timestamp(0).after(first + every * k),
                project: p,
                demand: demand.clone(),
                duration,
            });
        }
    }
    Ok(out)
}

/// `gpuboard simulate`.
#[derive(Clone, Debug, clap::Args)]
pub struct SimulateArgs {
    /// The scenario file (TOML; see assets/scenarios/).
    pub scenario: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `gpuboard simulate`; returns the exit status.
pub fn run(args: SimulateArgs) -> anyhow::Result<i32> {
    let path = args.scenario.display().to_string();
    let text = std::fs::read_to_string(&args.scenario)
        .with_context(|| format!("reading scenario {path}"))?;
    let scenario: Scenario =
        toml::from_str(&text).with_context(|| format!("reading scenario {path}"))?;
    let report = run_scenario(&scenario).with_context(|| format!("running scenario {path}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(0)
}

fn clock(secs: f64) -> String {
    // Whole seconds are enough for a report.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let s = secs.max(0.0).round() as u64;
    let (d, h, m, s) = (s / 86_400, s / 3_600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// The report as text for people.
pub fn render(report: &SimReport) -> String {
    let mut out = String::new();
    let projects: Vec<&ProjectName> = report.projects.iter().map(|p| &p.project).collect();
    let _ = writeln!(out, "simulated {}", clock(report.duration_s));
    for r in &report.resources {
        let _ = writeln!(
            out,
            "  {}: {} x {} GFLOPS",
            r.id, r.instances, r.speed_gflops
        );
    }
    let _ = writeln!(
        out,
        "\nusage of each resource type, per project (share of its capacity):"
    );
    let mut header = format!("{:<21} {:<24}", "window", "resource");
    for p in &projects {
        let _ = write!(header, " {:>8}", p.as_str());
    }
    let _ = writeln!(out, "{header} {:>8}", "idle");
    let table = |out: &mut String, label: &str, usage: &[Usage]| {
        for r in &report.resources {
            let mut line = format!("{label:<21} {:<24}", r.id.as_str());
            let mut busy = 0.0;
            for p in &projects {
                let share = usage
                    .iter()
                    .find(|u| &&u.project == p && u.resource == r.id)
                    .map_or(0.0, |u| u.share);
                busy += share;
                let _ = write!(line, " {:>7.1}%", share * 100.0);
            }
            let _ = writeln!(out, "{line} {:>7.1}%", (1.0 - busy).max(0.0) * 100.0);
        }
    };
    for w in &report.windows {
        table(
            &mut out,
            &format!("{}-{}", clock(w.start_s), clock(w.end_s)),
            &w.usage,
        );
    }
    table(&mut out, "whole run", &report.totals);
    let _ = writeln!(out, "\ndebts at the end:");
    let _ = writeln!(
        out,
        "{:<16} {:<24} {:>16} {:>6} {:>10}",
        "project", "resource", "debt (inst-s)", "D", "target"
    );
    for d in &report.debts {
        let _ = writeln!(
            out,
            "{:<16} {:<24} {:>16.1} {:>6} {:>10.4}",
            d.project.as_str(),
            d.resource.as_str(),
            d.debt_instance_s,
            d.accrue,
            d.target_instances
        );
    }
    let _ = writeln!(
        out,
        "{:<16} {:>22} {:>10} {:>8} {:>8}",
        "project", "overall debt (GFLOP)", "submitted", "placed", "pending"
    );
    for p in &report.projects {
        let _ = writeln!(
            out,
            "{:<16} {:>22.1} {:>10} {:>8} {:>8}",
            p.project.as_str(),
            p.overall_debt_gflop,
            p.submitted,
            p.placed,
            p.pending_at_end
        );
    }
    let _ = writeln!(out, "\nbackoff events: {}", report.backoff_events.len());
    const SHOWN: usize = 40;
    for e in report.backoff_events.iter().take(SHOWN) {
        let what = match &e.kind {
            EventKind::BackedOff {
                project,
                resource,
                until,
                interval_s,
            } => {
                format!(
                    "{project} backed off on {resource} until {} (interval {interval_s:.0} s)",
                    clock(until.secs())
                )
            }
            EventKind::BackoffCleared {
                project,
                resource,
                cause,
            } => {
                format!("{project} backoff on {resource} cleared ({cause:?})")
            }
            other => format!("{other:?}"),
        };
        let _ = writeln!(out, "  {} {what}", clock(e.at.secs()));
    }
    if report.backoff_events.len() > SHOWN {
        let _ = writeln!(
            out,
            "  ... {} more (see --json)",
            report.backoff_events.len() - SHOWN
        );
    }
    out
}
