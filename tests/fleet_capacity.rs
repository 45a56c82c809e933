//! `GET /v1/capacity` on real `gpuboard serve` processes (127.0.0.1, free ports): it says
//! what the snapshot says of capacity (placement on either gives the same answer), answers
//! 304 while its tag is current and a new tag once a claim changed it; and a fleet claim
//! across an endpoint that predates the route (a relay answering 404 for it, as an old
//! serve does) reads that endpoint's snapshot instead and still lands.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::relay::{forward, read_request};
use common::{Server, demo_fleet, http, ok, one_node_inventory};
use gpuboard::client::Client;
use gpuboard::request::ClaimRequest;
use gpuboard::snapshot::Snapshot;
use gpuboard::sources::fleet_of_snapshot;
use gpuboard::wire::capacity::CapacitySummary;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn request(v: Value) -> ClaimRequest {
    ClaimRequest::from_json(&v).unwrap()
}

/// `GET /v1/capacity` with `If-None-Match: tag` when given: status, tag, body.
async fn capacity(server: &Server, tag: Option<&str>) -> (StatusCode, String, Vec<u8>) {
    let mut req = http()
        .get(format!("{}/v1/capacity", server.url))
        .bearer_auth(server.read_token());
    if let Some(t) = tag {
        req = req.header("if-none-match", t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let tag = resp
        .headers()
        .get("etag")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, tag, resp.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn the_capacity_is_the_snapshots_and_answers_304_until_a_claim_changes_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let client = Client::new(
        &server.url,
        Some(server.operator_token()),
        Duration::from_secs(20),
    )
    .unwrap();
    for r in [
        json!({"gpu_memory": "10Gi", "project": "vision"}),
        json!({"num_gpus": 1, "project": "nlp"}),
        json!({"gpu-memory": "4Gi", "gpu.shared": 2, "project": "speech"}),
        json!({"num_gpus": 0.3, "project": "vision"}),
    ] {
        client.claim(&request(r)).await.unwrap();
    }
    let snap: Snapshot = client.snapshot().await.unwrap();
    let node = snap.nodes[0].name.clone();
    client.cordon(&node, 1).await.unwrap();
    let snap: Snapshot = client.snapshot().await.unwrap();

    let (status, tag, body) = capacity(&server, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(tag.starts_with('"') && tag.len() > 2, "a quoted tag: {tag}");
    let cap: CapacitySummary = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        cap,
        CapacitySummary::of(&snap),
        "the capacity of the same revision"
    );
    // Smaller than the snapshot; it does not grow with claims, accounts or events.
    assert!(
        body.len() < serde_json::to_vec(&snap).unwrap().len(),
        "{} bytes",
        body.len()
    );

    // Placement on the capacity answers as on the snapshot, fits and refusals alike.
    let from_snapshot = fleet_of_snapshot(&snap).unwrap();
    let from_capacity = cap.fleet().unwrap();
    for r in [
        json!({"gpu_memory": "1Gi"}),
        json!({"gpu_memory": "70Gi"}),
        json!({"num_gpus": 1}),
        json!({"num_gpus": 2}),
        json!({"num_gpus": 0.5}),
        json!({"gpu-memory": "8Gi", "gpu.shared": 2}),
        json!({"koordinator.sh/gpu": 40}),
        json!({"nvidia.com/gpu": 8}),
        json!({"gpu_memory": "1Gi", "node": node, "cpus": 2}),
    ] {
        let req = request(r.clone());
        match (from_snapshot.plan(&req), from_capacity.plan(&req)) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{r}"),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("{r}: snapshot {a:?}, capacity {b:?}"),
        }
    }

    // Unchanged: 304 with the same tag, nothing sent.
    let (status, again, body) = capacity(&server, Some(&tag)).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert_eq!(again, tag);
    assert!(body.is_empty());
    // A claim changes it: 200 with another tag.
    client
        .claim(&request(json!({"gpu_memory": "2Gi"})))
        .await
        .unwrap();
    let (status, changed, body) = capacity(&server, Some(&tag)).await;
    assert_eq!(status, StatusCode::OK);
    assert_ne!(changed, tag);
    let after: CapacitySummary = serde_json::from_slice(&body).unwrap();
    assert!(after.revision > cap.revision);
}

/// A relay in front of `upstream` that answers `GET /v1/capacity` 404 with the JSON an
/// endpoint from before the route answers, and forwards everything else; it records
/// every request line.
fn old_serve(upstream: &str) -> (String, Arc<Mutex<Vec<String>>>) {
    let upstream = upstream.trim_start_matches("http://").to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let (upstream, log) = (upstream.clone(), Arc::clone(&log));
            std::thread::spawn(move || {
                let Some((head, body)) = read_request(&mut conn) else {
                    return;
                };
                let line = head.lines().next().unwrap_or_default().to_string();
                log.lock().unwrap().push(line.clone());
                if line.starts_with("GET /v1/capacity ") {
                    let body = r#"{"error":"not_found","detail":"no such route; the API is under /v1 (see README, API section)"}"#;
                    let _ = write!(
                        conn,
                        "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                } else {
                    forward(&mut conn, &upstream, &head, &body);
                }
            });
        }
    });
    (url, seen)
}

/// A serve in `root/name` with one node of `count` A100s of `memory` each.
fn start_one_node(root: &Path, name: &str, memory: &str, count: u32) -> Server {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let inv = one_node_inventory(
        root,
        &format!("host-{name}"),
        "NVIDIA A100-SXM4-80GB",
        memory,
        count,
    );
    Server::start(&dir, &inv, &[])
}

/// Writes `root/config.toml` naming endpoints a and b (at `urls`, with the token files of
/// `servers`); returns its path.
fn two_endpoint_config(root: &Path, urls: [&str; 2], servers: [&Server; 2]) -> PathBuf {
    let config = root.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[endpoints]]\nname = \"a\"\nurl = \"{}\"\ntoken_file = \"{}\"\n\
             [[endpoints]]\nname = \"b\"\nurl = \"{}\"\ntoken_file = \"{}\"\n",
            urls[0],
            servers[0].dir.join("operator.token").display(),
            urls[1],
            servers[1].dir.join("operator.token").display()
        ),
    )
    .unwrap();
    config
}

/// `gpuboard claim --memory MEMORY --json` across `config`, its cache in `root/cache`.
fn fleet_claim(root: &Path, config: &Path, memory: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args(["claim", "--memory", memory, "--json", "--config"])
        .arg(config)
        .env("GPUBOARD_CACHE_DIR", root.join("cache"))
        .env_remove("GPUBOARD_TOKEN")
        .env_remove("GPUBOARD_ENDPOINT")
        .env_remove("GPUBOARD_DATA_DIR")
        .output()
        .unwrap();
    serde_json::from_str(&ok(&out)).unwrap()
}

#[test]
fn a_fleet_claim_reads_the_snapshot_of_an_endpoint_without_the_route() {
    let root = tempfile::tempdir().unwrap();
    // Only b (behind the "old serve" relay) has room for 20 GiB.
    let a = start_one_node(root.path(), "a", "8GiB", 1);
    let b = start_one_node(root.path(), "b", "80GiB", 1);
    let (relay, seen) = old_serve(&b.url);
    let config = two_endpoint_config(root.path(), [&a.url, &relay], [&a, &b]);
    // Twice: from an empty cache, then with b's snapshot cached (304).
    for _ in 0..2 {
        let v = fleet_claim(root.path(), &config, "20GiB");
        assert_eq!(v["endpoint"], "b", "{v}");
    }
    let seen = seen.lock().unwrap().clone();
    let capacity_reads = seen
        .iter()
        .filter(|l| l.starts_with("GET /v1/capacity "))
        .count();
    let snapshot_reads = seen
        .iter()
        .filter(|l| l.starts_with("GET /v1/snapshot "))
        .count();
    assert!(capacity_reads >= 2, "{seen:?}");
    assert!(snapshot_reads >= 2, "the snapshot instead: {seen:?}");
    // a, which has the route, was placed on through it: its capacity is in the one file
    // that holds every endpoint's.
    let file = std::fs::read(root.path().join("cache").join("capacities.json")).unwrap();
    let cached: Vec<Value> = serde_json::from_slice(&file).unwrap();
    assert!(
        cached
            .iter()
            .any(|e| e["url"].as_str().unwrap().starts_with(&a.url) && e["etag"].is_string()),
        "{cached:?}"
    );
}

#[test]
fn a_cached_capacity_this_build_cannot_read_is_read_again_whole() {
    let root = tempfile::tempdir().unwrap();
    let a = start_one_node(root.path(), "a", "80GiB", 2);
    let b = start_one_node(root.path(), "b", "80GiB", 2);
    let config = two_endpoint_config(root.path(), [&a.url, &b.url], [&a, &b]);
    let cache = root.path().join("cache").join("capacities.json");
    let claim = || fleet_claim(root.path(), &config, "1GiB");
    claim();
    // Each round: both tags kept, both capacities replaced by JSON this build cannot place
    // on (another shape; then this shape of another schema). The endpoint the last claim
    // did not land on answers 304 for it; it is read again whole and kept.
    let unreadable = [
        json!({"schema": 99, "shape": "unknown"}),
        json!({"schema": 99, "policy": "binpack", "revision": 1, "nodes": []}),
    ];
    for capacity in unreadable {
        let mut cached: Vec<Value> =
            serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
        assert_eq!(cached.len(), 2, "{cached:?}");
        for e in &mut cached {
            e["capacity"] = capacity.clone();
        }
        std::fs::write(&cache, serde_json::to_vec(&cached).unwrap()).unwrap();
        let v = claim();
        assert!(v["id"].is_u64(), "{v}");
        let cached: Vec<Value> = serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
        assert_eq!(cached.len(), 2, "{cached:?}");
        for e in &cached {
            assert_eq!(e["capacity"]["schema"], 1, "after {capacity}: {e}");
            assert_eq!(
                e["capacity"]["nodes"][0]["devices"]
                    .as_array()
                    .unwrap()
                    .len(),
                2
            );
        }
    }
}
