//! Flink's external-resource keys, read from a flat key/value configuration: the
//! `key: value` lines of a flink-conf.yaml, or the same keys in gpuboard's TOML file
//! (quoted dotted keys or nested tables, both flatten to the same names).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The resource name Flink uses for GPUs.
pub const GPU_RESOURCE: &str = "gpu";
/// Kubernetes extended resource asked for when none is configured.
pub const DEFAULT_KUBERNETES_KEY: &str = "nvidia.com/gpu";
/// YARN resource asked for when none is configured.
pub const DEFAULT_YARN_KEY: &str = "yarn.io/gpu";

/// A configuration that cannot be used, naming the key or line and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A line that is not `key: value`.
    #[error("line {line}: `{text}` is not a `key: value` line")]
    NotKeyValue {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// A key given twice.
    #[error("line {line}: key `{key}` is set twice")]
    Duplicate {
        /// 1-based line number of the second setting.
        line: usize,
        /// The key.
        key: String,
    },
    /// A value of the wrong kind.
    #[error("`{key}` = `{value}`: {allowed}")]
    BadValue {
        /// The key.
        key: String,
        /// What was given.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// GPUs are listed as a resource but no amount is set.
    #[error(
        "`external-resources` lists `gpu` but `external-resource.gpu.amount` is not set; set it to the number of GPUs per worker"
    )]
    MissingAmount,
}

/// Reads `key: value` lines as Flink reads flink-conf.yaml: `#` starts a comment, blank
/// lines are skipped, values may be quoted.
pub fn parse_flat_config(text: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut map = BTreeMap::new();
    for (n, raw) in text.lines().enumerate() {
        let line = strip_comment(raw).trim();
        if line.is_empty() {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(ConfigError::NotKeyValue {
                line: n + 1,
                text: raw.trim().to_string(),
            });
        };
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(ConfigError::NotKeyValue {
                line: n + 1,
                text: raw.trim().to_string(),
            });
        }
        if map.insert(key.to_string(), unquote(value.trim())).is_some() {
            return Err(ConfigError::Duplicate {
                line: n + 1,
                key: key.to_string(),
            });
        }
    }
    Ok(map)
}

/// `#` outside quotes starts a comment.
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '#') => return &line[..i],
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    line
}

fn unquote(value: &str) -> String {
    for q in ['"', '\''] {
        if value.len() >= 2 && value.starts_with(q) && value.ends_with(q) {
            return value[1..value.len() - 1].to_string();
        }
    }
    value.to_string()
}

/// Flattens a TOML table into dotted keys. Arrays become one string: lists joined by
/// `;` for `external-resources`, shell-quoted words for everything else (script args).
pub fn flatten_toml(table: &toml::Table) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    flatten_into(table, "", &mut out);
    out
}

fn flatten_into(table: &toml::Table, prefix: &str, out: &mut BTreeMap<String, String>) {
    for (key, value) in table {
        let full = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(inner) => flatten_into(inner, &full, out),
            toml::Value::String(s) => {
                out.insert(full, s.clone());
            }
            toml::Value::Array(items) => {
                let words: Vec<String> = items.iter().map(scalar_text).collect();
                let joined = if full == "external-resources" {
                    words.join(";")
                } else {
                    words
                        .iter()
                        .map(|w| shell_quote(w))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                out.insert(full, joined);
            }
            other => {
                out.insert(full, scalar_text(other));
            }
        }
    }
}

fn scalar_text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn shell_quote(word: &str) -> String {
    if !word.is_empty() && !word.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// Splits script arguments as a shell would for plain words and quotes (no expansion).
pub fn split_args(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("unclosed single quote".to_string()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => word.push(c),
                            None => return Err("trailing backslash".to_string()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("unclosed double quote".to_string()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(c) => {
                    in_word = true;
                    word.push(c);
                }
                None => return Err("trailing backslash".to_string()),
            },
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// Flink's GPU settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuResourceConfig {
    /// GPUs per worker (`external-resource.gpu.amount`).
    pub amount: u32,
    /// Discovery script (`external-resource.gpu.param.discovery-script.path`); `None`
    /// means NVML or the static inventory.
    pub script_path: Option<PathBuf>,
    /// Its arguments after the amount (`...discovery-script.args`).
    pub script_args: Vec<String>,
    /// Kubernetes extended resource name.
    pub kubernetes_key: String,
    /// YARN resource name.
    pub yarn_key: String,
}

fn key(suffix: &str) -> String {
    format!("external-resource.{GPU_RESOURCE}.{suffix}")
}

impl GpuResourceConfig {
    /// Reads the GPU settings from flat keys. `Ok(None)` when GPUs are not configured:
    /// `external-resources` does not list `gpu` (when present) and no amount is set.
    pub fn from_flat(
        map: &BTreeMap<String, String>,
    ) -> Result<Option<GpuResourceConfig>, ConfigError> {
        let listed = map.get("external-resources").map(|list| {
            list.split([';', ','])
                .map(str::trim)
                .any(|name| name == GPU_RESOURCE)
        });
        let amount_key = key("amount");
        let amount = match map.get(&amount_key) {
            None => {
                return match listed {
                    Some(true) => Err(ConfigError::MissingAmount),
                    _ => Ok(None),
                };
            }
            Some(text) => text
                .trim()
                .parse::<u32>()
                .map_err(|_| ConfigError::BadValue {
                    key: amount_key.clone(),
                    value: text.clone(),
                    allowed: "a whole number of GPUs, 0 or more",
                })?,
        };
        if listed == Some(false) || amount == 0 {
            return Ok(None);
        }
        let args_key = key("param.discovery-script.args");
        let script_args = match map.get(&args_key) {
            None => Vec::new(),
            Some(text) => split_args(text).map_err(|_| ConfigError::BadValue {
                key: args_key.clone(),
                value: text.clone(),
                allowed: "arguments separated by spaces, with balanced quotes",
            })?,
        };
        let pick = |names: &[&str], default: &str| {
            names
                .iter()
                .find_map(|n| map.get(&key(n)))
                .map_or(default.to_string(), |v| v.trim().to_string())
        };
        Ok(Some(GpuResourceConfig {
            amount,
            script_path: map
                .get(&key("param.discovery-script.path"))
                .map(|p| PathBuf::from(p.trim()))
                .filter(|p| !p.as_os_str().is_empty()),
            script_args,
            // Flink ships `config-key`; the FLIP wrote `key`. Both are read.
            kubernetes_key: pick(
                &["kubernetes.config-key", "kubernetes.key"],
                DEFAULT_KUBERNETES_KEY,
            ),
            yarn_key: pick(&["yarn.config-key", "yarn.key"], DEFAULT_YARN_KEY),
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const FLINK_CONF: &str = r#"
# GPU for every task executor
external-resources: gpu
external-resource.gpu.driver-factory.class: org.apache.flink.externalresource.gpu.GPUDriverFactory
external-resource.gpu.amount: 2 # two per worker
external-resource.gpu.param.discovery-script.path: /opt/flink/plugins/external-resource-gpu/nvidia-gpu-discovery.sh
external-resource.gpu.param.discovery-script.args: "--enable-coordination-mode --coordination-file /tmp/flink-gpu"
external-resource.gpu.kubernetes.config-key: amd.com/gpu
taskmanager.numberOfTaskSlots: 4
"#;

    #[test]
    fn reads_a_flink_conf() {
        let map = parse_flat_config(FLINK_CONF).unwrap();
        let gpu = GpuResourceConfig::from_flat(&map).unwrap().unwrap();
        assert_eq!(gpu.amount, 2);
        assert_eq!(
            gpu.script_path.unwrap().to_str(),
            Some("/opt/flink/plugins/external-resource-gpu/nvidia-gpu-discovery.sh")
        );
        assert_eq!(
            gpu.script_args,
            vec![
                "--enable-coordination-mode",
                "--coordination-file",
                "/tmp/flink-gpu"
            ]
        );
        assert_eq!(gpu.kubernetes_key, "amd.com/gpu");
        assert_eq!(gpu.yarn_key, DEFAULT_YARN_KEY);
    }

    #[test]
    fn reads_the_flip_spellings_and_toml() {
        let toml_text = r#"
"external-resources" = ["gpu"]
"external-resource.gpu.amount" = 1
"external-resource.gpu.yarn.key" = "yarn.io/gpu-a100"

[external-resource.gpu.param.discovery-script]
path = "/usr/local/bin/gpuboard-discover"
args = ["--privilege", "--check-dead", "--assign-file", "/tmp/my assign"]
"#;
        let table: toml::Table = toml_text.parse().unwrap();
        let map = flatten_toml(&table);
        let gpu = GpuResourceConfig::from_flat(&map).unwrap().unwrap();
        assert_eq!(gpu.amount, 1);
        assert_eq!(gpu.yarn_key, "yarn.io/gpu-a100");
        assert_eq!(
            gpu.script_args,
            vec![
                "--privilege",
                "--check-dead",
                "--assign-file",
                "/tmp/my assign"
            ]
        );
    }

    #[test]
    fn bad_input_names_the_problem() {
        let e = parse_flat_config("a: 1\njust words\n").unwrap_err();
        assert_eq!(
            e,
            ConfigError::NotKeyValue {
                line: 2,
                text: "just words".into()
            }
        );
        assert!(matches!(
            parse_flat_config("a: 1\na: 2").unwrap_err(),
            ConfigError::Duplicate { line: 2, .. }
        ));
        let map = parse_flat_config("external-resource.gpu.amount: two").unwrap();
        let e = GpuResourceConfig::from_flat(&map).unwrap_err();
        assert!(e.to_string().contains("whole number"), "{e}");
        let map = parse_flat_config("external-resources: gpu").unwrap();
        assert_eq!(
            GpuResourceConfig::from_flat(&map).unwrap_err(),
            ConfigError::MissingAmount
        );
        let map = parse_flat_config(
            "external-resource.gpu.amount: 1\nexternal-resource.gpu.param.discovery-script.args: \"a 'b\"",
        )
        .unwrap();
        assert!(GpuResourceConfig::from_flat(&map).is_err());
    }

    #[test]
    fn gpus_not_listed_or_zero_means_not_configured() {
        let map =
            parse_flat_config("external-resources: fpga\nexternal-resource.gpu.amount: 2").unwrap();
        assert_eq!(GpuResourceConfig::from_flat(&map).unwrap(), None);
        let map = parse_flat_config("external-resource.gpu.amount: 0").unwrap();
        assert_eq!(GpuResourceConfig::from_flat(&map).unwrap(), None);
        assert_eq!(
            GpuResourceConfig::from_flat(&BTreeMap::new()).unwrap(),
            None
        );
    }

    #[test]
    fn splits_args_like_a_shell() {
        assert_eq!(
            split_args(r#"a "b c" 'd e' f\ g"#).unwrap(),
            vec!["a", "b c", "d e", "f g"]
        );
        assert!(split_args("'open").is_err());
        assert_eq!(split_args("").unwrap(), Vec::<String>::new());
    }
}
