//! The Fair share list: the columns it sorts projects by and what a filter matches.

use std::cmp::{Ordering, Reverse};

use crate::clock::Timestamp;
use crate::snapshot::ProjectView;

use super::Column;
use super::shown::{Columns, ShownColumn, Width};

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

/// A column the Fair share view shows. A project takes a line per resource account: the
/// project's own columns are on its first line, the account's on each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProjectField {
    /// The source's name (with several sources).
    Source,
    /// The project's name, shortened in the middle when it must be.
    Project,
    /// Its share.
    Share,
    /// Claims running.
    Running,
    /// Claims waiting.
    Pending,
    /// The account's resource (a GPU model).
    Resource,
    /// The account's debt.
    Debt,
    /// The account's target.
    Target,
    /// The account's use.
    Used,
    /// `D` where work may be fetched for it.
    Eligible,
    /// Until when it is backed off, and how long from now.
    BackedOff,
    /// Why it is not served now.
    WhyNot,
}

impl ProjectField {
    /// Whether it says something of the project (on its first line only) rather than of
    /// one resource account (on each).
    pub fn of_project(self) -> bool {
        matches!(
            self,
            ProjectField::Source
                | ProjectField::Project
                | ProjectField::Share
                | ProjectField::Running
                | ProjectField::Pending
        )
    }
}

impl ShownColumn for ProjectField {
    fn header(self) -> &'static str {
        match self {
            ProjectField::Source => "SRC",
            ProjectField::Project => "PROJECT",
            ProjectField::Share => "SHARE",
            ProjectField::Running => "RUN",
            ProjectField::Pending => "PEND",
            ProjectField::Resource => "RESOURCE",
            ProjectField::Debt => "DEBT",
            ProjectField::Target => "TARGET",
            ProjectField::Used => "USED",
            ProjectField::Eligible => "D",
            ProjectField::BackedOff => "BACKED OFF UNTIL",
            ProjectField::WhyNot => "WHY NOT NOW",
        }
    }
}

/// The Fair share view's columns in `width` cells. PROJECT is 10 wide, 24 from 170 columns
/// (names such as BOINC's project URLs are long); TARGET and USED from 110; `lean` (a pane
/// below says the selected project's share and running count) leaves out SHARE and RUN;
/// WHY NOT NOW takes the rest.
pub fn project_columns(width: u16, multi: bool, lean: bool) -> Columns<ProjectField> {
    use ProjectField as F;
    let wide = width >= 110;
    let mut c = Columns::new();
    if multi {
        c.fixed([(F::Source, 8)]);
    }
    c.fixed([(F::Project, if width >= 170 { 24 } else { 10 })]);
    if !lean {
        c.fixed([(F::Share, 5), (F::Running, 3)]);
    }
    // `A100 80G` (model and memory size) when narrow, the whole model when wide.
    c.fixed([
        (F::Pending, 4),
        (F::Resource, if wide { 14 } else { 8 }),
        (F::Debt, 7),
    ]);
    if wide {
        c.fixed([(F::Target, 6), (F::Used, 5)]);
    }
    // `14:05:09 (11m56s)`: the local time it ends, and how long from now.
    c.fixed([(F::Eligible, 1), (F::BackedOff, 17)]);
    // Borders, and a gap after each fixed column.
    let taken = c.fixed_total() + u16::try_from(c.len()).unwrap_or(u16::MAX);
    c.push(F::WhyNot, Width::Fill);
    c.fill = usize::from(width.saturating_sub(2 + taken));
    c
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_project_columns_give_why_not_now_the_rest() {
        let c = project_columns(120, true, false);
        assert_eq!(
            c.headers().join(" "),
            "SRC PROJECT SHARE RUN PEND RESOURCE DEBT TARGET USED D BACKED OFF UNTIL WHY NOT NOW"
        );
        assert_eq!(c.width_of(ProjectField::Resource), Some(14));
        let gaps = c.len() - 1;
        assert_eq!(2 + gaps + usize::from(c.fixed_total()) + c.fill, 120);
        let lean = project_columns(100, false, true);
        assert!(!lean.has(ProjectField::Share) && !lean.has(ProjectField::Target));
        assert_eq!(
            project_columns(170, false, false).width_of(ProjectField::Project),
            Some(24)
        );
        assert!(ProjectField::Pending.of_project() && !ProjectField::Debt.of_project());
    }
}
