//! How long claims hold their devices: each holder's end (declared, learned, its lease, or
//! unbounded), and the table of past hold times it is learned from, built from the
//! recorded history (a keyframe and the deltas after it) or handed in by the caller.

use std::collections::{BTreeMap, HashMap};

use crate::clock::Timestamp;
use crate::history::{Body, Record};
use crate::ids::ClaimId;
use crate::request::ClaimRequest;
use crate::scheduler::Claim;
use crate::snapshot::{ClaimState, ClaimView, Snapshot, SnapshotChange};
use crate::wire::forecast::EndBasis;

/// Past claims of a project and form needed before their hold times are trusted.
pub const MIN_SAMPLES: usize = 3;
/// Hold times kept per project and form: the most recent.
pub const MAX_SAMPLES: usize = 500;

/// One past claim: its project, form (`ClaimRequest::describe`) and how long it held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldSample {
    /// Its project.
    pub project: String,
    /// Its request form.
    pub form: String,
    /// From placed to released, in milliseconds.
    pub held_ms: u64,
}

/// What the past says: hold times by project and form (each list sorted), and the claims
/// that arrived in the last `ARRIVALS_MS`, which a forecast expects to arrive again over
/// the next as they did (so a waiting claim sees the claims fair share would put before it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HoldTimes {
    by: HashMap<String, HashMap<String, Vec<u64>>>,
    /// Recent arrivals: when, and the request.
    arrivals: Vec<(Timestamp, ClaimRequest)>,
}

/// How far back arrivals are taken to repeat, and so how far ahead they are expected.
pub const ARRIVALS_MS: u64 = 3_600_000;

impl HoldTimes {
    /// The table of these samples, oldest first (the last `MAX_SAMPLES` of each kind are
    /// kept).
    pub fn from_samples(samples: impl IntoIterator<Item = HoldSample>) -> HoldTimes {
        let mut by: HashMap<String, HashMap<String, Vec<u64>>> = HashMap::new();
        for s in samples {
            by.entry(s.project)
                .or_default()
                .entry(s.form)
                .or_default()
                .push(s.held_ms);
        }
        for forms in by.values_mut() {
            for held in forms.values_mut() {
                let cut = held.len().saturating_sub(MAX_SAMPLES);
                held.drain(..cut);
                held.sort_unstable();
            }
        }
        HoldTimes {
            by,
            arrivals: Vec::new(),
        }
    }

    /// The same, with the claims that arrived recently (any order).
    #[must_use]
    pub fn with_arrivals(mut self, mut arrivals: Vec<(Timestamp, ClaimRequest)>) -> HoldTimes {
        arrivals.sort_by_key(|(at, _)| *at);
        self.arrivals = arrivals;
        self
    }

    /// The arrivals expected after `now`: those of the last `ARRIVALS_MS`, each again
    /// `ARRIVALS_MS` later, in time order.
    pub fn expected_arrivals(&self, now: Timestamp) -> Vec<(Timestamp, &ClaimRequest)> {
        let from = Timestamp(now.0.saturating_sub(ARRIVALS_MS));
        self.arrivals
            .iter()
            .filter(|(at, _)| *at > from && *at <= now)
            .map(|(at, r)| (at.plus_millis(ARRIVALS_MS), r))
            .collect()
    }

    /// The arrivals expected after `now`, lazily: the last `ARRIVALS_MS`'s again in each
    /// of the next `ARRIVAL_REPEATS` such spans (the recent past's rate per project and
    /// form, kept up), in time order.
    pub fn arrivals_ahead(&self, now: Timestamp) -> Ahead<'_> {
        Ahead {
            span: self.expected_arrivals(now),
            next: 0,
        }
    }

    /// The sorted hold times of a project and form, when there are enough to trust.
    pub fn of(&self, project: &str, form: &str) -> Option<&[u64]> {
        self.by
            .get(project)
            .and_then(|f| f.get(form))
            .map(Vec::as_slice)
            .filter(|h| h.len() >= MIN_SAMPLES)
    }

    /// How many kinds (project and form) it knows.
    pub fn kinds(&self) -> usize {
        self.by.values().map(HashMap::len).sum()
    }
}

/// How many spans of `ARRIVALS_MS` ahead the recent arrivals are expected again: a day.
pub const ARRIVAL_REPEATS: usize = 24;

/// The arrivals a forecast expects, one after another ([`HoldTimes::arrivals_ahead`]).
pub struct Ahead<'a> {
    /// The first span's, in time order.
    span: Vec<(Timestamp, &'a ClaimRequest)>,
    /// How many were taken.
    next: usize,
}

impl<'a> Ahead<'a> {
    /// The next one, not taken yet.
    pub fn peek(&self) -> Option<(Timestamp, &'a ClaimRequest)> {
        if self.span.is_empty() {
            return None;
        }
        let (k, i) = (self.next / self.span.len(), self.next % self.span.len());
        let (at, req) = *self.span.get(i)?;
        let later = ARRIVALS_MS.saturating_mul(u64::try_from(k).unwrap_or(u64::MAX));
        (k < ARRIVAL_REPEATS).then_some((at.plus_millis(later), req))
    }

    /// Takes the next one when it comes by `t`.
    pub fn take_until(&mut self, t: Timestamp) -> Option<(Timestamp, &'a ClaimRequest)> {
        self.peek().filter(|(at, _)| *at <= t)?;
        self.take()
    }

    /// Takes the next one.
    pub fn take(&mut self) -> Option<(Timestamp, &'a ClaimRequest)> {
        let next = self.peek()?;
        self.next += 1;
        Some(next)
    }
}

/// The `q`-th quantile (0 to 1) of sorted values: the nearest rank.
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let last = sorted.len() - 1;
    // A rank within the list: the product is at most `last`.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let rank = ((last as f64) * q.clamp(0.0, 1.0)).round() as usize;
    sorted[rank.min(last)]
}

/// The quantiles the band's ends are taken at (its middle is the mean, [`mean`]).
pub const BAND: [f64; 2] = [0.1, 0.9];

/// The mean of values (0 when there are none).
pub fn mean(values: &[u64]) -> u64 {
    let sum: u128 = values.iter().map(|&v| u128::from(v)).sum();
    let n = u128::try_from(values.len()).unwrap_or(u128::MAX).max(1);
    // At most the largest value.
    u64::try_from(sum / n).unwrap_or(u64::MAX)
}

/// When a holder is expected to end, in each of the three runs (early, middle, late), or
/// never.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HolderEnd {
    /// How it was worked out.
    pub basis: EndBasis,
    /// Early (p10), middle (the mean), late (p90); `None` for an unbounded holder.
    pub at: Option<[Timestamp; 3]>,
}

/// When `claim`, placed and held since `since`, ends, seen at `now`: its declared
/// duration; else what claims of its project and form held, given it has held this long
/// already (the p10, the mean and the p90 of those hold times); else its lease when no
/// local owner renews it; else never. An end already passed is now (it is overdue: it
/// ends any moment).
pub fn holder_end(claim: &Claim, since: Timestamp, now: Timestamp, holds: &HoldTimes) -> HolderEnd {
    let req = &claim.request;
    if let Some(d) = req.expected_duration {
        let end = since.plus_secs(d).max(now);
        return HolderEnd {
            basis: EndBasis::Declared,
            at: Some([end; 3]),
        };
    }
    if let Some(held) = holds.of(&req.project, &req.describe()) {
        let elapsed = now.millis_since(since);
        // The hold times longer than it has held already: what is left of such claims.
        let longer = &held[held.partition_point(|&h| h <= elapsed)..];
        let at = if longer.is_empty() {
            [now; 3]
        } else {
            // The middle run ends it at the mean, not the median: a claim behind a queue
            // waits for many holds one after another, and their sum is about their number
            // times the mean. Skewed hold times (most short, some long) have a median
            // below the mean, and a run of medians made every start in a queue early.
            let [p10, p90] = BAND.map(|q| quantile(longer, q));
            [p10, mean(longer), p90].map(|held| since.plus_millis(held).max(now))
        };
        return HolderEnd {
            basis: EndBasis::Learned,
            at: Some(at),
        };
    }
    match claim.lease_expires_at {
        Some(lease) if req.pid.is_none() => HolderEnd {
            basis: EndBasis::Lease,
            at: Some([lease.max(now); 3]),
        },
        _ => HolderEnd {
            basis: EndBasis::Unbounded,
            at: None,
        },
    }
}

/// The hold times the recorded history shows, from the state at a window's start and the
/// versions after it (`HistoryStore::window`): each claim seen placed and then gone (or
/// pending again), from the version it was first seen placed in to the one it was gone
/// in. Claims already placed at the start are left out (when they were placed is not
/// known), as are those still placed at the last version.
/// The claims first seen in the last `ARRIVALS_MS` before the last version are the recent
/// arrivals (`HoldTimes::with_arrivals`).
pub fn learn(start: &Snapshot, records: &[Record]) -> HoldTimes {
    let mut learner = Learner::default();
    for c in &start.claims {
        learner.arrived.insert(c.id);
    }
    learner.all(&start.claims, start.taken_at);
    learner.started = true;
    for r in records {
        match &r.body {
            Body::Keyframe { state } => learner.all(&state.claims, r.at),
            Body::Delta { delta } => {
                for change in delta {
                    match change {
                        SnapshotChange::Claim { claim } => learner.one(claim, r.at),
                        SnapshotChange::ClaimRemoved { id } => learner.gone(*id, r.at),
                        SnapshotChange::Claims { claims } => learner.all(claims, r.at),
                        _ => {}
                    }
                }
            }
        }
    }
    let last = records.last().map_or(start.taken_at, |r| r.at);
    let recent = learner
        .arrivals
        .into_iter()
        .filter(|(at, _)| last.millis_since(*at) < ARRIVALS_MS)
        .collect();
    HoldTimes::from_samples(learner.samples).with_arrivals(recent)
}

/// Claims seen placed so far, and the samples found.
#[derive(Default)]
struct Learner {
    /// Placed claims: project, form and since when (`None`: placed before the history).
    placed: BTreeMap<ClaimId, (String, String, Option<Timestamp>)>,
    samples: Vec<HoldSample>,
    /// Every claim seen, and when those first seen after the start were created.
    arrived: std::collections::BTreeSet<ClaimId>,
    arrivals: Vec<(Timestamp, ClaimRequest)>,
    /// Past the window's start: a claim first seen placed now was placed now.
    started: bool,
}

impl Learner {
    fn one(&mut self, c: &ClaimView, at: Timestamp) {
        if self.arrived.insert(c.id) {
            self.arrivals.push((c.created_at, c.request.clone()));
        }
        if c.state == ClaimState::Placed {
            if !self.placed.contains_key(&c.id) {
                let since = self.started.then_some(at);
                self.placed
                    .insert(c.id, (c.project.clone(), c.form.clone(), since));
            }
        } else {
            self.gone(c.id, at);
        }
    }

    fn gone(&mut self, id: ClaimId, at: Timestamp) {
        if let Some((project, form, Some(since))) = self.placed.remove(&id) {
            self.samples.push(HoldSample {
                project,
                form,
                held_ms: at.millis_since(since),
            });
        }
    }

    /// Every claim, whole: those not in it are gone.
    fn all(&mut self, claims: &[ClaimView], at: Timestamp) {
        let present: std::collections::BTreeSet<ClaimId> = claims
            .iter()
            .filter(|c| c.state == ClaimState::Placed)
            .map(|c| c.id)
            .collect();
        let gone: Vec<ClaimId> = self
            .placed
            .keys()
            .filter(|id| !present.contains(id))
            .copied()
            .collect();
        for id in gone {
            self.gone(id, at);
        }
        for c in claims {
            self.one(c, at);
        }
    }
}
