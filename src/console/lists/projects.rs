//! The Fair share list: the columns it sorts projects by and what a filter matches.

use std::cmp::{Ordering, Reverse};

use crate::clock::Timestamp;
use crate::snapshot::ProjectView;

use super::Column;

/// What the Fair share list sorts projects by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProjectColumn {
    /// As the source lists them.
    Project,
    /// Most owed first.
    Debt,
    /// Most claims waiting first.
    Pending,
    /// Largest share first.
    Share,
}

impl Column for ProjectColumn {
    const ALL: &'static [Self] = &[
        ProjectColumn::Project,
        ProjectColumn::Debt,
        ProjectColumn::Pending,
        ProjectColumn::Share,
    ];

    fn name(self) -> &'static str {
        match self {
            ProjectColumn::Project => "project",
            ProjectColumn::Debt => "debt",
            ProjectColumn::Pending => "pending",
            ProjectColumn::Share => "share",
        }
    }
}

impl ProjectColumn {
    /// How two projects compare under this column (`Equal` keeps the source's order).
    pub fn order(self, a: &ProjectView, b: &ProjectView) -> Ordering {
        match self {
            ProjectColumn::Project => Ordering::Equal,
            ProjectColumn::Debt => b.overall_debt.total_cmp(&a.overall_debt),
            ProjectColumn::Pending => Reverse(a.pending).cmp(&Reverse(b.pending)),
            ProjectColumn::Share => Reverse(a.share).cmp(&Reverse(b.share)),
        }
    }
}

/// The words a filter matches in a project row: its name, and `backed-off backoff`
/// while one of its accounts is backed off at `now`.
pub fn project_words(p: &ProjectView, now: Timestamp) -> Vec<String> {
    let backed = p
        .resources
        .iter()
        .any(|r| r.backoff_until.is_some_and(|t| t > now));
    vec![
        p.name.clone(),
        if backed { "backed-off backoff" } else { "" }.to_string(),
    ]
}
