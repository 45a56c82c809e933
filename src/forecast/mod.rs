//! Expected starts: when each waiting claim should start, worked out by running a copy of
//! the endpoint's own scheduler forward on a simulated clock (placement, fair share, work
//! fetch, backoffs: `Scheduler::advance`). Each holder ends at its declared
//! `expected_duration`, else at what past claims of its project and form held, else at
//! its lease, else never (`holds`). The run is made three times, every learned holder
//! ending at the p10, the mean and the p90 of its hold times: the band and its middle. Plain synchronous Rust, no I/O, time passed in.
//!
//! Where things live: holder ends and the hold-time table in `holds`; the preview of an
//! action in `preview`; the backtest over a scenario in `backtest`.

pub mod backtest;
pub mod holds;
pub mod preview;
mod recorded;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::scheduler::{Change, Claim, Scheduler};
use crate::wire::forecast::{Band, EndBasis, ExpectedStart, Forecast, FreedBy, Unknown};

pub use holds::{HoldSample, HoldTimes, HolderEnd, holder_end, learn};

/// How far ahead a run looks: a start later than this is unknown.
pub const HORIZON_MS: u64 = 30 * 86_400_000;

/// Where and when one run placed a waiting claim.
#[derive(Clone, Debug)]
struct Start {
    at: Timestamp,
    /// Its position in the order the run placed claims.
    order: u32,
    /// Its node and devices.
    place: Option<(String, Vec<u32>)>,
    /// The holders whose end came at that instant.
    freed_by: Vec<Ended>,
}

/// A holder that ended in a run, as it stood just before.
#[derive(Clone, Debug)]
struct Ended {
    claim: ClaimId,
    basis: EndBasis,
    lease_expires_at: Option<Timestamp>,
    place: Option<(String, Vec<u32>)>,
}

/// One run: when each waiting claim started, and the copy as the run left it.
struct Run {
    starts: HashMap<ClaimId, Start>,
    copy: Scheduler,
}

/// When a run stops.
#[derive(Clone, Copy)]
enum Stop {
    /// Once no claim waits (or nothing more ends, or the horizon).
    NoneWait,
    /// At this time, with everything that ends before it ended.
    At(Timestamp),
}

/// A placed claim's node and device indexes.
fn place_of(c: &Claim) -> Option<(String, Vec<u32>)> {
    c.allocation
        .as_ref()
        .map(|a| (a.node.clone(), a.shares.iter().map(|s| s.device).collect()))
}

/// Every waiting claim's expected start at `now`.
pub fn forecast(s: &Scheduler, now: Timestamp, holds: &HoldTimes) -> Forecast {
    let ends = holder_ends(s, now, holds);
    // When every end is known exactly (declared, a lease, unbounded), for holders and for
    // the claims that will hold during the run, the three runs are one.
    let point = |r: &crate::request::ClaimRequest| {
        r.expected_duration.is_some() || holds.of(&r.project, &r.describe()).is_none()
    };
    let exact = ends
        .values()
        .all(|e| e.at.is_none_or(|at| at[0] == at[1] && at[1] == at[2]))
        && s.waiting_claims()
            .iter()
            .filter_map(|id| s.claim(*id))
            .all(|c| point(&c.request))
        && holds.expected_arrivals(now).iter().all(|(_, r)| point(r));
    let runs: Vec<Run> = if exact {
        vec![run(s, now, holds, &ends, 1, Stop::NoneWait)]
    } else {
        // The three runs share nothing but what they read: one thread each.
        std::thread::scope(|scope| {
            let ends = &ends;
            let handles: Vec<_> = (0..3)
                .map(|q| scope.spawn(move || run(s, now, holds, ends, q, Stop::NoneWait)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        })
    };
    let waiting = s.waiting_claims();
    let starts = waiting
        .iter()
        .filter_map(|&id| s.claim(id))
        .map(|c| expected(s, c, &runs, &ends))
        .collect();
    Forecast {
        revision: s.revision(),
        at: now,
        starts,
        engine: None,
    }
}

/// Every holder's end.
fn holder_ends(s: &Scheduler, now: Timestamp, holds: &HoldTimes) -> HashMap<ClaimId, HolderEnd> {
    s.claims()
        .filter(|c| c.allocation.is_some())
        .map(|c| {
            let since = c.placed_at.unwrap_or(c.created_at);
            (c.id, holder_end(c, since, now, holds))
        })
        .collect()
}

/// Runs a forward copy with every holder ending at its end `q` (0, 1, 2: early, middle,
/// late; `HolderEnd::at`) until `stop`.
fn run(
    s: &Scheduler,
    now: Timestamp,
    holds: &HoldTimes,
    ends: &HashMap<ClaimId, HolderEnd>,
    q: usize,
    stop: Stop,
) -> Run {
    let mut copy = s.forward_copy();
    let mut heap: BinaryHeap<Reverse<(Timestamp, ClaimId)>> = ends
        .iter()
        .filter_map(|(&id, e)| e.at.map(|at| Reverse((at[q], id))))
        .collect();
    let mut bases: HashMap<ClaimId, EndBasis> = ends.iter().map(|(&id, e)| (id, e.basis)).collect();
    let mut starts = HashMap::new();
    let mut order = 0u32;
    let horizon = now.plus_millis(HORIZON_MS);
    // The claims it forecasts: those waiting now, not the arrivals it expects.
    let forecast_for: std::collections::BTreeSet<ClaimId> =
        s.waiting_claims().into_iter().collect();
    let mut arrivals = holds.arrivals_ahead(now);
    let mut t = now;
    let mut ending: Vec<ClaimId> = Vec::new();
    let mut ended: Vec<Ended> = Vec::new();
    loop {
        let mut placed = copy.advance(t, &ending);
        // Expected arrivals are submitted as claims are, after the holders that end at the
        // same instant have left, as the endpoint sees a release and then a submit:
        // submitted first, a half-GPU claim goes to another half-free GPU than the one
        // the holder frees, and that GPU is then wholly free for another project.
        if arrivals.peek().is_some_and(|(at, _)| at <= t) {
            while let Some((_, req)) = arrivals.take_until(t) {
                let _ = copy.submit(req.clone(), "forecast", t);
            }
            placed.extend(placed_by(copy.take_changes()));
        }
        for id in placed {
            let Some(c) = copy.claim(id) else { continue };
            if forecast_for.contains(&id) && !starts.contains_key(&id) {
                starts.insert(
                    id,
                    Start {
                        at: t,
                        order,
                        place: place_of(c),
                        freed_by: ended.clone(),
                    },
                );
                order += 1;
            }
            // A claim placed in the run holds until its own end.
            let end = holder_end(c, t, t, holds);
            bases.insert(id, end.basis);
            if let Some(at) = end.at {
                heap.push(Reverse((at[q], id)));
            }
        }
        let until = match stop {
            Stop::NoneWait if starts.len() == forecast_for.len() => break,
            Stop::NoneWait => horizon,
            Stop::At(until) => until,
        };
        let next_end = heap.peek().map(|Reverse((at, _))| *at);
        let wake = copy.next_wakeup(t);
        let arrival = arrivals.peek().map(|(at, _)| at);
        let next = [next_end, wake, arrival].into_iter().flatten().min();
        let Some(next) = next.filter(|&n| n <= until) else {
            if let Stop::At(until) = stop
                && until > t
            {
                copy.advance(until, &[]);
            }
            break;
        };
        t = next.max(t);
        ending.clear();
        ended.clear();
        while let Some(&Reverse((at, id))) = heap.peek() {
            if at > t {
                break;
            }
            heap.pop();
            ending.push(id);
            if let Some(c) = copy.claim(id) {
                ended.push(Ended {
                    claim: id,
                    basis: bases.get(&id).copied().unwrap_or(EndBasis::Unbounded),
                    lease_expires_at: c.lease_expires_at,
                    place: place_of(c),
                });
            }
        }
    }
    Run { starts, copy }
}

/// The claims a copy's changes placed (its submits), in the order placed.
fn placed_by(changes: Vec<Change>) -> Vec<ClaimId> {
    changes
        .into_iter()
        .filter_map(|c| match c {
            Change::Claim(claim) if claim.allocation.is_some() => Some(claim.id),
            _ => None,
        })
        .collect()
}

/// The expected start of waiting claim `c` from the three runs.
fn expected(
    s: &Scheduler,
    c: &Claim,
    runs: &[Run],
    ends: &HashMap<ClaimId, HolderEnd>,
) -> ExpectedStart {
    let mut out = ExpectedStart {
        claim: c.id,
        project: c.request.project.clone(),
        start: None,
        node: None,
        devices: Vec::new(),
        freed_by: None,
        ahead: 0,
        unknown: None,
    };
    let found: Vec<Option<&Start>> = runs.iter().map(|r| r.starts.get(&c.id)).collect();
    let (lo, mid, hi) = match found.as_slice() {
        [one] => (*one, *one, *one),
        [lo, mid, hi] => (*lo, *mid, *hi),
        _ => (None, None, None),
    };
    let (Some(lo), Some(mid), Some(hi)) = (lo, mid, hi) else {
        out.unknown = Some(unknown(s, c, ends));
        return out;
    };
    // Runs are separate: a claim can start earlier in a later quantile's run (another
    // claim went first): the band is the three times in order.
    let mut times = [lo.at, mid.at, hi.at];
    times.sort_unstable();
    out.start = Some(Band {
        p10: times[0],
        p50: mid.at.clamp(times[0], times[2]),
        p90: times[2],
    });
    out.ahead = mid.order;
    if let Some((node, devices)) = &mid.place {
        out.node = Some(node.clone());
        out.devices.clone_from(devices);
    }
    out.freed_by = freed_by(&out, &mid.freed_by);
    out
}

/// The holder among those that ended at the start's instant whose devices the claim
/// takes (else one on its node, else the first).
fn freed_by(start: &ExpectedStart, ended: &[Ended]) -> Option<FreedBy> {
    let on = |e: &&Ended, devices: bool| {
        e.place.as_ref().is_some_and(|(node, held)| {
            start.node.as_deref() == Some(node.as_str())
                && (!devices || held.iter().any(|d| start.devices.contains(d)))
        })
    };
    let e = ended
        .iter()
        .find(|e| on(e, true))
        .or_else(|| ended.iter().find(|e| on(e, false)))
        .or_else(|| ended.first())?;
    Some(FreedBy {
        claim: e.claim,
        basis: e.basis,
        lease_expires_at: e.lease_expires_at,
    })
}

/// Why a waiting claim has no expected start: the unbounded holder it waits on (one on
/// a device of its type or its node), or nothing that ends.
fn unknown(s: &Scheduler, c: &Claim, ends: &HashMap<ClaimId, HolderEnd>) -> Unknown {
    let unbounded: Vec<&Claim> = s
        .claims()
        .filter(|h| ends.get(&h.id).is_some_and(|e| e.at.is_none()))
        .collect();
    let fits_on = |h: &&Claim| {
        h.allocation.as_ref().is_some_and(|a| {
            c.request.node.as_ref().is_none_or(|n| *n == a.node)
                && c.request.gpu.is_some() != a.shares.is_empty()
        })
    };
    let holder = unbounded
        .iter()
        .find(|h| fits_on(h))
        .or_else(|| unbounded.first())
        .map(|h| h.id);
    let why = match holder {
        Some(h) => format!(
            "it waits on claim {h}, which has no ttl, no expected duration and no history \
             of claims like it, so nothing says when it ends"
        ),
        None => "it does not fit even once every holder has ended (cordons, health or its \
                 project's share keep it out)"
            .to_string(),
    };
    Unknown { holder, why }
}

#[cfg(test)]
mod preview_tests;
#[cfg(test)]
mod tests;
