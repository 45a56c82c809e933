//! The Claims view: one row per claim (state, place, reservation, use, lease, age) and
//! the selected claim's shares or why it is pending.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, Wrap};

use crate::clock;
use crate::console::state::{ClaimKey, SourceSlot, State, View, claims_info_height};
use crate::console::theme::Theme;
use crate::snapshot::{ClaimState, ClaimView};
use crate::units::Bytes;

use super::common::{block, empty_note, list_row, place_label, short_bytes, title_with, window};

/// The columns shown: a source column with several sources, more columns when wide, and
/// fewer when narrow, so that the identity columns (id, place) are never cut.
#[derive(Clone, Copy)]
struct Columns {
    multi: bool,
    wide: bool,
    /// Under 80 columns: lease and age drop (and use too, with a source column).
    narrow: bool,
    /// What FORM (the one column that fills) has, in columns, once drawn.
    form_w: usize,
}

impl Columns {
    fn of(width: u16, multi: bool) -> Columns {
        Columns {
            multi,
            wide: width >= 110,
            narrow: width < 80,
            form_w: 0,
        }
    }

    fn with_used(self) -> bool {
        !(self.narrow && self.multi)
    }

    fn with_times(self) -> bool {
        !self.narrow
    }
}

impl Columns {
    fn header(self) -> Vec<&'static str> {
        let Columns { multi, wide, .. } = self;
        let mut header = Vec::new();
        if multi {
            header.push("SRC");
        }
        header.extend(["ID", "STATE", "PROJECT"]);
        if wide {
            header.push("HOLDER");
        }
        header.extend(["PLACE", "RESERVED"]);
        if self.with_used() {
            header.push("USED");
        }
        if wide {
            header.extend(["FRACTION", "FORM"]);
        }
        if self.with_times() {
            header.extend(["LEASE", "AGE"]);
        }
        header
    }

    fn widths(self) -> Vec<Constraint> {
        let Columns {
            multi,
            wide,
            narrow,
            ..
        } = self;
        let mut widths = Vec::new();
        if multi {
            widths.push(Constraint::Length(if narrow { 6 } else { 8 }));
        }
        widths.extend([
            Constraint::Length(6),
            Constraint::Length(7),
            Constraint::Length(if narrow { 8 } else { 10 }),
        ]);
        if wide {
            widths.push(Constraint::Length(10));
        }
        widths.extend([
            Constraint::Length(if wide { 20 } else { 16 }),
            Constraint::Length(8),
        ]);
        if self.with_used() {
            widths.push(Constraint::Length(7));
        }
        if wide {
            widths.extend([Constraint::Length(10), Constraint::Fill(1)]);
        }
        if self.with_times() {
            // Lease and age, in two units: `59m59s`.
            widths.extend([Constraint::Length(7), Constraint::Length(6)]);
        }
        widths
    }
}

/// The claim list, and below it (when tall enough) the selected claim in words.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let mut cols = Columns::of(area.width, state.shown_sources().count() > 1);
    // FORM fills what the fixed columns and the gaps between columns leave.
    let widths = cols.widths();
    let fixed: u16 = widths
        .iter()
        .map(|w| match w {
            Constraint::Length(n) => *n,
            _ => 0,
        })
        .sum();
    let gaps = u16::try_from(widths.len().saturating_sub(1)).unwrap_or(0);
    cols.form_w = usize::from(area.width.saturating_sub(2 + fixed + gaps));
    let detail_h = claims_info_height(area.height);
    let [table_area, info] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(detail_h)]).areas(area);
    let height = usize::from(table_area.height.saturating_sub(3));
    let cur = state.cursor[View::Claims.position()];
    let len = state.rows_claims.len();
    let off = window(cur.selected, cur.offset, height, len);
    let picked = state.selected_row(View::Claims);
    let rows: Vec<Row> = state
        .rows_claims
        .iter()
        .enumerate()
        .skip(off)
        .take(height)
        .filter_map(|(i, k)| claim_row(state, *k, Some(i) == picked, cols, theme))
        .collect();
    let t = Table::new(rows, cols.widths())
        .header(Row::new(cols.header()).style(theme.header))
        .block(block(title_with(state, "Claims", len, theme), theme));
    frame.render_widget(t, table_area);
    if len == 0 {
        empty_note(frame, table_area, state, theme, "no claims");
    }
    if detail_h > 0
        && let Some((slot, c)) = state.selected_claim().and_then(|k| state.claim(k))
    {
        selected_info(frame, info, slot, c, theme);
    }
}

/// One claim's row; `None` when the key no longer names a claim.
fn claim_row(
    state: &State,
    k: ClaimKey,
    selected: bool,
    cols: Columns,
    theme: &Theme,
) -> Option<Row<'static>> {
    let Columns { multi, wide, .. } = cols;
    let (slot, c) = state.claim(k)?;
    let stale = slot.is_stale(state.now, state.refresh_ms);
    let mut cells: Vec<Cell> = Vec::new();
    if multi {
        cells.push(Cell::from(slot.name.clone()));
    }
    cells.push(Cell::from(c.id.to_string()));
    cells.push(match c.state {
        ClaimState::Placed if c.idle => Cell::from(Span::styled("idle", theme.idle)),
        ClaimState::Placed => Cell::from(Span::styled("placed", theme.ok)),
        ClaimState::Pending if c.infeasible => Cell::from(Span::styled("never", theme.critical)),
        ClaimState::Pending => Cell::from(Span::styled("pending", theme.pending)),
    });
    cells.push(Cell::from(c.project.clone()));
    if wide {
        cells.push(Cell::from(c.holder.clone().unwrap_or_else(|| "-".into())));
    }
    cells.push(Cell::from(place_label(c, if wide { 20 } else { 16 })));
    cells.push(Cell::from(Span::styled(
        short_bytes(c.memory_reserved),
        theme.allocated,
    )));
    if cols.with_used() {
        cells.push(match c.memory_used {
            Some(u) if c.over_limit => Cell::from(Span::styled(
                format!("{}!", short_bytes(u)),
                theme.over_limit,
            )),
            Some(u) => Cell::from(Span::styled(short_bytes(u), theme.used)),
            None => Cell::from(Span::styled("n/a", theme.dim)),
        });
    }
    if wide {
        cells.push(Cell::from(format!("{} GPU", c.compute_reserved)));
        // A form cut short ends in `…` (the panel below shows it whole).
        cells.push(Cell::from(end_ellipsis(&c.form, cols.form_w)));
    }
    if cols.with_times() {
        cells.push(Cell::from(c.lease_expires_at.map_or_else(
            || "-".into(),
            |t| {
                if t <= state.now {
                    "expired".to_string()
                } else {
                    clock::age(t.millis_since(state.now))
                }
            },
        )));
        // Engines that give no start time (Ray actors) leave it at 0: unknown, not 55 years.
        cells.push(Cell::from(if c.created_at.0 == 0 {
            "-".to_string()
        } else {
            clock::age(state.now.millis_since(c.created_at))
        }));
    }
    Some(list_row(cells, selected, stale, theme))
}

/// `s` in at most `width` columns, ending in `…` when cut.
fn end_ellipsis(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The selected claim: its form, and its shares (or why it is pending).
fn selected_info(frame: &mut Frame, info: Rect, slot: &SourceSlot, c: &ClaimView, theme: &Theme) {
    let mut lines = vec![Line::from(vec![
        Span::styled(format!("claim {} ", c.id), theme.title),
        Span::styled(format!("on {}: ", slot.name), theme.dim),
        Span::styled(c.form.clone(), theme.text),
        Span::styled(
            format!(
                "  project {}, holder {}",
                c.project,
                c.holder.as_deref().unwrap_or("-")
            ),
            theme.dim,
        ),
    ])];
    if c.state == ClaimState::Pending {
        if c.pending_reasons.is_empty() {
            lines.push(Line::styled(
                "waiting; no reason recorded yet",
                theme.pending,
            ));
        }
        // The panel is a few lines high: say how many reasons there are and where all of
        // them are, before the ones that fit.
        if c.pending_reasons.len() > 1 {
            lines.push(Line::styled(
                format!(
                    "why pending: {} reasons (Enter shows them all)",
                    c.pending_reasons.len()
                ),
                theme.pending,
            ));
        }
        for r in &c.pending_reasons {
            lines.push(Line::styled(format!("why pending: {r}"), theme.pending));
        }
    } else {
        let per: Vec<String> = c
            .shares
            .iter()
            .map(|s| format!("GPU {}: {} / {} GPU", s.device, s.memory.iec(), s.compute))
            .collect();
        lines.push(Line::styled(per.join("  "), theme.allocated));
        if c.over_limit {
            lines.push(Line::styled(
                format!(
                    "over its limit: uses {} of {} reserved",
                    c.memory_used.map_or_else(|| "?".into(), Bytes::iec),
                    c.memory_reserved.iec()
                ),
                theme.over_limit,
            ));
        }
    }
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(block(" Selected ", theme)),
        info,
    );
}
