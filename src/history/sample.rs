//! Telemetry samples: what is kept of a device's telemetry every sampling, taken out of a
//! served snapshot, and put back into a recorded state to show the snapshot of a time.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::snapshot::{DeviceTelemetry, ProcessView, Snapshot};
use crate::units::Bytes;
use crate::wire::history::{GpuRef, Sample};

/// How many earlier samples fill a rewound device's sparkline history.
pub const SPARKLINE: usize = 60;

/// One device's telemetry at one sampling. Power is kept to the watt (NVML's own accuracy
/// is +-5 W); the rest as sampled.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSample {
    /// When it was sampled.
    pub at: Timestamp,
    /// GPU utilization, percent.
    pub utilization_gpu: Option<u32>,
    /// Memory-controller utilization, percent.
    pub utilization_memory: Option<u32>,
    /// Memory in use, bytes.
    pub memory_used: Option<Bytes>,
    /// Memory reserved by claims then, bytes.
    pub memory_reserved: Bytes,
    /// Power draw, milliwatts, rounded to the watt.
    pub power_mw: Option<u32>,
    /// Degrees Celsius.
    pub temperature_c: Option<u32>,
    /// SM clock, MHz.
    pub clock_sm_mhz: Option<u32>,
    /// Memory clock, MHz.
    pub clock_memory_mhz: Option<u32>,
    /// Fan, percent.
    pub fan_pct: Option<u32>,
    /// What changes seldom: kept once per change in a chunk.
    pub rare: Rare,
}

/// The parts of a sample that seldom change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rare {
    /// The device had disappeared.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lost: bool,
    /// PCI bus id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// Total memory, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total: Option<Bytes>,
    /// Memory the driver reserves, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_reserved: Option<Bytes>,
    /// Power limit, milliwatts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_mw: Option<u32>,
    /// Uncorrected ECC errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_uncorrected: Option<u64>,
    /// MIG mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_enabled: Option<bool>,
    /// Throttle reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throttle: Vec<String>,
    /// Processes, with the claim each belongs to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessView>,
    /// Memory used by processes of no claim, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unclaimed_memory: Option<Bytes>,
    /// Made up by `serve --simulate-telemetry`, so a rewind says so too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub simulated: bool,
}

/// What accounting reads of a sample: its time, the device's utilization, and the claim
/// and memory of each process on it. The process list is shared by the samples that have
/// the same one (it seldom changes), so a day of samples is not a day of copies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tick {
    /// When it was sampled.
    pub at: Timestamp,
    /// GPU utilization, percent.
    pub utilization_gpu: Option<u32>,
    /// Its processes.
    pub processes: Arc<[ProcessClaim]>,
}

/// A process as accounting sees it: whose it is and how much memory it uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ProcessClaim {
    /// The claim it was attributed to.
    #[serde(default)]
    pub claim: Option<ClaimId>,
    /// GPU memory it uses, bytes.
    #[serde(default)]
    pub used_memory: Option<Bytes>,
}

impl From<&DeviceSample> for Tick {
    fn from(s: &DeviceSample) -> Tick {
        Tick {
            at: s.at,
            utilization_gpu: s.utilization_gpu,
            processes: s
                .rare
                .processes
                .iter()
                .map(|p| ProcessClaim {
                    claim: p.claim,
                    used_memory: p.used_memory,
                })
                .collect(),
        }
    }
}

fn to_watt(mw: u32) -> u32 {
    (mw.saturating_add(500) / 1000).saturating_mul(1000)
}

/// The samples in a served snapshot: one per device that has telemetry, keyed by device.
pub fn samples_of(snap: &Snapshot) -> Vec<(GpuRef, DeviceSample)> {
    snap.devices()
        .filter_map(|(n, d)| {
            let t = d.telemetry.as_ref()?;
            let gpu = GpuRef {
                node: n.name.clone(),
                index: d.index,
            };
            let sample = DeviceSample {
                at: t.sampled_at,
                utilization_gpu: t.utilization_gpu,
                utilization_memory: t.utilization_memory,
                memory_used: t.memory_used,
                memory_reserved: d.memory_allocated,
                power_mw: t.power_mw.map(to_watt),
                temperature_c: t.temperature_c,
                clock_sm_mhz: t.clock_sm_mhz,
                clock_memory_mhz: t.clock_memory_mhz,
                fan_pct: t.fan_pct,
                rare: Rare {
                    lost: t.lost,
                    pci_bus_id: t.pci_bus_id.clone(),
                    memory_total: t.memory_total,
                    driver_reserved: t.memory_reserved,
                    power_limit_mw: t.power_limit_mw,
                    ecc_uncorrected: t.ecc_uncorrected,
                    mig_enabled: t.mig_enabled,
                    throttle: t.throttle.clone(),
                    processes: t.processes.clone(),
                    unclaimed_memory: d.unclaimed_memory,
                    simulated: t.simulated,
                },
            };
            Some((gpu, sample))
        })
        .collect()
}

impl DeviceSample {
    /// The chart's view of it.
    pub fn chart(&self) -> Sample {
        Sample {
            at: self.at,
            utilization_gpu: self.utilization_gpu,
            memory_used: self.memory_used,
            memory_reserved: self.memory_reserved,
            power_mw: self.power_mw,
            temperature_c: self.temperature_c,
            clock_sm_mhz: self.clock_sm_mhz,
            clock_memory_mhz: self.clock_memory_mhz,
        }
    }

    fn telemetry(&self, earlier: &[DeviceSample]) -> DeviceTelemetry {
        let r = &self.rare;
        let recent = &earlier[earlier.len().saturating_sub(SPARKLINE)..];
        DeviceTelemetry {
            sampled_at: self.at,
            lost: r.lost,
            pci_bus_id: r.pci_bus_id.clone(),
            memory_total: r.memory_total,
            memory_reserved: r.driver_reserved,
            memory_used: self.memory_used,
            utilization_gpu: self.utilization_gpu,
            utilization_memory: self.utilization_memory,
            temperature_c: self.temperature_c,
            power_mw: self.power_mw,
            power_limit_mw: r.power_limit_mw,
            clock_sm_mhz: self.clock_sm_mhz,
            clock_memory_mhz: self.clock_memory_mhz,
            fan_pct: self.fan_pct,
            throttle: r.throttle.clone(),
            ecc_uncorrected: r.ecc_uncorrected,
            mig_enabled: r.mig_enabled,
            processes: r.processes.clone(),
            history_utilization: recent.iter().filter_map(|s| s.utilization_gpu).collect(),
            history_memory_used: recent
                .iter()
                .filter_map(|s| s.memory_used.map(|b| b.0))
                .collect(),
            simulated: r.simulated,
        }
    }
}

/// Puts samples back into a recorded state: each device gets its latest sample (the last
/// of its list; the ones before fill its sparklines), and each claim the memory its
/// processes used then. Devices without samples keep no telemetry.
pub fn join(state: &mut Snapshot, samples: &BTreeMap<GpuRef, Vec<DeviceSample>>) {
    let mut used: BTreeMap<ClaimId, Bytes> = BTreeMap::new();
    for node in &mut state.nodes {
        for d in &mut node.devices {
            let key = GpuRef {
                node: node.name.clone(),
                index: d.index,
            };
            let Some((last, earlier)) = samples.get(&key).and_then(|s| s.split_last()) else {
                continue;
            };
            d.telemetry = Some(last.telemetry(earlier));
            d.unclaimed_memory = last.rare.unclaimed_memory;
            for p in &last.rare.processes {
                if let (Some(claim), Some(mem)) = (p.claim, p.used_memory) {
                    *used.entry(claim).or_default() += mem;
                }
            }
        }
    }
    for claim in &mut state.claims {
        if let Some(mem) = used.get(&claim.id) {
            claim.memory_used = Some(*mem);
            claim.over_limit = *mem > claim.memory_reserved;
        }
    }
}
