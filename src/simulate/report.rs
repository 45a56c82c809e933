//! What a run yields: usage per window and over the whole run, debts and per-project
//! outcomes at the end, backoff events; as data (`--json`) and as text for people.

use std::fmt::Write as _;

use serde::Serialize;

use crate::fairshare::{EventKind, FairShareEvent, ProjectName, ResourceId, TimestampExt};

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

/// The report as text for people.
pub fn render(report: &SimReport) -> String {
    let mut out = String::new();
    render_usage(&mut out, report);
    render_debts(&mut out, report);
    render_events(&mut out, report);
    out
}

/// The resource types, then each window's usage table and the whole run's.
fn render_usage(out: &mut String, report: &SimReport) {
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
            out,
            &format!("{}-{}", clock(w.start_s), clock(w.end_s)),
            &w.usage,
        );
    }
    table(out, "whole run", &report.totals);
}

/// Debts per (project, resource type) and each project's outcome at the end.
fn render_debts(out: &mut String, report: &SimReport) {
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
}

/// The backoff events, the first few of them in full.
fn render_events(out: &mut String, report: &SimReport) {
    const SHOWN: usize = 40;
    let _ = writeln!(out, "\nbackoff events: {}", report.backoff_events.len());
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
}

/// A simulated time as `HH:MM:SS`, with days in front when there are any.
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
