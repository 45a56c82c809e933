//! One work-fetch decision at scale, and the division (targets) it relies on.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use gpuboard::clock::Timestamp;
use gpuboard::fairshare::{
    Capacity, Demand, Ledger, LedgerConfig, PendingClaim, Placed, ProjectName, ResourceDemand,
    ResourceId, ResourceType, Share, Speed, TimestampExt, targets,
};
use gpuboard::ids::ClaimId;
use gpuboard::units::Units;
use rand::SeedableRng;
use rand::rngs::StdRng;

const RESOURCES: usize = 16;
const INSTANCES: u32 = 64;

fn resource(r: usize) -> ResourceId {
    if r == 0 {
        ResourceId::cpu()
    } else {
        ResourceId::gpu(&format!("Model {r}")).unwrap()
    }
}

/// `projects` projects with 50 pending claims each, each claim runnable on one or two
/// of 16 resource types; about 3/4 of every type held by running claims.
fn ledger(projects: usize) -> Ledger {
    let mut ledger = Ledger::new(LedgerConfig::default()).unwrap();
    let t0 = Timestamp(0);
    for r in 0..RESOURCES {
        ledger.set_resource(t0, ResourceType::new(resource(r), INSTANCES));
    }
    let mut id = 0;
    for p in 0..projects {
        let name = ProjectName::new(&format!("project-{p:05}")).unwrap();
        ledger.set_share(t0, &name, Share::new(50 + (p as u32 * 37) % 200).unwrap());
        for k in 0..50 {
            let first = (p + k) % RESOURCES;
            let mut demand = vec![ResourceDemand {
                resource: resource(first),
                units: Units(2_500 * (1 + (k % 4) as u32)),
            }];
            if k % 3 == 0 {
                demand.push(ResourceDemand {
                    resource: resource((first + 5) % RESOURCES),
                    units: Units(5_000),
                });
            }
            let claim = PendingClaim {
                id: ClaimId(id),
                project: name.clone(),
                demand,
                expected_duration: Some(Duration::from_secs(600 + 60 * k as u64)),
                submitted: t0,
                form: None,
            };
            ledger.submit(t0, claim).unwrap();
            id += 1;
        }
    }
    // Running claims: 48 of 64 instances of each type, spread over the projects.
    for r in 0..RESOURCES {
        for i in 0..48 {
            let p = (r * 48 + i) % projects;
            let placed = Placed {
                id: ClaimId(id),
                project: ProjectName::new(&format!("project-{p:05}")).unwrap(),
                resource: resource(r),
                units: Units::FULL,
                expected_duration: Some(Duration::from_secs(300 + 97 * i as u64)),
            };
            ledger.placed(t0, placed).unwrap();
            id += 1;
        }
    }
    ledger.tick(Timestamp::from_secs(60));
    ledger
}

/// `cargo bench` passes `--bench`; `cargo test` runs each bench once as a smoke test, at
/// the smallest size only, so the test suite stays quick.
fn project_counts() -> Vec<usize> {
    if std::env::args().any(|a| a == "--bench") {
        vec![100, 1_000]
    } else {
        vec![100]
    }
}

fn work_fetch(c: &mut Criterion) {
    let now = Timestamp::from_secs(60);
    let mut group = c.benchmark_group("work_fetch");
    group.sample_size(30);
    for projects in project_counts() {
        let mut ledger = ledger(projects);
        let mut rng = StdRng::seed_from_u64(1);
        // Typical: the first project asked has a claim that fits.
        let mut fits = |_: &PendingClaim, _: &ResourceId, units: Units| units.0 <= 10_000;
        assert!(ledger.work_fetch(now, &mut fits, &mut rng).is_some());
        group.bench_function(
            BenchmarkId::new(
                "first_fits",
                format!("{projects}p_{}k_pending", projects * 50 / 1000),
            ),
            |b| b.iter(|| black_box(ledger.work_fetch(now, &mut fits, &mut rng))),
        );
        // Harder: claims of the first 10 % of projects never fit, so the decision passes
        // over (and backs off) those ranked above the one it picks.
        let blocked = projects / 10;
        let mut some = move |c: &PendingClaim, _: &ResourceId, _: Units| {
            c.project.as_str()[8..]
                .parse::<usize>()
                .is_ok_and(|p| p >= blocked)
        };
        group.bench_function(
            BenchmarkId::new(
                "tenth_blocked",
                format!("{projects}p_{}k_pending", projects * 50 / 1000),
            ),
            |b| {
                b.iter_batched(
                    || (ledger.clone(), StdRng::seed_from_u64(2)),
                    |(mut l, mut rng)| {
                        let fetch = black_box(l.work_fetch(now, &mut some, &mut rng));
                        // Returned so that dropping the copy is not timed.
                        (l, fetch)
                    },
                    BatchSize::LargeInput,
                );
            },
        );
    }
    group.finish();
}

fn division(c: &mut Criterion) {
    let mut group = c.benchmark_group("targets");
    group.sample_size(10);
    for projects in project_counts() {
        let resources: Vec<Capacity> = (0..RESOURCES)
            .map(|r| Capacity {
                instances: f64::from(INSTANCES),
                speed: Speed::new(50.0 * (1 + r) as f64).unwrap(),
            })
            .collect();
        let demands: Vec<Demand> = (0..projects)
            .map(|p| Demand {
                share: Share::new(50 + (p as u32 * 37) % 200).unwrap(),
                caps: (0..RESOURCES)
                    .map(|r| {
                        if (p + r) % 5 < 2 {
                            1.0 + (p % 7) as f64
                        } else {
                            0.0
                        }
                    })
                    .collect(),
            })
            .collect();
        group.bench_function(
            BenchmarkId::from_parameter(format!("{projects}p_x_{RESOURCES}r")),
            |b| b.iter(|| black_box(targets(&resources, &demands))),
        );
    }
    group.finish();
}

criterion_group!(benches, work_fetch, division);
criterion_main!(benches);
