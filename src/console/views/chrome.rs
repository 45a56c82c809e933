//! The frame around every view: the tab bar, the key hints and the status line.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::common::badge;
use crate::console::keymap::KeyAction;
use crate::console::state::{Mode, State, View};
use crate::console::theme::Theme;

/// The tab bar: one tab per view, the current one marked.
pub(super) fn tabs(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let mut spans = vec![Span::styled(" gpuboard ", theme.title)];
    for (i, v) in View::ALL.iter().enumerate() {
        let style = if *v == state.view {
            theme.tab_active
        } else {
            theme.tab
        };
        spans.push(Span::styled(format!(" {} {} ", i + 1, v.title()), style));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// The key hints for the view (or the line being typed).
pub(super) fn hints(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let text = match &state.mode {
        Mode::Filter(t) => {
            let line = Line::from(vec![
                Span::styled("/", theme.accent),
                Span::styled(t.clone(), theme.text),
                Span::styled("▏ Enter keep · Esc clear", theme.dim),
            ]);
            frame.render_widget(Paragraph::new(line), area);
            return;
        }
        Mode::Command(t) => {
            let line = Line::from(vec![
                Span::styled(":", theme.accent),
                Span::styled(t.clone(), theme.text),
                Span::styled("▏ Tab complete · Enter run · Esc cancel", theme.dim),
            ]);
            frame.render_widget(Paragraph::new(line), area);
            return;
        }
        _ => {
            let mut acts = vec![KeyAction::Help, KeyAction::Filter, KeyAction::Command];
            match state.view {
                View::Gpus => acts.extend([KeyAction::Open, KeyAction::Claim, KeyAction::Cordon]),
                View::Claims => acts.extend([
                    KeyAction::Claim,
                    KeyAction::Release,
                    KeyAction::Move,
                    KeyAction::Open,
                ]),
                View::Ledger => acts.push(KeyAction::ClearBackoff),
                _ => {}
            }
            acts.extend([KeyAction::SortNext, KeyAction::Freeze, KeyAction::Quit]);
            acts.into_iter()
                .filter(|a| !(state.readonly && a.mutates()))
                .map(|a| format!("{} {}", state.keymap.first_key(a), a.name()))
                .collect::<Vec<_>>()
                .join(" · ")
        }
    };
    frame.render_widget(Paragraph::new(Span::styled(text, theme.dim)), area);
}

/// The status line: sources' health, freeze, read-only and the last message.
pub(super) fn status(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let mut spans = Vec::new();
    let shown = match state.source_filter.and_then(|i| state.sources.get(i)) {
        Some(s) => s.name.clone(),
        None => format!("all {}", state.sources.len()),
    };
    spans.push(Span::styled(format!("[{shown}] "), theme.accent));
    for s in state.shown_sources().map(|(_, s)| s) {
        let (b, style) = badge(s, state.now, state.refresh_ms, theme);
        spans.push(Span::styled(format!("{} ", s.name), theme.status));
        spans.push(Span::styled(b, style));
        spans.push(Span::raw(" "));
    }
    if state.frozen {
        spans.push(Span::styled(" FROZEN ", theme.stale));
        spans.push(Span::raw(" "));
    }
    if state.readonly {
        spans.push(Span::styled("READ-ONLY ", theme.warn));
    }
    if let Some(f) = &state.flash {
        let style = if f.error {
            theme.flash_error
        } else {
            theme.flash_info
        };
        spans.push(Span::styled(f.text.clone(), style));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)).style(theme.status), area);
}
