//! Claim requests: the four request forms of docs/design.md#2-request-forms (Ray fraction, Ray
//! memory, Koordinator share, vendor whole GPUs), read from JSON or TOML under both
//! Kubernetes-style and Ray-style names, mutated as the Koordinator webhook does, and
//! validated against the ten rules. Every rejection names its rule and what is allowed.
//!
//! Where things live: `form` (the four GPU forms and their per-device normalization),
//! `rules` (the rules and the error that names them), `parse` (field names, JSON and
//! TOML), `values` (readers for one field's value), `labels` (rule 10), `validate` (mutation, the rules
//! between fields, and which form a request is). Everything public is re-exported here:
//! use `crate::request::X`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::units::Bytes;

mod accelerator;
mod form;
mod labels;
mod parse;
mod rules;
mod validate;
mod values;

#[cfg(test)]
mod tests;

pub use accelerator::{AcceleratorWanted, stated_memory_gb};
pub use form::{GpuForm, PerDevice, ShareMemory, TooLarge};
pub use rules::{RequestError, Rule};

/// The most devices one claim may name (rule 7).
pub const MAX_DEVICES: u32 = 1024;
/// The longest lease or expected duration accepted: one year.
pub const MAX_SECONDS: u64 = 366 * 86_400;

/// CPU in thousandths of a core (Kubernetes `500m`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Milli(pub u64);

impl fmt::Display for Milli {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(1000) {
            write!(f, "{}", self.0 / 1000)
        } else {
            write!(f, "{}m", self.0)
        }
    }
}

/// A validated claim request: at most one GPU form, plus the fields every form may carry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRequest {
    /// The GPU request; `None` is a CPU-only claim.
    pub gpu: Option<GpuForm>,
    /// Only devices of this accelerator type (`NVIDIA_A100`, `A100`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator_type: Option<String>,
    /// CPU reserved on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Milli>,
    /// Only this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Only these device indexes (on `node`, or on whichever node has them all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<u32>>,
    /// The project accounted for the claim.
    pub project: String,
    /// Who holds it (a user, a job id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// Lease length in seconds; the holder renews it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
    /// A local process that owns the claim; it is released when the process is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// How long the work is expected to run, in seconds (for shortfall estimates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_duration: Option<u64>,
    /// Free-form labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Queue as pending when it does not fit now, instead of refusing.
    #[serde(default)]
    pub wait: bool,
}

/// The project a claim is accounted to when it names none.
pub const DEFAULT_PROJECT: &str = "default";

impl ClaimRequest {
    /// A short description of what the claim asks for, for tables and logs: its form, and
    /// the constraints it placed on where (`accelerator_type=A10G node=n1 devices=0,1`), so
    /// a waiting claim's "other accelerator type" reasons can be read against what it asked.
    pub fn describe(&self) -> String {
        use std::fmt::Write as _;
        let mut text = match (&self.gpu, self.cpus) {
            (Some(form), Some(c)) => format!("{form} cpus={c}"),
            (Some(form), None) => form.to_string(),
            (None, Some(c)) => format!("cpus={c}"),
            (None, None) => "nothing".to_string(),
        };
        if let Some(t) = &self.accelerator_type {
            let _ = write!(text, " accelerator_type={t}");
        }
        if let Some(n) = &self.node {
            let _ = write!(text, " node={n}");
        }
        if let Some(d) = &self.devices {
            let list: Vec<String> = d.iter().map(u32::to_string).collect();
            let _ = write!(text, " devices={}", list.join(","));
        }
        text
    }

    /// Whose it is, in words for the audit: `project vision, holder alice`.
    pub fn whose(&self) -> String {
        match &self.holder {
            Some(h) => format!("project {}, holder {h}", self.project),
            None => format!("project {}", self.project),
        }
    }

    /// A plain GPU-memory request, as `gpuboard run --memory` makes.
    pub fn memory(memory: Bytes, project: &str) -> ClaimRequest {
        ClaimRequest {
            gpu: Some(GpuForm::RayMemory { memory }),
            accelerator_type: None,
            cpus: None,
            node: None,
            devices: None,
            project: project.to_string(),
            holder: None,
            ttl: None,
            pid: None,
            expected_duration: None,
            labels: BTreeMap::new(),
            wait: false,
        }
    }
}

/// A duration as the request's `ttl` takes it (`100`, `90s`, `10m`, `2h`, `1d`): the one
/// reading of a lease length, for `renew --ttl` as for a claim's.
pub fn parse_seconds(field: &str, text: &str) -> Result<u64, RequestError> {
    values::seconds(field, &serde_json::Value::from(text))
}

/// Normalized accelerator name for matching: `NVIDIA_TESLA_A10G`, `A10G`, `NVIDIA A10G` all give `A10G`;
/// `NVIDIA A100-SXM4-80GB` gives `A100`.
pub fn accelerator_key(name: &str) -> String {
    let upper = name.to_ascii_uppercase();
    let mut rest = upper.trim();
    for prefix in ["NVIDIA", "TESLA", "GEFORCE", "QUADRO"] {
        rest = rest.trim_start_matches(['_', ' ', '-']);
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    rest.trim_start_matches(['_', ' ', '-'])
        .split(['-', ' ', '_'])
        .next()
        .unwrap_or("")
        .to_string()
}
