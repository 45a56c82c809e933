//! The GPU-sharing annotations of HAMi and Koordinator, read into plain values. Pure: a
//! string in, values or a reason out (the reason names what was expected, for a warning).
//!
//! - HAMi's node annotation `hami.io/node-nvidia-register` lists the node's GPUs, either as
//!   a JSON array of `{id, index, count, devmem, devcore, type, numa, mode, health}` (recent
//!   releases) or as `id,count,devmem,devcore,type,numa,health[,index[,mode]]` entries each
//!   ended by `:` (older ones). `devmem` is MiB, `count` how many pods may share the GPU.
//! - HAMi's pod annotation `hami.io/vgpu-devices-allocated`: per container (ended by `;`)
//!   the devices it got (each ended by `:`), each `UUID,TYPE,MEMORY_MIB,CORES_PERCENT`.
//! - Koordinator's pod annotation `scheduling.koordinator.sh/device-allocated`: JSON,
//!   `{"gpu": [{"minor": N, "resources": {"koordinator.sh/gpu-core": "50",
//!   "koordinator.sh/gpu-memory": "11520Mi", "koordinator.sh/gpu-memory-ratio": "50"}}]}`
//!   (older releases name the resources `kubernetes.io/gpu-*`).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::units::Bytes;

/// HAMi's node annotation listing its GPUs.
pub const HAMI_NODE_REGISTER: &str = "hami.io/node-nvidia-register";
/// HAMi's pod annotation: the GPUs each container was given.
pub const HAMI_ALLOCATED: &str = "hami.io/vgpu-devices-allocated";
/// Koordinator's pod annotation: the devices the pod was given.
pub const KOORD_ALLOCATED: &str = "scheduling.koordinator.sh/device-allocated";

/// A GPU as HAMi registered it on its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HamiGpu {
    /// The GPU's UUID (`GPU-...`).
    pub uuid: String,
    /// Its index on the node, when HAMi wrote one.
    pub index: Option<u32>,
    /// How many pods may share it (`deviceSplitCount`).
    pub count: u32,
    /// Its memory as HAMi offers it.
    pub memory: Bytes,
    /// Its compute in percent (100 for a whole GPU).
    pub cores: u32,
    /// Its type (`NVIDIA-Tesla T4`).
    pub model: String,
    /// Whether HAMi reports it healthy.
    pub healthy: bool,
}

/// One GPU a HAMi pod's container was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HamiShare {
    /// The container's position in the annotation (0 for the first).
    pub container: usize,
    /// The GPU's UUID.
    pub uuid: String,
    /// The vendor word (`NVIDIA`).
    pub vendor: String,
    /// Memory given.
    pub memory: Bytes,
    /// Compute given, in percent (0: no limit set).
    pub cores: u32,
}

/// One GPU a Koordinator pod was given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KoordShare {
    /// The GPU's minor number (its index on the node).
    pub minor: u32,
    /// `gpu-core`, percent of the GPU's compute.
    pub core: Option<u32>,
    /// `gpu-memory`.
    pub memory: Option<Bytes>,
    /// `gpu-memory-ratio`, percent of the GPU's memory.
    pub ratio: Option<u32>,
}

fn mib(n: u64) -> Bytes {
    Bytes(n.saturating_mul(1 << 20))
}

#[derive(Deserialize)]
struct RegisterEntry {
    id: String,
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    count: u32,
    devmem: u64,
    #[serde(default)]
    devcore: u32,
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default = "yes")]
    health: bool,
}

fn yes() -> bool {
    true
}

/// Reads `hami.io/node-nvidia-register`, in either of its forms.
pub fn hami_register(text: &str) -> Result<Vec<HamiGpu>, String> {
    let t = text.trim();
    if t.starts_with('[') {
        let entries: Vec<RegisterEntry> = serde_json::from_str(t)
            .map_err(|e| format!("expected a JSON array of HAMi devices: {e}"))?;
        return Ok(entries
            .into_iter()
            .map(|e| HamiGpu {
                uuid: e.id,
                index: e.index,
                count: e.count,
                memory: mib(e.devmem),
                cores: e.devcore,
                model: e.kind,
                healthy: e.health,
            })
            .collect());
    }
    let mut out = Vec::new();
    for (i, entry) in t.split(':').map(str::trim).enumerate() {
        if entry.is_empty() {
            continue;
        }
        let f: Vec<&str> = entry.split(',').map(str::trim).collect();
        if f.len() < 7 {
            return Err(format!(
                "device {i}: expected `id,count,devmem,devcore,type,numa,health`, found `{entry}`"
            ));
        }
        let num = |k: usize, what: &str| {
            f[k].parse::<u64>()
                .map_err(|_| format!("device {i}: {what} `{}` is not a whole number", f[k]))
        };
        out.push(HamiGpu {
            uuid: f[0].to_string(),
            count: u32::try_from(num(1, "count")?).unwrap_or(u32::MAX),
            memory: mib(num(2, "devmem")?),
            cores: u32::try_from(num(3, "devcore")?).unwrap_or(u32::MAX),
            model: f[4].to_string(),
            healthy: f[6] != "false",
            index: f.get(7).and_then(|s| s.parse().ok()),
        });
    }
    Ok(out)
}

/// Reads `hami.io/vgpu-devices-allocated`.
pub fn hami_allocated(text: &str) -> Result<Vec<HamiShare>, String> {
    let mut out = Vec::new();
    for (container, devices) in text.split(';').enumerate() {
        for entry in devices.split(':').map(str::trim) {
            if entry.is_empty() {
                continue;
            }
            let f: Vec<&str> = entry.split(',').map(str::trim).collect();
            let [uuid, vendor, memory, cores] = f.as_slice() else {
                return Err(format!(
                    "expected `UUID,TYPE,MEMORY_MIB,CORES` for each device, found `{entry}`"
                ));
            };
            let num = |s: &str, what: &str| {
                s.parse::<u64>()
                    .map_err(|_| format!("{what} `{s}` in `{entry}` is not a whole number"))
            };
            out.push(HamiShare {
                container,
                uuid: (*uuid).to_string(),
                vendor: (*vendor).to_string(),
                memory: mib(num(memory, "memory")?),
                cores: u32::try_from(num(cores, "cores")?).unwrap_or(u32::MAX),
            });
        }
    }
    Ok(out)
}

#[derive(Deserialize)]
struct KoordEntry {
    minor: i64,
    #[serde(default)]
    resources: BTreeMap<String, serde_json::Value>,
}

/// Reads `scheduling.koordinator.sh/device-allocated` (its `gpu` part).
pub fn koord_allocated(text: &str) -> Result<Vec<KoordShare>, String> {
    let mut all: BTreeMap<String, serde_json::Value> = serde_json::from_str(text)
        .map_err(|e| format!("expected a JSON object of device kinds: {e}"))?;
    let Some(gpu) = all.remove("gpu") else {
        return Ok(Vec::new());
    };
    let entries: Vec<KoordEntry> = serde_json::from_value(gpu)
        .map_err(|e| format!("`gpu`: expected [{{minor, resources}}]: {e}"))?;
    let mut out = Vec::new();
    for e in entries {
        let minor =
            u32::try_from(e.minor).map_err(|_| format!("`gpu`: minor {} is negative", e.minor))?;
        let mut share = KoordShare {
            minor,
            ..KoordShare::default()
        };
        for (k, v) in &e.resources {
            let Some(what) = k
                .strip_prefix("koordinator.sh/")
                .or_else(|| k.strip_prefix("kubernetes.io/"))
            else {
                continue;
            };
            let text = match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                _ => return Err(format!("`gpu` minor {minor}: `{k}` is not a quantity")),
            };
            match what {
                "gpu-core" => share.core = Some(percent(&text, k)?),
                "gpu-memory-ratio" => share.ratio = Some(percent(&text, k)?),
                "gpu-memory" => {
                    share.memory = Some(
                        Bytes::parse(&text)
                            .map_err(|e| format!("`gpu` minor {minor}: `{k}`: {e}"))?,
                    );
                }
                _ => {}
            }
        }
        out.push(share);
    }
    Ok(out)
}

/// A whole-number quantity (a percent, a count) as written in a resource list.
pub fn percent(text: &str, name: &str) -> Result<u32, String> {
    text.trim()
        .parse::<u32>()
        .map_err(|_| format!("`{name}`: expected a whole number, found `{text}`"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn hami_register_reads_both_forms() {
        let json = hami_register(
            r#"[{"id":"GPU-a","count":10,"devmem":16384,"devcore":100,"type":"NVIDIA-Tesla T4","mode":"hami-core","health":true,"devicepairscore":{}}]"#,
        )
        .unwrap();
        assert_eq!(json[0].memory, Bytes::gib(16));
        assert_eq!(
            (json[0].count, json[0].cores, json[0].index),
            (10, 100, None)
        );
        let legacy =
            hami_register("GPU-1,1,10240,100,NVIDIA,0,true,0,hami-core:GPU-2,1,10240,100,NVIDIA,0,false,1,hami-core:")
                .unwrap();
        assert_eq!(legacy.len(), 2);
        assert_eq!(legacy[1].index, Some(1));
        assert!(!legacy[1].healthy);
        assert!(
            hami_register("GPU-1,x,1,1,N,0,true:")
                .unwrap_err()
                .contains("count `x`")
        );
        assert!(hami_register("[{\"id\":3}]").is_err());
    }

    #[test]
    fn hami_allocated_is_per_container_then_device() {
        let s = hami_allocated("GPU-a,NVIDIA,3000,30:GPU-b,NVIDIA,1000,0:;GPU-c,NVIDIA,500,10:;")
            .unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(
            (s[1].container, s[1].memory, s[1].cores),
            (0, Bytes::mib(1000), 0)
        );
        assert_eq!(s[2].container, 1);
        assert!(hami_allocated(";").unwrap().is_empty());
        assert!(hami_allocated("GPU-a,NVIDIA,3000:;").is_err());
    }

    #[test]
    fn koordinator_reads_both_resource_prefixes() {
        let s = koord_allocated(
            r#"{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"11520Mi","koordinator.sh/gpu-memory-ratio":"50"}}],"rdma":[{"minor":0}]}"#,
        )
        .unwrap();
        assert_eq!(
            s,
            vec![KoordShare {
                minor: 1,
                core: Some(50),
                memory: Some(Bytes::mib(11520)),
                ratio: Some(50)
            }]
        );
        let old = koord_allocated(
            r#"{"gpu":[{"minor":0,"resources":{"kubernetes.io/gpu-core":"100","kubernetes.io/gpu-memory":"12508288Ki"}}]}"#,
        )
        .unwrap();
        assert_eq!(old[0].memory, Some(Bytes(12_508_288 * 1024)));
        assert!(koord_allocated(r#"{"gpu":[{"minor":-1}]}"#).is_err());
        assert!(koord_allocated("nope").is_err());
    }
}
