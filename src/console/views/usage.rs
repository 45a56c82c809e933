//! The Usage view: GPU-hours per project over a window (1 h, 24 h, 7 d), summed over the
//! sources that answered: reserved (by compute fraction, with the memory fraction's
//! figure beside it), used and idle-allocated, each with a bar; Enter lists a project's
//! claims with their own figures. Under the table, the fleet's totals and every source
//! that could not answer, in its words.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, Wrap};

use crate::accounting::GpuSeconds;
use crate::clock::{self, Timestamp};
use crate::console::lists::{UsageField, usage_columns};
use crate::console::state::{
    SourceUsage, State, UsageClaim, UsageProject, UsageView, View, usage_notes_height,
};
use crate::console::theme::Theme;
use crate::console::time::short_time;

use super::common::{block, constraints, list_row, mid_ellipsis, title_with, window};

/// The table, and the notes under it.
pub(super) fn draw(frame: &mut Frame, body: Rect, state: &State, theme: &Theme) {
    let [area, notes] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(usage_notes_height(body.height)),
    ])
    .areas(body);
    let u = &state.usage;
    let mut title = title_with(state, &title_name(state), u.active().rows.len(), theme);
    if u.loading() {
        title.spans.push(Span::styled("loading… ", theme.accent));
    }
    let multi = state.shown_sources().count() > 1;
    // Bars on one scale over the whole list (not the rows in view): the most reserved.
    let scale = match &u.open {
        None => u
            .projects
            .iter()
            .map(|p| p.figures.reserved.compute.0)
            .fold(0.0, f64::max),
        Some(_) => u
            .claim_list
            .rows
            .iter()
            .filter_map(|i| u.claims.get(*i))
            .map(|c| c.claim.figures.reserved.compute.0)
            .fold(0.0, f64::max),
    };
    let cols = usage_columns(area.width, u.open.is_some(), multi);
    let height = usize::from(area.height.saturating_sub(3));
    let cur = state.cursor_of(View::Usage);
    let rows_of = u.active();
    let off = window(cur.selected, cur.offset, height, rows_of.rows.len());
    let rows: Vec<Row> = rows_of
        .rows
        .iter()
        .enumerate()
        .skip(off)
        .take(height)
        .filter_map(|(i, k)| {
            let row = if u.open.is_none() {
                UsageRow::Project(u.projects.get(*k)?)
            } else {
                UsageRow::Claim(u.claims.get(*k)?)
            };
            let cells = cols
                .fields()
                .map(|field| {
                    let width = cols.width_of(field).unwrap_or(0);
                    usage_cell(&row, field, width, scale, theme)
                })
                .collect();
            Some(list_row(cells, i == cur.selected, false, theme))
        })
        .collect();
    let table = Table::new(rows, constraints(&cols))
        .header(Row::new(cols.headers()).style(theme.header))
        .block(block(title, theme));
    frame.render_widget(table, area);
    if rows_of.rows.is_empty() {
        empty(frame, area, state, theme);
    }
    if notes.height > 0 {
        let p = Paragraph::new(note_lines(state, theme)).wrap(Wrap { trim: true });
        frame.render_widget(p, notes);
    }
}

/// A row of the Usage view: a project, or one of the open project's claims.
enum UsageRow<'a> {
    Project(&'a UsageProject),
    Claim(&'a UsageClaim),
}

/// One cell of a row; bars on the one `scale` (the most reserved in the list).
fn usage_cell(
    row: &UsageRow,
    field: UsageField,
    width: usize,
    scale: f64,
    theme: &Theme,
) -> Cell<'static> {
    let figures = match row {
        UsageRow::Project(p) => &p.figures,
        UsageRow::Claim(c) => &c.claim.figures,
    };
    match (field, row) {
        (UsageField::Project, UsageRow::Project(p)) => Cell::from(mid_ellipsis(&p.project, width)),
        (UsageField::Claims, UsageRow::Project(p)) => Cell::from(p.claims.to_string()),
        (UsageField::SourcedClaim, UsageRow::Claim(c)) => Cell::from(mid_ellipsis(&c.label, width)),
        (UsageField::Claim, UsageRow::Claim(c)) => Cell::from(c.claim.claim.to_string()),
        (UsageField::Holder, UsageRow::Claim(c)) => {
            Cell::from(mid_ellipsis(c.claim.holder.as_deref().unwrap_or(""), width))
        }
        (UsageField::LongestIdle, UsageRow::Claim(c)) => {
            Cell::from(match c.claim.longest_idle_ms {
                0 => String::new(),
                ms => clock::age(ms),
            })
        }
        (UsageField::Reserved, _) => num(figures.reserved.compute),
        (UsageField::ReservedBar, _) => Cell::from(bar(
            figures.reserved.compute,
            scale,
            width,
            theme.allocated,
            theme,
        )),
        (UsageField::ByMemory, _) => num(figures.reserved.memory),
        // Nothing measured: unknown, said as n/a rather than 0.
        (UsageField::Used | UsageField::Idle, _) if figures.unmeasured_whole() => {
            Cell::from(Span::styled("n/a", theme.dim))
        }
        (UsageField::UsedBar | UsageField::IdleBar, _) if figures.unmeasured_whole() => {
            Cell::from("")
        }
        (UsageField::Used, _) => num(figures.used),
        (UsageField::UsedBar, _) => Cell::from(bar(figures.used, scale, width, theme.used, theme)),
        (UsageField::Idle, _) => num(figures.idle_allocated),
        (UsageField::IdleBar, _) => {
            Cell::from(bar(figures.idle_allocated, scale, width, theme.idle, theme))
        }
        _ => Cell::from(""),
    }
}

/// `Usage (GPU-h) · 24 h to 03:00`, and the project whose claims are open.
fn title_name(state: &State) -> String {
    let u = &state.usage;
    let mut name = format!("Usage (GPU-h) · {}", u.window.label());
    if let Some(to) = window_end(u) {
        name = format!("{name} to {}", short_time(to, state.now, &state.zone));
    }
    if let Some(p) = &u.open {
        name = format!("{name} · {p}'s claims (Esc back)");
    }
    name
}

/// The end of the window shown, or being asked for.
fn window_end(u: &UsageView) -> Option<Timestamp> {
    u.shown_to().or_else(|| {
        u.sources
            .iter()
            .flat_map(|s| [s.key, s.asked])
            .flatten()
            .filter(|k| k.window == u.window)
            .map(|k| k.to)
            .max()
    })
}

/// GPU time in GPU-hours, two decimals, right-aligned.
fn num(v: GpuSeconds) -> Cell<'static> {
    Cell::from(Line::from(format!("{:.2}", v.hours())).right_aligned())
}

/// A bar of `width` columns, `v` of `scale` filled (a sliver for any time at all).
fn bar(v: GpuSeconds, scale: f64, width: usize, style: Style, theme: &Theme) -> Line<'static> {
    if width == 0 {
        return Line::default();
    }
    let frac = if scale > 0.0 {
        (v.0 / scale).clamp(0.0, 1.0)
    } else {
        0.0
    };
    // Widths are a few dozen columns: the product is exact enough.
    let mut filled = (frac * width as f64).round() as usize;
    if filled == 0 && v.0 > 0.0 {
        filled = 1;
    }
    Line::from(vec![
        Span::styled("█".repeat(filled), style),
        Span::styled("·".repeat(width - filled), theme.bar_empty),
    ])
}

/// Why the list is empty.
fn empty(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let u = &state.usage;
    let text = if !u.active().filter.is_empty() {
        format!("nothing matches the filter `{}`", u.active().filter)
    } else if (0..u.sources.len()).all(|i| u.said_for_window(i).is_none()) {
        format!("loading… the last {}", u.window.label())
    } else if u.open.is_some() {
        "none of its claims held GPUs in the window".to_string()
    } else if u.shown_to().is_some() {
        "no project held GPUs in the window".to_string()
    } else {
        "no source answered for this window (see below)".to_string()
    };
    let inner = Rect {
        x: area.x + 2,
        y: area.y + 2,
        width: area.width.saturating_sub(4),
        height: area.height.saturating_sub(3).min(1),
    };
    frame.render_widget(Paragraph::new(Line::styled(text, theme.dim)), inner);
}

/// The fleet's totals over the sources that answered, then each shown source that did not
/// (or whose history begins inside the window), in words.
fn note_lines(state: &State, theme: &Theme) -> Vec<Line<'static>> {
    let u = &state.usage;
    let mut spans = Vec::new();
    if u.shown_to().is_some() {
        spans.push(Span::styled(
            format!(
                "fleet {:.2} GPU-h · unallocated {:.2} (compute), {:.2} (memory)",
                u.physical.hours(),
                u.unallocated.compute.hours(),
                u.unallocated.memory.hours()
            ),
            theme.dim,
        ));
    }
    for (i, slot) in state.shown_sources() {
        let name = &slot.name;
        let (text, style) = match u.said_for_window(i) {
            None if u.sources.get(i).is_some_and(|s| s.asked.is_some()) => {
                (format!("{name}: loading…"), theme.dim)
            }
            None => continue,
            Some((key, said)) => match said {
                SourceUsage::Shown { from, .. } if *from > key.from() => (
                    format!(
                        "{name}: history begins {}",
                        short_time(*from, state.now, &state.zone)
                    ),
                    theme.dim,
                ),
                SourceUsage::Shown { .. } | SourceUsage::Unasked => continue,
                SourceUsage::Before(Some(from)) => (
                    format!(
                        "{name}: no history in the window (it begins {})",
                        clock::date_time(*from, &state.zone)
                    ),
                    theme.warn,
                ),
                SourceUsage::Before(None) => (format!("{name}: records no history"), theme.warn),
                SourceUsage::NoHistory => (
                    format!("{name}: keeps no history ({} source)", slot.kind),
                    theme.warn,
                ),
                SourceUsage::Failed(e) => (format!("{name}: {e}"), theme.critical),
            },
        };
        if !spans.is_empty() {
            spans.push(Span::styled(" · ", theme.dim));
        }
        spans.push(Span::styled(text, style));
    }
    vec![Line::from(spans)]
}
