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
    // Lines longer than the popup wrap (under a hanging indent), never cut: at 80
    // columns a cut line loses what a key does. Two columns when one does not fit and
    // the popup is wide enough.
    let room = usize::from(r.width.saturating_sub(2));
    let rows = usize::from(r.height.saturating_sub(2));
    let mut lines = help_lines(state, theme, room);
    let two_columns = r.width >= 122 && lines.len() > rows;
    if two_columns {
        lines = help_lines(state, theme, room / 2);
    }
    let blk = block(" Help (? or Esc closes, j/k scroll) ", theme);
    let inner = blk.inner(r);
    frame.render_widget(blk, r);
    if two_columns {
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

/// The help's lines, wrapped to `width` columns.
fn help_lines(state: &State, theme: &Theme, width: usize) -> Vec<Line<'static>> {
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
            let keys = format!("{:<14}", state.keymap.keys_of(*a));
            let indent = keys.chars().count();
            for (i, part) in wrapped(a.help(), width.saturating_sub(indent))
                .into_iter()
                .enumerate()
            {
                let head = if i == 0 {
                    keys.clone()
                } else {
                    " ".repeat(indent)
                };
                lines.push(Line::from(vec![
                    Span::styled(head, theme.accent),
                    Span::styled(part, theme.text),
                ]));
            }
        }
    }
    let mut note = |text: &str, style| {
        for (i, part) in wrapped(text, width.saturating_sub(2))
            .into_iter()
            .enumerate()
        {
            let part = if i == 0 { part } else { format!("  {part}") };
            lines.push(Line::styled(part, style));
        }
    };
    if state.readonly {
        note(
            "read-only: claim, release, move, cordon and reset are off",
            theme.warn,
        );
    }
    // Engine actions of the kinds present, and why the absent ones are absent.
    let mut kinds: Vec<_> = state.sources.iter().map(|s| s.kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    for kind in kinds.iter().filter(|_| !state.readonly) {
        for l in crate::sources::actions::help_lines(*kind) {
            note(&l, theme.dim);
        }
    }
    note(
        ": commands: view names, gpu NODE:INDEX (its detail), claim ID (its detail), \
         source NAME|all, sort COL, filter TEXT, quit",
        theme.dim,
    );
    note(
        ": acting on what is named (else the selection): cordon NODE:INDEX, uncordon \
         NODE:INDEX, release ID, move ID [NODE:INDEX], reset PROJECT, act VERB [TARGET]",
        theme.dim,
    );
    note(
        ": handover STEP then STEP...: one confirmation, stops at the first failure; \
         STEP: [SRC] VERB TARGET or claim [SRC] FLAGS",
        theme.dim,
    );
    lines
}

/// `text` in lines of at most `width` columns, broken at spaces (a longer word is split).
fn wrapped(text: &str, width: usize) -> Vec<String> {
    let width = width.max(8);
    let mut out: Vec<String> = vec![String::new()];
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let mut word: Vec<char> = word.chars().collect();
        while let Some(line) = out.last_mut() {
            let used = line.chars().count();
            let gap = usize::from(used > 0);
            if used + gap + word.len() <= width {
                if gap == 1 {
                    line.push(' ');
                }
                line.extend(word.iter());
                break;
            }
            if used > 0 {
                out.push(String::new());
                continue;
            }
            let rest = word.split_off(width);
            line.extend(word.iter());
            out.push(String::new());
            word = rest;
        }
    }
    out
}
