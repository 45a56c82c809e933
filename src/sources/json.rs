//! Reading untrusted JSON into serde types: the glue around `serde_path_to_error` that
//! prefixes each error with where its value sits in the whole answer (`typed`), reads lists
//! item by item so one odd item never hides the others (`typed_each`), and accepts numbers
//! as peers write them (`Num`, `Whole`: protobuf-as-JSON writes integers as strings).
//! Every failure names where in the document it happened and what was wrong there, so a
//! peer's odd answer becomes a message an operator can read.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde_json::Value;

use crate::snapshot::SourceWarning;

/// A JSON value that was not what a source expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{path}`: {problem}")]
pub struct ShapeError {
    /// Where, as `data.summary[0].raylet.nodeId`.
    pub path: String,
    /// What was expected there and what was found (its type, and a short excerpt).
    pub problem: String,
}

/// Reads `value`, found at `at` in its document, as `T` (serde, with `#[serde(default)]`
/// and `Option` for what a peer may leave out): a mismatch names its full path.
pub fn typed<T: DeserializeOwned>(value: &Value, at: &str) -> Result<T, ShapeError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let path = match inner.as_str() {
            "." => at.to_string(),
            i if i.starts_with('[') || at.is_empty() => format!("{at}{i}"),
            i => format!("{at}.{i}"),
        };
        ShapeError {
            path,
            problem: e.into_inner().to_string(),
        }
    })
}

/// Reads each element of the array `list`, found at `at`, as `T`; an element that cannot
/// be read is skipped, its error in `skipped`, so one odd element never hides the others.
pub fn typed_each<T: DeserializeOwned>(
    list: &Value,
    at: &str,
    skipped: &mut Vec<ShapeError>,
) -> Result<Vec<T>, ShapeError> {
    let Value::Array(items) = list else {
        return Err(ShapeError {
            path: at.to_string(),
            problem: format!("expected an array, found {}", describe(list)),
        });
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, v) in items.iter().enumerate() {
        match typed(v, &format!("{at}[{i}]")) {
            Ok(t) => out.push(t),
            Err(e) => skipped.push(e),
        }
    }
    Ok(out)
}

/// Reads an optional, non-core field, found at `at`, as `T`: absent or null is `None`,
/// and so is a value of another shape, whose error goes to `skipped` (the item it sits
/// in is kept).
pub fn typed_or_skip<T: DeserializeOwned>(
    value: Option<&Value>,
    at: &str,
    skipped: &mut Vec<ShapeError>,
) -> Option<T> {
    match value {
        None | Some(Value::Null) => None,
        Some(v) => typed(v, at).map_err(|e| skipped.push(e)).ok(),
    }
}

/// A number as peers write it: a JSON number, or a numeric string (protobuf-as-JSON writes
/// 64-bit integers as strings). Non-finite values are refused.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Num(pub f64);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
                if v.is_finite() {
                    Ok(Num(v))
                } else {
                    Err(E::invalid_value(de::Unexpected::Float(v), &self))
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Num, E> {
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite())
                    .map(Num)
                    .ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

/// A whole number from 0 to 4294967295 as peers write it: a JSON number or a numeric
/// string (protobuf-as-JSON), like `Num`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Whole(pub u32);

impl<'de> Deserialize<'de> for Whole {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Whole, D::Error> {
        let Num(n) = Num::deserialize(d)?;
        if n >= 0.0 && n <= f64::from(u32::MAX) && n.fract() == 0.0 {
            Ok(Whole(n as u32))
        } else {
            Err(de::Error::invalid_value(
                de::Unexpected::Float(n),
                &"a whole number from 0 to 4294967295",
            ))
        }
    }
}

/// What a value is, for messages: its type and a short excerpt.
/// What a value is, for messages: its type and a short excerpt.
pub fn describe(v: &Value) -> String {
    let kind = match v {
        Value::Null => return "null".to_string(),
        Value::Bool(b) => return format!("the boolean {b}"),
        Value::Number(n) => return format!("the number {n}"),
        Value::String(_) => "a string",
        Value::Array(a) => return format!("an array of {}", a.len()),
        Value::Object(_) => return "an object".to_string(),
    };
    let text = v.as_str().unwrap_or_default();
    let excerpt: String = text.chars().take(40).collect();
    let more = if text.chars().count() > 40 { "..." } else { "" };
    format!("{kind} {excerpt:?}{more}")
}

impl ShapeError {
    /// This error as a warning on a source: in `section`, leaving out `left_out`.
    pub fn warning(&self, section: &str, left_out: &str) -> SourceWarning {
        SourceWarning {
            section: section.to_string(),
            path: self.path.clone(),
            found: self.problem.clone(),
            left_out: left_out.to_string(),
        }
    }
}

/// Parses a body as JSON, saying whether it was cut short or malformed.
pub fn parse_body(body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|e| {
        if e.is_eof() {
            format!(
                "truncated JSON ({} bytes, ends at line {} column {})",
                body.len(),
                e.line(),
                e.column()
            )
        } else {
            format!("malformed JSON: {e}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An item with a count, as a test type.
    #[derive(Debug, Deserialize)]
    struct Item {
        #[allow(dead_code)] // read to check its type
        n: Whole,
    }

    #[test]
    fn errors_name_the_path_and_what_was_found() {
        let doc = json!({"items": [{"n": 1}, {"n": "four"}, {"n": -1}, {"n": "12"}]});
        let mut skipped = Vec::new();
        let read: Vec<Item> = typed_each(&doc["items"], "data.items", &mut skipped).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(skipped[0].path, "data.items[1].n");
        assert_eq!(
            skipped[0].to_string(),
            "`data.items[1].n`: invalid value: string \"four\", expected a number"
        );
        assert_eq!(skipped[1].path, "data.items[2].n");
        let e = typed_each::<Item>(&json!(true), "data.items", &mut skipped).unwrap_err();
        assert_eq!(e.problem, "expected an array, found the boolean true");
    }

    #[test]
    fn numbers_accept_protobuf_strings_but_not_garbage() {
        let num = |v| typed::<Num>(&v, "x");
        assert_eq!(num(json!("12")), Ok(Num(12.0)));
        assert_eq!(num(json!(1.5)), Ok(Num(1.5)));
        assert!(num(json!("x")).is_err());
        assert!(num(json!(null)).is_err());
        let whole = |v| typed::<Whole>(&v, "x");
        assert_eq!(whole(json!("7")), Ok(Whole(7)));
        assert!(whole(json!(1.5)).is_err());
        assert!(whole(json!(-1)).is_err());
        assert!(whole(json!(5_000_000_000_u64)).is_err());
    }

    #[test]
    fn hostile_nesting_is_an_error_not_a_stack_overflow() {
        let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        let e = parse_body(deep.as_bytes()).unwrap_err();
        assert!(e.starts_with("malformed JSON"), "{e}");
    }

    #[test]
    fn truncated_and_malformed_bodies_are_told_apart() {
        let e = parse_body(br#"{"result": true, "data": {"#).unwrap_err();
        assert!(e.starts_with("truncated JSON"), "{e}");
        let e = parse_body(b"{\"a\": tru}").unwrap_err();
        assert!(e.starts_with("malformed JSON"), "{e}");
    }
}
