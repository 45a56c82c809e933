//! The GPUs view: one row per device with its memory bar, allocation, use and flags.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Row, Table};

use crate::console::state::{DevKey, State, TELEMETRY_KINDS, View};
use crate::console::theme::Theme;
use crate::snapshot::DeviceView;

use super::common::{
    block, device_flags, empty_note, list_row, pct, short_bytes, short_model, title_with, window,
};

/// The columns shown: a source column with several sources, more columns when wide.
#[derive(Clone, Copy)]
struct Columns {
    multi: bool,
    wide: bool,
    bar_w: usize,
}

impl Columns {
    fn header(self) -> Vec<&'static str> {
        let Columns { multi, wide, .. } = self;
        let mut header = Vec::new();
        if multi {
            header.push("SRC");
        }
        header.extend([
            "NODE", "#", "MODEL", "MEMORY", "ALLOC", "USED", "FREE", "FREE%",
        ]);
        if wide {
            header.extend(["COMPUTE", "SHR", "UTIL", "TEMP", "POWER"]);
        } else {
            header.push("UTIL");
        }
        header.push("FLAGS");
        header
    }

    fn widths(self) -> Vec<Constraint> {
        let Columns { multi, wide, bar_w } = self;
        let mut widths = Vec::new();
        if multi {
            widths.push(Constraint::Length(8));
        }
        widths.extend([
            Constraint::Length(if wide { 14 } else { 11 }),
            Constraint::Length(2),
            Constraint::Length(if wide { 18 } else { 9 }),
            Constraint::Length(bar_w as u16),
            Constraint::Length(if wide { 11 } else { 9 }),
            Constraint::Length(6),
            Constraint::Length(6),
            Constraint::Length(5),
        ]);
        if wide {
            widths.extend([
                Constraint::Length(10),
                Constraint::Length(3),
                Constraint::Length(4),
                Constraint::Length(4),
                Constraint::Length(8),
            ]);
        } else {
            widths.push(Constraint::Length(4));
        }
        widths.push(Constraint::Fill(1));
        widths
    }
}

/// The device list, scrolled to keep the selection in view.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let wide = area.width >= 140;
    let cols = Columns {
        multi: state.shown_sources().count() > 1,
        wide,
        bar_w: if wide { 16 } else { 8 },
    };
    let height = usize::from(area.height.saturating_sub(3));
    let cur = state.cursor[View::Gpus.position()];
    let len = state.rows_devices.len();
    let off = window(cur.selected, cur.offset, height, len);
    let picked = state.selected_row(View::Gpus);
    let rows: Vec<Row> = state
        .rows_devices
        .iter()
        .enumerate()
        .skip(off)
        .take(height)
        .filter_map(|(i, k)| device_row(state, *k, Some(i) == picked, cols, theme))
        .collect();
    let empty = len == 0;
    let t = Table::new(rows, cols.widths())
        .header(Row::new(cols.header()).style(theme.header))
        .column_spacing(1)
        .block(block(title_with(state, "GPUs", len, theme), theme));
    frame.render_widget(t, area);
    if empty {
        empty_note(frame, area, state, theme, "no GPUs");
    }
}

/// One device's row; `None` when the key no longer names a device.
fn device_row(
    state: &State,
    k: DevKey,
    selected: bool,
    cols: Columns,
    theme: &Theme,
) -> Option<Row<'static>> {
    let Columns { multi, wide, bar_w } = cols;
    let (slot, n, d) = state.device(k)?;
    let stale = slot.is_stale(state.now, state.refresh_ms);
    let t = d.telemetry.as_ref();
    let used = t.and_then(|t| t.memory_used);
    let flags = device_flags(d);
    // A telemetry-only source knows nothing of allocation: show that, not zeros.
    let sched = !TELEMETRY_KINDS.contains(&slot.kind.as_str());
    let unknown = |known: String| if sched { known } else { "n/a".to_string() };
    let mut cells: Vec<Cell> = Vec::new();
    if multi {
        cells.push(Cell::from(slot.name.clone()));
    }
    cells.push(Cell::from(n.name.clone()));
    cells.push(Cell::from(d.index.to_string()));
    cells.push(Cell::from(short_model(&d.model)));
    cells.push(Cell::from(Line::from(mem_bar(d, bar_w, theme))));
    cells.push(Cell::from(Span::styled(
        format!(
            "{}/{}",
            unknown(short_bytes(d.memory_allocated)),
            d.memory_capacity.map_or_else(|| "?".into(), short_bytes)
        ),
        theme.allocated,
    )));
    cells.push(Cell::from(Span::styled(
        used.map_or_else(|| "n/a".into(), short_bytes),
        if used.is_some_and(|u| u > d.memory_allocated) {
            theme.rogue
        } else {
            theme.used
        },
    )));
    cells.push(Cell::from(Span::styled(
        match d.memory_capacity {
            None => "?".to_string(),
            Some(_) => unknown(short_bytes(d.memory_free)),
        },
        theme.free,
    )));
    cells.push(Cell::from(Span::styled(
        unknown(pct(d.compute_free)),
        theme.free,
    )));
    if wide {
        cells.push(Cell::from(unknown(format!("{} GPU", d.compute_allocated))));
        cells.push(Cell::from(unknown(d.holders.len().to_string())));
    }
    cells.push(Cell::from(
        t.and_then(|t| t.utilization_gpu)
            .map_or_else(|| "n/a".into(), |u| format!("{u}%")),
    ));
    if wide {
        cells.push(Cell::from(
            t.and_then(|t| t.temperature_c)
                .map_or_else(|| "n/a".into(), |c| format!("{c}C")),
        ));
        cells.push(Cell::from(
            match t.map(|t| (t.power_mw, t.power_limit_mw)) {
                Some((Some(p), Some(l))) => format!("{}/{}W", p / 1000, l / 1000),
                Some((Some(p), None)) => format!("{}W", p / 1000),
                _ => "n/a".into(),
            },
        ));
    }
    let flag_style = if flags
        .iter()
        .any(|f| matches!(*f, "unclaimed" | "lost" | "unhealthy"))
    {
        theme.rogue
    } else if flags.contains(&"idle") {
        theme.idle
    } else {
        theme.cordoned
    };
    let mut ftext = flags.join(",");
    if stale {
        ftext = if ftext.is_empty() {
            "stale".into()
        } else {
            format!("stale,{ftext}")
        };
    }
    cells.push(Cell::from(Span::styled(
        ftext,
        if stale { theme.stale } else { flag_style },
    )));
    Some(list_row(cells, selected, stale, theme))
}

/// Memory bar: used (solid), allocated beyond use (shaded), free (dots); use beyond
/// the allocation is drawn in the rogue style.
fn mem_bar(d: &DeviceView, width: usize, theme: &Theme) -> Vec<Span<'static>> {
    let cap = d.memory_capacity.unwrap_or_default().0.max(1);
    let used = d
        .telemetry
        .as_ref()
        .and_then(|t| t.memory_used)
        .unwrap_or_default()
        .0;
    let cells = |v: u64| -> usize {
        let c = (u128::from(v) * width as u128).div_ceil(u128::from(cap));
        usize::try_from(c).unwrap_or(width).min(width)
    };
    let (a, u) = (cells(d.memory_allocated.0), cells(used));
    let mut spans = Vec::new();
    let both = a.min(u);
    spans.push(Span::styled("█".repeat(both), theme.used));
    if a > both {
        spans.push(Span::styled("▒".repeat(a - both), theme.allocated));
    }
    if u > both {
        spans.push(Span::styled("█".repeat(u - both), theme.rogue));
    }
    spans.push(Span::styled("·".repeat(width - a.max(u)), theme.bar_empty));
    spans
}
