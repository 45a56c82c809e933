//! Exactness of the history: for random operation sequences on an engine with an injected
//! clock, the state read back from the history at every recorded version is the snapshot
//! the endpoint served then (less its telemetry, which is recorded as samples); the change
//! index finds each claim's changes; a reopened store goes on from where it stopped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use gpuboard::clock::{ManualClock, Timestamp};
use gpuboard::endpoint::engine::{Engine, EngineConfig, LocalProcesses};
use gpuboard::history::{Recording, state_of};
use gpuboard::ids::ClaimId;
use gpuboard::request::ClaimRequest;
use gpuboard::scheduler::Submitted;
use gpuboard::snapshot::Snapshot;
use gpuboard::store::history::{HistoryStore, StateAt};
use gpuboard::wire::history::{ChangeKind, Direction, Target};
use proptest::prelude::*;
use serde_json::json;

#[derive(Clone, Debug)]
enum Op {
    Claim {
        gpus: u8,
        ttl: Option<u64>,
        project: u8,
        wait: bool,
    },
    Release(usize),
    Move(usize, u32),
    Cordon(u32, bool),
    Share(u8, u32),
    Reset(u8),
    /// Advance the clock by this many seconds and tick (leases expire, pending claims start).
    Tick(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..5, proptest::option::of(5u64..120), 0u8..3, any::<bool>())
            .prop_map(|(gpus, ttl, project, wait)| Op::Claim { gpus, ttl, project, wait }),
        3 => (0usize..16).prop_map(Op::Release),
        1 => (0usize..16, 0u32..4).prop_map(|(c, d)| Op::Move(c, d)),
        1 => (0u32..4, any::<bool>()).prop_map(|(d, c)| Op::Cordon(d, c)),
        1 => (0u8..3, 0u32..500).prop_map(|(p, s)| Op::Share(p, s)),
        1 => (0u8..3).prop_map(Op::Reset),
        2 => (1u16..300).prop_map(Op::Tick),
    ]
}

const T0: u64 = 1_795_442_700_000;

const NODE: &str = r#"
[[nodes]]
name = "a"
[[nodes.gpus]]
model = "NVIDIA A100-SXM4-40GB"
memory = "40GiB"
count = 4
"#;

const SIZES: [f64; 5] = [0.25, 0.5, 0.75, 1.0, 2.0];

const PROJECTS: [&str; 3] = ["vision", "speech", "nlp"];

async fn apply(engine: &Engine, clock: &ManualClock, ids: &mut Vec<ClaimId>, op: &Op) {
    match op {
        Op::Claim {
            gpus,
            ttl,
            project,
            wait,
        } => {
            let mut v = json!({
                "num_gpus": SIZES[*gpus as usize % SIZES.len()],
                "project": PROJECTS[*project as usize],
                "wait": wait,
            });
            if let Some(t) = ttl {
                v["ttl"] = json!(t);
            }
            let req = ClaimRequest::from_json(&v).unwrap();
            match engine.submit(req, "op").await.unwrap() {
                Submitted::Placed(c) | Submitted::Pending(c) => ids.push(c.id),
                Submitted::Refused(_) | Submitted::ShareZero(_) => {}
            }
        }
        Op::Release(i) => {
            if let Some(id) = ids.get(*i % ids.len().max(1)) {
                engine.release(*id, "op").await.unwrap();
            }
        }
        Op::Move(i, d) => {
            if let Some(id) = ids.get(*i % ids.len().max(1)) {
                let target = gpuboard::placement::MoveTarget {
                    node: None,
                    devices: Some(vec![*d]),
                };
                let _ = engine.move_claim(*id, target, "op").await;
            }
        }
        Op::Cordon(d, c) => engine.cordon("a", *d, *c, "op").await.unwrap(),
        Op::Share(p, s) => engine
            .set_share(PROJECTS[*p as usize], *s, "op")
            .await
            .unwrap(),
        Op::Reset(p) => {
            let _ = engine.reset_project(PROJECTS[*p as usize], "op").await;
        }
        Op::Tick(s) => {
            clock.advance_millis(u64::from(*s) * 1000);
            engine.tick().await.unwrap();
        }
    }
}

/// Runs `ops`, recording after each; returns what was served at each recorded version.
fn run(
    ops: &[Op],
    store: &mut HistoryStore,
    start: u64,
) -> (Vec<(Timestamp, Snapshot)>, Vec<ClaimId>) {
    run_coalesced(ops, &vec![true; ops.len()], store, start)
}

/// Runs `ops`, recording after those whose `record` is true (and after the first), as the
/// recorder does when commits come faster than it records: several changes in one version.
fn run_coalesced(
    ops: &[Op],
    record: &[bool],
    store: &mut HistoryStore,
    start: u64,
) -> (Vec<(Timestamp, Snapshot)>, Vec<ClaimId>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let clock = ManualClock::new(Timestamp(start));
        let engine = Engine::in_memory(
            EngineConfig::default(),
            gpuboard::inventory::parse(NODE, "test").unwrap(),
            Arc::new(clock.clone()),
            Arc::new(LocalProcesses),
        )
        .unwrap();
        let mut recording = Recording::after(store.last_state().unwrap());
        let mut served = Vec::new();
        let mut ids = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            apply(&engine, &clock, &mut ids, op).await;
            clock.advance_millis(7);
            if i > 0 && !record.get(i).copied().unwrap_or(true) {
                continue;
            }
            let snap = engine.durable_snapshot().await;
            if let Some(rec) = recording.observe(&snap) {
                store.append(&rec).unwrap();
                served.push((snap.taken_at, state_of(&snap)));
            }
        }
        (served, ids)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_recorded_version_reads_back_as_served(ops in proptest::collection::vec(op(), 1..120)) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = HistoryStore::open(dir.path()).unwrap();
        let (served, ids) = run(&ops, &mut store, T0);
        prop_assert!(!served.is_empty(), "the first snapshot is always recorded");
        for (at, expected) in &served {
            match store.state_at(*at).unwrap() {
                StateAt::Shown(state, shown) => {
                    prop_assert_eq!(shown, *at);
                    prop_assert_eq!(&*state, expected);
                }
                StateAt::Before(_) => prop_assert!(false, "version at {at:?} not found"),
            }
        }
        let first = served[0].0;
        prop_assert_eq!(
            store.state_at(Timestamp(first.0 - 1)).unwrap(),
            StateAt::Before(Some(first))
        );
        // Each claim's first change is found by seeking from the start, and it says the
        // claim appeared (placed or waiting).
        let end = served.last().unwrap().0;
        for id in ids {
            let target = Target::Claim(id);
            let seek = store.seek(Timestamp(first.0), Direction::Next, Some(&target)).unwrap();
            let (changes, _) = store.changes(first, end, Some(&target), 100).unwrap();
            if let Some(c) = changes.first() {
                prop_assert_eq!(seek.map(|s| s.at), Some(c.at));
                prop_assert!(changes.iter().all(|c| c.claim == Some(id)));
                if served[0].1.claim(id).is_none() {
                    prop_assert!(matches!(c.kind, ChangeKind::ClaimPlaced | ChangeKind::ClaimPending), "{c:?}");
                }
            }
        }
    }
}

/// What a GPU's history is about: its device's recorded facts and the claims on it.
fn gpu_view(state: &Snapshot, index: u32) -> (Option<String>, Vec<String>) {
    let device = state
        .devices()
        .find(|(n, d)| n.name == "a" && d.index == index)
        .map(|(_, d)| {
            format!(
                "{} {:?} {:?} {}",
                d.cordoned, d.health, d.memory_capacity, d.model
            )
        });
    let claims = state
        .claims
        .iter()
        .filter(|c| c.node.as_deref() == Some("a") && c.shares.iter().any(|s| s.device == index))
        .map(|c| format!("{c:?}"))
        .collect();
    (device, claims)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Several commits recorded as one version (the recorder coalesces a burst) still index
    /// every GPU they touch: walking `}` (next change) from the start visits every version
    /// in which the GPU's device or the claims on it changed, and walking `{` back from
    /// the end visits the same versions.
    #[test]
    fn next_change_of_a_gpu_finds_every_change_of_it_when_versions_coalesce(
        ops in proptest::collection::vec(op(), 1..80),
        record in proptest::collection::vec(proptest::bool::weighted(0.3), 80),
    ) {
        let mut store = HistoryStore::in_memory().unwrap();
        let (served, _) = run_coalesced(&ops, &record, &mut store, T0);
        let first = served[0].0;
        let last = served.last().unwrap().0;
        for index in 0..4 {
            let target = Target::Gpu(gpuboard::wire::history::GpuRef { node: "a".into(), index });
            let expected: Vec<Timestamp> = served
                .windows(2)
                .filter(|w| gpu_view(&w[0].1, index) != gpu_view(&w[1].1, index))
                .map(|w| w[1].0)
                .collect();
            let mut forward = Vec::new();
            let mut at = first;
            while let Some(s) = store.seek(at, Direction::Next, Some(&target)).unwrap() {
                prop_assert!(s.at > at, "next goes forward");
                let (changes, _) = store.changes(s.at, s.at, Some(&target), 100).unwrap();
                prop_assert!(!changes.is_empty(), "a change of a:{index} at {:?}", s.at);
                forward.push(s.at);
                at = s.at;
            }
            for t in &expected {
                prop_assert!(forward.contains(t), "a:{index} changed at {t:?}; walked {forward:?}");
            }
            let mut back = Vec::new();
            let mut at = Timestamp(last.0 + 1);
            while let Some(s) = store.seek(at, Direction::Prev, Some(&target)).unwrap() {
                prop_assert!(s.at < at, "previous goes back");
                back.push(s.at);
                at = s.at;
            }
            back.reverse();
            prop_assert_eq!(&back, &forward);
        }
    }
}

#[test]
fn a_reopened_history_goes_on_with_a_delta_from_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let ops = vec![
        Op::Claim {
            gpus: 4,
            ttl: None,
            project: 0,
            wait: false,
        },
        Op::Cordon(2, true),
    ];
    let mut store = HistoryStore::open(dir.path()).unwrap();
    let (before, _) = run(&ops, &mut store, T0);
    drop(store);
    let mut store = HistoryStore::open(dir.path()).unwrap();
    let (after, _) = run(&[Op::Share(1, 250)], &mut store, T0 + 3_600_000);
    // A fresh in-memory engine starts empty: what it served is recorded after what the
    // earlier one did, and both read back.
    for (at, expected) in before.iter().chain(&after) {
        let StateAt::Shown(state, _) = store.state_at(*at).unwrap() else {
            panic!("missing {at:?}")
        };
        assert_eq!(&*state, expected);
    }
    let (changes, _) = store
        .changes(before[0].0, after.last().unwrap().0, None, 100)
        .unwrap();
    assert!(
        changes.iter().any(|c| c.kind == ChangeKind::Cordoned),
        "{changes:#?}"
    );
}
