//! What will happen, in the console's words: the preview a dialog shows of its action
//! (`Preview::consequences`, the words `--dry-run` prints, with only the projects whose
//! debt the action changes), and a waiting claim's expected start (`ExpectedStart::short`
//! in lists, `ExpectedStart::sentence` in the claim detail), or an engine's own estimate
//! labelled as the engine's.

use ratatui::text::Line;

use crate::clock::Timestamp;
use crate::console::state::{DialogPreview, State};
use crate::console::theme::Theme;
use crate::snapshot::{ClaimState, ClaimView};
use crate::wire::forecast::{Forecast, Preview};

/// A debt change smaller than this (instance-seconds) is not worth a line in a dialog.
const DEBT_SHOWN: f64 = 0.5;

/// Times further ahead than this are written with their date.
const DATED_AFTER_MS: u64 = 20 * 3_600_000;

/// `HH:MM` in the operator's zone, or `YYYY-MM-DD HH:MM` for a time more than 20 hours
/// from `now` (an engine may expect a start a year out).
pub(super) fn hh_mm(t: Timestamp, now: Timestamp, zone: &jiff::tz::TimeZone) -> String {
    let far = t.millis_since(now).max(now.millis_since(t)) > DATED_AFTER_MS;
    let form = if far { "%Y-%m-%d %H:%M" } else { "%H:%M" };
    i64::try_from(t.0)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || t.0.to_string(),
            |ts| ts.to_zoned(zone.clone()).strftime(form).to_string(),
        )
}

/// A waiting claim's expected start in a few columns (`~14m (8-31m)`, `now`, `unknown`,
/// `Slurm ~14m` for an engine's own estimate); `None` when its source forecast none.
pub(super) fn start_short(state: &State, source: usize, c: &ClaimView) -> Option<String> {
    let forecast = live_forecast(state, source, c)?;
    let e = forecast.of(c.id)?;
    let short = e.short(state.now);
    Some(match &forecast.engine {
        Some(engine) => format!("{engine} {short}"),
        None => short,
    })
}

/// A waiting claim's expected start in a sentence: gpuboard's forecast ("expected to start
/// ~03:40 (03:34-03:58) on node-b:5 when claim 17 ends; ..."), or the engine's own
/// estimate labelled as such ("Slurm expects 03:40"); `None` when its source gave none.
pub(super) fn start_sentence(state: &State, source: usize, c: &ClaimView) -> Option<String> {
    let forecast = live_forecast(state, source, c)?;
    let e = forecast.of(c.id)?;
    let clock = |t: Timestamp| hh_mm(t, state.now, &state.zone);
    Some(match (&forecast.engine, e.start) {
        (Some(engine), Some(b)) => format!(
            "{engine} expects {} ({engine}'s own estimate; gpuboard does not forecast this \
             source)",
            clock(b.p50)
        ),
        (Some(engine), None) => format!("{engine} gives no start time for it"),
        (None, _) => e.sentence(&clock),
    })
}

/// The forecast of a waiting claim's source; none for a claim shown as it was (rewound:
/// the forecast is of the present).
fn live_forecast<'a>(state: &'a State, source: usize, c: &ClaimView) -> Option<&'a Forecast> {
    let slot = state.sources.get(source)?;
    if c.state != ClaimState::Pending || slot.rewound {
        return None;
    }
    slot.forecast.last.as_ref()
}

/// The lines a dialog shows of its preview, at most `room` of them (the last then says
/// how many more there are): a heading, then what follows at once and in the next hour.
pub(super) fn dialog_lines(
    p: &DialogPreview,
    state: &State,
    theme: &Theme,
    room: usize,
) -> Vec<Line<'static>> {
    let mut lines = match p {
        _ if room == 0 => return Vec::new(),
        DialogPreview::Unasked | DialogPreview::NotOffered => return Vec::new(),
        DialogPreview::Asking => vec![Line::styled("previewing…", theme.dim)],
        DialogPreview::Unavailable(why) => vec![Line::styled(why.clone(), theme.dim)],
        DialogPreview::Shown(p) => {
            let shown = changed_debts(p);
            let clock = |t: Timestamp| hh_mm(t, state.now, &state.zone);
            let style = if p.refused.is_some() {
                theme.critical
            } else {
                theme.text
            };
            std::iter::once(Line::styled(
                "What follows (the source's preview):",
                theme.header,
            ))
            .chain(shown.consequences(state.now, &clock).into_iter().map(|l| {
                // The dialog trims leading blanks when it wraps: items keep a mark.
                match l.strip_prefix("  ") {
                    Some(item) => Line::styled(format!("· {item}"), style),
                    None => Line::styled(l, theme.dim),
                }
            }))
            .collect()
        }
    };
    if lines.len() > room {
        let more = lines.len() + 1 - room;
        lines.truncate(room - 1);
        lines.push(Line::styled(
            format!("… {more} more lines (--dry-run on the command line shows all)"),
            theme.dim,
        ));
    }
    lines
}

/// The preview with only the projects whose debt the action changes (now or in an hour).
fn changed_debts(p: &Preview) -> Preview {
    let mut shown = p.clone();
    shown.debts.retain(|d| {
        (d.after_step - d.before).abs() >= DEBT_SHOWN
            || (d.in_an_hour - d.in_an_hour_without).abs() >= DEBT_SHOWN
    });
    shown
}
