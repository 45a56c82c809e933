//! Reading untrusted JSON: serde types (through `typed`, with `serde_path_to_error`) and,
//! for the envelopes and lists read item by item, a small path-keeping walker (`At`).
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
    /// The same error, at `path` (for a value read out of its document).
    #[must_use]
    pub fn at(mut self, path: &str) -> ShapeError {
        self.path = path.to_string();
        self
    }

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

/// A value and the path that led to it.
#[derive(Clone, Copy)]
pub struct At<'a> {
    value: &'a Value,
    parent: Option<&'a Path<'a>>,
}

/// A path step, kept as a linked list on the stack so walking costs no allocation.
pub struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    step: Step<'a>,
}

enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = self.parent {
            write!(f, "{p}")?;
        }
        match self.step {
            Step::Key(k) if self.parent.is_some() => write!(f, ".{k}"),
            Step::Key(k) => write!(f, "{k}"),
            Step::Index(i) => write!(f, "[{i}]"),
        }
    }
}

impl<'a> At<'a> {
    /// The document root.
    pub fn root(value: &'a Value) -> At<'a> {
        At {
            value,
            parent: None,
        }
    }

    /// The raw value.
    pub fn value(&self) -> &'a Value {
        self.value
    }

    /// Where this value is.
    pub fn path(&self) -> String {
        self.parent
            .map_or_else(|| "(root)".to_string(), std::string::ToString::to_string)
    }

    /// An error at this value.
    pub fn wrong(&self, expected: &'static str) -> ShapeError {
        ShapeError {
            path: self.path(),
            problem: format!("expected {expected}, found {}", describe(self.value)),
        }
    }

    /// Calls `f` with the member `key`, which must be present and not null.
    pub fn field<T>(
        &self,
        key: &'a str,
        f: impl FnOnce(At<'_>) -> Result<T, ShapeError>,
    ) -> Result<T, ShapeError> {
        self.opt_field(key, f)?.ok_or_else(|| ShapeError {
            path: self.child_path(key),
            problem: "expected a value, found nothing (missing or null)".to_string(),
        })
    }

    /// Calls `f` with the member `key` when present and not null.
    pub fn opt_field<T>(
        &self,
        key: &'a str,
        f: impl FnOnce(At<'_>) -> Result<T, ShapeError>,
    ) -> Result<Option<T>, ShapeError> {
        let Value::Object(map) = self.value else {
            return Err(self.wrong("an object"));
        };
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => {
                let path = Path {
                    parent: self.parent,
                    step: Step::Key(key),
                };
                f(At {
                    value: v,
                    parent: Some(&path),
                })
                .map(Some)
            }
        }
    }

    fn child_path(&self, key: &str) -> String {
        match self.parent {
            Some(p) => format!("{p}.{key}"),
            None => key.to_string(),
        }
    }

    /// Calls `f` on each element of an array.
    pub fn each<T>(
        &self,
        mut f: impl FnMut(At<'_>) -> Result<T, ShapeError>,
    ) -> Result<Vec<T>, ShapeError> {
        let Value::Array(items) = self.value else {
            return Err(self.wrong("an array"));
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, v) in items.iter().enumerate() {
            let path = Path {
                parent: self.parent,
                step: Step::Index(i),
            };
            out.push(f(At {
                value: v,
                parent: Some(&path),
            })?);
        }
        Ok(out)
    }

    /// Calls `f` with element `i` of an array of exactly `len` elements; `expected` says
    /// what the whole array should have been.
    pub fn item<T>(
        &self,
        i: usize,
        len: usize,
        expected: &'static str,
        f: impl FnOnce(At<'_>) -> Result<T, ShapeError>,
    ) -> Result<T, ShapeError> {
        let Value::Array(items) = self.value else {
            return Err(self.wrong(expected));
        };
        let Some(v) = items.get(i).filter(|_| items.len() == len) else {
            return Err(self.wrong(expected));
        };
        let path = Path {
            parent: self.parent,
            step: Step::Index(i),
        };
        f(At {
            value: v,
            parent: Some(&path),
        })
    }

    /// Calls `f` on each element of an array, skipping the elements it cannot read: their
    /// errors go to `skipped`, so one odd element never hides the others.
    pub fn each_or_skip<T>(
        &self,
        skipped: &mut Vec<ShapeError>,
        mut f: impl FnMut(At<'_>) -> Result<T, ShapeError>,
    ) -> Result<Vec<T>, ShapeError> {
        let Value::Array(items) = self.value else {
            return Err(self.wrong("an array"));
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, v) in items.iter().enumerate() {
            let path = Path {
                parent: self.parent,
                step: Step::Index(i),
            };
            match f(At {
                value: v,
                parent: Some(&path),
            }) {
                Ok(t) => out.push(t),
                Err(e) => skipped.push(e),
            }
        }
        Ok(out)
    }

    /// Calls `f` on each member of an object, with its key.
    pub fn entries<T>(
        &self,
        mut f: impl FnMut(&str, At<'_>) -> Result<T, ShapeError>,
    ) -> Result<Vec<T>, ShapeError> {
        let Value::Object(map) = self.value else {
            return Err(self.wrong("an object"));
        };
        let mut out = Vec::with_capacity(map.len());
        for (k, v) in map {
            let path = Path {
                parent: self.parent,
                step: Step::Key(k),
            };
            out.push(f(
                k,
                At {
                    value: v,
                    parent: Some(&path),
                },
            )?);
        }
        Ok(out)
    }

    /// A string.
    pub fn str(&self) -> Result<String, ShapeError> {
        self.value
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| self.wrong("a string"))
    }

    /// A boolean.
    pub fn bool(&self) -> Result<bool, ShapeError> {
        self.value
            .as_bool()
            .ok_or_else(|| self.wrong("true or false"))
    }

    /// A finite number (protobuf-as-JSON also writes 64-bit integers as strings: accepted).
    pub fn f64(&self) -> Result<f64, ShapeError> {
        let n = match self.value {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        n.filter(|n| n.is_finite())
            .ok_or_else(|| self.wrong("a number"))
    }

    /// A non-negative integer that fits in 32 bits (numbers and numeric strings).
    pub fn u32(&self) -> Result<u32, ShapeError> {
        let n = match self.value {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        n.and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| self.wrong("a whole number from 0 to 4294967295"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_the_path_and_what_was_found() {
        let doc = json!({"data": {"items": [{"n": 1}, {"n": "four"}]}});
        let err = At::root(&doc)
            .field("data", |d| {
                d.field("items", |items| items.each(|i| i.field("n", |n| n.u32())))
            })
            .unwrap_err();
        assert_eq!(err.path, "data.items[1].n");
        assert_eq!(
            err.to_string(),
            "`data.items[1].n`: expected a whole number from 0 to 4294967295, found a string \"four\""
        );
    }

    #[test]
    fn missing_and_null_fields_are_reported_as_missing() {
        let doc = json!({"a": null});
        let err = At::root(&doc).field("a", |a| a.str()).unwrap_err();
        assert_eq!(err.path, "a");
        assert!(err.problem.contains("missing"));
        let err = At::root(&doc).field("b", |b| b.str()).unwrap_err();
        assert_eq!(err.path, "b");
        assert_eq!(At::root(&doc).opt_field("a", |a| a.str()), Ok(None));
    }

    #[test]
    fn numbers_accept_protobuf_strings_but_not_garbage() {
        let doc = json!({"a": "12", "b": 1.5, "c": "x", "d": -1});
        let root = At::root(&doc);
        assert_eq!(root.field("a", |a| a.u32()), Ok(12));
        assert_eq!(root.field("b", |b| b.f64()), Ok(1.5));
        assert!(root.field("b", |b| b.u32()).is_err());
        assert!(root.field("c", |c| c.f64()).is_err());
        assert!(root.field("d", |d| d.u32()).is_err());
    }

    #[test]
    fn truncated_and_malformed_bodies_are_told_apart() {
        let e = parse_body(br#"{"result": true, "data": {"#).unwrap_err();
        assert!(e.starts_with("truncated JSON"), "{e}");
        let e = parse_body(b"{\"a\": tru}").unwrap_err();
        assert!(e.starts_with("malformed JSON"), "{e}");
    }
}
