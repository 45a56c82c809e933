//! The claim detail: everything the source's snapshot says about one claim (holder,
//! owner pid, its processes, per-GPU shares, lease, the form as written, every pending
//! reason, its project's backoffs and its audit history), one scrolling page.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};

use crate::clock::{self, Timestamp};
use crate::console::state::{State, View, reason_now};
use crate::console::theme::Theme;
use crate::snapshot::{ClaimState, ClaimView};

use super::common::{block, index_ranges, short_bytes};

/// The claim opened from Claims, or how to open one.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let Some((slot, c)) = state.detail_claim() else {
        let text = match state.claim_detail {
            Some((_, id)) => format!(
                "claim {id} is gone from its source (released, expired or finished); \
                 Esc goes back to Claims"
            ),
            None => "no claim selected: pick one in Claims and press Enter".to_string(),
        };
        let p = Paragraph::new(text)
            .style(theme.dim)
            .wrap(Wrap { trim: true })
            .block(block(" Claim detail ", theme));
        frame.render_widget(p, area);
        return;
    };
    let state_word = match c.state {
        ClaimState::Placed => "placed",
        ClaimState::Pending => "pending",
    };
    let title = format!(" claim {} {state_word} on {} ", c.shown_id(), slot.name);
    let mut lines = summary(state, c, theme);
    lines.extend(shares(c, theme));
    lines.extend(processes(state, c, theme));
    lines.extend(pending(c, theme));
    lines.extend(backoffs(state, c, theme));
    lines.extend(history(state, c, theme));
    let outer = block(title, theme);
    let inner = outer.inner(area);
    // Long reasons and forms wrap; the scroll stops where the last line shows.
    let width = usize::from(inner.width.max(1));
    let drawn: usize = lines.iter().map(|l| l.width().max(1).div_ceil(width)).sum();
    let top = state
        .cursor_of(View::ClaimDetail)
        .selected
        .min(drawn.saturating_sub(usize::from(inner.height)));
    frame.render_widget(
        Paragraph::new(lines)
            .block(outer)
            .wrap(Wrap { trim: false })
            .scroll((u16::try_from(top).unwrap_or(u16::MAX), 0)),
        area,
    );
}

/// `label value` with the label dimmed.
fn field(label: &str, value: String, style: Style, theme: &Theme) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!("{label:<9}"), theme.dim),
        Span::styled(value, style),
    ])
}

/// A section heading.
fn heading(text: String, theme: &Theme) -> Line<'static> {
    Line::styled(text, theme.header)
}

/// `2024-03-01 12:30:00 (in 5m0s)` or `(10m0s ago)`.
fn when(t: Timestamp, state: &State) -> String {
    let at = clock::date_time(t, &state.zone);
    if t > state.now {
        format!("{at} (in {})", clock::age(t.millis_since(state.now)))
    } else {
        format!("{at} ({} ago)", clock::age(state.now.millis_since(t)))
    }
}

/// Holder, project, pid, place, created, lease, form, reservation and use.
fn summary(state: &State, c: &ClaimView, theme: &Theme) -> Vec<Line<'static>> {
    let na = || "n/a".to_string();
    let mut out = vec![
        field(
            "holder",
            format!(
                "{}   project {}   pid {}",
                c.holder.clone().unwrap_or_else(na),
                c.project,
                c.request.pid.map_or_else(na, |p| p.to_string())
            ),
            theme.text,
            theme,
        ),
        field(
            "place",
            // The node and the devices it holds there, as ranges (`node-7:2-7`).
            c.node.as_ref().map_or_else(
                || "- (not placed)".into(),
                |n| {
                    let devices: Vec<u32> = c.shares.iter().map(|s| s.device).collect();
                    format!("{n}:{}", index_ranges(&devices))
                },
            ),
            theme.text,
            theme,
        ),
        field(
            "created",
            // Engines that give no start time leave it at 0: unknown.
            if c.created_at.0 == 0 {
                na()
            } else {
                when(c.created_at, state)
            },
            theme.text,
            theme,
        ),
    ];
    let lease = match (c.lease_expires_at, c.request.ttl) {
        (Some(t), ttl) => {
            let ttl = ttl.map_or(String::new(), |s| format!(", ttl {}", clock::age(s * 1000)));
            let word = if t > state.now { "expires" } else { "expired" };
            (format!("{word} {}{ttl}", when(t, state)), t <= state.now)
        }
        (None, _) => ("none (held until released)".into(), false),
    };
    out.push(field(
        "lease",
        lease.0,
        if lease.1 { theme.warn } else { theme.text },
        theme,
    ));
    out.push(field("form", c.form.clone(), theme.accent, theme));
    let used = c.memory_used.map_or_else(na, short_bytes);
    let mut flags = Vec::new();
    if c.over_limit {
        flags.push("OVER LIMIT");
    }
    if c.idle {
        flags.push("idle");
    }
    if c.infeasible {
        flags.push("infeasible");
    }
    if c.state == ClaimState::Pending {
        if let Some(start) = state
            .claim_detail
            .and_then(|(src, _)| super::preview::start_sentence(state, src, c))
        {
            out.push(field("start", start, theme.pending, theme));
        }
        // A pending claim holds nothing yet: 0 would read as a request for nothing.
        out.push(field(
            "reserved",
            "nothing while pending (the form says what it asks for)".into(),
            theme.dim,
            theme,
        ));
        return out;
    }
    out.push(Line::from(vec![
        Span::styled(format!("{:<9}", "reserved"), theme.dim),
        Span::styled(
            format!(
                "{} / {} GPU   used {used}  ",
                short_bytes(c.memory_reserved),
                c.compute_reserved
            ),
            if c.over_limit {
                theme.over_limit
            } else {
                theme.text
            },
        ),
        Span::styled(flags.join(" "), theme.warn),
    ]));
    out
}

/// One line per GPU the claim holds: its share there.
fn shares(c: &ClaimView, theme: &Theme) -> Vec<Line<'static>> {
    if c.shares.is_empty() {
        return Vec::new();
    }
    let node = c.node.clone().unwrap_or_default();
    let mut out = vec![heading(format!("Shares ({} GPU)", c.shares.len()), theme)];
    for s in &c.shares {
        out.push(Line::styled(
            format!(
                "  {node}:{}  {} memory  {} GPU  {} slots",
                s.device,
                short_bytes(s.memory),
                s.compute,
                s.slots
            ),
            theme.allocated,
        ));
    }
    out
}

/// The processes telemetry attributes to the claim.
fn processes(state: &State, c: &ClaimView, theme: &Theme) -> Vec<Line<'static>> {
    if c.state == ClaimState::Pending {
        return Vec::new();
    }
    let node = c.node.clone().unwrap_or_default();
    let mut out = vec![heading("Processes".into(), theme)];
    match state.detail_claim_processes() {
        None => out.push(Line::styled("  n/a (no telemetry for its GPUs)", theme.dim)),
        Some(ps) if ps.is_empty() => out.push(Line::styled(
            "  none seen on its GPUs (an idle reservation)",
            theme.idle,
        )),
        Some(ps) => {
            for (dev, p) in ps {
                let owner = p
                    .owner
                    .as_ref()
                    .map(|o| format!("  {o}"))
                    .unwrap_or_default();
                out.push(Line::styled(
                    format!(
                        "  pid {:<8} {:<16} {:>7}  on {node}:{dev}{owner}",
                        p.pid,
                        p.name.clone().unwrap_or_else(|| "?".into()),
                        p.used_memory.map_or_else(|| "n/a".into(), short_bytes),
                    ),
                    theme.used,
                ));
            }
        }
    }
    out
}

/// Every reason it is pending (one per node).
fn pending(c: &ClaimView, theme: &Theme) -> Vec<Line<'static>> {
    if c.state != ClaimState::Pending {
        return Vec::new();
    }
    let mut out = vec![heading(
        format!("Why pending ({} reasons)", c.pending_reasons.len()),
        theme,
    )];
    if c.pending_reasons.is_empty() {
        out.push(Line::styled("  the source gave no reason", theme.dim));
    }
    for r in &c.pending_reasons {
        out.push(Line::styled(format!("  {r}"), theme.warn));
    }
    out
}

/// The project's accounts that hold work back: backoffs (until when) and reasons.
fn backoffs(state: &State, c: &ClaimView, theme: &Theme) -> Vec<Line<'static>> {
    let mut out = vec![heading(format!("Project {} backoffs", c.project), theme)];
    let Some(p) = state.detail_claim_project() else {
        out.push(Line::styled(
            "  n/a (the source has no fair-share data)",
            theme.dim,
        ));
        return out;
    };
    let mut any = false;
    for r in &p.resources {
        let backed = r.backoff_until.filter(|t| *t > state.now);
        if backed.is_none() && r.reason.is_none() {
            continue;
        }
        any = true;
        let until = backed.map_or(String::new(), |t| {
            let interval = r.backoff_interval_s.map_or(String::new(), |i| {
                format!(", interval {}", clock::age(i * 1000))
            });
            format!(" backed off until {}{interval}", when(t, state))
        });
        let why = reason_now(r, state.now).map_or(String::new(), |w| format!(": {w}"));
        let text = format!("  {}{until}{why}", r.resource);
        out.push(Line::styled(
            text,
            if backed.is_some() {
                theme.warn
            } else {
                theme.text
            },
        ));
    }
    if !any {
        out.push(Line::styled("  none", theme.dim));
    }
    out
}

/// The audit events that concern the claim, oldest first; those on something else (its
/// GPU, its project) say what they were on.
fn history(state: &State, c: &ClaimView, theme: &Theme) -> Vec<Line<'static>> {
    let own = format!("claim {}", c.id);
    let events = state.detail_claim_events();
    let mut out = vec![heading(format!("Audit history ({})", events.len()), theme)];
    if events.is_empty() {
        out.push(Line::styled(
            "  none in the source's recent events",
            theme.dim,
        ));
    }
    for e in events {
        out.push(Line::from(vec![
            Span::styled(
                format!("  {} ", clock::date_time(e.at, &state.zone)),
                theme.dim,
            ),
            Span::styled(
                if e.target == own {
                    format!("{} by {}: ", e.action, e.actor)
                } else {
                    format!("{} {} by {}: ", e.action, e.target, e.actor)
                },
                theme.text,
            ),
            Span::styled(super::events::detail_words(e, &state.zone), theme.text),
        ]));
    }
    out
}
