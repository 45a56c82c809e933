//! How many rows a list shows at the current terminal size, so that paging moves by
//! exactly what is visible (Page Down never skips a row). Drawing uses the same figures.

use ratatui::layout::{Constraint, Layout, Rect};

use crate::snapshot::AuditEvent;

use super::{State, View};

/// The Events view's split: audit events above, the console log below.
pub fn events_split(body: Rect) -> [Rect; 2] {
    Layout::vertical([Constraint::Percentage(65), Constraint::Percentage(35)]).areas(body)
}

/// Height of the claim panel under the Claims table (0 when the body is too short).
pub fn claims_info_height(body: u16) -> u16 {
    if body >= 16 { 5 } else { 0 }
}

/// Height of the "why not now" pane under the Fair share table: under 170 columns,
/// where the table's WHY NOT NOW column is too narrow for a whole reason, when the body
/// is tall enough (0 otherwise).
pub fn why_pane_height(width: u16, body: u16) -> u16 {
    if width < 170 && body >= 16 { 7 } else { 0 }
}

impl State {
    /// Rows between the tab line and the footer (the hint line shows from 12 rows).
    pub fn body_height(&self) -> u16 {
        let h = self.size.1;
        h.saturating_sub(2 + u16::from(h >= 12))
    }

    /// Rows of the current view's list that fit on screen (table border and header
    /// taken off; in Claims, also the claim panel).
    pub fn visible_rows(&self) -> usize {
        let body = self.body_height();
        let table = match self.view {
            View::Claims => body.saturating_sub(claims_info_height(body)),
            View::Ledger => body.saturating_sub(why_pane_height(self.size.0, body)),
            View::Events => events_split(Rect::new(0, 0, self.size.0, body))[0].height,
            View::Usage => body.saturating_sub(super::usage::notes_height(body)),
            _ => body,
        };
        usize::from(table.saturating_sub(3)).max(1)
    }
}

impl State {
    /// The audit events of the shown sources that match the Events filter, newest first,
    /// with their source's name: what the Events view lists and scrolls through.
    pub fn audit_events(&self) -> Vec<(&str, &AuditEvent)> {
        let needle = self.panes.events.filter.to_lowercase();
        let mut evs: Vec<(&str, &AuditEvent)> = self
            .shown_sources()
            .filter_map(|(_, s)| s.data.as_deref().map(|d| (s.name.as_str(), d)))
            .flat_map(|(n, d)| d.events.iter().map(move |e| (n, e)))
            .filter(|(n, e)| {
                needle.is_empty()
                    || [&e.action, &e.target, &e.detail, &e.actor, *n]
                        .iter()
                        .any(|s| s.to_lowercase().contains(&needle))
            })
            .collect();
        evs.sort_by_key(|(_, e)| std::cmp::Reverse((e.at, e.revision)));
        evs
    }
}
