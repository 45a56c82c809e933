//! slurmrestd's answers: which requests one fetch makes, what was wrong with an answer,
//! the envelope every answer carries (`meta`, `errors`), and the readers of the nodes and
//! jobs sections.

use serde_json::Value;

use crate::snapshot::SourceWarning;
use crate::sources::gres::{self, Gres};
use crate::sources::json::{At, ShapeError};

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

/// Checks slurmrestd's envelope (`meta`, `errors`) and returns Slurm's release.
fn envelope(answer: SlurmAnswerKind, doc: &Value) -> Result<String, SlurmParseError> {
    let fail = |error| SlurmParseError { answer, error };
    let Value::Object(map) = doc else {
        return Err(fail(SlurmAnswerError::NotSlurm(format!(
            "it answered {}, not slurmrestd's {{\"meta\": ..., \"errors\": ...}} object",
            crate::sources::json::describe(doc)
        ))));
    };
    if !map.contains_key("meta") {
        return Err(fail(SlurmAnswerError::NotSlurm(
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
        return Err(fail(SlurmAnswerError::Failed(errors.join("; "))));
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
pub(super) struct SlurmNode {
    pub(super) name: String,
    pub(super) state: String,
    pub(super) flags: Vec<String>,
    pub(super) reason: String,
    pub(super) cpus: Option<u32>,
    pub(super) alloc_cpus: u32,
    pub(super) gres: Vec<Gres>,
}

/// A GRES string, read.
fn gres_at(at: At<'_>) -> Result<Vec<Gres>, ShapeError> {
    let text = at.str()?;
    gres::parse(&text).map_err(|e| ShapeError {
        path: at.path(),
        problem: format!("expected a Slurm GRES string, found {e}"),
    })
}

/// Reads the nodes answer: Slurm's release and the nodes. A node that cannot be read is
/// skipped, its error in `skipped`; the answer fails when the list cannot be read, or
/// nodes are listed and none of them can be.
pub(super) fn parse_nodes(
    doc: &Value,
    skipped: &mut Vec<ShapeError>,
) -> Result<(String, Vec<SlurmNode>), SlurmParseError> {
    let release = envelope(SlurmAnswerKind::Nodes, doc)?;
    let mut bad = Vec::new();
    let nodes = At::root(doc)
        .field("nodes", |ns| {
            ns.each_or_skip(&mut bad, |n| {
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
        .map_err(shape(SlurmAnswerKind::Nodes))?;
    if nodes.is_empty()
        && let Some(first) = bad.first()
    {
        return Err(shape(SlurmAnswerKind::Nodes)(first.clone()));
    }
    skipped.extend(bad);
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

/// Reads the jobs answer; a job that cannot be read is skipped, its error in `skipped`.
pub(super) fn parse_jobs(
    doc: &Value,
    skipped: &mut Vec<ShapeError>,
) -> Result<Vec<SlurmJob>, SlurmParseError> {
    envelope(SlurmAnswerKind::Jobs, doc)?;
    At::root(doc)
        .field("jobs", |js| {
            js.each_or_skip(skipped, |j| {
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
        .map_err(shape(SlurmAnswerKind::Jobs))
}
