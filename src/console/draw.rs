//! Drawing: reads the state and the theme, never the clock or the network. Only the
//! rows in view are built, so a fleet of thousands of devices draws in the same time as
//! a screenful.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Clear, Paragraph, Row, Sparkline, Table, Wrap};

use crate::clock::Timestamp;
use crate::placement::Health;
use crate::snapshot::{ClaimState, DeviceView};
use crate::units::{Bytes, Units};

use super::keymap::{Context, KeyAction};
use super::state::{FormField, FormStage, Mode, SourceHealth, SourceSlot, State, View};
use super::theme::Theme;

/// Smallest size the views are drawn at; below it a notice is shown.
pub const MIN_SIZE: (u16, u16) = (40, 8);

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, state: &State, theme: &Theme) {
    let area = frame.area();
    frame.render_widget(Block::default().style(theme.text), area);
    if area.width < MIN_SIZE.0 || area.height < MIN_SIZE.1 {
        let p = Paragraph::new(format!(
            "gpuboard: terminal too small ({}x{}); needs {}x{}",
            area.width, area.height, MIN_SIZE.0, MIN_SIZE.1
        ))
        .style(theme.warn)
        .wrap(Wrap { trim: true });
        frame.render_widget(p, area);
        return;
    }
    let hints = area.height >= 12;
    let [tabs, body, hint, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(u16::from(hints)),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_tabs(frame, tabs, state, theme);
    match state.view {
        View::Overview => overview(frame, body, state, theme),
        View::Gpus => gpus(frame, body, state, theme),
        View::Claims => claims(frame, body, state, theme),
        View::Ledger => fairshare(frame, body, state, theme),
        View::Detail => detail(frame, body, state, theme),
        View::Events => events(frame, body, state, theme),
    }
    if hints {
        draw_hints(frame, hint, state, theme);
    }
    draw_status(frame, status, state, theme);
    match &state.mode {
        Mode::Help => help(frame, area, state, theme),
        Mode::Form(_) => form(frame, area, state, theme),
        Mode::Confirm(_) => confirm(frame, area, state, theme),
        Mode::Move(_) => move_pick(frame, area, state, theme),
        _ => {}
    }
}

// ---------- formatting ----------

/// Memory in a narrow column: `39.5G`, `512M`, `80G`.
pub fn short_bytes(b: Bytes) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    let v = b.0 as f64;
    if b.0 == 0 {
        "0".to_string()
    } else if v >= 1024.0 * GIB {
        format!("{:.1}T", v / (1024.0 * GIB))
    } else if v >= 100.0 * GIB || b.0.is_multiple_of(1 << 30) {
        format!("{:.0}G", v / GIB)
    } else if v >= GIB {
        format!("{:.1}G", v / GIB)
    } else {
        format!("{:.0}M", v / MIB)
    }
}

/// A duration in its largest unit: `12s`, `5m`, `3h`, `2d`.
pub fn short_age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// A fraction of a GPU as a percentage.
fn pct(u: Units) -> String {
    format!("{:.0}%", u.as_fraction() * 100.0)
}

/// `HH:MM:SS` (UTC) of a timestamp.
pub fn clock_time(t: Timestamp) -> String {
    let s = (t.0 / 1000) % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

fn na<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| x.to_string())
}

/// The source's health as a short badge and its style.
pub fn badge(slot: &SourceSlot, now: Timestamp, refresh: u64, theme: &Theme) -> (String, Style) {
    match slot.health(now, refresh) {
        SourceHealth::Loading => ("… loading".to_string(), theme.dim),
        SourceHealth::Ok => ("● live".to_string(), theme.ok),
        SourceHealth::Stale { since } => (
            format!("◌ STALE {}", short_age(now.millis_since(since))),
            theme.stale,
        ),
        SourceHealth::Down { since, .. } => (
            format!("✖ DOWN {}", short_age(now.millis_since(since))),
            theme.stale,
        ),
    }
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

/// Device flags: what an operator should notice about it.
pub fn device_flags(d: &DeviceView) -> Vec<&'static str> {
    let mut f = Vec::new();
    if d.cordoned {
        f.push("cordon");
    }
    match &d.health {
        Health::Healthy => {}
        Health::Unhealthy(_) => f.push("unhealthy"),
        Health::Lost => f.push("lost"),
    }
    if d.telemetry.as_ref().is_some_and(|t| t.lost) {
        f.push("lost");
    }
    if d.memory_capacity.is_none() {
        f.push("no-mem-info");
    }
    if allocated_but_idle(d) {
        f.push("idle");
    }
    if d.unclaimed_memory.is_some_and(|b| b.0 > 0) {
        f.push("unclaimed");
    }
    f
}

/// Memory is reserved but the GPU has done nothing for the whole recent history.
pub fn allocated_but_idle(d: &DeviceView) -> bool {
    let Some(t) = &d.telemetry else { return false };
    if d.memory_allocated.0 == 0 {
        return false;
    }
    let recent: Vec<u32> = t
        .history_utilization
        .iter()
        .rev()
        .take(30)
        .copied()
        .collect();
    t.utilization_gpu == Some(0) && recent.iter().all(|u| *u == 0)
}

fn block<'a>(title: impl Into<Line<'a>>, theme: &Theme) -> Block<'a> {
    Block::bordered()
        .title(title.into().style(theme.title))
        .border_style(theme.border)
}

/// First row to show so that `selected` is visible in `height` rows, starting from `offset`.
fn window(selected: usize, offset: usize, height: usize, len: usize) -> usize {
    let height = height.max(1);
    let mut off = offset.min(len.saturating_sub(1));
    if selected < off {
        off = selected;
    } else if selected >= off + height {
        off = selected + 1 - height;
    }
    off
}

fn title_with(state: &State, name: &str, count: usize, theme: &Theme) -> Line<'static> {
    let mut spans = vec![Span::styled(format!(" {name} ({count}) "), theme.title)];
    let cols = state.view.sort_columns();
    if let Some(c) = cols.get(state.sort[state.view.position()]) {
        let arrow = if state.sort_reverse[state.view.position()] {
            "↑"
        } else {
            "↓"
        };
        spans.push(Span::styled(format!("sort:{c}{arrow} "), theme.dim));
    }
    if !state.filter.is_empty() {
        spans.push(Span::styled(
            format!("filter:{} ", state.filter),
            theme.accent,
        ));
    }
    Line::from(spans)
}

// ---------- frame parts ----------

fn draw_tabs(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let mut spans = vec![Span::styled(" gpuboard ", theme.title)];
    for (i, v) in View::ALL.iter().enumerate() {
        let style = if *v == state.view {
            theme.tab_active
        } else {
            theme.tab
        };
        spans.push(Span::styled(format!(" {} {} ", i + 1, v.title()), style));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn draw_hints(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let text = match &state.mode {
        Mode::Filter(t) => {
            let line = Line::from(vec![
                Span::styled("/", theme.accent),
                Span::styled(t.clone(), theme.text),
                Span::styled("▏ Enter keep · Esc clear", theme.dim),
            ]);
            frame.render_widget(Paragraph::new(line), area);
            return;
        }
        Mode::Command(t) => {
            let line = Line::from(vec![
                Span::styled(":", theme.accent),
                Span::styled(t.clone(), theme.text),
                Span::styled("▏ Tab complete · Enter run · Esc cancel", theme.dim),
            ]);
            frame.render_widget(Paragraph::new(line), area);
            return;
        }
        _ => {
            let mut acts = vec![KeyAction::Help, KeyAction::Filter, KeyAction::Command];
            match state.view {
                View::Gpus => acts.extend([KeyAction::Open, KeyAction::Claim, KeyAction::Cordon]),
                View::Claims => acts.extend([
                    KeyAction::Claim,
                    KeyAction::Release,
                    KeyAction::Move,
                    KeyAction::Open,
                ]),
                View::Ledger => acts.push(KeyAction::ClearBackoff),
                _ => {}
            }
            acts.extend([KeyAction::SortNext, KeyAction::Freeze, KeyAction::Quit]);
            acts.into_iter()
                .filter(|a| !(state.readonly && a.mutates()))
                .map(|a| format!("{} {}", state.keymap.first_key(a), a.name()))
                .collect::<Vec<_>>()
                .join(" · ")
        }
    };
    frame.render_widget(Paragraph::new(Span::styled(text, theme.dim)), area);
}

fn draw_status(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let mut spans = Vec::new();
    let shown = match state.source_filter.and_then(|i| state.sources.get(i)) {
        Some(s) => s.name.clone(),
        None => format!("all {}", state.sources.len()),
    };
    spans.push(Span::styled(format!("[{shown}] "), theme.accent));
    for s in state.shown_sources().map(|(_, s)| s) {
        let (b, style) = badge(s, state.now, state.refresh_ms, theme);
        spans.push(Span::styled(format!("{} ", s.name), theme.status));
        spans.push(Span::styled(b, style));
        spans.push(Span::raw(" "));
    }
    if state.frozen {
        spans.push(Span::styled(" FROZEN ", theme.stale));
        spans.push(Span::raw(" "));
    }
    if state.readonly {
        spans.push(Span::styled("READ-ONLY ", theme.warn));
    }
    if let Some(f) = &state.flash {
        let style = if f.error {
            theme.flash_error
        } else {
            theme.flash_info
        };
        spans.push(Span::styled(f.text.clone(), style));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)).style(theme.status), area);
}

// ---------- views ----------

fn overview(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let mut gpus = 0usize;
    let (mut cordoned, mut bad) = (0usize, 0usize);
    let (mut cap, mut alloc, mut used, mut free, mut stranded) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut used_known = false;
    let mut compute = 0u64;
    let mut unclaimed = 0u64;
    let mut idle_devs = 0usize;
    let (mut placed, mut pending, mut over, mut idle) = (0usize, 0usize, 0usize, 0usize);
    for (_, s) in state.shown_sources() {
        let Some(d) = &s.data else { continue };
        for (_, dev) in d.devices() {
            gpus += 1;
            cordoned += usize::from(dev.cordoned);
            bad += usize::from(dev.health != Health::Healthy);
            cap += dev.memory_capacity.unwrap_or_default().0;
            alloc += dev.memory_allocated.0;
            free += dev.memory_free.0;
            compute += u64::from(dev.compute_allocated.0);
            if let Some(u) = dev.telemetry.as_ref().and_then(|t| t.memory_used) {
                used += u.0;
                used_known = true;
            }
            unclaimed += dev.unclaimed_memory.unwrap_or_default().0;
            idle_devs += usize::from(allocated_but_idle(dev));
            // Free memory nobody can claim: no compute or slots left, or cordoned.
            if dev.cordoned || dev.compute_free.0 == 0 || dev.slots_free.0 == 0 {
                stranded += dev.memory_free.0;
            }
        }
        for c in &d.claims {
            match c.state {
                ClaimState::Placed => placed += 1,
                ClaimState::Pending => pending += 1,
            }
            over += usize::from(c.over_limit);
            idle += usize::from(c.idle);
        }
    }
    let pct_of = |a: u64, b: u64| {
        if b == 0 {
            0.0
        } else {
            a as f64 * 100.0 / b as f64
        }
    };
    let [top, bottom] = Layout::vertical([Constraint::Length(9), Constraint::Min(3)]).areas(area);
    let kv = |k: &str, v: String, style: Style| {
        Line::from(vec![
            Span::styled(format!("{k:<18}"), theme.dim),
            Span::styled(v, style),
        ])
    };
    let lines = vec![
        kv(
            "GPUs",
            format!("{gpus} ({cordoned} cordoned, {bad} unhealthy or lost)"),
            theme.text,
        ),
        kv(
            "Memory allocated",
            format!(
                "{} of {} ({:.0}%)",
                short_bytes(Bytes(alloc)),
                short_bytes(Bytes(cap)),
                pct_of(alloc, cap)
            ),
            theme.allocated,
        ),
        kv(
            "Memory used",
            if used_known {
                format!("{} ({:.0}%)", short_bytes(Bytes(used)), pct_of(used, cap))
            } else {
                "n/a (no telemetry)".to_string()
            },
            theme.used,
        ),
        kv(
            "Memory free",
            format!(
                "{} ({} stranded)",
                short_bytes(Bytes(free)),
                short_bytes(Bytes(stranded))
            ),
            theme.free,
        ),
        kv(
            "Compute allocated",
            format!(
                "{:.2} of {gpus} GPUs",
                compute as f64 / f64::from(crate::units::UNITS_PER_DEVICE)
            ),
            theme.allocated,
        ),
        kv(
            "Claims",
            format!("{placed} placed, {pending} pending"),
            if pending > 0 {
                theme.pending
            } else {
                theme.text
            },
        ),
        kv(
            "Over limit",
            format!("{over} claims"),
            if over > 0 {
                theme.over_limit
            } else {
                theme.text
            },
        ),
        kv(
            "Idle",
            format!("{idle} claims, {idle_devs} GPUs allocated but idle"),
            if idle > 0 { theme.idle } else { theme.text },
        ),
        kv(
            "Unclaimed use",
            short_bytes(Bytes(unclaimed)),
            if unclaimed > 0 {
                theme.rogue
            } else {
                theme.text
            },
        ),
    ];
    frame.render_widget(Paragraph::new(lines), top);
    let header =
        Row::new(["SOURCE", "KIND", "HEALTH", "GPUS", "CLAIMS", "NOTE"]).style(theme.header);
    let rows: Vec<Row> = state
        .sources
        .iter()
        .map(|s| {
            let (b, style) = badge(s, state.now, state.refresh_ms, theme);
            let (g, c) = s
                .data
                .as_ref()
                .map_or((0, 0), |d| (d.devices().count(), d.claims.len()));
            let note = s
                .error
                .clone()
                .or_else(|| s.note.clone())
                .or_else(|| {
                    s.data
                        .as_ref()
                        .and_then(|d| d.endpoint.telemetry_note.clone())
                })
                .unwrap_or_default();
            Row::new(vec![
                Cell::from(s.name.clone()),
                Cell::from(s.kind.clone()),
                Cell::from(Span::styled(b, style)),
                Cell::from(g.to_string()),
                Cell::from(c.to_string()),
                Cell::from(Span::styled(
                    note,
                    if s.error.is_some() {
                        theme.critical
                    } else {
                        theme.dim
                    },
                )),
            ])
        })
        .collect();
    let t = Table::new(
        rows,
        [
            Constraint::Length(12),
            Constraint::Length(9),
            Constraint::Length(12),
            Constraint::Length(5),
            Constraint::Length(7),
            Constraint::Fill(1),
        ],
    )
    .header(header)
    .block(block(" Sources ", theme));
    frame.render_widget(t, bottom);
    // A long note (no GPUs here, how to see the demo) wraps below the table when it fits.
    let notes: Vec<String> = state
        .sources
        .iter()
        .filter_map(|s| s.note.clone().map(|n| format!("{}: {n}", s.name)))
        .collect();
    let need = u16::try_from(state.sources.len())
        .unwrap_or(u16::MAX)
        .saturating_add(3);
    if !notes.is_empty() && bottom.height > need + 1 {
        let r = Rect {
            x: bottom.x + 1,
            y: bottom.y + need,
            width: bottom.width.saturating_sub(2),
            height: bottom.height.saturating_sub(need + 1),
        };
        frame.render_widget(
            Paragraph::new(notes.join("\n"))
                .style(theme.warn)
                .wrap(Wrap { trim: true }),
            r,
        );
    }
}

fn gpus(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let wide = area.width >= 140;
    let multi = state.shown_sources().count() > 1;
    let height = usize::from(area.height.saturating_sub(3));
    let cur = state.cursor[View::Gpus.position()];
    let len = state.rows_devices.len();
    let off = window(cur.selected, cur.offset, height, len);
    let bar_w = if wide { 16 } else { 8 };
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
    let rows: Vec<Row> = state
        .rows_devices
        .iter()
        .enumerate()
        .skip(off)
        .take(height)
        .filter_map(|(i, k)| {
            let (slot, n, d) = state.device(*k)?;
            let stale = slot.is_stale(state.now, state.refresh_ms);
            let t = d.telemetry.as_ref();
            let used = t.and_then(|t| t.memory_used);
            let flags = device_flags(d);
            // A telemetry-only source knows nothing of allocation: show that, not zeros.
            let sched = !super::state::TELEMETRY_KINDS.contains(&slot.kind.as_str());
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
            Some(list_row(cells, i == cur.selected, stale, theme))
        })
        .collect();
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
    let empty = len == 0;
    let t = Table::new(rows, widths)
        .header(Row::new(header).style(theme.header))
        .column_spacing(1)
        .block(block(title_with(state, "GPUs", len, theme), theme));
    frame.render_widget(t, area);
    if empty {
        empty_note(frame, area, state, theme, "no GPUs");
    }
}

fn empty_note(frame: &mut Frame, area: Rect, state: &State, theme: &Theme, what: &str) {
    let mut lines = vec![Line::styled(
        if state.filter.is_empty() {
            what.to_string()
        } else {
            format!("{what} match the filter `{}`", state.filter)
        },
        theme.dim,
    )];
    for (_, s) in state.shown_sources() {
        if let Some(n) = s.note.clone().or_else(|| {
            s.data
                .as_ref()
                .and_then(|d| d.endpoint.telemetry_note.clone())
        }) {
            lines.push(Line::styled(format!("{}: {n}", s.name), theme.warn));
        }
        if let Some(e) = &s.error {
            lines.push(Line::styled(format!("{}: {e}", s.name), theme.critical));
        }
    }
    let inner = Rect {
        x: area.x + 2,
        y: area.y + 2,
        width: area.width.saturating_sub(4),
        height: area.height.saturating_sub(3),
    };
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }), inner);
}

/// `NVIDIA A100-SXM4-40GB` -> `A100-SXM4-40GB`.
/// A table row: the selection highlighted, a stale source's rows dimmed.
fn list_row<'a>(cells: Vec<Cell<'a>>, selected: bool, stale: bool, theme: &Theme) -> Row<'a> {
    let row = Row::new(cells);
    if selected {
        row.style(theme.selection)
    } else if stale {
        row.style(theme.dim)
    } else {
        row
    }
}

fn short_model(m: &str) -> String {
    m.strip_prefix("NVIDIA ").unwrap_or(m).to_string()
}

fn claims(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let wide = area.width >= 140;
    let multi = state.shown_sources().count() > 1;
    let detail_h = if area.height >= 16 { 5 } else { 0 };
    let [table_area, info] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(detail_h)]).areas(area);
    let height = usize::from(table_area.height.saturating_sub(3));
    let cur = state.cursor[View::Claims.position()];
    let len = state.rows_claims.len();
    let off = window(cur.selected, cur.offset, height, len);
    let mut header = Vec::new();
    if multi {
        header.push("SRC");
    }
    header.extend(["ID", "STATE", "PROJECT"]);
    if wide {
        header.push("HOLDER");
    }
    header.extend(["PLACE", "RESERVED", "USED"]);
    if wide {
        header.extend(["FRACTION", "FORM"]);
    }
    header.extend(["LEASE", "AGE"]);
    let rows: Vec<Row> = state
        .rows_claims
        .iter()
        .enumerate()
        .skip(off)
        .take(height)
        .filter_map(|(i, k)| {
            let (slot, c) = state.claim(*k)?;
            let stale = slot.is_stale(state.now, state.refresh_ms);
            let mut cells: Vec<Cell> = Vec::new();
            if multi {
                cells.push(Cell::from(slot.name.clone()));
            }
            cells.push(Cell::from(c.id.to_string()));
            cells.push(match c.state {
                ClaimState::Placed if c.idle => Cell::from(Span::styled("idle", theme.idle)),
                ClaimState::Placed => Cell::from(Span::styled("placed", theme.ok)),
                ClaimState::Pending if c.infeasible => {
                    Cell::from(Span::styled("never", theme.critical))
                }
                ClaimState::Pending => Cell::from(Span::styled("pending", theme.pending)),
            });
            cells.push(Cell::from(c.project.clone()));
            if wide {
                cells.push(Cell::from(c.holder.clone().unwrap_or_else(|| "-".into())));
            }
            cells.push(Cell::from(crate::sources::endpoint::place(c)));
            cells.push(Cell::from(Span::styled(
                short_bytes(c.memory_reserved),
                theme.allocated,
            )));
            cells.push(match c.memory_used {
                Some(u) if c.over_limit => Cell::from(Span::styled(
                    format!("{}!", short_bytes(u)),
                    theme.over_limit,
                )),
                Some(u) => Cell::from(Span::styled(short_bytes(u), theme.used)),
                None => Cell::from(Span::styled("n/a", theme.dim)),
            });
            if wide {
                cells.push(Cell::from(format!("{} GPU", c.compute_reserved)));
                cells.push(Cell::from(c.form.clone()));
            }
            cells.push(Cell::from(c.lease_expires_at.map_or_else(
                || "-".into(),
                |t| {
                    if t <= state.now {
                        "expired".to_string()
                    } else {
                        short_age(t.millis_since(state.now))
                    }
                },
            )));
            // Engines that give no start time (Ray actors) leave it at 0: unknown, not 55 years.
            cells.push(Cell::from(if c.created_at.0 == 0 {
                "-".to_string()
            } else {
                short_age(state.now.millis_since(c.created_at))
            }));
            Some(list_row(cells, i == cur.selected, stale, theme))
        })
        .collect();
    let mut widths = Vec::new();
    if multi {
        widths.push(Constraint::Length(8));
    }
    widths.extend([
        Constraint::Length(6),
        Constraint::Length(7),
        Constraint::Length(10),
    ]);
    if wide {
        widths.push(Constraint::Length(10));
    }
    widths.extend([
        Constraint::Length(if wide { 20 } else { 16 }),
        Constraint::Length(8),
        Constraint::Length(7),
    ]);
    if wide {
        widths.extend([Constraint::Length(10), Constraint::Fill(1)]);
    }
    widths.extend([Constraint::Length(7), Constraint::Length(5)]);
    let t = Table::new(rows, widths)
        .header(Row::new(header).style(theme.header))
        .block(block(title_with(state, "Claims", len, theme), theme));
    frame.render_widget(t, table_area);
    if len == 0 {
        empty_note(frame, table_area, state, theme, "no claims");
    }
    if detail_h > 0
        && let Some((slot, c)) = state.selected_claim().and_then(|k| state.claim(k))
    {
        let mut lines = vec![Line::from(vec![
            Span::styled(format!("claim {} ", c.id), theme.title),
            Span::styled(format!("on {}: ", slot.name), theme.dim),
            Span::styled(c.form.clone(), theme.text),
        ])];
        if c.state == ClaimState::Pending {
            if c.pending_reasons.is_empty() {
                lines.push(Line::styled(
                    "waiting; no reason recorded yet",
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
}

fn fairshare(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let height = usize::from(area.height.saturating_sub(3));
    let cur = state.cursor[View::Ledger.position()];
    let multi = state.shown_sources().count() > 1;
    let mut rows = Vec::new();
    let mut selected_line = 0usize;
    for (i, k) in state.rows_projects.iter().enumerate() {
        let Some((slot, p)) = state.project(*k) else {
            continue;
        };
        if i == cur.selected {
            selected_line = rows.len();
        }
        let sel = i == cur.selected;
        let first = |r: Option<&crate::snapshot::ProjectResourceView>| {
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
                Cell::from(format!("{:.0}", p.overall_debt)),
            ]);
            cells.extend(resource_cells(r, state.now, theme));
            cells
        };
        let mut row = Row::new(first(p.resources.first()));
        if sel {
            row = row.style(theme.selection);
        }
        rows.push(row);
        for r in p.resources.iter().skip(1) {
            let mut cells: Vec<Cell> = Vec::new();
            if multi {
                cells.push(Cell::from(""));
            }
            cells.extend((0..5).map(|_| Cell::from("")));
            cells.extend(resource_cells(Some(r), state.now, theme));
            rows.push(list_row(cells, sel, false, theme));
        }
    }
    let len = rows.len();
    let off = window(selected_line, cur.offset, height, len);
    let rows: Vec<Row> = rows.into_iter().skip(off).take(height).collect();
    let mut header = Vec::new();
    if multi {
        header.push("SRC");
    }
    header.extend([
        "PROJECT",
        "SHARE",
        "RUN",
        "PEND",
        "DEBT",
        "RESOURCE",
        "DEBT",
        "TARGET",
        "USED",
        "D",
        "BACKOFF",
        "WHY NOT NOW",
    ]);
    let mut widths = Vec::new();
    if multi {
        widths.push(Constraint::Length(8));
    }
    widths.extend([
        Constraint::Length(10),
        Constraint::Length(5),
        Constraint::Length(4),
        Constraint::Length(4),
        Constraint::Length(7),
        // Wide enough for `A100-SXM4-40GB` and `H100 80GB HBM3`: the model tells types apart.
        Constraint::Length(14),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Length(5),
        Constraint::Length(1),
        Constraint::Length(10),
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

fn resource_cells(
    r: Option<&crate::snapshot::ProjectResourceView>,
    now: Timestamp,
    theme: &Theme,
) -> Vec<Cell<'static>> {
    let Some(r) = r else {
        return (0..7).map(|_| Cell::from("")).collect();
    };
    let backoff = match (r.backoff_until, r.backoff_interval_s) {
        (Some(t), i) if t > now => Cell::from(Span::styled(
            format!(
                "{}/{}",
                short_age(t.millis_since(now)),
                i.map_or_else(|| "?".into(), |s| short_age(s * 1000))
            ),
            theme.warn,
        )),
        _ => Cell::from("-"),
    };
    vec![
        // `gpu:NVIDIA A100-SXM4-80GB` -> `A100-SXM4-80GB`: the model is what tells types apart.
        Cell::from(
            r.resource
                .strip_prefix("gpu:")
                .map_or_else(|| r.resource.clone(), short_model),
        ),
        Cell::from(Span::styled(
            format!("{:.0}", r.debt),
            if r.debt < 0.0 { theme.warn } else { theme.text },
        )),
        Cell::from(format!("{:.2}", r.target)),
        Cell::from(format!("{:.2}", r.used)),
        Cell::from(if r.eligible { "D" } else { "-" }),
        backoff,
        Cell::from(Span::styled(
            r.reason.clone().unwrap_or_default(),
            theme.dim,
        )),
    ]
}

fn detail(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let Some((src, n, d)) = state.detail_device() else {
        let p = Paragraph::new(
            "no GPU selected: pick one in the GPUs view (or a claim in Claims) and press Enter",
        )
        .style(theme.dim)
        .wrap(Wrap { trim: true })
        .block(block(" GPU detail ", theme));
        frame.render_widget(p, area);
        return;
    };
    let slot = state.sources.get(src);
    let t = d.telemetry.as_ref();
    let title = format!(
        " {}:{} {} {} ",
        n.name,
        d.index,
        d.model,
        slot.map_or("", |s| s.name.as_str())
    );
    let outer = block(title, theme);
    let inner = outer.inner(area);
    frame.render_widget(outer, area);
    let [info, spark, procs] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Length(if inner.height >= 14 { 6 } else { 2 }),
        Constraint::Min(1),
    ])
    .areas(inner);
    let used = t.and_then(|t| t.memory_used);
    let lines = vec![
        Line::from(vec![
            Span::styled("memory ", theme.dim),
            Span::styled(
                format!("alloc {} ", short_bytes(d.memory_allocated)),
                theme.allocated,
            ),
            Span::styled(
                format!("used {} ", used.map_or_else(|| "n/a".into(), short_bytes)),
                theme.used,
            ),
            Span::styled(format!("free {} ", short_bytes(d.memory_free)), theme.free),
            Span::styled(
                format!(
                    "of {} (driver total {}, reserved {})",
                    d.memory_capacity
                        .map_or_else(|| "unknown".into(), short_bytes),
                    na(t.and_then(|t| t.memory_total).map(short_bytes)),
                    na(t.and_then(|t| t.memory_reserved).map(short_bytes)),
                ),
                theme.dim,
            ),
        ]),
        Line::from(vec![
            Span::styled("compute ", theme.dim),
            Span::styled(
                format!("alloc {} GPU free {} ", d.compute_allocated, d.compute_free),
                theme.allocated,
            ),
            Span::styled(
                format!(
                    "slots {}/100 sharers {} ",
                    d.slots_allocated,
                    d.holders.len()
                ),
                theme.text,
            ),
            Span::styled(device_flags(d).join(","), theme.warn),
        ]),
        Line::styled(
            format!(
                "util {}  mem-util {}  temp {}  power {}/{}  sm {}  mem {}  fan {}  ecc {}  mig {}",
                na(t.and_then(|t| t.utilization_gpu).map(|v| format!("{v}%"))),
                na(t.and_then(|t| t.utilization_memory)
                    .map(|v| format!("{v}%"))),
                na(t.and_then(|t| t.temperature_c).map(|v| format!("{v}C"))),
                na(t.and_then(|t| t.power_mw).map(|p| p / 1000)),
                na(t.and_then(|t| t.power_limit_mw)
                    .map(|p| format!("{} W", p / 1000))),
                na(t.and_then(|t| t.clock_sm_mhz).map(|v| format!("{v} MHz"))),
                na(t.and_then(|t| t.clock_memory_mhz)
                    .map(|v| format!("{v} MHz"))),
                na(t.and_then(|t| t.fan_pct).map(|v| format!("{v}%"))),
                na(t.and_then(|t| t.ecc_uncorrected)),
                na(t.and_then(|t| t.mig_enabled)),
            ),
            theme.text,
        ),
        Line::styled(
            format!(
                "uuid {}  pci {}",
                d.uuid.clone().unwrap_or_else(|| "n/a".into()),
                na(t.and_then(|t| t.pci_bus_id.clone()))
            ),
            theme.dim,
        ),
    ];
    frame.render_widget(Paragraph::new(lines), info);
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
            .block(block(" utilization % ", theme)),
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
    let snap = slot.and_then(|s| s.data.as_ref());
    let mut rows: Vec<Row> = Vec::new();
    for p in t.map(|t| t.processes.as_slice()).unwrap_or_default() {
        let claim = p.claim.and_then(|id| snap.and_then(|s| s.claim(id)));
        let over = claim.is_some_and(|c| c.over_limit);
        rows.push(Row::new(vec![
            Cell::from(p.pid.to_string()),
            Cell::from(p.name.clone().unwrap_or_else(|| "?".into())),
            Cell::from(Span::styled(
                p.used_memory.map_or_else(|| "n/a".into(), short_bytes),
                if over { theme.over_limit } else { theme.used },
            )),
            match (p.claim, claim) {
                (Some(id), Some(c)) => Cell::from(format!(
                    "claim {id} ({}, {} reserved)",
                    c.project,
                    short_bytes(c.memory_reserved)
                )),
                (Some(id), None) => Cell::from(format!("claim {id}")),
                (None, _) => Cell::from(Span::styled("no claim (unclaimed use)", theme.rogue)),
            },
        ]));
    }
    // Claims holding the device with no process seen are idle reservations.
    for id in &d.holders {
        let has_proc = t.is_some_and(|t| t.processes.iter().any(|p| p.claim == Some(*id)));
        if !has_proc && let Some(c) = snap.and_then(|s| s.claim(*id)) {
            rows.push(Row::new(vec![
                Cell::from("-"),
                Cell::from(Span::styled("(no process)", theme.idle)),
                Cell::from("-"),
                Cell::from(format!(
                    "claim {id} ({}, {} reserved)",
                    c.project,
                    short_bytes(c.memory_reserved)
                )),
            ]));
        }
    }
    let cur = state.cursor[View::Detail.position()];
    let h = usize::from(procs.height.saturating_sub(3));
    let off = window(cur.selected, cur.offset, h, rows.len());
    let rows: Vec<Row> = rows.into_iter().skip(off).take(h).collect();
    frame.render_widget(
        Table::new(
            rows,
            [
                Constraint::Length(8),
                Constraint::Length(16),
                Constraint::Length(8),
                Constraint::Fill(1),
            ],
        )
        .header(Row::new(["PID", "PROCESS", "MEMORY", "CLAIM"]).style(theme.header))
        .block(block(" Processes and claims ", theme)),
        procs,
    );
}

fn events(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let [audit, log] =
        Layout::vertical([Constraint::Percentage(65), Constraint::Percentage(35)]).areas(area);
    let mut evs: Vec<(&str, &crate::snapshot::AuditEvent)> = state
        .shown_sources()
        .filter_map(|(_, s)| s.data.as_ref().map(|d| (s.name.as_str(), d)))
        .flat_map(|(n, d)| d.events.iter().map(move |e| (n, e)))
        .filter(|(_, e)| {
            state.filter.is_empty()
                || [&e.action, &e.target, &e.detail, &e.actor]
                    .iter()
                    .any(|s| s.to_lowercase().contains(&state.filter.to_lowercase()))
        })
        .collect();
    evs.sort_by_key(|(_, e)| std::cmp::Reverse((e.at, e.revision)));
    let h = usize::from(audit.height.saturating_sub(3));
    let rows: Vec<Row> = evs
        .iter()
        .take(h)
        .map(|(src, e)| {
            Row::new(vec![
                Cell::from(clock_time(e.at)),
                Cell::from((*src).to_string()),
                Cell::from(e.actor.clone()),
                Cell::from(Span::styled(e.action.clone(), theme.accent)),
                Cell::from(e.target.clone()),
                Cell::from(e.detail.clone()),
            ])
        })
        .collect();
    frame.render_widget(
        Table::new(
            rows,
            [
                Constraint::Length(8),
                Constraint::Length(8),
                Constraint::Length(13),
                Constraint::Length(9),
                Constraint::Length(10),
                Constraint::Fill(1),
            ],
        )
        .header(
            Row::new(["TIME", "SOURCE", "ACTOR", "ACTION", "TARGET", "DETAIL"]).style(theme.header),
        )
        .block(block(format!(" Audit events ({}) ", evs.len()), theme)),
        audit,
    );
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

// ---------- overlays ----------

fn popup(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

fn help(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let r = popup(area, 130, area.height.saturating_sub(2).max(6));
    frame.render_widget(Clear, r);
    let mut lines = Vec::new();
    for (ctx, title) in [
        (Context::Normal, "Keys"),
        (Context::Dialog, "In forms and dialogs"),
    ] {
        lines.push(Line::styled(title, theme.header));
        for a in KeyAction::ALL
            .iter()
            .filter(|a| a.context() == ctx && !(state.readonly && a.mutates()))
        {
            lines.push(Line::from(vec![
                Span::styled(format!("{:<14}", state.keymap.keys_of(*a)), theme.accent),
                Span::styled(a.help().to_string(), theme.text),
            ]));
        }
    }
    if state.readonly {
        lines.push(Line::styled(
            "read-only: claim, release, move, cordon and reset are off",
            theme.warn,
        ));
    }
    lines.push(Line::styled(
        ": commands: view names, source NAME|all, sort COL, filter TEXT, cordon, uncordon, reset PROJECT, quit",
        theme.dim,
    ));
    // Two columns when wide enough.
    let blk = block(" Help (? or Esc closes, j/k scroll) ", theme);
    let inner = blk.inner(r);
    frame.render_widget(blk, r);
    if inner.width >= 120 && lines.len() > usize::from(inner.height) {
        let half = lines.len().div_ceil(2);
        let right = lines.split_off(half);
        let [a, b] = Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
            .areas(inner);
        frame.render_widget(Paragraph::new(lines), a);
        frame.render_widget(Paragraph::new(right), b);
    } else {
        // Scrolls (j/k, PgUp/PgDn) when it does not fit; never past its last line.
        let last = u16::try_from(lines.len())
            .unwrap_or(u16::MAX)
            .saturating_sub(inner.height);
        frame.render_widget(
            Paragraph::new(lines).scroll((state.help_scroll.min(last), 0)),
            inner,
        );
    }
}

fn form(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let Mode::Form(f) = &state.mode else { return };
    let r = popup(area, 72, 20);
    frame.render_widget(Clear, r);
    let src = state.sources.get(f.source).map_or("?", |s| s.name.as_str());
    let blk = block(format!(" Claim on {src} "), theme);
    let inner = blk.inner(r);
    frame.render_widget(blk, r);
    let mut lines = Vec::new();
    for (i, field) in f.visible().into_iter().enumerate() {
        let value = match field {
            FormField::Kind => format!("◂ {} ▸", f.kind.label()),
            FormField::Wait => format!(
                "◂ {} ▸",
                if f.wait {
                    "yes (pending)"
                } else {
                    "no (refuse)"
                }
            ),
            other => {
                let v = f.field(other).to_string();
                if i == f.focus { format!("{v}▏") } else { v }
            }
        };
        let style = if i == f.focus {
            theme.selection
        } else {
            theme.text
        };
        lines.push(Line::from(vec![
            Span::styled(format!("{:<13}", field.label()), theme.dim),
            Span::styled(value, style),
        ]));
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        format!("request {}", f.draft().to_json(serde_json::Map::new())),
        theme.dim,
    ));
    match &f.stage {
        FormStage::Editing => lines.push(Line::styled(
            "Enter: show where it would go · Esc: cancel",
            theme.dim,
        )),
        FormStage::Planning => lines.push(Line::styled("asking for a placement…", theme.dim)),
        FormStage::Preview(p) => {
            lines.push(Line::styled(format!("would place at {p}"), theme.ok));
            // A remote endpoint's preview is planned on its last snapshot, here.
            if state
                .sources
                .get(f.source)
                .is_some_and(|s| s.kind == "gpuboard")
            {
                lines.push(Line::styled(
                    "(preview on the last snapshot; the endpoint re-checks when you claim)",
                    theme.dim,
                ));
            }
            lines.push(Line::styled(
                "Enter: claim it · edit to change · Esc: cancel",
                theme.accent,
            ));
        }
        FormStage::Submitting => lines.push(Line::styled("claiming…", theme.dim)),
    }
    if let Some(e) = &f.error {
        lines.push(Line::styled(e.clone(), theme.flash_error));
    }
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), inner);
}

fn confirm(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let Mode::Confirm(c) = &state.mode else {
        return;
    };
    let r = popup(
        area,
        64,
        u16::try_from(c.body.len()).unwrap_or(4).saturating_add(5),
    );
    frame.render_widget(Clear, r);
    let blk = block(format!(" {} ", c.title), theme);
    let inner = blk.inner(r);
    frame.render_widget(blk, r);
    let mut lines: Vec<Line> = c
        .body
        .iter()
        .map(|l| Line::styled(l.clone(), theme.text))
        .collect();
    lines.push(Line::raw(""));
    let (cancel, ok) = if c.ok_focused {
        (theme.text, theme.selection)
    } else {
        (theme.selection, theme.text)
    };
    lines.push(Line::from(vec![
        Span::styled(" [ Cancel ] ", cancel),
        Span::raw("   "),
        Span::styled(format!(" [ {} ] ", c.action.verb()), ok),
    ]));
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }), inner);
}

fn move_pick(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let Mode::Move(m) = &state.mode else { return };
    let r = popup(area, 72, 18);
    frame.render_widget(Clear, r);
    let blk = block(format!(" Move claim {} from {} ", m.id, m.from), theme);
    let inner = blk.inner(r);
    frame.render_widget(blk, r);
    let h = usize::from(inner.height.saturating_sub(3));
    let off = window(m.selected, 0, h, m.targets.len());
    let mut lines: Vec<Line> = m
        .targets
        .iter()
        .enumerate()
        .skip(off)
        .take(h)
        .map(|(i, (node, idx, model, free))| {
            Line::styled(
                format!("{node}:{idx}  {}  {free}", short_model(model)),
                if i == m.selected {
                    theme.selection
                } else {
                    theme.text
                },
            )
        })
        .collect();
    if m.targets.is_empty() {
        lines.push(Line::styled("no other GPU on this source", theme.dim));
    }
    lines.push(Line::styled(
        if m.sent {
            "moving…"
        } else {
            "↑/↓ pick · Enter move · Esc cancel"
        },
        theme.dim,
    ));
    if let Some(e) = &m.error {
        lines.push(Line::styled(e.clone(), theme.flash_error));
    }
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }), inner);
}
