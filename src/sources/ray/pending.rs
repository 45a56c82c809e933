//! Work Ray has not placed yet: pending tasks and actors that want GPU, and the bundles of
//! pending placement groups with their strategy (from `pgDemand`, matched by bundles) and
//! Ray's own reason (`stats.scheduling_state`: `NO_RESOURCES` waits for GPUs to free up,
//! `INFEASIBLE` never fits the cluster as it is).

use std::collections::BTreeMap;

use super::claims::{ClaimSpec, claim, pending_reasons};
use super::resources::{canonical_shape, show_shape, units};
use super::snapshot::{Named, label};
use super::work::{Demand, PgDemand, RayPlacementGroup, RayTask};
use crate::snapshot::ClaimView;

/// Pending tasks and actors that want GPU.
pub(super) fn pending_task_claims(
    tasks: &[RayTask],
    demands: &[Demand],
    named: &Named<'_>,
    claims: &mut Vec<ClaimView>,
) {
    for t in tasks.iter().filter(|t| {
        t.state.starts_with("PENDING")
            && (t.kind == "NORMAL_TASK" || t.kind == "ACTOR_CREATION_TASK")
    }) {
        let want = canonical_shape(&t.required);
        let Some(&gpu) = want.get("GPU") else {
            continue;
        };
        let (reasons, infeasible) = pending_reasons(&t.state, &want, demands, named);
        let kind = if t.kind == "ACTOR_CREATION_TASK" {
            "actor"
        } else {
            "task"
        };
        claims.push(claim(ClaimSpec {
            kind,
            ray_id: t.id.clone(),
            holder: format!("{kind} {}", label(&t.name, &t.id)),
            job_id: t.job_id.clone(),
            node: None,
            slots: Vec::new(),
            gpu_total: units(gpu),
            note: None,
            placement_group: None,
            created_ms: t.created_ms,
            pending: Some((reasons, infeasible)),
        }));
    }
}

/// A group's bundles as `pgDemand` writes them: each distinct shape with how many, sorted.
fn bundle_counts(shapes: impl Iterator<Item = BTreeMap<String, f64>>) -> Vec<(String, u32)> {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for s in shapes {
        *counts.entry(show_shape(&s)).or_default() += 1;
    }
    counts.into_iter().collect()
}

/// `2 × {GPU: 2}, 1 × {CPU: 1}`.
fn show_bundles(counts: &[(String, u32)]) -> String {
    let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} × {s}")).collect();
    parts.join(", ")
}

/// The `pgDemand` entries asking for exactly `counts`.
fn matching<'a>(counts: &[(String, u32)], demands: &'a [PgDemand]) -> Vec<&'a PgDemand> {
    demands
        .iter()
        .filter(|d| {
            let mut theirs: BTreeMap<String, u32> = BTreeMap::new();
            for (shape, n) in &d.bundles {
                let mut shape = shape.clone();
                shape.retain(|_, v| *v > 0.0);
                *theirs.entry(show_shape(&shape)).or_default() += n;
            }
            theirs.into_iter().collect::<Vec<_>>() == counts
        })
        .collect()
}

/// Bundles of pending (or rescheduling) placement groups that want GPU: one pending claim
/// per bundle, naming the group's strategy and bundles.
pub(super) fn pending_group_claims(
    groups: &[RayPlacementGroup],
    demands: &[PgDemand],
    named: &Named<'_>,
    claims: &mut Vec<ClaimView>,
) {
    for g in groups
        .iter()
        .filter(|g| g.state == "PENDING" || g.state == "RESCHEDULING")
    {
        let label = label(&g.name, &g.id);
        let counts = bundle_counts(g.bundles.iter().map(|b| b.shape.clone()));
        let found = matching(&counts, demands);
        let mut strategies: Vec<&str> = found.iter().map(|d| d.strategy.as_str()).collect();
        strategies.sort_unstable();
        strategies.dedup();
        // Ray's report names no group: groups of the same bundles cannot be told apart.
        let strategy = match strategies.as_slice() {
            [] => None,
            [one] => Some((*one).to_string()),
            many => Some(many.join(" or ")),
        };
        let bundles = show_bundles(&counts);
        let scheduling = g.scheduling.as_deref();
        let ray_infeasible = scheduling == Some("INFEASIBLE");
        for b in g.bundles.iter().filter(|b| b.gpu > 0.0) {
            let want = BTreeMap::from([("GPU".to_string(), b.gpu)]);
            let (mut reasons, computed) = pending_reasons(&g.state, &want, &[], named);
            if let Some(state) = scheduling {
                reasons[0] = if ray_infeasible {
                    format!(
                        "Ray: placement group infeasible ({}, {state}): no set of live nodes can ever hold its bundles",
                        g.state
                    )
                } else {
                    format!(
                        "Ray: placement group waiting for resources ({}, {state})",
                        g.state
                    )
                };
            }
            let pending_groups: u32 = found.iter().map(|d| d.count).sum();
            if pending_groups > 0 {
                reasons.push(format!(
                    "Ray pgDemand {bundles} {}: {pending_groups} pending group(s) of these bundles",
                    strategy.as_deref().unwrap_or_default()
                ));
            }
            let where_ = match &strategy {
                Some(s) => format!("placement group {label}: {bundles}, {s}"),
                None => format!("placement group {label}: {bundles}"),
            };
            let mut c = claim(ClaimSpec {
                kind: "bundle",
                ray_id: format!("{}:{}", g.id, b.index),
                holder: format!("placement group {label} bundle {}", b.index),
                job_id: g.job_id.clone(),
                node: None,
                slots: Vec::new(),
                gpu_total: units(b.gpu),
                note: Some(where_),
                placement_group: Some(g.id.clone()),
                created_ms: g.created_ms,
                pending: Some((
                    reasons,
                    ray_infeasible || (scheduling.is_none() && computed),
                )),
            });
            c.request
                .labels
                .insert("ray.bundles".to_string(), bundles.clone());
            if let Some(s) = &strategy {
                c.request
                    .labels
                    .insert("ray.strategy".to_string(), s.clone());
            }
            claims.push(c);
        }
    }
}
