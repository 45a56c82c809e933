//! Claims as the fair-share layer sees them: pending ones waiting in their project's
//! queue, and running ones holding part of one resource type.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::project::ProjectName;
use super::resource::ResourceId;
use super::time::opt_secs;
use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::units::Units;

/// What a claim would take on one resource type that could run it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceDemand {
    /// The resource type.
    pub resource: ResourceId,
    /// The part of it the claim takes (10 000 per device or core).
    pub units: Units,
}

/// A claim waiting in its project's queue for work fetch to place it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingClaim {
    /// Its identity.
    pub id: ClaimId,
    /// The project it is for.
    pub project: ProjectName,
    /// The resource types that could run it and what it takes on each.
    pub demand: Vec<ResourceDemand>,
    /// How long it is expected to run once placed.
    #[serde(with = "opt_secs", rename = "expected_duration_s", default)]
    pub expected_duration: Option<Duration>,
    /// When it was submitted (set by [`super::Ledger::submit`]).
    #[serde(default)]
    pub submitted: Timestamp,
    /// What placement looks at in it, in the caller's words: claims of one project with
    /// the same form and demand must fit alike ([`super::Fit`]), so work fetch asks
    /// about the oldest of them only. `None`: asked about on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form: Option<String>,
}

impl PendingClaim {
    /// What it takes on `resource`, if that type could run it.
    pub fn units_on(&self, resource: &ResourceId) -> Option<Units> {
        self.demand
            .iter()
            .find(|d| &d.resource == resource)
            .map(|d| d.units)
    }
}

/// A claim that holds part of one resource type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunningClaim {
    /// Its identity.
    pub id: ClaimId,
    /// The project it is for.
    pub project: ProjectName,
    /// Where it runs.
    pub resource: ResourceId,
    /// What it holds there.
    pub units: Units,
    /// When it was placed.
    pub started: Timestamp,
    /// When it is expected to end; `None` when unknown (taken to run past the horizon).
    pub expected_end: Option<Timestamp>,
}
