//! The time machine over a real `gpuboard serve`: the history routes with the read token
//! (state at a time, changes, seeks, a device's samples from the fake NVML library), kill -9
//! while recording (nothing older than a second is lost, nothing older is damaged), and a
//! full history file (recording stops with a warning on /healthz; claims go on).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use gpuboard::client::{Client, ClientError, SnapshotAt};
use gpuboard::clock::{Clock, SystemClock, Timestamp};
use gpuboard::request::ClaimRequest;
use gpuboard::wire::history::{ChangeKind, Direction, GpuRef, Target};
use serde_json::json;

/// The gpuboard binary: `GPUBOARD_TEST_BIN` when set (a copy, safe from a shared target
/// directory's concurrent rebuilds), else the one cargo built for this test.
fn bin() -> std::path::PathBuf {
    std::env::var_os("GPUBOARD_TEST_BIN")
        .map_or_else(|| env!("CARGO_BIN_EXE_gpuboard").into(), Into::into)
}

fn serve_demo(dir: &Path, extra: &[&str]) -> common::Server {
    let mut cmd = std::process::Command::new(bin());
    cmd.arg("serve")
        .arg("--inventory")
        .arg(common::demo_fleet());
    common::Server::spawn(cmd, dir, extra)
}

fn client(server: &common::Server, token: String) -> Client {
    Client::new(&server.url, Some(token), Duration::from_secs(20)).unwrap()
}

fn req(v: serde_json::Value) -> ClaimRequest {
    ClaimRequest::from_json(&v).unwrap()
}

fn now() -> Timestamp {
    SystemClock.now()
}

/// Polls until `check` gives a value (the recorder writes a commit ~20 ms after it).
async fn until<T, F: std::future::Future<Output = Option<T>>>(what: &str, f: impl Fn() -> F) -> T {
    // Generous for a loaded machine: the first telemetry sample comes within the pace of
    // a few seconds (before the feed waited for held-back telemetry, it took a minute).
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "never saw {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn fixture(dir: &Path) -> std::path::PathBuf {
    let text = r#"driver_version = "550.54.15"

[[devices]]
name = "NVIDIA L4"
uuid = "GPU-l4-0"
memory_total = 24152899584
memory_reserved = 536870912
memory_used = 1073741824
utilization_gpu = 40
utilization_memory = 10
"#;
    let path = dir.join("fixture.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_role_rewinds_a_real_serve() {
    let driver = common::fake_driver_dir();
    let work = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(bin());
    cmd.env("LD_LIBRARY_PATH", driver.path())
        .env("GPUBOARD_FAKE_NVML_FIXTURE", fixture(work.path()))
        .arg("serve");
    let server = common::Server::spawn(cmd, data.path(), &[]);
    let op = client(&server, server.operator_token());
    let read = client(&server, server.read_token());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let gpu = GpuRef {
        node: host.trim().to_string(),
        index: 0,
    };

    let info = until("the first version", || async {
        read.history_info().await.ok().filter(|i| i.from.is_some())
    })
    .await;
    let from = info.from.unwrap();
    assert_eq!(info.keep_days, 30);
    assert!(info.stopped.is_none());

    let before = read.snapshot_at(Timestamp(from.0 - 60_000)).await.unwrap();
    assert_eq!(
        before,
        SnapshotAt::BeforeHistory {
            history_from: Some(from)
        }
    );

    let claim = op
        .claim(&req(json!({"num_gpus": 0.5, "project": "vision"})))
        .await
        .unwrap();
    let id = claim.claim().id;
    let placed = until("the claim's change", || async {
        let changes = read
            .history_changes(from, now(), Some(&Target::Claim(id)), None)
            .await
            .unwrap();
        changes.changes.into_iter().next()
    })
    .await;
    assert_eq!(placed.kind, ChangeKind::ClaimPlaced);
    assert_eq!(placed.gpus, vec![gpu.clone()]);
    let event = placed.event.clone().unwrap();
    assert_eq!(event.action, "claim");
    assert!(
        event.actor.starts_with("admin"),
        "the operator token's actor: {}",
        event.actor
    );

    // The GPU's next change after the history began is that claim.
    let seek = read
        .history_seek(from, Direction::Next, Some(&Target::Gpu(gpu.clone())))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seek.at, placed.at);

    op.release(id).await.unwrap();
    let ended = until("the release", || async {
        read.history_seek(placed.at, Direction::Next, Some(&Target::Claim(id)))
            .await
            .unwrap()
    })
    .await;
    assert!(ended.at > placed.at);
    assert!(ended.version > placed.version);

    // Between the two, the state shows the claim on the GPU, with telemetry of then.
    let SnapshotAt::Shown {
        snapshot,
        at,
        history_from,
    } = read.snapshot_at(placed.at).await.unwrap()
    else {
        panic!("no state at the claim's time")
    };
    assert!(at <= placed.at && at.0 + 300_000 >= placed.at.0);
    assert_eq!(history_from, Some(from));
    assert!(snapshot.claim(id).is_some());
    let device = &snapshot.nodes[0].devices[0];
    assert_eq!(device.holders, vec![id]);
    // The first sample was read before the first version was built, so a little before it.
    let sampled_from = Timestamp(from.0 - 60_000);
    let until_samples = until("a telemetry sample", || async {
        let series = read
            .history_telemetry(&gpu, sampled_from, now())
            .await
            .unwrap();
        (!series.samples.is_empty()).then_some(series)
    })
    .await;
    assert_eq!(until_samples.samples[0].utilization_gpu, Some(40));
    let SnapshotAt::Shown { snapshot, .. } = read.snapshot_at(now()).await.unwrap() else {
        panic!("no state now")
    };
    assert!(snapshot.claim(id).is_none(), "released by now");
    let t = snapshot.nodes[0].devices[0].telemetry.as_ref().unwrap();
    assert_eq!(t.utilization_gpu, Some(40));

    // Bad queries say what is allowed.
    let bad = common::http()
        .get(format!(
            "{}/v1/history/changes?from=yesterday&to=1",
            server.url
        ))
        .bearer_auth(server.read_token())
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await.unwrap().contains("RFC 3339"));
    let none = read
        .history_seek(now(), Direction::Next, Some(&Target::Claim(id)))
        .await
        .unwrap();
    assert_eq!(none, None);
    let anon = common::http()
        .get(format!("{}/v1/history", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(anon.status(), 401, "history needs a token like the rest");
}

/// Every claim acknowledged more than a second before a kill -9 is in the history after
/// it, and everything recorded before still reads back, over three kills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_at_most_the_last_second() {
    let data = tempfile::tempdir().unwrap();
    // Claims acknowledged, and the kill that followed each.
    let mut acked: Vec<(u64, usize)> = Vec::new();
    let mut kills: Vec<Timestamp> = Vec::new();
    for round in 0..3 {
        let mut server = serve_demo(data.path(), &[]);
        let op = client(&server, server.operator_token());
        for i in 0..6 {
            let c = op
                .claim(&req(
                    json!({"num_gpus": 0.25, "project": format!("p{}", i % 2)}),
                ))
                .await
                .unwrap();
            acked.push((c.claim().id.0, kills.len()));
        }
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        // Still claiming when killed: what is in flight may be lost, nothing older.
        let busy = op.clone();
        let writer = tokio::spawn(async move {
            for _ in 0..50 {
                if let Ok(c) = busy.claim(&req(json!({"num_gpus": 0.25}))).await {
                    let _ = busy.release(c.claim().id).await;
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(150 + round * 70)).await;
        kills.push(now());
        server.kill9();
        writer.abort();
        let db = rusqlite::Connection::open(data.path().join("history.sqlite")).unwrap();
        let ok: String = db
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
    }
    let server = serve_demo(data.path(), &[]);
    let read = client(&server, server.read_token());
    // The state recorded as each kill came shows every claim acknowledged over a second
    // before it (none of them was released).
    for (id, round) in &acked {
        let at = kills[*round];
        let SnapshotAt::Shown { snapshot, .. } = read.snapshot_at(at).await.unwrap() else {
            panic!("no history at {at:?}")
        };
        assert!(
            snapshot.claims.iter().any(|c| c.id.0 == *id),
            "claim {id}, acknowledged over a second before the kill at {at:?}, is missing"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_history_stops_recording_not_the_scheduler() {
    let data = tempfile::tempdir().unwrap();
    let server = serve_demo(data.path(), &["--history-max-pages", "24"]);
    let op = client(&server, server.operator_token());
    let http = common::http();
    let mut stopped = None;
    for i in 0..400 {
        let c = op
            .claim(&req(
                json!({"num_gpus": 0.25, "holder": format!("job-{i}-{}", "x".repeat(200))}),
            ))
            .await
            .expect("claims go on while the history is full");
        assert!(matches!(c, gpuboard::client::ClaimOutcome::Placed(_)));
        op.release(c.claim().id).await.unwrap();
        let health = http
            .get(format!("{}/healthz", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        let text = health.text().await.unwrap();
        if text.contains("history: stopped") {
            stopped = Some(text);
            break;
        }
    }
    let text = stopped.expect("the history never filled up");
    assert!(
        text.starts_with("ok\n") && text.contains("disk full"),
        "{text}"
    );
    let info = client(&server, server.read_token())
        .history_info()
        .await
        .unwrap();
    assert!(info.stopped.unwrap().contains("disk full"));
    // It stays stopped (no coming and going with the recorder's retries), claims go on,
    // and the snapshot says so too, so the console shows it beside the source.
    let read = client(&server, server.read_token());
    let deadline = Instant::now() + Duration::from_mins(1);
    let mut warned = None;
    for i in 0.. {
        let c = op
            .claim(&req(
                json!({"num_gpus": 0.25, "holder": format!("after-{i}")}),
            ))
            .await
            .expect("claims go on while the history is full");
        assert!(matches!(c, gpuboard::client::ClaimOutcome::Placed(_)));
        op.release(c.claim().id).await.unwrap();
        let health = http
            .get(format!("{}/healthz", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        let text = health.text().await.unwrap();
        assert!(
            text.contains("history: stopped: disk full"),
            "the stop came and went after {i} more claims: {text}"
        );
        let snap = read.snapshot().await.unwrap();
        let w = snap
            .endpoint
            .warnings
            .iter()
            .find(|w| w.section == "history");
        match (w, warned.as_ref()) {
            (Some(w), _) => {
                assert!(w.found.contains("disk full"), "{w:?}");
                warned = Some(w.clone());
            }
            // Once in the snapshot, the warning stays there.
            (None, Some(before)) => panic!("the history warning {before:?} left the snapshot"),
            (None, None) => {}
        }
        // Enough rounds with the warning seen to tell a steady one from a flapping one.
        if warned.is_some() && i >= 20 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no history warning in the snapshot: {:?}",
            snap.endpoint.warnings
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The console shows it beside the source (`status --dump-screen`, the console's
    // first screen as text).
    let out = server.cli(&["status", "--dump-screen", "overview", "--size", "240x30"]);
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        screen.contains("history `history.sqlite`: recording stopped: disk full"),
        "{screen}"
    );
    // What was recorded before still reads back.
    let from = info.from.unwrap();
    let back = client(&server, server.read_token())
        .snapshot_at(from)
        .await
        .unwrap();
    let SnapshotAt::Shown { snapshot, .. } = back else {
        panic!("no history at {from:?}")
    };
    let gap = |snap: &gpuboard::snapshot::Snapshot| {
        snap.endpoint
            .warnings
            .iter()
            .find(|w| w.found.contains("nothing was recorded from"))
            .cloned()
    };
    assert_eq!(gap(&snapshot), None, "before the stop there is no gap");
    // A state asked for inside the stop is the last one recorded before it, and says so.
    let SnapshotAt::Shown { snapshot, .. } = read.snapshot_at(now()).await.unwrap() else {
        panic!("no history now")
    };
    let w = gap(&snapshot).expect("the state inside the stop names the gap");
    assert!(
        w.found.contains("to now (still stopped)") && w.found.contains("disk full"),
        "{w:?}"
    );
    let err = client(&server, server.read_token())
        .history_changes(Timestamp(5), Timestamp(1), None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Invalid { .. }), "{err:?}");
}
