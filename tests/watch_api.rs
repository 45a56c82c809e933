//! Cheap reads and the delta watch on real sockets: `ETag`/304 and gzip on a real
//! `gpuboard serve`, its delta stream turning the first snapshot into exactly the current
//! one through a claim and a release, and (on an endpoint served in-process with a short
//! heartbeat) resuming at the current version, and every kind of `since` that must resync.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{Server, demo_fleet, http};
use futures::StreamExt;
use gpuboard::client::{Client, Conditional, WatchStream};
use gpuboard::clock::SystemClock;
use gpuboard::endpoint::api::{self, ApiState};
use gpuboard::endpoint::auth::Tokens;
use gpuboard::endpoint::engine::{Engine, EngineConfig, LocalProcesses};
use gpuboard::request::ClaimRequest;
use gpuboard::snapshot::{Snapshot, apply};
use gpuboard::wire::{SnapshotVersion, WatchEvent};
use reqwest::StatusCode;

/// A bounded wait for the next event (a guard, not a timing assertion).
async fn next(stream: &mut WatchStream) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .expect("an event within 30 s")
        .expect("the stream goes on")
        .expect("a readable event")
}

/// A watcher's copy of the endpoint's state.
struct Model {
    snapshot: Snapshot,
    version: SnapshotVersion,
}

impl Model {
    async fn start(stream: &mut WatchStream) -> Model {
        match next(stream).await {
            WatchEvent::Snapshot { version, snapshot } => Model {
                snapshot: *snapshot,
                version,
            },
            other => panic!("the first event is the snapshot, not {other:?}"),
        }
    }

    /// Applies the next event; only deltas and heartbeats are expected here.
    async fn step(&mut self, stream: &mut WatchStream) {
        match next(stream).await {
            WatchEvent::Delta(d) => {
                assert_eq!(
                    d.from, self.version,
                    "deltas come one per version, in order"
                );
                apply(&mut self.snapshot, &d.changes);
                self.version = d.to;
            }
            WatchEvent::Heartbeat { version } => assert_eq!(version, self.version),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Reads deltas until the model is exactly what `GET /v1/snapshot` serves.
    async fn converge(&mut self, stream: &mut WatchStream, client: &Client) {
        for _ in 0..50 {
            let Conditional::Fresh { snapshot, version } =
                client.snapshot_if_changed(None).await.unwrap()
            else {
                panic!("no version known, so a fresh snapshot");
            };
            let version = version.expect("an ETag");
            while self.version.seq < version.seq {
                self.step(stream).await;
            }
            if self.version == version {
                assert_eq!(
                    self.snapshot, *snapshot,
                    "deltas rebuild the served snapshot"
                );
                return;
            }
        }
        panic!("the watch never caught up with the snapshot");
    }
}

fn claim(v: serde_json::Value) -> ClaimRequest {
    ClaimRequest::from_json(&v).unwrap()
}

fn raw_http() -> reqwest::Client {
    gpuboard::client::install_crypto_provider();
    reqwest::Client::builder()
        .no_gzip()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_unchanged_snapshot_is_not_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let token = server.operator_token();
    let get = |etag: Option<String>| {
        let mut req = http()
            .get(format!("{}/v1/snapshot", server.url))
            .bearer_auth(&token);
        if let Some(e) = etag {
            req = req.header("if-none-match", e);
        }
        req.send()
    };
    // Telemetry rounds make new versions every second: retry until one pair lands within one.
    let mut not_modified = false;
    let mut etag = String::new();
    for _ in 0..20 {
        let resp = get(None).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        etag = resp.headers()["etag"].to_str().unwrap().to_string();
        let again = get(Some(etag.clone())).await.unwrap();
        if again.status() == StatusCode::NOT_MODIFIED {
            assert_eq!(again.headers()["etag"].to_str().unwrap(), etag);
            assert!(again.bytes().await.unwrap().is_empty(), "304 has no body");
            not_modified = true;
            break;
        }
        assert_eq!(again.status(), StatusCode::OK);
    }
    assert!(
        not_modified,
        "If-None-Match with the current ETag answers 304"
    );
    let client = Client::new(&server.url, Some(token.clone()), Duration::from_secs(10)).unwrap();
    let made = client
        .claim(&claim(serde_json::json!({"num_gpus": 0.25})))
        .await
        .unwrap();
    let resp = get(Some(etag.clone())).await.unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::OK,
        "the claim made a new version"
    );
    assert_ne!(resp.headers()["etag"].to_str().unwrap(), etag);
    let snap: Snapshot = resp.json().await.unwrap();
    assert!(snap.claim(made.claim().id).is_some());
    // The client's conditional read: a version from another epoch is never current.
    let stale = SnapshotVersion { epoch: 1, seq: 1 };
    let Conditional::Fresh { snapshot, version } =
        client.snapshot_if_changed(Some(stale)).await.unwrap()
    else {
        panic!("another epoch's version is not current");
    };
    assert!(snapshot.claim(made.claim().id).is_some());
    let version = version.expect("the endpoint sends an ETag");
    // Within a telemetry round the same version is not modified (else a newer one comes).
    match client.snapshot_if_changed(Some(version)).await.unwrap() {
        Conditional::NotModified => {}
        Conditional::Fresh { version: v, .. } => assert!(v.unwrap().seq > version.seq),
    }
}

#[tokio::test]
async fn answers_are_gzipped_when_asked_and_plain_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let token = server.operator_token();
    let raw = raw_http();
    let zipped = raw
        .get(format!("{}/v1/snapshot", server.url))
        .bearer_auth(&token)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(zipped.status(), StatusCode::OK);
    assert_eq!(zipped.headers()["content-encoding"], "gzip");
    let body = zipped.bytes().await.unwrap();
    assert_eq!(&body[..2], &[0x1f, 0x8b], "a gzip stream");
    let plain = raw
        .get(format!("{}/v1/snapshot", server.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert!(plain.headers().get("content-encoding").is_none());
    let snap: Snapshot = serde_json::from_slice(&plain.bytes().await.unwrap()).unwrap();
    assert_eq!(snap.schema, 1);
    // The client asks for gzip and reads it transparently.
    let client = Client::new(&server.url, Some(token.clone()), Duration::from_secs(10)).unwrap();
    assert_eq!(client.snapshot().await.unwrap().schema, 1);
    // Event streams are never compressed (they must flush event by event).
    let mut sse = raw
        .get(format!("{}/v1/watch?deltas=1", server.url))
        .bearer_auth(&token)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(sse.headers()["content-type"], "text/event-stream");
    assert!(sse.headers().get("content-encoding").is_none());
    let first = sse.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("event: snapshot"));
}

#[tokio::test]
async fn deltas_turn_the_first_snapshot_into_the_current_one() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let client = Client::new(
        &server.url,
        Some(server.operator_token()),
        Duration::from_secs(10),
    )
    .unwrap();
    let mut stream = client.watch(None).await.unwrap();
    let mut model = Model::start(&mut stream).await;
    let made = client
        .claim(&claim(
            serde_json::json!({"gpu_memory": "10Gi", "project": "vision"}),
        ))
        .await
        .unwrap();
    let id = made.claim().id;
    model.converge(&mut stream, &client).await;
    assert!(
        model.snapshot.claim(id).is_some(),
        "the claim arrived as a delta"
    );
    client.release(id).await.unwrap();
    model.converge(&mut stream, &client).await;
    assert!(
        model.snapshot.claim(id).is_none(),
        "the release arrived as a delta"
    );
    // Resuming from where the model is: no resync, no snapshot, just what follows.
    drop(stream);
    let mut resumed = client.watch(Some(model.version)).await.unwrap();
    model.step(&mut resumed).await;
    model.converge(&mut resumed, &client).await;
}

/// An endpoint served in this process over `engine` (no telemetry, no ticker: its state
/// changes only when the test changes it), with a short heartbeat.
async fn serve_here(dir: &std::path::Path, heartbeat: Duration) -> (Engine, Client) {
    let nodes = gpuboard::inventory::load(&demo_fleet()).unwrap();
    let engine = Engine::in_memory(
        EngineConfig::default(),
        nodes,
        Arc::new(SystemClock),
        Arc::new(LocalProcesses),
    )
    .unwrap();
    let tokens = Tokens::load_or_create(dir).unwrap();
    let state = ApiState::new(engine.clone(), tokens, true).with_heartbeat(heartbeat);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, api::router(state)).await });
    let client = Client::new(&url, None, Duration::from_secs(10)).unwrap();
    (engine, client)
}

#[tokio::test]
async fn a_watcher_at_the_current_version_hears_only_heartbeats_until_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, client) = serve_here(dir.path(), Duration::from_millis(100)).await;
    let mut first = client.watch(None).await.unwrap();
    let model = Model::start(&mut first).await;
    drop(first);
    let mut stream = client.watch(Some(model.version)).await.unwrap();
    for _ in 0..3 {
        assert_eq!(
            next(&mut stream).await,
            WatchEvent::Heartbeat {
                version: model.version
            }
        );
    }
    engine.cordon("g5-a10g", 0, true, "test").await.unwrap();
    let mut model = model;
    loop {
        match next(&mut stream).await {
            WatchEvent::Heartbeat { version } => assert_eq!(version, model.version),
            WatchEvent::Delta(d) => {
                assert_eq!(d.from, model.version);
                apply(&mut model.snapshot, &d.changes);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let device = model
        .snapshot
        .nodes
        .iter()
        .find(|n| n.name == "g5-a10g")
        .unwrap()
        .devices[0]
        .clone();
    assert!(device.cordoned, "the cordon arrived as a delta");
}

/// The first two events after `since`: a resync, then the snapshot.
async fn expect_resync(client: &Client, since: SnapshotVersion) -> SnapshotVersion {
    let mut stream = client.watch(Some(since)).await.unwrap();
    let WatchEvent::Resync { reason } = next(&mut stream).await else {
        panic!("{since} cannot be resumed: resync first");
    };
    assert!(!reason.is_empty());
    match next(&mut stream).await {
        WatchEvent::Snapshot { version, .. } => version,
        other => panic!("a snapshot follows the resync, not {other:?}"),
    }
}

#[tokio::test]
async fn a_since_that_cannot_be_resumed_gets_resync_then_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, client) = serve_here(dir.path(), Duration::from_secs(10)).await;
    let mut stream = client.watch(None).await.unwrap();
    let first = Model::start(&mut stream).await.version;
    drop(stream);
    // Another epoch: the endpoint restarted.
    let restarted = SnapshotVersion {
        epoch: first.epoch.wrapping_add(1),
        seq: first.seq,
    };
    assert_eq!(expect_resync(&client, restarted).await, first);
    // From the future.
    let ahead = SnapshotVersion {
        seq: first.seq + 5,
        ..first
    };
    assert_eq!(expect_resync(&client, ahead).await, first);
    // Older than the ring: make more versions than it keeps (each read builds one).
    for i in 0..300 {
        engine
            .cordon("g5-a10g", 0, i % 2 == 0, "test")
            .await
            .unwrap();
        client.snapshot_if_changed(None).await.unwrap();
    }
    let now = expect_resync(&client, first).await;
    assert!(now.seq > first.seq + 256, "{now}");
    // Garbage: the same, seen on the wire.
    let mut resp = raw_http()
        .get(format!(
            "{}/v1/watch?deltas=1&since=not-a-version",
            client.endpoint().trim_end_matches('/')
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut text = String::new();
    while !text.contains("event: snapshot") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let resync = text.find("event: resync").expect("a resync");
    assert!(resync < text.find("event: snapshot").unwrap(), "{text}");
    assert!(text.contains("not a snapshot version"), "{text}");
}

/// The events of a raw SSE answer, as (event, data) pairs, read until `until` says stop
/// (each read bounded: a guard, not a timing assertion).
async fn raw_events(
    resp: &mut reqwest::Response,
    buf: &mut String,
    mut until: impl FnMut(&str, &str) -> bool,
) {
    loop {
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.strip_prefix(' ').unwrap_or(v).to_string())
                    .unwrap_or_default()
            };
            if until(&field("event:"), &field("data:")) {
                return;
            }
        }
        let chunk = tokio::time::timeout(Duration::from_secs(30), resp.chunk())
            .await
            .expect("an event within 30 s")
            .unwrap()
            .expect("the stream goes on");
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test]
async fn a_watcher_from_before_per_project_changes_gets_whole_lists_it_can_read() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, client) = serve_here(dir.path(), Duration::from_mins(1)).await;
    // An old console: `deltas=1` without `format=2`.
    let mut old = raw_http()
        .get(format!(
            "{}/v1/watch?deltas=1",
            client.endpoint().trim_end_matches('/')
        ))
        .send()
        .await
        .unwrap();
    let mut buf = String::new();
    let mut old_model: Option<Snapshot> = None;
    raw_events(&mut old, &mut buf, |event, data| {
        assert_eq!(event, "snapshot");
        let snap: Snapshot = serde_json::from_str(data).unwrap();
        old_model = Some(snap);
        true
    })
    .await;
    let mut old_snap = old_model.unwrap();
    // This build's own watcher.
    let mut stream = client.watch(None).await.unwrap();
    let mut model = Model::start(&mut stream).await;

    for (gib, project) in [(4, "vision"), (6, "nlp"), (2, "vision")] {
        engine
            .submit(
                claim(serde_json::json!({"gpu_memory": format!("{gib}Gi"), "project": project})),
                "test",
            )
            .await
            .unwrap();
    }
    engine.set_share("nlp", 300, "test").await.unwrap();
    let Conditional::Fresh { snapshot, version } = client.snapshot_if_changed(None).await.unwrap()
    else {
        panic!("a fresh snapshot");
    };
    let (truth, version) = (*snapshot, version.unwrap());

    // The old reader: only changes it knows, ending exactly at the served snapshot.
    raw_events(&mut old, &mut buf, |event, data| {
        if event != "delta" {
            return false;
        }
        for op in [
            r#""op":"project""#,
            r#""op":"project_removed""#,
            r#""op":"revision""#,
        ] {
            assert!(!data.contains(op), "an old reader got {op}: {data}");
        }
        let body: gpuboard::wire::DeltaBody = serde_json::from_str(data).unwrap();
        apply(&mut old_snap, &body.changes);
        body.to == version
    })
    .await;
    assert_eq!(old_snap, truth, "whole lists rebuild the served snapshot");

    // This build's reader: per-project changes under a short header.
    let mut keyed = false;
    while model.version.seq < version.seq {
        match next(&mut stream).await {
            WatchEvent::Delta(d) => {
                assert_eq!(d.from, model.version);
                keyed |= d.changes.iter().any(gpuboard::snapshot::keyed_only);
                apply(&mut model.snapshot, &d.changes);
                model.version = d.to;
            }
            WatchEvent::Heartbeat { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(model.snapshot, truth);
    assert!(
        keyed,
        "per-project changes or short headers reached this build"
    );
}

/// A watcher that asks `deflate=1` gets one deflate stream (said in its header) that
/// inflates to the events as they come, a fraction of their plain size (the heartbeats
/// repeat); one that does not ask gets plain text, as before.
#[tokio::test]
async fn a_watcher_that_asks_gets_the_stream_compressed() {
    use gpuboard::wire::deflate::{HEADER, Inflater};
    let dir = tempfile::tempdir().unwrap();
    let (engine, client) = serve_here(dir.path(), Duration::from_millis(100)).await;
    let base = client.endpoint().trim_end_matches('/').to_string();
    let plain = raw_http()
        .get(format!("{base}/v1/watch?deltas=1&format=2"))
        .send()
        .await
        .unwrap();
    assert!(plain.headers().get(HEADER).is_none());
    let mut packed = raw_http()
        .get(format!("{base}/v1/watch?deltas=1&format=2&deflate=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(packed.headers().get(HEADER).unwrap(), "1");
    let mut z = Inflater::default();
    let (mut text, mut sent) = (String::new(), 0);
    let mut cordoned = false;
    while text.matches("event: heartbeat").count() < 10 || !text.contains("event: delta") {
        let chunk = tokio::time::timeout(Duration::from_secs(30), packed.chunk())
            .await
            .expect("a chunk within 30 s")
            .unwrap()
            .expect("the stream goes on");
        sent += chunk.len();
        text.push_str(&String::from_utf8(z.feed(&chunk).unwrap()).unwrap());
        if !cordoned && text.matches("event: heartbeat").count() >= 3 {
            engine.cordon("g5-a10g", 0, true, "test").await.unwrap();
            cordoned = true;
        }
    }
    assert!(text.starts_with("event: snapshot"), "{text:.200}");
    assert!(
        sent * 2 < text.len(),
        "{sent} bytes sent for {}",
        text.len()
    );
    let delta = text.split("event: delta").nth(1).unwrap();
    assert!(delta.contains(r#""cordoned":true"#), "{delta:.300}");
}
