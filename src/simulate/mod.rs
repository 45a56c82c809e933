//! `gpuboard simulate SCENARIO.toml`: runs the fair-share scheduler on a simulated clock
//! over a scenario (projects and shares, hosts, arriving claims with durations) and
//! reports each project's share of each resource type over time, the debts at the end
//! and the backoff events. The scheduler code is the one the endpoint runs; only the
//! clock and the capacity are simulated.
//!
//! Where things live: the scenario file in `scenario`, the simulated capacity in
//! `hosts`, the loop in `run`, the report and its text in `report`.

mod hosts;
mod report;
mod run;
mod scenario;

use std::path::PathBuf;

use anyhow::Context as _;

pub use hosts::{Hosts, SimHosts};
pub use report::{DebtRow, ProjectOutcome, ResourceSummary, SimReport, Usage, Window, render};
pub use run::{run_scenario, run_with};
pub use scenario::{ClaimStream, HostSpec, ProjectSpec, Scenario, ScenarioError};

/// `gpuboard simulate`.
#[derive(Clone, Debug, clap::Args)]
pub struct SimulateArgs {
    /// The scenario file (TOML; see assets/scenarios/).
    #[arg(required_unless_present = "history")]
    pub scenario: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Instead of the usage report, backtest the forecast of when waiting claims start:
    /// its error against the replay, with durations declared and learned, beside the
    /// baseline "when the soonest lease ends".
    #[arg(long)]
    pub backtest: bool,
    /// With `--backtest`: evaluate only the claims submitted up to this second of the
    /// scenario, the run going on to its end (overrides the scenario's `evaluate_until_s`).
    #[arg(long, value_name = "SECONDS", requires = "backtest")]
    pub evaluate_until: Option<u64>,
    /// With `--backtest`: replay the claims a `gpuboard serve` recorded in this data
    /// directory's `history.sqlite` instead of a scenario.
    #[arg(
        long,
        value_name = "DIR",
        requires = "backtest",
        conflicts_with = "scenario"
    )]
    pub history: Option<PathBuf>,
}

/// The scenario file `args` names, read, and its path as shown.
pub fn read_scenario(args: &SimulateArgs) -> anyhow::Result<(Scenario, String)> {
    let file = args
        .scenario
        .as_ref()
        .context("no scenario file given: name one (see assets/scenarios/)")?;
    let path = file.display().to_string();
    let text = std::fs::read_to_string(file).with_context(|| format!("reading scenario {path}"))?;
    let scenario = toml::from_str(&text).with_context(|| format!("reading scenario {path}"))?;
    Ok((scenario, path))
}

/// Runs `gpuboard simulate`; returns the exit status.
pub fn run(args: SimulateArgs) -> anyhow::Result<i32> {
    let (scenario, path) = read_scenario(&args)?;
    let report = run_scenario(&scenario).with_context(|| format!("running scenario {path}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(0)
}
