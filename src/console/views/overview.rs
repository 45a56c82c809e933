//! The Overview view: fleet totals (memory, compute, claims, waste) over the shown
//! sources, computed when the data changes (`State::totals`), their sparklines beside
//! them, the fleet map, and one row per source with its health.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, Wrap};

use crate::units::Bytes;

use super::common::{badge, block, short_bytes};
use crate::console::state::{FleetTotals, OVERVIEW_JUMPS, SourceSlot, State, View};
use crate::console::theme::Theme;

/// Totals at the top with their sparklines, the fleet map, the sources below, and long
/// source notes under the table.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let areas = state.overview_areas(area);
    super::fleet_map::draw(frame, areas.map, state, theme);
    let bottom = areas.sources;
    // The selected count (Enter lists its items), unless the cursor is in the map.
    let selected = state.view == View::Overview
        && state.mode == crate::console::state::Mode::Normal
        && state.map.cursor.is_none();
    let label = OVERVIEW_JUMPS
        .get(state.cursor_of(View::Overview).selected)
        .map(|(l, _, _)| *l)
        .filter(|_| selected);
    let mut lines = total_lines(&state.totals, label, theme);
    let unclaimed = lines.iter_mut().find(|l| {
        l.spans
            .first()
            .is_some_and(|s| s.content.contains("Unclaimed use"))
    });
    if let Some(line) = unclaimed
        && let Some(whose) = unclaimed_whose(state)
    {
        line.push_span(Span::styled(format!(" ({whose})"), theme.rogue));
    }
    // The sparklines take what the totals leave, where that is enough to read them; the
    // totals' lines are never cut for them.
    let widest = lines.iter().map(Line::width).max().unwrap_or(0);
    let totals_w = u16::try_from(widest + 1).unwrap_or(u16::MAX).max(TOTALS_W);
    let top = areas.top;
    let top = if top.width >= totals_w.saturating_add(super::sparklines::MIN_WIDTH) {
        let [t, s] =
            Layout::horizontal([Constraint::Length(totals_w), Constraint::Fill(1)]).areas(top);
        super::sparklines::draw(frame, s, state, theme);
        t
    } else {
        top
    };
    frame.render_widget(Paragraph::new(lines), top);
    if areas.pooled {
        pools_table(frame, bottom, state, theme);
    } else {
        sources_table(frame, bottom, state, theme);
        source_notes(frame, bottom, state, theme);
    }
}

/// One row per pool (more sources than rows): how many of its sources are live, loading,
/// stale or down, their GPUs and claims, and the first in trouble and why.
fn pools_table(frame: &mut Frame, bottom: Rect, state: &State, theme: &Theme) {
    let pools = state.pool_rows();
    let header = Row::new(["POOL", "KIND", "HEALTH", "GPUS", "CLAIMS", "NOTE"]).style(theme.header);
    let title = format!(
        " Sources: {} in {} pools (by name) ",
        state.sources.len(),
        pools.len()
    );
    let rows: Vec<Row> = pools
        .iter()
        .map(|p| {
            let style = if p.down > 0 {
                theme.critical
            } else if p.stale > 0 {
                theme.stale
            } else if p.loading > 0 {
                theme.dim
            } else {
                theme.ok
            };
            let note_style = if p.down > 0 {
                theme.critical
            } else {
                theme.dim
            };
            Row::new(vec![
                Cell::from(format!("{}*", p.pool)),
                Cell::from(p.kind.map_or("mixed", |k| k.as_str())),
                Cell::from(Span::styled(p.health(), style)),
                Cell::from(p.gpus.to_string()),
                Cell::from(p.claims.to_string()),
                Cell::from(Span::styled(p.note(), note_style)),
            ])
        })
        .collect();
    let t = Table::new(
        rows,
        SOURCE_WIDTHS
            .iter()
            .map(|&w| Constraint::Length(w))
            .chain([Constraint::Fill(1)]),
    )
    .header(header)
    .block(block(title, theme));
    frame.render_widget(t, bottom);
}

/// Whose the unclaimed use is, as far as the hosts' cgroups say: `pod ml/train-0, job 42`,
/// the first three and how many more. `None` when no owner is known.
fn unclaimed_whose(state: &State) -> Option<String> {
    let mut owners: Vec<String> = Vec::new();
    for (_, s) in state.shown_sources() {
        let devices = s
            .data
            .as_deref()
            .into_iter()
            .flat_map(crate::snapshot::Snapshot::devices);
        for (_, dev) in devices.filter(|(_, d)| d.has_unclaimed_use()) {
            for o in dev.unclaimed_owners() {
                let o = o.short();
                if !owners.contains(&o) {
                    owners.push(o);
                }
            }
        }
    }
    let more = owners.len().saturating_sub(3);
    owners.truncate(3);
    if more > 0 {
        owners.push(format!("{more} more"));
    }
    (!owners.is_empty()).then(|| owners.join(", "))
}

fn pct_of(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 * 100.0 / b as f64
    }
}

// One entry per Overview line, in screen order: a list read top to bottom as the screen
// shows it.
#[allow(clippy::too_many_lines)]
fn total_lines(t: &FleetTotals, selected: Option<&str>, theme: &Theme) -> Vec<Line<'static>> {
    let FleetTotals {
        gpus,
        cordoned,
        bad,
        cap,
        alloc,
        used,
        free,
        stranded,
        used_known,
        cap_measured,
        claims_measured,
        unclaimed_known,
        compute,
        unclaimed,
        idle_devs,
        placed,
        pending,
        over,
        idle,
    } = *t;
    let kv = |k: &str, v: String, style: Style| {
        let (mark, label) = if selected == Some(k) {
            ("▸", theme.selection)
        } else {
            (" ", theme.dim)
        };
        Line::from(vec![
            Span::styled(format!("{mark}{k:<18}"), label),
            Span::styled(v, style),
        ])
    };
    vec![
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
            if used_known && cap_measured < cap {
                // Only part of the fleet reports its use: say of what.
                format!(
                    "{} of {} measured ({:.0}%)",
                    short_bytes(Bytes(used)),
                    short_bytes(Bytes(cap_measured)),
                    pct_of(used, cap_measured)
                )
            } else if used_known {
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
            if claims_measured == 0 {
                "n/a (no claim's use is measured)".to_string()
            } else {
                format!("{over} claims")
            },
            if over > 0 {
                theme.over_limit
            } else {
                theme.text
            },
        ),
        kv(
            "Idle",
            if used_known {
                format!("{idle} claims, {idle_devs} GPUs allocated but idle")
            } else {
                "n/a (no telemetry)".to_string()
            },
            if idle > 0 { theme.idle } else { theme.text },
        ),
        kv(
            "Unclaimed use",
            if unclaimed_known {
                short_bytes(Bytes(unclaimed))
            } else {
                "n/a (no attribution)".to_string()
            },
            if unclaimed > 0 {
                theme.rogue
            } else {
                theme.text
            },
        ),
    ]
}

/// Columns the totals keep at least beside the sparklines (`GPUs 8000 (77 cordoned, 154
/// unhealthy or lost)` whole), more when a line is longer.
const TOTALS_W: u16 = 62;

/// The fixed columns of the sources table (NOTE takes the rest): SOURCE, KIND, HEALTH
/// (`◌ STALE 59m59s`), GPUS, CLAIMS.
const SOURCE_WIDTHS: [u16; 5] = [12, 9, 14, 5, 7];

/// What a source's NOTE says (its error, else a warning, else its note, else the
/// endpoint's telemetry note), and in which style.
fn source_note(s: &SourceSlot, theme: &Theme) -> (String, Style) {
    let warning = s.error.is_none().then(|| s.warning_note()).flatten();
    let style = if s.error.is_some() {
        theme.critical
    } else if warning.is_some() {
        theme.warn
    } else {
        theme.dim
    };
    let note = s
        .error
        .clone()
        .or(warning)
        .or_else(|| s.note.clone())
        .or_else(|| {
            s.data
                .as_ref()
                .and_then(|d| d.endpoint.telemetry_note.clone())
        })
        .unwrap_or_default();
    (note, style)
}

/// One row per source: kind, health badge, counts and its note or error.
fn sources_table(frame: &mut Frame, bottom: Rect, state: &State, theme: &Theme) {
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
            let (note, note_style) = source_note(s, theme);
            Row::new(vec![
                Cell::from(s.name.clone()),
                Cell::from(s.kind.as_str()),
                Cell::from(Span::styled(b, style)),
                Cell::from(g.to_string()),
                Cell::from(c.to_string()),
                Cell::from(Span::styled(note, note_style)),
            ])
        })
        .collect();
    let t = Table::new(
        rows,
        SOURCE_WIDTHS
            .iter()
            .map(|&w| Constraint::Length(w))
            .chain([Constraint::Fill(1)]),
    )
    .header(header)
    .block(block(" Sources ", theme));
    frame.render_widget(t, bottom);
}

/// A long note (no GPUs here, how to see the demo), or a NOTE cut by its column (an
/// error, the telemetry note), wraps whole below the table when it fits.
fn source_notes(frame: &mut Frame, bottom: Rect, state: &State, theme: &Theme) {
    let gaps = u16::try_from(SOURCE_WIDTHS.len()).unwrap_or(0);
    let fixed: u16 = SOURCE_WIDTHS.iter().sum();
    let note_w = usize::from(bottom.width.saturating_sub(2 + fixed + gaps));
    let notes: Vec<String> = state
        .sources
        .iter()
        .filter_map(|s| {
            let (shown, _) = source_note(s, theme);
            if shown.chars().count() > note_w {
                Some(format!("{}: {shown}", s.name))
            } else {
                s.note.clone().map(|n| format!("{}: {n}", s.name))
            }
        })
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
