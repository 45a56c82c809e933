//! The console rewound: a second `State` showing the fleet as it was at a time, kept
//! beside the live one (which the watch keeps updating underneath), and the charts of
//! the device shown in detail.

use crate::clock::Timestamp;
use crate::sources::history::Sample;
use crate::wire::history::{Direction, Target};

use super::State;

/// One step of `]`/`[`: the recorder's telemetry interval.
pub const STEP_MS: u64 = 5_000;
/// Play speeds, times real time (`+`/`-` pick one).
pub const SPEEDS: [u32; 9] = [1, 2, 5, 10, 30, 60, 120, 300, 600];
/// The speed play starts at (10x: two samples a second).
pub const DEFAULT_SPEED: usize = 3;
/// How much time the charts span: the last hour live, an hour around the time shown.
pub const CHART_SPAN_MS: u64 = 3_600_000;

/// What one source shows while rewound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shown {
    /// Asked; no answer yet.
    Loading,
    /// Its state as of this time (its last change at or before the time asked).
    At(Timestamp),
    /// The time is before its history begins, there.
    Before(Timestamp),
    /// It keeps no history (an engine nobody records).
    NoHistory,
    /// Its history could not be read.
    Failed(String),
}

/// A search for the next or previous change, over one source or all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seeking {
    /// Which way.
    pub dir: Direction,
    /// What the change must touch.
    pub what: Option<Target>,
    /// The ask it answers.
    pub generation: u64,
    /// Sources yet to answer.
    pub waiting: usize,
    /// The nearest change found so far.
    pub best: Option<Timestamp>,
}

/// The console rewound to a time.
#[derive(Clone, Debug, PartialEq)]
pub struct Rewind {
    /// The time asked for.
    pub at: Timestamp,
    /// Counts asks: an answer older than what a source shows is dropped.
    pub generation: u64,
    /// Per source: what it shows, and the ask that answer came from.
    pub sources: Vec<(Shown, u64)>,
    /// The fleet then: every view draws this instead of the live state.
    pub shown: Box<State>,
    /// Playing forward.
    pub playing: bool,
    /// The play speed (index into `SPEEDS`).
    pub speed: usize,
    /// A seek under way.
    pub seeking: Option<Seeking>,
    /// The live time the shown state's message appeared (it expires by the live clock).
    pub flash_since: Option<Timestamp>,
}

impl Rewind {
    /// How far behind live the time shown is, in ms.
    pub fn behind(&self, live_now: Timestamp) -> u64 {
        live_now.millis_since(self.at)
    }

    /// The play speed, times real time.
    pub fn speed_x(&self) -> u32 {
        SPEEDS[self.speed.min(SPEEDS.len() - 1)]
    }
}

/// A device's charts: its samples over a window, as the source recorded them.
#[derive(Clone, Debug, PartialEq)]
pub struct Charts {
    /// Which device, and the window: the chart answers only the latest ask.
    pub key: ChartKey,
    /// Samples, oldest first (empty while loading).
    pub samples: Vec<Sample>,
    /// Asked, no answer yet.
    pub loading: bool,
    /// The source keeps no history (the snapshot's short in-memory history is drawn).
    pub no_history: bool,
    /// Why the samples could not be read.
    pub error: Option<String>,
}

/// A device and a window of time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChartKey {
    /// Source position.
    pub source: usize,
    /// Node name.
    pub node: String,
    /// Device index.
    pub index: u32,
    /// Window start.
    pub from: Timestamp,
    /// Window end.
    pub to: Timestamp,
}

impl Charts {
    /// Charts being fetched for `key`.
    pub fn loading(key: ChartKey) -> Charts {
        Charts {
            key,
            samples: Vec::new(),
            loading: true,
            no_history: false,
            error: None,
        }
    }

    /// Claim starts and ends in the window: where the memory reserved by claims steps
    /// up (`true`) or down (`false`).
    pub fn claim_marks(&self) -> Vec<(Timestamp, bool)> {
        let mut out = Vec::new();
        let mut last = None;
        for s in &self.samples {
            let r = s.memory_reserved;
            if let Some(prev) = last
                && prev != r
            {
                out.push((s.at, r > prev));
            }
            last = Some(r);
        }
        out
    }
}

/// The window the charts span: the last hour live (its end on the next minute, so the
/// window moves once a minute), or an hour centred on the time shown (never past live).
pub fn chart_window(live_now: Timestamp, at: Option<Timestamp>) -> (Timestamp, Timestamp) {
    let minute = 60_000;
    let ceil = |t: Timestamp| Timestamp(t.0.div_ceil(minute) * minute);
    match at {
        None => {
            let to = ceil(live_now);
            (Timestamp(to.0.saturating_sub(CHART_SPAN_MS)), to)
        }
        Some(at) => {
            let mid = ceil(at);
            let to = Timestamp(mid.0 + CHART_SPAN_MS / 2).min(ceil(live_now));
            (Timestamp(to.0.saturating_sub(CHART_SPAN_MS)), to)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Bytes;

    #[test]
    fn claim_marks_are_where_the_reservation_steps() {
        let s = |at: u64, r: u64| Sample {
            at: Timestamp(at),
            memory_reserved: Bytes(r),
            ..Sample::default()
        };
        let c = Charts {
            samples: vec![s(0, 0), s(5, 0), s(10, 8), s(20, 8), s(25, 2)],
            ..Charts::loading(ChartKey {
                source: 0,
                node: "x".into(),
                index: 3,
                from: Timestamp(0),
                to: Timestamp(30),
            })
        };
        assert_eq!(
            c.claim_marks(),
            vec![(Timestamp(10), true), (Timestamp(25), false)]
        );
    }

    #[test]
    fn chart_windows_move_by_the_minute_and_never_pass_live() {
        let now = Timestamp(10 * 3_600_000 + 30_000);
        assert_eq!(
            chart_window(now, None),
            (
                Timestamp(9 * 3_600_000 + 60_000),
                Timestamp(10 * 3_600_000 + 60_000)
            )
        );
        // Rewound two hours: the hour around the time shown.
        let at = Timestamp(8 * 3_600_000);
        assert_eq!(
            chart_window(now, Some(at)),
            (
                Timestamp(7 * 3_600_000 + 1_800_000),
                Timestamp(8 * 3_600_000 + 1_800_000)
            )
        );
        // Rewound ten minutes: the window ends at live.
        let at = Timestamp(now.0 - 600_000);
        assert_eq!(chart_window(now, Some(at)), chart_window(now, None));
    }
}
