//! The Fair share view: projects' accounts per resource (debt, target, use, backoff) and
//! why a project is not served now; only the projects in view are formatted.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Clear, Paragraph, Row, Table, Wrap};

use crate::clock;
use crate::console::lists::{Columns, ProjectField, project_columns};
use crate::console::state::{
    ProjKey, SourceSlot, State, View, WhyTone, reason_now, why_pane_height, why_popup_size,
};
use crate::console::theme::Theme;
use crate::snapshot::{ProjectResourceView, ProjectView};

use super::common::{
    block, constraints, empty_note, fit, list_row, mid_ellipsis, model_label, popup, short_model,
    title_with, window,
};

/// Per project: share, running, pending, debt; then one line per resource account.
/// Under 170 columns the selected project's reasons are spelled out in a pane below,
/// where they wrap instead of being cut.
pub(super) fn draw(frame: &mut Frame, whole: Rect, state: &State, theme: &Theme) {
    let pane_h = why_pane_height(whole.width, whole.height);
    let [area, pane] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(pane_h)]).areas(whole);
    if pane_h > 0 {
        why_pane(frame, pane, state, theme);
    }
    let height = usize::from(area.height.saturating_sub(3));
    let cur = state.cursor_of(View::Ledger);
    // With the pane, SHARE and RUN are said there and leave the table to WHY NOT NOW.
    let cols = project_columns(area.width, state.shown_sources().count() > 1, pane_h > 0);
    // Each project takes one line per resource account (at least one): count them, then
    // format only the projects in view.
    let lines_of = |k: &ProjKey| {
        state
            .project(*k)
            .map_or(0, |(_, p)| p.resources.len().max(1))
    };
    let mut len = 0usize;
    let mut selected_line = 0usize;
    for (i, k) in state.projects.rows.iter().enumerate() {
        if i == cur.selected {
            selected_line = len;
        }
        len += lines_of(k);
    }
    let off = window(selected_line, cur.offset, height, len);
    let picked = state.selected_row(View::Ledger);
    let mut rows = Vec::new();
    let mut line = 0usize;
    for (i, k) in state.projects.rows.iter().enumerate() {
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
        let sel = Some(i) == picked;
        let mut lines = Vec::with_capacity(n);
        let first = Row::new(project_line(
            state,
            slot,
            p,
            p.resources.first(),
            true,
            &cols,
            theme,
        ));
        lines.push(if sel {
            first.style(theme.selection)
        } else {
            first
        });
        for r in p.resources.iter().skip(1) {
            let cells = project_line(state, slot, p, Some(r), false, &cols, theme);
            lines.push(list_row(cells, sel, false, theme));
        }
        rows.extend(lines.into_iter().skip(off.saturating_sub(first_line)));
    }
    rows.truncate(height);
    let t = Table::new(rows, constraints(&cols))
        .header(Row::new(cols.headers()).style(theme.header))
        .block(block(
            title_with(state, "Fair share", state.projects.rows.len(), theme),
            theme,
        ));
    frame.render_widget(t, area);
    let no_accounts = state
        .projects
        .rows
        .iter()
        .filter_map(|k| state.project(*k))
        .all(|(_, p)| p.resources.is_empty());
    if state.projects.rows.is_empty() {
        empty_note(frame, area, state, theme, "no projects");
    } else if no_accounts && area.height > 6 {
        let y = area.y + 2 + u16::try_from(state.projects.rows.len().min(height)).unwrap_or(0);
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

/// The selected project in words: each resource account's backoff and why it is not
/// served now, wrapped; when that overflows the pane, its last line says how many more
/// lines Enter shows.
fn why_pane(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let blk = block(" Why not now ", theme);
    let inner = blk.inner(area);
    let Some(mut lines) = why_lines(state, theme, usize::from(inner.width)) else {
        frame.render_widget(blk, area);
        return;
    };
    let room = usize::from(inner.height);
    if lines.len() > room {
        let kept = room.saturating_sub(1);
        let more = lines.len() - kept;
        lines.truncate(kept);
        lines.push(Line::styled(
            format!("(+{more} more lines: Enter)"),
            theme.accent,
        ));
    }
    frame.render_widget(Paragraph::new(lines).block(blk), area);
}

/// The selected project's reasons whole, in a popup over the screen that scrolls
/// (`scroll` lines down, never past the last); Esc closes it.
pub(super) fn draw_why(frame: &mut Frame, area: Rect, state: &State, theme: &Theme, scroll: u16) {
    let r = why_popup(area);
    frame.render_widget(Clear, r);
    let name = state
        .selected_project()
        .and_then(|k| state.project(k))
        .map_or_else(String::new, |(_, p)| p.name.clone());
    let blk = block(
        format!(" Why not now: {name} (j/k scroll, Esc back) "),
        theme,
    );
    let inner = blk.inner(r);
    frame.render_widget(blk, r);
    let lines = why_lines(state, theme, usize::from(inner.width))
        .unwrap_or_else(|| vec![Line::styled("no project selected", theme.dim)]);
    let last = u16::try_from(lines.len())
        .unwrap_or(u16::MAX)
        .saturating_sub(inner.height);
    frame.render_widget(Paragraph::new(lines).scroll((scroll.min(last), 0)), inner);
}

/// Where the reasons popup goes on a screen `area`.
fn why_popup(area: Rect) -> Rect {
    let (w, h) = why_popup_size((area.width, area.height));
    popup(area, w, h)
}

/// The selected project's reasons wrapped to `width`, styled by the theme.
fn why_lines(state: &State, theme: &Theme, width: usize) -> Option<Vec<Line<'static>>> {
    let lines = state.why_lines(width)?;
    let style = |tone: WhyTone| match tone {
        WhyTone::Title => theme.title,
        WhyTone::Header => theme.header,
        WhyTone::Text => theme.text,
        WhyTone::Warn => theme.warn,
        WhyTone::Dim => theme.dim,
    };
    Some(
        lines
            .into_iter()
            .map(|l| {
                Line::from(
                    l.into_iter()
                        .map(|(text, tone)| Span::styled(text, style(tone)))
                        .collect::<Vec<_>>(),
                )
            })
            .collect(),
    )
}

/// One line of a project, a cell per column shown: the project's own columns on its
/// `first` line (blank on the others), the resource account `r`'s on each (blank where it
/// has none).
fn project_line(
    state: &State,
    slot: &SourceSlot,
    p: &ProjectView,
    r: Option<&ProjectResourceView>,
    first: bool,
    cols: &Columns<ProjectField>,
    theme: &Theme,
) -> Vec<Cell<'static>> {
    let now = state.now;
    cols.fields()
        .map(|field| {
            let width = cols.width_of(field).unwrap_or(0);
            if field.of_project() && !first {
                return Cell::from("");
            }
            let Some(r) = r.filter(|_| !field.of_project()) else {
                return match field {
                    ProjectField::Source => Cell::from(slot.name.clone()),
                    // An identity: shrunk in the middle, never cut at the end.
                    ProjectField::Project => Cell::from(mid_ellipsis(&p.name, width)),
                    ProjectField::Share => Cell::from(p.share.to_string()),
                    ProjectField::Running => Cell::from(p.running.to_string()),
                    ProjectField::Pending => Cell::from(Span::styled(
                        p.pending.to_string(),
                        if p.pending > 0 {
                            theme.pending
                        } else {
                            theme.text
                        },
                    )),
                    _ => Cell::from(""),
                };
            };
            match field {
                // The model (with its memory size) is what tells resource types apart;
                // the whole model where the column is wide enough for it.
                ProjectField::Resource => Cell::from(match r.resource.strip_prefix("gpu:") {
                    Some(m) if width >= 14 => short_model(m),
                    Some(m) => model_label(m, None),
                    None => r.resource.clone(),
                }),
                // Under half a unit either way reads `0` (not `-0`, which looked like a debt).
                ProjectField::Debt => Cell::from(if r.debt.abs() <= 0.5 {
                    Span::styled("0", theme.text)
                } else {
                    Span::styled(
                        format!("{:.0}", r.debt),
                        if r.debt < 0.0 { theme.warn } else { theme.text },
                    )
                }),
                ProjectField::Target => Cell::from(format!("{:.2}", r.target)),
                ProjectField::Used => Cell::from(format!("{:.2}", r.used)),
                ProjectField::Eligible => Cell::from(if r.eligible { "D" } else { "-" }),
                ProjectField::BackedOff => match r.backoff_until {
                    Some(t) if t > now => {
                        let at = clock::date_time(t, &state.zone);
                        let time = at.rsplit(' ').next().unwrap_or(&at).to_string();
                        Cell::from(Span::styled(
                            format!("{time} ({})", clock::age(t.millis_since(now))),
                            theme.warn,
                        ))
                    }
                    _ => Cell::from("-"),
                },
                ProjectField::WhyNot => Cell::from(Span::styled(
                    fit(&reason_now(r, now).unwrap_or_default(), width),
                    theme.dim,
                )),
                _ => Cell::from(""),
            }
        })
        .collect()
}
