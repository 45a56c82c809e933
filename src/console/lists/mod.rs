//! The console's lists (GPUs, claims, fair-share projects, events) as data: each declares the
//! columns it sorts by as an enum (`Column`), the columns it shows with their headers
//! and width policy (`ShownColumn`, laid out per screen width into `Columns`), the words a
//! filter matches per row, and keeps one `ListState`: its filter, sort, cursor, the pick by identity and its
//! filtered, sorted rows. Views without rows of their own to sort (Overview, GPU detail,
//! Events, claim detail) keep a `Pane`: a filter and a cursor. The state holds one of
//! each; nothing here knows the state, so `state`, `update` and `views` all read it.

mod claims;
mod events;
mod gpus;
mod projects;
mod shown;
mod usage;

use crate::ids::ClaimId;

pub use claims::{ClaimColumn, ClaimField, ClaimWidths, claim_columns, claim_words};
pub use events::{EventField, event_columns};
pub use gpus::{GpuColumn, GpuField, GpuFilter, device_words, gpu_columns};
pub use projects::{ProjectColumn, ProjectField, project_columns, project_words};
pub use shown::{Columns, ShownColumn, Width};
pub use usage::{UsageColumn, UsageField, usage_columns};

/// A column a list sorts by: a closed set, so a name that is none of them is an error
/// naming those there are, never a silent "no sort".
pub trait Column: Copy + Eq + std::fmt::Debug + 'static {
    /// Every column in the order the sort key steps through them; the first is the
    /// list's own order.
    const ALL: &'static [Self];

    /// Its name on the `:sort` line and in the list's title (`sort:free↓`).
    fn name(self) -> &'static str;

    /// The column called `name`.
    ///
    /// # Errors
    /// `UnknownColumn` naming the columns there are.
    fn parse(name: &str) -> Result<Self, UnknownColumn> {
        Self::ALL
            .iter()
            .copied()
            .find(|c| c.name() == name)
            .ok_or_else(|| UnknownColumn {
                name: name.to_string(),
                names: Self::ALL
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

/// A sort by a column the list does not have.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no column `{name}` here; sort by: {names}")]
pub struct UnknownColumn {
    /// What was asked for.
    pub name: String,
    /// The columns there are, comma-separated.
    pub names: String,
}

/// Selection and scroll in a list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    /// Selected row.
    pub selected: usize,
    /// First row shown.
    pub offset: usize,
}

/// A device row: source, node position, device position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DevKey {
    /// Source.
    pub source: usize,
    /// Node position in the snapshot.
    pub node: usize,
    /// Device position on the node.
    pub dev: usize,
}

/// A claim row: source and position in its snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClaimKey {
    /// Source.
    pub source: usize,
    /// Position in the snapshot's claims.
    pub idx: usize,
}

/// A project row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProjKey {
    /// Source.
    pub source: usize,
    /// Position in the snapshot's projects.
    pub idx: usize,
}

/// What the operator picked in a list, by identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Picked {
    /// A GPU: source, node name, device index.
    Device(usize, String, u32),
    /// A claim: source, claim id.
    Claim(usize, ClaimId),
    /// A project: source, project name.
    Project(usize, String),
}

/// One list's state: what the operator asked of it and the rows that gives.
#[derive(Clone, Debug, PartialEq)]
pub struct ListState<K, C> {
    /// The filter typed for it.
    pub filter: String,
    /// The column it is sorted by.
    pub sort: C,
    /// The sort runs the other way.
    pub reverse: bool,
    /// Selection and scroll.
    pub cursor: Cursor,
    /// What the operator picked, by identity (the cursor follows it).
    pub picked: Option<Picked>,
    /// The rows, filtered and sorted.
    pub rows: Vec<K>,
}

impl<K, C: Column> Default for ListState<K, C> {
    fn default() -> Self {
        ListState {
            filter: String::new(),
            sort: C::ALL[0],
            reverse: false,
            cursor: Cursor::default(),
            picked: None,
            rows: Vec::new(),
        }
    }
}

impl<K, C: Column> ListState<K, C> {
    /// Sorts by the column called `name`.
    ///
    /// # Errors
    /// `UnknownColumn` naming the columns there are; the sort stays as it was.
    pub fn sort_by_name(&mut self, name: &str) -> Result<(), UnknownColumn> {
        self.sort = C::parse(name)?;
        Ok(())
    }

    /// Sorts by the next column (after the last, the list's own order again).
    pub fn next_sort(&mut self) {
        let at = C::ALL.iter().position(|c| *c == self.sort).unwrap_or(0);
        self.sort = C::ALL[(at + 1) % C::ALL.len()];
    }

    /// Takes new rows, keeping the cursor on one of them.
    pub fn set_rows(&mut self, rows: Vec<K>) {
        self.rows = rows;
        let c = &mut self.cursor;
        c.selected = c.selected.min(self.rows.len().saturating_sub(1));
        c.offset = c.offset.min(c.selected);
    }
}

/// A view that scrolls but has no rows of its own to sort: a filter and a cursor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pane {
    /// The filter typed there (Events filters its events by it).
    pub filter: String,
    /// Selection and scroll.
    pub cursor: Cursor,
}

/// Whether a filter (already lowercased) matches any of a row's words: the words are
/// asked for only under a filter, as building them for 20 000 rows on every change was
/// most of an idle console's work.
pub fn words_match(needle: &str, words: impl FnOnce() -> Vec<String>) -> bool {
    needle.is_empty() || words().iter().any(|w| w.to_lowercase().contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sort_name_is_a_column_or_an_error_naming_them() {
        let mut l: ListState<DevKey, GpuColumn> = ListState::default();
        assert_eq!(l.sort, GpuColumn::Node);
        l.sort_by_name("util").unwrap();
        assert_eq!(l.sort, GpuColumn::Util);
        let e = l.sort_by_name("utli").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no column `utli` here; sort by: node, free, used, util, allocated, sharers"
        );
        assert_eq!(l.sort, GpuColumn::Util, "a typo leaves the sort alone");
        for _ in 0..GpuColumn::ALL.len() {
            l.next_sort();
        }
        assert_eq!(
            l.sort,
            GpuColumn::Util,
            "the sort key cycles through every column"
        );
        assert!(ClaimColumn::parse("over").is_ok());
        assert!(ProjectColumn::parse("memory").is_err());
    }

    #[test]
    fn new_rows_keep_the_cursor_on_a_row() {
        let mut l: ListState<usize, ClaimColumn> = ListState {
            cursor: Cursor {
                selected: 7,
                offset: 5,
            },
            ..ListState::default()
        };
        l.set_rows(vec![1, 2, 3]);
        assert_eq!(
            l.cursor,
            Cursor {
                selected: 2,
                offset: 2
            }
        );
        l.set_rows(Vec::new());
        assert_eq!(l.cursor, Cursor::default());
    }
}
