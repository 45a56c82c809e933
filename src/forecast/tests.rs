//! Expected starts on small fleets, each figure worked out by hand; and against the
//! scheduler itself, run with holders ending as the forecast assumed.

use serde_json::json;

use super::*;
use crate::inventory::a100_node;
use crate::request::ClaimRequest;
use crate::scheduler::{SchedulerConfig, Submitted};
use crate::wire::forecast::EndBasis;

const T0: Timestamp = Timestamp(1_000_000_000);

fn sched(gpus: u32) -> Scheduler {
    Scheduler::new(SchedulerConfig::default(), vec![a100_node("a", gpus)]).unwrap()
}

fn req(v: serde_json::Value) -> ClaimRequest {
    ClaimRequest::from_json(&v).unwrap()
}

/// A whole GPU of `project`, with these extra fields.
fn gpu(project: &str, extra: serde_json::Value) -> ClaimRequest {
    let mut v = json!({"nvidia.com/gpu": 1, "project": project, "wait": true});
    if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    req(v)
}

fn submit(s: &mut Scheduler, r: ClaimRequest, at: Timestamp) -> ClaimId {
    match s.submit(r, "t", at) {
        Submitted::Placed(c) | Submitted::Pending(c) => c.id,
        other => panic!("{other:?}"),
    }
}

fn secs(n: u64) -> Timestamp {
    T0.plus_secs(n)
}

#[test]
fn a_declared_duration_gives_an_exact_start_where_the_holder_was() {
    let mut s = sched(1);
    let holder = submit(&mut s, gpu("vision", json!({"expected_duration": 600})), T0);
    let waiting = submit(&mut s, gpu("nlp", json!({})), secs(10));
    let f = forecast(&s, secs(60), &HoldTimes::default());
    assert_eq!(f.starts.len(), 1);
    let e = f.of(waiting).unwrap();
    let b = e.start.unwrap();
    assert_eq!((b.p10, b.p50, b.p90), (secs(600), secs(600), secs(600)));
    assert_eq!(e.node.as_deref(), Some("a"));
    assert_eq!(e.devices, vec![0]);
    let freed = e.freed_by.as_ref().unwrap();
    assert_eq!(freed.claim, holder);
    assert_eq!(freed.basis, EndBasis::Declared);
    assert_eq!(e.ahead, 0);
    assert!(e.unknown.is_none());
}

#[test]
fn claims_queue_behind_each_other_and_count_who_is_ahead() {
    let mut s = sched(1);
    submit(&mut s, gpu("vision", json!({"expected_duration": 600})), T0);
    let first = submit(
        &mut s,
        gpu("nlp", json!({"expected_duration": 300})),
        secs(1),
    );
    let second = submit(&mut s, gpu("nlp", json!({})), secs(2));
    let f = forecast(&s, secs(60), &HoldTimes::default());
    let a = f.of(first).unwrap();
    let b = f.of(second).unwrap();
    assert_eq!(a.start.unwrap().p50, secs(600));
    assert_eq!(a.ahead, 0);
    // The second waits for the first, which holds its declared 300 s from its start.
    assert_eq!(b.start.unwrap().p50, secs(900));
    assert_eq!(b.ahead, 1);
    assert_eq!(b.freed_by.as_ref().unwrap().claim, first);
}

#[test]
fn learned_hold_times_give_a_band_and_count_what_a_holder_has_held() {
    let mut s = sched(1);
    let holder = submit(&mut s, gpu("vision", json!({})), T0);
    let waiting = submit(&mut s, gpu("nlp", json!({})), secs(1));
    let form = s.claim(holder).unwrap().request.describe();
    // Hold times 100 s, 200 s ... 1 000 s.
    let samples = (1..=10).map(|k| HoldSample {
        project: "vision".into(),
        form: form.clone(),
        held_ms: k * 100_000,
    });
    let holds = HoldTimes::from_samples(samples);
    let b = forecast(&s, T0, &holds).of(waiting).unwrap().start.unwrap();
    // Nearest rank over 10 values: p10 -> the 2nd (200 s), p90 -> the 9th (rounded
    // 8.1: 900 s); the middle is the mean, 550 s.
    assert_eq!((b.p10, b.p50, b.p90), (secs(200), secs(550), secs(900)));
    // Having held 450 s already, only the hold times above it count: 500 ... 1 000 s,
    // ranks 0.5 and 4.5 of 0..5 rounded up: 600 and 1 000 s; their mean 750 s.
    let b = forecast(&s, secs(450), &holds)
        .of(waiting)
        .unwrap()
        .start
        .unwrap();
    assert_eq!((b.p10, b.p50, b.p90), (secs(600), secs(750), secs(1000)));
    // Past every hold time seen, it is overdue: it ends any moment.
    let e = forecast(&s, secs(2_000), &holds);
    let b = e.of(waiting).unwrap().start.unwrap();
    assert_eq!((b.p10, b.p90), (secs(2_000), secs(2_000)));
    assert_eq!(
        e.of(waiting).unwrap().freed_by.as_ref().unwrap().basis,
        EndBasis::Learned
    );
    assert_eq!(e.of(waiting).unwrap().short(secs(2_000)), "now");
}

/// Skewed hold times (two of three 30 minutes, one 45: median 30, mean 35): a queue of
/// claims like them starts one mean after another in the middle run, not one median
/// after another; the band's ends are the p10 and p90 runs.
#[test]
fn a_queue_behind_skewed_hold_times_moves_at_their_mean() {
    let mut s = sched(1);
    submit(&mut s, gpu("vision", json!({})), T0);
    let queued: Vec<ClaimId> = (1..=3)
        .map(|k| submit(&mut s, gpu("vision", json!({})), secs(k)))
        .collect();
    let form = s.claim(queued[0]).unwrap().request.describe();
    let samples = [1_800, 1_800, 2_700].map(|held_s: u64| HoldSample {
        project: "vision".into(),
        form: form.clone(),
        held_ms: held_s * 1_000,
    });
    let holds = HoldTimes::from_samples(samples);
    let f = forecast(&s, T0, &holds);
    let bands: Vec<(Timestamp, Timestamp, Timestamp)> = queued
        .iter()
        .map(|id| {
            let b = f.of(*id).unwrap().start.unwrap();
            (b.p10, b.p50, b.p90)
        })
        .collect();
    assert_eq!(
        bands,
        vec![
            (secs(1_800), secs(2_100), secs(2_700)),
            (secs(3_600), secs(4_200), secs(5_400)),
            (secs(5_400), secs(6_300), secs(8_100)),
        ]
    );
    // Having held 2 000 s, only the 45-minute hold is longer: it ends at 2 700 s in
    // every run.
    let b = forecast(&s, secs(2_000), &holds)
        .of(queued[0])
        .unwrap()
        .start
        .unwrap();
    assert_eq!(
        (b.p10, b.p50, b.p90),
        (secs(2_700), secs(2_700), secs(2_700))
    );
}

#[test]
fn the_mean_of_hold_times_neither_overflows_nor_divides_by_zero() {
    assert_eq!(holds::mean(&[]), 0);
    assert_eq!(holds::mean(&[1, 2]), 1);
    assert_eq!(holds::mean(&[u64::MAX, u64::MAX]), u64::MAX);
}

#[test]
fn too_few_samples_are_not_trusted() {
    let samples = (1..holds::MIN_SAMPLES as u64).map(|k| HoldSample {
        project: "p".into(),
        form: "1 GPU".into(),
        held_ms: k,
    });
    assert!(HoldTimes::from_samples(samples).of("p", "1 GPU").is_none());
}

#[test]
fn a_lease_without_an_owner_ends_the_hold_and_an_owner_does_not() {
    let mut s = sched(1);
    let holder = submit(&mut s, gpu("vision", json!({"ttl": 120})), T0);
    let waiting = submit(&mut s, gpu("nlp", json!({})), secs(1));
    let e = forecast(&s, secs(10), &HoldTimes::default());
    let e = e.of(waiting).unwrap();
    assert_eq!(e.start.unwrap().p50, secs(120));
    let freed = e.freed_by.as_ref().unwrap();
    assert_eq!((freed.claim, freed.basis), (holder, EndBasis::Lease));
    assert_eq!(freed.lease_expires_at, Some(secs(120)));
    // A local owner extends its lease while it runs: nothing bounds it.
    let mut s = sched(1);
    let owned = submit(&mut s, gpu("vision", json!({"ttl": 120, "pid": 4242})), T0);
    let waiting = submit(&mut s, gpu("nlp", json!({})), secs(1));
    let f = forecast(&s, secs(10), &HoldTimes::default());
    let e = f.of(waiting).unwrap();
    assert!(e.start.is_none());
    assert_eq!(e.unknown.as_ref().unwrap().holder, Some(owned));
    assert_eq!(e.short(secs(10)), "unknown");
}

#[test]
fn an_unbounded_holder_is_named_and_a_claim_nothing_frees_says_so() {
    let mut s = sched(2);
    let forever = submit(&mut s, gpu("vision", json!({})), T0);
    let _other = submit(&mut s, gpu("vision", json!({"expected_duration": 60})), T0);
    // Two GPUs on one node: it needs both, so it waits on the unbounded one too.
    let both = submit(
        &mut s,
        req(json!({"nvidia.com/gpu": 2, "project": "nlp", "wait": true})),
        secs(1),
    );
    let f = forecast(&s, secs(5), &HoldTimes::default());
    let u = f.of(both).unwrap().unknown.clone().unwrap();
    assert_eq!(u.holder, Some(forever));
    assert!(u.why.contains(&format!("claim {forever}")), "{}", u.why);
    // Cordon both devices: nothing that ends frees it.
    let mut s = sched(1);
    submit(&mut s, gpu("vision", json!({"expected_duration": 60})), T0);
    let waiting = submit(&mut s, gpu("nlp", json!({})), secs(1));
    s.set_cordon("a", 0, true, "t", secs(2)).unwrap();
    let f = forecast(&s, secs(5), &HoldTimes::default());
    let u = f.of(waiting).unwrap().unknown.clone().unwrap();
    assert_eq!(u.holder, None);
    assert!(u.why.contains("cordons"), "{}", u.why);
}

#[test]
fn forecasting_changes_nothing() {
    let mut s = sched(1);
    submit(&mut s, gpu("vision", json!({"expected_duration": 600})), T0);
    submit(&mut s, gpu("nlp", json!({})), secs(1));
    s.take_changes();
    let before = s.snapshot(secs(2));
    let _ = forecast(&s, secs(2), &HoldTimes::default());
    assert_eq!(s.snapshot(secs(2)), before);
    assert!(s.take_changes().is_empty());
}

/// The forecast with declared durations, against the scheduler itself ticking every
/// second and releasing each holder when its declared time is up: every waiting claim
/// starts when forecast, on the node forecast.
#[test]
fn declared_durations_forecast_what_the_scheduler_then_does() {
    let mut s = Scheduler::new(
        SchedulerConfig::default(),
        vec![a100_node("a", 2), a100_node("b", 2)],
    )
    .unwrap();
    let projects = ["vision", "nlp", "speech"];
    for k in 0..12u64 {
        let p = projects[(k % 3) as usize];
        let count = 1 + k % 2;
        let d = 120 + 37 * k;
        submit(
            &mut s,
            req(
                json!({"nvidia.com/gpu": count, "project": p, "wait": true, "expected_duration": d}),
            ),
            T0.plus_secs(k),
        );
    }
    let now = secs(20);
    s.tick(now, &|_| true);
    let f = forecast(&s, now, &HoldTimes::default());
    assert!(!f.starts.is_empty());
    let mut started = std::collections::BTreeMap::new();
    let mut t = now;
    while started.len() < f.starts.len() && t < secs(20_000) {
        t = t.plus_secs(1);
        let due: Vec<ClaimId> = s
            .claims()
            .filter(|c| {
                let since = c.placed_at.unwrap_or(c.created_at);
                c.allocation.is_some()
                    && c.request
                        .expected_duration
                        .is_some_and(|d| since.plus_secs(d) <= t)
            })
            .map(|c| c.id)
            .collect();
        for id in due {
            s.release(id, "t", t);
        }
        s.tick(t, &|_| true);
        for e in &f.starts {
            if let Some(c) = s.claim(e.claim)
                && let Some(a) = &c.allocation
            {
                started.entry(e.claim).or_insert((t, a.node.clone()));
            }
        }
    }
    for e in &f.starts {
        let (at, node) = &started[&e.claim];
        assert_eq!(Some(*at), e.start.map(|b| b.p50), "claim {}", e.claim);
        assert_eq!(Some(node), e.node.as_ref(), "claim {}", e.claim);
    }
}

/// One project on one GPU: the queue is first come, first served, so declared durations
/// forecast every start exactly; the soonest lease end (twice each duration) does not.
#[test]
fn the_backtest_finds_no_error_where_nothing_overtakes() {
    let scenario: crate::simulate::Scenario = toml::from_str(
        r#"
        duration_s = 20000
        [[hosts]]
        name = "h"
        gpus = { "NVIDIA A100-SXM4-80GB" = 1 }
        [[projects]]
        name = "solo"
        [[claims]]
        project = "solo"
        on = ["gpu"]
        duration_s = 600
        count = 5
        every_s = 60
        "#,
    )
    .unwrap();
    let b = backtest::backtest(&scenario).unwrap();
    assert_eq!(b.claims, 5);
    let row = |durations: &str, predictor: &str| {
        b.rows
            .iter()
            .find(|r| r.durations == durations && r.predictor == predictor)
            .unwrap()
            .clone()
    };
    let declared = row("declared", "forecast");
    assert_eq!((declared.claims, declared.unknown), (4, 0));
    assert_eq!((declared.median, declared.p90), (0.0, 0.0));
    assert!(row("declared", "soonest lease end").median > 0.5);
    // Learned: nothing has ended yet when they wait, and nothing bounds the holder.
    let learned = row("learned", "forecast");
    assert_eq!((learned.claims, learned.unknown), (4, 4));
    assert!(backtest::render(&b).contains("declared   forecast"));
    // Each claim that waited, per mode: submitted every minute behind the first, queued
    // behind those before it, started as each 10 minutes ran out, and forecast exactly
    // with durations declared.
    let declared: Vec<&backtest::Wait> = b
        .waits
        .iter()
        .filter(|w| w.durations == "declared")
        .collect();
    let rows: Vec<(f64, usize, Option<f64>)> = declared
        .iter()
        .map(|w| (w.submitted_s, w.queue, w.started_s))
        .collect();
    assert_eq!(
        rows,
        vec![
            (60.0, 1, Some(600.0)),
            (120.0, 2, Some(1_200.0)),
            (180.0, 3, Some(1_800.0)),
            (240.0, 4, Some(2_400.0)),
        ]
    );
    assert!(declared.iter().all(|w| w.forecast_s == w.started_s));
    assert!(declared.iter().all(|w| w.project == "solo"));
    let learned = b.waits.iter().filter(|w| w.durations == "learned");
    assert!(learned.clone().count() == 4 && learned.into_iter().all(|w| w.forecast_s.is_none()));
}

/// An hourly project (share 300) overtakes a queue of another on one GPU: the last
/// claim of the queue waits for the hourly claim expected at 5 400 s, which the forecast
/// made at its submit (3 880 s) expects from the one at 1 800 s. With durations declared
/// that expected claim declares its 300 s as the one it repeats did, so every start is
/// exact; given bare, it held without end in the forward copy and the last start was
/// unknown.
#[test]
fn the_backtest_expects_arrivals_that_declare_their_durations() {
    let scenario: crate::simulate::Scenario = toml::from_str(
        r#"
        duration_s = 20000
        [[hosts]]
        name = "h"
        gpus = { "NVIDIA A100-SXM4-80GB" = 1 }
        [[projects]]
        name = "queue"
        [[projects]]
        name = "hourly"
        share = 300
        [[claims]]
        project = "hourly"
        on = ["gpu"]
        duration_s = 300
        count = 5
        every_s = 1800
        [[claims]]
        project = "queue"
        on = ["gpu"]
        at_s = 3700
        duration_s = 600
        count = 4
        every_s = 60
        "#,
    )
    .unwrap();
    let b = backtest::backtest(&scenario).unwrap();
    let declared: Vec<(&str, f64, Option<f64>, Option<f64>)> = b
        .waits
        .iter()
        .filter(|w| w.durations == "declared")
        .map(|w| (w.project.as_str(), w.submitted_s, w.forecast_s, w.started_s))
        .collect();
    assert_eq!(
        declared,
        vec![
            ("queue", 3_700.0, Some(3_900.0), Some(3_900.0)),
            ("queue", 3_760.0, Some(4_500.0), Some(4_500.0)),
            ("queue", 3_820.0, Some(5_100.0), Some(5_100.0)),
            ("hourly", 5_400.0, Some(5_700.0), Some(5_700.0)),
            ("queue", 3_880.0, Some(6_000.0), Some(6_000.0)),
        ]
    );
    let row = b
        .rows
        .iter()
        .find(|r| r.durations == "declared" && r.predictor == "forecast")
        .unwrap();
    assert_eq!(
        (row.claims, row.unknown, row.median, row.p90),
        (5, 0, 0.0, 0.0)
    );
}

/// With `evaluate_until_s` only the claims submitted by then are forecast and evaluated,
/// while the later arrivals go on; an evaluated claim that has not started when the
/// scenario ends is counted apart, and a window outside the run is refused.
#[test]
fn the_backtest_evaluates_the_claims_submitted_in_its_window() {
    let scenario = |duration_s: u64, until_s: u64| -> crate::simulate::Scenario {
        toml::from_str(&format!(
            r#"
            duration_s = {duration_s}
            evaluate_until_s = {until_s}
            [[hosts]]
            name = "h"
            gpus = {{ "NVIDIA A100-SXM4-80GB" = 1 }}
            [[projects]]
            name = "solo"
            [[claims]]
            project = "solo"
            on = ["gpu"]
            duration_s = 600
            count = 10
            every_s = 60
            "#
        ))
        .unwrap()
    };
    let b = backtest::backtest(&scenario(20_000, 180)).unwrap();
    assert_eq!((b.claims, b.evaluated_until_s), (10, 180));
    let declared = b
        .rows
        .iter()
        .find(|r| r.durations == "declared" && r.predictor == "forecast")
        .unwrap();
    assert_eq!((declared.claims, declared.not_started), (3, 0));
    assert_eq!((declared.median, declared.p90), (0.0, 0.0));
    let submitted: Vec<f64> = b
        .waits
        .iter()
        .filter(|w| w.durations == "declared")
        .map(|w| w.submitted_s)
        .collect();
    assert_eq!(submitted, vec![60.0, 120.0, 180.0]);
    // Ended at 1 500 s: the claim submitted at 180 s would start at 1 800 s.
    let b = backtest::backtest(&scenario(1_500, 180)).unwrap();
    let declared = b
        .rows
        .iter()
        .find(|r| r.durations == "declared" && r.predictor == "forecast")
        .unwrap();
    assert_eq!((declared.claims, declared.not_started), (2, 1));
    let last = b.waits.iter().find(|w| w.submitted_s == 180.0).unwrap();
    assert_eq!((last.forecast_s, last.started_s), (Some(1_800.0), None));
    assert!(backtest::render(&b).contains("unstarted"));
    for until_s in [0, 1_501] {
        let err = backtest::backtest(&scenario(1_500, until_s))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("evaluate_until_s") && err.contains("duration_s (1500)"),
            "{err}"
        );
    }
}

/// Hold times and arrivals from recorded versions: a claim seen placed and then gone gives
/// its hold; one placed before the window gives none; one first seen in the last hour is
/// an arrival, expected again an hour after it came.
#[test]
fn the_history_teaches_hold_times_and_recent_arrivals() {
    use crate::history::{Body, Record};
    use crate::scheduler::claim_view;
    use crate::snapshot::{Snapshot, SnapshotChange};
    let mut s = sched(4);
    let old = submit(&mut s, gpu("vision", json!({})), T0);
    let start = Snapshot {
        taken_at: T0,
        claims: vec![claim_view(s.claim(old).unwrap())],
        ..Snapshot::default()
    };
    let mut records = Vec::new();
    let delta = |at: Timestamp, delta: Vec<SnapshotChange>| Record {
        at,
        revision: 0,
        body: Body::Delta { delta },
        changes: Vec::new(),
    };
    let mut ids = Vec::new();
    for k in 0..3u64 {
        let placed_at = secs(100 + 1_000 * k);
        let id = submit(&mut s, gpu("vision", json!({})), placed_at);
        ids.push(id);
        records.push(delta(
            placed_at,
            vec![SnapshotChange::Claim {
                claim: Box::new(claim_view(s.claim(id).unwrap())),
            }],
        ));
        records.push(delta(
            placed_at.plus_secs(300 + 100 * k),
            vec![SnapshotChange::ClaimRemoved { id }],
        ));
        s.release(id, "t", placed_at.plus_secs(300 + 100 * k));
    }
    // The claim placed before the window ends too: its hold is not known.
    records.push(delta(
        secs(4_000),
        vec![SnapshotChange::ClaimRemoved { id: old }],
    ));
    let holds = learn(&start, &records);
    let form = s.claim(old).map_or_else(
        || gpu("vision", json!({})).describe(),
        |c| c.request.describe(),
    );
    assert_eq!(
        holds.of("vision", &form),
        Some(&[300_000, 400_000, 500_000][..])
    );
    // The last version is at 4 000 s: the arrivals at 1 100 s and 2 100 s are within the
    // hour before it, the one at 100 s is not.
    let expected: Vec<Timestamp> = holds
        .expected_arrivals(secs(4_000))
        .into_iter()
        .map(|(at, _)| at)
        .collect();
    assert_eq!(expected, vec![secs(1_100 + 3_600), secs(2_100 + 3_600)]);
}

#[test]
fn the_last_hours_arrivals_are_expected_again_every_hour_for_a_day() {
    let holds = HoldTimes::default().with_arrivals(vec![
        (secs(1_000), gpu("vision", json!({}))),
        (secs(3_000), gpu("nlp", json!({}))),
    ]);
    let mut ahead = holds.arrivals_ahead(secs(3_600));
    let mut seen = Vec::new();
    while let Some((at, req)) = ahead.take() {
        seen.push((at, req.project.clone()));
    }
    assert_eq!(seen.len(), 2 * holds::ARRIVAL_REPEATS);
    assert_eq!(seen[0], (secs(4_600), "vision".to_string()));
    assert_eq!(seen[1], (secs(6_600), "nlp".to_string()));
    assert_eq!(seen[2], (secs(8_200), "vision".to_string()));
    let hours = u64::try_from(holds::ARRIVAL_REPEATS).unwrap();
    assert_eq!(
        seen.last().map(|(at, _)| *at),
        Some(secs(3_000 + 3_600 * hours))
    );
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "in time order");
    assert!(
        HoldTimes::default()
            .arrivals_ahead(secs(0))
            .peek()
            .is_none()
    );
}
