//! The GPU detail view: one device in depth (memory, compute, telemetry), its
//! charts (`charts`), and its processes matched to claims.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, Wrap};

use crate::console::state::{State, View};
use crate::console::theme::Theme;
use crate::snapshot::{DeviceTelemetry, DeviceView, ProcessOwner, Snapshot};

use super::common::{block, na, short_bytes, window};

/// The device picked in the GPUs view, or how to pick one.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let Some((src, n, d)) = state.detail_device() else {
        let p = Paragraph::new(
            "no GPU selected: pick one in the GPUs view and press Enter (in Claims, Enter opens the claim)",
        )
        .style(theme.dim)
        .wrap(Wrap { trim: true })
        .block(block(" GPU detail ", theme));
        frame.render_widget(p, area);
        return;
    };
    let slot = state.sources.get(src);
    let t = d.telemetry.as_ref();
    // Simulated telemetry says so where it is read, never passing for NVML's.
    let simulated = if t.is_some_and(|t| t.simulated) {
        "telemetry SIMULATED "
    } else {
        ""
    };
    let title = format!(
        " {}:{} {} {} {simulated}",
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
        Constraint::Length(match inner.height {
            30.. => 12,
            14.. => 7,
            _ => 2,
        }),
        Constraint::Min(1),
    ])
    .areas(inner);
    frame.render_widget(Paragraph::new(info_lines(d, t, theme)), info);
    super::charts::draw(frame, spark, state, d, t, theme);
    let snap = slot.and_then(|s| s.data.as_deref());
    let rows = process_rows(d, t, snap, theme);
    let cur = state.cursor_of(View::Detail);
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

/// Memory, compute, telemetry readings and identifiers, one line each.
fn info_lines(d: &DeviceView, t: Option<&DeviceTelemetry>, theme: &Theme) -> Vec<Line<'static>> {
    let used = t.and_then(|t| t.memory_used);
    vec![
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
            Span::styled(d.flag_words().join(","), theme.warn),
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
    ]
}

/// The device's processes with their claims, then the claims holding it with no process.
fn process_rows(
    d: &DeviceView,
    t: Option<&DeviceTelemetry>,
    snap: Option<&Snapshot>,
    theme: &Theme,
) -> Vec<Row<'static>> {
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
            // Whose the process is by its cgroup, after its claim (or in place of one).
            match (p.claim, claim, &p.owner) {
                (Some(_), Some(c), o) => Cell::from(with_owner(claim_here(c, d.index), o.as_ref())),
                (Some(id), None, o) => Cell::from(with_owner(format!("claim {id}"), o.as_ref())),
                (None, _, Some(o)) => {
                    Cell::from(Span::styled(format!("unclaimed use: {o}"), theme.rogue))
                }
                (None, _, None) => {
                    Cell::from(Span::styled("no claim (unclaimed use)", theme.rogue))
                }
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
                Cell::from(claim_here(c, d.index)),
            ]));
        }
    }
    rows
}

/// `text`, then whose the process is when its cgroup says.
fn with_owner(text: String, owner: Option<&ProcessOwner>) -> String {
    match owner {
        Some(o) => format!("{text} · {o}"),
        None => text,
    }
}

/// A claim as seen from one GPU: its holder and its share on this GPU (not its total over
/// every GPU it holds): `claim 12 (vision, alice: 10G / 0.25 GPU here of 20G)`.
fn claim_here(c: &crate::snapshot::ClaimView, index: u32) -> String {
    let who = match &c.holder {
        Some(h) => format!("{}, {h}", c.project),
        None => c.project.clone(),
    };
    match c.shares.iter().find(|s| s.device == index) {
        Some(s) if c.shares.len() > 1 => format!(
            "claim {} ({who}: {} / {} GPU here of {})",
            c.shown_id(),
            short_bytes(s.memory),
            s.compute,
            short_bytes(c.memory_reserved)
        ),
        Some(s) => format!(
            "claim {} ({who}: {} / {} GPU)",
            c.shown_id(),
            short_bytes(s.memory),
            s.compute
        ),
        None => format!("claim {} ({who})", c.shown_id()),
    }
}
