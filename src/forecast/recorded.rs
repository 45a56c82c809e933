//! A backtest's workload from what a serve recorded (`gpuboard simulate --backtest
//! --history DIR`): the fleet and the projects' shares of the history's first state, and
//! every claim that started while it recorded, arriving when it was created and holding
//! as long as it held. The replay then runs the endpoint's scheduler over them, as for a
//! scenario.
//!
//! What a recording cannot give is left out and counted as skipped: claims that never
//! started while it recorded (withdrawn, or still waiting at its end), whose hold is
//! unknown. A claim still held when the recording ends holds past the replay's end, with no
//! declared duration. Requests are replayed as recorded (memory, fractions, models, nodes)
//! without their `ttl`, waiting.

use std::collections::BTreeMap;

use super::backtest::{Arrival, BacktestError, Workload};
use crate::clock::Timestamp;
use crate::history::{Body, Record};
use crate::ids::ClaimId;
use crate::request::ClaimRequest;
use crate::scheduler::SchedulerConfig;
use crate::snapshot::{ClaimState, ClaimView, Snapshot, SnapshotChange};

/// How long past the recording's end the replay may run, so that claims waiting at its
/// end can start.
const DRAIN_MS: u64 = 24 * 3_600_000;

/// One claim as the recording saw it.
struct Seen {
    created: Timestamp,
    request: ClaimRequest,
    /// When it was first seen placed (the first state's time for those placed then).
    placed: Option<Timestamp>,
    /// When it was seen gone.
    gone: Option<Timestamp>,
}

/// The workload a recording describes: `start` is the history's first state and `records`
/// the versions after it; `until_s` (seconds from the first state) bounds the claims
/// evaluated, the whole recording by default.
pub(super) fn workload(
    start: &Snapshot,
    records: &[Record],
    until_s: Option<u64>,
) -> Result<Workload, BacktestError> {
    let t0 = start.taken_at;
    let last = records.last().map_or(t0, |r| r.at);
    let span = last.millis_since(t0);
    let until = match until_s {
        None => span,
        Some(u) if u > 0 && u.saturating_mul(1000) <= span => u * 1000,
        Some(u) => {
            return Err(BacktestError::Invalid(format!(
                "--evaluate-until {u} must be from 1 to the recording's length ({} s)",
                span / 1000
            )));
        }
    };
    if start.nodes.iter().all(|n| n.devices.is_empty()) {
        return Err(BacktestError::Invalid(
            "the history's first state has no GPUs: record a serve that has some".to_string(),
        ));
    }
    let mut seen: BTreeMap<ClaimId, Seen> = BTreeMap::new();
    all(&mut seen, &start.claims, t0);
    for r in records {
        match &r.body {
            Body::Keyframe { state } => all(&mut seen, &state.claims, r.at),
            Body::Delta { delta } => {
                for change in delta {
                    match change {
                        SnapshotChange::Claim { claim } => one(&mut seen, claim, r.at),
                        SnapshotChange::ClaimRemoved { id } => gone(&mut seen, *id, r.at),
                        SnapshotChange::Claims { claims } => all(&mut seen, claims, r.at),
                        _ => {}
                    }
                }
            }
        }
    }
    let mut skipped = 0;
    let mut arrivals: Vec<(Timestamp, Timestamp, Arrival)> = Vec::new();
    for c in seen.into_values() {
        let Some(placed) = c.placed else {
            skipped += 1;
            continue;
        };
        let mut request = c.request;
        request.ttl = None;
        request.expected_duration = None;
        request.wait = true;
        let at = Timestamp(c.created.0.max(t0.0) - t0.0);
        // Those holding when the recording began arrive first, in the order they came.
        arrivals.push((
            at,
            c.created,
            Arrival {
                at,
                request,
                duration_ms: c.gone.map(|g| g.millis_since(placed)),
            },
        ));
    }
    arrivals.sort_by_key(|(at, created, _)| (*at, *created));
    Ok(Workload {
        nodes: start
            .nodes
            .iter()
            .map(crate::snapshot::NodeView::spec)
            .collect(),
        // The serve's placement policy, as its snapshots name it.
        config: SchedulerConfig {
            policy: start.endpoint.placement_policy(),
            ..SchedulerConfig::default()
        },
        shares: start
            .projects
            .iter()
            .map(|p| (p.name.clone(), p.share))
            .collect(),
        arrivals: arrivals.into_iter().map(|(_, _, a)| a).collect(),
        skipped,
        end: Timestamp(span.saturating_add(DRAIN_MS)),
        until: Timestamp(until),
    })
}

fn one(seen: &mut BTreeMap<ClaimId, Seen>, c: &ClaimView, at: Timestamp) {
    let s = seen.entry(c.id).or_insert_with(|| Seen {
        created: c.created_at,
        request: c.request.clone(),
        placed: None,
        gone: None,
    });
    if c.state == ClaimState::Placed && s.placed.is_none() {
        s.placed = Some(at);
    }
}

fn gone(seen: &mut BTreeMap<ClaimId, Seen>, id: ClaimId, at: Timestamp) {
    if let Some(s) = seen.get_mut(&id)
        && s.gone.is_none()
    {
        s.gone = Some(at);
    }
}

/// Every claim, whole: those not in it are gone.
fn all(seen: &mut BTreeMap<ClaimId, Seen>, claims: &[ClaimView], at: Timestamp) {
    let present: std::collections::BTreeSet<ClaimId> = claims.iter().map(|c| c.id).collect();
    let left: Vec<ClaimId> = seen
        .iter()
        .filter(|(id, s)| s.gone.is_none() && !present.contains(id))
        .map(|(id, _)| *id)
        .collect();
    for id in left {
        gone(seen, id, at);
    }
    for c in claims {
        one(seen, c, at);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::history::{Recording, state_of};
    use crate::inventory::a100_node;
    use crate::scheduler::{Scheduler, Submitted};

    const T0: Timestamp = Timestamp(1_000_000_000);

    fn secs(n: u64) -> Timestamp {
        T0.plus_secs(n)
    }

    fn submit(s: &mut Scheduler, project: &str, at: Timestamp) -> ClaimId {
        let v =
            json!({"nvidia.com/gpu": 1, "project": project, "wait": true, "expected_duration": 60});
        match s.submit(ClaimRequest::from_json(&v).unwrap(), "t", at) {
            Submitted::Placed(c) | Submitted::Pending(c) => c.id,
            other => panic!("{other:?}"),
        }
    }

    /// One GPU recorded as a serve records it: A holds it from the start for 600 s; B
    /// waits from 10 s and holds it 900 s; C is withdrawn while waiting; D waits from
    /// 900 s and still holds it when the recording ends.
    fn recorded() -> (Snapshot, Vec<Record>) {
        let mut s = Scheduler::new(SchedulerConfig::default(), vec![a100_node("a", 1)]).unwrap();
        submit(&mut s, "vision", T0);
        let start = state_of(&s.snapshot(T0));
        let mut rec = Recording::after(Some((start.clone(), T0)));
        let mut records = Vec::new();
        let mut step = |s: &mut Scheduler, at: Timestamp| {
            s.tick(at, &|_| true);
            records.extend(rec.observe(&s.snapshot(at)));
        };
        submit(&mut s, "nlp", secs(10));
        step(&mut s, secs(10));
        let c = submit(&mut s, "speech", secs(20));
        step(&mut s, secs(20));
        s.release(c, "t", secs(30));
        step(&mut s, secs(30));
        let a = s
            .claims()
            .find(|c| c.allocation.is_some())
            .map(|c| c.id)
            .unwrap();
        s.release(a, "t", secs(600));
        step(&mut s, secs(600));
        submit(&mut s, "speech", secs(900));
        step(&mut s, secs(900));
        let b = s
            .claims()
            .find(|c| c.allocation.is_some())
            .map(|c| c.id)
            .unwrap();
        s.release(b, "t", secs(1_500));
        step(&mut s, secs(1_500));
        step(&mut s, secs(2_000));
        (start, records)
    }

    #[test]
    fn a_recording_gives_each_started_claim_its_arrival_and_hold() {
        let (start, records) = recorded();
        let w = workload(&start, &records, None).unwrap();
        let got: Vec<(u64, String, Option<u64>)> = w
            .arrivals
            .iter()
            .map(|a| (a.at.0, a.request.project.clone(), a.duration_ms))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "vision".to_string(), Some(600_000)),
                (10_000, "nlp".to_string(), Some(900_000)),
                (900_000, "speech".to_string(), None),
            ]
        );
        // The withdrawn claim never started: its hold is unknown.
        assert_eq!(w.skipped, 1);
        assert!(
            w.arrivals
                .iter()
                .all(|a| a.request.expected_duration.is_none())
        );
        // The recording ends with its last version (nothing changed at 2 000 s).
        assert_eq!(w.until, Timestamp(1_500_000));
        assert_eq!(w.nodes.len(), 1);
        assert_eq!(w.nodes[0].devices.len(), 1);
        let err = workload(&start, &records, Some(1_501)).unwrap_err();
        assert!(
            err.to_string()
                .contains("from 1 to the recording's length (1500 s)")
        );
    }

    #[test]
    fn replaying_a_recording_starts_its_claims_where_they_started() {
        let (start, records) = recorded();
        let b = super::super::backtest::backtest_recorded(&start, &records, None).unwrap();
        assert_eq!((b.claims, b.skipped), (3, 1));
        let declared: Vec<(f64, Option<f64>, Option<f64>)> = b
            .waits
            .iter()
            .filter(|w| w.durations == "declared")
            .map(|w| (w.submitted_s, w.forecast_s, w.started_s))
            .collect();
        // Each waiting claim starts in the replay when it started on the endpoint, and with
        // the holds declared the forecast made at its submit says so.
        assert_eq!(
            declared,
            vec![
                (10.0, Some(600.0), Some(600.0)),
                (900.0, Some(1_500.0), Some(1_500.0)),
            ]
        );
        let row = &b.rows[0];
        assert_eq!(
            (row.durations.as_str(), row.predictor.as_str()),
            ("declared", "forecast")
        );
        assert_eq!((row.claims, row.median, row.p90), (2, 0.0, 0.0));
    }
}
