//! Why the selected Fair share project gets no work now, in words: the pane and the popup
//! draw these lines, and `update` scrolls the popup by how many they wrap to, so both
//! count the same lines.

use crate::clock::{self, Timestamp};
use crate::snapshot::ProjectResourceView;

use super::State;

/// How a piece of the reasons reads; the theme gives each its style.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhyTone {
    /// The project's name.
    Title,
    /// A resource's name.
    Header,
    /// A reason.
    Text,
    /// A backoff.
    Warn,
    /// Figures and remarks.
    Dim,
}

/// One line of the reasons: its pieces, each with its tone.
pub type WhyLine = Vec<(String, WhyTone)>;

/// A resource account's reason, its time left read from the one clock: a source words a
/// backoff as `backed off for 11m33s` when it answered, which a later draw would contradict
/// beside the time left to `backoff_until`; that part is worked out again from `now`.
pub fn reason_now(r: &ProjectResourceView, now: Timestamp) -> Option<String> {
    let why = r.reason.as_deref()?;
    let Some(rest) = why.strip_prefix("backed off for ") else {
        return Some(why.to_string());
    };
    // What follows the duration (a source may add words after it) is kept.
    let tail = rest.split_once(' ').map_or("", |(_, t)| t);
    let left = match r.backoff_until {
        Some(t) if t > now => format!("backed off for {}", clock::age(t.millis_since(now))),
        _ => "backoff ended".to_string(),
    };
    Some(if tail.is_empty() {
        left
    } else {
        format!("{left} {tail}")
    })
}

/// The reasons popup's size (width, height, borders included) on a terminal of `size`.
pub fn why_popup_size(size: (u16, u16)) -> (u16, u16) {
    (100.min(size.0), size.1.saturating_sub(2).max(6).min(size.1))
}

impl State {
    /// The selected project's share and each held-back account's reason and backoff,
    /// wrapped to `width` columns (None without a selected project).
    pub fn why_lines(&self, width: usize) -> Option<Vec<WhyLine>> {
        let (_, p) = self.selected_project().and_then(|k| self.project(k))?;
        let mut lines = vec![vec![
            (format!("{} ", p.name), WhyTone::Title),
            (
                format!(
                    "share {}, running {}, pending {}",
                    p.share, p.running, p.pending
                ),
                WhyTone::Dim,
            ),
        ]];
        let mut held = false;
        for r in &p.resources {
            let backed = r.backoff_until.filter(|t| *t > self.now);
            if backed.is_none() && r.reason.is_none() {
                continue;
            }
            held = true;
            let model = r.resource.strip_prefix("gpu:").unwrap_or(&r.resource);
            let mut spans = vec![(format!("{model}: "), WhyTone::Header)];
            if let Some(why) = reason_now(r, self.now) {
                spans.push((format!("{why} "), WhyTone::Text));
            }
            if let Some(t) = backed {
                let (at, left) = (
                    clock::date_time(t, &self.zone),
                    clock::age(t.millis_since(self.now)),
                );
                spans.push((
                    if r.reason.is_some() {
                        format!("(until {at}, in {left})")
                    } else {
                        format!("backed off until {at} (in {left})")
                    },
                    WhyTone::Warn,
                ));
            }
            lines.push(spans);
        }
        if !held {
            let text = if p.resources.is_empty() {
                "no per-resource accounts from this source"
            } else {
                "nothing holds it back: served when it has work"
            };
            lines.push(vec![(text.to_string(), WhyTone::Dim)]);
        }
        Some(lines.iter().flat_map(|l| wrap(l, width)).collect())
    }

    /// How far the reasons popup scrolls at the terminal's size: its lines past the first
    /// screenful (0 when they all fit), so that `k` after too many `j` moves at once.
    pub fn why_scroll_max(&self) -> u16 {
        let (w, h) = why_popup_size(self.size);
        let (w, h) = (w.saturating_sub(2), h.saturating_sub(2));
        let n = self.why_lines(usize::from(w)).map_or(0, |l| l.len());
        u16::try_from(n).unwrap_or(u16::MAX).saturating_sub(h)
    }
}

/// One line of toned words wrapped to `width` columns at spaces (a word longer than a
/// line is split), so that the pane can count its lines before drawing them.
fn wrap(spans: &[(String, WhyTone)], width: usize) -> Vec<WhyLine> {
    let width = width.max(1);
    let mut out: Vec<WhyLine> = vec![Vec::new()];
    let mut used = 0usize;
    for (text, tone) in spans {
        for word in text.split(' ').filter(|w| !w.is_empty()) {
            let mut word: Vec<char> = word.chars().collect();
            let gap = usize::from(used > 0);
            if used > 0 && used + gap + word.len() > width {
                out.push(Vec::new());
                used = 0;
            }
            while word.len() > width {
                let rest = word.split_off(width);
                if let Some(line) = out.last_mut() {
                    line.push((word.iter().collect::<String>(), *tone));
                }
                out.push(Vec::new());
                used = 0;
                word = rest;
            }
            if let Some(line) = out.last_mut() {
                // The gap takes the tone of the word before it, as the text was written.
                if let Some(prev) = line.last_mut().filter(|_| used > 0) {
                    prev.0.push(' ');
                    used += 1;
                }
                used += word.len();
                line.push((word.iter().collect::<String>(), *tone));
            }
        }
    }
    out
}
