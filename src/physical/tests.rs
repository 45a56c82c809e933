#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use super::*;
use crate::clock::Timestamp;
use crate::placement::DeviceShare;
use crate::request::ClaimRequest;
use crate::snapshot::{ClaimState, ClaimView, DeviceView, EndpointInfo, NodeView, ProcessView};
use crate::units::Slots;

const GIB: u64 = 1 << 30;

/// A source's snapshot and the engine it speaks for.
struct Src {
    engine: GpuEngine,
    snapshot: Snapshot,
}

fn snap(engine: GpuEngine, nodes: Vec<NodeView>, claims: Vec<ClaimView>) -> Src {
    Src {
        engine,
        snapshot: Snapshot {
            endpoint: EndpointInfo::engine("x", engine.word(), String::new()),
            nodes,
            claims,
            ..Snapshot::default()
        },
    }
}

fn node(name: &str, devices: Vec<DeviceView>) -> NodeView {
    NodeView {
        name: name.to_string(),
        devices,
        ..NodeView::default()
    }
}

fn dev(index: u32, uuid: Option<&str>) -> DeviceView {
    DeviceView {
        index,
        model: "A100".to_string(),
        uuid: uuid.map(str::to_string),
        memory_capacity: Some(Bytes(40 * GIB)),
        ..DeviceView::default()
    }
}

fn with_processes(mut d: DeviceView, util: Option<u32>, ps: Vec<ProcessView>) -> DeviceView {
    d.telemetry = Some(DeviceTelemetry {
        utilization_gpu: util,
        processes: ps,
        ..DeviceTelemetry::default()
    });
    d
}

fn process(pid: u32, mib: u64, claim: Option<u64>, owner: Option<ProcessOwner>) -> ProcessView {
    ProcessView {
        pid,
        name: Some(format!("p{pid}")),
        used_memory: Some(Bytes::mib(mib)),
        claim: claim.map(ClaimId),
        owner,
    }
}

fn claim(
    id: u64,
    node: &str,
    device: u32,
    memory: u64,
    compute: u32,
    labels: &[(&str, &str)],
) -> ClaimView {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    ClaimView {
        id: ClaimId(id),
        name: None,
        state: ClaimState::Placed,
        project: "p".to_string(),
        holder: Some("alice".to_string()),
        form: format!("form {id}"),
        request: ClaimRequest {
            gpu: None,
            accelerator_type: None,
            cpus: None,
            node: None,
            devices: None,
            project: "p".to_string(),
            holder: Some("alice".to_string()),
            ttl: None,
            pid: None,
            expected_duration: None,
            labels,
            wait: false,
        },
        node: Some(node.to_string()),
        shares: vec![DeviceShare {
            device,
            memory: Bytes(memory),
            compute: Units(compute),
            slots: Slots(1),
        }],
        memory_reserved: Bytes(memory),
        compute_reserved: Units(compute),
        memory_used: None,
        over_limit: false,
        idle: false,
        created_at: Timestamp(0),
        lease_expires_at: None,
        pending_reasons: Vec::new(),
        infeasible: false,
    }
}

fn slurm_job(job: u64, node: &str, device: u32) -> ClaimView {
    claim(
        1000 + job,
        node,
        device,
        0,
        10_000,
        &[("slurm.job_id", &job.to_string())],
    )
}

fn pod(id: u64, name: &str, uid: &str, node: &str, device: u32, memory: u64) -> ClaimView {
    claim(
        id,
        node,
        device,
        memory,
        5_000,
        &[
            ("k8s.namespace", "ml"),
            ("k8s.pod", name),
            ("k8s.uid", uid),
            ("k8s.node", node),
        ],
    )
}

fn join_all(snaps: &[(&str, &Src)]) -> PhysicalFleet {
    join_with(snaps, &Aliases::default())
}

fn join_with(snaps: &[(&str, &Src)], aliases: &Aliases) -> PhysicalFleet {
    let views: Vec<SourceView<'_>> = snaps
        .iter()
        .enumerate()
        .map(|(i, (name, src))| SourceView {
            source: i,
            name,
            engine: src.engine,
            snapshot: &src.snapshot,
        })
        .collect();
    let fleet = join(&views, aliases);
    // The kept join gives the same from scratch.
    let shared = shared(snaps);
    assert_eq!(Joiner::default().join(&shared, aliases), fleet);
    fleet
}

fn shared(snaps: &[(&str, &Src)]) -> Vec<SharedSource> {
    snaps
        .iter()
        .enumerate()
        .map(|(i, (name, src))| SharedSource {
            source: i,
            name: (*name).to_string(),
            engine: src.engine,
            snapshot: Arc::new(src.snapshot.clone()),
        })
        .collect()
}

fn flag_words(g: &PhysicalGpu) -> Vec<&'static str> {
    g.flags.iter().map(GpuFlag::word).collect()
}

#[test]
fn one_gpu_by_uuid_and_by_node_and_index_across_names() {
    let nvml = snap(
        GpuEngine::Gpuboard,
        vec![node(
            "n1.cluster.local",
            vec![dev(0, Some("GPU-aaa")), dev(1, Some("GPU-bbb"))],
        )],
        vec![],
    );
    let dcgm = snap(
        GpuEngine::Telemetry,
        vec![node(
            "N1",
            vec![dev(0, Some("gpu-AAA")), dev(1, Some("GPU-bbb"))],
        )],
        vec![],
    );
    let slurm = snap(
        GpuEngine::Slurm,
        vec![node("n1", vec![dev(0, None), dev(1, None)])],
        vec![],
    );
    let fleet = join_all(&[("serve", &nvml), ("prom", &dcgm), ("batch", &slurm)]);
    assert_eq!(fleet.gpus.len(), 2, "{fleet:#?}");
    assert!(fleet.warnings.is_empty(), "{:?}", fleet.warnings);
    let g0 = fleet.find("n1", 0).unwrap();
    assert_eq!(g0.uuid.as_deref(), Some("gpu-aaa"));
    assert_eq!(g0.source_names(), ["serve", "prom", "batch"]);
    assert_eq!(g0.node, "n1");
    assert!(fleet.find("N1.cluster.local", 1).is_some());
    assert!(fleet.find("n1", 2).is_none());
}

#[test]
fn aliases_join_names_nothing_else_would() {
    let a = snap(
        GpuEngine::Slurm,
        vec![node("gpu-node-7", vec![dev(0, None)])],
        vec![],
    );
    let b = snap(
        GpuEngine::Gpuboard,
        vec![node("n7", vec![dev(0, None)])],
        vec![],
    );
    assert_eq!(join_all(&[("a", &a), ("b", &b)]).gpus.len(), 2);
    let aliases = Aliases::new([("GPU-Node-7", "n7")]);
    let fleet = join_with(&[("a", &a), ("b", &b)], &aliases);
    assert_eq!(fleet.gpus.len(), 1);
    assert_eq!(fleet.gpus[0].seen_by.len(), 2);
}

#[test]
fn a_short_name_two_domains_share_stays_alone_with_why() {
    let a = snap(
        GpuEngine::Gpuboard,
        vec![node("n1.east.example", vec![dev(0, None)])],
        vec![],
    );
    let b = snap(
        GpuEngine::Gpuboard,
        vec![node("n1.west.example", vec![dev(0, None)])],
        vec![],
    );
    let c = snap(
        GpuEngine::Slurm,
        vec![node("n1", vec![dev(0, None)])],
        vec![],
    );
    let fleet = join_all(&[("a", &a), ("b", &b), ("c", &c)]);
    assert_eq!(fleet.gpus.len(), 3, "{fleet:#?}");
    let alone: Vec<_> = fleet
        .gpus
        .iter()
        .filter(|g| g.unmatched.is_some())
        .collect();
    assert_eq!(alone.len(), 1);
    let why = alone[0].unmatched.as_deref().unwrap();
    assert!(why.contains("n1.east.example, n1.west.example"), "{why}");
    assert!(why.contains("[aliases]"), "{why}");
    assert_eq!(fleet.warnings.len(), 1);
    assert!(
        fleet.warnings[0].starts_with("c GPU n1:0 left unmatched"),
        "{:?}",
        fleet.warnings
    );
}

#[test]
fn two_uuids_at_one_place_leave_the_device_without_one_unmatched() {
    let a = snap(
        GpuEngine::Gpuboard,
        vec![node("n1", vec![dev(0, Some("GPU-a"))])],
        vec![],
    );
    let b = snap(
        GpuEngine::Telemetry,
        vec![node("n1", vec![dev(0, Some("GPU-b"))])],
        vec![],
    );
    let c = snap(
        GpuEngine::Slurm,
        vec![node("n1", vec![dev(0, None)])],
        vec![],
    );
    let fleet = join_all(&[("a", &a), ("b", &b), ("c", &c)]);
    assert_eq!(fleet.gpus.len(), 3);
    let alone = fleet.gpus.iter().find(|g| g.unmatched.is_some()).unwrap();
    assert_eq!(&*alone.seen_by[0].source_name, "c");
    assert!(
        alone
            .unmatched
            .as_deref()
            .unwrap()
            .contains("gpu-a to a but gpu-b to b"),
        "{alone:?}"
    );
}

#[test]
fn a_slurm_job_and_a_claim_not_nested_are_double_booked_with_both_named() {
    let serve = snap(
        GpuEngine::Gpuboard,
        vec![node("n1", vec![dev(3, Some("GPU-3"))])],
        vec![claim(7, "n1", 3, 10 * GIB, 5_000, &[])],
    );
    let slurm = snap(
        GpuEngine::Slurm,
        vec![node("n1", vec![dev(3, None)])],
        vec![slurm_job(42, "n1", 3)],
    );
    let fleet = join_all(&[("serve", &serve), ("batch", &slurm)]);
    let g = fleet.find("n1", 3).unwrap();
    assert_eq!(g.holders.len(), 2);
    assert_eq!(flag_words(g), ["double-booked"]);
    let GpuFlag::DoubleBooked {
        holders,
        resource,
        held,
        has,
    } = &g.flags[0]
    else {
        panic!()
    };
    // The whole GPU holds all 40 GiB: with the claim's 10 GiB, 50 of 40.
    assert_eq!(
        (*resource, *held, *has),
        (Resource::Memory, 50 * GIB, 40 * GIB)
    );
    assert_eq!(holders.len(), 2);
    let text = g.flags[0].describe(g);
    assert!(text.contains("claim 7 (alice) [serve]"), "{text}");
    assert!(text.contains("Slurm job 42 [batch]"), "{text}");
}

#[test]
fn a_whole_gpu_beside_a_memory_only_claim_is_double_booked_in_memory() {
    let serve = snap(
        GpuEngine::Gpuboard,
        vec![node("n1", vec![dev(0, Some("GPU-0"))])],
        vec![claim(7, "n1", 0, 8 * GIB, 0, &[])],
    );
    let slurm = snap(
        GpuEngine::Slurm,
        vec![node("n1", vec![dev(0, None)])],
        vec![slurm_job(42, "n1", 0)],
    );
    let fleet = join_all(&[("serve", &serve), ("batch", &slurm)]);
    let GpuFlag::DoubleBooked {
        resource,
        held,
        has,
        ..
    } = &fleet.gpus[0].flags[0]
    else {
        panic!("{:?}", fleet.gpus[0].flags)
    };
    assert_eq!(
        (*resource, *held, *has),
        (Resource::Memory, 48 * GIB, 40 * GIB)
    );
}

#[test]
fn fractions_over_one_gpu_are_double_booked_in_compute() {
    let ray = snap(
        GpuEngine::Ray,
        vec![node("n1", vec![dev(0, None)])],
        vec![
            claim(1, "n1", 0, 0, 6_000, &[]),
            claim(2, "n1", 0, 0, 6_000, &[]),
        ],
    );
    let fleet = join_all(&[("actors", &ray)]);
    let g = &fleet.gpus[0];
    assert_eq!(
        g.flags,
        [GpuFlag::DoubleBooked {
            holders: vec![0, 1],
            resource: Resource::Compute,
            held: 12_000,
            has: 10_000
        }]
    );
    assert!(g.flags[0].describe(g).contains("hold 1.2 of 1 GPU"));
}

#[test]
fn gpuboard_run_inside_a_slurm_job_is_nested_not_double_booked() {
    let job = ProcessOwner::SlurmJob {
        job: 42,
        step: Some("0".to_string()),
    };
    let serve = snap(
        GpuEngine::Gpuboard,
        vec![node(
            "n1",
            vec![with_processes(
                dev(3, Some("GPU-3")),
                Some(80),
                vec![
                    process(900, 512, Some(7), Some(job.clone())),
                    process(901, 256, None, Some(job)),
                ],
            )],
        )],
        vec![claim(7, "n1", 3, 10 * GIB, 5_000, &[])],
    );
    let slurm = snap(
        GpuEngine::Slurm,
        vec![node("n1", vec![dev(3, None)])],
        vec![slurm_job(42, "n1", 3)],
    );
    let fleet = join_all(&[("serve", &serve), ("batch", &slurm)]);
    let g = fleet.find("n1", 3).unwrap();
    assert!(g.flags.is_empty(), "{:?}", g.flags);
    let run = g
        .holders
        .iter()
        .position(|h| h.engine == GpuEngine::Gpuboard)
        .unwrap();
    let job = g
        .holders
        .iter()
        .position(|h| h.engine == GpuEngine::Slurm)
        .unwrap();
    assert_eq!(g.holders[run].parent, Some(job));
    let chain: Vec<&str> = g.chain(run).iter().map(|h| &*h.label).collect();
    assert_eq!(chain, ["Slurm job 42", "claim 7 (alice)"]);
    // The claim's process under the claim, the job's other process under the job.
    assert_eq!(g.processes[0].holder, Some(run));
    assert_eq!(g.processes[1].holder, Some(job));
}

#[test]
fn pod_ray_worker_and_process_are_one_chain() {
    let uid = "6b3e7a6f-0000-4000-8000-000000000001";
    let k8s = snap(
        GpuEngine::Kubernetes,
        vec![node(
            "n1",
            vec![dev(0, Some("GPU-0")), dev(1, Some("GPU-1"))],
        )],
        vec![pod(11, "raycluster-worker-x", uid, "n1", 1, 0)],
    );
    // KubeRay: the raylet is named by its pod, and sees the pod's one GPU as index 0.
    let mut worker = claim(
        21,
        "raycluster-worker-x",
        0,
        0,
        10_000,
        &[("ray.kind", "actor")],
    );
    worker.holder = Some("actor Trainer".to_string());
    let ray = snap(
        GpuEngine::Ray,
        vec![node("raycluster-worker-x", vec![dev(0, None)])],
        vec![worker],
    );
    let serve = snap(
        GpuEngine::Gpuboard,
        vec![node(
            "n1",
            vec![
                dev(0, Some("GPU-0")),
                with_processes(
                    dev(1, Some("GPU-1")),
                    Some(90),
                    vec![process(
                        4242,
                        2048,
                        None,
                        Some(ProcessOwner::pod(uid, None, None)),
                    )],
                ),
            ],
        )],
        vec![],
    );
    let fleet = join_all(&[("k8s", &k8s), ("actors", &ray), ("serve", &serve)]);
    assert_eq!(fleet.gpus.len(), 2, "{fleet:#?}");
    let g = fleet.find("n1", 1).unwrap();
    assert_eq!(g.source_names(), ["k8s", "actors", "serve"]);
    assert!(g.flags.is_empty(), "{:?}", g.flags);
    let p = g.processes[0].holder.unwrap();
    let chain: Vec<&str> = g.chain(p).iter().map(|h| &*h.label).collect();
    assert_eq!(chain, ["pod ml/raycluster-worker-x", "Ray actor Trainer"]);
    assert!(fleet.find("n1", 0).unwrap().holders.is_empty());
}

#[test]
fn one_uuid_on_two_gpus_of_one_source_is_not_one_gpu() {
    let src = snap(
        GpuEngine::Gpuboard,
        vec![
            node("a", vec![dev(0, Some("GPU-same"))]),
            node("b", vec![dev(0, Some("GPU-same"))]),
        ],
        Vec::new(),
    );
    let fleet = join_all(&[("serve", &src)]);
    assert_eq!(fleet.gpus.len(), 2, "{:?}", fleet.warnings);
    assert!(
        fleet
            .warnings
            .iter()
            .any(|w| w.contains("UUID gpu-same is given to a:0 and b:0")),
        "{:?}",
        fleet.warnings
    );
}

#[test]
fn one_uuid_two_sources_place_apart_is_one_gpu_with_a_warning() {
    let serve = snap(
        GpuEngine::Gpuboard,
        vec![node("gpu-node-7", vec![dev(0, Some("GPU-X"))])],
        Vec::new(),
    );
    let k8s = snap(
        GpuEngine::Kubernetes,
        vec![node("n7", vec![dev(3, Some("GPU-X"))])],
        Vec::new(),
    );
    let fleet = join_all(&[("serve", &serve), ("k8s", &k8s)]);
    assert_eq!(fleet.gpus.len(), 1, "{:?}", fleet.warnings);
    let gpu = &fleet.gpus[0];
    assert_eq!(
        (gpu.id(), gpu.place()),
        ("gpu-x".to_string(), "gpu-node-7:0".to_string())
    );
    assert_eq!(gpu.seen_by.len(), 2);
    assert_eq!(
        fleet.warnings,
        [
            "UUID gpu-x is gpu-node-7:0 to serve but n7:3 to k8s: joined as one GPU at \
          gpu-node-7:0 by its UUID (if the nodes are one host, name it in the config's \
          [aliases])"
        ]
    );
}

#[test]
fn memory_no_holder_accounts_for_is_unexplained() {
    let serve = snap(
        GpuEngine::Gpuboard,
        vec![node(
            "n1",
            vec![with_processes(
                dev(0, Some("GPU-0")),
                Some(50),
                vec![
                    process(10, 100, Some(7), None),
                    process(11, 300, None, None),
                    process(12, 200, None, Some(ProcessOwner::pod("nobody", None, None))),
                ],
            )],
        )],
        vec![claim(7, "n1", 0, GIB, 5_000, &[])],
    );
    let fleet = join_all(&[("serve", &serve)]);
    let g = &fleet.gpus[0];
    assert_eq!(
        g.flags,
        [GpuFlag::Unexplained {
            memory: Bytes::mib(500),
            pids: vec![11, 12]
        }]
    );
    assert!(g.flags[0].describe(g).contains("pid 11, 12"));
    // Seen by telemetry alone (a host read over SSH), nothing allocates: no flag.
    let host = Src {
        engine: GpuEngine::Telemetry,
        ..serve
    };
    let fleet = join_all(&[("remote", &host)]);
    assert_eq!(fleet.gpus[0].flags, []);
}

#[test]
fn memory_shares_over_the_gpu_are_double_booked_and_guessed_ones_book_nothing() {
    let k8s = snap(
        GpuEngine::Kubernetes,
        vec![node("n1", vec![dev(0, Some("GPU-0"))])],
        vec![
            pod(1, "a", "u1", "n1", 0, 30 * GIB),
            pod(2, "b", "u2", "n1", 0, 30 * GIB),
        ],
    );
    let fleet = join_all(&[("k8s", &k8s)]);
    let g = &fleet.gpus[0];
    let GpuFlag::DoubleBooked { resource, held, .. } = &g.flags[0] else {
        panic!("{:?}", g.flags)
    };
    assert_eq!((*resource, *held), (Resource::Memory, 60 * GIB));
    let mut guessed = pod(3, "c", "u3", "n1", 0, 0);
    guessed
        .request
        .labels
        .insert("k8s.devices".into(), "guessed".into());
    let k8s = snap(
        GpuEngine::Kubernetes,
        vec![node("n1", vec![dev(0, Some("GPU-0"))])],
        vec![pod(1, "a", "u1", "n1", 0, 30 * GIB), guessed],
    );
    let slurm = snap(
        GpuEngine::Slurm,
        vec![node("n1", vec![dev(0, None)])],
        vec![],
    );
    let fleet = join_all(&[("k8s", &k8s), ("batch", &slurm)]);
    assert!(fleet.gpus[0].flags.is_empty(), "{:?}", fleet.gpus[0].flags);
    assert_eq!(fleet.gpus[0].holders.len(), 2);
}

#[test]
fn two_sources_reading_one_cluster_count_a_pod_once() {
    let k8s = snap(
        GpuEngine::Kubernetes,
        vec![node("n1", vec![dev(0, Some("GPU-0"))])],
        vec![pod(1, "a", "u1", "n1", 0, 30 * GIB)],
    );
    let fleet = join_all(&[("k8s-a", &k8s), ("k8s-b", &k8s)]);
    assert_eq!(fleet.gpus[0].holders.len(), 1);
    assert!(fleet.gpus[0].flags.is_empty());
}

#[test]
fn telemetry_with_processes_wins_over_dcgm() {
    let mut dcgm_dev = dev(0, Some("GPU-0"));
    dcgm_dev.telemetry = Some(DeviceTelemetry {
        sampled_at: Timestamp(9_000),
        utilization_gpu: Some(1),
        ..DeviceTelemetry::default()
    });
    let dcgm = snap(
        GpuEngine::Telemetry,
        vec![node("n1", vec![dcgm_dev])],
        vec![],
    );
    let serve = snap(
        GpuEngine::Gpuboard,
        vec![node(
            "n1",
            vec![with_processes(
                dev(0, Some("GPU-0")),
                Some(70),
                vec![process(1, 1, None, None)],
            )],
        )],
        vec![],
    );
    let fleet = join_all(&[("prom", &dcgm), ("serve", &serve)]);
    assert_eq!(fleet.gpus[0].telemetry_from, Some(1));
    let fleet = join_all(&[("prom", &dcgm)]);
    assert_eq!(fleet.gpus[0].telemetry_from, Some(0));
}

#[test]
fn idle_for_thirty_minutes_flags_every_engines_holders() {
    let at = |util: u32| {
        snap(
            GpuEngine::Gpuboard,
            vec![node(
                "n1",
                vec![with_processes(dev(0, Some("GPU-0")), Some(util), vec![])],
            )],
            vec![],
        )
    };
    let slurm = snap(
        GpuEngine::Slurm,
        vec![node("n1", vec![dev(0, None)])],
        vec![slurm_job(5, "n1", 0)],
    );
    let mut tracker = IdleClock::default();
    let t0 = Timestamp(1_000_000);
    let run = |tracker: &mut IdleClock, util: u32, t: Timestamp| {
        let serve = at(util);
        let mut f = join_all(&[("serve", &serve), ("batch", &slurm)]);
        tracker.observe(&mut f, t);
        f.gpus[0].flags.clone()
    };
    assert!(run(&mut tracker, 4, t0).is_empty());
    assert!(run(&mut tracker, 0, t0.plus_millis(IDLE_FOR_MS - 1)).is_empty());
    let flags = run(&mut tracker, 3, t0.plus_millis(IDLE_FOR_MS));
    assert_eq!(
        flags,
        [GpuFlag::Idle {
            holders: vec![0],
            since: t0
        }]
    );
    // Busy once: the clock starts over.
    assert!(run(&mut tracker, 5, t0.plus_millis(IDLE_FOR_MS + 1)).is_empty());
    assert!(run(&mut tracker, 0, t0.plus_millis(2 * IDLE_FOR_MS)).is_empty());
    // Idle but held by no one: not flagged.
    let serve = at(0);
    let mut f = join_all(&[("serve", &serve)]);
    let mut t = IdleClock::default();
    t.observe(&mut f, t0);
    t.observe(&mut f, t0.plus_millis(IDLE_FOR_MS));
    assert!(f.gpus[0].flags.is_empty());
}

#[test]
fn flags_serialize_with_their_word() {
    let f = GpuFlag::Unexplained {
        memory: Bytes(5),
        pids: vec![1],
    };
    let v = serde_json::to_value(&f).unwrap();
    assert_eq!(v["flag"], "unexplained");
    assert_eq!(v["memory"], 5);
}

mod properties;
