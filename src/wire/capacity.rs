//! `GET /v1/capacity`: what placement needs of an endpoint and nothing more: per node its
//! CPU, and per device its model, schedulable memory and what is still free of memory,
//! compute and slots, with cordons and health. A fleet claim ranks endpoints on it instead
//! of their whole snapshots (claims, accounts, events, telemetry): a few hundred bytes per
//! node. Its `ETag` is a digest of the body, so it answers 304 while the capacity is the
//! same, whatever else (telemetry, the audit log) moved.
//!
//! Per device, not per model: whether a request for 2 devices of 8 GiB fits depends on
//! which devices have the room, which totals per model cannot say.

use serde::{Deserialize, Serialize};

use crate::ids::ClaimId;
use crate::placement::{
    Allocation, DeviceShare, DeviceSpec, Fleet, FleetError, Health, NodeSpec, Policy,
};
use crate::request::{ClaimRequest, Milli};
use crate::snapshot::Snapshot;
use crate::units::{Bytes, Slots, Units};

/// The capacity schema this build writes and reads.
pub const CAPACITY_SCHEMA: u32 = 1;

/// An endpoint's capacity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacitySummary {
    /// `CAPACITY_SCHEMA`.
    pub schema: u32,
    /// The endpoint's placement policy (`binpack` or `spread`).
    pub policy: String,
    /// The revision the capacity is at.
    pub revision: u64,
    /// Nodes in the snapshot's order.
    pub nodes: Vec<NodeCapacity>,
}

/// One node's capacity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCapacity {
    /// Its name.
    pub name: String,
    /// CPU capacity in millicores, when accounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_milli: Option<u64>,
    /// CPU reserved, millicores.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cpus_allocated_milli: u64,
    /// Devices in index order.
    pub devices: Vec<DeviceCapacity>,
}

/// One device's capacity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceCapacity {
    /// Index on the node.
    pub index: u32,
    /// Model name.
    pub model: String,
    /// UUID when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Schedulable memory; `null` when unknown (then unschedulable).
    pub memory_capacity: Option<Bytes>,
    /// Memory reserved by claims.
    pub memory_allocated: Bytes,
    /// Compute reserved, units (10 000 = one GPU).
    pub compute_allocated: Units,
    /// Slots taken (of 100).
    pub slots_allocated: Slots,
    /// Taking no new claims.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cordoned: bool,
    /// Health, when not healthy.
    #[serde(default, skip_serializing_if = "is_healthy")]
    pub health: Health,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_false(b: &bool) -> bool {
    !*b
}

fn is_healthy(h: &Health) -> bool {
    *h == Health::Healthy
}

impl CapacitySummary {
    /// The capacity a snapshot shows.
    pub fn of(snap: &Snapshot) -> CapacitySummary {
        CapacitySummary {
            schema: CAPACITY_SCHEMA,
            policy: snap.endpoint.policy.clone(),
            revision: snap.revision,
            nodes: snap
                .nodes
                .iter()
                .map(|n| NodeCapacity {
                    name: n.name.clone(),
                    cpus_milli: n.cpus_milli,
                    cpus_allocated_milli: n.cpus_allocated_milli,
                    devices: n
                        .devices
                        .iter()
                        .map(|d| DeviceCapacity {
                            index: d.index,
                            model: d.model.clone(),
                            uuid: d.uuid.clone(),
                            memory_capacity: d.memory_capacity,
                            memory_allocated: d.memory_allocated,
                            compute_allocated: d.compute_allocated,
                            slots_allocated: d.slots_allocated,
                            cordoned: d.cordoned,
                            health: d.health.clone(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// The endpoint's placement policy.
    pub fn placement_policy(&self) -> Policy {
        if self.policy == "spread" {
            Policy::Spread
        } else {
            Policy::Binpack
        }
    }

    /// The placement fleet it describes: its devices (cordons and health included) with
    /// what is allocated on each booked as one claim per node, so placement sees the same
    /// free memory, compute, slots and CPU as with every claim booked one by one.
    pub fn fleet(&self) -> Result<Fleet, FleetError> {
        let mut fleet = Fleet::new(self.placement_policy());
        for (i, n) in self.nodes.iter().enumerate() {
            fleet.add_node(NodeSpec {
                name: n.name.clone(),
                devices: n
                    .devices
                    .iter()
                    .map(|d| DeviceSpec {
                        index: d.index,
                        model: d.model.clone(),
                        uuid: d.uuid.clone(),
                        memory: d.memory_capacity,
                        link_group: None,
                    })
                    .collect(),
                cpus: n.cpus_milli.map(Milli),
            })?;
            for d in &n.devices {
                if d.cordoned {
                    fleet.set_cordon(&n.name, d.index, true)?;
                }
                if d.health != Health::Healthy {
                    fleet.set_health(&n.name, d.index, d.health.clone())?;
                }
            }
            let shares: Vec<DeviceShare> = n
                .devices
                .iter()
                .filter(|d| {
                    d.memory_allocated.0 > 0 || d.compute_allocated.0 > 0 || d.slots_allocated.0 > 0
                })
                .map(|d| DeviceShare {
                    device: d.index,
                    memory: d.memory_allocated,
                    compute: d.compute_allocated,
                    slots: d.slots_allocated,
                })
                .collect();
            let cpus = (n.cpus_allocated_milli > 0).then_some(Milli(n.cpus_allocated_milli));
            if shares.is_empty() && cpus.is_none() {
                continue;
            }
            // Ids from the top of the range: no endpoint hands those out.
            let id = ClaimId(u64::MAX - i as u64);
            let booked = Allocation {
                node: n.name.clone(),
                shares,
                cpus,
            };
            fleet.restore(id, &ClaimRequest::memory(Bytes(0), ""), &booked)?;
        }
        Ok(fleet)
    }
}

/// The `ETag` of a capacity body: a digest of its bytes (64-bit FNV-1a), quoted.
pub fn capacity_etag(body: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in body {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("\"c{h:016x}\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{DeviceView, NodeView};

    fn device(index: u32, allocated_gib: u64, slots: u32) -> DeviceView {
        DeviceView {
            index,
            model: "NVIDIA A100-SXM4-80GB".into(),
            memory_capacity: Some(Bytes::gib(80)),
            memory_allocated: Bytes::gib(allocated_gib),
            compute_allocated: Units(slots * 100),
            slots_allocated: Slots(slots),
            ..DeviceView::default()
        }
    }

    #[test]
    fn the_fleet_of_a_capacity_has_what_the_devices_have_free() {
        let mut snap = Snapshot::default();
        snap.endpoint.policy = "spread".into();
        snap.nodes.push(NodeView {
            name: "a".into(),
            cpus_milli: Some(4000),
            cpus_allocated_milli: 1000,
            devices: vec![device(0, 70, 40), device(1, 0, 0), device(2, 80, 100)],
        });
        snap.nodes[0].devices[1].cordoned = true;
        let cap = CapacitySummary::of(&snap);
        let fleet = cap.fleet().unwrap();
        assert_eq!(fleet.policy(), Policy::Spread);
        // 20 GiB fits nowhere: device 0 has 10 free, 1 is cordoned, 2 is full.
        assert!(
            fleet
                .plan(&ClaimRequest::memory(Bytes::gib(20), "p"))
                .is_err()
        );
        let got = fleet
            .plan(&ClaimRequest::memory(Bytes::gib(8), "p"))
            .unwrap();
        assert_eq!(got.shares[0].device, 0);
        // The body round-trips and its tag follows its bytes.
        let json = serde_json::to_vec(&cap).unwrap();
        assert_eq!(
            serde_json::from_slice::<CapacitySummary>(&json).unwrap(),
            cap
        );
        assert_eq!(capacity_etag(&json), capacity_etag(&json));
        let mut other = cap.clone();
        other.nodes[0].devices[0].memory_allocated = Bytes::gib(1);
        assert_ne!(
            capacity_etag(&serde_json::to_vec(&other).unwrap()),
            capacity_etag(&json)
        );
    }
}
