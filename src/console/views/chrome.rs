//! The frame around every view: the tab bar, the key hints and the status line.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};

use super::common::badge;
use crate::console::keymap::KeyAction;
use crate::console::state::{Mode, State, View, candidates, command_hint};
use crate::console::theme::Theme;

/// The tab bar: one tab per view, the current one marked; tighter where the terminal is
/// too narrow for the roomy one (80 columns hold all seven).
pub(super) fn tabs(frame: &mut Frame, area: Rect, state: &State, theme: &Theme) {
    let bar = |pad: &str| {
        let mut spans = vec![Span::styled(" gpuboard ", theme.title)];
        for (i, v) in View::ALL.iter().enumerate() {
            // The claim detail has no tab of its own: Claims stays marked.
            let style =
                if *v == state.view || (*v == View::Claims && state.view == View::ClaimDetail) {
                    theme.tab_active
                } else {
                    theme.tab
                };
            spans.push(Span::styled(
                format!("{pad}{} {} ", i + 1, v.title()),
                style,
            ));
        }
        spans
    };
    let mut spans = bar(" ");
    let width: usize = spans.iter().map(|s| s.content.chars().count()).sum();
    if width > usize::from(area.width) {
        spans = bar("");
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
            // The candidates for what is typed, as many as fit.
            let options = candidates(state, t);
            let tail = match options.as_slice() {
                [] => match command_hint(state, t) {
                    Some(what) => format!(" {what} · Esc cancel"),
                    None => " no such command · Esc cancel".to_string(),
                },
                [_] if !t.is_empty() => " Tab complete · Enter run".to_string(),
                many => {
                    let room = usize::from(area.width).saturating_sub(t.chars().count() + 4);
                    let mut list = String::new();
                    for o in many {
                        let o = o.rsplit(' ').next().unwrap_or(o);
                        if list.chars().count() + o.chars().count() + 1 > room {
                            list.push('…');
                            break;
                        }
                        list.push(' ');
                        list.push_str(o);
                    }
                    list
                }
            };
            let line = Line::from(vec![
                Span::styled(":", theme.accent),
                Span::styled(t.clone(), theme.text),
                Span::styled(format!("▏{tail}"), theme.dim),
            ]);
            frame.render_widget(Paragraph::new(line), area);
            return;
        }
        _ => {
            // The view's own actions first, then the ways out, then the rest.
            let mut acts = Vec::new();
            match state.view {
                View::Gpus => acts.extend([KeyAction::Open, KeyAction::Claim, KeyAction::Cordon]),
                View::Claims => acts.extend([
                    KeyAction::Claim,
                    KeyAction::Release,
                    KeyAction::Move,
                    KeyAction::Open,
                ]),
                View::Ledger => acts.push(KeyAction::ClearBackoff),
                View::Usage => {
                    acts.extend([KeyAction::UsageWindow, KeyAction::Open, KeyAction::Back]);
                }
                View::ClaimDetail => {
                    acts.extend([KeyAction::Back, KeyAction::Release, KeyAction::Move]);
                }
                _ => {}
            }
            if !state.view.problem_filters().is_empty() {
                acts.push(KeyAction::Problems);
            }
            acts.extend([
                KeyAction::Filter,
                KeyAction::Help,
                KeyAction::Quit,
                KeyAction::Command,
                KeyAction::SortNext,
                KeyAction::Freeze,
            ]);
            // Human names (`sort next`, not `sort_next`), as many whole hints as fit.
            let mut text = String::new();
            for a in acts
                .into_iter()
                .filter(|a| !(state.readonly && a.mutates()))
            {
                let hint = format!(
                    "{} {}",
                    state.keymap.first_key(a),
                    a.name().replace('_', " ")
                );
                let sep = if text.is_empty() { "" } else { " · " };
                if text.chars().count() + sep.len() + hint.chars().count() > usize::from(area.width)
                {
                    break;
                }
                text.push_str(sep);
                text.push_str(&hint);
            }
            text
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
        let used: usize = spans.iter().map(|s| s.content.chars().count()).sum();
        if used + f.text.chars().count() <= usize::from(area.width) {
            spans.push(Span::styled(f.text.clone(), style));
        } else {
            // Too long for the line: the whole message opens in a pane above it.
            spans.push(Span::styled("message above · Esc dismisses", style));
            flash_pane(frame, area, &f.text, style, theme);
        }
    }
    frame.render_widget(Paragraph::new(Line::from(spans)).style(theme.status), area);
}

/// A long message, wrapped, in a pane just above the status line (over the body's last
/// rows, so the lists' page size does not change while it shows).
fn flash_pane(frame: &mut Frame, status: Rect, text: &str, style: Style, theme: &Theme) {
    let inner_w = usize::from(status.width.saturating_sub(2)).max(1);
    let lines = text.chars().count().div_ceil(inner_w).clamp(1, 6);
    let h = u16::try_from(lines).unwrap_or(6).saturating_add(2);
    let h = h.min(status.y.saturating_sub(1));
    if h < 3 {
        return;
    }
    let r = Rect {
        x: status.x,
        y: status.y - h,
        width: status.width,
        height: h,
    };
    frame.render_widget(Clear, r);
    frame.render_widget(
        Paragraph::new(Span::styled(text.to_string(), style))
            .wrap(Wrap { trim: true })
            .block(super::common::block(" Message ", theme)),
        r,
    );
}
