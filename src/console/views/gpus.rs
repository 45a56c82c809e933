//! The GPUs view: one row per device with its memory bar, allocation, use and flags.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Row, Table};

use crate::console::lists::{Columns, GpuField, gpu_columns};
use crate::console::state::{DevKey, State, View};
use crate::console::theme::Theme;
use crate::snapshot::DeviceView;

use super::common::{
    block, constraints, empty_note, list_row, mid_ellipsis, model_label, pct, short_bytes,
    short_model, title_with, window,
};

/// The device list, scrolled to keep the selection in view.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let longest = state
        .shown_sources()
        .filter_map(|(_, s)| s.data.as_deref())
        .flat_map(|d| d.nodes.iter())
        .map(|n| n.name.chars().count())
        .max()
        .unwrap_or(4);
    let cols = gpu_columns(area.width, state.shown_sources().count() > 1, longest);
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
        .filter_map(|(i, k)| device_row(state, *k, Some(i) == picked, &cols, theme))
        .collect();
    let empty = len == 0;
    let t = Table::new(rows, constraints(&cols))
        .header(Row::new(cols.headers()).style(theme.header))
        .column_spacing(1)
        .block(block(title_with(state, "GPUs", len, theme), theme));
    frame.render_widget(t, area);
    if empty {
        empty_note(frame, area, state, theme, "no GPUs");
    }
}

/// One device's row, a cell per column shown; `None` when the key no longer names a
/// device.
fn device_row(
    state: &State,
    k: DevKey,
    selected: bool,
    cols: &Columns<GpuField>,
    theme: &Theme,
) -> Option<Row<'static>> {
    let (slot, n, d) = state.device(k)?;
    let stale = slot.is_stale(state.now, state.refresh_ms);
    let t = d.telemetry.as_ref();
    let used = t.and_then(|t| t.memory_used);
    // A telemetry-only source knows nothing of allocation: show that, not zeros.
    let sched = !slot.kind.is_telemetry();
    let unknown = |known: String| if sched { known } else { "n/a".to_string() };
    let cells = cols.iter().map(|(field, _)| {
        let width = cols.width_of(field).unwrap_or(0);
        match field {
            GpuField::Source => Cell::from(slot.name.clone()),
            GpuField::Node => Cell::from(mid_ellipsis(&n.name, width)),
            GpuField::Index => Cell::from(d.index.to_string()),
            GpuField::Model => Cell::from(short_model(&d.model)),
            GpuField::ModelMemory => Cell::from(model_label(&d.model, d.memory_capacity)),
            GpuField::Memory => Cell::from(Line::from(mem_bar(d, width, theme))),
            GpuField::Allocated => Cell::from(Span::styled(
                format!(
                    "{}/{}",
                    unknown(short_bytes(d.memory_allocated)),
                    d.memory_capacity.map_or_else(|| "?".into(), short_bytes)
                ),
                theme.allocated,
            )),
            GpuField::Used => Cell::from(Span::styled(
                used.map_or_else(|| "n/a".into(), short_bytes),
                if used.is_some_and(|u| u > d.memory_allocated) {
                    theme.rogue
                } else {
                    theme.used
                },
            )),
            GpuField::MemFree => Cell::from(Span::styled(
                match d.memory_capacity {
                    None => "?".to_string(),
                    Some(_) => unknown(short_bytes(d.memory_free)),
                },
                theme.free,
            )),
            GpuField::GpuFree => Cell::from(Span::styled(unknown(pct(d.compute_free)), theme.free)),
            GpuField::Sharers => Cell::from(unknown(d.holders.len().to_string())),
            GpuField::Compute => Cell::from(unknown(format!("{} GPU", d.compute_allocated))),
            GpuField::Temp => Cell::from(
                t.and_then(|t| t.temperature_c)
                    .map_or_else(|| "n/a".into(), |c| format!("{c}C")),
            ),
            GpuField::Power => Cell::from(match t.map(|t| (t.power_mw, t.power_limit_mw)) {
                Some((Some(p), Some(l))) => format!("{}/{}W", p / 1000, l / 1000),
                Some((Some(p), None)) => format!("{}W", p / 1000),
                _ => "n/a".into(),
            }),
            GpuField::Util => Cell::from(
                t.and_then(|t| t.utilization_gpu)
                    .map_or_else(|| "n/a".into(), |u| format!("{u}%")),
            ),
            GpuField::Flags => flags_cell(d, stale, width, theme),
        }
    });
    Some(list_row(cells.collect(), selected, stale, theme))
}

/// FLAGS: `stale` first while the source is, then the device's flags as far as they fit.
fn flags_cell(d: &DeviceView, stale: bool, width: usize, theme: &Theme) -> Cell<'static> {
    let flags = d.flag_words();
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
    Cell::from(Span::styled(
        fit_flags(&shown, width),
        if stale { theme.stale } else { flag_style },
    ))
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
