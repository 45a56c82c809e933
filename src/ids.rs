//! Identities shared by every layer.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A claim's identity, as its endpoint numbers its claims (from 1, never reused while
/// the endpoint's store lives). On the wire it is a bare number.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct ClaimId(pub u64);

impl ClaimId {
    /// The first id an endpoint hands out.
    pub const FIRST: ClaimId = ClaimId(1);

    /// A stable id for something an engine names (a Ray actor, a Slurm job on a node, a
    /// BOINC task): FNV-1a of the name, so the same holder keeps its id across reads.
    pub fn of_name(name: &str) -> ClaimId {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        ClaimId(h)
    }

    /// The id after this one.
    #[must_use]
    pub fn next(self) -> ClaimId {
        ClaimId(self.0.saturating_add(1))
    }
}

impl fmt::Display for ClaimId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for ClaimId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim().parse().map(ClaimId)
    }
}
