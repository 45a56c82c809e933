//! The move overlay: pick the GPU a claim moves to.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Clear, Paragraph, Wrap};

use super::common::{block, model_label, popup, window};
use crate::console::state::{Mode, State};
use crate::console::theme::Theme;

/// The move target picker: the GPUs of every acting source, those the claim fits on first.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let Mode::Move(m) = &state.mode else { return };
    let r = popup(area, 72, 18);
    frame.render_widget(Clear, r);
    let blk = block(format!(" Move claim {} from {} ", m.id, m.from), theme);
    let inner = blk.inner(r);
    frame.render_widget(blk, r);
    // One line per GPU (never wrapped, so the selected row stays in the window); the
    // hint and any error wrap in the three lines below.
    let [list, foot] = Layout::vertical([Constraint::Min(1), Constraint::Length(3)]).areas(inner);
    let h = usize::from(list.height);
    let off = window(m.selected, 0, h, m.targets.len());
    let mut lines: Vec<Line> = m
        .targets
        .iter()
        .enumerate()
        .skip(off)
        .take(h)
        .map(|(i, row)| {
            if row.any {
                let style = if i == m.selected {
                    theme.selection
                } else {
                    theme.text
                };
                return Line::styled(row.free.clone(), style);
            }
            // Another source's GPU is named with its source: a move there is claim-then-release.
            let src = if row.source == m.source {
                String::new()
            } else {
                state
                    .sources
                    .get(row.source)
                    .map_or_else(String::new, |s| format!("{}/", s.name))
            };
            Line::styled(
                format!(
                    "{src}{}:{}  {}  {}{}",
                    row.node,
                    row.index,
                    model_label(&row.model, None),
                    row.free,
                    if row.fits {
                        ""
                    } else if row.too_small {
                        "  (too small)"
                    } else {
                        "  (too full)"
                    }
                ),
                if i == m.selected {
                    theme.selection
                } else if row.fits {
                    theme.text
                } else {
                    theme.dim
                },
            )
        })
        .collect();
    if m.targets.is_empty() {
        lines.push(Line::styled("no other GPU on this source", theme.dim));
    }
    let chain = m.flow.and_then(|id| state.flows.move_across(id));
    let progress = chain.map(|c| {
        let target = state.sources.get(c.target).map_or("?", |s| s.name.as_str());
        let mut text = match &c.claimed {
            Some((id, place)) => format!(
                "claimed {target}/{id} at {place}; releasing the old claim… (move {})",
                c.move_id
            ),
            None => format!("claiming on {target} first… (move {})", c.move_id),
        };
        for r in &c.refused {
            text = format!("{text} · refused: {r}");
        }
        text
    });
    frame.render_widget(Paragraph::new(lines), list);
    let mut foot_lines = vec![Line::styled(
        if let Some(p) = &progress {
            p.as_str()
        } else if m.sent && m.flow.is_some() {
            "claiming on the target source first…"
        } else if m.sent {
            "moving…"
        } else if m.holds > 1 {
            "↑/↓ j/k pick the first GPU (the next ones on its node follow) · Enter move · Esc cancel"
        } else {
            "↑/↓ j/k pick · Enter move · Esc cancel"
        },
        theme.dim,
    )];
    if let Some(e) = &m.error {
        foot_lines.push(Line::styled(e.clone(), theme.flash_error));
    }
    frame.render_widget(Paragraph::new(foot_lines).wrap(Wrap { trim: true }), foot);
}
