//! Engines' claims go by the engines' own names: a pod as `NAMESPACE/NAME`, a Slurm job by
//! its job id, a Ray holder by its id's first 8 characters (a placement-group bundle as
//! `GROUP:INDEX`). The console shows them in the ID column and takes them in `:claim`,
//! `:release`, the `/` filter and `--dump-screen claim:ID` (`tests/kubernetes_source.rs`
//! checks the last on kmock); gpuboard's own claims keep their numbers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use gpuboard::clock::Timestamp;
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::keymap::Keymap;
use gpuboard::console::msg::Msg;
use gpuboard::console::state::{SourceSlot, State, View};
use gpuboard::console::theme::load_strict;
use gpuboard::console::update::{show_view, update};
use gpuboard::snapshot::{ClaimState, Snapshot};
use gpuboard::sources::kubernetes::decode;
use gpuboard::sources::kubernetes::objects::{node_facts, pod_facts};
use gpuboard::sources::ray::{self, RayAnswers};
use gpuboard::sources::slurm::{self, SlurmAnswers};
use serde_json::Value;

use ratatui::crossterm::event::KeyCode;

use crate::common::console_fixtures::{code, flash, k, run};

const NOW: Timestamp = Timestamp(1_795_317_500_000);

fn json(path: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(path);
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn ray_snapshot() -> Snapshot {
    let answers = RayAnswers {
        version: json("fixtures/ray/version.json"),
        nodes: json("fixtures/ray/nodes_summary.json"),
        cluster_status: json("fixtures/ray/cluster_status.json"),
        tasks: json("fixtures/ray/tasks.json"),
        actors: json("fixtures/ray/actors.json"),
        placement_groups: json("fixtures/ray/placement_groups.json"),
    };
    ray::snapshot(&answers, "ray", Timestamp(NOW.0 - 2_000)).unwrap()
}

fn slurm_snapshot() -> Snapshot {
    let answers = SlurmAnswers {
        nodes: json("fixtures/slurm/nodes.json"),
        jobs: json("fixtures/slurm/jobs.json"),
    };
    slurm::snapshot(&answers, "slurm", Timestamp(NOW.0 - 2_000)).unwrap()
}

fn kubernetes_snapshot() -> Snapshot {
    let items = |f: &str| json(&format!("corpus/kubernetes/cluster/{f}"))["items"].clone();
    let nodes: Vec<_> = items("nodes.json")
        .as_array()
        .unwrap()
        .iter()
        .map(node_facts)
        .collect();
    let pods: Vec<_> = items("pods.json")
        .as_array()
        .unwrap()
        .iter()
        .map(pod_facts)
        .collect();
    decode::snapshot(&nodes, &pods, "kubernetes", "", Timestamp(NOW.0 - 2_000))
}

/// A console over one source of `kind`, fetched a second ago.
fn state(kind: &str, snap: Snapshot) -> State {
    let slots = vec![SourceSlot::new(kind, kind.parse().unwrap(), false, None)];
    let mut st = State::new(slots, Keymap::builtin(), 2_000, false);
    st.zone = jiff::tz::TimeZone::UTC;
    let _ = update(&mut st, Msg::Tick(NOW));
    st.sources[0].in_flight = true;
    let _ = update(
        &mut st,
        Msg::Fetched {
            source: 0,
            at: Timestamp(NOW.0 - 1_000),
            result: Ok(snap.into()),
        },
    );
    st
}

fn screen(st: &mut State, view: View, w: u16, h: u16) -> String {
    st.size = (w, h);
    show_view(st, view);
    buffer_text(&render(st, &load_strict("default", &[]).unwrap(), w, h).unwrap())
}

/// The ID cells of the Claims view, top to bottom.
fn id_column(screen: &str) -> Vec<String> {
    screen
        .lines()
        .skip_while(|l| !l.contains("ID "))
        .skip(1)
        .take_while(|l| l.starts_with('│') && !l.trim_matches(['│', ' ']).is_empty())
        .filter_map(|l| l.trim_start_matches('│').split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Types `keys` (`\n` is Enter).
fn typed(st: &mut State, keys: &str) {
    let msgs = keys
        .chars()
        .map(|c| {
            if c == '\n' {
                code(KeyCode::Enter)
            } else {
                k(c)
            }
        })
        .collect();
    run(st, msgs);
}

fn names(s: &Snapshot) -> Vec<String> {
    let mut v: Vec<String> = s
        .claims
        .iter()
        .map(gpuboard::snapshot::ClaimView::shown_id)
        .collect();
    v.sort();
    v
}

#[test]
fn slurm_jobs_go_by_their_job_ids() {
    let s = slurm_snapshot();
    // Jobs 1 and 2 run on gpunode, 3 is pending (tests/fixtures/slurm/jobs.json).
    assert_eq!(names(&s), ["1", "2", "3"]);
    let three = s.claims.iter().find(|c| c.shown_id() == "3").unwrap();
    assert_eq!(three.state, ClaimState::Pending);
    let mut st = state("slurm", s);
    let shown = screen(&mut st, View::Claims, 120, 30);
    assert_eq!(id_column(&shown), ["1", "2", "3"], "{shown}");
    // `:claim 2` opens job 2, not a hashed id.
    typed(&mut st, ":claim 2\n");
    assert_eq!(st.view, View::ClaimDetail, "{}", flash(&st));
    let detail = screen(&mut st, View::ClaimDetail, 120, 30);
    assert!(detail.contains("claim 2 placed on slurm"), "{detail}");
}

#[test]
fn ray_holders_go_by_their_short_ids() {
    let s = ray_snapshot();
    for c in &s.claims {
        let name = c.shown_id();
        let ray_id = &c.request.labels["ray.id"];
        match ray_id.split_once(':') {
            // A placement-group bundle: the group's short id and the bundle's index.
            Some((group, index)) => assert_eq!(name, format!("{}:{index}", &group[..8])),
            None => assert_eq!(name, ray_id[..8], "{ray_id}"),
        }
    }
    let bundle = s
        .claims
        .iter()
        .find(|c| c.request.labels.contains_key("ray.placement_group"))
        .unwrap();
    assert_eq!(bundle.shown_id(), "fa9db15f:0");
    let mut st = state("ray", s.clone());
    let shown = screen(&mut st, View::Claims, 120, 30);
    assert_eq!(id_column(&shown), names(&s), "{shown}");
    typed(&mut st, ":claim fa9db15f:0\n");
    assert_eq!(st.view, View::ClaimDetail, "{}", flash(&st));
    let detail = screen(&mut st, View::ClaimDetail, 120, 30);
    assert!(
        detail.contains("claim fa9db15f:0 placed on ray"),
        "{detail}"
    );
}

#[test]
fn pods_go_by_namespace_and_name_in_every_command() {
    let s = kubernetes_snapshot();
    let pods: Vec<String> = s
        .claims
        .iter()
        .map(|c| {
            let l = &c.request.labels;
            format!("{}/{}", l["k8s.namespace"], l["k8s.pod"])
        })
        .collect();
    let mut want = pods.clone();
    want.sort();
    assert_eq!(names(&s), want);
    let mut st = state("kubernetes", s);
    // The Claims view sorts them by name and shows them whole at 140 columns.
    let shown = screen(&mut st, View::Claims, 140, 30);
    assert_eq!(id_column(&shown), want, "{shown}");
    // The filter matches the name as shown: one row.
    typed(&mut st, "/ml/hami-3g\n");
    let shown = screen(&mut st, View::Claims, 120, 30);
    assert_eq!(id_column(&shown), ["ml/hami-3g"], "{shown}");
    let mut st = state("kubernetes", kubernetes_snapshot());
    // `:claim NAMESPACE/NAME` opens it; its source's name before it works too.
    for name in ["ml/hami-3g", "kubernetes/ml/hami-3g"] {
        show_view(&mut st, View::Claims);
        typed(&mut st, &format!(":claim {name}\n"));
        assert_eq!(st.view, View::ClaimDetail, "{name}: {}", flash(&st));
        let detail = screen(&mut st, View::ClaimDetail, 120, 30);
        assert!(
            detail.contains("claim ml/hami-3g placed on kubernetes"),
            "{name}: {detail}"
        );
    }
    // A name nobody has is refused, listing names as the view shows them.
    show_view(&mut st, View::Claims);
    typed(&mut st, ":claim ml/nope\n");
    let why = flash(&st);
    assert!(why.contains("no claim `ml/nope`"), "{why}");
    assert!(why.contains("ml/hami-3g"), "{why}");
    // `:release NAMESPACE/NAME` finds that pod; gpuboard cannot release a pod, and says so
    // naming it and the engine's own actions.
    typed(&mut st, ":release ml/hami-3g\n");
    let why = flash(&st);
    assert!(
        why.contains("release claim ml/hami-3g refused") && why.contains(":act evict"),
        "{why}"
    );
}
