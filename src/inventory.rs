//! Static inventory files: the nodes and GPUs an endpoint serves when it does not take
//! them from NVML (hosts and tests without GPUs, and the demo fleet).
//!
//! ```toml
//! [[nodes]]
//! name = "a100-node"
//! cpus = 64                 # optional: CPU cores accounted for `cpus` claims
//! [[nodes.gpus]]
//! model = "NVIDIA A100-SXM4-40GB"
//! memory = "40GiB"          # schedulable memory M
//! uuid = "GPU-..."          # optional
//! count = 4                 # optional: this many identical GPUs
//! link_group = 0            # optional: GPUs sharing NVLink / a PCIe switch
//! ```

use std::path::Path;

use serde::Deserialize;

use crate::placement::{DeviceSpec, NodeSpec};
use crate::request::{MAX_DEVICES, Milli};
use crate::units::Bytes;

/// What was wrong with an inventory file.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// Could not read the file.
    #[error("cannot read inventory {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not valid TOML, or fields of the wrong type or unknown.
    #[error("inventory {path} is not valid: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message, with the line.
        message: String,
    },
    /// A value out of range or inconsistent.
    #[error("inventory {path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What was wrong and what is allowed.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    nodes: Vec<NodeEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeEntry {
    name: String,
    #[serde(default)]
    cpus: Option<f64>,
    #[serde(default)]
    gpus: Vec<GpuEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuEntry {
    model: String,
    memory: toml::Value,
    #[serde(default)]
    uuid: Option<String>,
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    count: Option<u32>,
    #[serde(default)]
    link_group: Option<u32>,
}

/// Reads an inventory file.
pub fn load(path: &Path) -> Result<Vec<NodeSpec>, InventoryError> {
    let text = std::fs::read_to_string(path).map_err(|source| InventoryError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text, &path.display().to_string())
}

/// Parses inventory text; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<Vec<NodeSpec>, InventoryError> {
    let file: File = toml::from_str(text).map_err(|e| InventoryError::Parse {
        path: origin.to_string(),
        message: e.to_string(),
    })?;
    let invalid = |message: String| InventoryError::Invalid {
        path: origin.to_string(),
        message,
    };
    let mut nodes = Vec::new();
    for n in file.nodes {
        if n.name.trim().is_empty() {
            return Err(invalid("a node has an empty name".to_string()));
        }
        let cpus = match n.cpus {
            None => None,
            Some(c) if c.is_finite() && c > 0.0 && c <= f64::from(MAX_DEVICES * MAX_DEVICES) => {
                // Bounded just above.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                Some(Milli((c * 1000.0).round() as u64))
            }
            Some(c) => {
                return Err(invalid(format!(
                    "node {}: cpus = {c} must be a positive number of cores",
                    n.name
                )));
            }
        };
        let mut devices = Vec::new();
        let mut next_index = 0u32;
        for g in n.gpus {
            let memory = match &g.memory {
                toml::Value::String(s) => Bytes::parse_capacity(s),
                toml::Value::Integer(i) => Bytes::from_number(*i as f64),
                other => {
                    return Err(invalid(format!(
                        "node {}: memory = {other} must be bytes or a quantity such as \"40GiB\"",
                        n.name
                    )));
                }
            }
            .map_err(|e| invalid(format!("node {}: {e}", n.name)))?;
            let count = g.count.unwrap_or(1);
            if count == 0 || count > MAX_DEVICES || (g.uuid.is_some() && count > 1) {
                return Err(invalid(format!(
                    "node {}: count = {count} must be 1 to {MAX_DEVICES} (and 1 when a uuid is given)",
                    n.name
                )));
            }
            let first = g.index.unwrap_or(next_index);
            for k in 0..count {
                devices.push(DeviceSpec {
                    index: first + k,
                    model: g.model.clone(),
                    uuid: g.uuid.clone(),
                    memory: Some(memory),
                    link_group: g.link_group,
                });
            }
            next_index = first + count;
        }
        nodes.push(NodeSpec {
            name: n.name,
            devices,
            cpus,
        });
    }
    if nodes.is_empty() {
        return Err(invalid(
            "no [[nodes]]: an inventory needs at least one node".to_string(),
        ));
    }
    Ok(nodes)
}

/// A node of `n` A100 40 GiB GPUs: a fixture the modules' tests share.
#[cfg(test)]
pub(crate) fn a100_node(name: &str, n: u32) -> NodeSpec {
    NodeSpec {
        name: name.to_string(),
        devices: (0..n)
            .map(|index| DeviceSpec {
                index,
                model: "NVIDIA A100-SXM4-40GB".to_string(),
                uuid: None,
                memory: Some(Bytes::gib(40)),
                link_group: None,
            })
            .collect(),
        cpus: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_fleet_parses() {
        let nodes = parse(include_str!("../assets/demo-fleet.toml"), "demo-fleet.toml").unwrap();
        let models: Vec<&str> = nodes
            .iter()
            .flat_map(|n| n.devices.iter().map(|d| d.model.as_str()))
            .collect();
        for want in ["A100-SXM4-40GB", "A100-SXM4-80GB", "H100", "A10G"] {
            assert!(
                models.iter().any(|m| m.contains(want)),
                "demo fleet lacks {want}"
            );
        }
    }

    #[test]
    fn counts_indexes_and_errors() {
        let nodes = parse(
            "[[nodes]]\nname = \"a\"\ncpus = 8\n[[nodes.gpus]]\nmodel = \"A100\"\nmemory = \"40GiB\"\ncount = 2\n[[nodes.gpus]]\nmodel = \"A10G\"\nmemory = 25769803776\n",
            "t",
        )
        .unwrap();
        let idx: Vec<u32> = nodes[0].devices.iter().map(|d| d.index).collect();
        assert_eq!(idx, vec![0, 1, 2]);
        assert_eq!(nodes[0].cpus, Some(Milli(8000)));
        assert_eq!(nodes[0].devices[2].memory, Some(Bytes::gib(24)));
        let e = parse(
            "[[nodes]]\nname = \"a\"\n[[nodes.gpus]]\nmodel = \"x\"\nmemory = \"40 parsecs\"\n",
            "t",
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown unit"), "{e}");
        let e = parse("[[nodes]]\nname = \"a\"\ncolour = 1\n", "t").unwrap_err();
        assert!(e.to_string().contains("colour"), "{e}");
        let e = parse("", "t").unwrap_err();
        assert!(e.to_string().contains("at least one node"), "{e}");
    }

    #[test]
    fn a_decimal_capacity_rounds_down_to_a_byte() {
        let nodes = parse(
            "[[nodes]]\nname = \"a\"\n[[nodes.gpus]]\nmodel = \"A100\"\nmemory = \"79.2GiB\"\n",
            "t",
        )
        .unwrap();
        // 79.2 x 2^30 = 85 040 352 460.8 bytes.
        assert_eq!(nodes[0].devices[0].memory, Some(Bytes(85_040_352_460)));
    }
}
