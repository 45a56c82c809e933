//! The Overview's sparklines: the fleet's memory allocated and used, compute allocated,
//! claims pending and GPUs allocated but idle, a point a minute over the last hour (or a
//! point per quarter hour over the last day). Points before the console started are read
//! from the sources' recorded history (their state at each point's time, asked once per
//! point in the background); the console's own data adds a point each minute while it
//! runs, so an idle console asks nothing more. Rewound, the window ends at the time shown.

use std::collections::{BTreeMap, BTreeSet};

use crate::clock::Timestamp;
use crate::snapshot::{ClaimState, Snapshot};

use super::State;

/// A minute: points are kept by the minute they stand for.
pub const MINUTE_MS: u64 = 60_000;
/// How long points are kept behind the time shown: the day drawn, and an hour more.
pub const KEPT_MS: u64 = 25 * 3_600_000;
/// Times asked of a source's history in one background ask (each a state at a time).
pub const TIMES_PER_ASK: usize = 15;

/// The window the sparklines span.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TrendSpan {
    /// The last hour, a point a minute.
    #[default]
    Hour,
    /// The last day, a point per quarter hour.
    Day,
}

impl TrendSpan {
    /// Time between points, ms.
    pub fn step_ms(self) -> u64 {
        match self {
            TrendSpan::Hour => MINUTE_MS,
            TrendSpan::Day => 15 * MINUTE_MS,
        }
    }

    /// Points drawn.
    pub fn points(self) -> usize {
        match self {
            TrendSpan::Hour => 60,
            TrendSpan::Day => 96,
        }
    }

    /// `last hour` or `last day`.
    pub fn label(self) -> &'static str {
        match self {
            TrendSpan::Hour => "last hour",
            TrendSpan::Day => "last day",
        }
    }

    /// The other span.
    #[must_use]
    pub fn other(self) -> TrendSpan {
        match self {
            TrendSpan::Hour => TrendSpan::Day,
            TrendSpan::Day => TrendSpan::Hour,
        }
    }

    /// The start of each point's slot, oldest first, the last holding `end`.
    pub fn slots(self, end: Timestamp) -> Vec<u64> {
        let step = self.step_ms();
        let last = end.0 / step * step;
        let n = self.points() as u64;
        (0..n)
            .rev()
            .filter_map(|i| last.checked_sub(i * step))
            .collect()
    }
}

/// One source's figures at a time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrendPoint {
    /// Devices.
    pub gpus: u64,
    /// Memory capacity, bytes.
    pub cap: u64,
    /// Memory allocated, bytes.
    pub alloc: u64,
    /// Memory used, bytes (`None`: no device reported it).
    pub used: Option<u64>,
    /// Compute allocated, in `Units` (`UNITS_PER_DEVICE` to a GPU).
    pub compute: u64,
    /// Pending claims.
    pub pending: u64,
    /// Devices allocated but idle (`None`: no telemetry to tell).
    pub idle: Option<u64>,
}

impl TrendPoint {
    /// The figures of one snapshot.
    pub fn of(snap: &Snapshot) -> TrendPoint {
        let mut p = TrendPoint::default();
        for (_, d) in snap.devices() {
            p.gpus += 1;
            p.cap += d.memory_capacity.unwrap_or_default().0;
            p.alloc += d.memory_allocated.0;
            p.compute += u64::from(d.compute_allocated.0);
            if let Some(t) = &d.telemetry {
                if let Some(u) = t.memory_used {
                    *p.used.get_or_insert(0) += u.0;
                }
                *p.idle.get_or_insert(0) += u64::from(d.allocated_but_idle());
            }
        }
        p.pending = snap
            .claims
            .iter()
            .filter(|c| c.state == ClaimState::Pending)
            .count() as u64;
        p
    }

    /// Adds another source's figures.
    pub fn add(&mut self, o: &TrendPoint) {
        let opt = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        self.gpus += o.gpus;
        self.cap += o.cap;
        self.alloc += o.alloc;
        self.used = opt(self.used, o.used);
        self.compute += o.compute;
        self.pending += o.pending;
        self.idle = opt(self.idle, o.idle);
    }
}

/// A source's figures at the times asked (`None` at a time before its history begins).
pub type TrendPoints = Vec<(Timestamp, Option<TrendPoint>)>;

/// What a source's history said of the sparklines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TrendHistory {
    /// Not asked yet, or no answer yet.
    #[default]
    Waiting,
    /// It answered: its recorded points are in.
    Recorded,
    /// It keeps no history: only what this console saw is drawn.
    NoHistory,
    /// Its history could not be read (why).
    Failed(String),
}

/// One source's points, by the minute they stand for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceTrend {
    /// Points by minute (ms since the epoch, a multiple of `MINUTE_MS`).
    pub points: BTreeMap<u64, TrendPoint>,
    /// Minutes asked of the history (answered or not): never asked twice.
    pub asked: BTreeSet<u64>,
    /// What its history said.
    pub history: TrendHistory,
}

/// The sparklines' data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trends {
    /// The window drawn.
    pub span: TrendSpan,
    /// Per source position.
    pub sources: Vec<SourceTrend>,
    /// The window last looked over for asks (span, last slot, sources): until it moves,
    /// there is nothing new to ask, so a tick costs a comparison.
    pub checked: Option<(TrendSpan, u64, usize)>,
    /// The minute `State::record_trends` last gave every source with data its point: no
    /// source is behind until the next minute begins (a source's new data is recorded by
    /// the rebuild that follows it), so the check after each message costs a comparison.
    pub recorded: Option<u64>,
}

impl Trends {
    /// Source `i`'s points, made when first needed.
    pub fn source_mut(&mut self, i: usize) -> &mut SourceTrend {
        if self.sources.len() <= i {
            self.sources.resize_with(i + 1, SourceTrend::default);
        }
        &mut self.sources[i]
    }

    /// The point of `source` standing for `slot` (the last in it).
    fn point(&self, source: usize, slot: u64, step: u64) -> Option<&TrendPoint> {
        self.sources
            .get(source)?
            .points
            .range(slot..slot + step)
            .next_back()
            .map(|(_, p)| p)
    }

    /// The fleet's points over the window ending at `end`, summed over `shown` sources,
    /// oldest first (`None`: no source had a point then).
    pub fn series(&self, end: Timestamp, shown: &[usize]) -> Vec<Option<TrendPoint>> {
        let step = self.span.step_ms();
        self.span
            .slots(end)
            .into_iter()
            .map(|slot| {
                let mut sum: Option<TrendPoint> = None;
                for s in shown {
                    if let Some(p) = self.point(*s, slot, step) {
                        sum.get_or_insert_with(TrendPoint::default).add(p);
                    }
                }
                sum
            })
            .collect()
    }

    /// Per source, the times to ask its history for: each slot of the window ending at
    /// `end` with no point and not asked yet (the slot holding `end` has the console's own
    /// point), asked at the slot's end. Marks them asked.
    pub fn due(&mut self, end: Timestamp, sources: usize) -> Vec<(usize, Vec<Timestamp>)> {
        let step = self.span.step_ms();
        let window = (self.span, end.0 / step * step, sources);
        if self.checked == Some(window) {
            return Vec::new();
        }
        self.checked = Some(window);
        let slots = self.span.slots(end);
        let mut out = Vec::new();
        for i in 0..sources {
            let s = self.source_mut(i);
            if matches!(s.history, TrendHistory::NoHistory | TrendHistory::Failed(_)) {
                continue;
            }
            let mut times = Vec::new();
            for slot in slots.iter().take(slots.len().saturating_sub(1)) {
                let at = slot + step - 1;
                let minute = at / MINUTE_MS * MINUTE_MS;
                if s.points.range(*slot..slot + step).next().is_none() && s.asked.insert(minute) {
                    times.push(Timestamp(at));
                }
            }
            out.extend(times.chunks(TIMES_PER_ASK).map(|c| (i, c.to_vec())));
        }
        out
    }
}

impl State {
    /// Records each shown source's figures now as the point of this minute (the console's
    /// own, kept over what a history said), and drops points too old to be drawn.
    pub fn record_trends(&mut self) {
        let minute = self.now.0 / MINUTE_MS * MINUTE_MS;
        let points: Vec<(usize, TrendPoint)> = self
            .sources
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i, TrendPoint::of(s.data.as_deref()?))))
            .collect();
        let oldest = minute.saturating_sub(KEPT_MS);
        self.trends.recorded = Some(minute);
        for (i, p) in points {
            let s = self.trends.source_mut(i);
            s.points.insert(minute, p);
            if s.points.first_key_value().is_some_and(|(k, _)| *k < oldest) {
                s.points = s.points.split_off(&oldest);
            }
        }
    }

    /// Whether some source with data has no point for the current minute yet (a minute
    /// began since its data last changed).
    pub fn trends_behind(&self) -> bool {
        let minute = self.now.0 / MINUTE_MS * MINUTE_MS;
        if self.trends.recorded == Some(minute) {
            return false;
        }
        self.sources.iter().enumerate().any(|(i, s)| {
            s.data.is_some()
                && self
                    .trends
                    .sources
                    .get(i)
                    .is_none_or(|t| !t.points.contains_key(&minute))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(alloc: u64) -> TrendPoint {
        TrendPoint {
            gpus: 1,
            alloc,
            ..TrendPoint::default()
        }
    }

    #[test]
    fn slots_end_with_the_one_holding_the_end() {
        let end = Timestamp(100 * 3_600_000 + 30_000);
        let s = TrendSpan::Hour.slots(end);
        assert_eq!(s.len(), 60);
        assert_eq!(s[59], 100 * 3_600_000);
        assert_eq!(s[0], 100 * 3_600_000 - 59 * MINUTE_MS);
        let d = TrendSpan::Day.slots(end);
        assert_eq!((d.len(), d[95]), (96, 100 * 3_600_000));
        assert_eq!(d[0], 100 * 3_600_000 - 95 * 15 * MINUTE_MS);
    }

    #[test]
    fn series_sum_sources_and_leave_gaps() {
        let end = Timestamp(100 * MINUTE_MS);
        let mut t = Trends::default();
        t.source_mut(0).points.insert(99 * MINUTE_MS, p(5));
        t.source_mut(1).points.insert(99 * MINUTE_MS, p(7));
        t.source_mut(1).points.insert(100 * MINUTE_MS, p(1));
        let s = t.series(end, &[0, 1]);
        assert_eq!(s[59].map(|p| p.alloc), Some(1));
        assert_eq!(s[58].map(|p| (p.alloc, p.gpus)), Some((12, 2)));
        assert_eq!(s[57], None);
        // Only the source shown.
        assert_eq!(t.series(end, &[0])[58].map(|p| p.alloc), Some(5));
    }

    #[test]
    fn due_asks_each_missing_slot_once_and_never_the_current_one() {
        let end = Timestamp(100 * MINUTE_MS + 5);
        let mut t = Trends::default();
        t.source_mut(0).points.insert(98 * MINUTE_MS, p(1));
        let asks = t.due(end, 1);
        let times: Vec<Timestamp> = asks.iter().flat_map(|(_, t)| t.clone()).collect();
        assert_eq!(times.len(), 58, "60 slots, less the current and the known");
        assert!(asks.iter().all(|(_, t)| t.len() <= TIMES_PER_ASK));
        assert_eq!(times[57], Timestamp(100 * MINUTE_MS - 1), "a slot's end");
        assert!(t.due(end, 1).is_empty(), "asked once");
        t.sources[0].history = TrendHistory::NoHistory;
        assert!(t.due(Timestamp(200 * MINUTE_MS), 1).is_empty());
    }
}
