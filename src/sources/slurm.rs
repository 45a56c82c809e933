//! A Slurm cluster read through slurmrestd (OpenAPI `v0.0.38`, Slurm 22.05), as a
//! read-only console source.
//!
//! Two GETs per fetch: `/slurm/v0.0.38/nodes` and `/slurm/v0.0.38/jobs`. slurmrestd is
//! reached over its unix socket (`unix:/path`, `rest_auth/local`: the peer's uid is the
//! identity) or over HTTP with a JWT (`X-SLURM-USER-TOKEN`). In the snapshot:
//! - each node is a node; each GPU of its `gpu` GRES is a device (indexes in the order the
//!   node lists its GPU types), with the node's shards split evenly over its GPUs, as Slurm
//!   does for a shard `Count` without `File`; node state maps to health and cordon (down
//!   and not responding are unhealthy, drained/draining/down are cordoned);
//! - each running job holding GPUs or shards is a placed claim per node (the user as holder,
//!   the account as project, partition and job id as labels) with whole GPUs at their
//!   `IDX:` indexes and shards as that part of their GPU;
//! - each pending job asking for GPUs or shards is a pending claim with Slurm's reason.
//!
//! Slurm owns the GPUs: every action is refused (`refuse_action`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::error::SourceError;
use super::gres::{self, Gres};
use super::http::{Auth, JsonClient, PeerKind};
use super::json::{At, ShapeError};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::ids::ClaimId;
use crate::placement::{DeviceShare, Health};
use crate::request::{ClaimRequest, GpuForm};
use crate::snapshot::{
    ClaimState, ClaimView, DeviceView, EndpointInfo, NodeView, ProjectView, ResourceView,
    SCHEMA_VERSION, Snapshot,
};
use crate::units::{Bytes, SLOTS_PER_DEVICE, Slots, UNITS_PER_DEVICE, Units};

/// The OpenAPI version this source reads.
pub const API: &str = "v0.0.38";

/// How to reach slurmrestd.
#[derive(Clone, PartialEq)]
pub struct SlurmConfig {
    /// Display name of the endpoint; the cluster's address when empty.
    pub name: String,
    /// `unix:/path/to/slurmrestd.sock`, or `http://host:6820`.
    pub url: String,
    /// A JWT (`scontrol token`) for HTTP; not needed over the unix socket.
    pub token: Option<String>,
    /// The user the token belongs to, sent as `X-SLURM-USER-NAME`.
    pub user: Option<String>,
    /// Deadline for a whole fetch.
    pub timeout: Duration,
}

impl std::fmt::Debug for SlurmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlurmConfig")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| ".."))
            .field("user", &self.user)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl SlurmConfig {
    /// A config with no token and a 5-second timeout.
    pub fn new(url: impl Into<String>) -> SlurmConfig {
        SlurmConfig {
            name: String::new(),
            url: url.into(),
            token: None,
            user: None,
            timeout: Duration::from_secs(5),
        }
    }
}

/// What the console shows when an operator tries to act on a Slurm source.
pub fn refuse_action(action: &str) -> String {
    format!(
        "Slurm owns these GPUs; gpuboard cannot {action} here. Use Slurm itself: scancel or \
         scontrol update for jobs, scontrol update NodeName=... State=DRAIN/RESUME for nodes."
    )
}

/// slurmrestd's answers one fetch reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlurmAnswers {
    /// `/slurm/v0.0.38/nodes`.
    pub nodes: Value,
    /// `/slurm/v0.0.38/jobs`.
    pub jobs: Value,
}

/// Which answer something was wrong with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The nodes.
    Nodes,
    /// The jobs.
    Jobs,
}

impl Answer {
    /// The request path, relative to slurmrestd's root.
    pub fn path(self) -> String {
        match self {
            Answer::Nodes => format!("slurm/{API}/nodes"),
            Answer::Jobs => format!("slurm/{API}/jobs"),
        }
    }
}

/// What was wrong with one answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnswerError {
    /// It is not what slurmrestd answers.
    NotSlurm(String),
    /// slurmrestd listed errors.
    Failed(String),
    /// It has the wrong shape, or a GRES string in it could not be read.
    Shape(String),
}

/// The answer and what was wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{answer:?}: {error:?}")]
pub struct SlurmParseError {
    /// Which answer.
    pub answer: Answer,
    /// What was wrong.
    pub error: AnswerError,
}

fn shape(answer: Answer) -> impl Fn(ShapeError) -> SlurmParseError {
    move |e| SlurmParseError {
        answer,
        error: AnswerError::Shape(e.to_string()),
    }
}

/// Checks slurmrestd's envelope (`meta`, `errors`) and returns Slurm's release.
fn envelope(answer: Answer, doc: &Value) -> Result<String, SlurmParseError> {
    let fail = |error| SlurmParseError { answer, error };
    let Value::Object(map) = doc else {
        return Err(fail(AnswerError::NotSlurm(format!(
            "it answered {}, not slurmrestd's {{\"meta\": ..., \"errors\": ...}} object",
            At::root(doc).wrong("").found
        ))));
    };
    if !map.contains_key("meta") {
        return Err(fail(AnswerError::NotSlurm(
            "its JSON has no `meta`, which every slurmrestd answer carries".to_string(),
        )));
    }
    let root = At::root(doc);
    let errors = root
        .opt_field("errors", |e| {
            e.each(|err| {
                let text = err.opt_field("description", |d| d.str())?;
                let code = err.opt_field("error", |d| d.str())?;
                Ok(match (text, code) {
                    (Some(t), Some(c)) if !t.is_empty() => format!("{t} ({c})"),
                    (Some(t), _) if !t.is_empty() => t,
                    (_, Some(c)) => c,
                    _ => "an error without a description".to_string(),
                })
            })
        })
        .map_err(shape(answer))?
        .unwrap_or_default();
    if !errors.is_empty() {
        return Err(fail(AnswerError::Failed(errors.join("; "))));
    }
    let release = root
        .field("meta", |m| {
            m.opt_field("Slurm", |s| s.opt_field("release", |r| r.str()))
        })
        .map_err(shape(answer))?
        .flatten()
        .unwrap_or_default();
    Ok(release)
}

/// A node as slurmrestd reports it.
#[derive(Clone, Debug)]
struct SlurmNode {
    name: String,
    state: String,
    flags: Vec<String>,
    reason: String,
    cpus: Option<u32>,
    alloc_cpus: u32,
    gres: Vec<Gres>,
}

fn gres_at(at: At<'_>) -> Result<Vec<Gres>, ShapeError> {
    let text = at.str()?;
    gres::parse(&text).map_err(|e| ShapeError {
        path: at.path(),
        expected: "a Slurm GRES string",
        found: e.to_string(),
    })
}

fn parse_nodes(doc: &Value) -> Result<(String, Vec<SlurmNode>), SlurmParseError> {
    let release = envelope(Answer::Nodes, doc)?;
    let nodes = At::root(doc)
        .field("nodes", |ns| {
            ns.each(|n| {
                Ok(SlurmNode {
                    name: n.field("name", |v| v.str())?,
                    state: n
                        .opt_field("state", |v| v.str())?
                        .unwrap_or_default()
                        .to_ascii_lowercase(),
                    flags: n
                        .opt_field("state_flags", |f| f.each(|x| x.str()))?
                        .unwrap_or_default(),
                    reason: n.opt_field("reason", |v| v.str())?.unwrap_or_default(),
                    cpus: n.opt_field("cpus", |v| v.u32())?,
                    alloc_cpus: n.opt_field("alloc_cpus", |v| v.u32())?.unwrap_or(0),
                    gres: n.opt_field("gres", gres_at)?.unwrap_or_default(),
                })
            })
        })
        .map_err(shape(Answer::Nodes))?;
    Ok((release, nodes))
}

#[derive(Clone, Debug)]
struct SlurmJob {
    id: u64,
    name: String,
    user: String,
    account: String,
    partition: String,
    state: String,
    reason: String,
    /// The request, in the job's TRES spelling (`gres:gpu:a100:2`).
    wants: String,
    /// (node, its GRES detail), in allocation order.
    held: Vec<(String, Vec<Gres>)>,
    start_s: u64,
    submit_s: u64,
}

fn parse_jobs(doc: &Value) -> Result<Vec<SlurmJob>, SlurmParseError> {
    envelope(Answer::Jobs, doc)?;
    At::root(doc)
        .field("jobs", |js| {
            js.each(|j| {
                let details = j
                    .opt_field("gres_detail", |d| d.each(gres_at))?
                    .unwrap_or_default();
                let alloc_nodes: Vec<String> = j
                    .opt_field("job_resources", |r| {
                        r.opt_field("allocated_nodes", |ns| {
                            ns.each(|n| n.field("nodename", |v| v.str()))
                        })
                    })?
                    .flatten()
                    .unwrap_or_default();
                let single = j.opt_field("nodes", |v| v.str())?.unwrap_or_default();
                let held = details
                    .into_iter()
                    .enumerate()
                    .map(|(i, g)| {
                        let node = alloc_nodes
                            .get(i)
                            .cloned()
                            .unwrap_or_else(|| single.clone());
                        (node, g)
                    })
                    .collect();
                let mut wants = Vec::new();
                for key in [
                    "tres_per_node",
                    "tres_per_job",
                    "tres_per_socket",
                    "tres_per_task",
                ] {
                    if let Some(t) = j.opt_field(key, |v| v.str())?
                        && !t.is_empty()
                    {
                        wants.push(t);
                    }
                }
                let secs = |key: &'static str| -> Result<u64, ShapeError> {
                    Ok(j.opt_field(key, |v| v.f64())?
                        .map_or(0, |s| s.max(0.0) as u64))
                };
                Ok(SlurmJob {
                    id: j.field("job_id", |v| v.f64())?.max(0.0) as u64,
                    name: j.opt_field("name", |v| v.str())?.unwrap_or_default(),
                    user: j.opt_field("user_name", |v| v.str())?.unwrap_or_default(),
                    account: j.opt_field("account", |v| v.str())?.unwrap_or_default(),
                    partition: j.opt_field("partition", |v| v.str())?.unwrap_or_default(),
                    state: j.opt_field("job_state", |v| v.str())?.unwrap_or_default(),
                    reason: j
                        .opt_field("state_reason", |v| v.str())?
                        .unwrap_or_default(),
                    wants: wants.join(","),
                    held,
                    start_s: secs("start_time")?,
                    submit_s: secs("submit_time")?,
                })
            })
        })
        .map_err(shape(Answer::Jobs))
}

/// GPUs and shards a request asks for per node: (gpus, shards, type).
fn wanted(wants: &str) -> (u64, u64, Option<String>) {
    let mut out = (0, 0, None);
    for part in wants.split(',') {
        let Ok(items) = gres::parse(part) else {
            continue;
        };
        for g in items {
            match g.name.as_str() {
                "gpu" => out.0 += g.count,
                "shard" => out.1 += g.count,
                _ => continue,
            }
            if out.2.is_none() {
                out.2 = g.kind.clone();
            }
        }
    }
    out
}

/// Slurm's pending reasons, explained.
fn explain(reason: &str) -> String {
    let why = match reason {
        "Resources" => "waiting for resources to become free",
        "Priority" => "higher-priority jobs are ahead of it",
        "Dependency" => "waiting for a job it depends on",
        "DependencyNeverSatisfied" => "a job it depends on failed; it will never start",
        "ReqNodeNotAvail" => "a node it needs is unavailable (down, drained or reserved)",
        "PartitionDown" => "its partition is down",
        "PartitionInactive" => "its partition is inactive",
        "PartitionNodeLimit" | "PartitionConfig" => "it asks for more than its partition allows",
        "BadConstraints" => "no node could ever satisfy it",
        "JobHeldUser" => "held by its user",
        "JobHeldAdmin" => "held by an administrator",
        "BeginTime" => "its start time has not come",
        "Reservation" => "waiting for its reservation",
        "None" | "" => "not yet considered by the scheduler",
        r if r.starts_with("QOS") || r.starts_with("Assoc") => "a limit of its QOS or account",
        _ => "",
    };
    if why.is_empty() {
        format!("Slurm: {reason}")
    } else {
        format!("Slurm: {reason} ({why})")
    }
}

fn claim_id(job: u64, node: &str) -> ClaimId {
    ClaimId::of_name(&format!("slurm-job/{job}/{node}"))
}

fn u32_of(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A node's GPUs: (model per index, shards per GPU).
fn gpus_of(node: &SlurmNode) -> (Vec<String>, u64) {
    let mut models = Vec::new();
    let mut shards = 0;
    for g in &node.gres {
        match g.name.as_str() {
            "gpu" => {
                let model = g.kind.clone().unwrap_or_else(|| "gpu".to_string());
                models.extend(std::iter::repeat_n(model, g.count.min(1024) as usize));
            }
            "shard" => shards += g.count,
            _ => {}
        }
    }
    let per_gpu = if models.is_empty() {
        0
    } else {
        shards / models.len() as u64
    };
    (models, per_gpu)
}

fn project_of(account: &str) -> String {
    if account.is_empty() || account == "(null)" {
        "(no account)".to_string()
    } else {
        account.to_string()
    }
}

/// Turns slurmrestd's answers into a snapshot. `name` is the endpoint's display name.
pub fn snapshot(
    answers: &SlurmAnswers,
    name: &str,
    taken_at: Timestamp,
) -> Result<Snapshot, SlurmParseError> {
    let (release, slurm_nodes) = parse_nodes(&answers.nodes)?;
    let jobs = parse_jobs(&answers.jobs)?;
    let gpus: BTreeMap<&str, (Vec<String>, u64)> = slurm_nodes
        .iter()
        .map(|n| (n.name.as_str(), gpus_of(n)))
        .collect();

    let mut claims = Vec::new();
    for j in &jobs {
        let labels = BTreeMap::from([
            ("slurm.job_id".to_string(), j.id.to_string()),
            ("slurm.name".to_string(), j.name.clone()),
            ("slurm.partition".to_string(), j.partition.clone()),
        ]);
        let (want_gpus, want_shards, want_type) = wanted(&j.wants);
        let request = |form: GpuForm, wait: bool| ClaimRequest {
            gpu: Some(form),
            accelerator_type: want_type.clone(),
            cpus: None,
            node: None,
            devices: None,
            project: project_of(&j.account),
            holder: Some(j.user.clone()),
            ttl: None,
            pid: None,
            expected_duration: None,
            labels: labels.clone(),
            wait,
        };
        let form_text = |detail: &str| {
            format!(
                "job {} {} [{}]: {detail}",
                j.id,
                j.name,
                if j.partition.is_empty() {
                    "?"
                } else {
                    &j.partition
                }
            )
        };
        if j.state == "PENDING" {
            if want_gpus == 0 && want_shards == 0 {
                continue;
            }
            let form = if want_gpus > 0 {
                GpuForm::Vendor {
                    count: u32_of(want_gpus),
                }
            } else {
                GpuForm::RayFraction {
                    fraction: Units(u32_of(want_shards)),
                }
            };
            claims.push(ClaimView {
                id: claim_id(j.id, ""),
                state: ClaimState::Pending,
                project: project_of(&j.account),
                holder: Some(j.user.clone()),
                form: form_text(&j.wants),
                request: request(form, true),
                node: None,
                shares: Vec::new(),
                memory_reserved: Bytes(0),
                compute_reserved: Units(0),
                memory_used: None,
                over_limit: false,
                idle: false,
                created_at: Timestamp(j.submit_s.saturating_mul(1000)),
                lease_expires_at: None,
                pending_reasons: vec![explain(&j.reason)],
                infeasible: j.reason == "BadConstraints" || j.reason == "DependencyNeverSatisfied",
            });
            continue;
        }
        for (node, held) in &j.held {
            let per_gpu = gpus.get(node.as_str()).map_or(0, |(_, s)| *s);
            let mut shares: BTreeMap<u32, (Units, Slots)> = BTreeMap::new();
            let mut whole = 0u64;
            let mut shard_count = 0u64;
            for g in held {
                let Some(idx) = &g.indexes else {
                    continue;
                };
                match g.name.as_str() {
                    "gpu" => {
                        for &i in idx {
                            shares.insert(i, (Units::FULL, Slots(SLOTS_PER_DEVICE)));
                            whole += 1;
                        }
                    }
                    "shard" if !idx.is_empty() => {
                        shard_count += g.count;
                        // Shards over several GPUs: Slurm spreads them evenly.
                        let n = idx.len() as u64;
                        for (k, &i) in idx.iter().enumerate() {
                            let here = g.count / n + u64::from((k as u64) < g.count % n);
                            // Unknown shards per GPU (none configured): no compute counted.
                            let compute = u64::from(UNITS_PER_DEVICE)
                                .saturating_mul(here)
                                .checked_div(per_gpu)
                                .map_or(Units(0), |u| {
                                    Units(u32_of(u.min(u64::from(UNITS_PER_DEVICE))))
                                });
                            let e = shares.entry(i).or_insert((Units(0), Slots(0)));
                            e.0 += compute;
                            e.1 += Slots(u32_of(here.min(u64::from(SLOTS_PER_DEVICE))));
                        }
                    }
                    _ => {}
                }
            }
            if shares.is_empty() {
                continue;
            }
            let shares: Vec<DeviceShare> = shares
                .into_iter()
                .map(|(device, (compute, slots))| DeviceShare {
                    device,
                    memory: Bytes(0),
                    compute,
                    slots,
                })
                .collect();
            let form = if whole > 0 {
                GpuForm::Vendor {
                    count: u32_of(whole),
                }
            } else {
                GpuForm::RayFraction {
                    fraction: shares.iter().fold(Units(0), |a, s| a + s.compute),
                }
            };
            let detail: Vec<String> = held.iter().map(show_gres).collect();
            let detail = if shard_count > 0 && per_gpu > 0 {
                format!("{} ({per_gpu} shards per GPU)", detail.join(","))
            } else {
                detail.join(",")
            };
            claims.push(ClaimView {
                id: claim_id(j.id, node),
                state: ClaimState::Placed,
                project: project_of(&j.account),
                holder: Some(j.user.clone()),
                form: form_text(&detail),
                request: request(form, false),
                node: Some(node.clone()),
                compute_reserved: shares.iter().fold(Units(0), |a, s| a + s.compute),
                shares,
                memory_reserved: Bytes(0),
                memory_used: None,
                over_limit: false,
                idle: false,
                created_at: Timestamp(j.start_s.saturating_mul(1000)),
                lease_expires_at: None,
                pending_reasons: Vec::new(),
                infeasible: false,
            });
        }
    }

    let mut nodes = Vec::new();
    let mut resources: BTreeMap<String, ResourceView> = BTreeMap::new();
    for n in &slurm_nodes {
        let (models, _) = gpus.get(n.name.as_str()).cloned().unwrap_or_default();
        let drain = n.flags.iter().any(|f| f == "DRAIN");
        let not_responding = n.flags.iter().any(|f| f == "NOT_RESPONDING");
        let base = n.state.as_str();
        let shown = match (base, drain) {
            ("allocated" | "mixed" | "completing", true) => "draining".to_string(),
            ("idle", true) => "drained".to_string(),
            (s, _) => s.to_string(),
        };
        let why = if n.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", n.reason)
        };
        let health = if matches!(base, "down" | "fail" | "failing" | "unknown") || not_responding {
            let nr = if not_responding {
                ", not responding"
            } else {
                ""
            };
            Health::Unhealthy(format!("Slurm node {shown}{nr}{why}"))
        } else {
            Health::Healthy
        };
        let cordoned = drain || matches!(base, "down" | "drained" | "fail" | "future" | "maint");
        let mut devices: Vec<DeviceView> = models
            .iter()
            .enumerate()
            .map(|(i, model)| DeviceView {
                index: u32_of(i as u64),
                model: model.clone(),
                compute_free: Units::FULL,
                slots_free: Slots::FULL,
                cordoned,
                health: health.clone(),
                ..DeviceView::default()
            })
            .collect();
        for c in claims
            .iter()
            .filter(|c| c.node.as_deref() == Some(n.name.as_str()))
        {
            for s in &c.shares {
                if let Some(d) = devices.get_mut(s.device as usize) {
                    d.compute_allocated = (d.compute_allocated + s.compute).min(Units::FULL);
                    d.compute_free = Units::FULL - d.compute_allocated;
                    d.slots_allocated = (d.slots_allocated + s.slots).min(Slots::FULL);
                    d.slots_free = Slots::FULL - d.slots_allocated;
                    d.holders.push(c.id);
                }
            }
        }
        for d in &devices {
            let r = resources
                .entry(d.model.clone())
                .or_insert_with(|| ResourceView {
                    name: d.model.clone(),
                    speed: 1.0,
                    ..ResourceView::default()
                });
            r.instances += 1.0;
            if d.holders.is_empty() && !d.cordoned {
                r.idle += 1.0;
            }
        }
        nodes.push(NodeView {
            name: n.name.clone(),
            cpus_milli: n.cpus.map(|c| u64::from(c) * 1000),
            cpus_allocated_milli: u64::from(n.alloc_cpus) * 1000,
            devices,
        });
    }

    let mut projects: BTreeMap<String, ProjectView> = BTreeMap::new();
    for c in &claims {
        let p = projects
            .entry(c.project.clone())
            .or_insert_with(|| ProjectView {
                name: c.project.clone(),
                share: crate::scheduler::DEFAULT_SHARE,
                ..ProjectView::default()
            });
        match c.state {
            ClaimState::Placed => p.running += 1,
            ClaimState::Pending => p.pending += 1,
        }
    }
    claims.sort_by(|a, b| {
        (
            a.state == ClaimState::Pending,
            &a.node,
            a.shares.first().map(|s| s.device),
            a.id,
        )
            .cmp(&(
                b.state == ClaimState::Pending,
                &b.node,
                b.shares.first().map(|s| s.device),
                b.id,
            ))
    });
    Ok(Snapshot {
        schema: SCHEMA_VERSION,
        endpoint: EndpointInfo::engine(name, "slurm", format!("slurm {release}")),
        revision: 0,
        taken_at,
        nodes,
        claims,
        projects: projects.into_values().collect(),
        resources: resources.into_values().collect(),
        ..Snapshot::default()
    })
}

fn show_gres(g: &Gres) -> String {
    let mut s = g.name.clone();
    if let Some(k) = &g.kind {
        s.push(':');
        s.push_str(k);
    }
    s.push_str(&format!(":{}", g.count));
    if let Some(idx) = &g.indexes {
        let list: Vec<String> = idx.iter().map(u32::to_string).collect();
        s.push_str(&format!("(IDX:{})", list.join(",")));
    }
    s
}

/// A Slurm cluster, through slurmrestd, as a console source.
#[derive(Clone)]
pub struct SlurmSource {
    config: SlurmConfig,
    client: JsonClient,
    socket: Option<PathBuf>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SlurmSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlurmSource")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl SlurmSource {
    /// A source reading the slurmrestd in `config`, on the wall clock.
    pub fn new(config: SlurmConfig) -> Result<SlurmSource, SourceError> {
        SlurmSource::with_clock(config, Arc::new(SystemClock))
    }

    /// A source on an injected clock (tests).
    pub fn with_clock(
        config: SlurmConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<SlurmSource, SourceError> {
        let auth = config.token.clone().map(|token| Auth::SlurmToken {
            user: config.user.clone(),
            token,
        });
        let url = config.url.trim();
        let (client, socket) = match url.strip_prefix("unix:") {
            Some(path) => {
                let path = PathBuf::from(path);
                (
                    JsonClient::unix(&path, auth, config.timeout, PeerKind::Slurm)?,
                    Some(path),
                )
            }
            None => (
                JsonClient::new(url, auth, config.timeout, PeerKind::Slurm)?,
                None,
            ),
        };
        Ok(SlurmSource {
            config,
            client,
            socket,
            clock,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SlurmConfig {
        &self.config
    }

    /// Where requests go, for messages: the socket, or the URL.
    fn shown(&self) -> String {
        match &self.socket {
            Some(p) => format!("unix:{}", p.display()),
            None => self.client.base().to_string(),
        }
    }

    /// Reads slurmrestd's raw answers within the timeout.
    pub async fn fetch_answers(&self) -> Result<SlurmAnswers, SourceError> {
        let all = async {
            Ok::<_, SourceError>(SlurmAnswers {
                nodes: self.get(Answer::Nodes).await?,
                jobs: self.get(Answer::Jobs).await?,
            })
        };
        tokio::time::timeout(self.config.timeout, all)
            .await
            .map_err(|_| SourceError::Timeout {
                url: self.shown(),
                timeout: self.config.timeout,
            })?
    }

    /// Reads slurmrestd and turns its answers into a snapshot.
    pub async fn fetch(&self) -> Result<Snapshot, SourceError> {
        let answers = self.fetch_answers().await?;
        let name = if self.config.name.is_empty() {
            self.shown()
        } else {
            self.config.name.clone()
        };
        snapshot(&answers, &name, self.clock.now()).map_err(|e| {
            let url = format!("{}{}", self.shown(), e.answer.path());
            match e.error {
                AnswerError::NotSlurm(why) => SourceError::NotSlurm { url, why },
                AnswerError::Failed(message) => SourceError::Peer {
                    url,
                    peer: "slurmrestd",
                    message,
                },
                AnswerError::Shape(what) => SourceError::Decode { url, what },
            }
        })
    }

    async fn get(&self, answer: Answer) -> Result<Value, SourceError> {
        let url = self.client.url(&answer.path(), &[])?;
        let result = self.client.get_json(&url).await;
        // Over the socket, name the socket rather than the placeholder host.
        match (&self.socket, result) {
            (Some(_), Err(e)) => Err(self.relabel(e, &answer)),
            (_, r) => r,
        }
    }

    fn relabel(&self, e: SourceError, answer: &Answer) -> SourceError {
        let url = format!("{}/{}", self.shown(), answer.path());
        match e {
            SourceError::Refused { peer, .. } => SourceError::Refused { url, peer },
            SourceError::Unreachable { detail, .. } => SourceError::Unreachable { url, detail },
            SourceError::Timeout { timeout, .. } => SourceError::Timeout { url, timeout },
            SourceError::Unauthorized {
                status, message, ..
            } => SourceError::Unauthorized {
                url,
                status,
                message,
            },
            SourceError::NotSlurm { why, .. } => SourceError::NotSlurm { url, why },
            SourceError::Http {
                status, message, ..
            } => SourceError::Http {
                url,
                status,
                message,
            },
            SourceError::Decode { what, .. } => SourceError::Decode { url, what },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_from_job_tres() {
        assert_eq!(wanted("gres:gpu:a100:3"), (3, 0, Some("a100".into())));
        assert_eq!(wanted("gres:shard:8"), (0, 8, None));
        assert_eq!(
            wanted("gres:gpu:1,gres:shard:a100:2"),
            (1, 2, Some("a100".into()))
        );
        assert_eq!(wanted(""), (0, 0, None));
    }

    #[test]
    fn reasons_are_explained() {
        assert_eq!(
            explain("Resources"),
            "Slurm: Resources (waiting for resources to become free)"
        );
        assert_eq!(explain("Odd"), "Slurm: Odd");
        assert!(explain("QOSMaxGRESPerUser").contains("QOS"));
    }

    #[test]
    fn refusal_says_slurm_owns_the_gpus() {
        assert!(refuse_action("move claim 3").starts_with("Slurm owns these GPUs"));
    }
}
