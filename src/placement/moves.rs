//! Moving a claim to other devices or another node, atomically: on failure the claim
//! stays where it was, holder order included.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::explain::NoFit;
use super::fleet::Fleet;
use super::model::Allocation;
use crate::ids::ClaimId;

/// Why a move could not happen; the claim stays where it was.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MoveError {
    /// No such claim.
    #[error("no claim {0}")]
    UnknownClaim(ClaimId),
    /// The claim asks for no GPU, so there is nothing to move.
    #[error("claim {0} holds no GPU")]
    NothingToMove(ClaimId),
    /// The target does not fit.
    #[error("the target does not fit: {0}")]
    NoFit(NoFit),
}

/// Where a move should go: a node, devices on it, or both; unset parts are free.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveTarget {
    /// The node to move to.
    #[serde(default)]
    pub node: Option<String>,
    /// The devices to move to.
    #[serde(default)]
    pub devices: Option<Vec<u32>>,
}

impl Fleet {
    /// Moves a claim to other devices or another node, atomically: on failure it
    /// stays where it was. The claim keeps its id.
    pub fn move_claim(
        &mut self,
        id: ClaimId,
        target: &MoveTarget,
    ) -> Result<Allocation, MoveError> {
        let placed = self.claims.remove(&id).ok_or(MoveError::UnknownClaim(id))?;
        let (demand, old) = Arc::unwrap_or_clone(placed);
        if demand.gpu.is_none() && target.devices.is_some() {
            self.claims.insert(id, Arc::new((demand, old)));
            return Err(MoveError::NothingToMove(id));
        }
        // Holder lists are in placement order; a failed move must not reorder them.
        let held: Vec<(usize, usize, Vec<ClaimId>)> = self
            .by_name
            .get(&old.node)
            .map(|&n| {
                self.parts_of(n, &old)
                    .iter()
                    .map(|&(d, _)| (n, d, self.nodes[n].devices[d].holders.clone()))
                    .collect()
            })
            .unwrap_or_default();
        self.unapply(id, &old);
        match self.find(&demand, target.node.as_deref(), target.devices.as_deref()) {
            Ok(plan) => {
                let alloc = self.allocation_of(&demand, &plan);
                self.apply(id, &plan, demand.cpus, true);
                self.claims.insert(id, Arc::new((demand, alloc.clone())));
                Ok(alloc)
            }
            Err(e) => {
                let n = self.by_name[&old.node];
                let parts = self.parts_of(n, &old);
                self.apply(id, &(n, parts), old.cpus, true);
                for (n, d, holders) in held {
                    Arc::make_mut(&mut self.nodes[n]).devices[d].holders = holders;
                }
                self.claims.insert(id, Arc::new((demand, old)));
                Err(MoveError::NoFit(e))
            }
        }
    }
}
