//! The Events view: audit events in the operator's local date and time, and the console log.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table};

use crate::clock;

use super::common::block;
use crate::console::state::State;
use crate::console::theme::Theme;

/// Audit events from the shown sources, newest first, and the console's own log.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let [audit, log] =
        Layout::vertical([Constraint::Percentage(65), Constraint::Percentage(35)]).areas(area);
    let mut evs: Vec<(&str, &crate::snapshot::AuditEvent)> = state
        .shown_sources()
        .filter_map(|(_, s)| s.data.as_ref().map(|d| (s.name.as_str(), d)))
        .flat_map(|(n, d)| d.events.iter().map(move |e| (n, e)))
        .filter(|(_, e)| {
            state.filter.is_empty()
                || [&e.action, &e.target, &e.detail, &e.actor]
                    .iter()
                    .any(|s| s.to_lowercase().contains(&state.filter.to_lowercase()))
        })
        .collect();
    evs.sort_by_key(|(_, e)| std::cmp::Reverse((e.at, e.revision)));
    let h = usize::from(audit.height.saturating_sub(3));
    let rows: Vec<Row> = evs
        .iter()
        .take(h)
        .map(|(src, e)| {
            Row::new(vec![
                Cell::from(clock::date_time(e.at, &state.zone)),
                Cell::from((*src).to_string()),
                Cell::from(e.actor.clone()),
                Cell::from(Span::styled(e.action.clone(), theme.accent)),
                Cell::from(e.target.clone()),
                Cell::from(e.detail.clone()),
            ])
        })
        .collect();
    frame.render_widget(
        Table::new(
            rows,
            [
                // `2026-11-23 14:05:09`, in the operator's zone.
                Constraint::Length(19),
                Constraint::Length(8),
                Constraint::Length(13),
                Constraint::Length(9),
                Constraint::Length(10),
                Constraint::Fill(1),
            ],
        )
        .header(
            Row::new(["TIME", "SOURCE", "ACTOR", "ACTION", "TARGET", "DETAIL"]).style(theme.header),
        )
        .block(block(format!(" Audit events ({}) ", evs.len()), theme)),
        audit,
    );
    let lh = usize::from(log.height.saturating_sub(2));
    let skip = state.log.len().saturating_sub(lh);
    let lines: Vec<Line> = state
        .log
        .iter()
        .skip(skip)
        .map(|l| Line::styled(l.clone(), theme.dim))
        .collect();
    frame.render_widget(
        Paragraph::new(lines).block(block(" Console log ", theme)),
        log,
    );
}
