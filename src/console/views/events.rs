//! The Events view: audit events in the operator's local date and time, and the console log.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, Wrap};

use crate::clock;
use crate::snapshot::AuditEvent;

use super::common::{block, constraints, fit, mid_ellipsis, title_with, window};
use crate::console::lists::{EventField, event_columns};
use crate::console::state::{State, View, events_split};
use crate::console::theme::Theme;
use crate::wire::split_move_actor;

/// Audit events from the shown sources, newest first, scrolled with the cursor and
/// filtered with `/`, and the console's own log.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let [audit, log] = events_split(area);
    let evs = state.audit_events();
    let h = usize::from(audit.height.saturating_sub(3));
    let cur = state.cursor_of(View::Events);
    let off = window(cur.selected, cur.offset, h, evs.len());
    let cols = event_columns(audit.width);
    let rows: Vec<Row> = evs
        .iter()
        .enumerate()
        .skip(off)
        .take(h)
        .map(|(i, (src, e))| {
            // A move's step names its move id in the actor; the id goes to DETAIL, where
            // it has room, so both endpoints' rows of one move can be matched by eye.
            let (who, move_id) = split_move_actor(&e.actor);
            let words = detail_words(e, &state.zone);
            let detail = match move_id {
                Some(id) => format!("move {id}: {words}"),
                None => words,
            };
            let row = Row::new(cols.iter().map(|(field, _)| {
                let width = cols.width_of(field).unwrap_or(0);
                match field {
                    EventField::Time => Cell::from(clock::date_time(e.at, &state.zone)),
                    EventField::Source => Cell::from((*src).to_string()),
                    EventField::Actor => Cell::from(short_actor(who, width)),
                    EventField::Action => Cell::from(Span::styled(e.action.clone(), theme.accent)),
                    EventField::Target => Cell::from(e.target.clone()),
                    EventField::Detail => Cell::from(fit(&detail, width)),
                }
            }));
            if i == cur.selected {
                row.style(theme.selection)
            } else {
                row
            }
        })
        .collect();
    frame.render_widget(
        Table::new(rows, constraints(&cols))
            .header(Row::new(cols.headers()).style(theme.header))
            .block(block(
                title_with(state, "Audit events", evs.len(), theme),
                theme,
            )),
        audit,
    );
    // The selected event whole (DETAIL is a few columns at 80), above the console log.
    let log = if log.height >= 7 {
        let [picked, rest] =
            Layout::vertical([Constraint::Length(4), Constraint::Min(3)]).areas(log);
        if let Some((src, e)) = evs.get(cur.selected) {
            let text = format!(
                "{} {src} · {} · {} {}: {}",
                clock::date_time(e.at, &state.zone),
                e.actor,
                e.action,
                e.target,
                detail_words(e, &state.zone)
            );
            frame.render_widget(
                Paragraph::new(text)
                    .style(theme.text)
                    .wrap(Wrap { trim: true })
                    .block(block(" Selected event ", theme)),
                picked,
            );
        }
        rest
    } else {
        log
    };
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

/// An event's detail in words (`snapshot::detail_words`), times in the console's zone.
pub(super) fn detail_words(e: &AuditEvent, zone: &jiff::tz::TimeZone) -> String {
    crate::snapshot::detail_words(&e.detail, zone)
}

/// An actor in `width` columns: whole when it fits; else, for `TOKEN (user@host)`, the
/// person (`user@host`, the host cut at its end: `alice@gpu-0…`), since the token's name is
/// shared by many; the whole actor is in the selected event's pane.
fn short_actor(actor: &str, width: usize) -> String {
    if actor.chars().count() <= width {
        return actor.to_string();
    }
    let person = actor
        .split_once(" (")
        .and_then(|(_, r)| r.strip_suffix(')'))
        .unwrap_or(actor);
    if person.chars().count() <= width {
        return person.to_string();
    }
    if person.contains('@') {
        let kept: String = person.chars().take(width.saturating_sub(1)).collect();
        return format!("{kept}…");
    }
    mid_ellipsis(person, width)
}

#[cfg(test)]
mod tests {
    use super::short_actor;

    #[test]
    fn a_cut_actor_keeps_the_person() {
        assert_eq!(short_actor("root@vm", 13), "root@vm");
        assert_eq!(short_actor("admin (uid0@vm)", 13), "uid0@vm");
        assert_eq!(
            short_actor("admin (alice@gpu-node-17)", 13),
            "alice@gpu-no…"
        );
        assert_eq!(short_actor("operator", 13), "operator");
    }
}
