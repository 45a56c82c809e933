//! Rule 10: labels. Keys are names (the characters of a project name, so they can be
//! typed in `ls --label KEY=VALUE` and read in any table); values are printable text;
//! both bounded, and so are the count and the total size, so a claim's labels stay a few
//! lines in its detail and a small row in the database.

use std::collections::BTreeMap;

use serde_json::Value;

use super::rules::{reject, wrong_type};
use super::{RequestError, Rule};

/// The most labels one claim may carry.
const MAX_LABELS: usize = 64;
/// The longest label key, in characters.
const MAX_LABEL_KEY: usize = 128;
/// The longest label value, in characters.
const MAX_LABEL_VALUE: usize = 1024;
/// The most bytes all keys and values together may take.
const MAX_LABELS_BYTES: usize = 16 * 1024;

/// What a label key may be, for refusals.
const KEY_RULE: &str = "label keys are 1 to 128 characters from A-Z a-z 0-9 . _ - /, \
                        starting and ending with a letter or digit (e.g. team, gpuboard.attempt)";
/// What a label value may be, for refusals.
const VALUE_RULE: &str =
    "label values are text of at most 1024 characters without control characters";

/// Reads and checks the `labels` object (`field` as the client spelt it).
pub(super) fn label_map(field: &str, v: &Value) -> Result<BTreeMap<String, String>, RequestError> {
    let Value::Object(map) = v else {
        return Err(wrong_type(
            field,
            "an object of text labels, e.g. {\"team\": \"vision\"}",
        ));
    };
    let labels = map
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            _ => Err(wrong_type(
                field,
                &format!("an object whose values are text (`{}` is not)", shown(k)),
            )),
        })
        .collect::<Result<BTreeMap<_, _>, _>>()?;
    check_labels(field, &labels)?;
    Ok(labels)
}

/// Rule 10 over labels already read: count, total size, each key and each value.
fn check_labels(field: &str, labels: &BTreeMap<String, String>) -> Result<(), RequestError> {
    let refuse = |what: String| {
        Err(reject(
            Rule::Labels,
            Some(field),
            format!("`{field}`: {what}"),
        ))
    };
    if labels.len() > MAX_LABELS {
        return refuse(format!(
            "{} labels given; at most {MAX_LABELS} are allowed",
            labels.len()
        ));
    }
    for (key, value) in labels {
        if let Some(why) = bad_key(key) {
            return refuse(format!("key `{}` {why}: {KEY_RULE}", shown(key)));
        }
        if let Some(why) = bad_value(value) {
            return refuse(format!("the value of `{key}` {why}: {VALUE_RULE}"));
        }
    }
    let bytes: usize = labels.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_LABELS_BYTES {
        return refuse(format!(
            "keys and values take {bytes} bytes together; at most {MAX_LABELS_BYTES} are allowed"
        ));
    }
    Ok(())
}

/// Why `key` is not a label key, if it is not.
fn bad_key(key: &str) -> Option<String> {
    let chars = key.chars().count();
    if chars == 0 {
        return Some("is empty".to_string());
    }
    if chars > MAX_LABEL_KEY {
        return Some(format!("is {chars} characters long"));
    }
    if let Some(c) = key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')))
    {
        return Some(format!("holds {}", describe(c)));
    }
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !ends_ok(key.chars().next()) || !ends_ok(key.chars().last()) {
        return Some("does not start and end with a letter or digit".to_string());
    }
    None
}

/// Why `value` is not a label value, if it is not.
fn bad_value(value: &str) -> Option<String> {
    let chars = value.chars().count();
    if chars > MAX_LABEL_VALUE {
        return Some(format!("is {chars} characters long"));
    }
    value
        .chars()
        .find(|c| c.is_control())
        .map(|c| format!("holds {}", describe(c)))
}

/// A character named so that a refusal can be read: control characters by code point.
fn describe(c: char) -> String {
    if c.is_control() || c.is_whitespace() {
        format!("the character U+{:04X}", u32::from(c))
    } else {
        format!("the character `{c}`")
    }
}

/// A key as a refusal shows it: control characters escaped, and cut after 40 characters.
fn shown(key: &str) -> String {
    let mut out: String = key.chars().take(40).flat_map(char::escape_debug).collect();
    if key.chars().count() > 40 {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(v: &Value) -> Result<BTreeMap<String, String>, RequestError> {
        label_map("labels", v)
    }

    #[test]
    fn ordinary_labels_pass() {
        for ok in [
            json!({}),
            json!({"team": "vision"}),
            json!({"gpuboard.attempt": "18f2c-41-0", "slurm.job_id": "4242"}),
            json!({"example.com/owner": "ana", "x": ""}),
            json!({"command": "/usr/bin/python3 train.py --epochs 3"}),
            json!({"ray.bundles": "2 × {GPU: 2}"}),
            json!({"k".repeat(MAX_LABEL_KEY): "v".repeat(MAX_LABEL_VALUE)}),
        ] {
            assert!(check(&ok).is_ok(), "{ok}: {:?}", check(&ok));
        }
    }

    #[test]
    fn each_broken_rule_is_refused_naming_it_and_what_is_allowed() {
        let many: serde_json::Map<String, Value> = (0..=MAX_LABELS)
            .map(|i| (format!("k{i}"), json!("v")))
            .collect();
        let big: serde_json::Map<String, Value> = (0..20)
            .map(|i| (format!("k{i}"), json!("v".repeat(1000))))
            .collect();
        let cases: Vec<(Value, &str)> = vec![
            (json!({"": "x"}), "key `` is empty"),
            (json!({"team\u{7}": "x"}), "holds the character U+0007"),
            (json!({"my team": "x"}), "holds the character U+0020"),
            (json!({"a=b": "x"}), "holds the character `=`"),
            (
                json!({"-team": "x"}),
                "start and end with a letter or digit",
            ),
            (
                json!({"team.": "x"}),
                "start and end with a letter or digit",
            ),
            (
                json!({"k".repeat(MAX_LABEL_KEY + 1): "x"}),
                "is 129 characters long",
            ),
            (
                json!({"team": "a\nb"}),
                "the value of `team` holds the character U+000A",
            ),
            (json!({"team": "\u{1b}[31m"}), "holds the character U+001B"),
            (
                json!({"team": "v".repeat(64 * 1024)}),
                "is 65536 characters long",
            ),
            (Value::Object(many), "65 labels given; at most 64"),
            (Value::Object(big), "at most 16384 are allowed"),
        ];
        for (labels, says) in cases {
            let e = check(&labels).expect_err(&labels.to_string());
            assert_eq!(e.rule, Rule::Labels, "{labels}");
            assert_eq!(e.field.as_deref(), Some("labels"));
            assert!(e.message.contains(says), "{labels}: {}", e.message);
            // The refusal says what is allowed.
            assert!(
                e.message.contains("are allowed") || e.message.contains("label "),
                "{}",
                e.message
            );
            assert_eq!(e.rule.number(), 10);
            assert_eq!(e.rule.code(), "labels");
        }
    }

    #[test]
    fn a_value_that_is_not_text_is_a_type_error_naming_the_key() {
        let e = check(&json!({"n": 3})).unwrap_err();
        assert_eq!(e.rule, Rule::WrongType);
        assert!(e.message.contains("`n`"), "{}", e.message);
        let e = check(&json!(["team"])).unwrap_err();
        assert_eq!(e.rule, Rule::WrongType);
    }
}
