//! The four GPU request forms (Ray fraction or whole GPUs, Ray memory, Koordinator share,
//! vendor whole GPUs) and what each asks of one device once normalized on its memory.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::units::{Bytes, SLOTS_PER_DEVICE, Slots, UNITS_PER_DEVICE, Units};

/// How a Koordinator share asks for memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareMemory {
    /// `gpu-memory`: bytes in total across the `shared` devices.
    Bytes(Bytes),
    /// `gpu-memory-ratio`: percent of one device's memory, in total across the devices.
    Ratio(u32),
}

/// The GPU part of a claim: exactly one of the four forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "form", rename_all = "snake_case")]
pub enum GpuForm {
    /// Ray `num_gpus = f` with 0 < f < 1, as compute units.
    RayFraction {
        /// The fraction in units of 1e-4 GPU.
        fraction: Units,
    },
    /// Ray `num_gpus = k`, k whole: k exclusive devices.
    RayWhole {
        /// How many devices.
        count: u32,
    },
    /// Ray `gpu_memory = m`: converted per device to a fraction on the 1e-4 grain.
    RayMemory {
        /// The bytes asked for.
        memory: Bytes,
    },
    /// Koordinator GPU share: memory (bytes or ratio) and optional core, split over `shared` devices.
    KoordinatorShare {
        /// Memory in total across the devices.
        memory: ShareMemory,
        /// `gpu-core` percent in total across the devices; `None` is best-effort compute.
        core: Option<u32>,
        /// `gpu.shared`: how many devices the request is split across.
        shared: u32,
        /// The request came as the legacy `koordinator.sh/gpu` and was mutated.
        #[serde(default)]
        legacy: bool,
    },
    /// `nvidia.com/gpu = k`: k whole devices, exclusive.
    Vendor {
        /// How many devices.
        count: u32,
    },
}

/// What one device must give a claim, after normalizing its form on that device's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerDevice {
    /// Memory reserved on each device.
    pub memory: Bytes,
    /// Compute reserved on each device.
    pub compute: Units,
    /// Slots taken on each device.
    pub slots: Slots,
    /// Whether the claim takes the device whole.
    pub exclusive: bool,
}

/// Why a form can never fit a device of this size, whatever else it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLarge {
    /// Memory the form needs on one device.
    pub needs: Bytes,
}

impl GpuForm {
    /// How many distinct devices of one node the claim takes.
    pub fn device_count(&self) -> u32 {
        match *self {
            GpuForm::RayFraction { .. } | GpuForm::RayMemory { .. } => 1,
            GpuForm::RayWhole { count } | GpuForm::Vendor { count } => count,
            GpuForm::KoordinatorShare { shared, .. } => shared,
        }
    }

    /// Whether the claim takes whole devices exclusively.
    pub fn is_exclusive(&self) -> bool {
        matches!(self, GpuForm::RayWhole { .. } | GpuForm::Vendor { .. })
    }

    /// Normalizes the form on a device of schedulable memory `m` (docs/design.md#2-request-forms).
    pub fn per_device(&self, m: Bytes) -> Result<PerDevice, TooLarge> {
        let shared = |memory: Bytes, compute: Units| PerDevice {
            memory,
            compute,
            slots: Slots(1),
            exclusive: false,
        };
        match *self {
            GpuForm::RayFraction { fraction } => Ok(shared(
                m.mul_div_ceil(u64::from(fraction.0), u64::from(UNITS_PER_DEVICE)),
                fraction,
            )),
            GpuForm::RayMemory { memory } => {
                if memory > m || m.0 == 0 {
                    return Err(TooLarge { needs: memory });
                }
                // Option 2 of the Ray REP: round the fraction up to the grain, then
                // reserve exactly that fraction of this device's memory.
                let units = memory.mul_div_ceil(u64::from(UNITS_PER_DEVICE), m.0).0;
                let units = u32::try_from(units)
                    .unwrap_or(UNITS_PER_DEVICE)
                    .min(UNITS_PER_DEVICE);
                Ok(shared(
                    m.mul_div_ceil(u64::from(units), u64::from(UNITS_PER_DEVICE)),
                    Units(units),
                ))
            }
            GpuForm::KoordinatorShare {
                memory,
                core,
                shared: n,
                ..
            } => {
                let n = u64::from(n.max(1));
                let memory = match memory {
                    ShareMemory::Bytes(b) => Bytes(b.0 / n),
                    ShareMemory::Ratio(r) => m.mul_div_ceil(u64::from(r) / n, 100),
                };
                if memory > m {
                    return Err(TooLarge { needs: memory });
                }
                let compute =
                    core.map_or(0, |c| u64::from(c) / n * u64::from(UNITS_PER_DEVICE) / 100);
                Ok(shared(
                    memory,
                    Units(u32::try_from(compute).unwrap_or(UNITS_PER_DEVICE)),
                ))
            }
            GpuForm::RayWhole { .. } | GpuForm::Vendor { .. } => Ok(PerDevice {
                memory: m,
                compute: Units::FULL,
                slots: Slots(SLOTS_PER_DEVICE),
                exclusive: true,
            }),
        }
    }
}

impl fmt::Display for GpuForm {
    /// The form as an operator wrote it, under canonical names.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            GpuForm::RayFraction { fraction } => write!(f, "num_gpus={fraction}"),
            GpuForm::RayWhole { count } => write!(f, "num_gpus={count}"),
            GpuForm::RayMemory { memory } => write!(f, "gpu_memory={}", memory.quantity()),
            GpuForm::Vendor { count } => write!(f, "nvidia.com/gpu={count}"),
            GpuForm::KoordinatorShare {
                memory,
                core,
                shared,
                legacy,
            } => {
                if legacy && let ShareMemory::Ratio(r) = memory {
                    return write!(f, "koordinator.sh/gpu={r} (gpu.shared={shared})");
                }
                match memory {
                    ShareMemory::Bytes(b) => write!(f, "gpu-memory={}", b.quantity())?,
                    ShareMemory::Ratio(r) => write!(f, "gpu-memory-ratio={r}")?,
                }
                if let Some(c) = core {
                    write!(f, " gpu-core={c}")?;
                }
                write!(f, " gpu.shared={shared}")
            }
        }
    }
}
