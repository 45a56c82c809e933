//! The JSON schema tables of docs/reference/ (every field path with the JSON types seen
//! there), generated from real answers, and the check that a committed page still matches.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// A page of docs/reference/.
pub fn reference(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/reference")
        .join(name)
}

/// JSON type of a value, as the schema tables name it.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Every field path of `v` (`nodes[].devices[].index`) with the JSON types seen there.
pub fn walk(v: &Value, path: &str, out: &mut BTreeMap<String, BTreeSet<&'static str>>) {
    if !path.is_empty() {
        out.entry(path.to_string())
            .or_default()
            .insert(json_type(v));
    }
    match v {
        Value::Array(items) => {
            for item in items {
                walk(item, &format!("{path}[]"), out);
            }
        }
        Value::Object(fields) => {
            for (k, item) in fields {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(item, &p, out);
            }
        }
        _ => {}
    }
}

/// The table of every field path of `samples` (`| Field | JSON type |`).
pub fn schema_table(samples: &[Value]) -> String {
    let mut fields = BTreeMap::new();
    for s in samples {
        walk(s, "", &mut fields);
    }
    let mut out = String::from("| Field | JSON type |\n|---|---|\n");
    for (path, types) in &fields {
        let types: Vec<&str> = types.iter().copied().collect();
        let _ = writeln!(out, "| `{path}` | {} |", types.join(" or "));
    }
    out
}

/// Compares a generated page with the committed one, or rewrites it on request.
pub fn check_generated(name: &str, generated: &str) {
    let path = reference(name);
    if std::env::var_os("GPUBOARD_UPDATE_REFERENCE").is_some() {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/reference/{name} is out of date with the code: run \
         `GPUBOARD_UPDATE_REFERENCE=1 cargo test --test it reference::` and commit it.\n\
         --- generated ---\n{generated}"
    );
}
