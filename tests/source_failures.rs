//! Peers that answer garbage, hang, refuse or want credentials, on real sockets: each gives
//! its own error, within the timeout, and nothing panics.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use common::{Reply, free_port, serve};
use gpuboard::sources::error::SourceError;
use gpuboard::sources::prometheus::{PrometheusConfig, PrometheusSource};
use gpuboard::sources::ray::{RayConfig, RaySource};

const VERSION: &str =
    r#"{"version": "4", "ray_version": "2.60.0", "ray_commit": "x", "session_name": "s"}"#;

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(common::fixture(path)).unwrap()
}

fn json(body: impl Into<String>) -> Reply {
    Reply::Full(200, "application/json", body.into().into_bytes())
}

async fn ray_against(routes: Vec<(&'static str, Reply)>, token: Option<&str>) -> SourceError {
    let url = serve(routes).await;
    let mut config = RayConfig::new(url);
    config.timeout = Duration::from_millis(500);
    config.token = token.map(str::to_string);
    let source = RaySource::new(config).unwrap();
    // However the peer misbehaves, the fetch ends within its timeout (with slack for CI).
    tokio::time::timeout(Duration::from_secs(10), source.fetch())
        .await
        .expect("fetch must not hang")
        .unwrap_err()
}

/// What a Prometheus source reading a server of `routes` fails with.
async fn prometheus_against(routes: Vec<(&'static str, Reply)>) -> SourceError {
    let url = serve(routes).await;
    PrometheusSource::new(PrometheusConfig::new(url))
        .unwrap()
        .fetch()
        .await
        .unwrap_err()
}

/// The dashboard's real answers, with one replaced.
fn ray_routes(path: &'static str, reply: Reply) -> Vec<(&'static str, Reply)> {
    let mut routes = vec![
        ("/api/version", json(VERSION)),
        (
            "/nodes",
            Reply::Full(200, "application/json", fixture("ray/nodes_summary.json")),
        ),
        (
            "/api/cluster_status",
            Reply::Full(200, "application/json", fixture("ray/cluster_status.json")),
        ),
        (
            "/api/v0/tasks",
            Reply::Full(200, "application/json", fixture("ray/tasks.json")),
        ),
        (
            "/api/v0/actors",
            Reply::Full(200, "application/json", fixture("ray/actors.json")),
        ),
        (
            "/api/v0/placement_groups",
            Reply::Full(
                200,
                "application/json",
                fixture("ray/placement_groups.json"),
            ),
        ),
    ];
    routes.retain(|(p, _)| *p != path);
    routes.push((path, reply));
    routes
}

#[tokio::test]
async fn ray_served_from_captures_reads_whole() {
    let url = serve(ray_routes("/unused", json("{}"))).await;
    let source = RaySource::new(RayConfig::new(url)).unwrap();
    let s = source.fetch().await.unwrap();
    assert_eq!(s.endpoint.kind, "ray");
    assert_eq!(s.claims.len(), 7);
}

#[tokio::test]
async fn truncated_json_is_a_decode_error() {
    let nodes = fixture("ray/nodes_summary.json");
    let cut = nodes[..nodes.len() / 2].to_vec();
    let e = ray_against(
        ray_routes("/nodes", Reply::Full(200, "application/json", cut)),
        None,
    )
    .await;
    let SourceError::Decode { url, what } = &e else {
        panic!("{e:?}")
    };
    assert!(url.contains("/nodes?view=summary"), "{url}");
    assert!(what.starts_with("truncated JSON"), "{what}");
    // The connection closes before the promised length: the answer was cut off.
    let e = ray_against(
        ray_routes("/nodes", Reply::CutOff(nodes[..100].to_vec(), nodes.len())),
        None,
    )
    .await;
    assert!(
        matches!(e, SourceError::Decode { ref what, .. } if what.contains("cut off")),
        "{e:?}"
    );
}

#[tokio::test]
async fn wrong_types_name_the_field() {
    // In an optional answer: the source stays live, the task is a warning naming the field.
    let tasks = String::from_utf8(fixture("ray/tasks.json"))
        .unwrap()
        .replacen(
            "\"task_id\": \"32d950ec0ccf9d2affffffffffffffffffffffff01000000\"",
            "\"task_id\": 42",
            1,
        );
    let url = serve(ray_routes("/api/v0/tasks", json(tasks))).await;
    let s = RaySource::new(RayConfig::new(url))
        .unwrap()
        .fetch()
        .await
        .unwrap();
    assert!(!s.nodes.is_empty());
    let w = &s.endpoint.warnings;
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].section, "/api/v0/tasks");
    assert_eq!(w[0].path, "data.result.result[0].task_id");
    assert_eq!(w[0].found, "invalid type: integer `42`, expected a string");
    // In the core: the source is down, naming the field.
    let nodes = String::from_utf8(fixture("ray/nodes_summary.json"))
        .unwrap()
        .replacen("\"summary\": [", "\"summary\": 7, \"x\": [", 1);
    let e = ray_against(ray_routes("/nodes", json(nodes)), None).await;
    let SourceError::Decode { what, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(
        what,
        "`data.summary`: expected an array, found the number 7"
    );
    assert!(e.to_string().contains("/nodes"), "{e}");
}

#[tokio::test]
async fn html_is_not_a_ray_dashboard_nor_prometheus() {
    let page =
        b"<!doctype html><html><head><title>Welcome to nginx!</title></head></html>".to_vec();
    let e = ray_against(
        vec![("*", Reply::Full(200, "text/html", page.clone()))],
        None,
    )
    .await;
    assert!(matches!(e, SourceError::NotRayDashboard { .. }), "{e:?}");
    assert!(e.to_string().contains("Welcome to nginx"), "{e}");
    // A JSON API that is not Ray's.
    let e = ray_against(
        vec![("*", json(r#"{"status": "success", "data": {}}"#))],
        None,
    )
    .await;
    assert!(matches!(e, SourceError::NotRayDashboard { .. }), "{e:?}");

    let e = prometheus_against(vec![(
        "*",
        Reply::Full(200, "text/html; charset=utf-8", page),
    )])
    .await;
    assert!(matches!(e, SourceError::NotPrometheus { .. }), "{e:?}");
    // A Ray dashboard is not Prometheus either.
    let e = prometheus_against(vec![(
        "*",
        json(r#"{"result": true, "msg": "", "data": {}}"#),
    )])
    .await;
    assert!(
        matches!(e, SourceError::NotPrometheus { ref why, .. } if why.contains("status")),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_peer_that_never_answers_times_out() {
    let started = Instant::now();
    let e = ray_against(vec![("*", Reply::Silent)], None).await;
    assert!(
        matches!(e, SourceError::Timeout { timeout, .. } if timeout == Duration::from_millis(500)),
        "{e:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // Hanging on a later request still ends within the one fetch deadline.
    let e = ray_against(ray_routes("/api/v0/actors", Reply::Silent), None).await;
    assert!(matches!(e, SourceError::Timeout { .. }), "{e:?}");

    let url = serve(vec![("*", Reply::Silent)]).await;
    let mut config = PrometheusConfig::new(url);
    config.timeout = Duration::from_millis(300);
    let e = PrometheusSource::new(config)
        .unwrap()
        .fetch()
        .await
        .unwrap_err();
    assert!(matches!(e, SourceError::Timeout { .. }), "{e:?}");
}

#[tokio::test]
async fn unauthorized_and_forbidden_say_so() {
    let e = ray_against(
        vec![(
            "*",
            Reply::Full(
                401,
                "text/plain",
                b"Unauthorized: Missing authentication token".to_vec(),
            ),
        )],
        None,
    )
    .await;
    let SourceError::Unauthorized {
        status, message, ..
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(*status, 401);
    assert!(message.contains("set a token"), "{message}");
    assert!(
        message.contains("Missing authentication token"),
        "{message}"
    );
    let e = ray_against(
        vec![(
            "*",
            Reply::Full(
                403,
                "text/plain",
                b"Forbidden: Invalid authentication token".to_vec(),
            ),
        )],
        Some("wrong"),
    )
    .await;
    assert!(
        matches!(e, SourceError::Unauthorized { status: 403, .. }),
        "{e:?}"
    );
}

#[tokio::test]
async fn nothing_listening_is_refused() {
    let port = free_port();
    let source = RaySource::new(RayConfig::new(format!("http://127.0.0.1:{port}"))).unwrap();
    let e = source.fetch().await.unwrap_err();
    assert!(matches!(e, SourceError::Refused { .. }), "{e:?}");
    assert!(
        e.to_string().contains("is the Ray dashboard running"),
        "{e}"
    );
}

#[tokio::test]
async fn ray_and_prometheus_errors_in_their_own_words() {
    let e = ray_against(
        ray_routes(
            "/nodes",
            json(r#"{"result": false, "msg": "Failed to get nodes: GCS unavailable", "data": {}}"#),
        ),
        None,
    )
    .await;
    assert!(
        matches!(e, SourceError::Peer { ref message, .. } if message == "Failed to get nodes: GCS unavailable"),
        "{e:?}"
    );
    let e = prometheus_against(vec![
        (
            "/api/v1/status/buildinfo",
            Reply::Full(
                200,
                "application/json",
                fixture("prometheus/buildinfo.json"),
            ),
        ),
        (
            "/api/v1/query",
            Reply::Full(
                400,
                "application/json",
                br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#.to_vec(),
            ),
        ),
    ])
    .await;
    assert!(
        matches!(e, SourceError::Http { status: 400, ref message, .. } if message.contains("parse error")),
        "{e:?}"
    );
}

#[tokio::test]
async fn status_json_and_overview_carry_the_warnings() {
    // A dashboard whose `pgDemand` holds a shape no reader knows: the source stays ok.
    let status = String::from_utf8(fixture("ray/cluster_status.json"))
        .unwrap()
        .replacen(
            "\"pgDemand\": []",
            "\"pgDemand\": [[{\"bundles\": 7}, 1]]",
            1,
        );
    assert!(status.contains("\"bundles\": 7"));
    let url = serve(ray_routes("/api/cluster_status", json(status))).await;
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_gpuboard"))
                .args(&args)
                .env_remove("GPUBOARD_TOKEN")
                .env_remove("GPUBOARD_ENDPOINT")
                .output()
                .unwrap()
        })
    };
    let out = run(vec![
        "status".into(),
        "--once".into(),
        "--json".into(),
        "--ray".into(),
        url.clone(),
    ])
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ray = doc["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "ray")
        .unwrap();
    assert_eq!(ray["health"], "ok");
    let w = ray["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0]["section"], "/api/cluster_status");
    assert_eq!(
        w[0]["path"],
        "data.clusterStatus.loadMetricsReport.pgDemand[0][0].bundles"
    );
    assert_eq!(w[0]["left_out"], "this pending demand");
    assert!(!ray["snapshot"]["nodes"].as_array().unwrap().is_empty());

    let out = run(vec![
        "status".into(),
        "--dump-screen".into(),
        "overview".into(),
        "--size".into(),
        "200x30".into(),
        "--ray".into(),
        url,
    ])
    .await
    .unwrap();
    let screen = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        screen.contains(
            "1 part unread: /api/cluster_status `data.clusterStatus.loadMetricsReport.pgDemand[0][0].bundles`"
        ),
        "{screen}"
    );
}
