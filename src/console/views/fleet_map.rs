//! The Overview's fleet map: a cell per GPU (or per two GPUs, or per node, as the area
//! needs; `state::MapLayout`), its glyph and colour its state, cells the Overview's filter
//! excludes dim, the cursor's cell in the selection style, and the legend with each state's
//! count under the cells.

use std::fmt::Write as _;

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::common::block;
use crate::console::state::{
    CellState, Density, FleetMap, MapLayout, State, legend_entries, map_inner,
};
use crate::console::theme::Theme;

/// The style of a state's cell.
pub(super) fn state_style(s: CellState, theme: &Theme) -> Style {
    match s {
        CellState::Stale => theme.stale,
        CellState::Lost => theme.critical,
        CellState::DoubleBooked => theme.rogue,
        CellState::OverLimit => theme.over_limit,
        CellState::Cordoned => theme.cordoned,
        CellState::Idle => theme.idle,
        CellState::Full => theme.used,
        CellState::Shared => theme.allocated,
        CellState::Free => theme.free,
    }
}

/// The map with its border, title and legend in `area`.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    if area.height < 3 {
        return;
    }
    let map = &state.map;
    let inner = map_inner(area, map);
    let layout = MapLayout::new(map, inner);
    let cursor = map.cursor.as_ref().and_then(|c| layout.unit_of(map, c));
    let first = layout.first_row(cursor);
    let h = usize::from(inner.height);
    // A GPU two sources list is a cell in each: then the devices and the GPUs both.
    let gpus = state.totals.gpus;
    let count = if gpus < map.cells.len() {
        format!("{} devices ({gpus} GPUs)", map.cells.len())
    } else {
        format!("{} GPUs", map.cells.len())
    };
    let mut title = format!(" Fleet map: {count}, {} ", layout.density.describe());
    if layout.rows > h {
        let _ = write!(
            title,
            "(rows {}-{} of {}) ",
            first + 1,
            (first + h).min(layout.rows),
            layout.rows
        );
    }
    if let Some((source, node, index)) = &map.cursor {
        let name = map
            .nodes
            .iter()
            .find(|n| n.source == *source && &n.name == node)
            .map_or(node.as_str(), |n| n.label.as_str());
        let word = cursor
            .and_then(|u| layout.units.get(u))
            .map_or("", |u| map.unit_state(u).0.word());
        let _ = write!(title, "▸ {name}:{index} {word} (Enter opens) ");
    }
    frame.render_widget(block(title, theme), area);
    if map.cells.is_empty() {
        frame.render_widget(Paragraph::new("no GPUs to show").style(theme.dim), inner);
    } else {
        cells(frame, &layout, map, cursor, first, theme);
    }
    legend_lines(frame, area, inner, map, theme);
}

/// The cells in view (and the node names, one node a row).
fn cells(
    frame: &mut Frame,
    layout: &MapLayout,
    map: &FleetMap,
    cursor: Option<usize>,
    first: usize,
    theme: &Theme,
) {
    let area = layout.area;
    let h = usize::from(area.height);
    let buf = frame.buffer_mut();
    if layout.density == Density::Named {
        for (row, n) in map.nodes.iter().enumerate().skip(first).take(h) {
            let y = area.y + u16::try_from(row - first).unwrap_or(0);
            let label: String = n
                .label
                .chars()
                .take(usize::from(layout.label_w.saturating_sub(1)))
                .collect();
            buf.set_string(area.x, y, label, theme.dim);
        }
    }
    for (i, u) in layout.units.iter().enumerate() {
        if u.row < first || u.row >= first + h || u.x >= area.width {
            continue;
        }
        let (state, dim) = map.unit_state(u);
        let style = if cursor == Some(i) {
            state_style(state, theme).patch(theme.selection)
        } else if dim {
            theme.dim
        } else {
            state_style(state, theme)
        };
        let y = area.y + u16::try_from(u.row - first).unwrap_or(0);
        if let Some(cell) = buf.cell_mut((area.x + u.x, y)) {
            cell.set_char(state.glyph()).set_style(style);
        }
    }
}

/// The legend: each state's glyph in its style, its word and count, wrapped to the width.
fn legend_lines(frame: &mut Frame, area: Rect, inner: Rect, map: &FleetMap, theme: &Theme) {
    let width = usize::from(inner.width);
    let mut lines: Vec<Line> = vec![Line::default()];
    let mut x = 0usize;
    for (s, text) in legend_entries(map, inner.width) {
        let n = map.counts[s.position()];
        let w = text.chars().count();
        if x > 0 && x + 2 + w > width {
            lines.push(Line::default());
            x = 0;
        }
        let Some(line) = lines.last_mut() else { break };
        if x > 0 {
            line.push_span(Span::raw("  "));
            x += 2;
        }
        let style = if n > 0 {
            state_style(s, theme)
        } else {
            theme.dim
        };
        line.push_span(Span::styled(s.glyph().to_string(), style));
        line.push_span(Span::styled(
            text.chars().skip(1).collect::<String>(),
            if n > 0 { theme.text } else { theme.dim },
        ));
        x += w;
    }
    let rows = u16::try_from(lines.len()).unwrap_or(1);
    let y = inner.y + inner.height;
    let bottom = area.y + area.height.saturating_sub(1);
    let r = Rect::new(inner.x, y, inner.width, rows.min(bottom.saturating_sub(y)));
    frame.render_widget(Paragraph::new(lines), r);
}
