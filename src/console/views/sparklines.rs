//! The Overview's sparklines beside the totals: memory allocated and used (on one scale,
//! the fleet's capacity), compute allocated, claims pending and GPUs allocated but idle,
//! over the last hour or day ending at the time shown (`state::Trends`), with where the
//! points came from.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Sparkline};

use super::common::{block, short_bytes};
use crate::console::state::{State, TrendHistory, TrendPoint};
use crate::console::theme::Theme;
use crate::units::{Bytes, UNITS_PER_DEVICE};

/// Narrowest area the sparklines are drawn in.
pub(super) const MIN_WIDTH: u16 = 28;

/// One sparkline: label, the latest value as text, the points, their scale and style.
struct Row {
    label: &'static str,
    short: &'static str,
    value: String,
    points: Vec<Option<u64>>,
    max: u64,
    style: Style,
}

/// The sparklines in `area` (bordered).
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    if area.width < MIN_WIDTH || area.height < 3 {
        return;
    }
    let t = &state.trends;
    let shown: Vec<usize> = state.shown_sources().map(|(i, _)| i).collect();
    let full = t.series(state.now, &shown);
    let wide = area.width >= 50;
    let inner = Rect::new(
        area.x + 1,
        area.y + 1,
        area.width - 2,
        area.height.saturating_sub(2),
    );
    let label_w: u16 = if wide { 10 } else { 6 };
    let value_w: u16 = if wide { 14 } else { 0 };
    let spark_w = inner.width.saturating_sub(label_w + value_w);
    // Narrower than its points: a column for every few, the latest of them, so the
    // whole window still shows.
    let per = full.len().div_ceil(usize::from(spark_w).max(1)).max(1);
    let series = thin(&full, per);
    let span = t.span.label();
    let title = if wide {
        format!(" {span} · d: {} ", t.span.other().label())
    } else {
        format!(" {span} (d) ")
    };
    frame.render_widget(block(title, theme), area);
    let rows = rows(&series, theme);
    for (i, r) in rows.iter().enumerate() {
        let Ok(dy) = u16::try_from(i) else { break };
        if dy >= inner.height {
            break;
        }
        let y = inner.y + dy;
        let label = if wide { r.label } else { r.short };
        frame.render_widget(
            Paragraph::new(Span::styled(label, theme.dim)),
            Rect::new(inner.x, y, label_w, 1),
        );
        let skip = r.points.len().saturating_sub(usize::from(spark_w));
        let data: Vec<Option<u64>> = r.points.iter().skip(skip).copied().collect();
        // As wide as its points, the value right after the latest.
        let spark_w = u16::try_from(data.len()).unwrap_or(spark_w).min(spark_w);
        frame.render_widget(
            Sparkline::default()
                .data(data)
                .max(r.max.max(1))
                .style(r.style)
                .absent_value_symbol("·")
                .absent_value_style(theme.dim),
            Rect::new(inner.x + label_w, y, spark_w, 1),
        );
        if wide {
            frame.render_widget(
                Paragraph::new(Line::from(Span::styled(format!(" {}", r.value), r.style))),
                Rect::new(inner.x + label_w + spark_w, y, value_w, 1),
            );
        }
    }
    let n = u16::try_from(rows.len()).unwrap_or(0);
    if inner.height > n {
        frame.render_widget(
            Paragraph::new(Span::styled(source_line(state, &shown, wide), theme.dim)),
            Rect::new(inner.x, inner.y + n, inner.width, 1),
        );
    }
}

/// One point for every `per`, the latest known of each group, the groups ending with
/// the series.
fn thin(series: &[Option<TrendPoint>], per: usize) -> Vec<Option<TrendPoint>> {
    if per <= 1 {
        return series.to_vec();
    }
    let mut out: Vec<Option<TrendPoint>> = series
        .rchunks(per)
        .map(|c| c.iter().rev().find_map(|p| *p))
        .collect();
    out.reverse();
    out
}

/// The five sparklines over the series.
fn rows(series: &[Option<TrendPoint>], theme: &Theme) -> Vec<Row> {
    let last = series.iter().rev().find_map(|p| *p);
    let pick = |f: fn(&TrendPoint) -> Option<u64>| -> Vec<Option<u64>> {
        series.iter().map(|p| p.as_ref().and_then(f)).collect()
    };
    let peak = |v: &[Option<u64>]| v.iter().flatten().copied().max().unwrap_or(0);
    let cap = series.iter().flatten().map(|p| p.cap).max().unwrap_or(0);
    let gpus = series.iter().flatten().map(|p| p.gpus).max().unwrap_or(0);
    let count = |v: Option<u64>| v.map_or_else(|| "n/a".to_string(), |n| n.to_string());
    let alloc = pick(|p| Some(p.alloc));
    let used = pick(|p| p.used);
    let compute = pick(|p| Some(p.compute));
    let pending = pick(|p| Some(p.pending));
    let idle = pick(|p| p.idle);
    let (pending_max, idle_max) = (peak(&pending), peak(&idle));
    vec![
        Row {
            label: "mem alloc",
            short: "alloc",
            value: last.map_or_else(|| "n/a".into(), |p| short_bytes(Bytes(p.alloc))),
            points: alloc,
            max: cap,
            style: theme.allocated,
        },
        Row {
            label: "mem used",
            short: "used",
            value: last
                .and_then(|p| p.used)
                .map_or_else(|| "n/a".into(), |u| short_bytes(Bytes(u))),
            points: used,
            max: cap,
            style: theme.used,
        },
        Row {
            label: "compute",
            short: "comp",
            value: last.map_or_else(
                || "n/a".into(),
                |p| format!("{:.2} GPUs", p.compute as f64 / f64::from(UNITS_PER_DEVICE)),
            ),
            points: compute,
            max: gpus * u64::from(UNITS_PER_DEVICE),
            style: theme.allocated,
        },
        Row {
            label: "pending",
            short: "pend",
            value: count(last.map(|p| p.pending)),
            points: pending,
            max: pending_max,
            style: theme.pending,
        },
        Row {
            label: "idle GPUs",
            short: "idle",
            value: count(last.and_then(|p| p.idle)),
            points: idle,
            max: idle_max,
            style: theme.idle,
        },
    ]
}

/// Where the points come from: the recorded history, or only what this console saw
/// (in a word when narrow).
fn source_line(state: &State, shown: &[usize], wide: bool) -> String {
    let states: Vec<&TrendHistory> = shown
        .iter()
        .filter_map(|i| state.trends.sources.get(*i).map(|s| &s.history))
        .collect();
    if let Some(TrendHistory::Failed(e)) =
        states.iter().find(|h| matches!(h, TrendHistory::Failed(_)))
    {
        return if wide {
            format!("history unreadable: {e}")
        } else {
            "history unreadable".to_string()
        };
    }
    let (long, short) = if states.iter().any(|h| **h == TrendHistory::Waiting) {
        ("reading the recorded history", "reading history")
    } else if states.iter().any(|h| **h == TrendHistory::Recorded) {
        ("from the recorded history", "recorded")
    } else {
        (
            "no recorded history: since the console started",
            "since started",
        )
    };
    if wide { long } else { short }.to_string()
}
