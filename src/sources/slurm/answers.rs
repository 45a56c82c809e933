//! slurmrestd's answers: which requests one fetch makes, what was wrong with an answer,
//! the envelope every answer carries (`meta`, `errors`), and the readers of the nodes and
//! jobs sections.

use serde_json::Value;

use crate::snapshot::SourceWarning;
use crate::sources::gres::{self, Gres};
use serde::Deserialize;

use crate::sources::json::{Num, ShapeError, Whole, describe, typed, typed_each, typed_or_skip};

use super::API;

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
pub enum SlurmAnswerKind {
    /// The nodes.
    Nodes,
    /// The jobs.
    Jobs,
}

impl SlurmAnswerKind {
    /// The request path, relative to slurmrestd's root.
    pub fn path(self) -> String {
        match self {
            SlurmAnswerKind::Nodes => format!("slurm/{API}/nodes"),
            SlurmAnswerKind::Jobs => format!("slurm/{API}/jobs"),
        }
    }
}

/// What was wrong with one answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlurmAnswerError {
    /// It is not what slurmrestd answers.
    NotSlurm(String),
    /// slurmrestd listed errors.
    Failed(String),
    /// It has the wrong shape, or a GRES string in it could not be read.
    Shape(ShapeError),
}

/// The answer and what was wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{answer:?}: {error:?}")]
pub struct SlurmParseError {
    /// Which answer.
    pub answer: SlurmAnswerKind,
    /// What was wrong.
    pub error: SlurmAnswerError,
}

impl SlurmParseError {
    /// This error as a warning on the source, leaving out `left_out`.
    pub fn warning(&self, left_out: &str) -> SourceWarning {
        let section = format!("/{}", self.answer.path());
        let (path, found) = match &self.error {
            SlurmAnswerError::Shape(e) => return e.warning(&section, left_out),
            SlurmAnswerError::NotSlurm(why) => ("(root)", why.clone()),
            SlurmAnswerError::Failed(errors) => {
                ("errors", format!("slurmrestd listed errors: {errors}"))
            }
        };
        SourceWarning {
            section,
            path: path.to_string(),
            found,
            left_out: left_out.to_string(),
        }
    }
}

/// Maps a shape error to the answer it was found in.
fn shape(answer: SlurmAnswerKind) -> impl Fn(ShapeError) -> SlurmParseError {
    move |e| SlurmParseError {
        answer,
        error: SlurmAnswerError::Shape(e),
    }
}

/// slurmrestd's envelope: `errors` (`meta` is read by pointer: only its release is used).
#[derive(Deserialize)]
struct Envelope {
    errors: Option<Vec<SlurmErrorEntry>>,
}

/// One of `errors`.
#[derive(Deserialize)]
struct SlurmErrorEntry {
    description: Option<String>,
    /// A string in some releases, a number in others: shown as written.
    error: Option<Value>,
}

/// Checks slurmrestd's envelope (`meta`, `errors`) and returns Slurm's release.
fn envelope(answer: SlurmAnswerKind, doc: &Value) -> Result<String, SlurmParseError> {
    let fail = |error| SlurmParseError { answer, error };
    let Value::Object(map) = doc else {
        return Err(fail(SlurmAnswerError::NotSlurm(format!(
            "it answered {}, not slurmrestd's {{\"meta\": ..., \"errors\": ...}} object",
            describe(doc)
        ))));
    };
    if !map.contains_key("meta") {
        return Err(fail(SlurmAnswerError::NotSlurm(
            "its JSON has no `meta`, which every slurmrestd answer carries".to_string(),
        )));
    }
    let env: Envelope = typed(doc, "").map_err(shape(answer))?;
    let errors: Vec<String> = env
        .errors
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            let code = e.error.map(|c| match c {
                Value::String(s) => s,
                other => other.to_string(),
            });
            match (e.description, code) {
                (Some(t), Some(c)) if !t.is_empty() => format!("{t} ({c})"),
                (Some(t), _) if !t.is_empty() => t,
                (_, Some(c)) => c,
                _ => "an error without a description".to_string(),
            }
        })
        .collect();
    if !errors.is_empty() {
        return Err(fail(SlurmAnswerError::Failed(errors.join("; "))));
    }
    // Only shown: a release of another shape is shown as unknown, never an error.
    Ok(doc
        .pointer("/meta/Slurm/release")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string())
}

/// A node as slurmrestd reports it.
#[derive(Clone, Debug)]
pub(super) struct SlurmNode {
    pub(super) name: String,
    pub(super) state: String,
    pub(super) flags: Vec<String>,
    pub(super) reason: String,
    pub(super) cpus: Option<u32>,
    pub(super) alloc_cpus: u32,
    pub(super) gres: Vec<Gres>,
}

/// A GRES string, read; `at` is where it was.
fn gres_at(text: &str, at: &str) -> Result<Vec<Gres>, ShapeError> {
    gres::parse(text).map_err(|e| ShapeError {
        path: at.to_string(),
        problem: format!("expected a Slurm GRES string, found {e}"),
    })
}

/// The answers' lists, kept raw and read item by item.
#[derive(Deserialize)]
struct Lists {
    nodes: Option<Value>,
    jobs: Option<Value>,
}

/// A list of an answer, read item by item with `read`; a missing list is an error.
fn items<T>(
    answer: SlurmAnswerKind,
    list: Option<Value>,
    key: &str,
    skipped: &mut Vec<ShapeError>,
    mut read: impl FnMut(&Value, &str) -> Result<T, ShapeError>,
) -> Result<Vec<T>, SlurmParseError> {
    let list = list.ok_or_else(|| {
        shape(answer)(ShapeError {
            path: key.to_string(),
            problem: "expected a value, found nothing (missing or null)".to_string(),
        })
    })?;
    let raw: Vec<Value> = typed_each(&list, key, &mut Vec::new()).map_err(shape(answer))?;
    let mut out = Vec::with_capacity(raw.len());
    for (i, v) in raw.iter().enumerate() {
        match read(v, &format!("{key}[{i}]")) {
            Ok(t) => out.push(t),
            Err(e) => skipped.push(e),
        }
    }
    Ok(out)
}

/// A node of the nodes answer, as slurmrestd writes it.
#[derive(Deserialize)]
struct NodeEntry {
    name: String,
    state: Option<String>,
    state_flags: Option<Vec<String>>,
    reason: Option<String>,
    /// Not core: read on their own, so a bad one leaves the node in (`typed_or_skip`).
    cpus: Option<Value>,
    alloc_cpus: Option<Value>,
    gres: Option<String>,
}

/// Reads the nodes answer: Slurm's release and the nodes. A node that cannot be read is
/// skipped, its error in `skipped`; the answer fails when the list cannot be read, or
/// nodes are listed and none of them can be.
pub(super) fn parse_nodes(
    doc: &Value,
    skipped: &mut Vec<ShapeError>,
) -> Result<(String, Vec<SlurmNode>), SlurmParseError> {
    let answer = SlurmAnswerKind::Nodes;
    let release = envelope(answer, doc)?;
    let lists: Lists = typed(doc, "").map_err(shape(answer))?;
    let mut bad = Vec::new();
    let mut field_errors = Vec::new();
    let nodes = items(answer, lists.nodes, "nodes", &mut bad, |v, at| {
        let n: NodeEntry = typed(v, at)?;
        Ok(SlurmNode {
            name: n.name,
            state: n.state.unwrap_or_default().to_ascii_lowercase(),
            flags: n.state_flags.unwrap_or_default(),
            reason: n.reason.unwrap_or_default(),
            cpus: typed_or_skip(n.cpus.as_ref(), &format!("{at}.cpus"), &mut field_errors)
                .map(|Whole(c)| c),
            alloc_cpus: typed_or_skip(
                n.alloc_cpus.as_ref(),
                &format!("{at}.alloc_cpus"),
                &mut field_errors,
            )
            .map_or(0, |Whole(c)| c),
            gres: match &n.gres {
                Some(g) => gres_at(g, &format!("{at}.gres"))?,
                None => Vec::new(),
            },
        })
    })?;
    if nodes.is_empty()
        && let Some(first) = bad.first()
    {
        return Err(shape(answer)(first.clone()));
    }
    skipped.extend(bad);
    skipped.extend(field_errors);
    Ok((release, nodes))
}

/// A job as slurmrestd reports it.
#[derive(Clone, Debug)]
pub(super) struct SlurmJob {
    pub(super) id: u64,
    pub(super) name: String,
    pub(super) user: String,
    pub(super) account: String,
    pub(super) partition: String,
    pub(super) state: String,
    pub(super) reason: String,
    /// The request, in the job's TRES spelling (`gres:gpu:a100:2`).
    pub(super) wants: String,
    /// (node, its GRES detail), in allocation order.
    pub(super) held: Vec<(String, Vec<Gres>)>,
    pub(super) start_s: u64,
    pub(super) submit_s: u64,
}

/// A job of the jobs answer, as slurmrestd writes it.
#[derive(Deserialize)]
struct JobEntry {
    job_id: Num,
    name: Option<String>,
    user_name: Option<String>,
    account: Option<String>,
    partition: Option<String>,
    job_state: Option<String>,
    state_reason: Option<String>,
    gres_detail: Option<Vec<String>>,
    job_resources: Option<JobResources>,
    nodes: Option<String>,
    tres_per_node: Option<String>,
    tres_per_job: Option<String>,
    tres_per_socket: Option<String>,
    tres_per_task: Option<String>,
    start_time: Option<Num>,
    submit_time: Option<Num>,
}

/// Where a job runs.
#[derive(Deserialize)]
struct JobResources {
    allocated_nodes: Option<Vec<AllocatedNode>>,
}

/// One node a job runs on.
#[derive(Deserialize)]
struct AllocatedNode {
    nodename: String,
}

/// Seconds, clamped at zero.
fn secs(n: Option<Num>) -> u64 {
    n.map_or(0, |Num(s)| s.max(0.0) as u64)
}

/// Reads the jobs answer; a job that cannot be read is skipped, its error in `skipped`.
pub(super) fn parse_jobs(
    doc: &Value,
    skipped: &mut Vec<ShapeError>,
) -> Result<Vec<SlurmJob>, SlurmParseError> {
    let answer = SlurmAnswerKind::Jobs;
    envelope(answer, doc)?;
    let lists: Lists = typed(doc, "").map_err(shape(answer))?;
    items(answer, lists.jobs, "jobs", skipped, |v, at| {
        let j: JobEntry = typed(v, at)?;
        let details = j
            .gres_detail
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, g)| gres_at(g, &format!("{at}.gres_detail[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let alloc_nodes: Vec<String> = j
            .job_resources
            .and_then(|r| r.allocated_nodes)
            .unwrap_or_default()
            .into_iter()
            .map(|n| n.nodename)
            .collect();
        let single = j.nodes.unwrap_or_default();
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
        let wants: Vec<String> = [
            j.tres_per_node,
            j.tres_per_job,
            j.tres_per_socket,
            j.tres_per_task,
        ]
        .into_iter()
        .flatten()
        .filter(|t| !t.is_empty())
        .collect();
        Ok(SlurmJob {
            id: j.job_id.0.max(0.0) as u64,
            name: j.name.unwrap_or_default(),
            user: j.user_name.unwrap_or_default(),
            account: j.account.unwrap_or_default(),
            partition: j.partition.unwrap_or_default(),
            state: j.job_state.unwrap_or_default(),
            reason: j.state_reason.unwrap_or_default(),
            wants: wants.join(","),
            held,
            start_s: secs(j.start_time),
            submit_s: secs(j.submit_time),
        })
    })
}
