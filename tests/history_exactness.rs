//! Exactness of the history: for random operation sequences on an engine with an injected
//! clock, the state read back from the history at every recorded version is the snapshot
//! the endpoint served then (less its telemetry, which is recorded as samples); the change
//! index finds each claim's changes; a reopened store goes on from where it stopped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use gpuboard::clock::{ManualClock, Timestamp};
use gpuboard::endpoint::engine::{Engine, EngineConfig, LocalProcesses};
use gpuboard::endpoint::history_store::{HistoryStore, StateAt};
use gpuboard::history::wire::{ChangeKind, Direction, Target};
use gpuboard::history::{Recording, state_of};
use gpuboard::ids::ClaimId;
use gpuboard::request::ClaimRequest;
use gpuboard::scheduler::Submitted;
use gpuboard::snapshot::Snapshot;
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
                Submitted::Refused(_) => {}
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
        for op in ops {
            apply(&engine, &clock, &mut ids, op).await;
            clock.advance_millis(7);
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
