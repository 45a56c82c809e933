//! The Events view: audit events in the operator's local date and time, and the console log.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table};

use crate::clock;

use super::common::{block, mid_ellipsis, title_with, window};
use crate::console::state::{State, View, events_split};
use crate::console::theme::Theme;
use crate::wire::split_move_actor;

/// ACTOR's width: `alice (u@host)` shrinks in the middle rather than losing its end.
const ACTOR_W: usize = 13;

/// Audit events from the shown sources, newest first, scrolled with the cursor and
/// filtered with `/`, and the console's own log.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let [audit, log] = events_split(area);
    let evs = state.audit_events();
    let h = usize::from(audit.height.saturating_sub(3));
    let cur = state.cursor[View::Events.position()];
    let off = window(cur.selected, cur.offset, h, evs.len());
    let rows: Vec<Row> = evs
        .iter()
        .enumerate()
        .skip(off)
        .take(h)
        .map(|(i, (src, e))| {
            // A move's step names its move id in the actor; the id goes to DETAIL, where
            // it has room, so both endpoints' rows of one move can be matched by eye.
            let (who, move_id) = split_move_actor(&e.actor);
            let detail =
                move_id.map_or_else(|| e.detail.clone(), |id| format!("move {id}: {}", e.detail));
            let row = Row::new(vec![
                Cell::from(clock::date_time(e.at, &state.zone)),
                Cell::from((*src).to_string()),
                Cell::from(mid_ellipsis(who, ACTOR_W)),
                Cell::from(Span::styled(e.action.clone(), theme.accent)),
                Cell::from(e.target.clone()),
                Cell::from(detail),
            ]);
            if i == cur.selected {
                row.style(theme.selection)
            } else {
                row
            }
        })
        .collect();
    frame.render_widget(
        Table::new(
            rows,
            [
                // `2026-11-23 14:05:09`, in the operator's zone.
                Constraint::Length(19),
                Constraint::Length(8),
                Constraint::Length(u16::try_from(ACTOR_W).unwrap_or(13)),
                Constraint::Length(9),
                Constraint::Length(10),
                Constraint::Fill(1),
            ],
        )
        .header(
            Row::new(["TIME", "SOURCE", "ACTOR", "ACTION", "TARGET", "DETAIL"]).style(theme.header),
        )
        .block(block(
            title_with(state, "Audit events", evs.len(), theme),
            theme,
        )),
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
