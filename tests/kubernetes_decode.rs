//! The Kubernetes source's decoding on the fixtures in tests/corpus/kubernetes (shaped as
//! HAMi's and Koordinator's published examples; see its README): every encoding into the
//! device shares worked out by hand, double-booking flagged, pending pods with the
//! scheduler's words; and every field of the fixtures dropped, retyped or joined by an
//! unknown one without a panic, the nodes still read, and a warning where a read field
//! went bad.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use gpuboard::clock::Timestamp;
use gpuboard::placement::Health;
use gpuboard::snapshot::{ClaimState, ClaimView, DeviceView, Snapshot};
use gpuboard::sources::kubernetes::decode;
use gpuboard::sources::kubernetes::objects::{node_facts, pod_facts};
use gpuboard::units::{Bytes, Slots, Units};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/kubernetes/cluster")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn decode_lists(nodes: &Value, pods: &Value) -> Snapshot {
    let items = |v: &Value| v["items"].as_array().cloned().unwrap_or_default();
    let nodes: Vec<_> = items(nodes).iter().map(node_facts).collect();
    let pods: Vec<_> = items(pods).iter().map(pod_facts).collect();
    decode::snapshot(&nodes, &pods, "k8s", "v1.30.4", Timestamp(1))
}

fn cluster() -> Snapshot {
    decode_lists(&fixture("nodes.json"), &fixture("pods.json"))
}

fn device<'a>(s: &'a Snapshot, node: &str, index: u32) -> &'a DeviceView {
    s.nodes
        .iter()
        .find(|n| n.name == node)
        .unwrap_or_else(|| panic!("no node {node}"))
        .devices
        .iter()
        .find(|d| d.index == index)
        .unwrap_or_else(|| panic!("no device {node}:{index}"))
}

fn claim<'a>(s: &'a Snapshot, ns: &str, pod: &str) -> &'a ClaimView {
    s.claims
        .iter()
        .find(|c| c.project == ns && c.holder.as_deref() == Some(pod))
        .unwrap_or_else(|| panic!("no claim for {ns}/{pod}"))
}

/// (memory allocated, compute allocated, slots allocated, holders).
fn booked(d: &DeviceView) -> (Bytes, Units, Slots, usize) {
    (
        d.memory_allocated,
        d.compute_allocated,
        d.slots_allocated,
        d.holders.len(),
    )
}

#[test]
fn the_fixture_cluster_reads_with_no_warning() {
    let s = cluster();
    assert!(s.endpoint.warnings.is_empty(), "{:#?}", s.endpoint.warnings);
    assert_eq!(s.endpoint.kind, "kubernetes");
    let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["hami-a", "koord-b", "mig-e", "mixed-c", "plain-d"]);
    let count = |n: &str| s.nodes.iter().find(|x| x.name == n).unwrap().devices.len();
    // HAMi: two T4s from its register (not the 20 vGPUs of nvidia.com/gpu); Koordinator:
    // gpu-core 200 / 100; plain: nvidia.com/gpu; MIG: one whole A100 and two 3g.40gb.
    assert_eq!(
        [
            count("hami-a"),
            count("koord-b"),
            count("mixed-c"),
            count("plain-d"),
            count("mig-e")
        ],
        [2, 2, 1, 4, 3]
    );
    assert_eq!(s.nodes[0].cpus_milli, Some(31_800));
    // 14 pods asking for GPUs, less the finished one; coredns asks for none.
    assert_eq!(s.claims.len(), 13);
}

#[test]
fn hami_shares_are_read_from_its_annotation_by_uuid() {
    let s = cluster();
    let d0 = device(&s, "hami-a", 0);
    assert_eq!(d0.model, "NVIDIA-Tesla T4");
    assert_eq!(d0.memory_capacity, Some(Bytes::gib(16)));
    assert_eq!(
        d0.uuid.as_deref(),
        Some("GPU-76fd10c5-2ac2-9f5c-61d8-0f4a59e7e1cc")
    );
    // hami-3g: 3000 MiB, 30 %; hami-pct: 50 % of 16 GiB = 8192 MiB, no core limit.
    assert_eq!(
        booked(d0),
        (Bytes::mib(3000 + 8192), Units(3_000), Slots(2), 2)
    );
    assert_eq!(d0.memory_free, Bytes::mib(16_384 - 11_192));
    assert_eq!(d0.health, Health::Healthy);
    // hami-two: two containers, 4096 MiB and 25 % each, on the same GPU: one share.
    let d1 = device(&s, "hami-a", 1);
    assert_eq!(booked(d1), (Bytes::mib(8192), Units(5_000), Slots(2), 1));
    let two = claim(&s, "ml", "hami-two");
    assert_eq!(two.shares.len(), 1);
    assert_eq!(
        two.form,
        "pod ml/hami-two: nvidia.com/gpu=2 nvidia.com/gpucores=50 nvidia.com/gpumem=8192"
    );
    let c = claim(&s, "ml", "hami-3g");
    assert_eq!(c.node.as_deref(), Some("hami-a"));
    assert_eq!(
        (c.memory_reserved, c.compute_reserved),
        (Bytes::mib(3000), Units(3000))
    );
    assert_eq!(
        c.request.labels["k8s.uid"],
        "0a1b2c3d-0001-4000-8000-000000000001"
    );
}

#[test]
fn koordinator_shares_are_read_by_minor_and_ratio() {
    let s = cluster();
    let d1 = device(&s, "koord-b", 1);
    assert_eq!(d1.model, "NVIDIA-A100-SXM4-80GB");
    assert_eq!(d1.memory_capacity, Some(Bytes::gib(80)));
    // koord-half: 40Gi, 50 %; koord-mem: 20Gi, no core.
    assert_eq!(booked(d1), (Bytes::gib(60), Units(5_000), Slots(2), 2));
    assert_eq!(d1.health, Health::Healthy);
    let half = claim(&s, "research", "koord-half");
    assert_eq!(
        half.form,
        "pod research/koord-half: koordinator.sh/gpu-core=50 koordinator.sh/gpu-memory-ratio=50 koordinator.sh/gpu.shared=1"
    );
    let mem = claim(&s, "research", "koord-mem");
    assert_eq!(
        mem.form,
        "pod research/koord-mem: koordinator.sh/gpu-memory=20Gi"
    );
}

#[test]
fn whole_gpus_land_on_the_first_free_ones_and_say_so() {
    let s = cluster();
    // batch/whole-0 asks nvidia.com/gpu=1 on koord-b, whose GPU 1 Koordinator shares.
    let d0 = device(&s, "koord-b", 0);
    assert_eq!(booked(d0), (Bytes::gib(80), Units::FULL, Slots::FULL, 1));
    let w = claim(&s, "batch", "whole-0");
    assert!(w.form.contains("does not publish which GPUs"), "{}", w.form);
    // plain-d: web/infer takes 0 and 1, web/train 2; 3 is free; all cordoned.
    let infer = claim(&s, "web", "infer");
    let at: Vec<u32> = infer.shares.iter().map(|s| s.device).collect();
    assert_eq!(at, [0, 1]);
    assert_eq!(claim(&s, "web", "train").shares[0].device, 2);
    let d3 = device(&s, "plain-d", 3);
    assert!(d3.holders.is_empty());
    assert_eq!(d3.memory_capacity, Some(Bytes::mib(23_034)));
    assert!(
        s.nodes
            .iter()
            .find(|n| n.name == "plain-d")
            .unwrap()
            .devices
            .iter()
            .all(|d| d.cordoned)
    );
    assert!(!d0.cordoned);
}

#[test]
fn mig_instances_are_devices_and_a_not_ready_node_is_unhealthy() {
    let s = cluster();
    assert_eq!(device(&s, "mig-e", 0).model, "NVIDIA-A100-SXM4-80GB");
    assert_eq!(device(&s, "mig-e", 1).model, "MIG 3g.40gb");
    let mig = claim(&s, "ml", "mig-pod");
    assert_eq!(mig.shares.len(), 1);
    assert_eq!(mig.shares[0].device, 1);
    assert!(matches!(
        &device(&s, "mig-e", 2).health,
        Health::Unhealthy(why) if why == "node not Ready (KubeletNotReady): PLEG is not healthy: pleg was last seen active 3m4s ago"
    ));
}

#[test]
fn two_encodings_on_one_gpu_past_whole_are_flagged() {
    let s = cluster();
    let d = device(&s, "mixed-c", 0);
    // HAMi: 16000 MiB and 60 %; Koordinator: 50 % of 23028 MiB = 11514 MiB and 50 %.
    assert_eq!(d.memory_capacity, Some(Bytes::mib(23_028)));
    assert_eq!(d.holders.len(), 2);
    assert_eq!(d.memory_allocated, Bytes::mib(23_028));
    assert_eq!(d.memory_free, Bytes(0));
    assert_eq!(d.compute_allocated, Units::FULL);
    let Health::Unhealthy(why) = &d.health else {
        panic!("not flagged: {:?}", d.health)
    };
    assert!(
        why.starts_with("double-booked: memory 26.9 GiB of 22.5 GiB, compute 110%"),
        "{why}"
    );
    assert!(why.contains("ml/a10-hami (HAMi"), "{why}");
    assert!(why.contains("research/a10-koord (Koordinator"), "{why}");
    // No other GPU of the fixture is booked past whole.
    let flagged = s
        .nodes
        .iter()
        .flat_map(|n| &n.devices)
        .filter(|d| matches!(&d.health, Health::Unhealthy(w) if w.contains("double-booked")))
        .count();
    assert_eq!(flagged, 1);
}

#[test]
fn pending_pods_carry_the_schedulers_reason() {
    let s = cluster();
    let big = claim(&s, "ml", "pending-big");
    assert_eq!(big.state, ClaimState::Pending);
    assert_eq!(
        big.pending_reasons,
        [
            "Kubernetes: Unschedulable: 0/5 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unschedulable: }, 4 Insufficient nvidia.com/gpu. preemption: 0/5 nodes are available: 5 No preemption victims found for incoming pod."
        ]
    );
    let hami = claim(&s, "ml", "hami-pending");
    assert_eq!(
        hami.pending_reasons,
        ["Kubernetes: FilteringFailed: no available node, 2 nodes do not meet"]
    );
    assert!(
        s.claims
            .iter()
            .rev()
            .take(2)
            .all(|c| c.state == ClaimState::Pending)
    );
    let ml = s.projects.iter().find(|p| p.name == "ml").unwrap();
    assert_eq!((ml.running, ml.pending), (5, 2));
}

// ---- mutations ----

#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

fn paths(v: &Value, here: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                here.push(Step::Key(k.clone()));
                out.push(here.clone());
                paths(child, here, out);
                here.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                here.push(Step::Index(i));
                out.push(here.clone());
                paths(child, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn parent_mut<'a>(v: &'a mut Value, path: &[Step]) -> &'a mut Value {
    let mut cur = v;
    for s in path {
        cur = match s {
            Step::Key(k) => cur.get_mut(k.as_str()).unwrap(),
            Step::Index(i) => cur.get_mut(*i).unwrap(),
        };
    }
    cur
}

fn other_type(v: &Value) -> Value {
    match v {
        Value::String(_) => Value::from(7),
        Value::Number(_) => Value::from("seven"),
        Value::Bool(_) => Value::from("yes"),
        Value::Null => Value::from(true),
        Value::Array(_) => Value::from("list"),
        Value::Object(_) => Value::from(vec![1, 2]),
    }
}

/// Applies mutation `m` (0 drop, 1 retype, 2 an unknown field beside it) at `path`.
fn mutate(doc: &mut Value, path: &[Step], m: u8) {
    let (last, parent) = path.split_last().unwrap();
    let parent = parent_mut(doc, parent);
    match (m, last, parent) {
        (0, Step::Key(k), Value::Object(o)) => {
            o.remove(k);
        }
        (0, Step::Index(i), Value::Array(a)) => {
            a.remove(*i);
        }
        (1, Step::Key(k), Value::Object(o)) => {
            let new = other_type(&o[k]);
            o.insert(k.clone(), new);
        }
        (1, Step::Index(i), Value::Array(a)) => a[*i] = other_type(&a[*i]),
        (_, _, Value::Object(o)) => {
            o.insert(
                "gpuboardUnknownField".into(),
                serde_json::json!({"x": [1, "y"]}),
            );
        }
        (_, _, Value::Array(a)) => a.push(serde_json::json!({"unknown": true})),
        _ => {}
    }
}

fn show(path: &[Step]) -> String {
    path.iter()
        .map(|s| match s {
            Step::Key(k) => k.clone(),
            Step::Index(i) => i.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Fields the decoding reads: retyping one must leave a warning.
fn read_field(path: &str) -> bool {
    let read = [
        ".metadata.name",
        ".metadata.namespace",
        ".spec.nodeName",
        ".status.phase",
        ".metadata.annotations.hami.io/node-nvidia-register",
        ".metadata.annotations.hami.io/vgpu-devices-allocated",
        ".metadata.annotations.scheduling.koordinator.sh/device-allocated",
        ".spec.containers",
        ".status.capacity.nvidia.com/gpu",
        ".status.capacity.koordinator.sh/gpu-core",
        ".spec.unschedulable",
    ];
    read.iter().any(|r| path.ends_with(r))
        || (path.contains(".resources.limits.") && !path.ends_with(".memory"))
}

#[test]
fn every_field_dropped_retyped_or_joined_keeps_the_nodes_and_warns() {
    let nodes = fixture("nodes.json");
    let pods = fixture("pods.json");
    let whole = cluster();
    for (which, doc) in [("nodes", &nodes), ("pods", &pods)] {
        let mut all = Vec::new();
        paths(
            &doc["items"],
            &mut vec![Step::Key("items".into())],
            &mut all,
        );
        for path in &all {
            for m in 0..3u8 {
                let mut bad = doc.clone();
                mutate(&mut bad, path, m);
                let s = if which == "nodes" {
                    decode_lists(&bad, &pods)
                } else {
                    decode_lists(&nodes, &bad)
                };
                let shown = format!("{which} {} mutation {m}", show(path));
                // The source stays up: every node is still there (one dropped node aside).
                let expected = if which == "nodes" && m == 0 && path.len() == 2 {
                    whole.nodes.len() - 1
                } else {
                    whole.nodes.len()
                };
                assert!(
                    s.nodes.len() >= expected,
                    "{shown}: {} nodes",
                    s.nodes.len()
                );
                if m == 1 && read_field(&shown.replace(" mutation 1", "")) {
                    let changed = s != whole;
                    assert!(
                        !s.endpoint.warnings.is_empty() || !changed,
                        "{shown}: changed the snapshot with no warning"
                    );
                }
            }
        }
    }
}
