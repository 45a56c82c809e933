use proptest::prelude::*;

use super::*;
use crate::request::ClaimRequest;
use crate::snapshot::{ClaimState, ProcessView, apply, diff};

/// A node of `n` devices as an NVML round fills it: milliwatts and bytes as read.
fn busy_node(n: u32, step: u32) -> NodeView {
    NodeView {
        name: "gpu01".into(),
        cpus_milli: None,
        cpus_allocated_milli: 0,
        devices: (0..n)
            .map(|index| DeviceView {
                index,
                model: "NVIDIA H100".into(),
                memory_capacity: Some(Bytes::gib(80)),
                holders: vec![ClaimId(u64::from(index) + 1)],
                unclaimed_memory: Some(Bytes(0)),
                telemetry: Some(telemetry(index, step)),
                ..DeviceView::default()
            })
            .collect(),
    }
}

fn util(index: u32, step: u32) -> u32 {
    (index * 7 + step * 13) % 101
}

fn telemetry(index: u32, step: u32) -> DeviceTelemetry {
    let used = Bytes(30_000_000_000 + u64::from(step) * 123_456_789);
    DeviceTelemetry {
        sampled_at: Timestamp(1_000 * u64::from(step)),
        pci_bus_id: Some(format!("0000:0{index}:00.0")),
        memory_total: Some(Bytes::gib(80)),
        memory_used: Some(used),
        utilization_gpu: Some(util(index, step)),
        utilization_memory: Some(util(index, step) / 2),
        temperature_c: Some(40 + step % 20),
        power_mw: Some(300_000 + step * 1_337),
        power_limit_mw: Some(700_000),
        clock_sm_mhz: Some(1_500),
        clock_memory_mhz: Some(2_619),
        processes: vec![ProcessView {
            pid: 4_000 + index,
            name: Some("python".into()),
            used_memory: Some(used),
            claim: Some(ClaimId(u64::from(index) + 1)),
            owner: None,
        }],
        // One sample a second, the newest `step`'s; at most 5 kept.
        history_utilization: (step.saturating_sub(4)..=step)
            .map(|s| util(index, s))
            .collect(),
        history_memory_used: (step.saturating_sub(4)..=step)
            .map(|s| 30_000_000_000 + u64::from(s) * 123_456_789)
            .collect(),
        ..DeviceTelemetry::default()
    }
}

fn claim(id: u64, used: Option<Bytes>) -> ClaimView {
    ClaimView {
        id: ClaimId(id),
        name: None,
        state: ClaimState::Placed,
        project: "ml".into(),
        holder: None,
        form: "num_gpus=1".into(),
        request: ClaimRequest::memory(Bytes::gib(1), "ml"),
        node: Some("gpu01".into()),
        shares: Vec::new(),
        memory_reserved: Bytes::gib(80),
        compute_reserved: crate::units::Units(10_000),
        memory_used: used,
        over_limit: false,
        idle: false,
        created_at: Timestamp(1),
        lease_expires_at: None,
        pending_reasons: Vec::new(),
        infeasible: false,
    }
}

fn snapshot(step: u32) -> Snapshot {
    let node = busy_node(2, step);
    let claims = node
        .devices
        .iter()
        .map(|d| {
            let used = d.telemetry.as_ref().and_then(|t| t.memory_used);
            claim(u64::from(d.index) + 1, used)
        })
        .collect();
    Snapshot {
        revision: 7,
        taken_at: Timestamp(1_000 * u64::from(step)),
        nodes: vec![node],
        claims,
        ..Snapshot::default()
    }
}

fn over_the_wire(changes: &[SnapshotChange]) -> Vec<SnapshotChange> {
    let json = serde_json::to_string(changes).unwrap();
    serde_json::from_str(&json).unwrap()
}

/// `snap` as the screens show it: memory to the MiB, power to the watt, without the
/// memory sparkline (which a reader of figures keeps at its own pace).
fn as_shown(mut snap: Snapshot) -> Snapshot {
    let round = |b: &mut Option<Bytes>| *b = b.map(|b| Bytes::mib(mib(b)));
    for d in snap.nodes.iter_mut().flat_map(|n| n.devices.iter_mut()) {
        round(&mut d.unclaimed_memory);
        if let Some(t) = &mut d.telemetry {
            round(&mut t.memory_used);
            t.power_mw = t.power_mw.map(|mw| (mw + 500) / 1000 * 1000);
            t.processes
                .iter_mut()
                .for_each(|p| round(&mut p.used_memory));
            t.history_memory_used.clear();
        }
    }
    snap.claims
        .iter_mut()
        .for_each(|c| round(&mut c.memory_used));
    snap
}

#[test]
fn figures_alone_travel_as_one_change_of_figures() {
    let (old, new) = (snapshot(10), snapshot(15));
    let changes = diff_figures(&old, &new);
    assert!(
        matches!(changes.as_slice(), [SnapshotChange::Revision { .. }, SnapshotChange::Figures { at: None, nodes, claims }]
            if nodes.len() == 1 && nodes[0].devices.len() == 2 && claims.len() == 2),
        "{changes:?}"
    );
    let wire = serde_json::to_string(&changes).unwrap();
    let whole = serde_json::to_string(&diff(&old, &new)).unwrap();
    assert!(
        wire.len() * 3 < whole.len(),
        "{} vs {}",
        wire.len(),
        whole.len()
    );
    // Each device an array: index, figures, processes, unclaimed, samples, length.
    assert!(wire.contains(r#"["gpu01",[[0,"#), "{wire}");
    assert!(!wire.contains("history"), "{wire}");
}

#[test]
fn a_reader_of_figures_has_what_the_screens_show_of_the_endpoint() {
    let mut endpoint = snapshot(0);
    let mut reader = snapshot(0);
    for step in (1..=40).filter(|s| s % 3 == 0) {
        let next = snapshot(step);
        let changes = over_the_wire(&diff_figures(&endpoint, &next));
        // Figures alone: a reader told so skips comparing the snapshots, and is right to.
        assert!(
            changes.iter().all(|c| c.telemetry_alone(reader.revision)),
            "{changes:?}"
        );
        let before = reader.clone();
        apply(&mut reader, &changes);
        assert!(before.same_but_telemetry(&reader), "step {step}");
        endpoint = next;
        assert_eq!(
            as_shown(reader.clone()),
            as_shown(endpoint.clone()),
            "step {step}"
        );
        for (r, e) in reader.nodes[0]
            .devices
            .iter()
            .zip(&endpoint.nodes[0].devices)
        {
            let (r, e) = (r.telemetry.as_ref().unwrap(), e.telemetry.as_ref().unwrap());
            // The utilization sparkline is the endpoint's, sample for sample.
            assert_eq!(r.history_utilization, e.history_utilization, "step {step}");
            // The memory one holds what the reader received, never longer than the other.
            assert!(r.history_memory_used.len() <= e.history_memory_used.len());
            assert_eq!(
                r.history_memory_used.last(),
                r.memory_used.map(|b| b.0).as_ref()
            );
        }
    }
}

#[test]
fn anything_but_figures_goes_whole() {
    let old = snapshot(3);
    let mut new = snapshot(4);
    // A new process on a device: its node whole.
    let t = new.nodes[0].devices[1].telemetry.as_mut().unwrap();
    t.processes.push(ProcessView {
        pid: 9,
        ..ProcessView::default()
    });
    // A claim renamed: whole.
    new.claims[0].holder = Some("ana".into());
    let changes = diff_figures(&old, &new);
    assert!(!changes.iter().all(|c| c.telemetry_alone(old.revision)));
    assert!(
        changes
            .iter()
            .any(|c| matches!(c, SnapshotChange::Node { .. })),
        "{changes:?}"
    );
    assert!(
        changes
            .iter()
            .any(|c| matches!(c, SnapshotChange::Claim { claim } if claim.id == ClaimId(1))),
        "{changes:?}"
    );
    let figures: Vec<_> = changes
        .iter()
        .filter_map(|c| match c {
            SnapshotChange::Figures { nodes, claims, .. } => Some((nodes.len(), claims.len())),
            _ => None,
        })
        .collect();
    assert_eq!(figures, vec![(0, 1)], "{changes:?}");
    let mut reader = old.clone();
    apply(&mut reader, &over_the_wire(&changes));
    assert_eq!(as_shown(reader), as_shown(new));
}

#[test]
fn devices_sampled_apart_from_the_snapshot_say_when() {
    let old = snapshot(3);
    let mut new = snapshot(4);
    new.taken_at = Timestamp(4_250);
    let changes = diff_figures(&old, &new);
    assert!(
        changes.iter().any(|c| matches!(
            c,
            SnapshotChange::Figures {
                at: Some(Timestamp(4_000)),
                ..
            }
        )),
        "{changes:?}"
    );
    let mut reader = old;
    apply(&mut reader, &over_the_wire(&changes));
    assert_eq!(as_shown(reader), as_shown(new));
}

proptest! {
    /// Whatever a sparkline that drops its oldest did between two reads, the samples sent
    /// and the length give it back exactly.
    #[test]
    fn appended_samples_rebuild_the_sparkline(
        old in prop::collection::vec(0u32..4, 0..12),
        added in prop::collection::vec(0u32..4, 0..12),
        cap in 1usize..12,
    ) {
        let mut new = old.clone();
        new.extend(&added);
        let drop = new.len().saturating_sub(cap.max(old.len()));
        new.drain(..drop);
        let samples = appended(&old, &new).to_vec();
        let mut rebuilt = old.clone();
        rebuilt.extend_from_slice(&samples);
        let drop = rebuilt.len() - new.len();
        rebuilt.drain(..drop);
        prop_assert!(samples.len() <= added.len());
        prop_assert_eq!(rebuilt, new);
    }
}
