//! The Fair share view: projects' accounts per resource (debt, target, use, backoff) and
//! why a project is not served now; only the projects in view are formatted.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::Span;
use ratatui::widgets::{Cell, Paragraph, Row, Table, Wrap};

use crate::clock;
use crate::console::state::{ProjKey, State, View};
use crate::console::theme::Theme;
use crate::snapshot::ProjectResourceView;

use super::common::{block, empty_note, list_row, model_label, short_model, title_with, window};

/// Per project: share, running, pending, debt; then one line per resource account.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let height = usize::from(area.height.saturating_sub(3));
    let wide = area.width >= 110;
    let cur = state.cursor[View::Ledger.position()];
    let multi = state.shown_sources().count() > 1;
    // Each project takes one line per resource account (at least one): count them, then
    // format only the projects in view.
    let lines_of = |k: &ProjKey| {
        state
            .project(*k)
            .map_or(0, |(_, p)| p.resources.len().max(1))
    };
    let mut len = 0usize;
    let mut selected_line = 0usize;
    for (i, k) in state.rows_projects.iter().enumerate() {
        if i == cur.selected {
            selected_line = len;
        }
        len += lines_of(k);
    }
    let off = window(selected_line, cur.offset, height, len);
    let picked = state.selected_row(View::Ledger);
    let mut rows = Vec::new();
    let mut line = 0usize;
    for (i, k) in state.rows_projects.iter().enumerate() {
        if line >= off + height {
            break;
        }
        let n = lines_of(k);
        let first_line = line;
        line += n;
        if line <= off {
            continue;
        }
        let Some((slot, p)) = state.project(*k) else {
            continue;
        };
        let mut lines = Vec::with_capacity(n);
        let sel = Some(i) == picked;
        let first = |r: Option<&ProjectResourceView>| {
            let mut cells: Vec<Cell> = Vec::new();
            if multi {
                cells.push(Cell::from(slot.name.clone()));
            }
            cells.extend([
                Cell::from(p.name.clone()),
                Cell::from(p.share.to_string()),
                Cell::from(p.running.to_string()),
                Cell::from(Span::styled(
                    p.pending.to_string(),
                    if p.pending > 0 {
                        theme.pending
                    } else {
                        theme.text
                    },
                )),
            ]);
            cells.extend(resource_cells(r, state, wide, theme));
            cells
        };
        let mut row = Row::new(first(p.resources.first()));
        if sel {
            row = row.style(theme.selection);
        }
        lines.push(row);
        for r in p.resources.iter().skip(1) {
            let mut cells: Vec<Cell> = Vec::new();
            if multi {
                cells.push(Cell::from(""));
            }
            cells.extend((0..4).map(|_| Cell::from("")));
            cells.extend(resource_cells(Some(r), state, wide, theme));
            lines.push(list_row(cells, sel, false, theme));
        }
        rows.extend(lines.into_iter().skip(off.saturating_sub(first_line)));
    }
    rows.truncate(height);
    let mut header = Vec::new();
    if multi {
        header.push("SRC");
    }
    // One debt column (per resource type: the scale backoffs and work fetch use).
    header.extend(["PROJECT", "SHARE", "RUN", "PEND", "RESOURCE", "DEBT"]);
    if wide {
        header.extend(["TARGET", "USED"]);
    }
    header.extend(["D", "BACKED OFF UNTIL", "WHY NOT NOW"]);
    let mut widths = Vec::new();
    if multi {
        widths.push(Constraint::Length(8));
    }
    widths.extend([
        Constraint::Length(10),
        Constraint::Length(5),
        Constraint::Length(3),
        Constraint::Length(4),
        // `A100 80G` (model and memory size) when narrow, the whole model when wide.
        Constraint::Length(if wide { 14 } else { 8 }),
        Constraint::Length(7),
    ]);
    if wide {
        widths.extend([Constraint::Length(6), Constraint::Length(5)]);
    }
    widths.extend([
        Constraint::Length(1),
        // `14:05:09 (11m56s)`: the local time it ends, and how long from now.
        Constraint::Length(17),
        Constraint::Fill(1),
    ]);
    let t = Table::new(rows, widths)
        .header(Row::new(header).style(theme.header))
        .block(block(
            title_with(state, "Fair share", state.rows_projects.len(), theme),
            theme,
        ));
    frame.render_widget(t, area);
    let no_accounts = state
        .rows_projects
        .iter()
        .filter_map(|k| state.project(*k))
        .all(|(_, p)| p.resources.is_empty());
    if state.rows_projects.is_empty() {
        empty_note(frame, area, state, theme, "no projects");
    } else if no_accounts && area.height > 6 {
        let y = area.y + 2 + u16::try_from(state.rows_projects.len().min(height)).unwrap_or(0);
        if y + 1 < area.y + area.height {
            frame.render_widget(
                Paragraph::new("no per-resource accounts from these sources (debts, backoffs): their fair-share ledger is not reported")
                    .style(theme.dim)
                    .wrap(Wrap { trim: true }),
                Rect { x: area.x + 2, y, width: area.width.saturating_sub(4), height: (area.y + area.height - 1).saturating_sub(y) },
            );
        }
    }
}

/// A resource account's cells: model, debt, (target, use when wide), eligibility, the
/// backoff's end as a local time with the time left, and why not now.
fn resource_cells(
    r: Option<&ProjectResourceView>,
    state: &State,
    wide: bool,
    theme: &Theme,
) -> Vec<Cell<'static>> {
    let Some(r) = r else {
        return (0..if wide { 7 } else { 5 })
            .map(|_| Cell::from(""))
            .collect();
    };
    let now = state.now;
    let backoff = match r.backoff_until {
        Some(t) if t > now => {
            let at = clock::date_time(t, &state.zone);
            let time = at.rsplit(' ').next().unwrap_or(&at).to_string();
            Cell::from(Span::styled(
                format!("{time} ({})", clock::age(t.millis_since(now))),
                theme.warn,
            ))
        }
        _ => Cell::from("-"),
    };
    let model = r.resource.strip_prefix("gpu:");
    let mut cells = vec![
        // The model (with its memory size) is what tells resource types apart.
        Cell::from(match model {
            Some(m) if wide => short_model(m),
            Some(m) => model_label(m, None),
            None => r.resource.clone(),
        }),
        // Under half a unit either way reads `0` (not `-0`, which looked like a debt).
        Cell::from(if r.debt.abs() <= 0.5 {
            Span::styled("0", theme.text)
        } else {
            Span::styled(
                format!("{:.0}", r.debt),
                if r.debt < 0.0 { theme.warn } else { theme.text },
            )
        }),
    ];
    if wide {
        cells.push(Cell::from(format!("{:.2}", r.target)));
        cells.push(Cell::from(format!("{:.2}", r.used)));
    }
    cells.extend([
        Cell::from(if r.eligible { "D" } else { "-" }),
        backoff,
        Cell::from(Span::styled(
            r.reason.clone().unwrap_or_default(),
            theme.dim,
        )),
    ]);
    cells
}
