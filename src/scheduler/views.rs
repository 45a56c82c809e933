//! The scheduler as the snapshot shows it: nodes and devices, claims with why the
//! waiting ones wait, projects and resource types from the ledger, the recent events.

use super::{Scheduler, accounting, claim_view};
use crate::clock::Timestamp;
use crate::placement::Policy;
use crate::snapshot::{self, ClaimView, DeviceView, EndpointInfo, NodeView, ProjectView, Snapshot};

impl Scheduler {
    /// The state as a snapshot (without telemetry: the owner adds what it samples).
    pub fn snapshot(&self, now: Timestamp) -> Snapshot {
        let (projects, resources) = accounting::views(&self.ledger.view(now), now);
        let claims = self.claim_views(&projects);
        Snapshot {
            schema: snapshot::SCHEMA_VERSION,
            endpoint: self.endpoint_info(),
            revision: self.revision,
            taken_at: now,
            nodes: self.node_views(),
            claims,
            projects,
            resources,
            coordination: Vec::new(),
            host: None,
            events: self.events.iter().cloned().collect(),
            pods: snapshot::PodNames::default(),
        }
    }

    /// This endpoint as the snapshot names it.
    fn endpoint_info(&self) -> EndpointInfo {
        EndpointInfo {
            name: self.config.name.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            kind: self.config.kind.clone(),
            policy: match self.config.policy {
                Policy::Binpack => "binpack".to_string(),
                Policy::Spread => "spread".to_string(),
            },
            actions: true,
            telemetry_note: None,
            warnings: Vec::new(),
            store_failed: None,
        }
    }

    /// Nodes and their devices, with what is allocated.
    fn node_views(&self) -> Vec<NodeView> {
        self.fleet
            .nodes()
            .iter()
            .map(|n| NodeView {
                name: n.name.clone(),
                cpus_milli: n.cpus.map(|c| c.0),
                cpus_allocated_milli: n.cpus_allocated.0,
                devices: n
                    .devices
                    .iter()
                    .map(|d| DeviceView {
                        index: d.spec.index,
                        model: d.spec.model.clone(),
                        uuid: d.spec.uuid.clone(),
                        memory_capacity: d.spec.memory,
                        memory_allocated: d.memory_allocated,
                        memory_free: d.memory_free(),
                        compute_allocated: d.compute_allocated,
                        compute_free: d.compute_free(),
                        slots_allocated: d.slots_allocated,
                        slots_free: d.slots_free(),
                        cordoned: d.cordoned,
                        health: d.health.clone(),
                        holders: d.holders.clone(),
                        telemetry: None,
                        unclaimed_memory: None,
                    })
                    .collect(),
            })
            .collect()
    }

    /// Every claim; a waiting one says why, from placement and from the ledger.
    fn claim_views(&self, projects: &[ProjectView]) -> Vec<ClaimView> {
        self.claims
            .values()
            .map(|c| {
                let mut view = claim_view(c);
                if c.allocation.is_none() {
                    // Placement says where it cannot go; the ledger says whose turn it is.
                    if view.pending_reasons.is_empty() {
                        view.pending_reasons.push(
                            "fits now; waiting for its project's turn (fair share)".to_string(),
                        );
                    }
                    // Only the accounts of what it could run on: a claim for an A10G is not
                    // waiting for the project's turn on an A100.
                    let wanted = c
                        .request
                        .accelerator_type
                        .as_deref()
                        .map(crate::request::accelerator_key);
                    let account_reasons = projects
                        .iter()
                        .filter(|p| p.name == c.request.project)
                        .flat_map(|p| p.resources.iter())
                        .filter(|a| a.pending > 0)
                        .filter(|a| {
                            wanted.as_deref().is_none_or(|w| {
                                crate::request::accelerator_key(
                                    a.resource.strip_prefix("gpu:").unwrap_or(&a.resource),
                                ) == w
                            })
                        })
                        .filter_map(|a| {
                            a.reason
                                .as_ref()
                                .map(|r| format!("fair share on {}: {r}", a.resource))
                        });
                    view.pending_reasons.extend(account_reasons);
                }
                view
            })
            .collect()
    }
}
