//! The capacity a simulation places on: the [`SimHosts`] interface, and [`Hosts`], the
//! built-in model of hosts with CPU cores and GPUs.

use std::collections::{BTreeMap, HashMap};

use super::scenario::{HostSpec, ScenarioError};
use crate::fairshare::ResourceId;
use crate::ids::ClaimId;
use crate::units::{UNITS_PER_DEVICE, Units};

/// What the simulator places on: whether a claim of `units` fits a resource type now, and
/// taking and giving it back. [`Hosts`] models devices and cores; placement's fleet can
/// stand in.
pub trait SimHosts {
    /// Whether `units` of `resource` fit now.
    fn fits(&self, resource: &ResourceId, units: Units) -> bool;
    /// Takes `units` of `resource` for `claim`; false if it does not fit.
    fn place(&mut self, claim: ClaimId, resource: &ResourceId, units: Units) -> bool;
    /// Gives back what `claim` holds.
    fn release(&mut self, claim: ClaimId);
}

/// Hosts with CPU cores and GPUs: a claim up to one device takes part of one device
/// (the fullest that fits), a larger one whole devices of one host, a CPU claim cores of
/// one host, all in units (10 000 per device or core).
#[derive(Clone, Debug, Default)]
pub struct Hosts {
    hosts: Vec<HostPool>,
    held: HashMap<ClaimId, Held>,
}

/// One host: free CPU units, and free units per GPU by model.
#[derive(Clone, Debug, Default)]
struct HostPool {
    cpu_free: u64,
    gpus: BTreeMap<ResourceId, Vec<u32>>,
}

/// What a claim holds: where, and how much of each device or of the cores.
#[derive(Clone, Debug)]
struct Held {
    host: usize,
    resource: ResourceId,
    cpu: u64,
    devices: Vec<(usize, u32)>,
}

impl Hosts {
    /// Builds the hosts of a scenario.
    pub fn new(specs: &[HostSpec]) -> Result<Hosts, ScenarioError> {
        let mut hosts = Vec::with_capacity(specs.len());
        for spec in specs {
            let mut gpus = BTreeMap::new();
            for (model, &count) in &spec.gpus {
                let id = ResourceId::gpu(model)?;
                gpus.insert(id, vec![UNITS_PER_DEVICE; count as usize]);
            }
            hosts.push(HostPool {
                cpu_free: u64::from(spec.cpus) * u64::from(UNITS_PER_DEVICE),
                gpus,
            });
        }
        Ok(Hosts {
            hosts,
            held: HashMap::new(),
        })
    }

    /// Where `units` of `resource` would go now: the first host that fits.
    fn plan(&self, resource: &ResourceId, units: Units) -> Option<Held> {
        let want = u64::from(units.0);
        for (h, host) in self.hosts.iter().enumerate() {
            if !resource.is_gpu() {
                if host.cpu_free >= want {
                    return Some(Held {
                        host: h,
                        resource: resource.clone(),
                        cpu: want,
                        devices: Vec::new(),
                    });
                }
                continue;
            }
            let Some(devices) = host.gpus.get(resource) else {
                continue;
            };
            if units.0 <= UNITS_PER_DEVICE {
                // Binpack: the fullest device that still fits.
                let best = devices
                    .iter()
                    .enumerate()
                    .filter(|(_, free)| **free >= units.0)
                    .min_by_key(|(_, free)| **free);
                if let Some((d, _)) = best {
                    return Some(Held {
                        host: h,
                        resource: resource.clone(),
                        cpu: 0,
                        devices: vec![(d, units.0)],
                    });
                }
            } else if units.0.is_multiple_of(UNITS_PER_DEVICE) {
                let need = (units.0 / UNITS_PER_DEVICE) as usize;
                let whole: Vec<(usize, u32)> = devices
                    .iter()
                    .enumerate()
                    .filter(|(_, free)| **free == UNITS_PER_DEVICE)
                    .map(|(d, _)| (d, UNITS_PER_DEVICE))
                    .take(need)
                    .collect();
                if whole.len() == need {
                    return Some(Held {
                        host: h,
                        resource: resource.clone(),
                        cpu: 0,
                        devices: whole,
                    });
                }
            }
        }
        None
    }
}

impl SimHosts for Hosts {
    fn fits(&self, resource: &ResourceId, units: Units) -> bool {
        self.plan(resource, units).is_some()
    }

    fn place(&mut self, claim: ClaimId, resource: &ResourceId, units: Units) -> bool {
        let Some(held) = self.plan(resource, units) else {
            return false;
        };
        let host = &mut self.hosts[held.host];
        host.cpu_free -= held.cpu;
        if let Some(devices) = host.gpus.get_mut(&held.resource) {
            for &(d, u) in &held.devices {
                devices[d] -= u;
            }
        }
        self.held.insert(claim, held);
        true
    }

    fn release(&mut self, claim: ClaimId) {
        let Some(held) = self.held.remove(&claim) else {
            return;
        };
        let host = &mut self.hosts[held.host];
        host.cpu_free += held.cpu;
        if let Some(devices) = host.gpus.get_mut(&held.resource) {
            for &(d, u) in &held.devices {
                devices[d] += u;
            }
        }
    }
}
