//! Placement tests: fits per device, binpack and spread, reasons, moves, restores.

use super::*;
use crate::ids::ClaimId;
use crate::request::{ClaimRequest, Milli};
use crate::units::{Bytes, Slots, Units};
use serde_json::json;

fn gpu(index: u32, model: &str, memory: Bytes) -> DeviceSpec {
    DeviceSpec {
        index,
        model: model.to_string(),
        uuid: None,
        memory: Some(memory),
        link_group: None,
    }
}

fn node(name: &str, devices: Vec<DeviceSpec>) -> NodeSpec {
    NodeSpec {
        name: name.to_string(),
        devices,
        cpus: None,
    }
}

fn req(v: serde_json::Value) -> ClaimRequest {
    ClaimRequest::from_json(&v).unwrap()
}

fn fleet(policy: Policy, nodes: Vec<NodeSpec>) -> Fleet {
    let mut f = Fleet::new(policy);
    for n in nodes {
        f.add_node(n).unwrap();
    }
    f
}

/// A binpack fleet of one node `a` with `count` 40 GiB A100s.
fn a100s(count: u32) -> Fleet {
    let gpus = (0..count).map(|i| gpu(i, "A100", Bytes::gib(40))).collect();
    fleet(Policy::Binpack, vec![node("a", gpus)])
}

#[test]
fn heterogeneous_nodes_convert_on_their_own_memory() {
    let mut f = fleet(
        Policy::Binpack,
        vec![
            node(
                "a100-40",
                vec![gpu(0, "NVIDIA A100-SXM4-40GB", Bytes::gib(40))],
            ),
            node(
                "a100-80",
                vec![gpu(0, "NVIDIA A100-SXM4-80GB", Bytes::gib(80))],
            ),
        ],
    );
    let r = req(json!({"gpu_memory": "20Gi", "node": "a100-40"}));
    let a = f.claim(ClaimId(1), &r).unwrap();
    assert_eq!(a.shares[0].compute, Units(5000));
    let r = req(json!({"gpu_memory": "20Gi", "node": "a100-80"}));
    let a = f.claim(ClaimId(2), &r).unwrap();
    assert_eq!(a.shares[0].compute, Units(2500));
    assert_eq!(a.shares[0].memory, Bytes::gib(20));
    f.check_invariants().unwrap();
}

#[test]
fn infeasible_accelerator_request_says_why() {
    let mut f = fleet(
        Policy::Binpack,
        vec![
            node("g5", vec![gpu(0, "NVIDIA A10G", Bytes::gib(24))]),
            node("p4", vec![gpu(0, "NVIDIA A100-SXM4-80GB", Bytes::gib(80))]),
        ],
    );
    let r = req(json!({"gpu_memory": "30Gi", "accelerator_type": "NVIDIA_TESLA_A10G"}));
    let e = f.claim(ClaimId(1), &r).unwrap_err();
    assert!(e.infeasible);
    let text = e.to_string();
    assert!(
        text.contains("node g5: 1/1 GPUs too small (has 24 GiB, needs 30 GiB)"),
        "{text}"
    );
    assert!(
        text.contains("node p4: 1/1 GPUs other accelerator type"),
        "{text}"
    );
    assert_eq!(f.claim_count(), 0);
}

#[test]
fn the_real_blocker_is_listed_before_nodes_of_another_type() {
    let mut f = fleet(
        Policy::Binpack,
        vec![
            node("a1", vec![gpu(0, "NVIDIA A100-SXM4-80GB", Bytes::gib(80))]),
            node("b1", vec![gpu(0, "NVIDIA H100 80GB HBM3", Bytes::gib(80))]),
            node("g5", vec![gpu(0, "NVIDIA A10G", Bytes::gib(24))]),
        ],
    );
    let r = req(json!({"gpu_memory": "30Gi", "accelerator_type": "A10G"}));
    let lines = f.claim(ClaimId(1), &r).unwrap_err().lines();
    assert!(
        lines[0].starts_with("node g5: 1/1 GPUs too small"),
        "{lines:?}"
    );
    assert!(
        lines[1..]
            .iter()
            .all(|l| l.contains("other accelerator type")),
        "{lines:?}"
    );
}

#[test]
fn node_sums_never_decide_a_fit() {
    let mut f = a100s(2);
    f.claim(
        ClaimId(1),
        &req(json!({"gpu_memory": "30Gi", "devices": [0]})),
    )
    .unwrap();
    f.claim(
        ClaimId(2),
        &req(json!({"gpu_memory": "30Gi", "devices": [1]})),
    )
    .unwrap();
    let e = f
        .claim(ClaimId(3), &req(json!({"gpu_memory": "15Gi"})))
        .unwrap_err();
    assert!(!e.infeasible);
    assert_eq!(
        e.lines(),
        vec![
            "node a: 2/2 GPUs insufficient memory (largest free 10 GiB, needs 15 GiB)".to_string()
        ]
    );
}

#[test]
fn figures_that_read_alike_say_the_shortfall() {
    let mut f = fleet(
        Policy::Binpack,
        vec![node("a", vec![gpu(0, "A100", Bytes::gib(40))])],
    );
    f.claim(ClaimId(1), &req(json!({"gpu_memory": "10MB"})))
        .unwrap();
    let e = f
        .claim(ClaimId(2), &req(json!({"gpu_memory": "39.99GiB"})))
        .unwrap_err();
    assert_eq!(
        e.lines(),
        vec![
            "node a: 1/1 GPUs insufficient memory (largest free 40.0 GiB, needs 40.0 GiB, 4.1 MiB more)"
                .to_string()
        ]
    );
}

#[test]
fn reasons_aggregate_per_node_and_reason() {
    let mut f = fleet(
        Policy::Binpack,
        vec![node(
            "a",
            (0..4).map(|i| gpu(i, "A100", Bytes::gib(40))).collect(),
        )],
    );
    f.set_cordon("a", 3, true).unwrap();
    for (id, d) in [(1, 0), (2, 1), (3, 2)] {
        f.claim(
            ClaimId(id),
            &req(json!({"gpu_memory": "37Gi", "devices": [d]})),
        )
        .unwrap();
    }
    let e = f
        .claim(ClaimId(9), &req(json!({"gpu_memory": "20Gi"})))
        .unwrap_err();
    assert_eq!(
        e.lines(),
        vec![
            "node a: 3/4 GPUs insufficient memory (largest free 3 GiB, needs 20 GiB); 1/4 cordoned"
                .to_string()
        ]
    );
    assert!(e.summary().starts_with("does not fit now"));
}

#[test]
fn a_large_fleet_counts_reasons_across_it_and_shows_the_nodes_nearest_to_fitting() {
    // 20 nodes of 4 A100s: a small claim on devices 0 and 1 of each, and on device 2 of
    // n07; device 3 of n12 cordoned. Three whole GPUs on one node fit nowhere.
    let nodes = (0..20)
        .map(|n| {
            let gpus = (0..4).map(|i| gpu(i, "A100", Bytes::gib(40))).collect();
            node(&format!("n{n:02}"), gpus)
        })
        .collect();
    let mut f = fleet(Policy::Binpack, nodes);
    f.set_cordon("n12", 3, true).unwrap();
    let mut id = 0;
    for n in 0..20 {
        for d in [0, 1, 2] {
            if d == 2 && n != 7 {
                continue;
            }
            id += 1;
            let r = json!({"gpu_memory": "1Gi", "node": format!("n{n:02}"), "devices": [d]});
            f.claim(ClaimId(id), &req(r)).unwrap();
        }
    }
    let e = f
        .claim(ClaimId(99), &req(json!({"nvidia.com/gpu": 3})))
        .unwrap_err();
    assert!(!e.infeasible);
    assert_eq!(
        e.lines(),
        vec![
            "20 nodes, 80 GPUs: 41/80 GPUs insufficient memory (largest free 39 GiB, needs 40 GiB); \
             1/80 cordoned; 20/20 nodes: at most 2 of the 3 GPUs it needs fit"
                .to_string(),
            "node n00: 2/4 GPUs insufficient memory (largest free 39 GiB, needs 40 GiB); only 2 of \
             the 3 GPUs it needs fit"
                .to_string(),
            "node n01: 2/4 GPUs insufficient memory (largest free 39 GiB, needs 40 GiB); only 2 of \
             the 3 GPUs it needs fit"
                .to_string(),
            "node n02: 2/4 GPUs insufficient memory (largest free 39 GiB, needs 40 GiB); only 2 of \
             the 3 GPUs it needs fit"
                .to_string(),
            "(3 of 20 nodes shown, nearest to fitting first)".to_string(),
        ]
    );
    // n07 and n12 (one whole GPU free each) are not among the nearest, yet counted.
    let fleet_reasons = e.fleet.as_ref().unwrap();
    assert_eq!((fleet_reasons.nodes, fleet_reasons.devices), (20, 80));
    // At the limit, every node still has its own line.
    let small = fleet(
        Policy::Binpack,
        (0..NODES_LISTED)
            .map(|n| node(&format!("n{n}"), vec![gpu(0, "A100", Bytes::gib(40))]))
            .collect(),
    );
    let e = small.plan(&req(json!({"nvidia.com/gpu": 2}))).unwrap_err();
    assert!(e.fleet.is_none());
    assert_eq!(e.lines().len(), NODES_LISTED);
}

#[test]
fn koordinator_split_takes_two_devices_of_one_node() {
    let mut f = fleet(
        Policy::Binpack,
        vec![
            node("one", vec![gpu(0, "A100", Bytes::gib(16))]),
            node(
                "two",
                vec![
                    gpu(0, "A100", Bytes::gib(16)),
                    gpu(1, "A100", Bytes::gib(16)),
                ],
            ),
        ],
    );
    let a = f
        .claim(
            ClaimId(1),
            &req(json!({"gpu-memory": "4Gi", "gpu-core": 100, "gpu.shared": 2})),
        )
        .unwrap();
    assert_eq!(a.node, "two");
    assert_eq!(a.shares.len(), 2);
    for s in &a.shares {
        assert_eq!(
            (s.memory, s.compute, s.slots),
            (Bytes::gib(2), Units(5000), Slots(1))
        );
    }
    let e = f
        .claim(
            ClaimId(2),
            &req(json!({"gpu-memory": "4Gi", "gpu.shared": 2, "node": "one"})),
        )
        .unwrap_err();
    assert!(e.infeasible, "{e}");
}

#[test]
fn binpack_fills_the_fullest_and_spread_the_emptiest() {
    for (policy, want) in [(Policy::Binpack, 1), (Policy::Spread, 0)] {
        let mut f = fleet(
            policy,
            vec![node(
                "a",
                vec![
                    gpu(0, "A100", Bytes::gib(40)),
                    gpu(1, "A100", Bytes::gib(40)),
                ],
            )],
        );
        f.claim(ClaimId(1), &req(json!({"num_gpus": 0.25, "devices": [1]})))
            .unwrap();
        let a = f
            .claim(ClaimId(2), &req(json!({"num_gpus": 0.25})))
            .unwrap();
        assert_eq!(a.shares[0].device, want, "{policy:?}");
    }
}

#[test]
fn binpack_prefers_the_smaller_gpu_that_fits() {
    let mut f = fleet(
        Policy::Binpack,
        vec![
            node("big", vec![gpu(0, "H100", Bytes::gib(80))]),
            node("small", vec![gpu(0, "A100", Bytes::gib(40))]),
        ],
    );
    assert_eq!(
        f.claim(ClaimId(1), &req(json!({"gpu_memory": "20Gi"})))
            .unwrap()
            .node,
        "small"
    );
}

#[test]
fn exclusive_claims_need_an_empty_device_and_take_all_slots() {
    let mut f = a100s(2);
    f.claim(
        ClaimId(1),
        &req(json!({"num_gpus": 0.0001, "devices": [0]})),
    )
    .unwrap();
    let a = f
        .claim(ClaimId(2), &req(json!({"nvidia.com/gpu": 1})))
        .unwrap();
    assert_eq!(a.shares[0].device, 1);
    assert_eq!(a.shares[0].slots, Slots::FULL);
    let e = f
        .claim(ClaimId(3), &req(json!({"num_gpus": 1})))
        .unwrap_err();
    assert!(!e.infeasible);
    f.release(ClaimId(1));
    assert_eq!(
        f.claim(ClaimId(3), &req(json!({"num_gpus": 1})))
            .unwrap()
            .shares[0]
            .device,
        0
    );
}

#[test]
fn slots_cap_sharers_at_one_hundred() {
    let mut f = a100s(1);
    for id in 0..100 {
        f.claim(
            ClaimId(id),
            &req(json!({"gpu-memory": "1Mi", "gpu.shared": 1})),
        )
        .unwrap();
    }
    let e = f
        .claim(
            ClaimId(100),
            &req(json!({"gpu-memory": "1Mi", "gpu.shared": 1})),
        )
        .unwrap_err();
    assert_eq!(e.lines(), vec!["node a: 1/1 GPUs no free slot".to_string()]);
}

#[test]
fn compute_is_a_dimension_of_its_own() {
    let mut f = a100s(1);
    f.claim(
        ClaimId(1),
        &req(json!({"gpu-memory": "1Gi", "gpu-core": 80, "gpu.shared": 1})),
    )
    .unwrap();
    let e = f
        .claim(
            ClaimId(2),
            &req(json!({"gpu-memory": "1Gi", "gpu-core": 30, "gpu.shared": 1})),
        )
        .unwrap_err();
    assert_eq!(
        e.lines(),
        vec![
            "node a: 1/1 GPUs insufficient compute (largest free 0.2 GPU, needs 0.3 GPU)"
                .to_string()
        ]
    );
}

#[test]
fn move_is_atomic_and_keeps_the_id() {
    let mut f = a100s(2);
    f.claim(
        ClaimId(7),
        &req(json!({"gpu_memory": "30Gi", "devices": [0]})),
    )
    .unwrap();
    f.claim(
        ClaimId(8),
        &req(json!({"gpu_memory": "20Gi", "devices": [1]})),
    )
    .unwrap();
    let target = MoveTarget {
        node: None,
        devices: Some(vec![1]),
    };
    let before = f.allocation(ClaimId(7)).cloned();
    assert!(matches!(
        f.move_claim(ClaimId(7), &target),
        Err(MoveError::NoFit(_))
    ));
    assert_eq!(
        f.allocation(ClaimId(7)).cloned(),
        before,
        "a failed move leaves the claim in place"
    );
    f.check_invariants().unwrap();
    f.release(ClaimId(8));
    let a = f.move_claim(ClaimId(7), &target).unwrap();
    assert_eq!(a.shares[0].device, 1);
    assert_eq!(f.node("a").unwrap().devices[0].memory_allocated, Bytes(0));
    assert_eq!(f.allocation(ClaimId(7)).unwrap().shares[0].device, 1);
    assert!(matches!(
        f.move_claim(ClaimId(99), &target),
        Err(MoveError::UnknownClaim(ClaimId(99)))
    ));
    f.check_invariants().unwrap();
}

#[test]
fn cordoned_unhealthy_and_unknown_devices_take_nothing_new() {
    let mut f = fleet(
        Policy::Binpack,
        vec![node(
            "a",
            vec![
                gpu(0, "A100", Bytes::gib(40)),
                gpu(1, "A100", Bytes::gib(40)),
                DeviceSpec {
                    memory: None,
                    ..gpu(2, "A100", Bytes(0))
                },
            ],
        )],
    );
    f.set_cordon("a", 0, true).unwrap();
    f.set_health("a", 1, Health::Unhealthy("XID 79".into()))
        .unwrap();
    let e = f
        .claim(ClaimId(1), &req(json!({"num_gpus": 0.5})))
        .unwrap_err();
    assert!(!e.infeasible, "cordons and health can change");
    assert_eq!(
        e.lines(),
        vec!["node a: 1/3 GPUs cordoned; 1/3 unhealthy; 1/3 memory unknown".to_string()]
    );
    f.set_cordon("a", 0, false).unwrap();
    assert_eq!(
        f.claim(ClaimId(1), &req(json!({"num_gpus": 0.5})))
            .unwrap()
            .shares[0]
            .device,
        0
    );
    assert!(f.set_cordon("a", 9, true).is_err());
    assert!(f.set_cordon("b", 0, true).is_err());
}

#[test]
fn a_zero_memory_device_is_no_reason_to_wait() {
    let mut f = fleet(
        Policy::Binpack,
        vec![node(
            "a",
            vec![DeviceSpec {
                memory: Some(Bytes(0)),
                ..gpu(0, "A100", Bytes(0))
            }],
        )],
    );
    let e = f
        .claim(ClaimId(1), &req(json!({"num_gpus": 0.0001})))
        .unwrap_err();
    assert!(e.infeasible, "{e}");
    assert_eq!(
        e.lines(),
        vec!["node a: 1/1 GPUs memory unknown".to_string()]
    );
}

#[test]
fn a_failed_move_keeps_holders_in_placement_order() {
    let mut f = a100s(1);
    for id in 1..=3 {
        f.claim(ClaimId(id), &req(json!({"num_gpus": 0.25})))
            .unwrap();
    }
    let before: Vec<_> = f.nodes().iter().cloned().collect();
    let target = MoveTarget {
        node: Some("nowhere".into()),
        devices: None,
    };
    assert!(matches!(
        f.move_claim(ClaimId(1), &target),
        Err(MoveError::NoFit(_))
    ));
    assert!(f.nodes().iter().eq(before.iter()));
    assert_eq!(
        f.nodes()[0].devices[0].holders,
        vec![ClaimId(1), ClaimId(2), ClaimId(3)]
    );
}

#[test]
fn linked_devices_are_preferred_for_multi_device_claims() {
    let linked = |i, g| DeviceSpec {
        link_group: Some(g),
        ..gpu(i, "A100", Bytes::gib(40))
    };
    let mut f = fleet(
        Policy::Binpack,
        vec![node(
            "a",
            vec![linked(0, 0), linked(1, 1), linked(2, 1), linked(3, 0)],
        )],
    );
    f.claim(ClaimId(1), &req(json!({"num_gpus": 0.5, "devices": [0]})))
        .unwrap();
    let a = f
        .claim(ClaimId(2), &req(json!({"nvidia.com/gpu": 2})))
        .unwrap();
    assert_eq!(a.visible_devices(), "1,2");
}

#[test]
fn cpu_claims_are_accounted_per_node() {
    let mut f = Fleet::new(Policy::Binpack);
    f.add_node(NodeSpec {
        cpus: Some(Milli(4000)),
        ..node("cpu", vec![])
    })
    .unwrap();
    f.claim(ClaimId(1), &req(json!({"cpus": 3}))).unwrap();
    let e = f.claim(ClaimId(2), &req(json!({"cpus": 2}))).unwrap_err();
    assert_eq!(
        e.lines(),
        vec!["node cpu: insufficient CPU (largest free 1, needs 2)".to_string()]
    );
    assert!(f.claim(ClaimId(3), &req(json!({"cpus": "500m"}))).is_ok());
    let e = f.claim(ClaimId(4), &req(json!({"cpus": 8}))).unwrap_err();
    assert!(e.infeasible);
}

#[test]
fn restore_refuses_over_commitment() {
    let mut f = a100s(1);
    let r = req(json!({"gpu_memory": "30Gi"}));
    let a = f.plan(&r).unwrap();
    f.restore(ClaimId(1), &r, &a).unwrap();
    assert!(matches!(
        f.restore(ClaimId(1), &r, &a),
        Err(FleetError::DuplicateClaim(ClaimId(1)))
    ));
    assert!(matches!(
        f.restore(ClaimId(2), &r, &a),
        Err(FleetError::DoesNotFit { .. })
    ));
    f.check_invariants().unwrap();
}

#[test]
fn duplicate_nodes_and_devices_are_refused() {
    let mut f = fleet(Policy::Binpack, vec![node("a", vec![])]);
    assert!(matches!(
        f.add_node(node("a", vec![])),
        Err(FleetError::DuplicateNode(_))
    ));
    let twice = node(
        "b",
        vec![gpu(0, "A100", Bytes::gib(1)), gpu(0, "A100", Bytes::gib(1))],
    );
    assert!(matches!(
        f.add_node(twice),
        Err(FleetError::DuplicateDevice { .. })
    ));
}

#[test]
fn accelerator_type_matches_each_device_on_model_and_memory_size() {
    // One mixed node: a 40 GB and an 80 GB A100, both empty.
    let mixed = || {
        fleet(
            Policy::Binpack,
            vec![node(
                "mixed",
                vec![
                    gpu(0, "NVIDIA A100-SXM4-40GB", Bytes::gib(40)),
                    gpu(1, "NVIDIA A100-SXM4-80GB", Bytes::gib(80)),
                ],
            )],
        )
    };
    // (accelerator_type, form, the only device it may land on)
    let cases = [
        ("NVIDIA A100-SXM4-80GB", json!({"gpu_memory": "10Gi"}), 1),
        ("A100-80G", json!({"gpu_memory": "10Gi"}), 1),
        ("NVIDIA A100-SXM4-40GB", json!({"gpu_memory": "10Gi"}), 0),
        ("A100-40GB", json!({"num_gpus": 0.5}), 0),
        ("A100-80GB", json!({"nvidia.com/gpu": 1}), 1),
        ("NVIDIA A100-SXM4-40GB", json!({"nvidia.com/gpu": 1}), 0),
    ];
    for (accel, mut form, want) in cases {
        form["accelerator_type"] = json!(accel);
        // Binpack prefers the smaller card and spread the emptier: either way only the
        // right size may take it.
        for policy in [Policy::Binpack, Policy::Spread] {
            let mut f = mixed();
            f.policy = policy;
            let a = f.claim(ClaimId(1), &req(form.clone())).unwrap();
            let got: Vec<u32> = a.shares.iter().map(|s| s.device).collect();
            assert_eq!(got, vec![want], "{accel} {form} {policy:?}");
        }
    }
    // Two 80 GB cards wanted where one exists: never filled with the 40 GB card.
    let mut f = mixed();
    let r = req(json!({"nvidia.com/gpu": 2, "accelerator_type": "A100-80GB"}));
    let e = f.claim(ClaimId(2), &r).unwrap_err();
    assert!(e.to_string().contains("other accelerator type"), "{e}");
    // Without a size, the family matches both.
    let mut f = mixed();
    let r = req(json!({"nvidia.com/gpu": 2, "accelerator_type": "NVIDIA_TESLA_A100"}));
    assert_eq!(f.claim(ClaimId(3), &r).unwrap().shares.len(), 2);
}

#[test]
fn more_gpus_than_a_node_has_names_the_device_count_not_memory() {
    let mut f = a100s(8);
    f.claim(ClaimId(1), &req(json!({"gpu_memory": "30Gi"})))
        .unwrap();
    let no = f
        .claim(ClaimId(2), &req(json!({"num_gpus": 9})))
        .unwrap_err();
    assert!(no.infeasible);
    let s = no.summary();
    assert!(
        s.contains("it has 8 GPUs, the request needs 9 on one node"),
        "{s}"
    );
    assert!(!s.contains("memory"), "{s}");
}
