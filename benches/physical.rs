//! The physical-GPU join at 8 000 GPUs (1 000 nodes x 8) seen by 4 sources: a gpuboard
//! endpoint per node (UUIDs, NVML telemetry, 4 processes and 2 claims per GPU), Slurm
//! (short names, no UUIDs, a job per GPU), Kubernetes (upper-case names, HAMi UUIDs, a pod
//! per GPU) and Prometheus dcgm (FQDNs, UUIDs, telemetry). The console runs it once per
//! change of a source, keeping what it prepared of the others (`Joiner`); the goal is
//! <= 50 ms per change. "one source changed": each iteration one source, in turn, has a
//! new snapshot (every GPU's telemetry sampled again, one claim gone or back), the others
//! the same; "SOURCE changed": that source alone, each iteration; "serve's readings alone
//! changed": the endpoint's telemetry new and no claim; "cold": every source prepared (the
//! one-shot join `status` runs). A change's result is held until the next join is done, as
//! the console holds its last.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use gpuboard::clock::Timestamp;
use gpuboard::ids::ClaimId;
use std::sync::Arc;

use gpuboard::physical::{
    Aliases, GpuEngine, IdleClock, Joiner, PhysicalFleet, SharedSource, SourceView, join,
};
use gpuboard::placement::DeviceShare;
use gpuboard::request::ClaimRequest;
use gpuboard::snapshot::Snapshot;
use gpuboard::snapshot::{
    ClaimState, ClaimView, DeviceTelemetry, DeviceView, EndpointInfo, NodeView, ProcessOwner,
    ProcessView,
};
use gpuboard::units::{Bytes, Slots, Units};

const NODES: usize = 1_000;
const GPUS: u32 = 8;

fn claim(id: u64, node: &str, device: u32, compute: u32, labels: &[(&str, String)]) -> ClaimView {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect();
    ClaimView {
        id: ClaimId(id),
        name: None,
        state: ClaimState::Placed,
        project: "p".into(),
        holder: Some("u".into()),
        form: String::new(),
        request: ClaimRequest {
            gpu: None,
            accelerator_type: None,
            cpus: None,
            node: None,
            devices: None,
            project: "p".into(),
            holder: None,
            ttl: None,
            pid: None,
            expected_duration: None,
            labels,
            wait: false,
        },
        node: Some(node.to_string()),
        shares: vec![DeviceShare {
            device,
            memory: Bytes(1 << 30),
            compute: Units(compute),
            slots: Slots(1),
        }],
        memory_reserved: Bytes(1 << 30),
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

fn telemetry(processes: Vec<ProcessView>) -> DeviceTelemetry {
    DeviceTelemetry {
        sampled_at: Timestamp(1),
        memory_used: Some(Bytes(4 << 30)),
        utilization_gpu: Some(3),
        processes,
        ..DeviceTelemetry::default()
    }
}

/// The four sources' snapshots.
// One node's eight GPUs as each source writes them, in one loop: read whole.
#[allow(clippy::too_many_lines)]
fn sources() -> Vec<Snapshot> {
    let snap = |kind: &str| Snapshot {
        endpoint: EndpointInfo::engine(kind, kind, String::new()),
        ..Snapshot::default()
    };
    let (mut serve, mut slurm, mut k8s, mut dcgm) = (
        snap("gpuboard"),
        snap("slurm"),
        snap("kubernetes"),
        snap("prometheus"),
    );
    let mut id = 0u64;
    for n in 0..NODES {
        let short = format!("node-{n:04}");
        let fqdn = format!("{short}.cluster.example");
        let upper = short.to_uppercase();
        let mut nodes = [
            NodeView {
                name: fqdn.clone(),
                ..NodeView::default()
            },
            NodeView {
                name: short.clone(),
                ..NodeView::default()
            },
            NodeView {
                name: upper.clone(),
                ..NodeView::default()
            },
            NodeView {
                name: fqdn.clone(),
                ..NodeView::default()
            },
        ];
        for i in 0..GPUS {
            let uuid = format!("GPU-{n:04}-{i}");
            let pid = 100_000 + u32::try_from(n).unwrap() * 100 + i * 10;
            let job = (n as u64) * 10 + u64::from(i);
            let pod_uid = format!("pod-{n}-{i}");
            id += 1;
            let processes = vec![
                ProcessView {
                    pid,
                    claim: Some(ClaimId(id)),
                    used_memory: Some(Bytes(1 << 30)),
                    owner: Some(ProcessOwner::SlurmJob { job, step: None }),
                    name: None,
                },
                ProcessView {
                    pid: pid + 1,
                    claim: None,
                    used_memory: Some(Bytes(1 << 30)),
                    owner: Some(ProcessOwner::SlurmJob { job, step: None }),
                    name: None,
                },
                ProcessView {
                    pid: pid + 2,
                    claim: None,
                    used_memory: Some(Bytes(1 << 30)),
                    owner: Some(ProcessOwner::pod(&pod_uid, None, None)),
                    name: None,
                },
                ProcessView {
                    pid: pid + 3,
                    claim: None,
                    used_memory: Some(Bytes(1 << 30)),
                    owner: None,
                    name: None,
                },
            ];
            let dev = |uuid: Option<&str>| DeviceView {
                index: i,
                model: "H100".into(),
                uuid: uuid.map(str::to_string),
                memory_capacity: Some(Bytes(80 << 30)),
                ..DeviceView::default()
            };
            let mut d = dev(Some(&uuid));
            d.telemetry = Some(telemetry(processes));
            nodes[0].devices.push(d);
            nodes[1].devices.push(dev(None));
            nodes[2].devices.push(dev(Some(&uuid)));
            let mut d = dev(Some(&uuid));
            d.telemetry = Some(telemetry(Vec::new()));
            nodes[3].devices.push(d);
            serve.claims.push(claim(id, &fqdn, i, 2_000, &[]));
            serve
                .claims
                .push(claim(id + 1_000_000, &fqdn, i, 2_000, &[]));
            slurm.claims.push(claim(
                job,
                &short,
                i,
                10_000,
                &[("slurm.job_id", job.to_string())],
            ));
            k8s.claims.push(claim(
                id + 2_000_000,
                &upper,
                i,
                5_000,
                &[
                    ("k8s.uid", pod_uid),
                    ("k8s.pod", format!("p{id}")),
                    ("k8s.namespace", "ml".into()),
                ],
            ));
        }
        let [a, b, c, d] = nodes;
        serve.nodes.push(a);
        slurm.nodes.push(b);
        k8s.nodes.push(c);
        dcgm.nodes.push(d);
    }
    vec![serve, slurm, k8s, dcgm]
}

/// The same source a moment later: every GPU's telemetry sampled again (a new time and
/// utilization), and its last claim gone.
fn changed(s: &Snapshot) -> Snapshot {
    let mut s = resampled(s);
    s.claims.pop();
    s
}

/// The same source with every GPU's telemetry sampled again and nothing else new (what
/// the console takes in at once, `State::refresh_physical`).
fn resampled(s: &Snapshot) -> Snapshot {
    let mut s = s.clone();
    for d in s.nodes.iter_mut().flat_map(|n| n.devices.iter_mut()) {
        if let Some(t) = &mut d.telemetry {
            t.sampled_at = Timestamp(2);
            t.utilization_gpu = Some(40);
        }
    }
    s
}

// Every figure of the bench in one place, each change beside the others: read top to bottom.
#[allow(clippy::too_many_lines)]
fn bench(c: &mut Criterion) {
    let snaps = sources();
    let names = ["serve", "batch", "k8s", "dcgm"];
    let engines = [
        GpuEngine::Gpuboard,
        GpuEngine::Slurm,
        GpuEngine::Kubernetes,
        GpuEngine::Telemetry,
    ];
    let views: Vec<SourceView<'_>> = snaps
        .iter()
        .zip(names.into_iter().zip(engines))
        .enumerate()
        .map(|(i, (s, (name, engine)))| SourceView {
            source: i,
            name,
            engine,
            snapshot: s,
        })
        .collect();
    let aliases = Aliases::default();
    let fleet = join(&views, &aliases);
    assert_eq!(fleet.gpus.len(), NODES * GPUS as usize);
    assert!(fleet.warnings.is_empty());
    // Each source as it is and as it is a moment later; a change swaps one of them.
    let versions: Vec<[Arc<Snapshot>; 2]> = snaps
        .iter()
        .map(|s| [Arc::new(s.clone()), Arc::new(changed(s))])
        .collect();
    let mut shared: Vec<SharedSource> = views
        .iter()
        .zip(&versions)
        .map(|(v, [now, _])| SharedSource {
            source: v.source,
            name: v.name.to_string(),
            engine: v.engine,
            snapshot: Arc::clone(now),
        })
        .collect();
    let mut joiner = Joiner::default();
    assert_eq!(joiner.join(&shared, &aliases), fleet);
    let mut turn = 0usize;
    let mut change = |shared: &mut [SharedSource]| {
        let i = turn % shared.len();
        let next = (turn / shared.len() + 1) % 2;
        shared[i].snapshot = Arc::clone(&versions[i][next]);
        turn += 1;
    };
    let mut g = c.benchmark_group("physical join");
    g.sample_size(20).measurement_time(Duration::from_secs(10));
    // Each iteration's result is held until the next join is done, as the console holds
    // its last: what a join changes in place it copies first, and the last result is
    // dropped inside the iteration.
    let mut held: Option<PhysicalFleet> = None;
    g.bench_function("8000 GPUs, 4 sources, one source changed", |b| {
        b.iter(|| {
            change(&mut shared);
            held.replace(joiner.join(&shared, &aliases))
        });
    });
    let mut idle = IdleClock::default();
    g.bench_function(
        "8000 GPUs, 4 sources, one source changed, with the idle flags",
        |b| {
            b.iter(|| {
                change(&mut shared);
                let mut f = joiner.join(&shared, &aliases);
                idle.observe(&mut f, Timestamp(1));
                held.replace(f)
            });
        },
    );
    // Each source on its own: a change of the endpoint's telemetry touches every GPU, a
    // scheduler's claim one.
    for (i, name) in names.iter().enumerate() {
        let mut flip = 0usize;
        let mut idle = IdleClock::default();
        g.bench_function(
            format!("8000 GPUs, 4 sources, {name} changed, with the idle flags"),
            |b| {
                b.iter(|| {
                    flip += 1;
                    shared[i].snapshot = Arc::clone(&versions[i][flip % 2]);
                    let mut f = joiner.join(&shared, &aliases);
                    idle.observe(&mut f, Timestamp(1));
                    held.replace(f)
                });
            },
        );
    }
    // The endpoint's readings alone, no claim gone or back.
    let readings = [Arc::clone(&versions[0][0]), Arc::new(resampled(&snaps[0]))];
    let mut flip = 0usize;
    let mut idle = IdleClock::default();
    g.bench_function(
        "8000 GPUs, 4 sources, serve's readings alone changed, with the idle flags",
        |b| {
            b.iter(|| {
                flip += 1;
                shared[0].snapshot = Arc::clone(&readings[flip % 2]);
                let mut f = joiner.join(&shared, &aliases);
                idle.observe(&mut f, Timestamp(1));
                held.replace(f)
            });
        },
    );
    g.bench_function("8000 GPUs, 4 sources, cold", |b| {
        b.iter(|| join(&views, &aliases));
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
