//! The indexed searches against the plain scans they replace: on random fleets (mixed
//! models, link groups, cordons, CPU, busy devices), the same choice every time.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::fleet::Demand;
use super::*;
use crate::ids::ClaimId;
use crate::request::ClaimRequest;
use crate::units::Bytes;

const MODELS: [(&str, u64); 3] = [
    ("NVIDIA A100-SXM4-40GB", 40),
    ("NVIDIA A100-SXM4-80GB", 80),
    ("NVIDIA A10G", 24),
];

/// A fixed-seed xorshift: proptest picks the seed, the seed picks the fleet.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A fleet of up to 12 nodes of up to 8 devices, some nodes of mixed models, some
/// devices cordoned or unhealthy, filled with claims of every form.
fn random_fleet(rng: &mut Rng, policy: Policy) -> Fleet {
    let mut fleet = Fleet::new(policy);
    let nodes = 1 + rng.below(12);
    for n in 0..nodes {
        let mixed = rng.below(4) == 0;
        let base = rng.below(3) as usize;
        let devices = (0..=rng.below(8))
            .map(|i| {
                let m = if mixed { rng.below(3) as usize } else { base };
                DeviceSpec {
                    index: i as u32,
                    model: MODELS[m].0.to_string(),
                    uuid: None,
                    memory: Some(Bytes::gib(MODELS[m].1)),
                    link_group: match rng.below(3) {
                        0 => None,
                        g => Some(g as u32),
                    },
                }
            })
            .collect();
        let cpus = (rng.below(3) == 0).then(|| crate::request::Milli(1000 * (1 + rng.below(8))));
        fleet
            .add_node(NodeSpec {
                name: format!("n{n}"),
                devices,
                cpus,
            })
            .unwrap();
    }
    for n in 0..nodes {
        for d in 0..8 {
            match rng.below(12) {
                0 => drop(fleet.set_cordon(&format!("n{n}"), d, true)),
                1 => drop(fleet.set_health(&format!("n{n}"), d, Health::Lost)),
                _ => {}
            }
        }
    }
    for id in 0..rng.below(60) {
        if let Ok(r) = ClaimRequest::from_json(&random_request(rng, true)) {
            let _ = fleet.claim(ClaimId(id + 1), &r);
        }
    }
    // Among the invariants: every device's cell is what its figures and state say.
    fleet.check_invariants().unwrap();
    fleet
}

/// A request of any form; `single` allows one-device forms too.
fn random_request(rng: &mut Rng, single: bool) -> Value {
    let mut v = match rng.below(if single { 7 } else { 4 }) {
        0 => {
            let shared = 2 + rng.below(3);
            json!({"gpu-memory": format!("{}Gi", shared * (1 + rng.below(10))), "gpu.shared": shared})
        }
        1 => {
            json!({"gpu-memory-ratio": 5 + rng.below(60), "gpu-core": 10 * rng.below(8), "gpu.shared": 2 + rng.below(2)})
        }
        2 => json!({"nvidia.com/gpu": 2 + rng.below(4)}),
        3 => json!({"num_gpus": 2 + rng.below(2)}),
        4 => json!({"num_gpus": format!("0.{:02}", 5 + rng.below(90))}),
        5 => json!({"gpu_memory": format!("{}Gi", 1 + rng.below(40))}),
        _ => json!({"nvidia.com/gpu": 1}),
    };
    if rng.below(5) == 0 {
        v["accelerator_type"] =
            json!(["A100", "NVIDIA_TESLA_A10G", "A100-80G"][rng.below(3) as usize]);
    }
    if rng.below(5) == 0 {
        v["cpus"] = json!(1 + rng.below(4));
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn the_indexed_multi_device_search_chooses_what_the_scan_chooses(seed in 1u64..) {
        let mut rng = Rng(seed);
        for policy in [Policy::Binpack, Policy::Spread] {
            let fleet = random_fleet(&mut rng, policy);
            for _ in 0..20 {
                let v = random_request(&mut rng, false);
                let Ok(r) = ClaimRequest::from_json(&v) else { continue };
                let model = (rng.below(6) == 0).then(|| MODELS[rng.below(3) as usize].0);
                let demand = Demand::on(&r, model);
                let form = r.gpu.unwrap();
                let indexed = fleet.find_multi(&demand, &form);
                let scanned = fleet.find_scan(&demand, &form, None, None);
                prop_assert_eq!(&indexed, &scanned, "{:?} {} model {:?}", policy, v, model);
                // The counts of wholly free devices answer as the scan does, where they can.
                if let Some(fits) = fleet.wholes_fit(&demand, &form) {
                    prop_assert_eq!(fits, scanned.is_some(), "{:?} {} model {:?}", policy, v, model);
                }
                prop_assert_eq!(
                    fleet.fits_on(&r, model),
                    scanned.is_some(),
                    "{:?} {} model {:?}", policy, v, model
                );
                // Asking the cells early (a big fleet's walk with no fit yet) changes nothing.
                let walk_first = 1 + rng.below(12) as usize;
                let counted = fleet.find_multi_counting_after(&demand, &form, walk_first);
                prop_assert_eq!(&counted, &scanned, "{:?} {} after {}", policy, v, walk_first);
                // Counting the refusal on the way: the same choice when something fits.
                if let Some(plan) = &scanned {
                    let found = fleet.find_multi_or_refusal(&demand, &form, walk_first);
                    prop_assert_eq!(found.as_ref().ok(), Some(plan), "{} after {}", v, walk_first);
                }
            }
        }
    }
}

/// A node whose devices report no memory (or zero), which no request can use.
fn add_unknown_memory_node(fleet: &mut Fleet, rng: &mut Rng) {
    let devices = (0..=rng.below(4))
        .map(|i| DeviceSpec {
            index: i as u32,
            model: MODELS[rng.below(3) as usize].0.to_string(),
            uuid: None,
            memory: (rng.below(2) == 0).then_some(Bytes(0)),
            link_group: None,
        })
        .collect();
    fleet
        .add_node(NodeSpec {
            name: "unknown".to_string(),
            devices,
            cpus: None,
        })
        .unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn a_summarized_refusal_counts_what_the_full_walk_finds(seed in 1u64..) {
        let mut rng = Rng(seed);
        let mut fleet = random_fleet(&mut rng, Policy::Binpack);
        if rng.below(3) == 0 {
            add_unknown_memory_node(&mut fleet, &mut rng);
        }
        for _ in 0..30 {
            let mut v = random_request(&mut rng, true);
            if rng.below(4) == 0 {
                v = json!({"nvidia.com/gpu": 1 + rng.below(9)});
            }
            let Ok(r) = ClaimRequest::from_json(&v) else { continue };
            let Some(form) = r.gpu else { continue };
            let model = (rng.below(6) == 0).then(|| MODELS[rng.below(3) as usize].0);
            let demand = Demand::on(&r, model);
            if fleet.search(&demand, None, None).is_some() {
                continue;
            }
            let summarized = fleet.explain_summarized(&demand, &form);
            let walked = fleet.explain_walk(&demand, None, None).summarized(&demand);
            prop_assert_eq!(&summarized, &walked, "{} model {:?}", v, model);
            // A large fleet's multi-device walk counts the refusal itself when it asks
            // whether anything fits: the same refusal, whenever it asks.
            if form.device_count() > 1 {
                let walk_first = 1 + rng.below(12) as usize;
                let counted = fleet.find_multi_or_refusal(&demand, &form, walk_first);
                prop_assert_eq!(counted, Err(walked.clone()), "{} after {}", v, walk_first);
            }
            // The nodes shown are walked in full, as a small fleet's refusal shows them.
            prop_assert!(!summarized.nodes.is_empty());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn the_counts_of_wholly_free_devices_equal_a_recount_after_any_changes(seed in 1u64..) {
        let mut rng = Rng(seed);
        let mut fleet = random_fleet(&mut rng, Policy::Binpack);
        let mut next = 1_000;
        for _ in 0..60 {
            match rng.below(5) {
                0 | 1 => {
                    if let Ok(r) = ClaimRequest::from_json(&random_request(&mut rng, true)) {
                        next += 1;
                        let _ = fleet.claim(ClaimId(next), &r);
                    }
                }
                2 => {
                    let held: Vec<ClaimId> = fleet.allocations().map(|(id, _)| id).collect();
                    if !held.is_empty() {
                        fleet.release(held[rng.below(held.len() as u64) as usize]);
                    }
                }
                3 => {
                    let node = format!("n{}", rng.below(12));
                    let _ = fleet.set_cordon(&node, rng.below(8) as u32, rng.below(2) == 0);
                }
                _ => {
                    let held: Vec<ClaimId> = fleet.allocations().map(|(id, _)| id).collect();
                    if !held.is_empty() {
                        let id = held[rng.below(held.len() as u64) as usize];
                        let target = MoveTarget { node: Some(format!("n{}", rng.below(12))), devices: None };
                        let _ = fleet.move_claim(id, &target);
                    }
                }
            }
            prop_assert_eq!(fleet.wholes.trimmed(), fleet.wholes_recounted().trimmed());
            prop_assert_eq!(fleet.check_invariants(), Ok(()));
        }
    }
}
