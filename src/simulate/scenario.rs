//! Scenario files: the hosts, projects and streams of arriving claims a simulation
//! runs, how they are read, and how they turn into resource types and arrivals.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::clock::Timestamp;
use crate::fairshare::{
    FairShareError, LedgerConfig, ProjectName, ResourceDemand, ResourceId, ResourceType, Share,
    Speed, TimestampExt,
};
use crate::units::{UNITS_PER_DEVICE, Units};

/// The most claims a scenario may create.
const MAX_CLAIMS: u64 = 1_000_000;

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
    /// For the forecast backtest (`--backtest`) only: the forecasts of the claims submitted
    /// up to this second are evaluated, while the run goes on to `duration_s`, so that
    /// claims arriving after the window keep its queue as a workload that goes on would
    /// (none evaluated sees the arrivals stop). Unset: every claim of the run.
    #[serde(default)]
    pub evaluate_until_s: Option<u64>,
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

/// A scenario error naming the rule broken.
pub(super) fn invalid(why: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid(why.into())
}

/// One claim of a stream: when it arrives, for which project, where it could run and
/// for how long.
pub(super) struct Arrival {
    pub(super) at: Timestamp,
    pub(super) project: usize,
    pub(super) demand: Vec<ResourceDemand>,
    pub(super) duration: Duration,
}

/// The resource types the hosts have, at their default or configured speeds.
pub(super) fn resource_types(scenario: &Scenario) -> Result<Vec<ResourceType>, ScenarioError> {
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

/// Every claim the streams create, stream by stream, each stream checked first.
pub(super) fn arrivals(
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
        let demand = stream_demand(&which, stream, types, units)?;
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

/// The resource types a stream's claims could run on (`on`), each with `units`.
fn stream_demand(
    which: &str,
    stream: &ClaimStream,
    types: &[ResourceType],
    units: Units,
) -> Result<Vec<ResourceDemand>, ScenarioError> {
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
    Ok(demand)
}
