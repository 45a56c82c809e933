//! The validation rules of docs/design.md#3-validation-rules and the error that names the broken one,
//! the field at fault and what is allowed.

use serde::{Deserialize, Serialize};

/// The validation rules of docs/design.md#3-validation-rules, plus the type check every field gets.
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
    /// 5: `num_gpus` with `gpu_memory` (Ray's `ValueError`).
    NumGpusWithGpuMemory,
    /// 6: a fractional `num_gpus` above 1.
    FractionAboveOne,
    /// 7: zero, negative, non-finite or absurd values.
    OutOfRange,
    /// 8: a field this API does not know.
    UnknownField,
    /// 9: a split that does not divide evenly across `gpu.shared` devices.
    UnevenSplit,
    /// 10: labels: too many or too large, a key that is not a name, a value with control
    /// characters.
    Labels,
    /// A field whose value has the wrong type (text where a number belongs...).
    WrongType,
}

impl Rule {
    /// The rule's number in docs/design.md#3-validation-rules (0 for the type check).
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
            Rule::Labels => 10,
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
            Rule::Labels => "labels",
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

/// A rejection under `rule`, naming the field at fault.
pub(super) fn reject(rule: Rule, field: Option<&str>, message: impl Into<String>) -> RequestError {
    RequestError {
        rule,
        field: field.map(str::to_string),
        message: message.into(),
    }
}

/// A [`Rule::WrongType`] rejection: the field must be `allowed`.
pub(super) fn wrong_type(field: &str, allowed: &str) -> RequestError {
    reject(
        Rule::WrongType,
        Some(field),
        format!("`{field}` must be {allowed}"),
    )
}

/// A [`Rule::OutOfRange`] rejection: the field must be `allowed`.
pub(super) fn out_of_range(field: &str, allowed: &str) -> RequestError {
    reject(
        Rule::OutOfRange,
        Some(field),
        format!("`{field}` is out of range: it must be {allowed}"),
    )
}
