//! The Ray and Prometheus adapters on answers captured from real peers (Ray 2.60.0's
//! dashboard holding the driver in `tests/peers/ray_driver.py`; Prometheus 2.42 scraping
//! the dcgm-exporter text in tests/fixtures/prometheus).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use gpuboard::clock::Timestamp;
use gpuboard::snapshot::{ClaimState, EndpointInfo, Snapshot};
use gpuboard::sources::prometheus::{self, NodeLabels, join_telemetry};
use gpuboard::sources::ray::{self, RayAnswerError, RayAnswerKind, RayAnswers};
use gpuboard::units::{Bytes, Units};
use serde_json::Value;

fn fixture(path: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn ray_answers() -> RayAnswers {
    RayAnswers {
        version: fixture("ray/version.json"),
        nodes: fixture("ray/nodes_summary.json"),
        cluster_status: fixture("ray/cluster_status.json"),
        tasks: fixture("ray/tasks.json"),
        actors: fixture("ray/actors.json"),
        placement_groups: fixture("ray/placement_groups.json"),
    }
}

fn ray_snapshot() -> Snapshot {
    ray::snapshot(&ray_answers(), "ray-head", Timestamp(1)).unwrap()
}

/// Per GPU index: (holder, fraction) as the snapshot's claims say.
fn holders_by_device(s: &Snapshot) -> Vec<(u32, String, Units)> {
    let mut out: Vec<(u32, String, Units)> = s
        .claims
        .iter()
        .filter(|c| c.state == ClaimState::Placed)
        .flat_map(|c| {
            c.shares
                .iter()
                .map(move |sh| (sh.device, c.holder.clone().unwrap(), sh.compute))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn ray_fractions_per_gpu_match_what_the_driver_saw() {
    let s = ray_snapshot();
    assert_eq!(s.endpoint.kind, "ray");
    assert_eq!(s.endpoint.version, "ray 2.60.0");
    assert!(!s.endpoint.actions);
    assert_eq!(s.nodes.len(), 1);
    let node = &s.nodes[0];
    assert_eq!(node.devices.len(), 4);
    assert!(node.devices.iter().all(|d| d.model == "A100"));
    // The driver's own report: ray.get_gpu_ids() inside each holder.
    let report = fixture("ray/driver_report.json");
    for h in report["holders"].as_array().unwrap() {
        let label = h["label"].as_str().unwrap();
        let gpu = u32::try_from(h["gpu_ids"][0].as_u64().unwrap()).unwrap();
        let kind = h["kind"].as_str().unwrap();
        let claim = s
            .claims
            .iter()
            .find(|c| c.holder.as_deref() == Some(&format!("{kind} {label}")))
            .unwrap_or_else(|| panic!("no claim for {kind} {label}"));
        assert_eq!(claim.shares.len(), 1, "{label}");
        assert_eq!(claim.shares[0].device, gpu, "{label}");
        assert_eq!(claim.node.as_deref(), Some("vm"));
    }
    assert_eq!(
        holders_by_device(&s),
        vec![
            (0, "actor actor-half".into(), Units(5000)),
            (0, "actor actor-quarter".into(), Units(2500)),
            (0, "task task-quarter".into(), Units(2500)),
            (1, "placement group pg-half bundle 0".into(), Units(5000)),
            (1, "task task-half".into(), Units(5000)),
            (1, "task task-in-pg".into(), Units(2500)),
        ]
    );
    // The bundle is counted once: its member's quarter is carved out of its half.
    let alloc: Vec<Units> = node.devices.iter().map(|d| d.compute_allocated).collect();
    assert_eq!(
        alloc,
        vec![Units(10_000), Units(10_000), Units(0), Units(0)]
    );
    let free: u32 = node.devices.iter().map(|d| d.compute_free.0).sum();
    assert_eq!(Units(free), Units(20_000)); // Ray: 2.0/4.0 GPU used
    assert_eq!(node.devices[1].holders.len(), 3);
    let in_pg = s
        .claims
        .iter()
        .find(|c| c.holder.as_deref() == Some("task task-in-pg"))
        .unwrap();
    assert_eq!(
        in_pg.form,
        "num_gpus=0.25 (in placement group pg-half bundle 0)"
    );
}

#[test]
fn ray_infeasible_task_is_pending_with_rays_reasons() {
    let s = ray_snapshot();
    let pending: Vec<_> = s
        .claims
        .iter()
        .filter(|c| c.state == ClaimState::Pending)
        .collect();
    assert_eq!(pending.len(), 1);
    let p = pending[0];
    assert_eq!(p.holder.as_deref(), Some("task task-infeasible"));
    assert_eq!(p.form, "num_gpus=8");
    assert!(p.infeasible);
    assert_eq!(
        p.pending_reasons,
        vec![
            "Ray: waiting for a node with the resources (PENDING_NODE_ASSIGNMENT)".to_string(),
            "Ray demand {GPU: 8}: 1+ pending tasks/actors/groups".to_string(),
            "infeasible: no node has GPU 8; the largest has 4 on vm".to_string(),
        ]
    );
}

#[test]
fn ray_claim_ids_are_stable_across_reads() {
    let a = ray_snapshot();
    let b = ray_snapshot();
    let ids = |s: &Snapshot| s.claims.iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(ids(&a), ids(&b));
    let mut unique = ids(&a);
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), a.claims.len());
}

fn ray_error(edit: impl FnOnce(&mut RayAnswers)) -> ray::RayParseError {
    let mut answers = ray_answers();
    edit(&mut answers);
    ray::snapshot(&answers, "x", Timestamp(0)).unwrap_err()
}

#[test]
fn ray_wrong_types_are_warnings_naming_the_answer_and_path() {
    let mut answers = ray_answers();
    answers.nodes["data"]["summary"][0]["raylet"]["coreWorkersStats"][0]["usedResources"]["GPU"]
        ["resourceSlots"][0]["allocation"] = Value::String("a quarter".into());
    answers.tasks["data"]["result"]["result"] = Value::Bool(true);
    let whole = ray::snapshot(&ray_answers(), "x", Timestamp(0)).unwrap();
    let s = ray::snapshot(&answers, "x", Timestamp(0)).unwrap();
    // The core is still read: every node and GPU.
    assert_eq!(s.nodes.len(), whole.nodes.len());
    assert_eq!(s.devices().count(), whole.devices().count());
    let w = &s.endpoint.warnings;
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!(w[0].section, "/nodes");
    assert_eq!(
        w[0].path,
        "data.summary[0].raylet.coreWorkersStats[0].usedResources.GPU.resourceSlots[0].allocation"
    );
    assert_eq!(
        w[0].found,
        "invalid value: string \"a quarter\", expected a number"
    );
    assert_eq!(w[1].section, "/api/v0/tasks");
    assert_eq!(w[1].path, "data.result.result");
    assert_eq!(w[1].found, "expected an array, found the boolean true");
    assert_eq!(w[1].left_out, "the whole list");
}

#[test]
fn ray_unreadable_nodes_take_the_source_down() {
    let e = ray_error(|a| a.nodes["data"]["summary"] = Value::Bool(true));
    assert_eq!(e.answer, RayAnswerKind::Nodes);
    let RayAnswerError::Shape(err) = e.error else {
        panic!("{e:?}")
    };
    assert_eq!(err.path, "data.summary");
}

#[test]
fn ray_failures_and_foreign_json_are_told_apart() {
    let e = ray_error(|a| {
        a.nodes = serde_json::json!({"result": false, "msg": "Unknown view bogus", "data": {}});
    });
    assert_eq!(e.error, RayAnswerError::Failed("Unknown view bogus".into()));
    let e = ray_error(|a| a.version = serde_json::json!({"status": "success"}));
    assert_eq!(e.answer, RayAnswerKind::Version);
    assert!(matches!(e.error, RayAnswerError::NotRay(_)));
    let e = ray_error(|a| a.nodes = serde_json::json!([1, 2]));
    assert!(
        matches!(e.error, RayAnswerError::NotRay(ref m) if m.contains("an array of 2")),
        "{e:?}"
    );
    // Foreign JSON in an optional answer is a warning.
    let mut answers = ray_answers();
    answers.actors = serde_json::json!([1, 2]);
    let s = ray::snapshot(&answers, "x", Timestamp(0)).unwrap();
    assert!(
        s.endpoint.warnings[0].found.contains("an array of 2"),
        "{:?}",
        s.endpoint.warnings
    );
}

#[test]
fn ray_without_autoscaler_report_still_reads() {
    let mut answers = ray_answers();
    answers.cluster_status["data"]["clusterStatus"] = Value::Null;
    let s = ray::snapshot(&answers, "x", Timestamp(0)).unwrap();
    let p = s
        .claims
        .iter()
        .find(|c| c.state == ClaimState::Pending)
        .unwrap();
    assert!(p.infeasible);
    assert_eq!(p.pending_reasons.len(), 2);
}

fn prometheus_snapshot() -> Snapshot {
    let doc = fixture("prometheus/query_range.json");
    let series = prometheus::parse_result(&doc["data"]).unwrap();
    let endpoint = EndpointInfo {
        name: "prom".into(),
        kind: "prometheus".into(),
        ..EndpointInfo::default()
    };
    prometheus::telemetry_snapshot(&series, &NodeLabels::new(None), endpoint, Timestamp(0))
}

#[test]
fn prometheus_dcgm_series_become_telemetry() {
    let s = prometheus_snapshot();
    let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, vec!["node-a", "node-b"]);
    assert!(s.nodes.iter().all(|n| n.devices.len() == 4));
    assert!(s.claims.is_empty());
    let a1 = &s.nodes[0].devices[1];
    assert_eq!(a1.model, "NVIDIA A100-SXM4-40GB");
    assert_eq!(
        a1.uuid.as_deref(),
        Some("GPU-a1c0ffee-0000-4000-8000-00000000a001")
    );
    assert_eq!(a1.memory_capacity, Some(Bytes::mib(40960)));
    let t = a1.telemetry.as_ref().unwrap();
    assert_eq!(t.utilization_gpu, Some(37));
    assert_eq!(t.memory_used, Some(Bytes::mib(8192)));
    assert_eq!(t.temperature_c, Some(41));
    assert_eq!(t.power_mw, Some(82_750));
    assert_eq!(t.pci_bus_id.as_deref(), Some("00000000:30:00.0"));
    assert_eq!(t.mig_enabled, Some(false));
    assert!(!t.history_utilization.is_empty());
    assert!(t.sampled_at > Timestamp(1_700_000_000_000));
    // The sentinel: DCGM's FP64 blank for node-a GPU 2's power is "no data".
    assert_eq!(
        s.nodes[0].devices[2].telemetry.as_ref().unwrap().power_mw,
        None
    );
    assert_eq!(
        s.nodes[0].devices[2]
            .telemetry
            .as_ref()
            .unwrap()
            .utilization_gpu,
        Some(100)
    );
    // The MIG GPU: two 3g.40gb instances folded into GPU 3, memory summed, no utilization.
    let mig = s.nodes[1].devices[3].telemetry.as_ref().unwrap();
    assert_eq!(mig.mig_enabled, Some(true));
    assert_eq!(mig.memory_used, Some(Bytes::mib(10240 + 512)));
    assert_eq!(mig.memory_total, Some(Bytes::mib(2 * 40192)));
    assert_eq!(mig.utilization_gpu, None);
    assert_eq!(mig.temperature_c, Some(52));
}

#[test]
fn prometheus_telemetry_joins_ray_devices_by_host_and_index() {
    let mut ray = ray_snapshot();
    let mut prom = prometheus_snapshot();
    prom.nodes[0].name = "vm".into(); // the Ray head's host name
    assert_eq!(join_telemetry(&mut ray, &prom), 4);
    let d0 = &ray.nodes[0].devices[0];
    assert_eq!(d0.telemetry.as_ref().unwrap().utilization_gpu, Some(0));
    assert_eq!(
        ray.nodes[0].devices[1]
            .telemetry
            .as_ref()
            .unwrap()
            .utilization_gpu,
        Some(37)
    );
}
