//! The glue between placement and the fair-share ledger: which resource type a claim
//! runs on and how much of it it holds, what a pending claim could use, and the ledger
//! as the snapshot shows it.

use std::collections::BTreeMap;
use std::time::Duration;

use super::forms::Form;
use crate::clock::{Timestamp, age};
use crate::fairshare::{
    FairShareView, Ledger, PendingClaim, Placed, ProjectName, ResourceDemand, ResourceId,
    ResourceType, Speed, WaitReason,
};
use crate::ids::ClaimId;
use crate::placement::{Allocation, Fleet};
use crate::request::{AcceleratorWanted, ClaimRequest};
use crate::snapshot::{ProjectResourceView, ProjectView, ResourceView};
use crate::units::{Bytes, UNITS_PER_DEVICE, Units};

/// Units of the `cpu` type per millicore (10 000 per core, as for a device).
const UNITS_PER_MILLI: u64 = UNITS_PER_DEVICE as u64 / 1000;

/// What a share of a device counts for in the accounts: the larger of its compute and
/// its memory fraction, so a memory-only claim still uses what it keeps others from.
fn held(compute: Units, memory: Bytes, capacity: Bytes) -> u64 {
    let by_memory = if capacity.0 == 0 {
        0
    } else {
        memory
            .mul_div_ceil(u64::from(UNITS_PER_DEVICE), capacity.0)
            .0
    };
    u64::from(compute.0)
        .max(by_memory)
        .min(u64::from(UNITS_PER_DEVICE))
}

fn units(n: u64) -> Units {
    Units(u32::try_from(n).unwrap_or(u32::MAX))
}

/// The resource types of a fleet: one per GPU model, and `cpu` when nodes account CPU.
pub fn resource_types(fleet: &Fleet, speeds: &BTreeMap<String, f64>) -> Vec<ResourceType> {
    let mut models: BTreeMap<&str, u32> = BTreeMap::new();
    let mut cores = 0u64;
    for node in fleet.nodes() {
        for d in &node.devices {
            *models.entry(d.spec.model.as_str()).or_default() += 1;
        }
        cores += node.cpus.map_or(0, |c| c.0 / 1000);
    }
    let mut types: Vec<ResourceType> = models
        .into_iter()
        .filter_map(|(model, n)| {
            ResourceId::gpu(model)
                .ok()
                .map(|id| ResourceType::new(id, n))
        })
        .collect();
    if cores > 0 {
        types.push(ResourceType::new(
            ResourceId::cpu(),
            u32::try_from(cores).unwrap_or(u32::MAX),
        ));
    }
    for t in &mut types {
        let configured = speeds
            .get(t.id.as_str())
            .or_else(|| t.id.model().and_then(|m| speeds.get(m)));
        if let Some(speed) = configured.and_then(|g| Speed::new(*g).ok()) {
            t.speed = speed;
        }
    }
    types
}

/// The resource type an allocation runs on and the units it holds there.
pub fn usage(fleet: &Fleet, alloc: &Allocation) -> Option<(ResourceId, Units)> {
    let Some(first) = alloc.shares.first() else {
        let cpus = alloc.cpus?;
        return Some((
            ResourceId::cpu(),
            units(cpus.0.saturating_mul(UNITS_PER_MILLI)),
        ));
    };
    let node = fleet.node(&alloc.node)?;
    let model = &node.device(first.device)?.spec.model;
    let total = alloc
        .shares
        .iter()
        .filter_map(|s| {
            node.device(s.device)
                .map(|d| held(s.compute, s.memory, d.capacity()))
        })
        .sum();
    Some((ResourceId::gpu(model).ok()?, units(total)))
}

/// Every resource type a request could ever run on, with what it would take there.
pub fn demand(fleet: &Fleet, req: &ClaimRequest) -> Vec<ResourceDemand> {
    let Some(form) = req.gpu else {
        return req
            .cpus
            .map(|c| ResourceDemand {
                resource: ResourceId::cpu(),
                units: units(c.0.saturating_mul(UNITS_PER_MILLI)),
            })
            .into_iter()
            .collect();
    };
    let wanted = req
        .accelerator_type
        .as_deref()
        .map(AcceleratorWanted::parse);
    // The largest device of each model decides whether the model could ever serve it.
    let mut models: BTreeMap<&str, Bytes> = BTreeMap::new();
    for d in fleet.nodes().iter().flat_map(|n| n.devices.iter()) {
        let m = models.entry(d.spec.model.as_str()).or_default();
        *m = (*m).max(d.capacity());
    }
    models
        .into_iter()
        .filter(|(model, capacity)| {
            wanted
                .as_ref()
                .is_none_or(|w| w.matches(model, Some(*capacity)))
        })
        .filter_map(|(model, capacity)| {
            let need = form.per_device(capacity).ok()?;
            let per = held(need.compute, need.memory, capacity);
            Some(ResourceDemand {
                resource: ResourceId::gpu(model).ok()?,
                units: units(per * u64::from(form.device_count())),
            })
        })
        .collect()
}

/// Tells the ledger a claim now holds its allocation.
pub fn record_placed(
    ledger: &mut Ledger,
    fleet: &Fleet,
    now: Timestamp,
    id: ClaimId,
    req: &ClaimRequest,
    alloc: &Allocation,
) {
    let (Some((resource, units)), Ok(project)) =
        (usage(fleet, alloc), ProjectName::new(&req.project))
    else {
        return;
    };
    let placed = Placed {
        id,
        project,
        resource,
        units,
        expected_duration: req.expected_duration.map(Duration::from_secs),
    };
    if let Err(e) = ledger.placed(now, placed) {
        tracing::warn!("fair-share ledger refused placed claim {id}: {e}");
    }
}

/// Queues a claim in the ledger; `false` when no resource type could ever run it.
pub fn record_pending(
    ledger: &mut Ledger,
    fleet: &Fleet,
    now: Timestamp,
    id: ClaimId,
    req: &ClaimRequest,
) -> bool {
    let Ok(project) = ProjectName::new(&req.project) else {
        return false;
    };
    let pending = PendingClaim {
        id,
        project,
        demand: demand(fleet, req),
        expected_duration: req.expected_duration.map(Duration::from_secs),
        submitted: now,
        // Claims of one form fit alike (`queue::Fits` asks placement by form).
        form: Some(Form::words(req)),
    };
    match ledger.submit(now, pending) {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!("fair-share ledger did not queue claim {id}: {e}");
            false
        }
    }
}

/// A wait reason in an operator's words, with times relative to now.
pub fn reason_text(reason: &WaitReason, now: Timestamp) -> Option<String> {
    Some(match reason {
        WaitReason::Queued => return None,
        WaitReason::BackedOff { until } => {
            format!("backed off for {}", age(until.millis_since(now)))
        }
        WaitReason::NothingFits { since } => {
            format!(
                "no pending claim fits (for {})",
                age(now.millis_since(*since))
            )
        }
        other => other.to_string(),
    })
}

/// A debt as the snapshot shows it: to the thousandth of an instance-second (the console
/// shows whole ones), so that float noise in the ledger's accrual (a few 1e-10 between two
/// readings with no commit) makes no new project on the wire. The ledger keeps its own
/// figure unrounded; `+ 0.0` turns a rounded `-0` into `0`.
fn shown_debt(debt: f64) -> f64 {
    (debt * 1e3).round() / 1e3 + 0.0
}

/// The ledger's projects and resource types as the snapshot shows them.
pub fn views(view: &FairShareView, now: Timestamp) -> (Vec<ProjectView>, Vec<ResourceView>) {
    let projects: Vec<ProjectView> = view
        .projects
        .iter()
        .map(|p| ProjectView {
            name: p.name.as_str().to_string(),
            share: p.share.get(),
            running: u32::try_from(p.running).unwrap_or(u32::MAX),
            pending: u32::try_from(p.pending).unwrap_or(u32::MAX),
            overall_debt: shown_debt(p.overall_debt.0),
            priority: None,
            resources: p
                .resources
                .iter()
                .map(|a| ProjectResourceView {
                    resource: a.resource.to_string(),
                    debt: shown_debt(a.debt.0),
                    target: a.target_instances,
                    used: a.used_instances,
                    eligible: a.accrue,
                    backoff_until: a.backoff_until.filter(|u| *u > now),
                    // Whole seconds are what an operator reads; the value is at most a day.
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    backoff_interval_s: a.backoff_interval_s.map(|s| s.round() as u64),
                    pending: a.pending,
                    reason: reason_text(&a.reason, now),
                })
                .collect(),
        })
        .collect();
    let mut projects: Vec<ProjectView> = projects;
    projects.sort_by(|a, b| a.name.cmp(&b.name));
    let resources = view
        .resources
        .iter()
        .map(|r| ResourceView {
            name: r.id.to_string(),
            instances: f64::from(r.instances),
            speed: r.speed.gflops(),
            idle: r.idle_instances,
            shortfall: r.shortfall.0,
        })
        .collect();
    (projects, resources)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::{DeviceSpec, NodeSpec, Policy};
    use crate::request::Milli;
    use serde_json::json;

    fn fleet() -> Fleet {
        let mut f = Fleet::new(Policy::Binpack);
        f.add_node(NodeSpec {
            name: "a".into(),
            devices: vec![
                DeviceSpec {
                    index: 0,
                    model: "NVIDIA A100-SXM4-40GB".into(),
                    uuid: None,
                    memory: Some(Bytes::gib(40)),
                    link_group: None,
                },
                DeviceSpec {
                    index: 1,
                    model: "NVIDIA A10G".into(),
                    uuid: None,
                    memory: Some(Bytes::gib(24)),
                    link_group: None,
                },
            ],
            cpus: Some(Milli(8000)),
        })
        .unwrap();
        f
    }

    #[test]
    fn demand_per_model_uses_the_larger_of_compute_and_memory() {
        let f = fleet();
        let req = ClaimRequest::from_json(&json!({"gpu_memory": "30Gi"})).unwrap();
        let d = demand(&f, &req);
        assert_eq!(d.len(), 1, "30 GiB fits only the 40 GiB model: {d:?}");
        assert_eq!(d[0].units, Units(7500));
        let req = ClaimRequest::from_json(&json!({"gpu-memory-ratio": 50})).unwrap();
        let d = demand(&f, &req);
        assert!(
            d.iter().all(|x| x.units == Units(5000)),
            "ratio without core still counts its memory: {d:?}"
        );
        let req = ClaimRequest::from_json(&json!({"cpus": "1500m"})).unwrap();
        assert_eq!(demand(&f, &req)[0].units, Units(15_000));
    }

    #[test]
    fn types_and_usage() {
        let mut f = fleet();
        let speeds = BTreeMap::from([("cpu".to_string(), 10.0)]);
        let types = resource_types(&f, &speeds);
        let names: Vec<&str> = types.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(
            names,
            vec!["gpu:NVIDIA A100-SXM4-40GB", "gpu:NVIDIA A10G", "cpu"]
        );
        assert_eq!(types[2].instances, 8);
        assert_eq!(types[2].speed.gflops(), 10.0);
        let req =
            ClaimRequest::from_json(&json!({"nvidia.com/gpu": 1, "accelerator_type": "A10G"}))
                .unwrap();
        let alloc = f.claim(ClaimId(1), &req).unwrap();
        let (r, u) = usage(&f, &alloc).unwrap();
        assert_eq!((r.as_str(), u), ("gpu:NVIDIA A10G", Units(10_000)));
    }

    #[test]
    fn shown_debts_hide_float_noise_and_keep_what_is_read() {
        // The noise seen between two idle versions: no change a reader could see.
        assert_eq!(shown_debt(-6.4e-11), shown_debt(-1.3e-10));
        assert!(
            shown_debt(-1.3e-10).is_sign_positive(),
            "no `-0` on the wire"
        );
        assert!((shown_debt(1_234.567_89) - 1_234.568).abs() < 1e-9);
        assert!((shown_debt(-0.4996) + 0.5).abs() < 1e-9);
    }
}
