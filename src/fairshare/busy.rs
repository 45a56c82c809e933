//! The round-robin simulation's totals (`rr`), kept up to date as claims are placed and
//! released: work fetch reads them on every decision, and walking every running claim
//! each time (about 19 000 on a full 8 000-GPU endpoint) was most of a forecast's cost.
//!
//! A claim holding `u` units until `end` is busy `u * clamp(end - now, 0, horizon)` over
//! the horizon. Sorted against one instant `at`, each bounded claim is past (`end <= at`:
//! nothing), in the window (`at < end < at + horizon`: `u * end - u * now`) or beyond
//! (the whole horizon), so per (project, type) three integer sums give the total at `at`
//! exactly; a read at a later `now` corrects for the few claims that crossed a bound
//! since, and [`Busy::settle`] moves them. Integers (units times milliseconds) make the
//! totals equal a recount, whatever the order of places and releases.

use super::rr::{RrOutcome, held_ms};
use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::shared::{SharedMap, SharedSet};

/// One (project, resource type)'s sums, against `Busy::at`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Cell {
    /// Units of the claims ending inside the window.
    window_units: u128,
    /// The sum of units times end (ms) of those.
    window_unit_end: u128,
    /// Units of the claims that hold the whole horizon (ending beyond it, or never).
    long_units: u128,
}

impl Cell {
    /// Busy unit-milliseconds over the horizon from `now`, the window's claims all
    /// ending after `now`.
    fn busy_at(&self, now: Timestamp, horizon_ms: u64) -> u128 {
        self.window_unit_end - u128::from(now.0) * self.window_units
            + u128::from(horizon_ms) * self.long_units
    }
}

/// One running claim as the totals see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    project: usize,
    resource: usize,
    units: u64,
    end: Option<Timestamp>,
}

/// Where a claim falls against an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bucket {
    Past,
    Window,
    Long,
}

/// The running claims' use over the horizon, per (project, resource type) and per type.
#[derive(Clone, Debug)]
pub(super) struct Busy {
    horizon_ms: u64,
    /// The instant the claims are sorted against.
    at: Timestamp,
    entries: SharedMap<ClaimId, Entry>,
    /// Claims in the window, by end.
    window: SharedSet<(Timestamp, ClaimId)>,
    /// Claims beyond the window with an end, by end.
    beyond: SharedSet<(Timestamp, ClaimId)>,
    /// `[project][resource]`, grown as indexes appear.
    cells: Vec<Vec<Cell>>,
    /// Units in use per resource type.
    in_use: Vec<u64>,
}

impl Busy {
    /// No claims, over `horizon_ms`.
    pub(super) fn new(horizon_ms: u64) -> Busy {
        Busy {
            horizon_ms,
            at: Timestamp(0),
            entries: SharedMap::new(),
            window: SharedSet::new(),
            beyond: SharedSet::new(),
            cells: Vec::new(),
            in_use: Vec::new(),
        }
    }

    fn bucket(&self, end: Option<Timestamp>) -> Bucket {
        match end {
            Some(end) if end <= self.at => Bucket::Past,
            Some(end) if end.millis_since(self.at) < self.horizon_ms => Bucket::Window,
            // No end, or one past the horizon: the whole horizon.
            None | Some(_) => Bucket::Long,
        }
    }

    fn cell(&mut self, p: usize, r: usize) -> &mut Cell {
        if self.cells.len() <= p {
            self.cells.resize_with(p + 1, Vec::new);
        }
        let row = &mut self.cells[p];
        if row.len() <= r {
            row.resize(r + 1, Cell::default());
        }
        &mut row[r]
    }

    /// Adds a claim's sums (`add`) or takes them away, as sorted against `at`.
    fn count(&mut self, id: ClaimId, e: Entry, add: bool) {
        let bucket = self.bucket(e.end);
        let units = u128::from(e.units);
        let end = e.end.map_or(0, |t| u128::from(t.0));
        let cell = self.cell(e.project, e.resource);
        let apply = |v: &mut u128, d: u128| {
            if add {
                *v += d;
            } else {
                *v -= d;
            }
        };
        match bucket {
            Bucket::Past => {}
            Bucket::Window => {
                apply(&mut cell.window_units, units);
                apply(&mut cell.window_unit_end, units * end);
            }
            Bucket::Long => apply(&mut cell.long_units, units),
        }
        if let Some(t) = e.end {
            let set = match bucket {
                Bucket::Past => None,
                Bucket::Window => Some(&mut self.window),
                Bucket::Long => Some(&mut self.beyond),
            };
            if let Some(set) = set {
                if add {
                    set.insert((t, id));
                } else {
                    set.remove(&(t, id));
                }
            }
        }
    }

    /// A claim now holds `units` of type `resource` for `project` until `end` (`None`:
    /// past the horizon). A claim already counted is counted again as given.
    pub(super) fn insert(
        &mut self,
        id: ClaimId,
        project: usize,
        resource: usize,
        units: u64,
        end: Option<Timestamp>,
    ) {
        self.remove(id);
        let e = Entry {
            project,
            resource,
            units,
            end,
        };
        if self.in_use.len() <= resource {
            self.in_use.resize(resource + 1, 0);
        }
        self.in_use[resource] += units;
        self.count(id, e, true);
        self.entries.insert(id, e);
    }

    /// A claim holds nothing any more; forgetting an unknown one is harmless.
    pub(super) fn remove(&mut self, id: ClaimId) {
        let Some(e) = self.entries.remove(&id) else {
            return;
        };
        self.in_use[e.resource] -= e.units;
        self.count(id, e, false);
    }

    /// Sorts the claims against `now`, so that reads at `now` and a little later correct
    /// for few claims. Going back in time sorts every claim afresh.
    pub(super) fn settle(&mut self, now: Timestamp) {
        if now < self.at {
            let entries: Vec<(ClaimId, Entry)> = self.entries.drain().collect();
            self.window.clear();
            self.beyond.clear();
            self.cells
                .iter_mut()
                .flatten()
                .for_each(|c| *c = Cell::default());
            self.in_use.iter_mut().for_each(|u| *u = 0);
            self.at = now;
            for (id, e) in entries {
                self.insert(id, e.project, e.resource, e.units, e.end);
            }
            return;
        }
        let moved = self.crossing(now);
        for (id, _) in &moved {
            if let Some(&e) = self.entries.get(id) {
                self.count(*id, e, false);
            }
        }
        self.at = now;
        for (id, _) in moved {
            if let Some(&e) = self.entries.get(&id) {
                self.count(id, e, true);
            }
        }
    }

    /// The claims whose bucket differs at `now` (not before `at`) from at `at`.
    fn crossing(&self, now: Timestamp) -> Vec<(ClaimId, Entry)> {
        let ended = self
            .window
            .range(..=(now, ClaimId(u64::MAX)))
            .map(|&(_, id)| id);
        let bound = now.plus_millis(self.horizon_ms);
        let near = self.beyond.range(..(bound, ClaimId(0))).map(|&(_, id)| id);
        ended
            .chain(near)
            .filter_map(|id| self.entries.get(&id).map(|&e| (id, e)))
            .collect()
    }

    /// What the simulation yields at `now` for `projects` x `resources`.
    pub(super) fn outcome(&self, now: Timestamp, projects: usize, resources: usize) -> RrOutcome {
        let mut in_use = vec![0u64; resources];
        if now < self.at {
            // Reads before the sorting instant (rare): count every claim.
            let mut busy = vec![0u128; projects * resources];
            for e in self.entries.values() {
                if e.project < projects && e.resource < resources {
                    in_use[e.resource] += e.units;
                    busy[e.project * resources + e.resource] +=
                        u128::from(e.units) * u128::from(held_ms(e.end, now, self.horizon_ms));
                }
            }
            return RrOutcome::from_unit_ms(in_use, &busy, resources);
        }
        let mut cells = vec![Cell::default(); projects * resources];
        for (p, row) in self.cells.iter().enumerate().take(projects) {
            for (r, c) in row.iter().enumerate().take(resources) {
                cells[p * resources + r] = *c;
            }
        }
        for (r, &u) in self.in_use.iter().enumerate().take(resources) {
            in_use[r] = u;
        }
        // Claims that crossed a bound since `at`, counted as they stand at `now`.
        for (_, e) in self.crossing(now) {
            if e.project >= projects || e.resource >= resources {
                continue;
            }
            let Some(end) = e.end else { continue };
            let units = u128::from(e.units);
            let c = &mut cells[e.project * resources + e.resource];
            match self.bucket(e.end) {
                Bucket::Window => {
                    c.window_units -= units;
                    c.window_unit_end -= units * u128::from(end.0);
                }
                Bucket::Long => c.long_units -= units,
                Bucket::Past => {}
            }
            if end > now && end.millis_since(now) < self.horizon_ms {
                c.window_units += units;
                c.window_unit_end += units * u128::from(end.0);
            }
        }
        let busy: Vec<u128> = cells
            .iter()
            .map(|c| c.busy_at(now, self.horizon_ms))
            .collect();
        RrOutcome::from_unit_ms(in_use, &busy, resources)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::fairshare::rr::{RunningUse, simulate};
    use crate::units::Units;

    const HOUR: u64 = 3_600_000;

    /// A from-scratch recount of the same claims.
    fn recount(
        claims: &HashMap<ClaimId, Entry>,
        now: Timestamp,
        projects: usize,
        resources: usize,
    ) -> RrOutcome {
        let mut ids: Vec<&ClaimId> = claims.keys().collect();
        ids.sort();
        let uses = ids.into_iter().map(|id| {
            let e = claims[id];
            RunningUse {
                project: e.project,
                resource: e.resource,
                units: Units(u32::try_from(e.units).unwrap()),
                expected_end: e.end,
            }
        });
        simulate(
            now,
            std::time::Duration::from_millis(HOUR),
            projects,
            resources,
            uses,
        )
    }

    fn same(a: &RrOutcome, b: &RrOutcome) {
        assert_eq!(a.in_use, b.in_use);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a.busy), bits(&b.busy), "{:?} vs {:?}", a.busy, b.busy);
        assert_eq!(bits(&a.project_busy), bits(&b.project_busy));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Place {
            id: u64,
            project: usize,
            resource: usize,
            units: u64,
            end: Option<u64>,
        },
        Release(u64),
        Time(u64),
        Back(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..40, 0usize..4, 0usize..3, 1u64..40_000, proptest::option::of(0u64..3 * HOUR))
                .prop_map(|(id, project, resource, units, end)| Op::Place {
                    id,
                    project,
                    resource,
                    units,
                    end
                }),
            2 => (0u64..40).prop_map(Op::Release),
            2 => (0u64..HOUR).prop_map(Op::Time),
            1 => (0u64..HOUR).prop_map(Op::Back),
        ]
    }

    proptest! {
        /// After any places, releases and moves of the clock, the kept totals equal a
        /// recount of the running claims, bit for bit, read at the sorting instant, a
        /// little after it and before it.
        #[test]
        fn kept_totals_equal_a_recount(ops in proptest::collection::vec(op(), 1..120)) {
            let mut busy = Busy::new(HOUR);
            let mut claims: HashMap<ClaimId, Entry> = HashMap::new();
            let mut now = Timestamp(HOUR);
            busy.settle(now);
            for op in ops {
                match op {
                    Op::Place { id, project, resource, units, end } => {
                        let end = end.map(|e| Timestamp((now.0 + e).saturating_sub(HOUR / 2)));
                        busy.insert(ClaimId(id), project, resource, units, end);
                        claims.insert(ClaimId(id), Entry { project, resource, units, end });
                    }
                    Op::Release(id) => {
                        busy.remove(ClaimId(id));
                        claims.remove(&ClaimId(id));
                    }
                    Op::Time(d) => {
                        now = now.plus_millis(d);
                        busy.settle(now);
                    }
                    Op::Back(d) => {
                        now = Timestamp(now.0.saturating_sub(d));
                        busy.settle(now);
                    }
                }
                for read in [now, now.plus_millis(HOUR / 3), Timestamp(now.0.saturating_sub(HOUR / 4))] {
                    same(&busy.outcome(read, 4, 3), &recount(&claims, read, 4, 3));
                }
            }
        }
    }

    #[test]
    fn a_claim_moves_from_beyond_to_the_window_to_nothing() {
        let mut busy = Busy::new(HOUR);
        busy.settle(Timestamp(0));
        busy.insert(ClaimId(1), 0, 0, 10_000, Some(Timestamp(2 * HOUR)));
        let at = |busy: &Busy, t: u64| busy.outcome(Timestamp(t), 1, 1).busy[0];
        assert!((at(&busy, 0) - 3_600.0).abs() < 1e-9);
        assert!((at(&busy, HOUR + HOUR / 2) - 1_800.0).abs() < 1e-9);
        busy.settle(Timestamp(HOUR + HOUR / 2));
        assert!((at(&busy, HOUR + HOUR / 2) - 1_800.0).abs() < 1e-9);
        assert!(at(&busy, 3 * HOUR).abs() < 1e-9);
        busy.settle(Timestamp(3 * HOUR));
        assert!(at(&busy, 3 * HOUR).abs() < 1e-9);
        assert_eq!(busy.outcome(Timestamp(3 * HOUR), 1, 1).in_use, vec![10_000]);
        busy.remove(ClaimId(1));
        assert_eq!(busy.outcome(Timestamp(3 * HOUR), 1, 1).in_use, vec![0]);
    }
}
