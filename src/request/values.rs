//! Readers for one field's value: numbers (also as numeric text), byte quantities,
//! CPU, durations, names and device lists, each refusing what is out of range.

use serde_json::Value;

use super::rules::{out_of_range, reject, wrong_type};
use super::{MAX_DEVICES, MAX_SECONDS, Milli, RequestError, Rule};
use crate::units::{Bytes, MAX_BYTES};

/// A number given as a JSON number or as numeric text (Kubernetes writes quantities as strings).
pub(super) fn number(field: &str, v: &Value, allowed: &str) -> Result<f64, RequestError> {
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

pub(super) fn integer(field: &str, v: &Value, min: u64, max: u64) -> Result<u64, RequestError> {
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

pub(super) fn small(field: &str, v: &Value, min: u32, max: u32) -> Result<u32, RequestError> {
    let n = integer(field, v, u64::from(min), u64::from(max))?;
    u32::try_from(n).map_err(|_| out_of_range(field, "smaller"))
}

pub(super) fn bytes(field: &str, v: &Value) -> Result<Bytes, RequestError> {
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

pub(super) fn milli(field: &str, v: &Value) -> Result<Milli, RequestError> {
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

pub(super) fn seconds(field: &str, v: &Value) -> Result<u64, RequestError> {
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

pub(super) fn name_text(field: &str, v: &Value) -> Result<String, RequestError> {
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

pub(super) fn device_list(field: &str, v: &Value) -> Result<Vec<u32>, RequestError> {
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
