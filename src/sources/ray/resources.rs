//! Ray's resource names, whichever spelling the dashboard used (`GPU_group_0_<pg>` or
//! `GPUGroup0<Pg>`), mapped back to what Ray calls them, and resource amounts in gpuboard's
//! grain.

use std::collections::BTreeMap;

use crate::units::{UNITS_PER_DEVICE, Units};

/// Hex digits of a placement-group id (18 bytes in Ray 2.x).
const PG_ID_HEX_LEN: usize = 36;

/// A resource name as Ray means it, whichever spelling the dashboard used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RayResource {
    /// `GPU`.
    Gpu,
    /// GPU reserved in a placement group: `GPU_group_<pg>` (any bundle) or
    /// `GPU_group_<i>_<pg>` (bundle `i`).
    GpuInBundle {
        /// The placement group's id, lower-case hex.
        pg: String,
        /// The bundle, when the name says.
        bundle: Option<u32>,
    },
    /// `accelerator_type:<type>`.
    AcceleratorType(String),
    /// A placement-group resource other than GPU (`bundle_group_...`, `CPU_group_...`).
    OtherInBundle,
    /// Anything else, under its canonical name where known.
    Other(String),
}

/// Splits a placement-group suffix `<i>_<pg>`, `<pg>`, or the camelCase `<i><Pg>` / `<Pg>`.
fn bundle_suffix(rest: &str) -> Option<(Option<u32>, String)> {
    let rest = rest.trim_start_matches('_');
    let (index, pg) = match rest.split_once('_') {
        Some((i, pg)) => (Some(i.parse::<u32>().ok()?), pg),
        None if rest.len() > PG_ID_HEX_LEN => {
            let (i, pg) = rest.split_at(rest.len() - PG_ID_HEX_LEN);
            (Some(i.parse::<u32>().ok()?), pg)
        }
        None => (None, rest),
    };
    (pg.len() == PG_ID_HEX_LEN && pg.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| (index, pg.to_ascii_lowercase()))
}

/// Maps a resource name from any dashboard answer back to what Ray calls it.
pub fn classify_resource(name: &str) -> RayResource {
    if name == "GPU" {
        return RayResource::Gpu;
    }
    for prefix in ["accelerator_type:", "acceleratorType:"] {
        if let Some(t) = name.strip_prefix(prefix) {
            return RayResource::AcceleratorType(t.to_string());
        }
    }
    for prefix in ["GPU_group", "GPUGroup"] {
        if let Some(rest) = name.strip_prefix(prefix)
            && let Some((bundle, pg)) = bundle_suffix(rest)
        {
            return RayResource::GpuInBundle { pg, bundle };
        }
    }
    if let Some((_, rest)) = name
        .split_once("_group")
        .or_else(|| name.split_once("Group"))
        && bundle_suffix(rest).is_some()
    {
        return RayResource::OtherInBundle;
    }
    let canonical = match name {
        "objectStoreMemory" => "object_store_memory",
        "node:InternalHead" => "node:__internal_head__",
        other => other,
    };
    RayResource::Other(canonical.to_string())
}

/// A resource amount in Ray's 1e-4 grain.
pub(super) fn units(amount: f64) -> Units {
    Units(
        (amount * f64::from(UNITS_PER_DEVICE))
            .round()
            .clamp(0.0, f64::from(u32::MAX)) as u32,
    )
}

/// Resources as Ray's demands name them: bundle GPU counted as GPU, other bundle
/// resources left out, amounts of one name summed.
pub(super) fn canonical_shape(entries: &[(RayResource, f64)]) -> BTreeMap<String, f64> {
    entries
        .iter()
        .filter(|(_, v)| *v > 0.0)
        .filter_map(|(r, v)| {
            let name = match r {
                RayResource::Gpu | RayResource::GpuInBundle { .. } => "GPU".to_string(),
                RayResource::AcceleratorType(t) => format!("accelerator_type:{t}"),
                RayResource::Other(n) => n.clone(),
                RayResource::OtherInBundle => return None,
            };
            Some((name, *v))
        })
        .fold(BTreeMap::new(), |mut m, (k, v)| {
            *m.entry(k).or_insert(0.0) += v;
            m
        })
}

/// A shape as Ray prints it: `{GPU: 1, CPU: 2}`.
pub(super) fn show_shape(shape: &BTreeMap<String, f64>) -> String {
    let parts: Vec<String> = shape.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renamed_resources_map_back() {
        let pg = "fa9db15f39cdcca1837d4e4fcf0501000000";
        assert_eq!(classify_resource("GPU"), RayResource::Gpu);
        assert_eq!(
            classify_resource("acceleratorType:A100"),
            RayResource::AcceleratorType("A100".into())
        );
        assert_eq!(
            classify_resource("accelerator_type:H100"),
            RayResource::AcceleratorType("H100".into())
        );
        for (name, bundle) in [
            ("GPUGroup0Fa9Db15F39Cdcca1837D4E4Fcf0501000000", Some(0)),
            ("GPUGroupFa9Db15F39Cdcca1837D4E4Fcf0501000000", None),
            (
                "GPU_group_12_fa9db15f39cdcca1837d4e4fcf0501000000",
                Some(12),
            ),
            ("GPU_group_fa9db15f39cdcca1837d4e4fcf0501000000", None),
        ] {
            assert_eq!(
                classify_resource(name),
                RayResource::GpuInBundle {
                    pg: pg.into(),
                    bundle
                },
                "{name}"
            );
        }
        // A group id that starts with digits is still told apart from a bundle index.
        assert_eq!(
            classify_resource("GPUGroup3Fa9Db15F39Cdcca1837D4E4Fcf05010000"),
            RayResource::Other("GPUGroup3Fa9Db15F39Cdcca1837D4E4Fcf05010000".into())
        );
        assert_eq!(
            classify_resource("GPUGroup31Fa9Db15F39Cdcca1837D4E4Fcf05010000"),
            RayResource::GpuInBundle {
                pg: "31fa9db15f39cdcca1837d4e4fcf05010000".into(),
                bundle: None
            }
        );
        assert_eq!(
            classify_resource("bundleGroup0Fa9Db15F39Cdcca1837D4E4Fcf0501000000"),
            RayResource::OtherInBundle
        );
        assert_eq!(
            classify_resource("objectStoreMemory"),
            RayResource::Other("object_store_memory".into())
        );
        assert_eq!(
            classify_resource("my_group_thing"),
            RayResource::Other("my_group_thing".into())
        );
    }
}
