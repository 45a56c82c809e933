//! The one confirmation overlay for every mutating action: what will happen, the id to
//! type where asked, Cancel and OK.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};

use super::common::{block, popup};
use crate::console::state::{Mode, State};
use crate::console::theme::Theme;

/// The confirmation dialog, Cancel focused until the operator moves to OK.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let Mode::Confirm(c) = &state.mode else {
        return;
    };
    let r = popup(
        area,
        64,
        u16::try_from(
            c.body.len()
                + 2 * usize::from(c.type_to_confirm.is_some())
                + usize::from(c.error.is_some()),
        )
        .unwrap_or(4)
        .saturating_add(5),
    );
    frame.render_widget(Clear, r);
    let blk = block(format!(" {} ", c.title), theme);
    let inner = blk.inner(r);
    frame.render_widget(blk, r);
    let mut lines: Vec<Line> = c
        .body
        .iter()
        .map(|l| Line::styled(l.clone(), theme.text))
        .collect();
    if let Some(want) = &c.type_to_confirm {
        lines.push(Line::raw(""));
        lines.push(Line::from(vec![
            Span::styled(format!("Type {want} to confirm: "), theme.warn),
            Span::styled(format!("{}_", c.typed), theme.accent),
        ]));
    }
    if let Some(e) = &c.error {
        lines.push(Line::styled(e.clone(), theme.critical));
    }
    lines.push(Line::raw(""));
    let (cancel, ok) = if c.ok_focused {
        (theme.text, theme.selection)
    } else {
        (theme.selection, theme.text)
    };
    lines.push(Line::from(vec![
        Span::styled(" [ Cancel ] ", cancel),
        Span::raw("   "),
        Span::styled(format!(" [ {} ] ", c.action.verb()), ok),
    ]));
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }), inner);
}
