//! Placement: a fleet of nodes and their devices, each with capacity in memory, compute
//! and slots; claims placed per device (never on node sums), released, and moved
//! atomically; and, when nothing fits, the reasons aggregated per node the way an
//! operator reads them. No I/O: the server, the CLI, the console and the simulator all
//! call this.
//!
//! Where things live: `model` (nodes, devices, allocations), `fleet` (the fleet and its
//! bookkeeping), `index` (the free-memory index and the searches for a fit), `explain`
//! (why a request does not fit), `summary` (the same, counted across a large fleet),
//! `wholes` (nodes counted by their wholly free devices: whether whole devices fit),
//! `moves` (atomic moves), `hosts` (ranking the endpoints of a fleet for a request).
//! Everything public is re-exported here: use `crate::placement::X`.

use serde::{Deserialize, Serialize};

mod attempt;
mod cells;
mod explain;
mod fleet;
mod hosts;
mod index;
mod model;
mod moves;
mod summary;
mod wholes;

#[cfg(test)]
mod equivalence;
#[cfg(test)]
mod tests;

pub use attempt::{
    ATTEMPT_LABEL, AttemptAnswer, AttemptId, AttemptRecheck, AttemptStep, RECHECK_WITHIN,
    RESOLVE_WITHIN, decide as decide_attempt,
};
pub use explain::{NoFit, NodeReasons, Reason, ReasonCount};
pub use fleet::{Fleet, FleetError};
pub use hosts::{HostFit, HostRanking, moved_request, rank_hosts};
pub use model::{Allocation, Device, DeviceShare, DeviceSpec, Health, Node, NodeSpec};
pub use moves::{MoveError, MoveTarget};
pub use summary::{FleetReasons, NODES_LISTED};

/// How to choose among devices that fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Fullest device that fits: keeps whole GPUs free and limits stranded memory.
    #[default]
    Binpack,
    /// Emptiest device that fits.
    Spread,
}
