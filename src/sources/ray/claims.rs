//! How a Ray holder becomes a claim: its id, its form in Ray's terms (`num_gpus`), its
//! shares, and why pending work waits.

use std::collections::BTreeMap;

use super::nodes::RayNode;
use super::resources::show_shape;
use super::work::Demand;
use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::placement::DeviceShare;
use crate::request::{ClaimRequest, GpuForm};
use crate::snapshot::{ClaimState, ClaimView};
use crate::units::{Bytes, SLOTS_PER_DEVICE, Slots, UNITS_PER_DEVICE, Units};

/// A stable claim id for a Ray object (FNV-1a of its kind and id).
pub(super) fn claim_id(kind: &str, id: &str) -> ClaimId {
    ClaimId::of_name(&format!("{kind}/{id}"))
}

/// What operators call a Ray holder: its id's first 8 characters as Ray's CLI shows them,
/// and a placement-group bundle's index after its group's (`0a1b2c3d:1`).
pub(super) fn claim_name(ray_id: &str) -> String {
    match ray_id.rsplit_once(':') {
        Some((group, index)) => format!("{}:{index}", short(group)),
        None => short(ray_id).to_string(),
    }
}

/// A GPU request in Ray's terms.
pub(super) fn form_of(shares: &[(u32, Units)], total: Units) -> GpuForm {
    if !shares.is_empty() && shares.iter().all(|(_, u)| *u == Units::FULL) {
        GpuForm::RayWhole {
            count: u32::try_from(shares.len()).unwrap_or(u32::MAX),
        }
    } else if total.0 >= UNITS_PER_DEVICE && total.0.is_multiple_of(UNITS_PER_DEVICE) {
        GpuForm::RayWhole {
            count: total.0 / UNITS_PER_DEVICE,
        }
    } else {
        GpuForm::RayFraction { fraction: total }
    }
}

/// Slots a share takes: all of a whole GPU, one of a fraction.
fn slot_cost(u: Units) -> Slots {
    if u >= Units::FULL {
        Slots(SLOTS_PER_DEVICE)
    } else {
        Slots(1)
    }
}

/// What a Ray holder is, for `claim`.
pub(super) struct ClaimSpec {
    pub(super) kind: &'static str,
    pub(super) ray_id: String,
    pub(super) holder: String,
    pub(super) job_id: String,
    pub(super) node: Option<String>,
    pub(super) slots: Vec<(u32, Units)>,
    pub(super) gpu_total: Units,
    pub(super) note: Option<String>,
    pub(super) placement_group: Option<String>,
    pub(super) created_ms: Option<u64>,
    pub(super) pending: Option<(Vec<String>, bool)>,
}

/// A Ray holder as a claim: placed with its shares, or pending with its reasons.
pub(super) fn claim(spec: ClaimSpec) -> ClaimView {
    let form = form_of(&spec.slots, spec.gpu_total);
    let mut labels = BTreeMap::from([
        ("ray.kind".to_string(), spec.kind.to_string()),
        ("ray.id".to_string(), spec.ray_id.clone()),
    ]);
    if let Some(pg) = &spec.placement_group {
        labels.insert("ray.placement_group".to_string(), pg.clone());
    }
    let request = ClaimRequest {
        gpu: Some(form),
        accelerator_type: None,
        cpus: None,
        node: None,
        devices: None,
        project: format!("ray-job-{}", spec.job_id),
        holder: Some(spec.holder.clone()),
        ttl: None,
        pid: None,
        expected_duration: None,
        labels,
        wait: spec.pending.is_some(),
    };
    let mut form_text = request.describe();
    if let Some(note) = &spec.note {
        form_text = format!("{form_text} ({note})");
    }
    let shares: Vec<DeviceShare> = spec
        .slots
        .iter()
        .map(|&(device, compute)| DeviceShare {
            device,
            memory: Bytes(0),
            compute,
            slots: slot_cost(compute),
        })
        .collect();
    let (state, reasons, infeasible) = match spec.pending {
        Some((reasons, infeasible)) => (ClaimState::Pending, reasons, infeasible),
        None => (ClaimState::Placed, Vec::new(), false),
    };
    ClaimView {
        id: claim_id(spec.kind, &spec.ray_id),
        name: Some(claim_name(&spec.ray_id)),
        state,
        project: request.project.clone(),
        holder: Some(spec.holder),
        form: form_text,
        request,
        node: spec.node,
        compute_reserved: shares.iter().fold(Units(0), |a, s| a + s.compute),
        shares,
        memory_reserved: Bytes(0),
        memory_used: None,
        over_limit: false,
        idle: false,
        created_at: Timestamp(spec.created_ms.unwrap_or(0)),
        lease_expires_at: None,
        pending_reasons: reasons,
        infeasible,
    }
}

/// The first eight characters of an id, as Ray's CLI shows them.
pub(super) fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// Why Ray has not placed a request, in Ray's terms, and whether it never can be.
pub(super) fn pending_reasons(
    state: &str,
    want: &BTreeMap<String, f64>,
    demands: &[Demand],
    nodes: &[(String, &RayNode)],
) -> (Vec<String>, bool) {
    let mut reasons = vec![match state {
        "PENDING_NODE_ASSIGNMENT" => {
            "Ray: waiting for a node with the resources (PENDING_NODE_ASSIGNMENT)".to_string()
        }
        "PENDING_ARGS_AVAIL" => "Ray: waiting for its arguments (PENDING_ARGS_AVAIL)".to_string(),
        "PENDING" => "Ray: placement group waiting for resources (PENDING)".to_string(),
        other => format!("Ray: {other}"),
    }];
    if let Some(d) = demands.iter().find(|d| d.shape == *want) {
        reasons.push(format!(
            "Ray demand {}: {}+ pending tasks/actors/groups",
            show_shape(&d.shape),
            d.count
        ));
    }
    let fits = |n: &RayNode| {
        want.iter()
            .all(|(k, v)| n.totals.get(k).is_some_and(|have| have + 1e-9 >= *v))
    };
    let alive: Vec<&(String, &RayNode)> = nodes.iter().filter(|(_, n)| n.alive).collect();
    let infeasible = !alive.iter().any(|(_, n)| fits(n));
    if infeasible {
        for (k, v) in want {
            let best = alive
                .iter()
                .map(|(name, n)| (n.totals.get(k).copied().unwrap_or(0.0), name))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            if best.is_none_or(|(have, _)| have < *v) {
                let largest = best.map_or_else(
                    || "there are no live nodes".to_string(),
                    |(have, name)| format!("the largest has {have} on {name}"),
                );
                reasons.push(format!("infeasible: no node has {k} {v}; {largest}"));
            }
        }
    }
    (reasons, infeasible)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_ids_are_stable_and_distinct() {
        assert_eq!(claim_id("task", "ab"), claim_id("task", "ab"));
        assert_ne!(claim_id("task", "ab"), claim_id("actor", "ab"));
        // FNV-1a of "task/ab": a fixed value, so ids survive restarts and upgrades.
        assert_eq!(claim_id("task", "ab"), ClaimId(0x55e8_0e57_0187_6a9e));
    }

    #[test]
    fn forms_follow_ray_num_gpus() {
        assert_eq!(
            form_of(&[(0, Units(2500))], Units(2500)),
            GpuForm::RayFraction {
                fraction: Units(2500)
            }
        );
        assert_eq!(
            form_of(&[(0, Units::FULL), (1, Units::FULL)], Units(20_000)),
            GpuForm::RayWhole { count: 2 }
        );
        assert_eq!(form_of(&[], Units(80_000)), GpuForm::RayWhole { count: 8 });
        assert_eq!(
            form_of(&[], Units(5000)),
            GpuForm::RayFraction {
                fraction: Units(5000)
            }
        );
    }
}
