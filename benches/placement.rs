//! One claim placement + release on a busy fleet of 8-GPU nodes of mixed models, at
//! 100, 1 000 and 4 000 nodes with 20 active claims per node (20 000 at 1 000 nodes).
//! Single-device requests (memory, fraction) take the indexed path; so does the 2-device
//! Koordinator request (the index walked with a bound); the no-fit request counts its
//! reasons across the fleet from the index (`placement::summary`).
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use gpuboard::ids::ClaimId;
use gpuboard::placement::{DeviceSpec, Fleet, NodeSpec, Policy};
use gpuboard::request::ClaimRequest;
use gpuboard::units::Bytes;
use serde_json::{Value, json};

const SIZES: [usize; 3] = [100, 1_000, 4_000];

/// `cargo bench` passes `--bench`; `cargo test` runs each bench once as a smoke test, at
/// the smallest size only, so the test suite stays quick.
fn sizes() -> &'static [usize] {
    if std::env::args().any(|a| a == "--bench") {
        &SIZES
    } else {
        &SIZES[..1]
    }
}
const CLAIMS_PER_NODE: usize = 20;
const MODELS: [(&str, u64); 4] = [
    ("NVIDIA A100-SXM4-40GB", 40),
    ("NVIDIA A100-SXM4-80GB", 80),
    ("NVIDIA H100 80GB HBM3", 80),
    ("NVIDIA A10G", 24),
];

/// A fixed-seed xorshift, so every run builds the same fleet.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn req(v: Value) -> ClaimRequest {
    ClaimRequest::from_json(&v).unwrap()
}

/// `nodes` nodes of 8 GPUs (each node one model, models mixed across the fleet) holding
/// `CLAIMS_PER_NODE x nodes` claims of mixed forms.
fn busy_fleet(nodes: usize) -> Fleet {
    let mut fleet = Fleet::new(Policy::Binpack);
    for n in 0..nodes {
        let (model, gib) = MODELS[n % MODELS.len()];
        fleet
            .add_node(NodeSpec {
                name: format!("node-{n:05}"),
                devices: (0..8)
                    .map(|i| DeviceSpec {
                        index: i,
                        model: model.to_string(),
                        uuid: None,
                        memory: Some(Bytes::gib(gib)),
                        link_group: Some(i / 4),
                    })
                    .collect(),
                cpus: None,
            })
            .unwrap();
    }
    // One small claim on every node first, so no node is wholly free.
    for n in 0..nodes {
        let r = req(json!({"num_gpus": 0.05, "node": format!("node-{n:05}")}));
        fleet.claim(ClaimId(n as u64), &r).unwrap();
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let want = nodes * CLAIMS_PER_NODE;
    let mut id = nodes as u64;
    let mut attempts = 0;
    while fleet.claim_count() < want && attempts < want * 2 {
        attempts += 1;
        let node = format!("node-{:05}", rng.below(nodes as u64));
        // Multi-device and whole-GPU claims are pinned to a node so that building the
        // fleet does not scan it thousands of times.
        let r = match rng.below(10) {
            0..=2 => json!({"num_gpus": format!("0.{:02}", 5 + rng.below(25))}),
            3..=5 => json!({"gpu_memory": format!("{}Gi", 1 + rng.below(8))}),
            6 => {
                json!({"gpu-memory-ratio": 10 + 5 * rng.below(4), "gpu-core": 20, "gpu.shared": 1})
            }
            7 => {
                json!({"gpu-memory": format!("{}Gi", 2 * (1 + rng.below(3))), "gpu.shared": 2, "node": node})
            }
            8 => json!({"koordinator.sh/gpu": 5 + rng.below(20)}),
            _ if rng.below(8) == 0 => json!({"nvidia.com/gpu": 1, "node": node}),
            _ => json!({"num_gpus": "0.1"}),
        };
        id += 1;
        let _ = fleet.claim(ClaimId(id), &req(r));
    }
    assert_eq!(fleet.claim_count(), want, "the fleet could not be filled");
    fleet
}

fn placement(c: &mut Criterion) {
    let cases: [(&str, Value); 4] = [
        ("memory_10GiB", json!({"gpu_memory": "10Gi"})),
        ("fraction_0.25", json!({"num_gpus": 0.25})),
        (
            "koordinator_2_devices",
            json!({"gpu-memory": "8Gi", "gpu-core": 60, "gpu.shared": 2}),
        ),
        // Every node holds a claim, so eight whole GPUs fit nowhere now (but could later).
        ("no_fit", json!({"nvidia.com/gpu": 8})),
    ];
    let mut group = c.benchmark_group("placement");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for &nodes in sizes() {
        let mut fleet = busy_fleet(nodes);
        for (name, v) in &cases {
            let r = req(v.clone());
            let planned = fleet.plan(&r);
            assert_eq!(
                planned.is_ok(),
                *name != "no_fit",
                "{name} at {nodes} nodes"
            );
            // What the operator reads for the refusal measured.
            if let Err(no) = planned {
                eprintln!("no_fit at {nodes} nodes: {no}");
            }
            group.bench_with_input(BenchmarkId::new(*name, nodes), &r, |b, r| {
                b.iter(|| {
                    let placed = fleet.claim(ClaimId(u64::MAX), black_box(r));
                    fleet.release(ClaimId(u64::MAX));
                    black_box(placed)
                });
            });
        }
        fleet.check_invariants().unwrap();
    }
    group.finish();
}

criterion_group!(benches, placement);
criterion_main!(benches);
