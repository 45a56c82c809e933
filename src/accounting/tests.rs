//! The accounting's rules on small histories built through the real recorder
//! (`history::Recording`), and its reconciliation on random ones.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::usage::Tally;
use super::*;
use crate::history::Recording;
use crate::history::sample::Rare;
use crate::ids::ClaimId;
use crate::placement::DeviceShare;
use crate::snapshot::{ClaimState, ClaimView, DeviceView, NodeView, ProcessView};
use crate::units::{Bytes, Slots, Units};

const GIB: u64 = 1 << 30;
const HOUR: u64 = 3_600_000;
const T0: u64 = 1_795_442_400_000;

/// A fleet of `nodes` x `per` devices of 16 GiB, with `claims` placed (id, project, node,
/// device, compute units) and `cordoned` devices.
fn state(
    revision: u64,
    at: u64,
    nodes: u32,
    per: u32,
    claims: &[(u64, &str, u32, u32, u32)],
    cordoned: &[(u32, u32)],
) -> Snapshot {
    let mut s = Snapshot {
        schema: 1,
        revision,
        taken_at: Timestamp(at),
        ..Snapshot::default()
    };
    for n in 0..nodes {
        let devices = (0..per)
            .map(|d| {
                let mine: Vec<_> = claims.iter().filter(|c| c.2 == n && c.3 == d).collect();
                let units: u32 = mine.iter().map(|c| c.4).sum();
                let mem = Bytes(16 * GIB * u64::from(units) / 10_000);
                DeviceView {
                    index: d,
                    memory_capacity: Some(Bytes(16 * GIB)),
                    memory_allocated: mem,
                    memory_free: Bytes(16 * GIB) - mem,
                    compute_allocated: Units(units),
                    compute_free: Units(10_000 - units),
                    cordoned: cordoned.contains(&(n, d)),
                    holders: mine.iter().map(|c| ClaimId(c.0)).collect(),
                    ..DeviceView::default()
                }
            })
            .collect();
        s.nodes.push(NodeView {
            name: format!("n{n}"),
            devices,
            ..NodeView::default()
        });
    }
    for &(id, project, n, d, units) in claims {
        s.claims.push(ClaimView {
            id: ClaimId(id),
            name: None,
            state: ClaimState::Placed,
            project: project.to_string(),
            holder: None,
            form: "num_gpus=0.5".into(),
            request: crate::request::ClaimRequest::from_json(&serde_json::json!({"num_gpus": 1}))
                .unwrap(),
            node: Some(format!("n{n}")),
            shares: vec![DeviceShare {
                device: d,
                memory: Bytes(16 * GIB * u64::from(units) / 10_000),
                compute: Units(units),
                slots: Slots(1),
            }],
            memory_reserved: Bytes(16 * GIB * u64::from(units) / 10_000),
            compute_reserved: Units(units),
            memory_used: None,
            over_limit: false,
            idle: false,
            created_at: Timestamp(at),
            lease_expires_at: None,
            pending_reasons: Vec::new(),
            infeasible: false,
        });
    }
    s
}

/// Records `states` as the endpoint would; the first is the window's start.
fn record(states: &[Snapshot]) -> (Snapshot, Vec<Record>) {
    let mut r = Recording::default();
    let mut records: Vec<Record> = states.iter().filter_map(|s| r.observe(s)).collect();
    records.remove(0);
    (crate::history::state_of(&states[0]), records)
}

fn sample(at: u64, util: u32, procs: &[(u64, u64)]) -> Tick {
    Tick::from(&crate::history::DeviceSample {
        at: Timestamp(at),
        utilization_gpu: Some(util),
        rare: Rare {
            processes: procs
                .iter()
                .map(|&(claim, gib)| ProcessView {
                    pid: 100 + claim as u32,
                    name: None,
                    used_memory: Some(Bytes(gib * GIB)),
                    claim: Some(ClaimId(claim)),
                    owner: None,
                })
                .collect(),
            ..Rare::default()
        },
        ..crate::history::DeviceSample::default()
    })
}

fn gpu(n: u32, d: u32) -> GpuRef {
    GpuRef {
        node: format!("n{n}"),
        index: d,
    }
}

fn ask(from: u64, to: u64) -> Ask {
    Ask {
        from: Timestamp(from),
        to: Timestamp(to),
        idle: IdleRule::default(),
        pending_ms: PENDING_MS,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn a_quarter_gpu_for_an_hour_is_charged_a_quarter_gpu_hour() {
    let s = state(1, T0, 1, 1, &[(1, "vision", 0, 0, 2_500)], &[]);
    let (start, versions) = record(&[s]);
    let samples: BTreeMap<_, _> = [(
        gpu(0, 0),
        (0..720)
            .map(|i| sample(T0 + i * 5_000, 100, &[(1, 2)]))
            .collect(),
    )]
    .into();
    let r = report(&start, &versions, &samples, &ask(T0, T0 + HOUR));
    let p = &r.usage.projects[0];
    assert_eq!(p.project, "vision");
    assert!(close(p.figures.reserved.compute.hours(), 0.25), "{p:?}");
    assert!(close(p.figures.reserved.memory.hours(), 0.25), "{p:?}");
    assert!(
        close(p.figures.used.hours(), 0.25),
        "busy at 100 %: used all it reserved"
    );
    assert!(close(p.figures.idle_allocated.hours(), 0.0));
    assert!(close(r.usage.physical.hours(), 1.0));
    assert!(close(r.usage.unallocated.compute.hours(), 0.75));
    assert!(
        close(p.figures.unmeasured.hours(), 0.0),
        "every moment sampled"
    );
    assert!(!p.figures.unmeasured_whole());
}

#[test]
fn a_claim_no_sample_spoke_for_is_unmeasured_not_idle() {
    let s = state(1, T0, 1, 1, &[(1, "vision", 0, 0, 2_500)], &[]);
    let (start, versions) = record(&[s]);
    let r = report(&start, &versions, &BTreeMap::new(), &ask(T0, T0 + HOUR));
    let p = &r.usage.projects[0];
    assert!(close(p.figures.reserved.compute.hours(), 0.25), "{p:?}");
    assert!(close(p.figures.unmeasured.hours(), 0.25), "{p:?}");
    assert!(p.figures.unmeasured_whole(), "{p:?}");
    // Half the hour sampled: half of it unmeasured, and the figures are known.
    let samples: BTreeMap<_, _> = [(
        gpu(0, 0),
        (0..360)
            .map(|i| sample(T0 + i * 5_000, 100, &[(1, 2)]))
            .collect(),
    )]
    .into();
    let r = report(&start, &versions, &samples, &ask(T0, T0 + HOUR));
    let p = &r.usage.projects[0];
    assert!(
        p.figures.unmeasured.hours() > 0.1 && p.figures.unmeasured.hours() < 0.14,
        "{p:?}"
    );
    assert!(!p.figures.unmeasured_whole());
}

#[test]
fn idle_counts_only_after_the_minimum_and_then_all_of_the_run() {
    // Claim 1 (a whole GPU) busy 20 min, idle (no process) 40 min; claim 2 idle 10 min only.
    let s = state(
        1,
        T0,
        1,
        2,
        &[(1, "vision", 0, 0, 10_000), (2, "nlp", 0, 1, 5_000)],
        &[],
    );
    let (start, versions) = record(&[s]);
    let a: Vec<_> = (0..720)
        .map(|i| {
            let t = T0 + i * 5_000;
            if t < T0 + 20 * 60_000 {
                sample(t, 90, &[(1, 4)])
            } else {
                sample(t, 0, &[])
            }
        })
        .collect();
    let b: Vec<_> = (0..720)
        .map(|i| {
            let t = T0 + i * 5_000;
            let busy = !(T0 + 30 * 60_000..T0 + 40 * 60_000).contains(&t);
            sample(t, if busy { 80 } else { 2 }, &[(2, 1)])
        })
        .collect();
    let samples: BTreeMap<_, _> = [(gpu(0, 0), a), (gpu(0, 1), b)].into();
    let r = report(&start, &versions, &samples, &ask(T0, T0 + HOUR));
    let by: BTreeMap<_, _> = r
        .usage
        .projects
        .iter()
        .map(|p| (p.project.as_str(), &p.figures))
        .collect();
    assert!(close(by["vision"].idle_allocated.hours(), 40.0 / 60.0));
    assert!(close(by["vision"].used.hours(), 0.9 * 20.0 / 60.0));
    assert!(
        close(by["nlp"].idle_allocated.hours(), 0.0),
        "10 min < 15 min"
    );
    assert!(close(
        by["nlp"].used.hours(),
        0.5 * (0.8 * 50.0 + 0.02 * 10.0) / 60.0
    ));
    assert_eq!(r.usage.projects[0].project, "vision", "biggest idle first");
    let longest = r
        .usage
        .claims
        .iter()
        .find(|c| c.claim == ClaimId(2))
        .unwrap();
    assert_eq!(longest.longest_idle_ms, 10 * 60_000);
}

#[test]
fn a_release_and_a_cordon_are_spans_and_over_limit_is_trouble() {
    let s0 = state(1, T0, 1, 1, &[(1, "vision", 0, 0, 5_000)], &[]);
    let s1 = state(2, T0 + HOUR / 2, 1, 1, &[], &[]);
    let s2 = state(3, T0 + HOUR * 3 / 4, 1, 1, &[], &[(0, 0)]);
    let (start, versions) = record(&[s0, s1, s2]);
    let samples: BTreeMap<_, _> = [(
        gpu(0, 0),
        (0..720)
            .map(|i| sample(T0 + i * 5_000, 50, &[(1, 12)]))
            .collect(),
    )]
    .into();
    let r = report(&start, &versions, &samples, &ask(T0, T0 + HOUR));
    let p = &r.usage.projects[0];
    assert!(close(p.figures.reserved.compute.hours(), 0.25));
    assert!(close(r.usage.unallocated.compute.hours(), 0.75));
    let cordon = &r.trouble.devices[0];
    assert_eq!(cordon.condition, trouble::Condition::Cordoned);
    assert_eq!(cordon.from, Timestamp(T0 + HOUR * 3 / 4));
    assert!(cordon.ongoing);
    let over = &r.trouble.over_limit[0];
    assert_eq!((over.claim, over.peak), (ClaimId(1), Bytes(12 * GIB)));
    assert_eq!(over.reserved, Bytes(8 * GIB));
    assert_eq!(
        over.to,
        Timestamp(T0 + HOUR / 2 - 5_000),
        "over only while it held"
    );
}

/// One step of a random history.
#[derive(Clone, Debug)]
enum Op {
    Claim {
        device: u32,
        units: u32,
        project: u8,
    },
    Release {
        nth: usize,
    },
    Cordon {
        device: u32,
    },
    Wait {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            0u32..4,
            prop::sample::select(vec![2_500u32, 5_000, 10_000, 1_250]),
            0u8..3
        )
            .prop_map(|(device, units, project)| Op::Claim {
                device,
                units,
                project
            }),
        (0usize..8).prop_map(|nth| Op::Release { nth }),
        (0u32..4).prop_map(|device| Op::Cordon { device }),
        (1u64..1_200_000).prop_map(|ms| Op::Wait { ms }),
    ]
}

/// A random history from `ops`: the recorded states (the first is the start) and every
/// device's samples, and when it ends.
fn random_history(
    ops: Vec<Op>,
    utils: &[u32],
) -> (Vec<Snapshot>, BTreeMap<GpuRef, Vec<Tick>>, u64) {
    let projects = ["vision", "nlp", "speech"];
    let mut claims: Vec<(u64, &str, u32, u32, u32)> = Vec::new();
    let mut cordoned: Vec<(u32, u32)> = Vec::new();
    let mut at = T0;
    let mut next_id = 1;
    let mut states = vec![state(1, at, 2, 2, &claims, &cordoned)];
    let mut samples: BTreeMap<GpuRef, Vec<Tick>> = BTreeMap::new();
    for o in ops {
        match o {
            Op::Claim {
                device,
                units,
                project,
            } => {
                let (n, d) = (device / 2, device % 2);
                let used: u32 = claims
                    .iter()
                    .filter(|c| c.2 == n && c.3 == d)
                    .map(|c| c.4)
                    .sum();
                if used + units <= 10_000 {
                    claims.push((next_id, projects[project as usize], n, d, units));
                    next_id += 1;
                }
            }
            Op::Release { nth } => {
                if !claims.is_empty() {
                    claims.remove(nth % claims.len());
                }
            }
            Op::Cordon { device } => {
                let k = (device / 2, device % 2);
                if let Some(i) = cordoned.iter().position(|c| *c == k) {
                    cordoned.remove(i);
                } else {
                    cordoned.push(k);
                }
            }
            Op::Wait { ms } => {
                // Telemetry every 5 s while time passes, with the claims' processes.
                let mut t = at - at % 5_000 + 5_000;
                while t <= at + ms {
                    for dev in 0..4u32 {
                        let (n, d) = (dev / 2, dev % 2);
                        let procs: Vec<(u64, u64)> = claims
                            .iter()
                            .filter(|c| c.2 == n && c.3 == d)
                            .map(|c| (c.0, 1))
                            .collect();
                        let u = utils[((t / 5_000) as usize + dev as usize) % utils.len()];
                        samples
                            .entry(gpu(n, d))
                            .or_default()
                            .push(sample(t, u, &procs));
                    }
                    t += 5_000;
                }
                at += ms;
            }
        }
        at += 1;
        let rev = states.len() as u64 + 1;
        states.push(state(rev, at, 2, 2, &claims, &cordoned));
    }
    (states, samples, at)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn reserved_plus_unallocated_is_physical(
        ops in prop::collection::vec(op(), 1..60),
        utils in prop::collection::vec(0u32..=100, 50),
        offset in 0u64..600_000,
    ) {
        let (states, samples, at) = random_history(ops, &utils);
        let (start, versions) = record(&states);
        let to = at + offset;
        let r = report(&start, &versions, &samples, &ask(T0, to));
        let u = &r.usage;
        let physical = u.physical.0;
        prop_assert!((physical - 4.0 * (to - T0) as f64 / 1000.0).abs() < 1e-6);
        let reserved_c: f64 = u.projects.iter().map(|p| p.figures.reserved.compute.0).sum();
        let reserved_m: f64 = u.projects.iter().map(|p| p.figures.reserved.memory.0).sum();
        prop_assert!((reserved_c + u.unallocated.compute.0 - physical).abs() <= physical * 0.001);
        prop_assert!((reserved_m + u.unallocated.memory.0 - physical).abs() <= physical * 0.001);
        for p in &u.projects {
            let f = &p.figures;
            prop_assert!(f.used.0 <= f.reserved.compute.0 + 1e-6, "{p:?}");
            prop_assert!(f.idle_allocated.0 <= f.reserved.compute.0 + 1e-6, "{p:?}");
        }
    }
}

/// The state at `t`: `start` with the versions recorded up to `t` applied.
fn state_at(start: &Snapshot, versions: &[Record], t: u64) -> Snapshot {
    let mut state = start.clone();
    for v in versions.iter().filter(|v| v.at.0 <= t) {
        match &v.body {
            crate::history::Body::Keyframe { state: s } => state = (**s).clone(),
            crate::history::Body::Delta { delta } => crate::snapshot::apply(&mut state, delta),
        }
    }
    state
}

fn near(a: GpuSeconds, b: GpuSeconds) -> bool {
    (a.0 - b.0).abs() <= 1e-6 * a.0.abs().max(b.0.abs()).max(1.0)
}

fn same_figures(a: &Figures, b: &Figures) -> bool {
    near(a.reserved.compute, b.reserved.compute)
        && near(a.reserved.memory, b.reserved.memory)
        && near(a.used, b.used)
        && near(a.idle_allocated, b.idle_allocated)
        && near(a.unmeasured, b.unmeasured)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// What rolling up by the hour rests on: a window's tally cut at any edges (hour
    /// boundaries, at an offset) and added back up settles to the whole window's figures.
    #[test]
    fn a_window_cut_into_hours_and_added_up_is_the_whole_window(
        ops in prop::collection::vec(op(), 1..60),
        utils in prop::collection::vec(0u32..=100, 50),
        offset in 0u64..600_000,
        cut in 1u64..HOUR,
        idle_for in prop::sample::select(vec![0u64, 300_000, 900_000, 3_600_000]),
        idle_below in prop::sample::select(vec![5u32, 50]),
    ) {
        let (states, samples, at) = random_history(ops, &utils);
        let (start, versions) = record(&states);
        let to = at + offset;
        let policy = IdleRule { idle_below_pct: idle_below, idle_for_ms: idle_for };
        let whole = account(&tell(&start, &versions, Timestamp(T0), Timestamp(to)), &samples, policy);
        let mut parts = Tally::default();
        let mut a = T0;
        let mut edge = T0 + cut;
        while a < to {
            let b = edge.min(to);
            let here = state_at(&start, &versions, a);
            let story = tell(&here, &versions, Timestamp(a), Timestamp(b));
            parts.then(usage::tally(&story, &samples, idle_below));
            a = b;
            edge += HOUR;
        }
        let split = usage::settle(parts, policy);
        prop_assert!(near(whole.physical, split.physical));
        prop_assert!(near(whole.unallocated.compute, split.unallocated.compute));
        prop_assert!(near(whole.unallocated.memory, split.unallocated.memory));
        prop_assert_eq!(whole.projects.len(), split.projects.len());
        for p in &whole.projects {
            let q = split.projects.iter().find(|q| q.project == p.project);
            prop_assert!(q.is_some_and(|q| q.claims == p.claims && same_figures(&p.figures, &q.figures)), "{p:?} vs {q:?}");
        }
        prop_assert_eq!(whole.claims.len(), split.claims.len());
        for c in &whole.claims {
            let d = split.claims.iter().find(|d| d.claim == c.claim);
            prop_assert!(d.is_some_and(|d| d.longest_idle_ms == c.longest_idle_ms
                && d.project == c.project && same_figures(&c.figures, &d.figures)), "{c:?} vs {d:?}");
        }
    }
}

/// Projects and claims are written flat, their figures beside their names, as the
/// documented `gpuboard.report/1` has them; and read back so.
#[test]
fn project_and_claim_figures_are_written_flat_and_read_back() {
    let figures = Figures {
        reserved: ByShare {
            compute: GpuSeconds(1.5),
            memory: GpuSeconds(2.0),
        },
        used: GpuSeconds(0.5),
        idle_allocated: GpuSeconds(0.25),
        unmeasured: GpuSeconds(0.0),
    };
    let c = usage::ClaimGpuTime {
        claim: ClaimId(7),
        project: "vision".into(),
        holder: None,
        longest_idle_ms: 60_000,
        figures: figures.clone(),
    };
    let json = serde_json::to_string(&c).unwrap();
    assert_eq!(
        json,
        r#"{"claim":7,"project":"vision","holder":null,"longest_idle_ms":60000,"reserved":{"compute":1.5,"memory":2.0},"used":0.5,"idle_allocated":0.25}"#
    );
    assert_eq!(
        serde_json::from_str::<usage::ClaimGpuTime>(&json).unwrap(),
        c
    );
    let p = ProjectGpuTime {
        project: "vision".into(),
        claims: 3,
        figures,
    };
    let json = serde_json::to_string(&p).unwrap();
    assert_eq!(
        json,
        r#"{"project":"vision","claims":3,"reserved":{"compute":1.5,"memory":2.0},"used":0.5,"idle_allocated":0.25}"#
    );
    // Fields a later gpuboard adds are skipped, as before.
    let later = json.replace(r#""claims":3,"#, r#""claims":3,"cost":{"usd":4},"#);
    assert_eq!(serde_json::from_str::<ProjectGpuTime>(&later).unwrap(), p);
}
