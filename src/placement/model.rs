//! The placement model: nodes and devices as an inventory describes them, what is
//! allocated on each, and where a claim sits (its allocation and per-device shares).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::ClaimId;
use crate::request::{Milli, PerDevice};
use crate::units::{Bytes, Slots, Units};

/// A device as an inventory or NVML describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSpec {
    /// The device's index on its node (what `CUDA_VISIBLE_DEVICES` names).
    pub index: u32,
    /// The model name, e.g. `NVIDIA A100-SXM4-40GB`.
    pub model: String,
    /// NVML's UUID when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Schedulable memory M; `None` makes the device unschedulable.
    pub memory: Option<Bytes>,
    /// Devices with the same group share `NVLink` or a `PCIe` switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_group: Option<u32>,
}

/// A node as an inventory describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// The node's name, unique in the fleet.
    pub name: String,
    /// Its devices.
    pub devices: Vec<DeviceSpec>,
    /// CPU capacity for claims that ask for `cpus`; `None` leaves CPU unaccounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Milli>,
}

/// Whether a device can take new claims, apart from cordoning.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", content = "reason", rename_all = "lowercase")]
pub enum Health {
    /// Working.
    #[default]
    Healthy,
    /// Reported bad (ECC, XID...), with why.
    Unhealthy(String),
    /// Gone from the bus or from NVML.
    Lost,
}

/// A device and what is allocated on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// What the device is.
    pub spec: DeviceSpec,
    /// Memory reserved by claims.
    pub memory_allocated: Bytes,
    /// Compute reserved by claims.
    pub compute_allocated: Units,
    /// Slots taken by claims.
    pub slots_allocated: Slots,
    /// Takes no new claims while set.
    pub cordoned: bool,
    /// Health as last reported.
    pub health: Health,
    /// Claims holding a share of this device, in placement order.
    pub holders: Vec<ClaimId>,
    pub(super) key: String,
}

impl Device {
    /// Schedulable memory, zero when unknown.
    pub fn capacity(&self) -> Bytes {
        self.spec.memory.unwrap_or_default()
    }
    /// Memory not reserved.
    pub fn memory_free(&self) -> Bytes {
        self.capacity() - self.memory_allocated
    }
    /// Compute not reserved.
    pub fn compute_free(&self) -> Units {
        Units::FULL - self.compute_allocated
    }
    /// Slots not taken.
    pub fn slots_free(&self) -> Slots {
        Slots::FULL - self.slots_allocated
    }
    /// The normalized accelerator name used for `accelerator_type` matching.
    pub fn accelerator(&self) -> &str {
        &self.key
    }
    /// Whether new claims may land here at all.
    pub fn schedulable(&self) -> bool {
        !self.cordoned
            && self.health == Health::Healthy
            && self.spec.memory.is_some_and(|m| m.0 > 0)
    }
    /// Whether a share of this size fits in what is free now.
    pub(super) fn fits(&self, need: &PerDevice) -> bool {
        need.memory <= self.memory_free()
            && need.compute <= self.compute_free()
            && need.slots <= self.slots_free()
            && (!need.exclusive || self.slots_allocated.0 == 0)
    }
}

/// A node and its devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The node's name.
    pub name: String,
    /// Devices in index order.
    pub devices: Vec<Device>,
    /// CPU capacity, when accounted.
    pub cpus: Option<Milli>,
    /// CPU reserved by claims.
    pub cpus_allocated: Milli,
}

impl Node {
    /// The device with this index.
    pub fn device(&self, index: u32) -> Option<&Device> {
        self.devices.iter().find(|d| d.spec.index == index)
    }
    /// CPU not reserved, when accounted.
    pub(super) fn cpus_free(&self) -> Option<Milli> {
        self.cpus
            .map(|c| Milli(c.0.saturating_sub(self.cpus_allocated.0)))
    }
}

/// One device's part of a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceShare {
    /// Device index on the claim's node.
    pub device: u32,
    /// Memory reserved there.
    pub memory: Bytes,
    /// Compute reserved there.
    pub compute: Units,
    /// Slots taken there.
    pub slots: Slots,
}

/// Where a claim sits: one node, and its shares of that node's devices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// The node.
    pub node: String,
    /// Its shares, one per device, in device order.
    pub shares: Vec<DeviceShare>,
    /// CPU reserved on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Milli>,
}

impl Allocation {
    /// Device indexes, comma-separated, as `CUDA_VISIBLE_DEVICES` wants them.
    pub fn visible_devices(&self) -> String {
        self.shares
            .iter()
            .map(|s| s.device.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
    /// Memory reserved across all devices.
    pub fn memory(&self) -> Bytes {
        self.shares.iter().fold(Bytes(0), |a, s| a + s.memory)
    }
    /// Compute reserved across all devices.
    pub fn compute(&self) -> Units {
        self.shares.iter().fold(Units(0), |a, s| a + s.compute)
    }
}

impl fmt::Display for Allocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.node, self.visible_devices())
    }
}
