//! The claim form overlay: fields, the request as sent, the placement preview.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};

use super::common::{block, popup};
use crate::console::state::{FormField, FormStage, Mode, State};
use crate::console::theme::Theme;

/// The claim form: its fields, the request it makes, and where it is in its round trip.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let Mode::Form(f) = &state.mode else { return };
    let src = state.sources.get(f.source).map_or("?", |s| s.name.as_str());
    let mut lines = Vec::new();
    let mut what_if_at = None;
    for (i, field) in f.visible().into_iter().enumerate() {
        let value = match field {
            FormField::Kind => format!("◂ {} ▸", f.kind.label()),
            FormField::Wait => format!(
                "◂ {} ▸",
                if f.wait {
                    "yes (pending)"
                } else {
                    "no (refuse)"
                }
            ),
            other => {
                let v = f.field(other).to_string();
                if i == f.focus { format!("{v}▏") } else { v }
            }
        };
        let style = if i == f.focus {
            theme.selection
        } else {
            theme.text
        };
        lines.push(Line::from(vec![
            Span::styled(format!("{:<13}", field.label()), theme.dim),
            Span::styled(value, style),
        ]));
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        format!("request {}", f.draft().to_json(serde_json::Map::new())),
        theme.dim,
    ));
    match &f.stage {
        FormStage::Editing => lines.push(Line::styled(
            "Enter: show where it would go · Esc: cancel",
            theme.dim,
        )),
        FormStage::Planning => lines.push(Line::styled("asking for a placement…", theme.dim)),
        FormStage::Preview(p) => {
            lines.push(Line::styled(format!("would place at {p}"), theme.ok));
            // A remote endpoint's preview is planned on its last snapshot, here.
            if state
                .sources
                .get(f.source)
                .is_some_and(|s| s.kind == crate::sources::SourceKind::Gpuboard)
            {
                lines.push(Line::styled(
                    "(preview on the last snapshot; the endpoint re-checks when you claim)",
                    theme.dim,
                ));
            }
            what_if_at = Some(lines.len());
            lines.push(Line::styled(
                "Enter: claim it · edit to change · Esc: cancel",
                theme.accent,
            ));
        }
        FormStage::Submitting => {
            // Each earlier source's refusal, then the one asked now.
            for r in &f.refused {
                lines.push(Line::styled(format!("refused: {r}"), theme.flash_error));
            }
            lines.push(Line::styled(format!("claiming on {src}…"), theme.dim));
        }
    }
    if let Some(e) = &f.error {
        lines.push(Line::styled(e.clone(), theme.flash_error));
    }
    // What the claim would do takes the rows the screen leaves under the rest.
    let rows = |ls: &[Line]| -> usize { ls.iter().map(|l| l.width().div_ceil(70).max(1)).sum() };
    if let Some(at) = what_if_at {
        let room = usize::from(area.height.saturating_sub(2)).saturating_sub(rows(&lines));
        let mut what_if = super::preview::dialog_lines(&f.what_if, state, theme, room);
        while rows(&what_if) > room && !what_if.is_empty() {
            let fewer = what_if.len() - 1;
            what_if = super::preview::dialog_lines(&f.what_if, state, theme, fewer);
        }
        lines.splice(at..at, what_if);
    }
    let height = u16::try_from(rows(&lines) + 2).unwrap_or(u16::MAX).max(20);
    let r = popup(area, 72, height);
    frame.render_widget(Clear, r);
    let blk = block(format!(" Claim on {src} "), theme);
    let inner = blk.inner(r);
    frame.render_widget(blk, r);
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), inner);
}
