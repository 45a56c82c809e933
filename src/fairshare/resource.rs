//! Processing resource types (the source's PRSC): the CPU and one type per GPU model,
//! each with a number of instances and a speed.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::FairShareError;
use crate::units::{UNITS_PER_DEVICE, Units};

/// The name of a resource type: `cpu`, or `gpu:MODEL` for one GPU model.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ResourceId(String);

impl ResourceId {
    /// The CPU resource type.
    pub fn cpu() -> ResourceId {
        ResourceId("cpu".to_string())
    }

    /// The resource type of one GPU model (`NVIDIA A100-SXM4-80GB` gives `gpu:NVIDIA A100-SXM4-80GB`).
    pub fn gpu(model: &str) -> Result<ResourceId, FairShareError> {
        ResourceId::parse(&format!("gpu:{}", model.trim()))
    }

    /// Reads `cpu` or `gpu:MODEL` (a non-empty model of printable characters, at most 128).
    pub fn parse(name: &str) -> Result<ResourceId, FairShareError> {
        let bad = || FairShareError::BadResource(name.to_string());
        if name == "cpu" {
            return Ok(ResourceId::cpu());
        }
        let model = name.strip_prefix("gpu:").ok_or_else(bad)?;
        if model.trim().is_empty() || model.len() > 128 || model.chars().any(char::is_control) {
            return Err(bad());
        }
        Ok(ResourceId(name.to_string()))
    }

    /// Whether this is a GPU model (the source serves idle GPUs before idle CPUs).
    pub fn is_gpu(&self) -> bool {
        self.0.starts_with("gpu:")
    }

    /// The GPU model, for a GPU type.
    pub fn model(&self) -> Option<&str> {
        self.0.strip_prefix("gpu:")
    }

    /// The name as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ResourceId {
    type Error = FairShareError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        ResourceId::parse(&value)
    }
}

impl From<ResourceId> for String {
    fn from(value: ResourceId) -> String {
        value.0
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Processing per instance-second, in GFLOPS (FP32 peak for GPUs). Only ratios matter:
/// the overall debt weights each resource's debt by its speed.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Speed(f64);

impl Speed {
    /// A speed; it must be finite and positive.
    pub fn new(gflops: f64) -> Result<Speed, FairShareError> {
        if gflops.is_finite() && gflops > 0.0 && gflops <= 1e12 {
            Ok(Speed(gflops))
        } else {
            Err(FairShareError::BadSpeed(gflops))
        }
    }

    /// GFLOPS per instance.
    pub fn gflops(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for Speed {
    type Error = FairShareError;
    fn try_from(value: f64) -> Result<Self, Self::Error> {
        Speed::new(value)
    }
}

impl From<Speed> for f64 {
    fn from(value: Speed) -> f64 {
        value.0
    }
}

/// Default speed of one CPU core, in GFLOPS.
pub const CPU_CORE_GFLOPS: f64 = 50.0;
/// Default speed of a GPU model not in [`KNOWN_GPUS`], in GFLOPS.
pub const UNKNOWN_GPU_GFLOPS: f64 = 10_000.0;

/// FP32 peak GFLOPS of known GPU models, matched by the tokens of the model name (all
/// tokens present, case-insensitive), most specific first so `A100` is not taken for `A10`.
pub const KNOWN_GPUS: &[(&[&str], f64)] = &[
    (&["H200"], 67_000.0),
    (&["H100", "PCIE"], 51_200.0),
    (&["H100"], 67_000.0),
    (&["GH200"], 67_000.0),
    (&["B200"], 80_000.0),
    (&["A100"], 19_500.0),
    (&["A800"], 19_500.0),
    (&["A40"], 37_400.0),
    (&["A30"], 10_300.0),
    (&["A10G"], 31_200.0),
    (&["A10"], 31_200.0),
    (&["A6000"], 38_700.0),
    (&["L40S"], 91_600.0),
    (&["L40"], 90_500.0),
    (&["L4"], 30_300.0),
    (&["V100"], 15_700.0),
    (&["T4"], 8_100.0),
    (&["P100"], 9_300.0),
    (&["4090"], 82_600.0),
    (&["3090"], 35_600.0),
];

/// The default speed of a resource type: [`CPU_CORE_GFLOPS`] for the CPU, the table for
/// a known GPU model, `None` for an unknown model.
pub fn default_speed(id: &ResourceId) -> Option<Speed> {
    let Some(model) = id.model() else {
        return Some(Speed(CPU_CORE_GFLOPS));
    };
    let tokens: Vec<String> = model
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_ascii_uppercase)
        .collect();
    KNOWN_GPUS
        .iter()
        .find(|(needles, _)| needles.iter().all(|n| tokens.iter().any(|t| t == n)))
        .map(|&(_, gflops)| Speed(gflops))
}

/// One resource type on the endpoint: how many instances it has and how fast each is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResourceType {
    /// Its name.
    pub id: ResourceId,
    /// Devices of this model, or CPU cores.
    pub instances: u32,
    /// Processing per instance-second.
    pub speed: Speed,
}

impl ResourceType {
    /// A resource type at its default speed (the table, or [`UNKNOWN_GPU_GFLOPS`]).
    pub fn new(id: ResourceId, instances: u32) -> ResourceType {
        let speed = default_speed(&id).unwrap_or(Speed(UNKNOWN_GPU_GFLOPS));
        ResourceType {
            id,
            instances,
            speed,
        }
    }

    /// The same type at a configured speed.
    #[must_use]
    pub fn with_speed(mut self, speed: Speed) -> ResourceType {
        self.speed = speed;
        self
    }

    /// All its capacity in units (10 000 per instance).
    pub fn capacity(&self) -> u64 {
        u64::from(self.instances) * u64::from(UNITS_PER_DEVICE)
    }

    /// Whether a claim of `units` could ever run here (it is no larger than the whole type).
    pub fn could_serve(&self, units: Units) -> bool {
        u64::from(units.0) <= self.capacity()
    }
}

/// Units as fractional instances, for the debt arithmetic.
pub(crate) fn instances_of(units: u64) -> f64 {
    units as f64 / f64::from(UNITS_PER_DEVICE)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_parse_and_refuse() {
        assert_eq!(ResourceId::parse("cpu").unwrap(), ResourceId::cpu());
        let a100 = ResourceId::gpu("NVIDIA A100-SXM4-80GB").unwrap();
        assert!(a100.is_gpu());
        assert_eq!(a100.model(), Some("NVIDIA A100-SXM4-80GB"));
        for bad in ["", "gpu:", "gpu:  ", "GPU", "tpu:v4", "cpu0"] {
            let err = ResourceId::parse(bad).unwrap_err();
            assert!(err.to_string().contains("`cpu` or `gpu:MODEL`"), "{err}");
        }
        assert!(serde_json::from_str::<ResourceId>("\"disk\"").is_err());
    }

    #[test]
    fn default_speeds_match_by_tokens() {
        let speed = |m: &str| default_speed(&ResourceId::gpu(m).unwrap()).map(Speed::gflops);
        assert_eq!(speed("NVIDIA A100-SXM4-80GB"), Some(19_500.0));
        assert_eq!(speed("NVIDIA A10"), Some(31_200.0));
        assert_eq!(speed("NVIDIA_A100"), Some(19_500.0));
        assert_eq!(speed("NVIDIA H100 PCIe"), Some(51_200.0));
        assert_eq!(speed("NVIDIA H100 80GB HBM3"), Some(67_000.0));
        assert_eq!(speed("Tesla T4"), Some(8_100.0));
        assert_eq!(speed("Mystery 9000"), None);
        assert_eq!(
            default_speed(&ResourceId::cpu()).map(Speed::gflops),
            Some(CPU_CORE_GFLOPS)
        );
        let unknown = ResourceType::new(ResourceId::gpu("Mystery").unwrap(), 2);
        assert_eq!(unknown.speed.gflops(), UNKNOWN_GPU_GFLOPS);
        assert_eq!(unknown.capacity(), 20_000);
    }

    #[test]
    fn speeds_must_be_positive_and_finite() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(Speed::new(bad).is_err());
        }
        assert!(Speed::new(2.0).is_ok());
    }
}
