//! The simulation loop: claims arrive, work fetch places them on the capacity, they run
//! for their duration and leave, and the simulated clock jumps from one event to the
//! next while usage is summed per window.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::hosts::{Hosts, SimHosts};
use super::report::{DebtRow, ProjectOutcome, ResourceSummary, SimReport, Usage, Window};
use super::scenario::{Arrival, Scenario, ScenarioError, arrivals, invalid, resource_types};
use crate::clock::Timestamp;
use crate::fairshare::{
    EventKind, FairShareEvent, Ledger, PendingClaim, Placed, ProjectName, ResourceId, ResourceType,
    TimestampExt,
};
use crate::ids::ClaimId;
use crate::units::Units;

/// The longest run accepted: a year.
const MAX_DURATION_S: u64 = 365 * 86_400;

/// Runs a scenario on its hosts.
pub fn run_scenario(scenario: &Scenario) -> Result<SimReport, ScenarioError> {
    let mut hosts = Hosts::new(&scenario.hosts)?;
    run_with(scenario, &mut hosts)
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
    let mut run = Run::new(scenario, capacity)?;
    let end = Timestamp::from_secs(scenario.duration_s);
    let report_every = Duration::from_secs(scenario.report_every_s);
    loop {
        run.release_ended();
        run.submit_arrivals()?;
        let placed_now = run.fetch_and_place()?;
        run.collect_events();
        if placed_now {
            // Decide again at the same instant, with the capacity updated.
            continue;
        }
        if run.now >= end {
            break;
        }
        run.advance(end, report_every);
    }
    Ok(run.finish(end))
}

/// One run in progress: the ledger, the capacity, the claims arrived, running and
/// ending, and the usage summed so far.
struct Run<'a, H: SimHosts> {
    capacity: &'a mut H,
    ledger: Ledger,
    resources: Vec<ResourceType>,
    names: Vec<ProjectName>,
    /// Each resource type's position in `resources`.
    index: HashMap<ResourceId, usize>,
    /// The arrivals, in time order, and the next one to come.
    arrivals: Vec<Arrival>,
    next_arrival: usize,
    rng: StdRng,
    /// Each claim's project and how long it runs.
    durations: HashMap<ClaimId, (usize, Duration)>,
    /// When each running claim ends, earliest first.
    ends: BinaryHeap<Reverse<(Timestamp, ClaimId)>>,
    /// Running claims: project, resource type and units.
    running: HashMap<ClaimId, (usize, usize, Units)>,
    /// Instance-seconds used per (project, resource type), in this window and in all.
    in_window: Vec<f64>,
    in_total: Vec<f64>,
    windows: Vec<Window>,
    window_start: Timestamp,
    submitted: Vec<u64>,
    placed: Vec<u64>,
    events: Vec<FairShareEvent>,
    now: Timestamp,
}

impl<'a, H: SimHosts> Run<'a, H> {
    /// The ledger set up with the scenario's resource types and projects, and the
    /// arrivals worked out, at time zero.
    fn new(scenario: &Scenario, capacity: &'a mut H) -> Result<Self, ScenarioError> {
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
        let index = resources
            .iter()
            .enumerate()
            .map(|(r, res)| (res.id.clone(), r))
            .collect();
        Ok(Run {
            capacity,
            ledger,
            resources,
            names,
            index,
            arrivals,
            next_arrival: 0,
            rng: StdRng::seed_from_u64(scenario.seed),
            durations: HashMap::new(),
            ends: BinaryHeap::new(),
            running: HashMap::new(),
            in_window: vec![0.0; n * m],
            in_total: vec![0.0; n * m],
            windows: Vec::new(),
            window_start: start,
            submitted: vec![0; n],
            placed: vec![0; n],
            events: Vec::new(),
            now: start,
        })
    }

    /// Claims whose time is up leave the capacity and the ledger.
    fn release_ended(&mut self) {
        while let Some(&Reverse((at, id))) = self.ends.peek() {
            if at > self.now {
                break;
            }
            self.ends.pop();
            self.capacity.release(id);
            self.ledger.released(self.now, id);
            self.running.remove(&id);
        }
    }

    /// Claims that have arrived join the ledger's queue.
    fn submit_arrivals(&mut self) -> Result<(), ScenarioError> {
        let now = self.now;
        while let Some(arrival) = self.arrivals.get(self.next_arrival).filter(|a| a.at <= now) {
            let id = ClaimId(self.next_arrival as u64);
            let claim = PendingClaim {
                id,
                project: self.names[arrival.project].clone(),
                demand: arrival.demand.clone(),
                expected_duration: Some(arrival.duration),
                submitted: now,
                form: None,
            };
            self.ledger.submit(now, claim)?;
            self.durations
                .insert(id, (arrival.project, arrival.duration));
            self.submitted[arrival.project] += 1;
            self.next_arrival += 1;
        }
        Ok(())
    }

    /// One work-fetch decision, placed on the capacity; whether a claim was placed.
    fn fetch_and_place(&mut self) -> Result<bool, ScenarioError> {
        let now = self.now;
        let fetch = {
            let capacity = &*self.capacity;
            let mut fit = |_: &PendingClaim, resource: &ResourceId, units: Units| {
                capacity.fits(resource, units)
            };
            self.ledger.work_fetch(now, &mut fit, &mut self.rng)
        };
        let Some(fetch) = fetch else {
            return Ok(false);
        };
        let &(p, duration) = self
            .durations
            .get(&fetch.claim)
            .ok_or_else(|| invalid(format!("work fetch chose unknown claim {}", fetch.claim)))?;
        if !self
            .capacity
            .place(fetch.claim, &fetch.resource, fetch.units)
        {
            return Err(invalid(format!(
                "capacity refused claim {} on {} after saying it fits",
                fetch.claim, fetch.resource
            )));
        }
        let r = self.index.get(&fetch.resource).copied().unwrap_or(0);
        self.running.insert(fetch.claim, (p, r, fetch.units));
        self.ends.push(Reverse((now.after(duration), fetch.claim)));
        self.placed[p] += 1;
        self.ledger.placed(
            now,
            Placed {
                id: fetch.claim,
                project: fetch.project,
                resource: fetch.resource,
                units: fetch.units,
                expected_duration: Some(duration),
            },
        )?;
        Ok(true)
    }

    /// Keeps the ledger's backoff and clock events for the report.
    fn collect_events(&mut self) {
        self.events
            .extend(self.ledger.drain_events().into_iter().filter(|e| {
                matches!(
                    e.kind,
                    EventKind::BackedOff { .. }
                        | EventKind::BackoffCleared { .. }
                        | EventKind::ClockWentBack { .. }
                )
            }));
    }

    /// Jumps to the next thing that happens (a claim ends or arrives, a backoff ends,
    /// the window or the run ends), summing the usage on the way.
    fn advance(&mut self, end: Timestamp, report_every: Duration) {
        let now = self.now;
        let window_end = self.window_start.after(report_every).min(end);
        let mut next = window_end;
        if let Some(Reverse((at, _))) = self.ends.peek() {
            next = next.min(*at);
        }
        if let Some(arrival) = self.arrivals.get(self.next_arrival) {
            next = next.min(arrival.at);
        }
        if let Some(wake) = self.ledger.next_wakeup(now) {
            next = next.min(wake);
        }
        let m = self.resources.len();
        let dt = next.since(now).as_secs_f64();
        for &(p, r, units) in self.running.values() {
            let used = units.as_fraction() * dt;
            self.in_window[p * m + r] += used;
            self.in_total[p * m + r] += used;
        }
        self.now = next;
        if self.now == window_end {
            self.windows.push(Window {
                start_s: self.window_start.secs(),
                end_s: self.now.secs(),
                usage: usage_rows(
                    &self.names,
                    &self.resources,
                    &self.in_window,
                    self.now.since(self.window_start).as_secs_f64(),
                ),
            });
            self.in_window.iter_mut().for_each(|u| *u = 0.0);
            self.window_start = self.now;
        }
    }

    /// The report at `end`: debts and outcomes from the ledger, usage from the sums.
    fn finish(mut self, end: Timestamp) -> SimReport {
        self.ledger.tick(end);
        let view = self.ledger.view(end);
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
            let p = self
                .names
                .iter()
                .position(|name| name == &project.name)
                .unwrap_or(0);
            projects.push(ProjectOutcome {
                project: project.name.clone(),
                overall_debt_gflop: project.overall_debt.0,
                submitted: self.submitted[p],
                placed: self.placed[p],
                pending_at_end: project.pending as u64,
            });
        }
        SimReport {
            duration_s: end.secs(),
            resources: self
                .resources
                .iter()
                .map(|r| ResourceSummary {
                    id: r.id.clone(),
                    instances: r.instances,
                    speed_gflops: r.speed.gflops(),
                })
                .collect(),
            windows: self.windows,
            totals: usage_rows(&self.names, &self.resources, &self.in_total, end.secs()),
            debts,
            projects,
            backoff_events: self.events,
        }
    }
}

/// Each (project, resource type) share of the capacity over `span_s` seconds.
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
