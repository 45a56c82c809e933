//! The help overlay: every key action with its keys, in one or two columns, scrolling.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph};

use super::common::{block, popup};
use crate::console::keymap::{Context, KeyAction};
use crate::console::state::State;
use crate::console::theme::Theme;

/// The keys, generated from the keymap (mutating ones hidden when read-only).
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
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
    // Engine actions of the kinds present, and why the absent ones are absent.
    let mut kinds: Vec<_> = state.sources.iter().map(|s| s.kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    for kind in kinds.iter().filter(|_| !state.readonly) {
        for l in crate::sources::actions::help_lines(*kind) {
            lines.push(Line::styled(l, theme.dim));
        }
    }
    lines.push(Line::styled(
        ": commands: view names, claim ID (its detail), source NAME|all, sort COL, filter TEXT,",
        theme.dim,
    ));
    lines.push(Line::styled(
        ":   cordon, uncordon, reset PROJECT, act VERB [TARGET], quit",
        theme.dim,
    ));
    lines.push(Line::styled(
        ": handover STEP then STEP...: one confirmation, stops at the first failure; STEP: [SRC] VERB TARGET or claim [SRC] FLAGS",
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
