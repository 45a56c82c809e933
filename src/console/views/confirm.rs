//! The one confirmation overlay for every mutating action: what will happen, the id to
//! type where asked, Cancel and OK; and the result pane of a hand-over (each step done,
//! FAILED with the source's words, under way, or not run).

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};

use super::common::{block, popup};
use crate::console::state::{Mode, State};
use crate::console::theme::Theme;
use crate::sources::handover::StepResult;

/// The confirmation dialog, Cancel focused until the operator moves to OK.
pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let Mode::Confirm(c) = &state.mode else {
        return;
    };
    // A hand-over's steps are long lines: a wider dialog, each wrapped line counted.
    let width: u16 = if c.steps().is_empty() { 64 } else { 80 };
    let inner_w = usize::from(area.width.min(width).saturating_sub(2)).max(1);
    let body_rows: usize = c
        .body
        .iter()
        .map(|l| l.chars().count().div_ceil(inner_w).max(1))
        .sum();
    // The typed line and the error wrap too (a GPU's `node:index` typed is long).
    let rows_of = |n: usize| n.div_ceil(inner_w).max(1);
    let type_rows = c.type_to_confirm.as_ref().map_or(0, |w| {
        1 + rows_of(format!("Type {w} to confirm: {}_", c.typed).chars().count())
    });
    let error_rows = c.error.as_ref().map_or(0, |e| rows_of(e.chars().count()));
    // The preview takes what the screen leaves once the rest (and the buttons) fit.
    let fixed = body_rows + type_rows + error_rows + 5;
    let room = usize::from(area.height).saturating_sub(fixed + 1);
    let mut preview = super::preview::dialog_lines(&c.preview, state, theme, room);
    let mut preview_rows: usize = preview.iter().map(|l| rows_of(l.width())).sum();
    while preview_rows > room && !preview.is_empty() {
        // Long lines wrap: drop from the end until the wrapped rows fit too.
        preview =
            super::preview::dialog_lines(&c.preview, state, theme, preview.len().saturating_sub(1));
        preview_rows = preview.iter().map(|l| rows_of(l.width())).sum();
    }
    let preview_rows = if preview.is_empty() {
        0
    } else {
        preview_rows + 1
    };
    let r = popup(
        area,
        width,
        u16::try_from(fixed + preview_rows).unwrap_or(u16::MAX),
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
    if !preview.is_empty() {
        lines.push(Line::raw(""));
        lines.extend(preview);
    }
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
        Span::styled(format!(" [ {} ] ", c.ok_label()), ok),
    ]));
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }), inner);
}

/// The hand-over's result pane: one line per step, then the outcome.
pub(super) fn draw_handover(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let Some((_, run)) = state.flows.handover() else {
        return;
    };
    let total = run.steps.len();
    let title = match (run.current(), run.failed_at()) {
        (Some(i), _) => format!(" Hand-over: step {} of {total} under way ", i + 1),
        (None, Some(i)) => format!(" Hand-over: STOPPED at step {} of {total} ", i + 1),
        (None, None) => format!(" Hand-over: done, {total} steps "),
    };
    let mut lines: Vec<Line> = Vec::new();
    for (n, (plan, result)) in run.steps.iter().zip(&run.results).enumerate() {
        let source = state
            .sources
            .get(plan.source)
            .map_or("?", |s| s.name.as_str());
        let (text, style) = match result {
            Some(r @ StepResult::Done(_)) => (r.line(source, &plan.action), theme.ok),
            Some(r @ StepResult::Failed(_)) => (r.line(source, &plan.action), theme.critical),
            Some(r @ StepResult::NotRun) => (r.line(source, &plan.action), theme.dim),
            None => (
                format!(
                    "{source}: {} {}: under way...",
                    plan.action.verb(),
                    plan.action.target()
                ),
                theme.warn,
            ),
        };
        lines.push(Line::styled(format!("{}. {text}", n + 1), style));
    }
    lines.push(Line::raw(""));
    if run.failed_at().is_some() {
        lines.push(Line::styled(
            "Steps after the failure were not sent: what earlier steps freed is not claimed.",
            theme.warn,
        ));
    }
    lines.push(Line::styled(
        "Esc closes (a run under way goes on); :handover reopens; Events has each step",
        theme.dim,
    ));
    // Wrapped lines: each takes its length over the inner width, at least one row.
    let inner_w = usize::from(area.width.min(76).saturating_sub(2)).max(1);
    let rows: usize = lines
        .iter()
        .map(|l| l.width().div_ceil(inner_w).max(1))
        .sum();
    let r = popup(area, 76, u16::try_from(rows + 2).unwrap_or(u16::MAX));
    frame.render_widget(Clear, r);
    let blk = block(title, theme);
    let inner = blk.inner(r);
    frame.render_widget(blk, r);
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }), inner);
}
