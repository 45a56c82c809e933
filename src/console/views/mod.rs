//! Drawing: reads the state and the theme, never the clock or the network. Only the
//! rows in view are built, so a fleet of thousands of devices draws in the same time as
//! a screenful. One file per view and per overlay; `common` holds what they share.

mod by_gpu;
mod charts;
mod chrome;
mod claim_detail;
mod claims;
mod common;
mod confirm;
mod detail;
mod events;
mod fairshare;
mod fleet_map;
mod form;
mod gpus;
mod help;
mod movepick;
mod overview;
mod preview;
mod rewind;
mod sparklines;
mod usage;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::widgets::{Block, Paragraph, Wrap};

use super::state::{Mode, State, View};
use super::theme::Theme;
use super::update::BANNER_ROWS;

pub use common::{badge, place_label, short_bytes};

/// Smallest size the views are drawn at; below it a notice is shown.
pub const MIN_SIZE: (u16, u16) = (40, 8);

/// Draws the whole screen: the live state, or the rewound one under its banner.
pub fn draw(frame: &mut Frame, state: &State, theme: &Theme) {
    let area = frame.area();
    match &state.rewind {
        Some(r) if area.width >= MIN_SIZE.0 && area.height >= MIN_SIZE.1 + BANNER_ROWS => {
            let [banner, below] =
                Layout::vertical([Constraint::Length(BANNER_ROWS), Constraint::Min(1)]).areas(area);
            draw_in(frame, below, &r.shown, theme);
            rewind::banner(frame, banner, state, r, theme);
        }
        // Never the live state without its banner: too small to show what is rewound.
        Some(_) => {
            let p = Paragraph::new(format!(
                "gpuboard: REWIND; terminal too small ({}x{}); needs {}x{} (G returns to live)",
                area.width,
                area.height,
                MIN_SIZE.0,
                MIN_SIZE.1 + BANNER_ROWS
            ))
            .style(theme.warn)
            .wrap(Wrap { trim: true });
            frame.render_widget(Block::default().style(theme.text), area);
            frame.render_widget(p, area);
        }
        None => draw_in(frame, area, state, theme),
    }
    if let Mode::RewindTo(text) = &state.mode {
        rewind::prompt(frame, area, state, text, theme);
    }
}

/// Draws the view alone, without the tabs, hints and status line: what `gpuboard show`
/// prints.
pub fn draw_body(frame: &mut Frame, state: &State, theme: &Theme) {
    let area = frame.area();
    frame.render_widget(Block::default().style(theme.text), area);
    draw_view(frame, area, state, theme);
}

/// Draws the state's current view in `body`.
fn draw_view(frame: &mut Frame, body: ratatui::layout::Rect, state: &State, theme: &Theme) {
    match state.view {
        View::Overview => overview::draw(frame, body, state, theme),
        View::Gpus if state.physical.by_gpu => by_gpu::draw(frame, body, state, theme),
        View::Gpus => gpus::draw(frame, body, state, theme),
        View::Claims => claims::draw(frame, body, state, theme),
        View::Ledger => fairshare::draw(frame, body, state, theme),
        View::Detail => detail::draw(frame, body, state, theme),
        View::Events => events::draw(frame, body, state, theme),
        View::ClaimDetail => claim_detail::draw(frame, body, state, theme),
        View::Usage => usage::draw(frame, body, state, theme),
    }
}

/// Draws one state's views in `area`.
fn draw_in(frame: &mut Frame, area: ratatui::layout::Rect, state: &State, theme: &Theme) {
    frame.render_widget(Block::default().style(theme.text), area);
    if area.width < MIN_SIZE.0 || area.height < MIN_SIZE.1 {
        let p = Paragraph::new(format!(
            "gpuboard: terminal too small ({}x{}); needs {}x{}",
            area.width, area.height, MIN_SIZE.0, MIN_SIZE.1
        ))
        .style(theme.warn)
        .wrap(Wrap { trim: true });
        frame.render_widget(p, area);
        return;
    }
    let hints = area.height >= 12;
    let [tabs, body, hint, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(u16::from(hints)),
        Constraint::Length(1),
    ])
    .areas(area);
    chrome::tabs(frame, tabs, state, theme);
    draw_view(frame, body, state, theme);
    if hints {
        chrome::hints(frame, hint, state, theme);
    }
    chrome::status(frame, status, state, theme);
    match &state.mode {
        Mode::Help => help::draw(frame, area, state, theme),
        Mode::Form(_) => form::draw(frame, area, state, theme),
        Mode::Confirm(_) => confirm::draw(frame, area, state, theme),
        Mode::Move(_) => movepick::draw(frame, area, state, theme),
        Mode::Handover => confirm::draw_handover(frame, area, state, theme),
        Mode::Why(scroll) => fairshare::draw_why(frame, area, state, theme, *scroll),
        _ => {}
    }
}
