//! `gpuboard record --kind kubernetes` against kmock's emulator (`tests/peers/kmock_cluster.py`):
//! it reads the cluster through its kubeconfig, records what it sees into its own history,
//! and the history's `GET /v1/snapshot?at=` shows a pod pending before its binding and
//! bound after it. Skipped only with `GPUBOARD_SKIP_PEERS=kmock`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::kmock;

use std::process::Command;
use std::time::{Duration, Instant};

use gpuboard::client::{Client, SnapshotAt};
use gpuboard::clock::{Clock, SystemClock, Timestamp};
use gpuboard::snapshot::{ClaimState, Snapshot};
use reqwest::Method;
use serde_json::json;

/// Generous: two cores shared with six other builders.
const PATIENCE: Duration = Duration::from_secs(90);

/// The claim of pod `ml/pending-big`, as a snapshot shows it.
fn pending_big(s: &Snapshot) -> Option<(ClaimState, Option<String>)> {
    s.claims
        .iter()
        .find(|c| c.project == "ml" && c.holder.as_deref() == Some("pending-big"))
        .map(|c| (c.state, c.node.clone()))
}

/// The recorded state at `at`.
async fn at(client: &Client, at: Timestamp) -> Snapshot {
    match client.snapshot_at(at).await.unwrap() {
        SnapshotAt::Shown { snapshot, .. } => *snapshot,
        other @ SnapshotAt::BeforeHistory { .. } => {
            panic!("no recorded state at {at:?}: {other:?}")
        }
    }
}

/// Polls the recorder's latest snapshot until `done` holds of it; the time it was seen.
async fn until(client: &Client, what: &str, done: impl Fn(&Snapshot) -> bool) -> Timestamp {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(s) = client.snapshot().await
            && done(&s)
        {
            return SystemClock.now();
        }
        assert!(Instant::now() < deadline, "record never showed {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_keeps_a_pods_binding_in_the_history() {
    if common::skip_peer("kmock") {
        eprintln!("skipped: GPUBOARD_SKIP_PEERS lists kmock");
        return;
    }
    let cluster = kmock::Cluster::fixtures(&[]);
    let data = tempfile::tempdir().unwrap();
    let log = data.path().join("record.log");
    let record = common::start_record(
        &[
            "--kind".as_ref(),
            "kubernetes".as_ref(),
            "--every-ms".as_ref(),
            "300".as_ref(),
            "--kubeconfig".as_ref(),
            cluster.kubeconfig().as_os_str(),
            "--kube-context".as_ref(),
            "kmock".as_ref(),
        ],
        &data.path().join("history"),
        &log,
    );
    assert!(
        record.said.contains("recording kubernetes"),
        "{}",
        record.said
    );
    let url = record.url.clone();
    let client = Client::new(&url, None, Duration::from_secs(10)).unwrap();

    let before = until(&client, "ml/pending-big pending", |s| {
        s.endpoint.kind == "kubernetes"
            && pending_big(s).is_some_and(|(state, _)| state == ClaimState::Pending)
    })
    .await;
    cluster
        .api(
            Method::PATCH,
            "/api/v1/namespaces/ml/pods/pending-big",
            Some(
                json!({"spec": {"nodeName": "plain-d"}, "status": {"phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True"}]}}),
            ),
        )
        .await;
    let after = until(&client, "ml/pending-big bound", |s| {
        pending_big(s).is_some_and(|(state, _)| state == ClaimState::Placed)
    })
    .await;

    // The history, not just the latest: pending then, bound now.
    assert_eq!(
        pending_big(&at(&client, before).await),
        Some((ClaimState::Pending, None))
    );
    assert_eq!(
        pending_big(&at(&client, after).await),
        Some((ClaimState::Placed, Some("plain-d".to_string())))
    );
}

#[test]
fn record_refuses_a_url_for_kubernetes_and_a_kubeconfig_for_the_others() {
    let data = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(common::gpuboard())
            .arg("record")
            .args(args)
            .arg("--data-dir")
            .arg(data.path())
            .args(["--listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} ran");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let said = run(&["--kind", "kubernetes", "--url", "http://127.0.0.1:1"]);
    assert!(said.contains("--kubeconfig"), "{said}");
    let said = run(&["--kind", "ray", "--kubeconfig", "/nonexistent"]);
    assert!(said.contains("--kind kubernetes only"), "{said}");
    let said = run(&["--kind", "slurm"]);
    assert!(
        said.contains("--url is required for --kind slurm"),
        "{said}"
    );
    let said = run(&["--kind", "gpuboard", "--url", "http://127.0.0.1:1"]);
    assert!(
        said.contains("ray, slurm, boinc, prometheus or kubernetes"),
        "{said}"
    );
}
