//! The GPUs view "by GPU": one row per physical GPU with the sources that see it, every
//! engine's holders and its flags; Enter (or `:gpu NODE:INDEX`) opens one GPU's holders
//! as a tree, each process under its holder, and the processes no holder accounts for.

use std::fmt::Write as _;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, Wrap};

use crate::console::state::State;
use crate::console::theme::Theme;
use crate::physical::{GpuHolder, GpuProcess, PhysicalGpu};
use crate::units::Units;

use super::common::{block, fit, list_row, short_bytes, short_model, window};

/// The by-GPU list, or the open GPU's holder tree.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    if let Some(g) = state.physical.open_gpu() {
        let scroll = state.physical.open.as_ref().map_or(0, |(_, s)| *s);
        draw_tree(frame, area, g, scroll, state, theme);
        return;
    }
    let fleet = state.physical_fleet();
    let warn = u16::from(!fleet.warnings.is_empty());
    let [table, note] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(warn)]).areas(area);
    let wide = area.width >= 110;
    let mut widths = vec![
        Constraint::Length(place_width(state)),
        Constraint::Length(if wide { 14 } else { 10 }),
    ];
    let mut header = vec!["GPU", "MODEL"];
    if wide {
        widths.push(Constraint::Length(5));
        header.push("UTIL");
        widths.push(Constraint::Length(7));
        header.push("USED");
    }
    widths.extend([
        Constraint::Fill(1),
        Constraint::Fill(2),
        Constraint::Length(if wide { 26 } else { 18 }),
    ]);
    header.extend(["SEEN BY", "HOLDERS", "FLAGS"]);
    let height = usize::from(table.height.saturating_sub(3));
    let cur = state.physical.cursor;
    let len = state.physical.rows.len();
    let off = window(cur.selected, cur.offset, height, len);
    let rows: Vec<Row> = state
        .physical
        .rows
        .iter()
        .enumerate()
        .skip(off)
        .take(height)
        .filter_map(|(i, &g)| Some((i, fleet.gpus.get(g)?)))
        .map(|(i, g)| gpu_row(g, i == cur.selected, wide, theme))
        .collect();
    let mut title = vec![Span::styled(format!(" GPUs by GPU ({len}) "), theme.title)];
    if let Some(f) = state.physical.flag_filter {
        title.push(Span::styled(format!("flag:{f} "), theme.accent));
    }
    if !state.gpus.filter.is_empty() {
        title.push(Span::styled(
            format!("filter:{} ", state.gpus.filter),
            theme.accent,
        ));
    }
    let t = Table::new(rows, widths)
        .header(Row::new(header).style(theme.header))
        .column_spacing(1)
        .block(block(Line::from(title), theme));
    frame.render_widget(t, table);
    if len == 0 {
        let what = if fleet.gpus.is_empty() {
            "no GPUs: no source lists any yet"
        } else {
            "no GPUs match (`!` steps the flag filter, Esc clears it)"
        };
        let inner = Rect {
            x: table.x + 2,
            y: table.y + 2,
            width: table.width.saturating_sub(4),
            height: table.height.saturating_sub(3),
        };
        frame.render_widget(Paragraph::new(what).style(theme.dim), inner);
    }
    if let Some(first) = fleet.warnings.first() {
        let more = fleet.warnings.len() - 1;
        let text = if more == 0 {
            format!("unmatched: {first}")
        } else {
            format!("unmatched ({} devices): {first}", more + 1)
        };
        let line = fit(&text, usize::from(note.width));
        frame.render_widget(Paragraph::new(line).style(theme.warn), note);
    }
}

/// The GPU column's width: the longest `node:index` shown, within limits.
fn place_width(state: &State) -> u16 {
    let longest = state
        .physical_fleet()
        .gpus
        .iter()
        .map(|g| g.place().chars().count())
        .max()
        .unwrap_or(3);
    u16::try_from(longest.clamp(3, 28)).unwrap_or(28)
}

fn gpu_row(g: &PhysicalGpu, selected: bool, wide: bool, theme: &Theme) -> Row<'static> {
    let t = g.telemetry.as_ref();
    let mut cells = vec![Cell::from(g.place()), Cell::from(short_model(&g.model))];
    if wide {
        cells.push(Cell::from(
            t.and_then(|t| t.utilization_gpu)
                .map_or_else(|| "n/a".into(), |u| format!("{u}%")),
        ));
        cells.push(Cell::from(
            t.and_then(|t| t.memory_used)
                .map_or_else(|| "n/a".into(), short_bytes),
        ));
    }
    let names = g.source_names();
    cells.push(Cell::from(match names.as_slice() {
        [first, _, ..] if !wide => format!("{first}+{}", names.len() - 1),
        _ => names.join(","),
    }));
    cells.push(Cell::from(holders_text(g)));
    // Narrow: each flag's first word (`double`, `unexplained` as `unexpl`).
    let flags: Vec<&str> = g
        .flags
        .iter()
        .map(|f| match (wide, f.word()) {
            (false, "double-booked") => "double",
            (false, "unexplained") => "unexpl",
            (_, w) => w,
        })
        .collect();
    let style = if g.has_flag("double-booked") {
        theme.critical
    } else if flags.is_empty() {
        theme.text
    } else {
        theme.warn
    };
    let mut words = flags.join(",");
    if g.unmatched.is_some() {
        if !words.is_empty() {
            words.push(',');
        }
        words.push_str(if wide { "unmatched" } else { "unmatch" });
    }
    cells.push(Cell::from(Span::styled(words, style)));
    list_row(cells, selected, false, theme)
}

/// The outermost holders by label, with how many are nested in them.
fn holders_text(g: &PhysicalGpu) -> String {
    if g.holders.is_empty() {
        return "-".to_string();
    }
    let roots: Vec<&str> = g.roots().map(|(_, h)| &*h.label).collect();
    let nested = g.holders.len() - roots.len();
    let mut s = roots.join(", ");
    if nested > 0 {
        let _ = write!(s, " (+{nested} nested)");
    }
    s
}

/// The open GPU: where it is, who sees it, its telemetry, flags, and its holders as a
/// tree with each process under its holder.
fn draw_tree(
    frame: &mut Frame,
    area: Rect,
    g: &PhysicalGpu,
    scroll: u16,
    state: &State,
    theme: &Theme,
) {
    let mut lines: Vec<Line<'static>> = Vec::new();
    let mut head = format!("{} · {}", g.place(), g.model);
    if let Some(m) = g.memory {
        let _ = write!(head, " · {}", short_bytes(m));
    }
    if let Some(u) = &g.uuid {
        let _ = write!(head, " · {u}");
    }
    lines.push(Line::styled(head, theme.header));
    let seen: Vec<String> = g
        .seen_by
        .iter()
        .map(|s| {
            format!(
                "{} ({} {}:{})",
                s.source_name,
                s.engine.word(),
                s.node,
                s.index
            )
        })
        .collect();
    lines.push(Line::from(vec![
        Span::styled("seen by ", theme.dim),
        Span::raw(seen.join(", ")),
    ]));
    if let Some(t) = &g.telemetry {
        let from = g
            .telemetry_from
            .and_then(|i| state.sources.get(i))
            .map_or("?", |s| s.name.as_str());
        let mut parts = vec![format!(
            "util {}",
            t.utilization_gpu
                .map_or_else(|| "n/a".into(), |u| format!("{u}%"))
        )];
        if let Some(u) = t.memory_used {
            parts.push(format!("used {}", short_bytes(u)));
        }
        if let Some(c) = t.temperature_c {
            parts.push(format!("{c}C"));
        }
        lines.push(Line::from(vec![
            Span::styled(format!("telemetry from {from} "), theme.dim),
            Span::raw(parts.join(" · ")),
        ]));
    } else {
        lines.push(Line::styled(
            "telemetry: none of its sources has any",
            theme.dim,
        ));
    }
    if let Some(why) = &g.unmatched {
        lines.push(Line::styled(format!("unmatched: {why}"), theme.warn));
    }
    for f in &g.flags {
        let style = if f.word() == "double-booked" {
            theme.critical
        } else {
            theme.warn
        };
        lines.push(Line::styled(format!("! {}", f.describe(g)), style));
    }
    lines.push(Line::styled("holders", theme.header));
    if g.holders.is_empty() {
        lines.push(Line::styled("  none: no engine holds it", theme.dim));
    }
    let mut out = TreeLines {
        g,
        theme,
        lines: &mut lines,
    };
    out.children(None, "  ");
    let loose: Vec<&GpuProcess> = g.processes.iter().filter(|p| p.holder.is_none()).collect();
    if !loose.is_empty() {
        lines.push(Line::styled(
            "processes no holder accounts for",
            theme.header,
        ));
        for p in loose {
            lines.push(Line::styled(format!("  {}", process_text(p)), theme.warn));
        }
    }
    let title = format!(" GPU {} · every holder · Esc back ", g.place());
    let p = Paragraph::new(lines)
        .style(theme.text)
        .wrap(Wrap { trim: false })
        .scroll((scroll, 0))
        .block(block(title, theme));
    frame.render_widget(p, area);
}

/// Writes holders under a parent, each followed by its processes and its own children.
struct TreeLines<'a, 'b> {
    g: &'a PhysicalGpu,
    theme: &'a Theme,
    lines: &'b mut Vec<Line<'static>>,
}

impl TreeLines<'_, '_> {
    fn children(&mut self, parent: Option<usize>, indent: &str) {
        let kids: Vec<(usize, &GpuHolder)> = self.g.children(parent).collect();
        let procs: Vec<&GpuProcess> = match parent {
            Some(p) => self
                .g
                .processes
                .iter()
                .filter(|x| x.holder == Some(p))
                .collect(),
            None => Vec::new(),
        };
        let total = kids.len() + procs.len();
        let mut n = 0;
        for p in procs {
            n += 1;
            let branch = if n == total { "└─ " } else { "├─ " };
            self.lines.push(Line::from(vec![
                Span::raw(format!("{indent}{branch}")),
                Span::styled(process_text(p), self.theme.dim),
            ]));
        }
        for (i, h) in kids {
            n += 1;
            let (branch, next) = match (parent, n == total) {
                (None, _) => ("", indent.to_string()),
                (Some(_), true) => ("└─ ", format!("{indent}   ")),
                (Some(_), false) => ("├─ ", format!("{indent}│  ")),
            };
            let style: Style = if h.guessed {
                self.theme.dim
            } else {
                self.theme.text
            };
            self.lines.push(Line::from(vec![
                Span::raw(format!("{indent}{branch}")),
                Span::styled(h.label.to_string(), style),
                Span::styled(format!("  {}", holder_facts(h)), self.theme.dim),
            ]));
            self.children(Some(i), &next);
        }
    }
}

fn holder_facts(h: &GpuHolder) -> String {
    let mut parts = vec![h.source_name.to_string()];
    if *h.source_name != *h.engine.word() {
        parts.push(h.engine.word().to_string());
    }
    if !h.project.is_empty() {
        parts.push(h.project.to_string());
    }
    if h.memory.0 > 0 {
        parts.push(short_bytes(h.memory));
    }
    if h.compute > Units(0) {
        parts.push(format!("{} GPU", h.compute));
    }
    if h.guessed {
        parts.push("which GPU not published".to_string());
    }
    parts.join(" · ")
}

fn process_text(p: &GpuProcess) -> String {
    let mut s = format!("pid {}", p.pid);
    if let Some(n) = &p.name {
        let _ = write!(s, " {n}");
    }
    let _ = write!(
        s,
        " {}",
        p.used_memory.map_or_else(|| "n/a".into(), short_bytes)
    );
    if let Some(o) = &p.owner {
        let _ = write!(s, " ({})", o.short());
    }
    s
}
