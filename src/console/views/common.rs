//! What every view shares: narrow-column formatters, the source badge, and the table pieces (bordered blocks, titles, scrolling windows, rows, notes, popups).

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Wrap};

use crate::clock::{self, Timestamp};
use crate::units::{Bytes, Units};

use crate::console::lists::{Columns, ShownColumn, Width};
use crate::console::state::{SourceHealth, SourceSlot, State};
use crate::console::theme::Theme;

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

/// A fraction of a GPU as a percentage.
pub(super) fn pct(u: Units) -> String {
    format!("{:.0}%", u.as_fraction() * 100.0)
}

/// A list's columns as the table's constraints, in order.
pub(super) fn constraints<F: ShownColumn>(cols: &Columns<F>) -> Vec<Constraint> {
    cols.iter()
        .map(|(_, w)| match w {
            Width::Fixed(n) => Constraint::Length(n),
            Width::Fill => Constraint::Fill(1),
        })
        .collect()
}

/// The value, or `n/a` when it is not known.
pub(super) fn na<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| x.to_string())
}

/// An identity (node name, place) fitted into `width` columns without losing its ends:
/// `prod-h100-node-018` in 11 is `prod-h…-018`, so two nodes never read the same.
pub fn mid_ellipsis(s: &str, width: usize) -> String {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= width {
        return s.to_string();
    }
    if width < 3 {
        return chars.iter().take(width).collect();
    }
    let tail = (width - 1) / 2 - usize::from(width >= 5);
    let head = width - 1 - tail;
    let mut out: String = chars[..head].iter().collect();
    out.push('…');
    out.extend(&chars[chars.len() - tail..]);
    out
}

pub use crate::snapshot::index_ranges;

/// Where a claim is, fitted into `width`: the node shortened in the middle, its devices
/// as ranges, never cut (`prod-h…-018:2-7`); `pending` for a pending claim.
pub fn place_label(c: &crate::snapshot::ClaimView, width: usize) -> String {
    let Some(node) = &c.node else {
        return "pending".to_string();
    };
    let devices: Vec<u32> = c.shares.iter().map(|s| s.device).collect();
    let tail = format!(":{}", index_ranges(&devices));
    let room = width.saturating_sub(tail.chars().count()).max(4);
    format!("{}{tail}", mid_ellipsis(node, room))
}

/// A model with its memory size, short: `A100 40G`, `H100 80G`, `A10G 24G`; the size is
/// the one the model name states, or else the device's memory.
pub fn model_label(model: &str, memory: Option<Bytes>) -> String {
    let family = crate::request::accelerator_key(model);
    let gb =
        crate::request::stated_memory_gb(model).or_else(|| memory.map(|m| (m.0 + (1 << 29)) >> 30));
    match (family.is_empty(), gb) {
        (true, _) => short_model(model),
        (false, Some(gb)) => format!("{family} {gb}G"),
        (false, None) => family,
    }
}

/// `NVIDIA A100-SXM4-40GB` -> `A100-SXM4-40GB`.
pub(super) fn short_model(m: &str) -> String {
    m.strip_prefix("NVIDIA ").unwrap_or(m).to_string()
}

/// The source's health as a short badge and its style.
pub fn badge(slot: &SourceSlot, now: Timestamp, refresh: u64, theme: &Theme) -> (String, Style) {
    if slot.rewound {
        return if slot.data.is_some() {
            ("◷ history".to_string(), theme.accent)
        } else {
            ("◷ not shown".to_string(), theme.warn)
        };
    }
    match slot.health(now, refresh) {
        SourceHealth::Loading => ("… loading".to_string(), theme.dim),
        SourceHealth::Ok => ("● live".to_string(), theme.ok),
        SourceHealth::Stale { since } => (
            format!("◌ STALE {}", clock::age(now.millis_since(since))),
            theme.stale,
        ),
        SourceHealth::Down { since, .. } => (
            format!("✖ DOWN {}", clock::age(now.millis_since(since))),
            theme.stale,
        ),
    }
}

// ---------- table pieces ----------

/// A bordered block with a styled title.
pub(super) fn block<'a>(title: impl Into<Line<'a>>, theme: &Theme) -> Block<'a> {
    Block::bordered()
        .title(title.into().style(theme.title))
        .border_style(theme.border)
}

/// First row to show so that `selected` is visible in `height` rows, starting from `offset`.
pub(super) fn window(selected: usize, offset: usize, height: usize, len: usize) -> usize {
    let height = height.max(1);
    let mut off = offset.min(len.saturating_sub(1));
    if selected < off {
        off = selected;
    } else if selected >= off + height {
        off = selected + 1 - height;
    }
    off
}

/// A list's title: name, row count, sort column and filter.
pub(super) fn title_with(state: &State, name: &str, count: usize, theme: &Theme) -> Line<'static> {
    // A problem list that cannot be answered (nothing measured) is `n/a`, not `0`.
    let count = match state.unmeasured() {
        Some(_) => "n/a".to_string(),
        None => count.to_string(),
    };
    let mut spans = vec![Span::styled(format!(" {name} ({count}) "), theme.title)];
    if let Some((c, reverse)) = state.sort_shown() {
        let arrow = if reverse { "↑" } else { "↓" };
        spans.push(Span::styled(format!("sort:{c}{arrow} "), theme.dim));
    }
    if !state.filter().is_empty() {
        spans.push(Span::styled(
            format!("filter:{} ", state.filter()),
            theme.accent,
        ));
    }
    Line::from(spans)
}

/// A table row: the selection highlighted, a stale source's rows dimmed.
pub(super) fn list_row<'a>(
    cells: Vec<Cell<'a>>,
    selected: bool,
    stale: bool,
    theme: &Theme,
) -> Row<'a> {
    let row = Row::new(cells);
    if selected {
        row.style(theme.selection)
    } else if stale {
        row.style(theme.dim)
    } else {
        row
    }
}

/// Why a list is empty: the filter, the sources' notes and errors.
pub(super) fn empty_note(frame: &mut Frame, area: Rect, state: &State, theme: &Theme, what: &str) {
    let mut lines = vec![Line::styled(
        match state.unmeasured() {
            Some(why) => format!("`{}`: n/a ({why})", state.filter()),
            None if state.filter().is_empty() => what.to_string(),
            None => format!("{what} match the filter `{}`", state.filter()),
        },
        theme.dim,
    )];
    // Empty because of a filter: the sources' notes (no GPUs, no NVML) do not explain it.
    let filtered = !state.filter().is_empty();
    for (_, s) in state.shown_sources() {
        if let Some(n) = s.note.clone().filter(|_| !filtered).or_else(|| {
            s.data
                .as_ref()
                .and_then(|d| d.endpoint.telemetry_note.clone())
                .filter(|_| !filtered)
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

/// A centered rectangle of at most `w` x `h` inside `area`, for overlays.
pub(super) fn popup(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

/// `text` in `width` columns, ending in `…` when cut (for prose cells whose whole text
/// is shown elsewhere, such as a pane under the table).
pub(super) fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_shrink_in_the_middle() {
        let cases = [
            ("prod-h100-node-018", 11, "prod-h…-018"),
            ("prod-h100-node-018", 18, "prod-h100-node-018"),
            ("prod-h100-node-018", 30, "prod-h100-node-018"),
            ("abcdef", 5, "abc…f"),
            ("abcdef", 2, "ab"),
        ];
        for (s, w, want) in cases {
            assert_eq!(mid_ellipsis(s, w), want, "{s} in {w}");
            assert!(mid_ellipsis(s, w).chars().count() <= w);
        }
        // Two neighbours stay apart.
        assert_ne!(
            mid_ellipsis("prod-h100-node-017", 11),
            mid_ellipsis("prod-h100-node-018", 11)
        );
    }

    #[test]
    fn device_lists_become_ranges() {
        assert_eq!(index_ranges(&[2, 3, 4, 5, 6, 7]), "2-7");
        assert_eq!(index_ranges(&[0, 1, 4]), "0-1,4");
        assert_eq!(index_ranges(&[3]), "3");
        assert_eq!(index_ranges(&[]), "");
    }

    #[test]
    fn models_carry_their_memory_size() {
        assert_eq!(model_label("NVIDIA A100-SXM4-40GB", None), "A100 40G");
        assert_eq!(model_label("NVIDIA A100-SXM4-80GB", None), "A100 80G");
        assert_eq!(model_label("NVIDIA A10G", Some(Bytes::gib(24))), "A10G 24G");
        assert_eq!(
            model_label("NVIDIA H100", Some(Bytes::mib(81_559))),
            "H100 80G"
        );
    }
}
