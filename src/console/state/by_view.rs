//! Each view's list or pane, found by view: the cursor, filter and sort the keys act on
//! in whatever view is shown.

use crate::console::lists::{
    ClaimColumn, Column, Cursor, GpuColumn, ProjectColumn, UnknownColumn, UsageColumn,
};

use super::{State, View};

/// Why a view's sort could not change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SortRefused {
    /// The view has no list to sort.
    #[error("the {0} view has no sort")]
    NoSort(&'static str),
    /// The list has no such column.
    #[error(transparent)]
    Unknown(#[from] UnknownColumn),
}

impl State {
    /// The cursor of `view`.
    pub fn cursor_of(&self, view: View) -> Cursor {
        match view {
            View::Gpus => self.gpus.cursor,
            View::Claims => self.claims.cursor,
            View::Ledger => self.projects.cursor,
            View::Overview => self.panes.overview.cursor,
            View::Detail => self.panes.detail.cursor,
            View::Events => self.panes.events.cursor,
            View::Usage => self.usage.active().cursor,
            View::ClaimDetail => self.panes.claim_detail.cursor,
        }
    }

    /// The cursor of `view`, to move.
    pub fn cursor_mut(&mut self, view: View) -> &mut Cursor {
        match view {
            View::Gpus => &mut self.gpus.cursor,
            View::Claims => &mut self.claims.cursor,
            View::Ledger => &mut self.projects.cursor,
            View::Overview => &mut self.panes.overview.cursor,
            View::Detail => &mut self.panes.detail.cursor,
            View::Events => &mut self.panes.events.cursor,
            View::Usage => &mut self.usage.active_mut().cursor,
            View::ClaimDetail => &mut self.panes.claim_detail.cursor,
        }
    }

    /// Cursor of the current view.
    pub fn cur(&self) -> Cursor {
        self.cursor_of(self.view)
    }

    /// The filter of `view`.
    pub fn filter_of(&self, view: View) -> &str {
        match view {
            View::Gpus => &self.gpus.filter,
            View::Claims => &self.claims.filter,
            View::Ledger => &self.projects.filter,
            View::Overview => &self.panes.overview.filter,
            View::Detail => &self.panes.detail.filter,
            View::Events => &self.panes.events.filter,
            View::Usage => &self.usage.active().filter,
            View::ClaimDetail => &self.panes.claim_detail.filter,
        }
    }

    /// The filter of `view`, to change.
    pub fn filter_of_mut(&mut self, view: View) -> &mut String {
        match view {
            View::Gpus => &mut self.gpus.filter,
            View::Claims => &mut self.claims.filter,
            View::Ledger => &mut self.projects.filter,
            View::Overview => &mut self.panes.overview.filter,
            View::Detail => &mut self.panes.detail.filter,
            View::Events => &mut self.panes.events.filter,
            View::Usage => &mut self.usage.active_mut().filter,
            View::ClaimDetail => &mut self.panes.claim_detail.filter,
        }
    }

    /// The current view's filter.
    pub fn filter(&self) -> &str {
        self.filter_of(self.view)
    }

    /// The current view's filter, to change.
    pub fn filter_mut(&mut self) -> &mut String {
        self.filter_of_mut(self.view)
    }

    /// The names of the columns the current view sorts by (none: it has no sort).
    pub fn sort_names(&self) -> Vec<&'static str> {
        fn names<C: Column>() -> Vec<&'static str> {
            C::ALL.iter().map(|c| c.name()).collect()
        }
        match self.view {
            View::Gpus => names::<GpuColumn>(),
            View::Claims => names::<ClaimColumn>(),
            View::Ledger => names::<ProjectColumn>(),
            View::Usage => names::<UsageColumn>(),
            View::Overview | View::Detail | View::Events | View::ClaimDetail => Vec::new(),
        }
    }

    /// The current view's sort as its title shows it: the column's name, and whether
    /// it runs the other way (none: the view has no sort).
    pub fn sort_shown(&self) -> Option<(&'static str, bool)> {
        match self.view {
            View::Gpus => Some((self.gpus.sort.name(), self.gpus.reverse)),
            View::Claims => Some((self.claims.sort.name(), self.claims.reverse)),
            View::Ledger => Some((self.projects.sort.name(), self.projects.reverse)),
            View::Usage => {
                let l = self.usage.active();
                Some((l.sort.name(), l.reverse))
            }
            View::Overview | View::Detail | View::Events | View::ClaimDetail => None,
        }
    }

    /// Sorts the current view's list by the column called `name` (the rows are rebuilt
    /// by the caller).
    ///
    /// # Errors
    /// `SortRefused` when the view has no sort or no such column; nothing changes then.
    pub fn sort_by_name(&mut self, name: &str) -> Result<(), SortRefused> {
        match self.view {
            View::Gpus => self.gpus.sort_by_name(name)?,
            View::Claims => self.claims.sort_by_name(name)?,
            View::Ledger => self.projects.sort_by_name(name)?,
            View::Usage => self.usage.active_mut().sort_by_name(name)?,
            v => return Err(SortRefused::NoSort(v.title())),
        }
        Ok(())
    }

    /// Sorts the current view's list by its next column; false when it has no sort.
    pub fn next_sort(&mut self) -> bool {
        match self.view {
            View::Gpus => self.gpus.next_sort(),
            View::Claims => self.claims.next_sort(),
            View::Ledger => self.projects.next_sort(),
            View::Usage => self.usage.active_mut().next_sort(),
            View::Overview | View::Detail | View::Events | View::ClaimDetail => return false,
        }
        true
    }

    /// Turns the current view's sort around (nothing in a view without one).
    pub fn reverse_sort(&mut self) {
        match self.view {
            View::Gpus => self.gpus.reverse = !self.gpus.reverse,
            View::Claims => self.claims.reverse = !self.claims.reverse,
            View::Ledger => self.projects.reverse = !self.projects.reverse,
            View::Usage => {
                let l = self.usage.active_mut();
                l.reverse = !l.reverse;
            }
            View::Overview | View::Detail | View::Events | View::ClaimDetail => {}
        }
    }
}
