//! The rewind banner (REWIND, the time shown, how far behind live, what each source
//! shows) and the prompt that asks for a time.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph};

use crate::clock::{age, date_time};
use crate::console::state::{Rewind, Shown, State};
use crate::console::theme::Theme;
use crate::console::time::short_time;

/// Two lines over the rewound views: the time shown and the keys; then each source's
/// state (shown as of when, or where its history begins).
pub(super) fn banner(frame: &mut Frame, area: Rect, live: &State, r: &Rewind, theme: &Theme) {
    let zone = live.zone.iana_name().unwrap_or("local");
    let behind = r.behind(live.now);
    let play = if r.playing {
        format!("▶ {}x · space pauses", r.speed_x())
    } else {
        format!("⏸ space plays {}x", r.speed_x())
    };
    let mut spans = vec![
        Span::styled(
            " ◀◀ REWIND ",
            theme
                .critical
                .add_modifier(Modifier::REVERSED | Modifier::BOLD),
        ),
        Span::styled(
            format!(" {} {zone} ", date_time(r.at, &live.zone)),
            theme.title.add_modifier(Modifier::BOLD),
        ),
        Span::styled(
            if behind < 1_000 {
                "· at live ".to_string()
            } else {
                format!("· {} behind live ", age(behind))
            },
            theme.warn,
        ),
    ];
    // The keys, as many as fit.
    let mut used: usize = spans.iter().map(|s| s.content.chars().count()).sum();
    for hint in [
        "· G live ".to_string(),
        format!("· {play} "),
        "· }{ changes ".to_string(),
        "· ][ 5 s ".to_string(),
        "· g time".to_string(),
    ] {
        let n = hint.chars().count();
        if used + n > usize::from(area.width) {
            break;
        }
        used += n;
        spans.push(Span::styled(hint, theme.dim));
    }
    let first = Line::from(spans);
    let second = Line::from(source_spans(live, r, theme, usize::from(area.width)));
    frame.render_widget(Clear, area);
    frame.render_widget(Paragraph::new(vec![first, second]), area);
}

/// What each source shows, as many as fit: those not shown first (they need saying).
fn source_spans<'a>(live: &State, r: &Rewind, theme: &Theme, width: usize) -> Vec<Span<'a>> {
    let name = |i: usize| live.sources.get(i).map_or("?", |s| s.name.as_str());
    let mut missing = Vec::new();
    let mut shown = Vec::new();
    let mut loading = 0;
    for (i, (s, _)) in r.sources.iter().enumerate() {
        match s {
            Shown::Loading => loading += 1,
            Shown::At(t) => shown.push(format!(
                "{} as of {}",
                name(i),
                short_time(*t, live.now, &live.zone)
            )),
            Shown::Before(from) => missing.push(format!(
                "{}: history begins {}",
                name(i),
                date_time(*from, &live.zone)
            )),
            Shown::NoHistory => missing.push(format!("{}: no history for this source", name(i))),
            Shown::Failed(e) => missing.push(format!("{}: history unreadable: {e}", name(i))),
        }
    }
    let mut spans = vec![Span::raw(" ")];
    let mut used = 1;
    let mut push = |text: String, style, spans: &mut Vec<Span<'a>>| -> bool {
        let n = text.chars().count() + 3;
        if used + n > width {
            spans.push(Span::styled("…", theme.dim));
            return false;
        }
        used += n;
        spans.push(Span::styled(text, style));
        spans.push(Span::styled(" · ", theme.dim));
        true
    };
    if loading > 0 {
        push(format!("{loading} loading"), theme.dim, &mut spans);
    }
    for m in missing {
        if !push(m, theme.warn, &mut spans) {
            return spans;
        }
    }
    if shown.len() > 3 {
        push(
            format!("{} sources shown as of then", shown.len()),
            theme.ok,
            &mut spans,
        );
    } else {
        for s in shown {
            if !push(s, theme.ok, &mut spans) {
                return spans;
            }
        }
    }
    if spans.len() > 1 && spans.last().is_some_and(|s| s.content == " · ") {
        spans.pop();
    }
    spans
}

/// The line asking for the time, over the status line.
pub(super) fn prompt(frame: &mut Frame, area: Rect, state: &State, text: &str, theme: &Theme) {
    let Some(y) = (area.y + area.height).checked_sub(1) else {
        return;
    };
    let line_area = Rect {
        x: area.x,
        y,
        width: area.width,
        height: 1,
    };
    let error = state
        .flash
        .as_ref()
        .filter(|f| f.error)
        .map(|f| f.text.clone());
    let tail = match error {
        Some(e) => format!("▏ {e}"),
        None => "▏ 03:12 · -10m · 2026-11-25 03:12:30 · Enter go · Esc cancel".to_string(),
    };
    let line = Line::from(vec![
        Span::styled("rewind to: ", theme.accent.add_modifier(Modifier::BOLD)),
        Span::styled(text.to_string(), theme.text),
        Span::styled(tail, theme.dim),
    ]);
    frame.render_widget(Clear, line_area);
    frame.render_widget(Paragraph::new(line).style(theme.status), line_area);
}
