//! Forecasting every waiting claim of a busy endpoint: 1 000 nodes of 8 GPUs (8 000 GPUs,
//! two models), 18 998 claims placed (whole GPUs and tenths, the fleet full) and 1 000
//! waiting (1, 2 and 0.5 GPU) across 20 projects; half the holders declare a duration,
//! the others' is learned from a hold-time table. The bound: 200 ms. Also the copy of the
//! scheduler the endpoint takes under its lock before forecasting.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Mutex;

use criterion::{Criterion, criterion_group, criterion_main};
use gpuboard::clock::Timestamp;
use gpuboard::forecast::{HoldSample, HoldTimes, forecast};
use gpuboard::placement::{DeviceSpec, NodeSpec};
use gpuboard::request::ClaimRequest;
use gpuboard::scheduler::{Scheduler, SchedulerConfig, Submitted};
use gpuboard::units::Bytes;
use rand::rngs::StdRng as Rng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use tracing::Level;
use tracing::field::{Field, Visit};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{self, Layer, SubscriberExt};

const MODELS: [&str; 2] = ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"];
const PROJECTS: u64 = 20;
const T0: Timestamp = Timestamp(1_700_000_000_000);

fn req(v: Value) -> ClaimRequest {
    ClaimRequest::from_json(&v).unwrap()
}

/// The busy endpoint: `nodes` nodes of 8 GPUs, full, with `waiting` claims queued; and the
/// hold-time table its learned holders use.
fn busy(nodes: usize, waiting: usize) -> (Scheduler, HoldTimes, Timestamp) {
    let specs = (0..nodes)
        .map(|n| NodeSpec {
            name: format!("node-{n:05}"),
            devices: (0..8)
                .map(|i| DeviceSpec {
                    index: i,
                    model: MODELS[n % 2].to_string(),
                    uuid: None,
                    memory: Some(Bytes::gib(80)),
                    link_group: None,
                })
                .collect(),
            cpus: None,
        })
        .collect();
    let mut s = Scheduler::new(SchedulerConfig::default(), specs).unwrap();
    // A fixed seed: every run builds the same state.
    let mut rng = Rng::seed_from_u64(0x9E37_79B9_7F4A_7C15);
    let gpus = nodes * 8;
    // About 85 % of the GPUs whole, the rest in tenths: the fleet is full, with 19 000
    // holders on 8 000 GPUs.
    let whole = gpus * 6_778 / 8_000;
    let tenths = (gpus - whole) * 10;
    let mut t = T0;
    let holder = |s: &mut Scheduler, amount: Value, t: Timestamp, rng: &mut Rng| {
        let mut v = json!({"project": format!("p{:02}", rng.random_range(0..PROJECTS))});
        v["num_gpus"] = amount;
        // Half declare how long they hold (1 to 4 hours); the rest are learned.
        if rng.random_range(0..2) == 0 {
            v["expected_duration"] = json!(3_600 + rng.random_range(0..10_800));
        }
        let placed = matches!(s.submit(req(v), "bench", t), Submitted::Placed(_));
        assert!(placed, "the fleet fills exactly");
    };
    for _ in 0..whole {
        holder(&mut s, json!(1), t, &mut rng);
        t = t.plus_millis(100);
    }
    for _ in 0..tenths {
        holder(&mut s, json!(0.1), t, &mut rng);
        t = t.plus_millis(100);
    }
    for k in 0..waiting {
        let amount = match k % 5 {
            0..3 => json!(1),
            3 => json!(0.5),
            _ => json!(2),
        };
        let v = json!({"num_gpus": amount, "wait": true,
                       "project": format!("p{:02}", rng.random_range(0..PROJECTS))});
        assert!(matches!(
            s.submit(req(v), "bench", t),
            Submitted::Pending(_)
        ));
    }
    // Learned hold times: 40 past claims of each project and form, 30 min to 5 h.
    let samples = (0..PROJECTS).flat_map(|p| {
        ["num_gpus=1", "num_gpus=0.1"]
            .into_iter()
            .flat_map(move |form| {
                (0..40).map(move |k| HoldSample {
                    project: format!("p{p:02}"),
                    form: form.to_string(),
                    held_ms: 1_800_000 + (k * 7_919 + p * 104_729) % 40 * 405_000,
                })
            })
    });
    s.take_changes();
    (s, HoldTimes::from_samples(samples), t.plus_secs(60))
}

/// `cargo bench` passes `--bench`; `cargo test` runs the bench once as a smoke test, on a
/// small endpoint, so the test suite stays quick. `BENCH_NODES` and `BENCH_WAITING` set
/// another size (a smaller one to profile under `perf`).
fn size() -> (usize, usize) {
    let (nodes, waiting) = if std::env::args().any(|a| a == "--bench") {
        (1_000, 1_000)
    } else {
        (20, 20)
    };
    let env = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    (env("BENCH_NODES", nodes), env("BENCH_WAITING", waiting))
}

/// Counts the fair-share divisions by outcome (the `gpuboard::division` trace events).
struct Divisions;

static DIVISIONS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

impl<S: tracing::Subscriber> Layer<S> for Divisions {
    fn on_event(&self, event: &tracing::Event<'_>, _: layer::Context<'_, S>) {
        struct Outcome(Option<String>);
        impl Visit for Outcome {
            fn record_str(&mut self, field: &Field, value: &str) {
                if field.name() == "outcome" {
                    self.0 = Some(value.to_string());
                }
            }
            fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
        }
        let mut outcome = Outcome(None);
        event.record(&mut outcome);
        if let Some(o) = outcome.0 {
            *DIVISIONS.lock().unwrap().entry(o).or_default() += 1;
        }
    }
}

/// With `BENCH_DIVISIONS` set: one forecast, its divisions counted by outcome (all three
/// runs together), printed, and nothing timed.
fn count_divisions(s: &Scheduler, now: Timestamp, holds: &HoldTimes) {
    // Global: the forecast's runs are on threads of their own.
    let layer =
        Divisions.with_filter(Targets::new().with_target("gpuboard::division", Level::TRACE));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).unwrap();
    black_box(forecast(s, now, holds));
    let counts = DIVISIONS.lock().unwrap();
    let total: u64 = counts.values().sum();
    eprintln!("{total} divisions in one forecast (three runs):");
    for (outcome, n) in counts.iter() {
        eprintln!("  {n:>7}  {outcome}");
    }
}

fn every_waiting_claim(c: &mut Criterion) {
    let (nodes, waiting) = size();
    let (s, holds, now) = busy(nodes, waiting);
    if std::env::var_os("BENCH_DIVISIONS").is_some() {
        count_divisions(&s, now, &holds);
        return;
    }
    let f = forecast(&s, now, &holds);
    assert_eq!(f.starts.len(), waiting);
    let known = f.starts.iter().filter(|e| e.start.is_some()).count();
    eprintln!(
        "{} claims, {waiting} waiting, {known} with a start; the last at {} min",
        s.claims().count(),
        f.starts
            .iter()
            .filter_map(|e| e.start)
            .map(|b| b.p50.millis_since(now) / 60_000)
            .max()
            .unwrap_or(0)
    );
    let mut group = c.benchmark_group("forecast");
    group.sample_size(10);
    group.bench_function(format!("{}_gpus_{waiting}_waiting", nodes * 8), |b| {
        b.iter(|| black_box(forecast(&s, now, &holds)));
    });
    // What `GET /v1/forecast` holds the scheduler's lock for: the copy it forecasts on.
    // The copy is dropped after the forecast, outside the lock, so its drop is not timed.
    group.bench_function(format!("copy_{}_gpus", nodes * 8), |b| {
        b.iter_with_large_drop(|| s.forward_copy());
    });
    group.finish();
}

criterion_group!(benches, every_waiting_claim);
criterion_main!(benches);
