//! `accelerator_type` matching: a family (`A100`) and, when the name gives one, a memory
//! size (`A100-SXM4-80GB`, `A100-80G`). A device matches when its model is of the family
//! and, where a size was asked, its size (from its model name, or else its memory) is that
//! size: an 80 GB request never lands on a 40 GB card of the same family, nor the reverse.

use crate::units::Bytes;

use super::accelerator_key;

/// What an `accelerator_type` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceleratorWanted {
    /// The normalized family: `A100`, `H100`, `A10G`.
    pub family: String,
    /// The memory size in GB the name states, if any.
    pub memory_gb: Option<u64>,
}

/// The memory size a model or accelerator name states: `A100-SXM4-80GB` -> 80,
/// `A100-80G` -> 80, `H100 80GB HBM3` -> 80; the family itself (`A10G`) is not a size.
pub fn stated_memory_gb(name: &str) -> Option<u64> {
    let upper = name.to_ascii_uppercase();
    let family = accelerator_key(name);
    upper
        .split(['-', ' ', '_'])
        .filter(|t| !t.is_empty() && *t != family)
        .find_map(|t| {
            let digits = t.strip_suffix("GB").or_else(|| t.strip_suffix('G'))?;
            (!digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()))
                .then(|| digits.parse().ok())
                .flatten()
        })
}

impl AcceleratorWanted {
    /// Reads an `accelerator_type` (`NVIDIA_TESLA_A100`, `NVIDIA A100-SXM4-80GB`, `A100-80G`).
    pub fn parse(name: &str) -> AcceleratorWanted {
        AcceleratorWanted {
            family: accelerator_key(name),
            memory_gb: stated_memory_gb(name),
        }
    }

    /// Whether a device of `model` with `capacity` bytes is what was asked. The device's
    /// size is the one its model name states, or else its memory in GiB; sizes within a
    /// tenth of each other are the same card (an `80GB` H100 reports 79.6 GiB).
    pub fn matches(&self, model: &str, capacity: Option<Bytes>) -> bool {
        if accelerator_key(model) != self.family {
            return false;
        }
        let Some(want) = self.memory_gb else {
            return true;
        };
        let have = stated_memory_gb(model).or_else(|| capacity.map(|c| (c.0 + (1 << 29)) >> 30));
        have.is_some_and(|have| have.abs_diff(want) * 10 <= want)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_read_from_names() {
        let cases = [
            ("NVIDIA A100-SXM4-80GB", Some(80)),
            ("NVIDIA A100-SXM4-40GB", Some(40)),
            ("A100-80G", Some(80)),
            ("NVIDIA H100 80GB HBM3", Some(80)),
            ("NVIDIA A10G", None),
            ("NVIDIA_TESLA_A100", None),
            ("A100", None),
        ];
        for (name, gb) in cases {
            assert_eq!(stated_memory_gb(name), gb, "{name}");
        }
    }

    #[test]
    fn model_and_memory_size_must_both_match() {
        // (asked, device model, device memory, matches)
        let cases: [(&str, &str, Option<Bytes>, bool); 9] = [
            (
                "NVIDIA A100-SXM4-80GB",
                "NVIDIA A100-SXM4-40GB",
                Some(Bytes::gib(40)),
                false,
            ),
            (
                "NVIDIA A100-SXM4-40GB",
                "NVIDIA A100-SXM4-80GB",
                Some(Bytes::gib(80)),
                false,
            ),
            (
                "A100-80G",
                "NVIDIA A100-SXM4-40GB",
                Some(Bytes::gib(40)),
                false,
            ),
            (
                "A100-80G",
                "NVIDIA A100-SXM4-80GB",
                Some(Bytes::gib(80)),
                true,
            ),
            (
                "NVIDIA_TESLA_A100",
                "NVIDIA A100-SXM4-40GB",
                Some(Bytes::gib(40)),
                true,
            ),
            // No size in the model name: the memory decides.
            ("A100-80G", "NVIDIA A100", Some(Bytes::mib(81_920)), true),
            ("A100-80G", "NVIDIA A100", Some(Bytes::gib(40)), false),
            ("H100-80GB", "NVIDIA H100", Some(Bytes::mib(81_559)), true),
            (
                "H100-80GB",
                "NVIDIA A100-SXM4-80GB",
                Some(Bytes::gib(80)),
                false,
            ),
        ];
        for (asked, model, memory, want) in cases {
            assert_eq!(
                AcceleratorWanted::parse(asked).matches(model, memory),
                want,
                "{asked} on {model}"
            );
        }
    }
}
