//! The GPU detail's charts: utilization, memory used against memory reserved by claims,
//! and power, over the last hour live or the hour around the time shown when rewound,
//! claim starts and ends marked. Without a recorded history, the snapshot's short
//! in-memory history is drawn as sparklines.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::symbols::Marker;
use ratatui::text::Span;
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Sparkline};

use super::common::{block, short_bytes};
use crate::console::state::{Charts, State};
use crate::console::theme::Theme;
use crate::console::time::short_time;
use crate::snapshot::{DeviceTelemetry, DeviceView};
use crate::sources::history::Sample;
use crate::units::Bytes;

/// The charts of the device shown, in `area`.
pub(super) fn draw(
    frame: &mut Frame,
    area: Rect,
    state: &State,
    d: &DeviceView,
    t: Option<&DeviceTelemetry>,
    theme: &Theme,
) {
    if let Some(c) = state.charts.as_ref().filter(|c| !c.samples.is_empty()) {
        recorded(frame, area, state, c, d, theme);
    } else {
        let why = match &state.charts {
            Some(c) if c.loading => "loading history",
            Some(c) if c.error.is_some() => "history unreadable",
            Some(c) if c.no_history => "no history: recent samples",
            _ => "recent samples",
        };
        sparklines(frame, area, d, t, why, theme);
    }
}

/// The three charts over the recorded window.
fn recorded(
    frame: &mut Frame,
    area: Rect,
    state: &State,
    c: &Charts,
    d: &DeviceView,
    theme: &Theme,
) {
    let [cu, cm, cp] = Layout::horizontal([
        Constraint::Ratio(1, 3),
        Constraint::Ratio(1, 3),
        Constraint::Ratio(1, 3),
    ])
    .areas(area);
    let x = |s: &Sample| s.at.millis_since(c.key.from) as f64;
    let span = c.key.to.millis_since(c.key.from).max(1) as f64;
    let util: Vec<(f64, f64)> = c
        .samples
        .iter()
        .filter_map(|s| Some((x(s), f64::from(s.utilization_gpu?))))
        .collect();
    let gib = |b: Bytes| b.0 as f64 / f64::from(1u32 << 30);
    let used: Vec<(f64, f64)> = c
        .samples
        .iter()
        .filter_map(|s| Some((x(s), gib(s.memory_used?))))
        .collect();
    let reserved: Vec<(f64, f64)> = c
        .samples
        .iter()
        .map(|s| (x(s), gib(s.memory_reserved)))
        .collect();
    let power: Vec<(f64, f64)> = c
        .samples
        .iter()
        .filter_map(|s| Some((x(s), f64::from(s.power_mw?) / 1000.0)))
        .collect();
    let mem_max = d
        .memory_capacity
        .map(gib)
        .into_iter()
        .chain(used.iter().chain(&reserved).map(|p| p.1))
        .fold(1.0_f64, f64::max);
    let power_max = power.iter().map(|p| p.1).fold(1.0_f64, f64::max) * 1.1;
    let (marks, now_x) = vertical_marks(state, c);
    // The readings at the time shown (live: the latest).
    let last = c
        .samples
        .iter()
        .rev()
        .find(|s| s.at <= state.now)
        .or(c.samples.last());
    let labels = [
        short_time(c.key.from, state.now, &state.zone),
        short_time(c.key.to, state.now, &state.zone),
    ];
    let panes = [
        (
            cu,
            format!(
                " util {} ",
                last.and_then(|s| s.utilization_gpu)
                    .map_or_else(|| "n/a".into(), |u| format!("{u}%"))
            ),
            vec![(util, theme.used)],
            100.0,
        ),
        (
            cm,
            format!(
                " mem used {} / claims {} ",
                last.and_then(|s| s.memory_used)
                    .map_or_else(|| "n/a".into(), short_bytes),
                last.map_or_else(|| "n/a".into(), |s| short_bytes(s.memory_reserved)),
            ),
            vec![(reserved, theme.allocated), (used, theme.used)],
            mem_max,
        ),
        (
            cp,
            format!(
                " power {} ",
                last.and_then(|s| s.power_mw)
                    .map_or_else(|| "n/a".into(), |p| format!("{} W", p / 1000))
            ),
            vec![(power, theme.accent)],
            power_max,
        ),
    ];
    for (pane, title, series, max) in panes {
        let window = Window {
            span,
            labels: &labels,
            marks: &marks,
            now_x,
        };
        chart_pane(frame, pane, title, &series, max, &window, theme);
    }
}

/// A vertical line's two points and whether it marks a claim's start (else its end).
type Mark = (Vec<(f64, f64)>, bool);

/// Claim starts and ends as vertical lines of height 1, and where the time shown falls in the
/// window.
fn vertical_marks(state: &State, c: &Charts) -> (Vec<Mark>, Option<f64>) {
    let marks = c
        .claim_marks()
        .into_iter()
        .map(|(at, up)| {
            let mx = at.millis_since(c.key.from) as f64;
            (vec![(mx, 0.0), (mx, 1.0)], up)
        })
        .collect();
    let now_x = (state.now >= c.key.from && state.now <= c.key.to)
        .then(|| state.now.millis_since(c.key.from) as f64);
    (marks, now_x)
}

/// What every pane of the recorded charts shares: the window's length in ms, its two time
/// labels, the claim marks (starts `true`) and where the time shown falls.
struct Window<'a> {
    span: f64,
    labels: &'a [String; 2],
    marks: &'a [Mark],
    now_x: Option<f64>,
}

/// One chart: the claim marks and the time shown as vertical lines under the series, on a
/// y axis from 0 to `max`.
fn chart_pane(
    frame: &mut Frame,
    pane: Rect,
    title: String,
    series: &[(Vec<(f64, f64)>, Style)],
    max: f64,
    w: &Window,
    theme: &Theme,
) {
    let scaled_marks: Vec<(Vec<(f64, f64)>, Style)> = w
        .marks
        .iter()
        .map(|(pts, up)| {
            (
                pts.iter().map(|(x, y)| (*x, y * max)).collect(),
                if *up { theme.ok } else { theme.warn },
            )
        })
        .chain(
            w.now_x
                .map(|nx| (vec![(nx, 0.0), (nx, max)], theme.critical)),
        )
        .collect();
    let mut sets: Vec<Dataset> = scaled_marks
        .iter()
        .map(|(pts, style)| {
            Dataset::default()
                .graph_type(GraphType::Line)
                .marker(Marker::Braille)
                .style(*style)
                .data(pts)
        })
        .collect();
    sets.extend(series.iter().map(|(pts, style)| {
        Dataset::default()
            .graph_type(GraphType::Line)
            .marker(Marker::Braille)
            .style(*style)
            .data(pts)
    }));
    let x_axis = Axis::default().bounds([0.0, w.span]).style(theme.dim);
    let x_axis = if pane.height >= 6 && pane.width >= 24 {
        x_axis.labels(w.labels.iter().map(|l| Span::styled(l.clone(), theme.dim)))
    } else {
        x_axis
    };
    frame.render_widget(
        Chart::new(sets)
            .block(block(title, theme))
            .x_axis(x_axis)
            .y_axis(Axis::default().bounds([0.0, max]).style(theme.dim)),
        pane,
    );
}

/// Utilization and memory-use sparklines from the snapshot's own short history.
fn sparklines(
    frame: &mut Frame,
    spark: Rect,
    d: &DeviceView,
    t: Option<&DeviceTelemetry>,
    why: &str,
    theme: &Theme,
) {
    let [su, sm] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(spark);
    let util: Vec<u64> = t
        .map(|t| {
            t.history_utilization
                .iter()
                .map(|u| u64::from(*u))
                .collect()
        })
        .unwrap_or_default();
    let mem: Vec<u64> = t.map(|t| t.history_memory_used.clone()).unwrap_or_default();
    let tail = |v: Vec<u64>, w: u16| -> Vec<u64> {
        let w = usize::from(w.saturating_sub(2));
        let skip = v.len().saturating_sub(w);
        v.into_iter().skip(skip).collect()
    };
    frame.render_widget(
        Sparkline::default()
            .data(tail(util, su.width))
            .max(100)
            .style(theme.used)
            .block(block(format!(" utilization % ({why}) "), theme)),
        su,
    );
    frame.render_widget(
        Sparkline::default()
            .data(tail(mem, sm.width))
            .max(d.memory_capacity.map_or(1, |b| b.0.max(1)))
            .style(theme.allocated)
            .block(block(" memory used ", theme)),
        sm,
    );
}
