//! Claim requests: the four request forms of DESIGN.md section 3 (Ray fraction, Ray
//! memory, Koordinator share, vendor whole GPUs), read from JSON or TOML under both
//! Kubernetes-style and Ray-style names, mutated as the Koordinator webhook does, and
//! validated against the nine rules. Every rejection names its rule and what is allowed.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::units::{Bytes, MAX_BYTES, SLOTS_PER_DEVICE, Slots, UNITS_PER_DEVICE, Units};

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

/// The validation rules of DESIGN.md section 3, plus the type check every field gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// 1: more than one request form (vendor whole GPUs with a share form, Ray with Koordinator...).
    OneForm,
    /// 2: `gpu-memory` and `gpu-memory-ratio` together.
    MemoryAndRatio,
    /// 3: `gpu-core` without a memory form.
    CoreWithoutMemory,
    /// 4: a memory form without `gpu.shared` (after mutation).
    MemoryWithoutShared,
    /// 5: `num_gpus` with `gpu_memory` (Ray's ValueError).
    NumGpusWithGpuMemory,
    /// 6: a fractional `num_gpus` above 1.
    FractionAboveOne,
    /// 7: zero, negative, non-finite or absurd values.
    OutOfRange,
    /// 8: a field this API does not know.
    UnknownField,
    /// 9: a split that does not divide evenly across `gpu.shared` devices.
    UnevenSplit,
    /// A field whose value has the wrong type (text where a number belongs...).
    WrongType,
}

impl Rule {
    /// The rule's number in DESIGN.md section 3 (0 for the type check).
    pub fn number(self) -> u8 {
        match self {
            Rule::OneForm => 1,
            Rule::MemoryAndRatio => 2,
            Rule::CoreWithoutMemory => 3,
            Rule::MemoryWithoutShared => 4,
            Rule::NumGpusWithGpuMemory => 5,
            Rule::FractionAboveOne => 6,
            Rule::OutOfRange => 7,
            Rule::UnknownField => 8,
            Rule::UnevenSplit => 9,
            Rule::WrongType => 0,
        }
    }

    /// The stable identifier used in API errors (`rule` field).
    pub fn code(self) -> &'static str {
        match self {
            Rule::OneForm => "one-form",
            Rule::MemoryAndRatio => "memory-and-ratio",
            Rule::CoreWithoutMemory => "core-without-memory",
            Rule::MemoryWithoutShared => "memory-without-shared",
            Rule::NumGpusWithGpuMemory => "num-gpus-with-gpu-memory",
            Rule::FractionAboveOne => "fraction-above-one",
            Rule::OutOfRange => "out-of-range",
            Rule::UnknownField => "unknown-field",
            Rule::UnevenSplit => "uneven-split",
            Rule::WrongType => "wrong-type",
        }
    }
}

/// A rejected request: which rule, which field, and a sentence saying what is allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid request (rule {}: {}): {message}", rule.number(), rule.code())]
pub struct RequestError {
    /// The rule that was broken.
    pub rule: Rule,
    /// The field at fault, under the name the client used.
    pub field: Option<String>,
    /// What was wrong and what is allowed.
    pub message: String,
}

fn reject(rule: Rule, field: Option<&str>, message: impl Into<String>) -> RequestError {
    RequestError {
        rule,
        field: field.map(str::to_string),
        message: message.into(),
    }
}

/// How a Koordinator share asks for memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareMemory {
    /// `gpu-memory`: bytes in total across the `shared` devices.
    Bytes(Bytes),
    /// `gpu-memory-ratio`: percent of one device's memory, in total across the devices.
    Ratio(u32),
}

/// The GPU part of a claim: exactly one of the four forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "form", rename_all = "snake_case")]
pub enum GpuForm {
    /// Ray `num_gpus = f` with 0 < f < 1, as compute units.
    RayFraction {
        /// The fraction in units of 1e-4 GPU.
        fraction: Units,
    },
    /// Ray `num_gpus = k`, k whole: k exclusive devices.
    RayWhole {
        /// How many devices.
        count: u32,
    },
    /// Ray `gpu_memory = m`: converted per device to a fraction on the 1e-4 grain.
    RayMemory {
        /// The bytes asked for.
        memory: Bytes,
    },
    /// Koordinator GPU share: memory (bytes or ratio) and optional core, split over `shared` devices.
    KoordinatorShare {
        /// Memory in total across the devices.
        memory: ShareMemory,
        /// `gpu-core` percent in total across the devices; `None` is best-effort compute.
        core: Option<u32>,
        /// `gpu.shared`: how many devices the request is split across.
        shared: u32,
        /// The request came as the legacy `koordinator.sh/gpu` and was mutated.
        #[serde(default)]
        legacy: bool,
    },
    /// `nvidia.com/gpu = k`: k whole devices, exclusive.
    Vendor {
        /// How many devices.
        count: u32,
    },
}

/// What one device must give a claim, after normalizing its form on that device's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerDevice {
    /// Memory reserved on each device.
    pub memory: Bytes,
    /// Compute reserved on each device.
    pub compute: Units,
    /// Slots taken on each device.
    pub slots: Slots,
    /// Whether the claim takes the device whole.
    pub exclusive: bool,
}

/// Why a form can never fit a device of this size, whatever else it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLarge {
    /// Memory the form needs on one device.
    pub needs: Bytes,
}

impl GpuForm {
    /// How many distinct devices of one node the claim takes.
    pub fn device_count(&self) -> u32 {
        match *self {
            GpuForm::RayFraction { .. } | GpuForm::RayMemory { .. } => 1,
            GpuForm::RayWhole { count } | GpuForm::Vendor { count } => count,
            GpuForm::KoordinatorShare { shared, .. } => shared,
        }
    }

    /// Whether the claim takes whole devices exclusively.
    pub fn is_exclusive(&self) -> bool {
        matches!(self, GpuForm::RayWhole { .. } | GpuForm::Vendor { .. })
    }

    /// Normalizes the form on a device of schedulable memory `m` (DESIGN.md section 3).
    pub fn per_device(&self, m: Bytes) -> Result<PerDevice, TooLarge> {
        let shared = |memory: Bytes, compute: Units| PerDevice {
            memory,
            compute,
            slots: Slots(1),
            exclusive: false,
        };
        match *self {
            GpuForm::RayFraction { fraction } => Ok(shared(
                m.mul_div_ceil(u64::from(fraction.0), u64::from(UNITS_PER_DEVICE)),
                fraction,
            )),
            GpuForm::RayMemory { memory } => {
                if memory > m || m.0 == 0 {
                    return Err(TooLarge { needs: memory });
                }
                // Option 2 of the Ray REP: round the fraction up to the grain, then
                // reserve exactly that fraction of this device's memory.
                let units = memory.mul_div_ceil(u64::from(UNITS_PER_DEVICE), m.0).0;
                let units = u32::try_from(units)
                    .unwrap_or(UNITS_PER_DEVICE)
                    .min(UNITS_PER_DEVICE);
                Ok(shared(
                    m.mul_div_ceil(u64::from(units), u64::from(UNITS_PER_DEVICE)),
                    Units(units),
                ))
            }
            GpuForm::KoordinatorShare {
                memory,
                core,
                shared: n,
                ..
            } => {
                let n = u64::from(n.max(1));
                let memory = match memory {
                    ShareMemory::Bytes(b) => Bytes(b.0 / n),
                    ShareMemory::Ratio(r) => m.mul_div_ceil(u64::from(r) / n, 100),
                };
                if memory > m {
                    return Err(TooLarge { needs: memory });
                }
                let compute =
                    core.map_or(0, |c| u64::from(c) / n * u64::from(UNITS_PER_DEVICE) / 100);
                Ok(shared(
                    memory,
                    Units(u32::try_from(compute).unwrap_or(UNITS_PER_DEVICE)),
                ))
            }
            GpuForm::RayWhole { .. } | GpuForm::Vendor { .. } => Ok(PerDevice {
                memory: m,
                compute: Units::FULL,
                slots: Slots(SLOTS_PER_DEVICE),
                exclusive: true,
            }),
        }
    }
}

impl fmt::Display for GpuForm {
    /// The form as an operator wrote it, under canonical names.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            GpuForm::RayFraction { fraction } => write!(f, "num_gpus={fraction}"),
            GpuForm::RayWhole { count } => write!(f, "num_gpus={count}"),
            GpuForm::RayMemory { memory } => write!(f, "gpu_memory={memory}"),
            GpuForm::Vendor { count } => write!(f, "nvidia.com/gpu={count}"),
            GpuForm::KoordinatorShare {
                memory,
                core,
                shared,
                legacy,
            } => {
                if legacy && let ShareMemory::Ratio(r) = memory {
                    return write!(f, "koordinator.sh/gpu={r} (gpu.shared={shared})");
                }
                match memory {
                    ShareMemory::Bytes(b) => write!(f, "gpu-memory={b}")?,
                    ShareMemory::Ratio(r) => write!(f, "gpu-memory-ratio={r}")?,
                }
                if let Some(c) = core {
                    write!(f, " gpu-core={c}")?;
                }
                write!(f, " gpu.shared={shared}")
            }
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
enum Field {
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
type Given<'a> = BTreeMap<Field, (&'a str, &'a Value)>;

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

    /// A short description of what the claim asks for, for tables and logs.
    pub fn describe(&self) -> String {
        match (&self.gpu, self.cpus) {
            (Some(form), Some(c)) => format!("{form} cpus={c}"),
            (Some(form), None) => form.to_string(),
            (None, Some(c)) => format!("cpus={c}"),
            (None, None) => "nothing".to_string(),
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

fn wrong_type(field: &str, allowed: &str) -> RequestError {
    reject(
        Rule::WrongType,
        Some(field),
        format!("`{field}` must be {allowed}"),
    )
}

fn out_of_range(field: &str, allowed: &str) -> RequestError {
    reject(
        Rule::OutOfRange,
        Some(field),
        format!("`{field}` is out of range: it must be {allowed}"),
    )
}

/// A number given as a JSON number or as numeric text (Kubernetes writes quantities as strings).
fn number(field: &str, v: &Value, allowed: &str) -> Result<f64, RequestError> {
    let n = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    let n = n.ok_or_else(|| wrong_type(field, allowed))?;
    if !n.is_finite() {
        return Err(out_of_range(field, allowed));
    }
    Ok(n)
}

fn integer(field: &str, v: &Value, min: u64, max: u64) -> Result<u64, RequestError> {
    let allowed = format!("a whole number from {min} to {max}");
    let n = number(field, v, &allowed)?;
    if n.fract() != 0.0 {
        return Err(reject(
            Rule::WrongType,
            Some(field),
            format!("`{field}` = {n} is not whole: it must be {allowed}"),
        ));
    }
    if n < min as f64 || n > max as f64 {
        return Err(reject(
            Rule::OutOfRange,
            Some(field),
            format!("`{field}` = {n} is out of range: it must be {allowed}"),
        ));
    }
    // In range and whole, checked just above.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(n as u64)
}

fn small(field: &str, v: &Value, min: u32, max: u32) -> Result<u32, RequestError> {
    let n = integer(field, v, u64::from(min), u64::from(max))?;
    u32::try_from(n).map_err(|_| out_of_range(field, "smaller"))
}

fn bytes(field: &str, v: &Value) -> Result<Bytes, RequestError> {
    let parsed = match v {
        Value::Number(n) => Bytes::from_number(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => Bytes::parse(s),
        _ => {
            return Err(wrong_type(
                field,
                "a byte count or a quantity such as \"20Gi\", \"40G\", \"512MiB\"",
            ));
        }
    };
    let b = parsed.map_err(|e| reject(Rule::OutOfRange, Some(field), format!("`{field}`: {e}")))?;
    if b.0 == 0 {
        return Err(out_of_range(field, "more than 0 bytes"));
    }
    if b.0 > MAX_BYTES {
        return Err(out_of_range(field, "at most 1 EiB"));
    }
    Ok(b)
}

fn milli(field: &str, v: &Value) -> Result<Milli, RequestError> {
    let allowed =
        "a positive number of cores (2, 0.5) or millicores (\"500m\"), at most 1024 x 1024";
    let cores = match v {
        Value::String(s) if s.trim().ends_with('m') => {
            let text = s.trim().trim_end_matches('m');
            text.parse::<f64>()
                .map(|m| m / 1000.0)
                .map_err(|_| wrong_type(field, allowed))?
        }
        _ => number(field, v, allowed)?,
    };
    if cores.is_nan() || cores <= 0.0 || cores > f64::from(MAX_DEVICES * MAX_DEVICES) {
        return Err(out_of_range(field, allowed));
    }
    let m = (cores * 1000.0).round();
    if m < 1.0 {
        return Err(out_of_range(field, allowed));
    }
    // Bounded just above.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(Milli(m as u64))
}

fn seconds(field: &str, v: &Value) -> Result<u64, RequestError> {
    let allowed = "a positive number of seconds or a duration such as \"90s\", \"10m\", \"2h\", \"1d\" (at most a year)";
    let secs = match v {
        Value::String(s) => {
            let s = s.trim();
            let (num, mult) = match s.char_indices().last() {
                Some((i, 's')) => (&s[..i], 1.0),
                Some((i, 'm')) => (&s[..i], 60.0),
                Some((i, 'h')) => (&s[..i], 3600.0),
                Some((i, 'd')) => (&s[..i], 86_400.0),
                _ => (s, 1.0),
            };
            num.trim()
                .parse::<f64>()
                .map(|n| n * mult)
                .map_err(|_| wrong_type(field, allowed))?
        }
        _ => number(field, v, allowed)?,
    };
    if !secs.is_finite() || secs < 1.0 || secs > MAX_SECONDS as f64 {
        return Err(out_of_range(field, allowed));
    }
    // Bounded just above.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(secs.round() as u64)
}

fn name_text(field: &str, v: &Value) -> Result<String, RequestError> {
    let Value::String(s) = v else {
        return Err(wrong_type(field, "text"));
    };
    let s = s.trim();
    if s.is_empty() || s.len() > 253 || s.chars().any(char::is_control) {
        return Err(out_of_range(
            field,
            "non-empty text of at most 253 characters without control characters",
        ));
    }
    Ok(s.to_string())
}

fn device_list(field: &str, v: &Value) -> Result<Vec<u32>, RequestError> {
    let allowed = "a list of distinct device indexes, e.g. [0, 2]";
    let items: Vec<u32> = match v {
        Value::Array(items) => items
            .iter()
            .map(|i| small(field, i, 0, MAX_DEVICES - 1))
            .collect::<Result<_, _>>()?,
        Value::String(s) => s
            .split(',')
            .map(|p| {
                p.trim()
                    .parse::<u32>()
                    .map_err(|_| wrong_type(field, allowed))
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(wrong_type(field, allowed)),
    };
    let mut sorted = items.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if items.is_empty() || sorted.len() != items.len() || items.len() > MAX_DEVICES as usize {
        return Err(out_of_range(field, allowed));
    }
    Ok(items)
}

fn label_map(field: &str, v: &Value) -> Result<BTreeMap<String, String>, RequestError> {
    let Value::Object(map) = v else {
        return Err(wrong_type(
            field,
            "an object of text labels, e.g. {\"team\": \"vision\"}",
        ));
    };
    map.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            _ => Err(wrong_type(field, "an object whose values are text")),
        })
        .collect()
}

/// Mutation, then the nine rules, then the form.
fn gpu_form(given: &Given<'_>) -> Result<Option<GpuForm>, RequestError> {
    let name = |f: Field| given.get(&f).map(|(n, _)| *n);
    let ray = [Field::NumGpus, Field::GpuMemory]
        .into_iter()
        .find_map(name);
    let koord = [
        Field::KoordMemory,
        Field::KoordRatio,
        Field::KoordCore,
        Field::KoordShared,
        Field::KoordLegacy,
    ]
    .into_iter()
    .find_map(name);
    let vendor = name(Field::Vendor);

    // Rule 1: one form only.
    if let (Some(v), Some(k)) = (vendor, koord) {
        return Err(reject(
            Rule::OneForm,
            Some(v),
            format!(
                "`{v}` (whole exclusive GPUs) cannot be combined with the share form `{k}`: give one request form"
            ),
        ));
    }
    if let (Some(r), Some(o)) = (ray, koord.or(vendor)) {
        return Err(reject(
            Rule::OneForm,
            Some(r),
            format!("the Ray form `{r}` cannot be combined with `{o}`: give one request form"),
        ));
    }
    if let Some(form) = vendor {
        let (_, v) = given[&Field::Vendor];
        return Ok(Some(GpuForm::Vendor {
            count: small(form, v, 1, MAX_DEVICES)?,
        }));
    }
    if ray.is_some() {
        return ray_form(given).map(Some);
    }
    if koord.is_some() {
        return koordinator_form(given).map(Some);
    }
    Ok(None)
}

fn ray_form(given: &Given<'_>) -> Result<GpuForm, RequestError> {
    match (given.get(&Field::NumGpus), given.get(&Field::GpuMemory)) {
        (Some(&(n, _)), Some(&(m, _))) => Err(reject(
            Rule::NumGpusWithGpuMemory,
            Some(m),
            format!(
                "`{n}` and `{m}` cannot both be given: ask by fraction (num_gpus) or by memory (gpu_memory), not both"
            ),
        )),
        (None, Some(&(m, v))) => Ok(GpuForm::RayMemory {
            memory: bytes(m, v)?,
        }),
        (Some(&(n, v)), None) => {
            let allowed =
                "a fraction 0 < f < 1 (grain 0.0001) or a whole number of GPUs up to 1024";
            let f = number(n, v, allowed)?;
            if f <= 0.0 {
                return Err(out_of_range(n, allowed));
            }
            if f > 1.0 && f.fract() != 0.0 {
                return Err(reject(
                    Rule::FractionAboveOne,
                    Some(n),
                    format!(
                        "`{n}` = {f}: a fraction above 1 cannot be shared; ask for a fraction below 1 or a whole number of GPUs"
                    ),
                ));
            }
            if f >= 1.0 {
                if f > f64::from(MAX_DEVICES) {
                    return Err(out_of_range(n, allowed));
                }
                // Whole and at most 1024, checked above.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                return Ok(GpuForm::RayWhole { count: f as u32 });
            }
            let units = (f * f64::from(UNITS_PER_DEVICE)).round();
            if units < 1.0 {
                return Err(out_of_range(n, allowed));
            }
            if units >= f64::from(UNITS_PER_DEVICE) {
                return Ok(GpuForm::RayWhole { count: 1 });
            }
            // Between 1 and 9 999, checked above.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Ok(GpuForm::RayFraction {
                fraction: Units(units as u32),
            })
        }
        (None, None) => Err(reject(Rule::OneForm, None, "no Ray form given")),
    }
}

fn koordinator_form(given: &Given<'_>) -> Result<GpuForm, RequestError> {
    let get = |f: Field| given.get(&f).copied();
    let max_percent = 100 * MAX_DEVICES;
    let mut core = get(Field::KoordCore)
        .map(|(n, v)| small(n, v, 1, max_percent).map(|c| (n, c)))
        .transpose()?;
    let mut ratio = get(Field::KoordRatio)
        .map(|(n, v)| small(n, v, 1, max_percent).map(|r| (n, r)))
        .transpose()?;
    let memory = get(Field::KoordMemory)
        .map(|(n, v)| bytes(n, v).map(|b| (n, b)))
        .transpose()?;
    let mut legacy = false;

    // Mutation: the legacy koordinator.sh/gpu: X becomes gpu-core X + gpu-memory-ratio X.
    if let Some((n, v)) = get(Field::KoordLegacy) {
        if let Some((other, _)) = [
            get(Field::KoordCore),
            get(Field::KoordRatio),
            get(Field::KoordMemory),
        ]
        .into_iter()
        .flatten()
        .next()
        {
            return Err(reject(
                Rule::MemoryAndRatio,
                Some(n),
                format!(
                    "the legacy `{n}` already means gpu-core and gpu-memory-ratio; it cannot be combined with `{other}`"
                ),
            ));
        }
        let x = small(n, v, 1, max_percent)?;
        core = Some((n, x));
        ratio = Some((n, x));
        legacy = true;
    }

    // Rule 2.
    if let (Some((m, _)), Some((r, _))) = (memory, ratio) {
        return Err(reject(
            Rule::MemoryAndRatio,
            Some(r),
            format!(
                "`{m}` and `{r}` cannot both be given: ask for memory in bytes or as a ratio, not both"
            ),
        ));
    }
    // Rule 3.
    if let (Some((c, _)), None, None) = (core, memory, ratio) {
        return Err(reject(
            Rule::CoreWithoutMemory,
            Some(c),
            format!(
                "`{c}` needs a memory form: add gpu-memory (bytes) or gpu-memory-ratio (percent)"
            ),
        ));
    }
    // Mutation: a missing gpu.shared is derived from the ratio.
    let shared = match (get(Field::KoordShared), ratio) {
        (Some((n, v)), _) => small(n, v, 1, MAX_DEVICES)?,
        (None, Some((_, r))) if r % 100 == 0 => r / 100,
        (None, Some(_)) => 1,
        (None, None) => {
            // Rule 4.
            let (m, _) = memory.ok_or_else(|| {
                reject(
                    Rule::MemoryWithoutShared,
                    Some("gpu.shared"),
                    "`gpu.shared` alone asks for nothing: add gpu-memory (bytes) or gpu-memory-ratio (percent)",
                )
            })?;
            return Err(reject(
                Rule::MemoryWithoutShared,
                Some(m),
                format!(
                    "`{m}` needs `gpu.shared`: say across how many devices (at least 1) the memory is split"
                ),
            ));
        }
    };
    let Some(share_memory) = memory
        .map(|(_, b)| ShareMemory::Bytes(b))
        .or(ratio.map(|(_, r)| ShareMemory::Ratio(r)))
    else {
        return Err(reject(
            Rule::MemoryWithoutShared,
            Some("gpu.shared"),
            "`gpu.shared` alone asks for nothing: add gpu-memory (bytes) or gpu-memory-ratio (percent)",
        ));
    };

    // Rule 9: even splits.
    let uneven = |field: &str, what: String| Err(reject(Rule::UnevenSplit, Some(field), what));
    if let Some((r, x)) = ratio {
        if x > 100 && x % 100 != 0 {
            return uneven(
                r,
                format!("`{r}` = {x}: a ratio above 100 must be a multiple of 100 (whole devices)"),
            );
        }
        if x > 100 * shared {
            return uneven(
                r,
                format!("`{r}` = {x} is more than 100 x gpu.shared ({shared}) devices can hold"),
            );
        }
        if x % shared != 0 {
            return uneven(
                r,
                format!("`{r}` = {x} does not divide evenly across gpu.shared = {shared} devices"),
            );
        }
    }
    if let Some((c, x)) = core {
        if x > 100 * shared {
            return uneven(
                c,
                format!("`{c}` = {x} is more than 100 x gpu.shared ({shared}) devices can give"),
            );
        }
        if x % shared != 0 {
            return uneven(
                c,
                format!("`{c}` = {x} does not divide evenly across gpu.shared = {shared} devices"),
            );
        }
    }
    if let Some((m, b)) = memory
        && b.0 % u64::from(shared) != 0
    {
        return uneven(
            m,
            format!(
                "`{m}` = {} bytes does not divide evenly across gpu.shared = {shared} devices",
                b.0
            ),
        );
    }
    Ok(GpuForm::KoordinatorShare {
        memory: share_memory,
        core: core.map(|(_, c)| c),
        shared,
        legacy,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ClaimRequest, RequestError> {
        ClaimRequest::from_json(&v)
    }

    fn rule_of(v: Value) -> (Rule, String) {
        let e = parse(v).unwrap_err();
        (e.rule, e.to_string())
    }

    #[test]
    fn ray_memory_examples_from_the_rep() {
        let gb40 = Bytes(40_000_000_000);
        let gb80 = Bytes(80_000_000_000);
        let form = parse(json!({"gpu_memory": "10MB"})).unwrap().gpu.unwrap();
        let d = form.per_device(gb40).unwrap();
        assert_eq!((d.compute, d.memory), (Units(3), Bytes(12_000_000)));
        let d = form.per_device(gb80).unwrap();
        assert_eq!((d.compute, d.memory), (Units(2), Bytes(16_000_000)));
        let form = parse(json!({"_gpu_memory": 10u64 << 30}))
            .unwrap()
            .gpu
            .unwrap();
        assert_eq!(
            form.per_device(Bytes::gib(40)).unwrap().compute,
            Units(2500)
        );
        assert_eq!(
            form.per_device(Bytes::gib(80)).unwrap().compute,
            Units(1250)
        );
        let form = parse(json!({"gpu_memory": "30Gi"})).unwrap().gpu.unwrap();
        assert_eq!(
            form.per_device(Bytes::gib(24)),
            Err(TooLarge {
                needs: Bytes::gib(30)
            })
        );
    }

    #[test]
    fn ray_fraction_and_whole() {
        let r = parse(json!({"num_gpus": 0.25})).unwrap();
        assert_eq!(
            r.gpu,
            Some(GpuForm::RayFraction {
                fraction: Units(2500)
            })
        );
        let d = r.gpu.unwrap().per_device(Bytes::gib(40)).unwrap();
        assert_eq!(
            (d.memory, d.compute, d.slots),
            (Bytes::gib(10), Units(2500), Slots(1))
        );
        assert_eq!(
            parse(json!({"num_gpus": 2})).unwrap().gpu,
            Some(GpuForm::RayWhole { count: 2 })
        );
        assert_eq!(
            parse(json!({"num_gpus": "1"})).unwrap().gpu,
            Some(GpuForm::RayWhole { count: 1 })
        );
        let d = GpuForm::RayWhole { count: 1 }
            .per_device(Bytes::gib(80))
            .unwrap();
        assert!(d.exclusive);
        assert_eq!(d.slots, Slots::FULL);
    }

    #[test]
    fn koordinator_examples() {
        let r = parse(json!({"koordinator.sh/gpu-memory": "4Gi", "koordinator.sh/gpu-core": 100, "koordinator.sh/gpu.shared": 2})).unwrap();
        let form = r.gpu.unwrap();
        assert_eq!(form.device_count(), 2);
        let d = form.per_device(Bytes::gib(16)).unwrap();
        assert_eq!((d.memory, d.compute), (Bytes::gib(2), Units(5000)));
        let r = parse(json!({"gpu-memory-ratio": 50})).unwrap();
        let form = r.gpu.unwrap();
        assert_eq!(form.device_count(), 1, "ratio 50 mutates gpu.shared to 1");
        assert_eq!(
            form.per_device(Bytes::gib(8)).unwrap().memory,
            Bytes::gib(4)
        );
        assert_eq!(
            form.per_device(Bytes::gib(8)).unwrap().compute,
            Units(0),
            "no core asked: best effort"
        );
        let form = parse(json!({"gpu-memory-ratio": 200}))
            .unwrap()
            .gpu
            .unwrap();
        assert_eq!(form.device_count(), 2, "ratio 200 mutates gpu.shared to 2");
        assert_eq!(
            form.per_device(Bytes::gib(8)).unwrap().memory,
            Bytes::gib(8)
        );
    }

    #[test]
    fn legacy_koordinator_gpu_is_mutated() {
        let form = parse(json!({"koordinator.sh/gpu": 50}))
            .unwrap()
            .gpu
            .unwrap();
        assert_eq!(
            form,
            GpuForm::KoordinatorShare {
                memory: ShareMemory::Ratio(50),
                core: Some(50),
                shared: 1,
                legacy: true
            }
        );
        let form = parse(json!({"koordinator.sh/gpu": 200}))
            .unwrap()
            .gpu
            .unwrap();
        assert_eq!(form.device_count(), 2);
        assert_eq!(form.to_string(), "koordinator.sh/gpu=200 (gpu.shared=2)");
        let (rule, msg) = rule_of(json!({"koordinator.sh/gpu": 50, "gpu-core": 10}));
        assert_eq!(rule, Rule::MemoryAndRatio);
        assert!(msg.contains("legacy"), "{msg}");
    }

    #[test]
    fn the_nine_rules_each_name_themselves() {
        let cases: Vec<(Value, Rule, &str)> = vec![
            (
                json!({"nvidia.com/gpu": 1, "gpu-memory": "1Gi", "gpu.shared": 1}),
                Rule::OneForm,
                "cannot be combined",
            ),
            (
                json!({"num_gpus": 0.5, "gpu-memory-ratio": 50}),
                Rule::OneForm,
                "one request form",
            ),
            (
                json!({"gpu-memory": "1Gi", "gpu-memory-ratio": 50, "gpu.shared": 1}),
                Rule::MemoryAndRatio,
                "not both",
            ),
            (
                json!({"gpu-core": 50}),
                Rule::CoreWithoutMemory,
                "needs a memory form",
            ),
            (
                json!({"gpu-memory": "4Gi"}),
                Rule::MemoryWithoutShared,
                "needs `gpu.shared`",
            ),
            (
                json!({"gpu.shared": 2}),
                Rule::MemoryWithoutShared,
                "asks for nothing",
            ),
            (
                json!({"num_gpus": 0.5, "gpu_memory": "1Gi"}),
                Rule::NumGpusWithGpuMemory,
                "not both",
            ),
            (
                json!({"num_gpus": 1.5}),
                Rule::FractionAboveOne,
                "fraction above 1",
            ),
            (json!({"num_gpus": 0}), Rule::OutOfRange, "out of range"),
            (json!({"num_gpus": -0.5}), Rule::OutOfRange, "out of range"),
            (
                json!({"num_gpus": 0.00001}),
                Rule::OutOfRange,
                "grain 0.0001",
            ),
            (json!({"num_gpus": 2000}), Rule::OutOfRange, "up to 1024"),
            (json!({"gpu_memory": "2Ei"}), Rule::OutOfRange, "absurd"),
            (json!({"gpu_memory": 0}), Rule::OutOfRange, "more than 0"),
            (json!({"gpu_memory": "-1Gi"}), Rule::OutOfRange, "negative"),
            (
                json!({"gpu_memory": "12 parsecs"}),
                Rule::OutOfRange,
                "unknown unit",
            ),
            (
                json!({"nvidia.com/gpu": 1025}),
                Rule::OutOfRange,
                "1 to 1024",
            ),
            (
                json!({"num_gpus": 0.5, "colour": "red"}),
                Rule::UnknownField,
                "unknown field `colour`",
            ),
            (
                json!({"gpu-memory-ratio": 150}),
                Rule::UnevenSplit,
                "multiple of 100",
            ),
            (
                json!({"gpu-memory-ratio": 300, "gpu.shared": 2}),
                Rule::UnevenSplit,
                "more than 100 x gpu.shared",
            ),
            (
                json!({"gpu-memory-ratio": 50, "gpu.shared": 3}),
                Rule::UnevenSplit,
                "divide evenly",
            ),
            (
                json!({"gpu-memory-ratio": 50, "gpu-core": 300, "gpu.shared": 2}),
                Rule::UnevenSplit,
                "more than 100 x",
            ),
            (
                json!({"gpu-memory-ratio": 50, "gpu-core": 25, "gpu.shared": 2}),
                Rule::UnevenSplit,
                "divide evenly",
            ),
            (
                json!({"gpu-memory": 1001, "gpu.shared": 2}),
                Rule::UnevenSplit,
                "divide evenly",
            ),
            (
                json!({"num_gpus": "lots"}),
                Rule::WrongType,
                "must be a fraction",
            ),
            (
                json!({"gpu.shared": 1.5, "gpu-memory": "1Gi"}),
                Rule::WrongType,
                "not whole",
            ),
            (
                json!({"project": 7, "num_gpus": 0.5}),
                Rule::WrongType,
                "must be text",
            ),
            (
                json!({"ttl": "soon", "num_gpus": 0.5}),
                Rule::WrongType,
                "duration",
            ),
            (
                json!({"devices": [0, 0], "num_gpus": 0.5}),
                Rule::OutOfRange,
                "distinct",
            ),
            (
                json!({"num_gpus": 0.5, "gpu_memory": 1, "_gpu_memory": 2}),
                Rule::UnknownField,
                "given twice",
            ),
            (json!({}), Rule::OutOfRange, "asks for nothing"),
            (json!([1, 2]), Rule::WrongType, "JSON object"),
        ];
        for (input, rule, words) in cases {
            let (got, msg) = rule_of(input.clone());
            assert_eq!(got, rule, "{input}: {msg}");
            assert!(msg.contains(words), "{input}: `{msg}` lacks `{words}`");
            assert!(msg.contains(&format!("rule {}", rule.number())), "{msg}");
        }
    }

    #[test]
    fn both_naming_styles_and_toml() {
        let a =
            parse(json!({"koordinator.sh/gpu-memory-ratio": 50, "koordinator.sh/gpu.shared": 1}))
                .unwrap();
        let b = ClaimRequest::from_toml("\"gpu-memory-ratio\" = 50\n\"gpu.shared\" = 1\n").unwrap();
        assert_eq!(a, b);
        let r = ClaimRequest::from_toml(
            "gpu_memory = \"20GiB\"\naccelerator_type = \"NVIDIA_A100\"\nproject = \"vision\"\nttl = \"10m\"\ncpus = \"500m\"\ndevices = [1]\nwait = true\n[labels]\nteam = \"cv\"\n",
        )
        .unwrap();
        assert_eq!(
            r.gpu,
            Some(GpuForm::RayMemory {
                memory: Bytes::gib(20)
            })
        );
        assert_eq!(r.ttl, Some(600));
        assert_eq!(r.cpus, Some(Milli(500)));
        assert_eq!(r.project, "vision");
        assert_eq!(r.devices, Some(vec![1]));
        assert!(r.wait);
        assert_eq!(r.labels.get("team").map(String::as_str), Some("cv"));
        let err = ClaimRequest::from_toml("gpu_memory = ").unwrap_err();
        assert!(err.message.contains("not valid TOML"), "{err}");
    }

    #[test]
    fn stored_form_round_trips() {
        let r = parse(json!({"gpu-memory": "4Gi", "gpu-core": 100, "gpu.shared": 2, "project": "p", "pid": 42})).unwrap();
        let text = serde_json::to_string(&r).unwrap();
        let back: ClaimRequest = serde_json::from_str(&text).unwrap();
        assert_eq!(r, back);
        assert_eq!(r.describe(), "gpu-memory=4 GiB gpu-core=100 gpu.shared=2");
    }

    #[test]
    fn accelerator_keys() {
        assert_eq!(accelerator_key("NVIDIA_TESLA_A10G"), "A10G");
        assert_eq!(accelerator_key("NVIDIA A10G"), "A10G");
        assert_eq!(accelerator_key("NVIDIA_A100"), "A100");
        assert_eq!(accelerator_key("NVIDIA A100-SXM4-80GB"), "A100");
        assert_eq!(accelerator_key("NVIDIA H100 80GB HBM3"), "H100");
        assert_eq!(accelerator_key("h100"), "H100");
    }
}
