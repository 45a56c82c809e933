//! The Usage view's state: the window (1 h, 24 h, 7 d, ending now or at the rewound time),
//! what each source answered for it (`GET /v1/history/report`), and the projects, or one
//! project's claims, summed over the sources that answered. Asks are made by
//! `update::usage`, one at a time per source; drawing only reads what came back.

use crate::accounting::usage::ClaimGpuTime;
use crate::accounting::{Ask, ByShare, Figures, GpuSeconds, GpuTime, IdleRule};
use crate::clock::Timestamp;
use crate::console::lists::{ListState, UsageColumn, words_match};

use super::State;

/// The live window's end moves by whole minutes, so a live Usage view asks at most once a
/// minute.
pub const USAGE_STEP_MS: u64 = 60_000;

/// Lines under the Usage table for the totals and the sources that did not answer (none
/// when the body is too short to spare them).
pub fn notes_height(body: u16) -> u16 {
    if body >= 10 { 3 } else { 0 }
}

/// How far back the Usage view looks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum UsageWindow {
    /// The last hour.
    Hour,
    /// The last 24 hours.
    #[default]
    Day,
    /// The last 7 days.
    Week,
}

impl UsageWindow {
    /// Its length, ms.
    pub fn ms(self) -> u64 {
        match self {
            UsageWindow::Hour => 3_600_000,
            UsageWindow::Day => 24 * 3_600_000,
            UsageWindow::Week => 7 * 24 * 3_600_000,
        }
    }

    /// As the title shows it.
    pub fn label(self) -> &'static str {
        match self {
            UsageWindow::Hour => "1 h",
            UsageWindow::Day => "24 h",
            UsageWindow::Week => "7 d",
        }
    }

    /// The next one the window key cycles to.
    #[must_use]
    pub fn next(self) -> UsageWindow {
        match self {
            UsageWindow::Hour => UsageWindow::Day,
            UsageWindow::Day => UsageWindow::Week,
            UsageWindow::Week => UsageWindow::Hour,
        }
    }
}

/// One window: its length and its end; what an ask is for and what an answer answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageKey {
    /// Its length.
    pub window: UsageWindow,
    /// Its end.
    pub to: Timestamp,
}

impl UsageKey {
    /// The live window ending at `now`, its end on the next whole minute.
    pub fn live(window: UsageWindow, now: Timestamp) -> UsageKey {
        UsageKey {
            window,
            to: Timestamp(now.0.div_ceil(USAGE_STEP_MS) * USAGE_STEP_MS),
        }
    }

    /// Its start.
    pub fn from(self) -> Timestamp {
        Timestamp(self.to.0.saturating_sub(self.window.ms()))
    }

    /// The report asked for it, with the default idle rule.
    pub fn ask(self) -> Ask {
        Ask {
            from: self.from(),
            to: self.to,
            idle: IdleRule::default(),
            pending_ms: crate::accounting::PENDING_MS,
        }
    }
}

/// What one source said for a window.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum SourceUsage {
    /// Nothing yet.
    #[default]
    Unasked,
    /// Its GPU time over the window.
    Shown {
        /// Where its part of the window begins: later than asked when its history does.
        from: Timestamp,
        /// The GPU time.
        usage: Box<GpuTime>,
    },
    /// The window is wholly before its history (`None`: it records no history).
    Before(Option<Timestamp>),
    /// It keeps no history (an engine nobody records, the demo, the embedded scheduler).
    NoHistory,
    /// Its report could not be read, in its words.
    Failed(String),
}

/// One source's part of the Usage view.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceAnswer {
    /// The window its answer is for (none: nothing came yet).
    pub key: Option<UsageKey>,
    /// What it said.
    pub said: SourceUsage,
    /// The window asked and not yet answered: one ask at a time per source.
    pub asked: Option<UsageKey>,
}

/// One project's GPU time, summed over the sources.
#[derive(Clone, Debug, PartialEq)]
pub struct UsageProject {
    /// The project.
    pub project: String,
    /// Claims it held in the window.
    pub claims: u32,
    /// Its figures.
    pub figures: Figures,
}

/// One claim's GPU time, with its source.
#[derive(Clone, Debug, PartialEq)]
pub struct UsageClaim {
    /// The source's position.
    pub source: usize,
    /// `source/id`: how the list names (and sorts) it.
    pub label: String,
    /// Its figures, as its source accounted them.
    pub claim: ClaimGpuTime,
}

/// The Usage view.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UsageView {
    /// The window shown.
    pub window: UsageWindow,
    /// Per source, what it answered.
    pub sources: Vec<SourceAnswer>,
    /// Projects over the sources that answered for the window.
    pub projects: Vec<UsageProject>,
    /// Their claims.
    pub claims: Vec<UsageClaim>,
    /// The fleet's GPU time over the sources that answered.
    pub physical: GpuSeconds,
    /// What no claim reserved there.
    pub unallocated: ByShare,
    /// The projects list: rows are positions in `projects`.
    pub list: ListState<usize, UsageColumn>,
    /// The project whose claims are listed (Enter), if any.
    pub open: Option<String>,
    /// Its claims: rows are positions in `claims`.
    pub claim_list: ListState<usize, UsageColumn>,
}

impl UsageView {
    /// The list the keys act on: the open project's claims, or the projects.
    pub fn active(&self) -> &ListState<usize, UsageColumn> {
        if self.open.is_some() {
            &self.claim_list
        } else {
            &self.list
        }
    }

    /// The list the keys act on, to change.
    pub fn active_mut(&mut self) -> &mut ListState<usize, UsageColumn> {
        if self.open.is_some() {
            &mut self.claim_list
        } else {
            &mut self.list
        }
    }

    /// The sources to ask for `key` among `count`: those with no ask under way whose
    /// answer is for another window; each is marked asked.
    pub fn asks_for(&mut self, key: UsageKey, count: usize) -> Vec<usize> {
        self.sources.resize_with(count, SourceAnswer::default);
        let mut out = Vec::new();
        for (i, s) in self.sources.iter_mut().enumerate() {
            if s.asked.is_none() && s.key != Some(key) {
                s.asked = Some(key);
                out.push(i);
            }
        }
        out
    }

    /// A source answered for `key`.
    pub fn answered(&mut self, source: usize, key: UsageKey, said: SourceUsage) {
        let Some(s) = self.sources.get_mut(source) else {
            return;
        };
        if s.asked == Some(key) {
            s.asked = None;
        }
        s.key = Some(key);
        s.said = said;
    }

    /// Drops every answer and ask (the window, sort and cursors stay): for a state that
    /// begins showing another time.
    pub fn forget(&mut self) {
        self.sources.clear();
        self.projects.clear();
        self.claims.clear();
        self.list.rows.clear();
        self.claim_list.rows.clear();
        self.physical = GpuSeconds::default();
        self.unallocated = ByShare::default();
    }

    /// Some source was asked and has not answered.
    pub fn loading(&self) -> bool {
        self.sources.iter().any(|s| s.asked.is_some())
    }

    /// What `source` said for the window shown (`None`: nothing for it yet).
    pub fn said_for_window(&self, source: usize) -> Option<(UsageKey, &SourceUsage)> {
        let s = self.sources.get(source)?;
        let key = s.key.filter(|k| k.window == self.window)?;
        Some((key, &s.said))
    }

    /// The end of the window the figures shown are for (the latest among the sources).
    pub fn shown_to(&self) -> Option<Timestamp> {
        (0..self.sources.len())
            .filter_map(|i| self.said_for_window(i))
            .filter(|(_, said)| matches!(said, SourceUsage::Shown { .. }))
            .map(|(k, _)| k.to)
            .max()
    }

    /// Opens the selected project's claims; false when no project is selected.
    pub fn open_selected(&mut self) -> bool {
        let Some(p) = self
            .list
            .rows
            .get(self.list.cursor.selected)
            .and_then(|i| self.projects.get(*i))
        else {
            return false;
        };
        self.open = Some(p.project.clone());
        self.claim_list.cursor = crate::console::lists::Cursor::default();
        self.claim_list.filter.clear();
        true
    }

    /// The claim selected in the open project's claims list, if one is.
    pub fn selected_claim(&self) -> Option<&UsageClaim> {
        self.open.as_ref()?;
        let i = self.claim_list.rows.get(self.claim_list.cursor.selected)?;
        self.claims.get(*i)
    }
}

fn add(to: &mut Figures, f: &Figures) {
    to.reserved.compute += f.reserved.compute;
    to.reserved.memory += f.reserved.memory;
    to.used += f.used;
    to.idle_allocated += f.idle_allocated;
}

impl State {
    /// Sums what the shown sources answered for the window into the Usage rows, filtered
    /// and sorted, each list's cursor kept on the row it was on (by name).
    pub fn rebuild_usage(&mut self) {
        let shown: Vec<(usize, String)> = self
            .shown_sources()
            .map(|(i, s)| (i, s.name.clone()))
            .collect();
        let u = &mut self.usage;
        let was = |l: &ListState<usize, UsageColumn>, name: &dyn Fn(usize) -> String| {
            l.rows.get(l.cursor.selected).map(|i| name(*i))
        };
        let old_project = was(&u.list, &|i| {
            u.projects
                .get(i)
                .map_or_else(String::new, |p| p.project.clone())
        });
        let old_claim = was(&u.claim_list, &|i| {
            u.claims
                .get(i)
                .map_or_else(String::new, |c| c.label.clone())
        });
        let mut projects: Vec<UsageProject> = Vec::new();
        let mut claims = Vec::new();
        let (mut physical, mut unallocated) = (GpuSeconds::default(), ByShare::default());
        for (source, name) in &shown {
            let Some((_, SourceUsage::Shown { usage, .. })) = u.said_for_window(*source) else {
                continue;
            };
            physical += usage.physical;
            unallocated.compute += usage.unallocated.compute;
            unallocated.memory += usage.unallocated.memory;
            for p in &usage.projects {
                match projects.iter_mut().find(|x| x.project == p.project) {
                    Some(x) => {
                        x.claims += p.claims;
                        add(&mut x.figures, &p.figures);
                    }
                    None => projects.push(UsageProject {
                        project: p.project.clone(),
                        claims: p.claims,
                        figures: p.figures.clone(),
                    }),
                }
            }
            claims.extend(usage.claims.iter().map(|c| UsageClaim {
                source: *source,
                label: format!("{name}/{}", c.claim),
                claim: c.clone(),
            }));
        }
        u.projects = projects;
        u.claims = claims;
        u.physical = physical;
        u.unallocated = unallocated;
        let needle = u.list.filter.to_lowercase();
        let mut rows: Vec<usize> = (0..u.projects.len())
            .filter(|i| words_match(&needle, || vec![u.projects[*i].project.clone()]))
            .collect();
        let sort = u.list.sort;
        rows.sort_by(|a, b| {
            let (a, b) = (&u.projects[*a], &u.projects[*b]);
            sort.order((&a.project, &a.figures), (&b.project, &b.figures))
        });
        if u.list.reverse {
            rows.reverse();
        }
        let at = old_project.and_then(|n| rows.iter().position(|i| u.projects[*i].project == n));
        u.list.set_rows(rows);
        if let Some(at) = at {
            u.list.cursor.selected = at;
        }
        let needle = u.claim_list.filter.to_lowercase();
        let open = u.open.clone().unwrap_or_default();
        let mut rows: Vec<usize> = (0..u.claims.len())
            .filter(|i| {
                let c = &u.claims[*i];
                c.claim.project == open
                    && words_match(&needle, || {
                        vec![c.label.clone(), c.claim.holder.clone().unwrap_or_default()]
                    })
            })
            .collect();
        let sort = u.claim_list.sort;
        rows.sort_by(|a, b| {
            let (a, b) = (&u.claims[*a], &u.claims[*b]);
            sort.order((&a.label, &a.claim.figures), (&b.label, &b.claim.figures))
        });
        if u.claim_list.reverse {
            rows.reverse();
        }
        let at = old_claim.and_then(|n| rows.iter().position(|i| u.claims[*i].label == n));
        u.claim_list.set_rows(rows);
        if let Some(at) = at {
            u.claim_list.cursor.selected = at;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::ProjectGpuTime;
    use crate::console::keymap::Keymap;
    use crate::console::state::SourceSlot;
    use crate::ids::ClaimId;

    fn figures(reserved: f64, used: f64, idle: f64) -> Figures {
        Figures {
            reserved: ByShare {
                compute: GpuSeconds(reserved * 3600.0),
                memory: GpuSeconds(reserved * 3600.0),
            },
            used: GpuSeconds(used * 3600.0),
            idle_allocated: GpuSeconds(idle * 3600.0),
            unmeasured: GpuSeconds(0.0),
        }
    }

    fn time(projects: &[(&str, f64, f64, f64)]) -> SourceUsage {
        SourceUsage::Shown {
            from: Timestamp(0),
            usage: Box::new(GpuTime {
                physical: GpuSeconds(8.0 * 3600.0),
                projects: projects
                    .iter()
                    .map(|&(p, r, u, i)| ProjectGpuTime {
                        project: p.into(),
                        claims: 1,
                        figures: figures(r, u, i),
                    })
                    .collect(),
                claims: projects
                    .iter()
                    .enumerate()
                    .map(|(n, &(p, r, u, i))| ClaimGpuTime {
                        claim: ClaimId(n as u64 + 1),
                        project: p.into(),
                        holder: None,
                        longest_idle_ms: 0,
                        figures: figures(r, u, i),
                    })
                    .collect(),
                ..GpuTime::default()
            }),
        }
    }

    #[test]
    fn projects_are_summed_over_the_sources_that_answered_the_window_shown() {
        let slots = ["a", "b", "c"]
            .map(|n| SourceSlot::new(n, crate::sources::SourceKind::Gpuboard, true, None));
        let mut st = State::new(slots.to_vec(), Keymap::builtin(), 2000, false);
        let key = UsageKey::live(UsageWindow::Day, Timestamp(90_000));
        assert_eq!(key.to, Timestamp(120_000), "the end on the next minute");
        assert_eq!(st.usage.asks_for(key, 3), [0, 1, 2]);
        assert!(st.usage.asks_for(key, 3).is_empty(), "one ask at a time");
        assert!(st.usage.loading());
        st.usage.answered(
            0,
            key,
            time(&[("vision", 2.0, 1.0, 0.5), ("nlp", 1.0, 0.5, 0.0)]),
        );
        st.usage
            .answered(1, key, time(&[("vision", 1.0, 0.5, 1.0)]));
        st.usage
            .answered(2, key, SourceUsage::Failed("no answer".into()));
        assert!(!st.usage.loading());
        st.rebuild_usage();
        let u = &st.usage;
        let shown: Vec<_> = u
            .list
            .rows
            .iter()
            .map(|i| {
                let p = &u.projects[*i];
                (
                    p.project.as_str(),
                    p.claims,
                    p.figures.idle_allocated.hours(),
                )
            })
            .collect();
        assert_eq!(shown, [("vision", 2, 1.5), ("nlp", 1, 0.0)]);
        assert!((u.physical.hours() - 16.0).abs() < 1e-9);
        // Enter: the project's claims, each with its source.
        assert!(st.usage.open_selected());
        st.rebuild_usage();
        let labels: Vec<_> = st
            .usage
            .claim_list
            .rows
            .iter()
            .map(|i| st.usage.claims[*i].label.as_str())
            .collect();
        assert_eq!(labels, ["b/1", "a/1"], "the idler first");
        // Another window: nothing of the old one is summed, and every source is asked.
        st.usage.window = st.usage.window.next();
        st.rebuild_usage();
        assert!(st.usage.projects.is_empty());
        let week = UsageKey::live(UsageWindow::Week, Timestamp(90_000));
        assert_eq!(st.usage.asks_for(week, 3), [0, 1, 2]);
        assert_eq!(week.from(), Timestamp(0), "never before the epoch");
    }
}
