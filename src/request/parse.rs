//! Reading a request: the field names accepted on the wire (Kubernetes-style and
//! Ray-style), from JSON or TOML, into a [`ClaimRequest`].

use std::collections::BTreeMap;

use serde_json::Value;

use super::labels::label_map;
use super::rules::{out_of_range, reject, wrong_type};
use super::validate::gpu_form;
use super::values::{device_list, integer, milli, name_text, seconds};
use super::{ClaimRequest, DEFAULT_PROJECT, RequestError, Rule};

/// Every field name accepted on the wire, and the canonical field it means.
const FIELDS: &[(&str, Field)] = &[
    ("num_gpus", Field::NumGpus),
    ("gpu_memory", Field::GpuMemory),
    ("_gpu_memory", Field::GpuMemory),
    ("koordinator.sh/gpu-memory", Field::KoordMemory),
    ("gpu-memory", Field::KoordMemory),
    ("koordinator.sh/gpu-memory-ratio", Field::KoordRatio),
    ("gpu-memory-ratio", Field::KoordRatio),
    ("koordinator.sh/gpu-core", Field::KoordCore),
    ("gpu-core", Field::KoordCore),
    ("koordinator.sh/gpu.shared", Field::KoordShared),
    ("gpu.shared", Field::KoordShared),
    ("koordinator.sh/gpu", Field::KoordLegacy),
    ("nvidia.com/gpu", Field::Vendor),
    ("accelerator_type", Field::AcceleratorType),
    ("cpus", Field::Cpus),
    ("num_cpus", Field::Cpus),
    ("cpu", Field::Cpus),
    ("node", Field::Node),
    ("devices", Field::Devices),
    ("project", Field::Project),
    ("holder", Field::Holder),
    ("ttl", Field::Ttl),
    ("pid", Field::Pid),
    ("expected_duration", Field::ExpectedDuration),
    ("labels", Field::Labels),
    ("wait", Field::Wait),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Field {
    NumGpus,
    GpuMemory,
    KoordMemory,
    KoordRatio,
    KoordCore,
    KoordShared,
    KoordLegacy,
    Vendor,
    AcceleratorType,
    Cpus,
    Node,
    Devices,
    Project,
    Holder,
    Ttl,
    Pid,
    ExpectedDuration,
    Labels,
    Wait,
}

fn allowed_fields() -> String {
    FIELDS
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Fields as given: canonical field -> (name used, value).
pub(super) type Given<'a> = BTreeMap<Field, (&'a str, &'a Value)>;

impl ClaimRequest {
    /// Reads a request from a JSON object.
    pub fn from_json(value: &Value) -> Result<ClaimRequest, RequestError> {
        let Value::Object(map) = value else {
            return Err(reject(
                Rule::WrongType,
                None,
                "a claim request must be a JSON object of fields, e.g. {\"gpu_memory\": \"10Gi\"}",
            ));
        };
        let mut given: Given<'_> = BTreeMap::new();
        for (name, value) in map {
            let Some((_, field)) = FIELDS.iter().find(|(n, _)| n == name) else {
                return Err(reject(
                    Rule::UnknownField,
                    Some(name),
                    format!(
                        "unknown field `{name}`; allowed fields: {}",
                        allowed_fields()
                    ),
                ));
            };
            if let Some((first, _)) = given.insert(*field, (name.as_str(), value)) {
                return Err(reject(
                    Rule::UnknownField,
                    Some(name),
                    format!("`{name}` and `{first}` are the same field given twice; give it once"),
                ));
            }
        }
        // JSON null means "not given", as in Kubernetes manifests.
        given.retain(|_, (_, v)| !v.is_null());
        Self::from_given(&given)
    }

    /// Reads a request from TOML text (the same field names as JSON).
    pub fn from_toml(text: &str) -> Result<ClaimRequest, RequestError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| {
            reject(
                Rule::WrongType,
                None,
                format!("request is not valid TOML: {}", e.message()),
            )
        })?;
        let value = serde_json::to_value(table).map_err(|e| {
            reject(
                Rule::WrongType,
                None,
                format!("request cannot be read: {e}"),
            )
        })?;
        Self::from_json(&value)
    }

    fn from_given(given: &Given<'_>) -> Result<ClaimRequest, RequestError> {
        let gpu = gpu_form(given)?;
        let cpus = match given.get(&Field::Cpus) {
            Some(&(name, v)) => Some(milli(name, v)?),
            None => None,
        };
        if gpu.is_none() && cpus.is_none() {
            return Err(reject(
                Rule::OutOfRange,
                None,
                format!(
                    "the request asks for nothing: give one request form (num_gpus, gpu_memory, \
                     gpu-memory/gpu-memory-ratio with gpu.shared, nvidia.com/gpu) or cpus; allowed fields: {}",
                    allowed_fields()
                ),
            ));
        }
        let devices = match given.get(&Field::Devices) {
            Some(&(name, v)) => Some(device_list(name, v)?),
            None => None,
        };
        let labels = match given.get(&Field::Labels) {
            Some(&(name, v)) => label_map(name, v)?,
            None => BTreeMap::new(),
        };
        let project = match given.get(&Field::Project) {
            Some(&(name, v)) => {
                let text = name_text(name, v)?;
                // The fair-share ledger keys accounts by project: same rule at the door.
                crate::fairshare::ProjectName::new(&text)
                    .map_err(|e| reject(Rule::OutOfRange, Some(name), format!("`{name}`: {e}")))?;
                text
            }
            None => DEFAULT_PROJECT.to_string(),
        };
        let wait = match given.get(&Field::Wait) {
            Some(&(_, Value::Bool(b))) => *b,
            Some(&(name, _)) => return Err(wrong_type(name, "true or false")),
            None => false,
        };
        Ok(ClaimRequest {
            gpu,
            accelerator_type: optional(given, Field::AcceleratorType, name_text)?,
            cpus,
            node: optional(given, Field::Node, name_text)?,
            devices,
            project,
            holder: optional(given, Field::Holder, name_text)?,
            ttl: optional(given, Field::Ttl, seconds)?,
            pid: optional(given, Field::Pid, |n, v| {
                let pid = integer(n, v, 1, u64::from(u32::MAX))?;
                u32::try_from(pid).map_err(|_| out_of_range(n, "a process id"))
            })?,
            expected_duration: optional(given, Field::ExpectedDuration, seconds)?,
            labels,
            wait,
        })
    }
}

fn optional<T>(
    given: &Given<'_>,
    field: Field,
    read: impl Fn(&str, &Value) -> Result<T, RequestError>,
) -> Result<Option<T>, RequestError> {
    given
        .get(&field)
        .map(|&(name, v)| read(name, v))
        .transpose()
}
