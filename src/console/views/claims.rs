//! The Claims view: one row per claim (state, place, reservation, use, lease, age) and
//! the selected claim's shares or why it is pending.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, Wrap};

use crate::clock;
use crate::console::lists::{ClaimField, Columns, claim_columns};
use crate::console::state::{ClaimKey, SourceSlot, State, View, claims_info_height};
use crate::console::theme::Theme;
use crate::snapshot::{ClaimState, ClaimView};
use crate::units::Bytes;

use super::common::{
    block, constraints, empty_note, list_row, mid_ellipsis, place_label, short_bytes, title_with,
    window,
};

/// The claim list, and below it (when tall enough) the selected claim in words.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let cols = claim_columns(
        area.width,
        state.shown_sources().count() > 1,
        state.claim_widths,
    );
    let detail_h = claims_info_height(area.height);
    let [table_area, info] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(detail_h)]).areas(area);
    let height = usize::from(table_area.height.saturating_sub(3));
    let cur = state.cursor_of(View::Claims);
    let len = state.claims.rows.len();
    let off = window(cur.selected, cur.offset, height, len);
    let picked = state.selected_row(View::Claims);
    let rows: Vec<Row> = state
        .claims
        .rows
        .iter()
        .enumerate()
        .skip(off)
        .take(height)
        .filter_map(|(i, k)| claim_row(state, *k, Some(i) == picked, &cols, theme))
        .collect();
    let t = Table::new(rows, constraints(&cols))
        .header(Row::new(cols.headers()).style(theme.header))
        .block(block(title_with(state, "Claims", len, theme), theme));
    frame.render_widget(t, table_area);
    if len == 0 {
        empty_note(frame, table_area, state, theme, "no claims");
    }
    if detail_h > 0
        && let Some(k) = state.selected_claim()
        && let Some((slot, c)) = state.claim(k)
    {
        let start = super::preview::start_sentence(state, k.source, c);
        selected_info(frame, info, (slot, c), start, theme);
    }
}

/// One claim's row, a cell per column shown; `None` when the key no longer names a claim.
fn claim_row(
    state: &State,
    k: ClaimKey,
    selected: bool,
    cols: &Columns<ClaimField>,
    theme: &Theme,
) -> Option<Row<'static>> {
    let (slot, c) = state.claim(k)?;
    let stale = slot.is_stale(state.now, state.refresh_ms);
    let cells = cols.fields().map(|field| {
        let width = cols.width_of(field).unwrap_or(0);
        match field {
            ClaimField::Source => Cell::from(slot.name.clone()),
            ClaimField::Id => Cell::from(mid_ellipsis(&c.shown_id(), width)),
            ClaimField::State => match c.state {
                ClaimState::Placed if c.idle => Cell::from(Span::styled("idle", theme.idle)),
                ClaimState::Placed => Cell::from(Span::styled("placed", theme.ok)),
                ClaimState::Pending if c.infeasible => {
                    Cell::from(Span::styled("never", theme.critical))
                }
                ClaimState::Pending => Cell::from(Span::styled("pending", theme.pending)),
            },
            ClaimField::Project => Cell::from(c.project.clone()),
            ClaimField::Holder => Cell::from(c.holder.clone().unwrap_or_else(|| "-".into())),
            ClaimField::Place => {
                if c.state == ClaimState::Pending
                    && let Some(start) = super::preview::start_short(state, k.source, c)
                {
                    // The expected start first, then the reasons if they fit in what is
                    // left (uncut: the claim detail lists them all).
                    let left = width.saturating_sub(start.chars().count() + 1);
                    let why = pending_summary(&c.pending_reasons, left);
                    let text = if c.pending_reasons.is_empty() || why.ends_with('…') {
                        start
                    } else {
                        format!("{start} {why}")
                    };
                    Cell::from(Span::styled(text, theme.pending))
                } else if c.state == ClaimState::Pending && !c.pending_reasons.is_empty() {
                    Cell::from(Span::styled(
                        pending_summary(&c.pending_reasons, width),
                        theme.pending,
                    ))
                } else {
                    Cell::from(place_label(c, width))
                }
            }
            ClaimField::Reserved => Cell::from(Span::styled(
                short_bytes(c.memory_reserved),
                theme.allocated,
            )),
            ClaimField::Used => match c.memory_used {
                Some(u) if c.over_limit => Cell::from(Span::styled(
                    format!("{}!", short_bytes(u)),
                    theme.over_limit,
                )),
                Some(u) => Cell::from(Span::styled(short_bytes(u), theme.used)),
                None => Cell::from(Span::styled("n/a", theme.dim)),
            },
            ClaimField::Fraction => Cell::from(format!("{} GPU", c.compute_reserved)),
            // A form cut short ends in `…` (the panel below shows it whole).
            ClaimField::Form => Cell::from(end_ellipsis(&c.form, width)),
            ClaimField::Lease => Cell::from(c.lease_expires_at.map_or_else(
                || "-".into(),
                |t| {
                    if t <= state.now {
                        "expired".to_string()
                    } else {
                        clock::age(t.millis_since(state.now))
                    }
                },
            )),
            // Engines that give no start time (Ray actors) leave it at 0: unknown, not 55
            // years.
            ClaimField::Age => Cell::from(if c.created_at.0 == 0 {
                "-".to_string()
            } else {
                clock::age(state.now.millis_since(c.created_at))
            }),
        }
    });
    Some(list_row(cells.collect(), selected, stale, theme))
}

/// `s` in at most `width` columns, ending in `…` when cut.
fn end_ellipsis(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The selected claim: its form, and its shares (or its expected start, where its source
/// gives one, and why it is pending).
fn selected_info(
    frame: &mut Frame,
    info: Rect,
    (slot, c): (&SourceSlot, &ClaimView),
    start: Option<String>,
    theme: &Theme,
) {
    let mut lines = vec![Line::from(vec![
        Span::styled(format!("claim {} ", c.shown_id()), theme.title),
        Span::styled(format!("on {}: ", slot.name), theme.dim),
        Span::styled(c.form.clone(), theme.text),
        Span::styled(
            format!(
                "  project {}, holder {}",
                c.project,
                c.holder.as_deref().unwrap_or("-")
            ),
            theme.dim,
        ),
    ])];
    if c.state == ClaimState::Pending {
        if c.pending_reasons.is_empty() {
            lines.push(Line::styled(
                "waiting; no reason recorded yet",
                theme.pending,
            ));
        }
        let n = c.pending_reasons.len();
        for (i, r) in c.pending_reasons.iter().enumerate() {
            // More reasons than the pane shows: say how many, and where they all are.
            let lead = if n > 1 {
                format!("why pending ({} of {n}, Enter lists all): ", i + 1)
            } else {
                "why pending: ".to_string()
            };
            lines.push(Line::styled(format!("{lead}{r}"), theme.pending));
        }
        // After the reasons: PLACE already starts with the expected start, and a short pane
        // keeps the first reason (and where to read them all).
        if let Some(start) = start {
            lines.push(Line::styled(start, theme.pending));
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

/// A pending claim's reasons in one cell of `width`: how many nodes refused it, the most
/// common reason and how many other kinds there are (`4 nodes: memory (+2 more)`), so
/// the row says at a glance that there is more than one reason; the claim detail lists
/// them all.
fn pending_summary(reasons: &[String], width: usize) -> String {
    let mut nodes = 0usize;
    // Each kind once per line (a node with three memory-short GPUs counts once).
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for line in reasons {
        let parts: Vec<&str> = match line.strip_prefix("node ").and_then(|r| r.split_once(": ")) {
            Some((_, rest)) => {
                nodes += 1;
                rest.split("; ").collect()
            }
            None => vec![line.as_str()],
        };
        let mut seen: Vec<String> = Vec::new();
        for p in parts {
            let k = reason_kind(p);
            if !seen.contains(&k) {
                seen.push(k);
            }
        }
        for k in seen {
            match kinds.iter_mut().find(|(x, _)| *x == k) {
                Some((_, n)) => *n += 1,
                None => kinds.push((k, 1)),
            }
        }
    }
    // Infeasible first (waiting cannot help), else the most common kind; on a tie the
    // first named (placement's, before fair share).
    let infeasible = kinds.iter().find(|(k, _)| k == "infeasible");
    let Some((top, _)) = infeasible
        .or_else(|| kinds.iter().rev().max_by_key(|(_, n)| *n))
        .map(|(k, n)| (k.clone(), *n))
    else {
        return "pending".to_string();
    };
    let others = kinds.len() - 1;
    let subject = match (nodes, reasons.len()) {
        (1, _) => "1 node: ".to_string(),
        (n, _) if n > 1 => format!("{n} nodes: "),
        (_, 1) => String::new(),
        (_, n) => format!("{n} reasons: "),
    };
    let mut forms = Vec::new();
    if others > 0 {
        forms.push(format!("{subject}{top} (+{others} more)"));
        forms.push(format!("{subject}{top} +{others}"));
        // Narrower: the count goes before the other reasons do.
        forms.push(format!("{top} (+{others} more)"));
        forms.push(format!("{top} +{others}"));
    } else {
        forms.push(format!("{subject}{top}"));
    }
    if let Some(f) = forms.iter().find(|f| f.chars().count() <= width) {
        return f.clone();
    }
    // Too narrow for any: cut the shortest, and the ellipsis says there is more.
    let last = forms.last().map_or("", String::as_str);
    let mut cut: String = last.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// One reason's kind in a word or two: `insufficient memory (largest free…)` is
/// `memory`; an engine's own reason keeps its first words (`Slurm: Resources (…)` is
/// `Resources`).
fn reason_kind(reason: &str) -> String {
    const KINDS: [(&str, &str); 18] = [
        ("infeasible", "infeasible"),
        ("waiting for a node", "no node"),
        ("waiting for its arguments", "arguments"),
        ("demand", "demand"),
        ("memory unknown", "memory unknown"),
        ("insufficient memory", "memory"),
        ("too small", "too small"),
        ("insufficient compute", "compute"),
        ("cpu", "CPU"),
        ("no free slot", "slots"),
        ("accelerator", "model"),
        ("cordon", "cordoned"),
        ("unhealthy", "unhealthy"),
        ("lost", "lost"),
        ("pinned", "pinned"),
        ("gpus it needs", "too few GPUs"),
        ("too few", "too few GPUs"),
        ("fair share", "fair share"),
    ];
    let lower = reason.to_lowercase();
    if let Some((_, k)) = KINDS.iter().find(|(w, _)| lower.contains(w)) {
        return (*k).to_string();
    }
    // `Slurm: Resources (why)`, `Ray: …`: the engine's name is not the reason.
    let rest = match reason.split_once(": ") {
        Some((engine, rest)) if !engine.contains(' ') && engine.starts_with(char::is_uppercase) => {
            rest
        }
        _ => reason,
    };
    let head = rest.split([':', '(', ';']).next().unwrap_or(rest).trim();
    // Whole words, at most 14 columns.
    let mut out = String::new();
    for w in head.split_whitespace() {
        if !out.is_empty() && out.len() + 1 + w.len() > 14 {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w);
    }
    out.chars().take(14).collect()
}

#[cfg(test)]
mod tests {
    use super::pending_summary;

    #[test]
    fn pending_summary_counts_nodes_and_names_the_commonest_reason() {
        let four = [
            "node a: 2/2 GPUs insufficient memory (largest free 10 GiB, needs 40 GiB)",
            "node b: 1/2 GPUs insufficient memory; 1/2 cordoned",
            "node c: 4/4 GPUs insufficient memory",
            "node d: 1/1 GPUs insufficient compute (largest free 0.5 GPU, needs 1 GPU)",
        ];
        let lab = [
            "node lab-a: 2/2 GPUs insufficient memory (largest free 10 GiB, needs 40 GiB)",
            "node lab-b: 1/2 GPUs insufficient memory (largest free 8.0 GiB, needs 24 GiB); only 1 of the 2 GPUs it needs fit",
            "fair share on gpu:NVIDIA A10G: no pending claim fits (for 25m)",
        ];
        let cases: &[(&[&str], usize, &str)] = &[
            (&four, 40, "4 nodes: memory (+2 more)"),
            (&four, 20, "4 nodes: memory +2"),
            (&four, 16, "memory (+2 more)"),
            (&four, 9, "memory +2"),
            (&four, 8, "memory …"),
            (&lab, 26, "2 nodes: memory (+2 more)"),
            (&lab[..1], 20, "1 node: memory"),
            (
                &["Slurm: Resources (waiting for resources to become free)"],
                20,
                "Resources",
            ),
            (
                &[
                    "Ray: pending",
                    "infeasible: no node has GPU 4; the largest has 2 on vm",
                ],
                26,
                "2 reasons: infeasible +1",
            ),
            (
                &["Ray: waiting for a node with the resources (PENDING_NODE_ASSIGNMENT)"],
                20,
                "no node",
            ),
            (
                &["Slurm: PartitionDown (its partition is down)"],
                20,
                "PartitionDown",
            ),
            (&["a reason in many plain words"], 20, "a reason in"),
            (&[], 20, "pending"),
        ];
        for (reasons, width, want) in cases {
            let reasons: Vec<String> = reasons.iter().map(ToString::to_string).collect();
            let got = pending_summary(&reasons, *width);
            assert_eq!(got, *want, "{reasons:?} in {width}");
            assert!(got.chars().count() <= *width, "{got:?} wider than {width}");
        }
    }
}
