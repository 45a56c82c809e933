//! Whose a GPU process is (issue 28): `gpuboard serve` on the fake NVML library, whose
//! fixture declares each process's `/proc/PID/cgroup` (written under its `proc_root`, where
//! `GPUBOARD_HOST_PROC` points serve: the fixture's pids are this machine's real ones, so
//! nothing here reads /proc for them). The snapshot carries each owner; GPU detail shows a
//! pod's, a Slurm job's and an unknown process; with a Kubernetes source (kmock) beside it,
//! the pod is named by namespace and name. Claim detail and a claimed process, on the
//! console's fixture lab; a pod's claim detail lists the host's processes in that pod.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::console_fixtures::{self, NOW, feed, lab_snapshot, lab_state};
use crate::common::kmock;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::keymap::Keymap;
use gpuboard::console::msg::Msg;
use gpuboard::console::state::{SourceSlot, State, View};
use gpuboard::console::theme::load_strict;
use gpuboard::console::update::{show_view, update};
use gpuboard::snapshot::{
    DeviceTelemetry, DeviceView, NodeView, ProcessOwner, ProcessView, Snapshot,
};
use gpuboard::sources::SourceKind;
use gpuboard::sources::kubernetes::decode;
use gpuboard::sources::kubernetes::objects::{node_facts, pod_facts};
use gpuboard::units::Bytes;
use serde_json::json;

/// Pod `web/infer` of tests/corpus/kubernetes/cluster.
const POD_UID: &str = "0a1b2c3d-0009-4000-8000-000000000009";
/// Pod `kube-system/coredns-7db6d8ff4d-x2x9k` of that cluster: it asks for CPU only.
const COREDNS_UID: &str = "0a1b2c3d-0014-4000-8000-000000000014";
const CONTAINER: &str = "4f2b1c9d8e7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c";

/// A fake-NVML fixture with one L4 and three processes: in a pod (cgroup v2, systemd
/// driver, containerd), in a Slurm job (cgroup v1), and in a user session (nobody's);
/// `extra` appends more `[[devices.processes]]`.
fn fixture(dir: &Path, extra: &str) -> PathBuf {
    let root = dir.join("proc");
    let uid_ = POD_UID.replace('-', "_");
    let text = format!(
        r#"driver_version = "550.54.15"
proc_root = "{root}"

[[devices]]
name = "NVIDIA L4"
uuid = "GPU-l4-owners"
pci_bus_id = "00000000:01:00.0"
memory_total = 24152899584
memory_reserved = 536870912
memory_used = 6442450944
utilization_gpu = 55
utilization_memory = 20

[[devices.processes]]
pid = 4101
used_memory = 2147483648
name = "python3"
cgroup = "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice/cri-containerd-{CONTAINER}.scope\n"

[[devices.processes]]
pid = 4102
used_memory = 3221225472
name = "train.py"
cgroup = "12:devices:/slurm/uid_1000/job_4242/step_0/task_0\n4:memory:/slurm/uid_1000/job_4242/step_0/task_0\n"

[[devices.processes]]
pid = 4103
used_memory = 1073741824
name = "notebook"
cgroup = "0::/user.slice/user-1000.slice/session-3.scope\n"
{extra}"#,
        root = root.display()
    );
    let path = dir.join("fixture.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `gpuboard serve` on the fake driver, reading owners under the fixture's proc root.
fn serve(dir: &Path, driver: &Path, extra: &str) -> common::Server {
    let fixture = fixture(dir, extra);
    let mut cmd = Command::new(common::gpuboard());
    cmd.env("LD_LIBRARY_PATH", driver)
        .env("GPUBOARD_FAKE_NVML_FIXTURE", &fixture)
        .env("GPUBOARD_HOST_LOCK", dir.join("host.lock"))
        .env("GPUBOARD_HOST_PROC", dir.join("proc"))
        .arg("serve");
    let none = dir.join("no-coordination-file");
    common::Server::spawn(
        cmd,
        &dir.join("data"),
        &[
            "--open-reads",
            "--coordination-file",
            none.to_str().unwrap(),
        ],
    )
}

/// The served snapshot once `owned` of its processes are listed with their owners.
async fn listed(server: &common::Server, owned: usize) -> Snapshot {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let snap: Option<Snapshot> = match common::http()
            .get(format!("{}/v1/snapshot", server.url))
            .send()
            .await
        {
            Ok(r) => r.json().await.ok(),
            Err(_) => None,
        };
        let owned = |s: &Snapshot| {
            s.nodes
                .first()
                .and_then(|n| n.devices.first())
                .is_some_and(|d| {
                    d.telemetry.as_ref().is_some_and(|t| {
                        t.processes.iter().filter(|p| p.owner.is_some()).count() == owned
                    })
                })
        };
        match snap {
            Some(s) if owned(&s) => return s,
            last => assert!(Instant::now() < deadline, "no owners listed: {last:#?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What varies from run to run (this host's name, times, samples so far) made fixed.
fn steady(mut s: Snapshot) -> Snapshot {
    s.taken_at = NOW;
    s.host = None;
    s.events.clear();
    for n in &mut s.nodes {
        n.name = "gpu-host".into();
        for d in &mut n.devices {
            if let Some(t) = &mut d.telemetry {
                t.sampled_at = NOW;
                t.history_utilization.clear();
                t.history_memory_used.clear();
            }
        }
    }
    s
}

fn one_source(snap: Snapshot) -> State {
    let mut st = State::new(
        vec![SourceSlot::new(
            "owners",
            "gpuboard".parse().unwrap(),
            true,
            None,
        )],
        Keymap::builtin(),
        2_000,
        false,
    );
    st.zone = jiff::tz::TimeZone::UTC;
    let _ = update(&mut st, Msg::Tick(NOW));
    feed(&mut st, 0, snap, NOW.0 - 1_000);
    st
}

fn screen(st: &mut State, view: View, w: u16, h: u16) -> String {
    st.size = (w, h);
    show_view(st, view);
    buffer_text(&render(st, &load_strict("default", &[]).unwrap(), w, h).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_detail_names_a_pod_a_slurm_job_and_an_unknown_process() {
    let driver = common::fake_driver_dir();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), driver.path(), "");
    let snap = listed(&server, 2).await;

    let owners: Vec<_> = snap.nodes[0].devices[0]
        .telemetry
        .as_ref()
        .unwrap()
        .processes
        .iter()
        .map(|p| (p.pid, p.owner.clone()))
        .collect();
    assert_eq!(
        owners,
        vec![
            (
                4101,
                Some(ProcessOwner::pod(
                    POD_UID,
                    Some(CONTAINER.into()),
                    Some("containerd")
                ))
            ),
            (
                4102,
                Some(ProcessOwner::SlurmJob {
                    job: 4242,
                    step: Some("0".into())
                })
            ),
            (4103, None),
        ]
    );

    let mut st = one_source(steady(snap));
    insta::assert_snapshot!(
        "gpu_detail_owners_120x30",
        screen(&mut st, View::Detail, 120, 30)
    );
    let overview = screen(&mut st, View::Overview, 120, 30);
    assert!(
        overview.contains("(pod 0a1b2c3d, job 4242)"),
        "unclaimed use says whose:\n{overview}"
    );
    let gpus = screen(&mut st, View::Gpus, 200, 30);
    assert!(gpus.contains("unclaimed:pod 0a1b2c3d"), "{gpus}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_source_names_the_pod_a_process_runs_in() {
    if common::skip_peer("kmock") {
        eprintln!("skipped: GPUBOARD_SKIP_PEERS lists kmock");
        return;
    }
    let cluster = kmock::Cluster::fixtures(&[]);
    let driver = common::fake_driver_dir();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), driver.path(), "");
    listed(&server, 2).await;

    // The console as a binary, over both sources: the endpoint and the cluster.
    let text = overview_over(dir.path(), &server.url, &cluster, "160x30");
    assert!(
        text.contains("(pod web/infer, job 4242)"),
        "the pod by namespace and name:\n{text}"
    );
}

/// A process in a pod that asked for no GPU (`kube-system/coredns-...` of the fixture
/// cluster: a CPU request only, so no claim) is the unclaimed use most worth naming: it is
/// named from the cluster's pods all the same (cgroup v1, cgroupfs driver, Docker).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_in_a_pod_that_asked_for_no_gpu_is_named_too() {
    if common::skip_peer("kmock") {
        eprintln!("skipped: GPUBOARD_SKIP_PEERS lists kmock");
        return;
    }
    let extra = format!(
        r#"
[[devices.processes]]
pid = 4104
used_memory = 536870912
name = "coredns"
cgroup = "11:memory:/kubepods/burstable/pod{COREDNS_UID}/{CONTAINER}\n1:name=systemd:/kubepods/burstable/pod{COREDNS_UID}/{CONTAINER}\n"
"#
    );
    let cluster = kmock::Cluster::fixtures(&[]);
    let driver = common::fake_driver_dir();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), driver.path(), &extra);
    let snap = listed(&server, 3).await;
    let uids: Vec<_> = snap.nodes[0].devices[0]
        .telemetry
        .iter()
        .flat_map(|t| t.processes.iter())
        .filter_map(|p| p.owner.as_ref().and_then(ProcessOwner::pod_uid))
        .collect();
    assert!(uids.contains(&COREDNS_UID), "{uids:?}");

    let text = overview_over(dir.path(), &server.url, &cluster, "220x30");
    assert!(
        text.contains("pod kube-system/coredns-7db6d8ff4d-x2x9k"),
        "the GPU-less pod by namespace and name, not by UID:\n{text}"
    );
    assert!(text.contains("pod web/infer"), "{text}");
}

#[test]
fn a_claimed_process_shows_its_owner_in_gpu_and_claim_detail() {
    let mut snap = lab_snapshot();
    let job = ProcessOwner::SlurmJob {
        job: 77,
        step: Some("batch".into()),
    };
    for d in snap.nodes.iter_mut().flat_map(|n| n.devices.iter_mut()) {
        for p in d.telemetry.iter_mut().flat_map(|t| t.processes.iter_mut()) {
            if p.pid == 3001 {
                p.owner = Some(job.clone());
            }
        }
    }
    let mut st = lab_state();
    feed(&mut st, 0, snap, NOW.0 - 500);
    let detail = screen(&mut st, View::Detail, 160, 40);
    assert!(
        detail.contains("claim 1 (vision, alice: 10G / 0.25 GPU) · Slurm job 77 step batch"),
        "{detail}"
    );
    st.open_claim_named("1").unwrap();
    let text = buffer_text(&render(&st, &load_strict("default", &[]).unwrap(), 160, 40).unwrap());
    assert!(text.contains("Slurm job 77 step batch"), "{text}");
    // Nothing else changed: the fixture without owners draws no owner.
    let plain = screen(&mut console_fixtures::lab_state(), View::Detail, 160, 40);
    assert!(!plain.contains("Slurm job"), "{plain}");
}

#[test]
fn a_pods_claim_detail_lists_the_processes_whose_cgroups_name_it() {
    let owned = |pid: u32, owner: Option<ProcessOwner>| ProcessView {
        pid,
        name: Some("python3".into()),
        used_memory: Some(Bytes::gib(2)),
        claim: None,
        owner,
    };
    let host = Snapshot {
        nodes: vec![NodeView {
            name: "gpu-host".into(),
            devices: vec![DeviceView {
                model: "NVIDIA L4".into(),
                memory_capacity: Some(Bytes::gib(22)),
                unclaimed_memory: Some(Bytes::gib(4)),
                telemetry: Some(DeviceTelemetry {
                    sampled_at: NOW,
                    memory_used: Some(Bytes::gib(4)),
                    processes: vec![
                        owned(4101, Some(ProcessOwner::pod(POD_UID, None, None))),
                        owned(4102, None),
                    ],
                    ..DeviceTelemetry::default()
                }),
                ..DeviceView::default()
            }],
            ..NodeView::default()
        }],
        ..Snapshot::default()
    };
    let node = node_facts(&json!({
        "metadata": {"name": "gpu-host", "uid": "n-1"},
        "status": {"capacity": {"nvidia.com/gpu": "1"}, "allocatable": {"nvidia.com/gpu": "1"}}
    }));
    let pod = pod_facts(&json!({
        "metadata": {"name": "infer", "namespace": "web", "uid": POD_UID},
        "spec": {"nodeName": "gpu-host", "containers": [{"name": "main",
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"}
    }));
    let cluster = decode::snapshot([&node], [&pod], "k8s", "", NOW);
    let id = cluster.claims[0].id;
    let mut st = State::new(
        vec![
            SourceSlot::new("host", SourceKind::Gpuboard, true, None),
            SourceSlot::new("k8s", SourceKind::Kubernetes, false, None),
        ],
        Keymap::builtin(),
        2_000,
        false,
    );
    st.zone = jiff::tz::TimeZone::UTC;
    let _ = update(&mut st, Msg::Tick(NOW));
    feed(&mut st, 0, host, NOW.0 - 1_000);
    feed(&mut st, 1, cluster, NOW.0 - 1_000);

    let gpus = screen(&mut st, View::Gpus, 200, 30);
    assert!(gpus.contains("unclaimed:pod web/infer"), "{gpus}");
    st.open_claim_named(&id.to_string()).unwrap();
    let text = buffer_text(&render(&st, &load_strict("default", &[]).unwrap(), 160, 40).unwrap());
    assert!(text.contains("pid 4101"), "{text}");
    assert!(text.contains("pod web/infer"), "{text}");
    assert!(!text.contains("pid 4102"), "not the pod's: {text}");
}

/// The console's overview, as `status --dump-screen` draws it at `size`, over the endpoint at
/// `url` and the kmock cluster.
fn overview_over(dir: &Path, url: &str, cluster: &kmock::Cluster, size: &str) -> String {
    let out = Command::new(common::gpuboard())
        .env("GPUBOARD_DATA_DIR", dir.join("console"))
        .args(["status", "--dump-screen", "overview", "--size", size])
        .args(["--endpoint", url])
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .output()
        .unwrap();
    common::ok(&out)
}
