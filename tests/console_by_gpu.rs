//! The GPUs view "by GPU": four sources that see the same two GPUs on one host under
//! different names (a gpuboard endpoint's NVML, Slurm, Kubernetes with HAMi's UUIDs,
//! dcgm in Prometheus) joined into one row per physical GPU, with every engine's holders,
//! a `gpuboard run` nested in its Slurm job, a double booking and an unexplained process;
//! `v` toggles it, Enter and `:gpu NODE:INDEX` open a GPU's holder tree. Snapshot tests at
//! 80x24, 120x40 and 200x60.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use crate::common::console_fixtures::{NOW, code, feed, k, run};

use gpuboard::clock::Timestamp;
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::keymap::Keymap;
use gpuboard::console::msg::{Effect, Msg};
use gpuboard::console::state::{CellState, SourceSlot, State, View};
use gpuboard::console::theme::load_strict;
use gpuboard::console::update::{show_view, update};
use gpuboard::ids::ClaimId;
use gpuboard::physical::GpuFlag;
use gpuboard::placement::DeviceShare;
use gpuboard::request::ClaimRequest;
use gpuboard::snapshot::{
    ClaimState, ClaimView, DeviceTelemetry, DeviceView, EndpointInfo, NodeView, ProcessOwner,
    ProcessView, Snapshot,
};
use gpuboard::units::{Bytes, Slots, Units};
use ratatui::crossterm::event::KeyCode;

const GIB: u64 = 1 << 30;
const POD_UID: &str = "6b3e7a6f-1111-4000-8000-000000000001";

fn snap(kind: &str, node: &str, devices: Vec<DeviceView>, claims: Vec<ClaimView>) -> Snapshot {
    Snapshot {
        schema: 1,
        endpoint: EndpointInfo::engine(kind, kind, String::new()),
        taken_at: NOW,
        nodes: vec![NodeView {
            name: node.to_string(),
            devices,
            ..NodeView::default()
        }],
        claims,
        ..Snapshot::default()
    }
}

fn dev(index: u32, uuid: Option<&str>) -> DeviceView {
    DeviceView {
        index,
        model: "NVIDIA A100-SXM4-40GB".to_string(),
        uuid: uuid.map(str::to_string),
        memory_capacity: Some(Bytes(40 * GIB)),
        ..DeviceView::default()
    }
}

fn claim(
    id: u64,
    holder: &str,
    node: &str,
    device: u32,
    memory: u64,
    compute: u32,
    labels: &[(&str, &str)],
) -> ClaimView {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(a, b)| ((*a).to_string(), (*b).to_string()))
        .collect();
    ClaimView {
        id: ClaimId(id),
        name: None,
        state: ClaimState::Placed,
        project: "ml".to_string(),
        holder: Some(holder.to_string()),
        form: format!("form {id}"),
        request: ClaimRequest {
            gpu: None,
            accelerator_type: None,
            cpus: None,
            node: None,
            devices: None,
            project: "ml".to_string(),
            holder: Some(holder.to_string()),
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
        created_at: Timestamp(NOW.0 - 3_600_000),
        lease_expires_at: None,
        pending_reasons: Vec::new(),
        infeasible: false,
    }
}

fn process(
    pid: u32,
    name: &str,
    gib: u64,
    claim: Option<u64>,
    owner: Option<ProcessOwner>,
) -> ProcessView {
    ProcessView {
        pid,
        name: Some(name.to_string()),
        used_memory: Some(Bytes(gib * GIB)),
        claim: claim.map(ClaimId),
        owner,
    }
}

fn telemetry(util: u32, used: u64, processes: Vec<ProcessView>) -> DeviceTelemetry {
    DeviceTelemetry {
        sampled_at: NOW,
        memory_total: Some(Bytes(40 * GIB)),
        memory_used: Some(Bytes(used * GIB)),
        utilization_gpu: Some(util),
        temperature_c: Some(51),
        processes,
        ..DeviceTelemetry::default()
    }
}

/// The endpoint's snapshot of `n1`: GPU 0 at `util` % with train.py using `train_gib`.
fn serve_snapshot(util: u32, train_gib: u64) -> Snapshot {
    let job = |j: u64| ProcessOwner::SlurmJob {
        job: j,
        step: Some("0".to_string()),
    };
    let mut g0 = dev(0, Some("GPU-5fd0c8a1-0000"));
    g0.telemetry = Some(telemetry(
        util,
        9,
        vec![
            process(5001, "train.py", train_gib, Some(7), Some(job(42))),
            process(5002, "dataloader", 1, None, Some(job(42))),
        ],
    ));
    let mut g1 = dev(1, Some("GPU-9ab31e77-0001"));
    g1.telemetry = Some(telemetry(
        88,
        27,
        vec![
            process(
                6001,
                "infer",
                12,
                None,
                Some(ProcessOwner::pod(POD_UID, None, None)),
            ),
            process(6002, "sim", 10, None, Some(job(43))),
            process(7070, "miner", 5, None, None),
        ],
    ));
    snap(
        "gpuboard",
        "n1.lab.example",
        vec![g0, g1],
        vec![claim(7, "alice", "n1.lab.example", 0, 10 * GIB, 5_000, &[])],
    )
}

/// A console over `sources` at `NOW`, in UTC; `background`: it joins as the live console
/// does, off the update step.
fn console(sources: Vec<SourceSlot>, background: bool) -> State {
    let mut st = State::new(sources, Keymap::builtin(), 2_000, false);
    st.zone = jiff::tz::TimeZone::UTC;
    st.physical.background.on = background;
    let _ = update(&mut st, Msg::Tick(NOW));
    st
}

/// One host, `n1`, as four sources name it. GPU 0: Slurm job 42 with a `gpuboard run`
/// (claim 7) inside it. GPU 1: Slurm job 43 and pod ml/infer (HAMi, half the GPU) side by
/// side (double-booked), and pid 7070 that no one accounts for.
fn four_sources() -> State {
    four_sources_in(false)
}

/// The four sources fed in turn; `background`: joined as the live console joins, off the
/// update step (`feed` drops the effects, so the first change's join is left in flight).
fn four_sources_in(background: bool) -> State {
    let mut st = console(
        vec![
            SourceSlot::new("serve", "gpuboard".parse().unwrap(), true, None),
            SourceSlot::new("slurm", "slurm".parse().unwrap(), true, None),
            SourceSlot::new("k8s", "kubernetes".parse().unwrap(), false, None),
            SourceSlot::new("dcgm", "prometheus".parse().unwrap(), false, None),
        ],
        background,
    );
    feed(&mut st, 0, serve_snapshot(63, 8), NOW.0 - 1_000);
    let slurm = snap(
        "slurm",
        "n1",
        vec![dev(0, None), dev(1, None)],
        vec![
            claim(1042, "alice", "n1", 0, 0, 10_000, &[("slurm.job_id", "42")]),
            claim(1043, "bob", "n1", 1, 0, 10_000, &[("slurm.job_id", "43")]),
        ],
    );
    feed(&mut st, 1, slurm, NOW.0 - 1_000);
    let k8s = snap(
        "kubernetes",
        "N1",
        vec![
            dev(0, Some("GPU-5fd0c8a1-0000")),
            dev(1, Some("GPU-9ab31e77-0001")),
        ],
        vec![claim(
            2001,
            "infer",
            "N1",
            1,
            20 * GIB,
            5_000,
            &[
                ("k8s.namespace", "ml"),
                ("k8s.pod", "infer"),
                ("k8s.uid", POD_UID),
                ("k8s.node", "N1"),
            ],
        )],
    );
    feed(&mut st, 2, k8s, NOW.0 - 1_000);
    let mut d0 = dev(0, Some("GPU-5fd0c8a1-0000"));
    d0.telemetry = Some(telemetry(60, 9, vec![]));
    let mut d1 = dev(1, Some("GPU-9ab31e77-0001"));
    d1.telemetry = Some(telemetry(85, 27, vec![]));
    feed(
        &mut st,
        3,
        snap("prometheus", "n1.lab.example", vec![d0, d1], vec![]),
        NOW.0 - 1_000,
    );
    show_view(&mut st, View::Gpus);
    st
}

fn text(st: &State, w: u16, h: u16) -> String {
    let th = load_strict("default", &[]).unwrap();
    buffer_text(&render(st, &th, w, h).unwrap())
}

#[test]
fn one_row_per_physical_gpu_with_every_engines_holders() {
    let mut st = four_sources();
    // By source: each source's devices, eight rows.
    assert_eq!(st.gpus.rows.len(), 8);
    run(&mut st, vec![k('v')]);
    assert!(st.physical.by_gpu);
    let fleet = st.physical_fleet();
    assert_eq!(fleet.gpus.len(), 2, "{:?}", fleet.warnings);
    assert!(fleet.warnings.is_empty(), "{:?}", fleet.warnings);
    let g0 = fleet.find("n1", 0).unwrap();
    assert_eq!(g0.source_names(), ["serve", "slurm", "k8s", "dcgm"]);
    assert!(g0.flags.is_empty(), "{:?}", g0.flags);
    let g1 = fleet.find("n1", 1).unwrap();
    let words: Vec<&str> = g1.flags.iter().map(GpuFlag::word).collect();
    assert_eq!(words, ["double-booked", "unexplained"]);
    let booked = g1.flags[0].describe(g1);
    assert!(
        booked.contains("Slurm job 43 [slurm]") && booked.contains("pod ml/infer [k8s]"),
        "{booked}"
    );
    assert!(g1.flags[1].describe(g1).contains("pid 7070"));
    // The Overview's map shows that GPU double-booked in each source that lists it (by
    // that source's name for its node), and only that one.
    let booked: Vec<(usize, &str, u32)> = st
        .map
        .nodes
        .iter()
        .flat_map(|n| {
            st.map.cells[n.cells.clone()]
                .iter()
                .filter(|c| c.state == CellState::DoubleBooked)
                .map(move |c| (n.source, n.name.as_str(), c.index))
        })
        .collect();
    assert!(!booked.is_empty(), "{:?}", st.map.counts);
    assert_eq!(
        booked,
        [
            (0, "n1.lab.example", 1),
            (1, "n1", 1),
            (2, "N1", 1),
            (3, "n1.lab.example", 1)
        ]
    );
    let screen = text(&st, 120, 40);
    assert!(screen.contains("GPUs by GPU (2)"), "{screen}");
    assert!(screen.contains("double-booked,unexplained"), "{screen}");
    // `v` again: by source.
    run(&mut st, vec![k('v')]);
    assert!(text(&st, 120, 40).contains("GPUs (8)"));
}

#[test]
fn the_holder_tree_nests_a_run_in_its_job_and_names_whose_process() {
    let mut st = four_sources();
    show_view(&mut st, View::Claims);
    run(&mut st, vec![k(':')]);
    run(&mut st, "gpu n1:0".chars().map(k).collect());
    run(&mut st, vec![code(KeyCode::Enter)]);
    assert_eq!(st.view, View::Gpus);
    let screen = text(&st, 120, 40);
    assert!(screen.contains("Slurm job 42"), "{screen}");
    assert!(screen.contains("└─ claim 7 (alice)"), "{screen}");
    assert!(screen.contains("pid 5001 train.py"), "{screen}");
    assert!(
        !screen.contains("double-booked"),
        "GPU 0 has no flag: {screen}"
    );
    // Esc: back where `:gpu` was typed.
    run(&mut st, vec![code(KeyCode::Esc)]);
    assert_eq!(st.view, View::Claims);
    // A source's own device still opens by its source's name.
    run(&mut st, vec![k(':')]);
    run(&mut st, "gpu slurm/n1:1".chars().map(k).collect());
    run(&mut st, vec![code(KeyCode::Enter)]);
    assert_eq!(st.view, View::Detail);
    assert_eq!(st.detail, Some((1, "n1".to_string(), 1)));
}

#[test]
fn problems_key_steps_the_flags() {
    let mut st = four_sources();
    run(&mut st, vec![k('v'), k('!')]);
    assert_eq!(st.physical.flag_filter, Some("double-booked"));
    assert_eq!(st.physical.rows.len(), 1);
    run(&mut st, vec![k('!')]);
    assert_eq!(st.physical.flag_filter, Some("unexplained"));
    assert_eq!(st.physical.rows.len(), 1);
    run(&mut st, vec![k('!')]);
    assert_eq!(st.physical.flag_filter, Some("idle"));
    assert_eq!(st.physical.rows.len(), 0);
    assert!(text(&st, 80, 24).contains("no GPUs match"));
    run(&mut st, vec![code(KeyCode::Esc)]);
    assert_eq!(st.physical.rows.len(), 2);
}

#[test]
fn by_gpu_views_at_three_sizes() {
    for (w, h) in [(80, 24), (120, 40), (200, 60)] {
        let mut st = four_sources();
        st.size = (w, h);
        run(&mut st, vec![k('v')]);
        insta::assert_snapshot!(format!("by_gpu_list_{w}x{h}"), text(&st, w, h));
        run(&mut st, vec![k('j'), code(KeyCode::Enter)]);
        insta::assert_snapshot!(format!("by_gpu_tree_{w}x{h}"), text(&st, w, h));
    }
}

/// The join's input in `effects`, when they ask for one.
fn join_asked(effects: &[Effect]) -> Vec<gpuboard::console::state::JoinInput> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Join(input) => Some((**input).clone()),
            _ => None,
        })
        .collect()
}

/// Updates with `msg`, then answers each join it and what follows ask for until none is.
fn answer_joins(st: &mut State, msg: Msg) {
    let mut effects = update(st, msg);
    while let [input] = join_asked(&effects).as_slice() {
        effects = update(st, Msg::Joined(Box::new(input.join())));
    }
}

#[test]
fn the_live_console_joins_off_the_update_step_one_join_at_a_time() {
    let at_once = four_sources();
    let mut st = four_sources_in(true);
    // The first change asked for a join; the three after it asked for none while it ran,
    // and nothing is joined on the update step.
    assert!(st.physical.background.in_flight && st.physical.background.stale);
    assert!(st.physical_fleet().gpus.is_empty());
    assert!(join_asked(&update(&mut st, Msg::Tick(NOW))).is_empty());
    // Its answer (whatever it held) is taken, and one more join is asked for: every
    // source's latest data, shared with the state rather than copied.
    let effects = update(&mut st, Msg::Joined(Box::default()));
    let [input] = join_asked(&effects).try_into().unwrap();
    assert_eq!(input.sources.len(), 4);
    for s in &input.sources {
        assert!(std::sync::Arc::ptr_eq(
            &s.snapshot,
            st.sources[s.source].data.as_ref().unwrap()
        ));
    }
    assert!(st.physical.background.in_flight && !st.physical.background.stale);
    // Once it is back: the same GPUs, map and totals as joining at once, and no more asks.
    let effects = update(&mut st, Msg::Joined(Box::new(input.join())));
    assert!(join_asked(&effects).is_empty());
    assert!(!st.physical.background.in_flight && !st.physical.background.stale);
    assert_eq!(st.physical_fleet(), at_once.physical_fleet());
    assert_eq!(st.map, at_once.map);
    assert_eq!(st.totals, at_once.totals);
    run(&mut st, vec![k('v')]);
    let mut shown = at_once.clone();
    run(&mut shown, vec![k('v')]);
    assert_eq!(text(&st, 120, 40), text(&shown, 120, 40));
}

#[tokio::test]
async fn the_driver_joins_on_the_blocking_pool_and_answers_joined() {
    use gpuboard::clock::{Clock, ManualClock};
    let st = four_sources();
    let input = st.join_input();
    let clock: std::sync::Arc<dyn Clock> = std::sync::Arc::new(ManualClock::new(NOW));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    gpuboard::console::driver::perform(
        Effect::Join(Box::new(input.clone())),
        &[],
        false,
        std::time::Duration::from_secs(1),
        &clock,
        &tx,
    );
    let Some(Msg::Joined(fleet)) = rx.recv().await else {
        panic!("no join answered")
    };
    assert_eq!(*fleet, input.join());
    assert_eq!(fleet.gpus.len(), 2);
}

/// Two endpoints of two GPUs each (`n1`, `n2`); `util` and `mib` are n1's GPU 0 figures.
fn endpoint_snaps(util: u32, mib: u64) -> [Snapshot; 2] {
    let mut g0 = dev(0, Some("GPU-aa"));
    g0.telemetry = Some(telemetry(
        util,
        9,
        vec![process(5001, "train.py", 1, Some(7), None)],
    ));
    if let Some(t) = g0.telemetry.as_mut() {
        t.processes[0].used_memory = Some(Bytes::mib(mib));
    }
    let mut g1 = dev(1, Some("GPU-ab"));
    g1.telemetry = Some(telemetry(3, 0, vec![]));
    let mut c = claim(7, "alice", "n1", 0, 10 * GIB, 5_000, &[]);
    c.memory_used = Some(Bytes::mib(mib));
    let a = snap("gpuboard", "n1", vec![g0, g1], vec![c]);
    let mut h0 = dev(0, Some("GPU-ba"));
    h0.telemetry = Some(telemetry(50, 20, vec![]));
    let b = snap("gpuboard", "n2", vec![h0, dev(1, Some("GPU-bb"))], vec![]);
    [a, b]
}

fn endpoints_fed(background: bool, snaps: [Snapshot; 2]) -> State {
    let mut st = console(
        vec![
            SourceSlot::new("a", "gpuboard".parse().unwrap(), true, None),
            SourceSlot::new("b", "gpuboard".parse().unwrap(), true, None),
        ],
        background,
    );
    for (i, s) in snaps.into_iter().enumerate() {
        feed(&mut st, i, s, NOW.0 - 1_000);
    }
    st
}

#[test]
fn telemetry_alone_reaches_the_physical_gpus_without_a_join() {
    let mut st = endpoints_fed(true, endpoint_snaps(40, 3_000));
    // The joins the first answers asked for, answered until none is asked.
    let first = st.join_input().join();
    answer_joins(&mut st, Msg::Joined(Box::new(first)));
    assert!(!st.physical.background.in_flight && !st.physical.background.stale);
    // New figures from `a`, nothing else: no join is asked, yet every view has them.
    let [a, _] = endpoint_snaps(75, 5_000);
    st.sources[0].in_flight = true;
    let effects = update(
        &mut st,
        Msg::Fetched {
            source: 0,
            at: NOW,
            result: Ok(a.into()),
        },
    );
    assert!(join_asked(&effects).is_empty(), "{effects:?}");
    assert!(!st.physical.background.stale);
    let fresh = endpoints_fed(false, endpoint_snaps(75, 5_000));
    assert_eq!(st.physical_fleet(), fresh.physical_fleet());
    assert_eq!(st.map, fresh.map);
    assert_eq!(st.totals, fresh.totals);
    let util = st.physical_fleet().gpus[0]
        .telemetry
        .as_ref()
        .and_then(|t| t.utilization_gpu);
    assert_eq!(util, Some(75));
    // A change beyond telemetry (a cordon) joins again.
    let [mut a, _] = endpoint_snaps(75, 5_000);
    a.nodes[0].devices[1].cordoned = true;
    feed(&mut st, 0, a, NOW.0);
    assert!(st.physical.background.stale, "a join is due");
}

#[test]
fn telemetry_alone_reaches_gpus_other_sources_see_without_a_join() {
    let mut st = four_sources_in(true);
    let first = st.join_input().join();
    answer_joins(&mut st, Msg::Joined(Box::new(first)));
    assert!(!st.physical.background.in_flight && !st.physical.background.stale);
    // The endpoint's new figures for GPU 0, which Slurm, Kubernetes and dcgm see too: no
    // join is asked, and the GPU has them.
    st.sources[0].in_flight = true;
    let effects = update(
        &mut st,
        Msg::Fetched {
            source: 0,
            at: NOW,
            result: Ok(serve_snapshot(17, 11).into()),
        },
    );
    assert!(join_asked(&effects).is_empty(), "{effects:?}");
    assert!(!st.physical.background.stale);
    let g0 = st.physical_fleet().find("n1", 0).unwrap();
    assert_eq!(g0.source_names(), ["serve", "slurm", "k8s", "dcgm"]);
    let util = g0.telemetry.as_ref().and_then(|t| t.utilization_gpu);
    assert_eq!(util, Some(17));
    let train = g0.processes.iter().find(|p| p.pid == 5001).unwrap();
    assert_eq!(train.used_memory, Some(Bytes(11 * GIB)));
    // What a cold join of the same data gives, and what a console fed it at once shows.
    let input = st.join_input();
    let views: Vec<gpuboard::physical::SourceView<'_>> = input
        .sources
        .iter()
        .map(|s| gpuboard::physical::SourceView {
            source: s.source,
            name: &s.name,
            engine: s.engine,
            snapshot: &s.snapshot,
        })
        .collect();
    assert_eq!(
        *st.physical_fleet(),
        gpuboard::physical::join(&views, &input.aliases)
    );
    let mut fresh = four_sources();
    feed(&mut fresh, 0, serve_snapshot(17, 11), NOW.0);
    assert_eq!(st.physical_fleet(), fresh.physical_fleet());
}

#[test]
fn a_change_keeps_the_data_of_the_sources_it_does_not_touch_shared() {
    let mut st = four_sources();
    let data = |st: &State| -> Vec<std::sync::Arc<Snapshot>> {
        st.sources.iter().map(|s| s.data.clone().unwrap()).collect()
    };
    let kept = |a: &[std::sync::Arc<Snapshot>], b: &[std::sync::Arc<Snapshot>]| -> Vec<bool> {
        a.iter()
            .zip(b)
            .map(|(a, b)| std::sync::Arc::ptr_eq(a, b))
            .collect()
    };
    // Slurm's job 43 ends: Slurm's data is new, the others' (dcgm joined into them) kept.
    let before = data(&st);
    let slurm = snap(
        "slurm",
        "n1",
        vec![dev(0, None), dev(1, None)],
        vec![claim(
            1042,
            "alice",
            "n1",
            0,
            0,
            10_000,
            &[("slurm.job_id", "42")],
        )],
    );
    feed(&mut st, 1, slurm, NOW.0);
    assert_eq!(kept(&before, &data(&st)), [true, false, true, true]);
    assert!(
        st.physical_fleet()
            .gpus
            .iter()
            .all(|g| g.holders.iter().all(|h| h.label.as_ref() != "Slurm job 43")),
        "the join read the new Slurm data"
    );
    // dcgm with a new host no other source has: what it joins into is unchanged, so kept.
    let before = data(&st);
    let mut d0 = dev(0, Some("GPU-5fd0c8a1-0000"));
    d0.telemetry = Some(telemetry(60, 9, vec![]));
    let mut d1 = dev(1, Some("GPU-9ab31e77-0001"));
    d1.telemetry = Some(telemetry(85, 27, vec![]));
    let mut dcgm = snap("prometheus", "n1.lab.example", vec![d0, d1], vec![]);
    let mut n9 = dev(0, Some("GPU-0000-n9"));
    n9.telemetry = Some(telemetry(10, 1, vec![]));
    dcgm.nodes.push(NodeView {
        name: "n9".to_string(),
        devices: vec![n9],
        ..NodeView::default()
    });
    feed(&mut st, 3, dcgm, NOW.0);
    assert_eq!(kept(&before, &data(&st)), [true, true, true, false]);
    // New series: Slurm's devices, which have no telemetry of their own, take them.
    let before = data(&st);
    let mut d0 = dev(0, Some("GPU-5fd0c8a1-0000"));
    d0.telemetry = Some(telemetry(2, 9, vec![]));
    let dcgm = snap("prometheus", "n1.lab.example", vec![d0], vec![]);
    feed(&mut st, 3, dcgm, NOW.0);
    let now = data(&st);
    assert!(!std::sync::Arc::ptr_eq(&before[1], &now[1]));
    let util = now[1].nodes[0].devices[0]
        .telemetry
        .as_ref()
        .and_then(|t| t.utilization_gpu);
    assert_eq!(util, Some(2));
}

#[test]
fn an_idle_console_joins_nothing_for_ten_minutes() {
    let mut st = four_sources_in(true);
    // The joins the feeding asked for, answered until none is asked.
    answer_joins(&mut st, Msg::Joined(Box::default()));
    assert_eq!(st.physical_fleet().gpus.len(), 2);
    let fleet = std::sync::Arc::clone(&st.physical.fleet);
    // Ten minutes of ticks, each due source answering with what it said before.
    let mut fetched = 0;
    for s in 1..=600 {
        let now = Timestamp(NOW.0 + s * 1_000);
        let effects = update(&mut st, Msg::Tick(now));
        assert!(join_asked(&effects).is_empty(), "a join at {s} s");
        for e in effects {
            let Effect::Fetch(i) = e else { continue };
            let slot = &st.sources[i];
            let same = slot
                .raw
                .clone()
                .unwrap_or_else(|| (**slot.data.as_ref().unwrap()).clone());
            let effects = update(
                &mut st,
                Msg::Fetched {
                    source: i,
                    at: now,
                    result: Ok(same.into()),
                },
            );
            assert!(
                join_asked(&effects).is_empty(),
                "a join after a fetch at {s} s"
            );
            fetched += 1;
        }
    }
    assert!(fetched >= 4 * 100, "the sources were read again: {fetched}");
    assert!(!st.physical.background.stale && !st.physical.background.in_flight);
    assert!(
        std::sync::Arc::ptr_eq(&fleet, &st.physical.fleet),
        "no join was taken"
    );
}
