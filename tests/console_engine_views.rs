//! Snapshot tests of the console with engine sources present: the GPUs and Claims views
//! with a Ray source and a Prometheus source, the Fair share view with a BOINC client,
//! and the GPUs view with a Slurm cluster (drained and not). All from captured answers of
//! the real peers (tests/fixtures), at 80x24, 120x40 and 200x60 and a fixed `now`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::Path;

use gpuboard::clock::Timestamp;
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::keymap::Keymap;
use gpuboard::console::msg::Msg;
use gpuboard::console::state::{SourceSlot, State, View};
use gpuboard::console::theme::load_strict;
use gpuboard::console::update::{show_view, update};
use gpuboard::snapshot::{EndpointInfo, Snapshot};
use gpuboard::sources::prometheus::{self, NodeLabels};
use gpuboard::sources::ray::{self, RayAnswers};
use serde_json::Value;

fn json(path: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path);
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

const NOW: Timestamp = Timestamp(1_795_317_500_000);

fn ray_snapshot() -> Snapshot {
    let answers = RayAnswers {
        version: json("ray/version.json"),
        nodes: json("ray/nodes_summary.json"),
        cluster_status: json("ray/cluster_status.json"),
        tasks: json("ray/tasks.json"),
        actors: json("ray/actors.json"),
        placement_groups: json("ray/placement_groups.json"),
    };
    ray::snapshot(&answers, "ray", Timestamp(NOW.0 - 2_000)).unwrap()
}

fn prometheus_snapshot() -> Snapshot {
    let doc = json("prometheus/query_range.json");
    let series = prometheus::parse_result(&doc["data"]).unwrap();
    let endpoint = EndpointInfo {
        name: "prom".into(),
        kind: "prometheus".into(),
        ..EndpointInfo::default()
    };
    prometheus::telemetry_snapshot(
        &series,
        &NodeLabels::new(None),
        endpoint,
        Timestamp(NOW.0 - 2_000),
    )
}

/// A console over these (kind, snapshot) sources, all fetched a second ago.
fn state(sources: Vec<(&str, &str, Snapshot)>) -> State {
    let slots = sources
        .iter()
        .map(|(name, kind, _)| SourceSlot::new(name, kind.parse().unwrap(), false, None))
        .collect();
    let mut st = State::new(slots, Keymap::builtin(), 2_000, false);
    let _ = update(&mut st, Msg::Tick(NOW));
    for (i, (_, _, snap)) in sources.into_iter().enumerate() {
        st.sources[i].in_flight = true;
        let _ = update(
            &mut st,
            Msg::Fetched {
                source: i,
                at: Timestamp(NOW.0 - 1_000),
                result: Ok(snap.into()),
            },
        );
    }
    st
}

fn text(st: &mut State, view: View, w: u16, h: u16) -> String {
    st.size = (w, h);
    show_view(st, view);
    buffer_text(&render(st, &load_strict("default", &[]).unwrap(), w, h).unwrap())
}

/// The three sizes every view is snapshot at (issue 16).
const SIZES: [(u16, u16); 3] = [(80, 24), (120, 40), (200, 60)];

/// Snapshots `view` at every size in `SIZES`, as `{name}_{w}x{h}`.
fn snapshots(st: &mut State, view: View, name: &str) {
    for (w, h) in SIZES {
        insta::assert_snapshot!(format!("{name}_{w}x{h}"), text(st, view, w, h));
    }
}

#[test]
fn gpus_and_claims_with_ray_and_prometheus() {
    let mut st = state(vec![
        ("ray", "ray", ray_snapshot()),
        ("prom", "prometheus", prometheus_snapshot()),
    ]);
    let gpus = text(&mut st, View::Gpus, 120, 40);
    assert!(gpus.contains("ray") && gpus.contains("node-a"), "{gpus}");
    snapshots(&mut st, View::Gpus, "engines_gpus");
    snapshots(&mut st, View::Claims, "engines_claims");
}

#[test]
fn prometheus_telemetry_joins_the_devices_of_other_sources() {
    // A gpuboard endpoint serving node-a's GPUs without telemetry of its own.
    let prom = prometheus_snapshot();
    let mut own = prom.clone();
    own.endpoint = EndpointInfo {
        name: "lab".into(),
        kind: "gpuboard".into(),
        actions: true,
        ..EndpointInfo::default()
    };
    own.nodes.retain(|n| n.name == "node-a");
    for d in own.nodes.iter_mut().flat_map(|n| n.devices.iter_mut()) {
        d.telemetry = None;
        d.uuid = None;
    }
    let st = state(vec![
        ("lab", "gpuboard", own.clone()),
        ("prom", "prometheus", prom),
    ]);
    let joined = st.sources[0].data.as_ref().unwrap();
    let with = joined
        .devices()
        .filter(|(_, d)| d.telemetry.is_some())
        .count();
    assert_eq!(
        with,
        own.devices().count(),
        "every node-a GPU got its dcgm telemetry"
    );
    assert!(
        st.sources[0]
            .raw
            .as_ref()
            .unwrap()
            .devices()
            .all(|(_, d)| d.telemetry.is_none())
    );
}

#[test]
fn fair_share_with_a_boinc_client() {
    let mut st = state(vec![("boinc", "boinc", common::boinc_snapshot())]);
    snapshots(&mut st, View::Ledger, "boinc_fairshare");
}

#[test]
fn gpus_with_a_slurm_cluster() {
    let mut st = state(vec![("slurm", "slurm", common::slurm_snapshot(false))]);
    snapshots(&mut st, View::Gpus, "slurm_gpus");
    snapshots(&mut st, View::Claims, "slurm_claims");
    let mut drained = state(vec![("slurm", "slurm", common::slurm_snapshot(true))]);
    snapshots(&mut drained, View::Gpus, "slurm_drained_gpus");
}
