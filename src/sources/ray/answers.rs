//! The dashboard's answers: which requests one fetch makes, what was wrong with an
//! answer, and the envelopes (`{"result": ..., "data": ...}`, the state API's lists) the
//! readers of each section open.

use serde_json::Value;

use crate::snapshot::SourceWarning;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::sources::json::{ShapeError, describe, typed, typed_each};

/// The dashboard answers one fetch reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RayAnswers {
    /// `/api/version`.
    pub version: Value,
    /// `/nodes?view=summary`.
    pub nodes: Value,
    /// `/api/cluster_status`.
    pub cluster_status: Value,
    /// `/api/v0/tasks` (not finished, not failed, with detail).
    pub tasks: Value,
    /// `/api/v0/actors` (not dead, with detail).
    pub actors: Value,
    /// `/api/v0/placement_groups` (not removed, with detail).
    pub placement_groups: Value,
}

/// Which answer something was wrong with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RayAnswerKind {
    /// `/api/version`.
    Version,
    /// `/nodes?view=summary`.
    Nodes,
    /// `/api/cluster_status`.
    ClusterStatus,
    /// `/api/v0/tasks`.
    Tasks,
    /// `/api/v0/actors`.
    Actors,
    /// `/api/v0/placement_groups`.
    PlacementGroups,
}

impl RayAnswerKind {
    /// Path and query of the request, relative to the dashboard's base address.
    pub fn request(self) -> (&'static str, &'static [(&'static str, &'static str)]) {
        const NOT_DONE: &[(&str, &str)] = &[
            ("detail", "1"),
            ("limit", "10000"),
            ("filter_keys", "state"),
            ("filter_predicates", "!="),
            ("filter_values", "FINISHED"),
            ("filter_keys", "state"),
            ("filter_predicates", "!="),
            ("filter_values", "FAILED"),
        ];
        match self {
            RayAnswerKind::Version => ("api/version", &[]),
            RayAnswerKind::Nodes => ("nodes", &[("view", "summary")]),
            RayAnswerKind::ClusterStatus => ("api/cluster_status", &[]),
            RayAnswerKind::Tasks => ("api/v0/tasks", NOT_DONE),
            RayAnswerKind::Actors => (
                "api/v0/actors",
                &[
                    ("detail", "1"),
                    ("limit", "10000"),
                    ("filter_keys", "state"),
                    ("filter_predicates", "!="),
                    ("filter_values", "DEAD"),
                ],
            ),
            RayAnswerKind::PlacementGroups => (
                "api/v0/placement_groups",
                &[
                    ("detail", "1"),
                    ("limit", "10000"),
                    ("filter_keys", "state"),
                    ("filter_predicates", "!="),
                    ("filter_values", "REMOVED"),
                ],
            ),
        }
    }
}

/// What was wrong with one answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RayAnswerError {
    /// It is not what a Ray dashboard answers.
    NotRay(String),
    /// Ray answered `"result": false` with this message.
    Failed(String),
    /// It has the wrong shape.
    Shape(ShapeError),
}

/// The answer and what was wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{answer:?}: {error:?}")]
pub struct RayParseError {
    /// Which answer.
    pub answer: RayAnswerKind,
    /// What was wrong.
    pub error: RayAnswerError,
}

impl RayParseError {
    /// This error as a warning on the source, leaving out `left_out`.
    pub fn warning(&self, left_out: &str) -> SourceWarning {
        let section = format!("/{}", self.answer.request().0);
        match &self.error {
            RayAnswerError::Shape(e) => e.warning(&section, left_out),
            RayAnswerError::NotRay(why) => SourceWarning {
                section,
                path: "(root)".to_string(),
                found: why.clone(),
                left_out: left_out.to_string(),
            },
            RayAnswerError::Failed(msg) => SourceWarning {
                section,
                path: "result".to_string(),
                found: format!("Ray answered `result: false`: {msg}"),
                left_out: left_out.to_string(),
            },
        }
    }
}

/// Ray's `{"result": true, "msg": ..., "data": ...}` envelope: the data, or why not.
fn envelope(doc: &Value) -> Result<&Value, RayAnswerError> {
    let Value::Object(map) = doc else {
        return Err(RayAnswerError::NotRay(format!(
            "it answered {}, not the dashboard's {{\"result\": ..., \"data\": ...}} object",
            describe(doc)
        )));
    };
    match map.get("result") {
        Some(Value::Bool(true)) => {}
        Some(Value::Bool(false)) => {
            let msg = map
                .get("msg")
                .and_then(Value::as_str)
                .unwrap_or("(no message)");
            return Err(RayAnswerError::Failed(msg.to_string()));
        }
        _ => {
            return Err(RayAnswerError::NotRay(
                "its JSON has no boolean `result`, which every dashboard answer carries"
                    .to_string(),
            ));
        }
    }
    match map.get("data") {
        Some(data @ Value::Object(_)) => Ok(data),
        other => Err(RayAnswerError::Shape(ShapeError {
            path: "data".to_string(),
            problem: format!(
                "expected an object, found {}",
                other.map_or_else(|| "nothing".to_string(), describe)
            ),
        })),
    }
}

/// Maps a shape error to the answer it was found in.
pub(super) fn shape(answer: RayAnswerKind) -> impl Fn(ShapeError) -> RayParseError {
    move |e| RayParseError {
        answer,
        error: RayAnswerError::Shape(e),
    }
}

/// Opens the envelope of `answer` and reads its `data` as `T`.
pub(super) fn in_envelope<T: DeserializeOwned>(
    answer: RayAnswerKind,
    doc: &Value,
) -> Result<T, RayParseError> {
    let data = envelope(doc).map_err(|error| RayParseError { answer, error })?;
    typed(data, "data").map_err(shape(answer))
}

/// The state API's list, under `data.result.result`, read item by item: an item that
/// cannot be read is skipped, its error in `skipped`.
pub(super) fn state_list<T: DeserializeOwned>(
    answer: RayAnswerKind,
    doc: &Value,
    skipped: &mut Vec<ShapeError>,
) -> Result<Vec<T>, RayParseError> {
    /// `data.result` of a state API answer.
    #[derive(Deserialize)]
    struct Data {
        result: Listed,
    }
    /// `data.result.result`: kept raw, read item by item.
    #[derive(Deserialize)]
    struct Listed {
        result: Value,
    }
    let data: Data = in_envelope(answer, doc)?;
    typed_each(&data.result.result, "data.result.result", skipped).map_err(shape(answer))
}

/// Reads `/api/version`: Ray's version, or why this is not a Ray dashboard.
pub fn parse_version(doc: &Value) -> Result<String, RayParseError> {
    let not_ray = |why: &str| RayParseError {
        answer: RayAnswerKind::Version,
        error: RayAnswerError::NotRay(why.to_string()),
    };
    let Value::Object(map) = doc else {
        return Err(not_ray("`/api/version` did not answer a JSON object"));
    };
    match map.get("ray_version") {
        Some(Value::String(v)) if !v.is_empty() => Ok(v.clone()),
        _ => Err(not_ray("`/api/version` has no `ray_version`")),
    }
}
