//! The GPUs view: one row per device with its memory bar, allocation, use and flags.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Row, Table};

use crate::console::state::{DevKey, State, View};
use crate::console::theme::Theme;
use crate::snapshot::DeviceView;

use super::common::{
    block, empty_note, list_row, mid_ellipsis, model_label, pct, short_bytes, short_model,
    title_with, window,
};

/// The columns shown. Three sets by width (under 110 columns, under 170, wider), a
/// source column with several sources; NODE takes the width of the longest name that
/// fits and is shortened in the middle (`prod-h…-018`) only when nothing else can give.
#[derive(Clone, Copy)]
struct Columns {
    multi: bool,
    /// 0: 80-column set, 1: 120-column set, 2: 200-column set.
    tier: u8,
    /// Under 80 columns: USED and GPU FREE make way for FLAGS (which says `unclaimed`
    /// where use exceeds the allocation).
    narrow: bool,
    node_w: u16,
    /// What FLAGS gets of the width: flags that do not fit are counted, never cut.
    flags_w: usize,
    bar_w: usize,
}

/// FLAGS keeps at least this much (`unclaimed`).
const FLAGS_MIN: u16 = 9;

impl Columns {
    fn new(area: Rect, state: &State) -> Columns {
        let multi = state.shown_sources().count() > 1;
        let tier = match area.width {
            0..110 => 0,
            110..170 => 1,
            _ => 2,
        };
        let bar_w = if tier == 0 { 0 } else { 16 };
        let mut c = Columns {
            multi,
            tier,
            narrow: area.width < 80,
            node_w: 0,
            flags_w: usize::from(FLAGS_MIN),
            bar_w,
        };
        let others: u16 = c.widths_without_node().iter().sum();
        let gaps = u16::try_from(c.header().len()).unwrap_or(0);
        let longest = state
            .shown_sources()
            .filter_map(|(_, s)| s.data.as_ref())
            .flat_map(|d| d.nodes.iter())
            .map(|n| n.name.chars().count())
            .max()
            .unwrap_or(4);
        let budget = area
            .width
            .saturating_sub(2 + others + gaps + FLAGS_MIN)
            .max(6);
        c.node_w = u16::try_from(longest).unwrap_or(u16::MAX).clamp(4, budget);
        c.flags_w = usize::from(
            area.width
                .saturating_sub(2 + others + gaps + c.node_w)
                .max(FLAGS_MIN),
        );
        c
    }

    fn header(self) -> Vec<&'static str> {
        let mut header = Vec::new();
        if self.multi {
            header.push("SRC");
        }
        header.extend(["NODE", "#", "MODEL"]);
        if self.tier > 0 {
            header.push("MEMORY");
        }
        if self.narrow {
            header.extend(["ALLOC", "MEM FREE"]);
        } else {
            header.extend(["ALLOC", "USED", "MEM FREE", "GPU FREE"]);
        }
        if self.tier > 0 {
            header.push("SHR");
        }
        if self.tier > 1 {
            header.extend(["COMPUTE", "TEMP", "POWER"]);
        }
        header.extend(["UTIL", "FLAGS"]);
        header
    }

    /// Every fixed width but NODE's and FLAGS', in header order.
    fn widths_without_node(self) -> Vec<u16> {
        let mut w = Vec::new();
        if self.multi {
            w.push(8);
        }
        w.extend([2, if self.tier > 1 { 18 } else { 8 }]);
        if self.tier > 0 {
            w.push(u16::try_from(self.bar_w).unwrap_or(16));
        }
        if self.narrow {
            w.extend([11, 8]);
        } else {
            w.extend([11, 6, 8, 8]);
        }
        if self.tier > 0 {
            w.push(3);
        }
        if self.tier > 1 {
            w.extend([10, 4, 8]);
        }
        w.push(4);
        w
    }

    fn widths(self) -> Vec<Constraint> {
        let fixed = self.widths_without_node();
        let at = usize::from(self.multi);
        let mut widths: Vec<Constraint> = fixed.into_iter().map(Constraint::Length).collect();
        widths.insert(at, Constraint::Length(self.node_w));
        widths.push(Constraint::Fill(1));
        widths
    }
}

/// The device list, scrolled to keep the selection in view.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let cols = Columns::new(area, state);
    let height = usize::from(area.height.saturating_sub(3));
    let cur = state.cursor_of(View::Gpus);
    let len = state.gpus.rows.len();
    let off = window(cur.selected, cur.offset, height, len);
    let picked = state.selected_row(View::Gpus);
    let rows: Vec<Row> = state
        .gpus
        .rows
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
    let Columns {
        multi,
        tier,
        narrow,
        node_w,
        flags_w,
        bar_w,
    } = cols;
    let (slot, n, d) = state.device(k)?;
    let stale = slot.is_stale(state.now, state.refresh_ms);
    let t = d.telemetry.as_ref();
    let used = t.and_then(|t| t.memory_used);
    let flags = d.flag_words();
    // A telemetry-only source knows nothing of allocation: show that, not zeros.
    let sched = !slot.kind.is_telemetry();
    let unknown = |known: String| if sched { known } else { "n/a".to_string() };
    let mut cells: Vec<Cell> = Vec::new();
    if multi {
        cells.push(Cell::from(slot.name.clone()));
    }
    cells.push(Cell::from(mid_ellipsis(&n.name, usize::from(node_w))));
    cells.push(Cell::from(d.index.to_string()));
    cells.push(Cell::from(if tier > 1 {
        short_model(&d.model)
    } else {
        model_label(&d.model, d.memory_capacity)
    }));
    if tier > 0 {
        cells.push(Cell::from(Line::from(mem_bar(d, bar_w, theme))));
    }
    cells.push(Cell::from(Span::styled(
        format!(
            "{}/{}",
            unknown(short_bytes(d.memory_allocated)),
            d.memory_capacity.map_or_else(|| "?".into(), short_bytes)
        ),
        theme.allocated,
    )));
    if !narrow {
        cells.push(Cell::from(Span::styled(
            used.map_or_else(|| "n/a".into(), short_bytes),
            if used.is_some_and(|u| u > d.memory_allocated) {
                theme.rogue
            } else {
                theme.used
            },
        )));
    }
    cells.push(Cell::from(Span::styled(
        match d.memory_capacity {
            None => "?".to_string(),
            Some(_) => unknown(short_bytes(d.memory_free)),
        },
        theme.free,
    )));
    if !narrow {
        cells.push(Cell::from(Span::styled(
            unknown(pct(d.compute_free)),
            theme.free,
        )));
    }
    if tier > 0 {
        cells.push(Cell::from(unknown(d.holders.len().to_string())));
    }
    if tier > 1 {
        cells.push(Cell::from(unknown(format!("{} GPU", d.compute_allocated))));
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
    cells.push(Cell::from(
        t.and_then(|t| t.utilization_gpu)
            .map_or_else(|| "n/a".into(), |u| format!("{u}%")),
    ));
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
    // Unclaimed use says whose, when a cgroup named the owner: `unclaimed:pod ml/x`.
    let whose = d
        .has_unclaimed_use()
        .then(|| {
            d.unclaimed_owners()
                .first()
                .map(|o| format!("unclaimed:{}", o.short()))
        })
        .flatten();
    let shown: Vec<&str> = stale
        .then_some("stale")
        .into_iter()
        .chain(flags.iter().map(|f| match (*f, &whose) {
            ("unclaimed", Some(w)) => w.as_str(),
            (f, _) => f,
        }))
        .collect();
    let ftext = fit_flags(&shown, flags_w);
    cells.push(Cell::from(Span::styled(
        ftext,
        if stale { theme.stale } else { flag_style },
    )));
    Some(list_row(cells, selected, stale, theme))
}

/// The flags joined by commas as far as they fit in `width`, the rest counted (`cordon +1`),
/// so a flag is never cut mid-word.
fn fit_flags(flags: &[&str], width: usize) -> String {
    let mut out = String::new();
    for (i, f) in flags.iter().enumerate() {
        let left = flags.len() - i - 1;
        let sep = usize::from(!out.is_empty());
        let more = if left > 0 {
            format!(" +{left}").len()
        } else {
            0
        };
        if out.chars().count() + sep + f.chars().count() + more > width && i > 0 {
            return format!("{out} +{}", flags.len() - i);
        }
        if sep == 1 {
            out.push(',');
        }
        out.push_str(f);
    }
    out
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

#[cfg(test)]
mod tests {
    use super::fit_flags;

    #[test]
    fn flags_that_do_not_fit_are_counted_not_cut() {
        let flags = ["cordon", "no-mem-info"];
        assert_eq!(fit_flags(&flags, 40), "cordon,no-mem-info");
        assert_eq!(fit_flags(&flags, 18), "cordon,no-mem-info");
        assert_eq!(fit_flags(&flags, 17), "cordon +1");
        assert_eq!(fit_flags(&["stale", "idle", "cordon"], 13), "stale,idle +1");
        assert_eq!(fit_flags(&["stale", "idle", "cordon"], 12), "stale +2");
        assert_eq!(fit_flags(&[], 9), "");
    }
}
