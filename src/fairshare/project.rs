//! Projects, their resource shares, and the per-(project, resource) account: long-term
//! debt, the accrual flag D(P,R) and the backoff.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::FairShareError;
use super::backoff::Backoff;

/// A project's name: 1 to 128 characters of letters, digits, `.`, `_`, `-` and `/`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ProjectName(String);

impl ProjectName {
    /// Checks and wraps a name.
    pub fn new(name: &str) -> Result<ProjectName, FairShareError> {
        let ok = !name.is_empty()
            && name.len() <= 128
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c));
        if ok {
            Ok(ProjectName(name.to_string()))
        } else {
            Err(FairShareError::BadProject(name.to_string()))
        }
    }

    /// The name as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ProjectName {
    type Error = FairShareError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        ProjectName::new(&value)
    }
}

impl From<ProjectName> for String {
    fn from(value: ProjectName) -> String {
        value.0
    }
}

impl fmt::Display for ProjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A resource share: only ratios between projects matter. 0 means the project gets no work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct Share(u32);

impl Share {
    /// The share a project has until an operator sets one.
    pub const DEFAULT: Share = Share(100);
    /// The largest share accepted.
    pub const MAX: u32 = 1_000_000;

    /// A share from 0 to [`Share::MAX`].
    pub fn new(value: u32) -> Result<Share, FairShareError> {
        if value <= Share::MAX {
            Ok(Share(value))
        } else {
            Err(FairShareError::BadShare(value))
        }
    }

    /// The share's value.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl Default for Share {
    fn default() -> Share {
        Share::DEFAULT
    }
}

impl TryFrom<u32> for Share {
    type Error = FairShareError;
    fn try_from(value: u32) -> Result<Self, Self::Error> {
        Share::new(value)
    }
}

impl From<Share> for u32 {
    fn from(value: Share) -> u32 {
        value.0
    }
}

/// Work on one resource type in instance-seconds (a debt, a shortfall).
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct InstanceSecs(pub f64);

/// Processing across resource types in GFLOP: instance-seconds weighted by speed.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Gflop(pub f64);

/// What the ledger keeps for one (project, resource type); persisted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Account {
    /// Long-term debt LTD(P,R): instance-seconds owed to the project on this type.
    pub ltd: InstanceSecs,
    /// D(P,R): whether the project has work this type could run, or runs here, so that
    /// it takes part in the division and accrues debt.
    pub accrue: bool,
    /// When the project may next be asked for work of this type.
    pub backoff: Backoff,
}
