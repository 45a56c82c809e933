//! The engine adapters on the corpus of real answers in tests/corpus (recorded by
//! `scripts/record-corpus`, see tests/corpus/README.md): every recorded answer reads with no
//! warning and says what the peer was holding; and mutated answers (a field dropped, a
//! value of another type, unknown fields added, an array cut short) never panic, never take
//! the source down unless the core (nodes and their GPUs) was hit, and leave the core read.
//! Slurm is also mutated over its tidy captures in tests/fixtures/slurm. BOINC's XML is
//! mutated element by element (dropped, its value of another kind, an unknown child added,
//! the answer cut short there); the Prometheus answers are served on 127.0.0.1 and read
//! through the source.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{Reply, serve};
use gpuboard::clock::Timestamp;
use gpuboard::snapshot::{ClaimState, ClaimView, Snapshot};
use gpuboard::sources::boinc::{self, BoincAnswers};
use gpuboard::sources::prometheus::{PrometheusConfig, PrometheusSource};
use gpuboard::sources::ray::{self, RayAnswers};
use gpuboard::sources::slurm::{self, SlurmAnswers};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};

fn corpus(path: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(path);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// The Ray answers recorded as `case` (a folder of tests/corpus/ray).
fn ray_answers(case: &str) -> RayAnswers {
    let at = |name: &str| corpus(&format!("ray/{case}/{name}.json"));
    RayAnswers {
        version: at("version"),
        nodes: at("nodes_summary"),
        cluster_status: at("cluster_status"),
        tasks: at("tasks"),
        actors: at("actors"),
        placement_groups: at("placement_groups"),
    }
}

/// The Ray cases: every one is mutated.
const RAY_CASES: [&str; 2] = ["busy", "no-worker-stats"];

fn ray_snapshot(a: &RayAnswers) -> Result<Snapshot, ray::RayParseError> {
    ray::snapshot(a, "corpus", Timestamp(1))
}

fn by_holder<'a>(s: &'a Snapshot, holder: &str) -> Vec<&'a ClaimView> {
    s.claims
        .iter()
        .filter(|c| c.holder.as_deref() == Some(holder))
        .collect()
}

#[test]
fn ray_corpus_reads_whole_with_no_warning() {
    let s = ray_snapshot(&ray_answers("busy")).unwrap();
    assert!(s.endpoint.warnings.is_empty(), "{:?}", s.endpoint.warnings);
    assert_eq!(s.endpoint.version, "ray 2.60.0");
    let node = &s.nodes[0];
    assert_eq!(node.devices.len(), 4);
    // The custom accelerator type names the GPUs.
    assert!(node.devices.iter().all(|d| d.model == "L4"), "{node:?}");

    // Each holder on the GPU indices Ray's own workers reported (`ray.get_gpu_ids()`).
    let report = corpus("ray/busy/driver_report.json");
    let seen = |label: &str| -> Vec<u32> {
        report["gpu_ids"][label]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| u32::try_from(g.as_u64().unwrap()).unwrap())
            .collect()
    };
    for (holder, label, per_gpu) in [
        ("actor actor-two-gpus", "actor-two-gpus", 10_000),
        ("actor actor-detached", "actor-detached", 2_500),
        ("task task-l4", "task-l4", 2_500),
        ("task task-in-pg", "task-in-pg", 2_500),
    ] {
        let c = by_holder(&s, holder);
        assert_eq!(c.len(), 1, "{holder}: {c:?}");
        let devices: Vec<u32> = c[0].shares.iter().map(|s| s.device).collect();
        assert_eq!(devices, seen(label), "{holder}");
        assert!(
            c[0].shares.iter().all(|s| s.compute.0 == per_gpu),
            "{holder}: {:?}",
            c[0].shares
        );
    }
    // The killed actor is gone; the Jobs API job's task holds its quarter.
    assert!(by_holder(&s, "actor actor-killed").is_empty());
    assert!(
        s.claims.iter().any(|c| c.state == ClaimState::Placed
            && c.form == "num_gpus=0.25"
            && c.holder.as_deref().is_some_and(|h| h.contains("lambda"))),
        "{:#?}",
        s.claims
            .iter()
            .map(|c| (&c.holder, &c.form))
            .collect::<Vec<_>>()
    );

    // Pending groups: one claim per bundle, with strategy, bundles and Ray's reason.
    let group = |name: &str| -> Vec<&ClaimView> {
        s.claims
            .iter()
            .filter(|c| {
                c.holder
                    .as_deref()
                    .is_some_and(|h| h.starts_with(&format!("placement group {name} bundle")))
            })
            .collect()
    };
    for name in [
        "pg-pending-pack",
        "pg-pending-spread",
        "pg-pending-strict_pack",
    ] {
        let g = group(name);
        assert_eq!(g.len(), 2, "{name}");
        for c in g {
            assert_eq!(c.state, ClaimState::Pending);
            assert!(!c.infeasible, "{name}");
            assert_eq!(c.request.labels["ray.bundles"], "2 × {GPU: 2}");
            // Ray's report names no group, and these three ask for the same bundles.
            assert_eq!(
                c.request.labels["ray.strategy"],
                "PACK or SPREAD or STRICT_PACK"
            );
            assert!(
                c.pending_reasons
                    .iter()
                    .any(|r| r.contains("(PENDING, NO_RESOURCES)")),
                "{:?}",
                c.pending_reasons
            );
        }
    }
    for (name, strategy, bundles) in [
        ("pg-infeasible-pack", "PACK", "1 × {GPU: 8}"),
        (
            "pg-infeasible-strict-spread",
            "STRICT_SPREAD",
            "2 × {GPU: 1}",
        ),
    ] {
        let g = group(name);
        assert!(!g.is_empty(), "{name}");
        for c in g {
            assert!(c.infeasible, "{name}");
            assert_eq!(c.request.labels["ray.strategy"], strategy);
            assert_eq!(c.request.labels["ray.bundles"], bundles);
            assert!(
                c.pending_reasons[0].contains("(PENDING, INFEASIBLE)"),
                "{:?}",
                c.pending_reasons
            );
        }
    }
    // Tasks: one queued on the full node (it fits the cluster), one never.
    let queued = by_holder(&s, "task task-queued");
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].state, ClaimState::Pending);
    assert!(!queued[0].infeasible);
    let never = by_holder(&s, "task task-infeasible");
    assert!(never[0].infeasible);
}

#[test]
fn ray_without_worker_stats_is_live_with_a_warning() {
    // Recorded while the dashboard agent had not reported the workers yet: the nodes, their
    // GPUs and the pending work are read; which GPU each worker holds is a warning.
    let s = ray_snapshot(&ray_answers("no-worker-stats")).unwrap();
    assert_eq!(s.nodes[0].devices.len(), 4);
    let w = &s.endpoint.warnings;
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].section, "/nodes");
    assert_eq!(w[0].path, "data.summary[0].raylet.coreWorkersStats");
    assert_eq!(w[0].left_out, "which GPU each worker on the node holds");
    let pending = s
        .claims
        .iter()
        .filter(|c| c.state == ClaimState::Pending)
        .count();
    // 3 pending groups of 2 bundles, 2 infeasible groups (1 and 2 bundles), 2 tasks.
    assert_eq!(pending, 3 * 2 + 3 + 2);
}

/// One step of a path into a JSON document.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// Every path in `v`, the root included.
fn paths(v: &Value, here: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(here.clone());
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                here.push(Step::Key(k.clone()));
                paths(c, here, out);
                here.pop();
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                here.push(Step::Index(i));
                paths(c, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn at_mut<'a>(v: &'a mut Value, path: &[Step]) -> &'a mut Value {
    path.iter().fold(v, |v, s| match s {
        Step::Key(k) => &mut v[k.as_str()],
        Step::Index(i) => &mut v[*i],
    })
}

/// The ways an answer is mutated.
#[derive(Clone, Copy, Debug)]
enum Mutation {
    Drop,
    OtherType,
    Unknown,
    Truncate,
}

/// A value of another type than `v`.
fn other_type(v: &Value) -> Value {
    match v {
        Value::Null => json!(true),
        Value::Bool(_) => json!("yes"),
        Value::Number(_) => json!("12x"),
        Value::String(_) => json!(-7.5),
        Value::Array(_) => json!({"unexpected": 1}),
        Value::Object(_) => json!([1, "two"]),
    }
}

/// Applies `m` at `path` of `doc`.
fn mutate(doc: &mut Value, path: &[Step], m: Mutation) {
    match m {
        Mutation::Drop => {
            let Some((last, parent)) = path.split_last() else {
                *doc = Value::Null;
                return;
            };
            match (at_mut(doc, parent), last) {
                (Value::Object(o), Step::Key(k)) => {
                    o.remove(k);
                }
                (Value::Array(a), Step::Index(i)) => {
                    a.remove(*i);
                }
                _ => {}
            }
        }
        Mutation::OtherType => {
            let v = at_mut(doc, path);
            *v = other_type(v);
        }
        Mutation::Unknown => match at_mut(doc, path) {
            Value::Object(o) => {
                o.insert(
                    "gpuboardUnknown".into(),
                    json!({"nested": [1, {"x": null}]}),
                );
            }
            Value::Array(a) => a.push(json!({"gpuboardUnknown": true})),
            _ => {}
        },
        Mutation::Truncate => {
            if let Value::Array(a) = at_mut(doc, path) {
                a.truncate(a.len() / 2);
            }
        }
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        Just(Mutation::Drop),
        Just(Mutation::OtherType),
        Just(Mutation::Unknown),
        Just(Mutation::Truncate),
    ]
}

/// Node names and GPU count per node: what the core of a snapshot is.
fn core(s: &Snapshot) -> BTreeMap<String, (usize, Vec<String>)> {
    s.nodes
        .iter()
        .map(|n| {
            (
                n.name.clone(),
                (
                    n.devices.len(),
                    n.devices.iter().map(|d| d.model.clone()).collect(),
                ),
            )
        })
        .collect()
}

/// Whether a path in the nodes answer is outside its core (a worker's usage, the
/// node's labels, the host's stats beside the raylet).
fn ray_nodes_non_core(path: &[Step]) -> bool {
    path.iter()
        .any(|s| matches!(s, Step::Key(k) if k == "coreWorkersStats" || k == "labels"))
        || matches!(
            (path.get(2), path.get(3)),
            (Some(Step::Index(_)), Some(Step::Key(k))) if k != "raylet" && k != "hostname"
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn mutated_ray_answers_keep_the_core(
        case in 0usize..RAY_CASES.len(),
        answer in 0usize..6,
        at in any::<Index>(),
        m in mutation(),
    ) {
        let whole = ray_snapshot(&ray_answers(RAY_CASES[case])).unwrap();
        let mut a = ray_answers(RAY_CASES[case]);
        let doc = match answer {
            0 => &mut a.version,
            1 => &mut a.nodes,
            2 => &mut a.cluster_status,
            3 => &mut a.tasks,
            4 => &mut a.actors,
            _ => &mut a.placement_groups,
        };
        let mut all = Vec::new();
        paths(doc, &mut Vec::new(), &mut all);
        let path = at.get(&all).clone();
        mutate(doc, &path, m);
        let got = ray_snapshot(&a);
        let non_core = match answer {
            0 => false,
            1 => ray_nodes_non_core(&path),
            _ => true,
        };
        if non_core {
            let s = got.map_err(|e| format!("{m:?} at {path:?} took the source down: {e}"));
            let s = s.unwrap();
            prop_assert_eq!(core(&s), core(&whole), "{:?} at {:?}", m, path);
        }
    }
}

/// The Slurm answers of `case`: a folder of tests/corpus/slurm, or `fixtures` for the
/// tidy captures in tests/fixtures/slurm.
fn slurm_answers(case: &str) -> SlurmAnswers {
    let dir = if case == "fixtures" {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/slurm")
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/corpus/slurm")
            .join(case)
    };
    let at = |name: &str| {
        serde_json::from_str::<Value>(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
    };
    SlurmAnswers {
        nodes: at("nodes.json"),
        jobs: at("jobs.json"),
    }
}

/// The Slurm cases: every one is mutated.
const SLURM_CASES: [&str; 4] = ["fixtures", "idle", "busy", "full"];

#[test]
fn slurm_corpus_reads_with_no_warning() {
    for case in SLURM_CASES {
        let s = slurm::snapshot(&slurm_answers(case), "corpus", Timestamp(1)).unwrap();
        assert!(
            s.endpoint.warnings.is_empty(),
            "{case}: {:?}",
            s.endpoint.warnings
        );
    }
    // The recorded cluster: gpunode with 4 GPUs, spare1 drained and spare2 down.
    let s = slurm::snapshot(&slurm_answers("busy"), "corpus", Timestamp(1)).unwrap();
    let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["gpunode", "spare1", "spare2"]);
    assert_eq!(s.nodes[0].devices.len(), 4);
    // The array's two tasks and the shard job run; big, after-big and after-array wait.
    let holders: Vec<&str> = s
        .claims
        .iter()
        .filter_map(|c| c.holder.as_deref())
        .collect();
    assert!(!holders.is_empty(), "{:?}", s.claims);
    let pending = s
        .claims
        .iter()
        .filter(|c| c.state == ClaimState::Pending)
        .count();
    assert!(pending >= 3, "{:?}", s.claims);
    let idle = slurm::snapshot(&slurm_answers("idle"), "corpus", Timestamp(1)).unwrap();
    assert!(idle.claims.is_empty(), "{:?}", idle.claims);
}

/// Whether a path in the Slurm nodes answer is outside its core (the envelope's errors
/// aside, every node field but its name, state and GPUs is not core).
fn slurm_nodes_non_core(path: &[Step]) -> bool {
    // `meta` itself says it is slurmrestd: core; what is inside it is not.
    matches!(path.first(), Some(Step::Key(k)) if k != "nodes" && k != "errors" && (k != "meta" || path.len() > 1))
        || matches!(path.first(), Some(Step::Key(k)) if k == "nodes")
            && matches!(
                path.get(2),
                Some(Step::Key(k)) if !["name", "gres", "state", "state_flags", "reason"].contains(&k.as_str())
            )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn mutated_slurm_answers_keep_the_core(
        case in 0usize..SLURM_CASES.len(),
        jobs in any::<bool>(),
        at in any::<Index>(),
        m in mutation(),
    ) {
        let whole = slurm::snapshot(&slurm_answers(SLURM_CASES[case]), "corpus", Timestamp(1)).unwrap();
        let mut a = slurm_answers(SLURM_CASES[case]);
        let doc = if jobs { &mut a.jobs } else { &mut a.nodes };
        let mut all = Vec::new();
        paths(doc, &mut Vec::new(), &mut all);
        let path = at.get(&all).clone();
        mutate(doc, &path, m);
        let got = slurm::snapshot(&a, "corpus", Timestamp(1));
        // The jobs answer: anything but its envelope is outside the core.
        let non_core = if jobs {
            !path.is_empty()
                && !matches!(path.first(), Some(Step::Key(k)) if (k == "meta" && path.len() == 1) || k == "errors")
        } else {
            slurm_nodes_non_core(&path)
        };
        if non_core {
            let s = got.map_err(|e| format!("{m:?} at {path:?} took the source down: {e}"));
            let s = s.unwrap();
            prop_assert_eq!(core(&s), core(&whole), "{:?} at {:?}", m, path);
        }
    }
}

fn corpus_text(path: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/corpus")
            .join(path),
    )
    .unwrap()
}

/// The BOINC cases: every one is mutated.
const BOINC_CASES: [&str; 7] = [
    "idle",
    "modes-never",
    "project-attached",
    "project-suspended",
    "tasks-running",
    "task-suspended",
    "task-aborted",
];

fn boinc_answers(case: &str) -> BoincAnswers {
    BoincAnswers {
        state: corpus_text(&format!("boinc/{case}/state.xml")),
        cc_status: corpus_text(&format!("boinc/{case}/cc_status.xml")),
    }
}

#[test]
fn boinc_corpus_reads_with_no_warning() {
    for case in BOINC_CASES {
        let s = boinc::snapshot(&boinc_answers(case), "corpus", Timestamp(1)).unwrap();
        assert!(
            s.endpoint.warnings.is_empty(),
            "{case}: {:?}",
            s.endpoint.warnings
        );
        assert_eq!(s.nodes.len(), 1, "{case}");
        assert!(
            s.endpoint.version.starts_with("boinc 7."),
            "{case}: {}",
            s.endpoint.version
        );
        let projects = usize::from(case.starts_with("project-") || case.starts_with("task"));
        assert_eq!(s.projects.len(), projects, "{case}: {:?}", s.projects);
        if !case.starts_with("task") {
            // No work was ever sent: nothing claimed.
            assert!(s.claims.is_empty(), "{case}: {:?}", s.claims);
        }
    }
}

/// The placed and the pending claims of a case, and which devices are held.
fn boinc_tasks(case: &str) -> (Vec<ClaimView>, Vec<ClaimView>, Vec<bool>) {
    let s = boinc::snapshot(&boinc_answers(case), "corpus", Timestamp(1)).unwrap();
    let (placed, pending) = s
        .claims
        .iter()
        .cloned()
        .partition(|c| c.state == ClaimState::Placed);
    let held = s.nodes[0]
        .devices
        .iter()
        .map(|d| {
            assert_eq!(d.model, "gpuboard_gpu", "{case}");
            assert_eq!(d.holders.is_empty(), d.compute_allocated.0 == 0, "{case}");
            !d.holders.is_empty()
        })
        .collect();
    (placed, pending, held)
}

#[test]
fn boinc_corpus_tasks_are_claims_on_their_gpus() {
    // Three tasks, two GPUs of a custom type: one task on each, the third waits.
    let (placed, pending, held) = boinc_tasks("tasks-running");
    assert_eq!(
        (placed.len(), pending.len()),
        (2, 1),
        "{placed:#?}{pending:#?}"
    );
    assert_eq!(held, vec![true, true]);
    let mut on: Vec<u32> = placed.iter().map(|c| c.shares[0].device).collect();
    on.sort_unstable();
    assert_eq!(on, vec![0, 1]);
    let waiting = &pending[0];
    assert!(waiting.shares.is_empty() && !waiting.infeasible);
    assert_eq!(
        waiting.pending_reasons,
        vec!["every gpuboard_gpu GPU is taken by running tasks".to_string()]
    );

    // One running task suspended: it waits for that reason alone, the third takes its GPU.
    let (placed, pending, held) = boinc_tasks("task-suspended");
    assert_eq!((placed.len(), pending.len()), (2, 1));
    assert_eq!(held, vec![true, true]);
    let suspended = &pending[0];
    assert_eq!(
        suspended.pending_reasons,
        vec!["task suspended via the GUI".to_string()]
    );
    let taker = &waiting.holder;
    assert!(placed.iter().any(|c| &c.holder == taker), "{placed:#?}");

    // The other running task aborted: its claim is gone and its GPU free.
    let (placed, pending, held) = boinc_tasks("task-aborted");
    assert_eq!((placed.len(), pending.len()), (1, 1));
    assert_eq!(pending[0].holder, suspended.holder);
    assert_eq!(held.iter().filter(|h| **h).count(), 1);
}

/// One element of an XML answer: where it starts and ends, where its content lies (equal
/// for `<x/>`), and its name with its ancestors'.
#[derive(Clone, Debug)]
struct Element {
    start: usize,
    end: usize,
    content: (usize, usize),
    path: Vec<String>,
}

/// Every element of `xml` (the answers are plain: no comments, CDATA or `>` in values).
fn elements(xml: &str) -> Vec<Element> {
    let mut out = Vec::new();
    let mut open: Vec<(usize, usize, String)> = Vec::new();
    let mut i = 0;
    while let Some(off) = xml[i..].find('<') {
        let start = i + off;
        let Some(close) = xml[start..].find('>') else {
            break;
        };
        let tag_end = start + close + 1;
        let tag = &xml[start + 1..tag_end - 1];
        let names = |open: &[(usize, usize, String)], name: &str| {
            open.iter()
                .map(|o| o.2.clone())
                .chain(std::iter::once(name.to_string()))
                .collect::<Vec<_>>()
        };
        if tag.starts_with('?') || tag.starts_with('!') {
        } else if let Some(name) = tag.strip_prefix('/') {
            if let Some(pos) = open.iter().rposition(|o| o.2 == name) {
                let (s, c, n) = open[pos].clone();
                open.truncate(pos);
                out.push(Element {
                    start: s,
                    end: tag_end,
                    content: (c, start),
                    path: names(&open, &n),
                });
            }
        } else if let Some(name) = tag.strip_suffix('/') {
            let name = name.split_whitespace().next().unwrap_or_default();
            out.push(Element {
                start,
                end: tag_end,
                content: (tag_end, tag_end),
                path: names(&open, name),
            });
        } else {
            let name = tag.split_whitespace().next().unwrap_or_default();
            open.push((start, tag_end, name.to_string()));
        }
        i = tag_end;
    }
    out.sort_by_key(|e| e.start);
    out
}

/// Applies `m` to element `e` of `xml`: dropped; its content replaced by a value of another
/// kind (a number for text, text for a number or children); an unknown child added; or the
/// whole answer cut short in the middle of the element.
fn mutate_xml(xml: &str, e: &Element, m: Mutation) -> String {
    let (c0, c1) = e.content;
    match m {
        Mutation::Drop => format!("{}{}", &xml[..e.start], &xml[e.end..]),
        Mutation::OtherType => {
            let inner = xml[c0..c1].trim();
            let other = if inner.parse::<f64>().is_ok() {
                "12x"
            } else if inner.is_empty() || inner.starts_with('<') {
                "text"
            } else {
                "-7.5"
            };
            if c0 == c1 && xml[..e.end].ends_with("/>") {
                let name = e.path.last().unwrap();
                format!(
                    "{}<{name}>{other}</{name}>{}",
                    &xml[..e.start],
                    &xml[e.end..]
                )
            } else {
                format!("{}{other}{}", &xml[..c0], &xml[c1..])
            }
        }
        Mutation::Unknown => {
            let at = if c0 == c1 { e.end } else { c0 };
            format!(
                "{}<gpuboard_unknown a=\"1\"><x>2</x><y/></gpuboard_unknown>{}",
                &xml[..at],
                &xml[at..]
            )
        }
        Mutation::Truncate => xml[..e.start + (e.end - e.start) / 2].to_string(),
    }
}

/// Whether an element of the state answer is outside its core (the reply's envelope, the
/// host and the client's version are the core).
fn boinc_state_non_core(path: &[String]) -> bool {
    path.len() > 2 && path[2] != "host_info" && !path[2].starts_with("core_client_")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn mutated_boinc_answers_keep_the_core(
        case in 0usize..BOINC_CASES.len(),
        cc in any::<bool>(),
        at in any::<Index>(),
        m in mutation(),
    ) {
        let whole = boinc::snapshot(&boinc_answers(BOINC_CASES[case]), "corpus", Timestamp(1)).unwrap();
        let mut a = boinc_answers(BOINC_CASES[case]);
        let doc = if cc { &mut a.cc_status } else { &mut a.state };
        let all = elements(doc);
        let e = at.get(&all).clone();
        *doc = mutate_xml(doc, &e, m);
        let got = boinc::snapshot(&a, "corpus", Timestamp(1));
        // Cutting the answer short breaks it whole: only "no panic" holds then.
        let non_core = !matches!(m, Mutation::Truncate)
            && if cc { e.path.len() > 1 } else { boinc_state_non_core(&e.path) };
        if non_core {
            let s = got.map_err(|err| format!("{m:?} at {:?} took the source down: {err}", e.path));
            let s = s.unwrap();
            prop_assert_eq!(core(&s), core(&whole), "{:?} at {:?}", m, e.path);
        }
    }
}

/// The Prometheus cases: every one is mutated.
const PROMETHEUS_CASES: [&str; 2] = ["live", "stale"];

/// Serves `buildinfo` and `query` as Prometheus would on 127.0.0.1 and fetches them through
/// the source.
async fn prometheus_fetch(buildinfo: &Value, query: &Value) -> Result<Snapshot, String> {
    let j = "application/json";
    let url = serve(vec![
        (
            "/api/v1/status/buildinfo",
            Reply::Full(200, j, serde_json::to_vec(buildinfo).unwrap()),
        ),
        (
            "/api/v1/query",
            Reply::Full(200, j, serde_json::to_vec(query).unwrap()),
        ),
    ])
    .await;
    let mut config = PrometheusConfig::new(url);
    config.timeout = std::time::Duration::from_secs(5);
    let source = PrometheusSource::new(config).unwrap();
    source.fetch().await.map_err(|e| e.to_string())
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn prometheus_corpus_reads_with_no_warning() {
    for case in PROMETHEUS_CASES {
        let at = |name: &str| corpus(&format!("prometheus/{case}/{name}.json"));
        let s = block_on(prometheus_fetch(&at("buildinfo"), &at("query"))).unwrap();
        assert!(
            s.endpoint.warnings.is_empty(),
            "{case}: {:?}",
            s.endpoint.warnings
        );
        let nodes: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(nodes, ["node-a", "node-b", "node-c"], "{case}");
        assert!(
            s.nodes.iter().all(|n| n.devices.len() == 4),
            "{case}: {:?}",
            s.nodes
        );
        // node-b's GPU 3 is in MIG mode; node-c's GPU 1 has no frame-buffer fields.
        let t3 = s.nodes[1].devices[3].telemetry.as_ref().unwrap();
        assert_eq!(t3.mig_enabled, Some(true), "{case}: {:?}", s.nodes[1]);
        let c1 = s.nodes[2].devices[1].telemetry.as_ref().unwrap();
        assert!(
            c1.memory_used.is_none() && c1.temperature_c.is_some(),
            "{case}: {c1:?}"
        );
    }
}

/// Whether a path in the query answer is outside its core: the envelope, the list of
/// series and the labels that place a series (host, GPU index, model) are the core; a whole
/// series, its other labels and its samples are not.
fn prometheus_query_non_core(path: &[Step]) -> bool {
    let placing = ["Hostname", "instance", "gpu", "modelName"];
    path.len() >= 3 && !matches!(path.get(4), Some(Step::Key(k)) if placing.contains(&k.as_str()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn mutated_prometheus_answers_keep_the_core(
        case in 0usize..PROMETHEUS_CASES.len(),
        info in any::<bool>(),
        at in any::<Index>(),
        m in mutation(),
    ) {
        let file = |name: &str| corpus(&format!("prometheus/{}/{name}.json", PROMETHEUS_CASES[case]));
        let (mut buildinfo, mut query) = (file("buildinfo"), file("query"));
        let whole = block_on(prometheus_fetch(&buildinfo, &query)).unwrap();
        let doc = if info { &mut buildinfo } else { &mut query };
        let mut all = Vec::new();
        paths(doc, &mut Vec::new(), &mut all);
        let path = at.get(&all).clone();
        mutate(doc, &path, m);
        let got = block_on(prometheus_fetch(&buildinfo, &query));
        let non_core = info || prometheus_query_non_core(&path);
        if non_core {
            let s = got.map_err(|e| format!("{m:?} at {path:?} took the source down: {e}"));
            let s = s.unwrap();
            prop_assert_eq!(core(&s), core(&whole), "{:?} at {:?}", m, path);
        }
    }
}
