//! The HTTP API against a real `gpuboard serve` process on 127.0.0.1: every status code
//! with its body, auth, bad input, a fuzz of random bodies, watch, leases and dead owners.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::{Server, demo_fleet, http};
use rand::{RngExt, SeedableRng};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

struct Api {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
}

impl Api {
    fn new(server: &Server, token: Option<String>) -> Api {
        Api {
            http: http(),
            url: server.url.clone(),
            token,
        }
    }

    async fn send(&self, method: Method, path: &str, body: Option<&str>) -> (StatusCode, Value) {
        let (status, _, v) = self.send_full(method, path, body).await;
        (status, v)
    }

    async fn send_full(
        &self,
        method: Method,
        path: &str,
        body: Option<&str>,
    ) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.url));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, headers, v)
    }

    async fn snapshot(&self) -> Value {
        let (s, v) = self.send(Method::GET, "/v1/snapshot", None).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v
    }
}

fn assert_error(v: &Value, error: &str) {
    assert_eq!(v["error"], error, "{v}");
    assert!(
        v["detail"].as_str().is_some_and(|d| d.len() > 10),
        "a detail in words: {v}"
    );
}

#[tokio::test]
async fn every_status_code_with_its_body() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let api = Api::new(&server, Some(server.operator_token()));

    // 201 placed, with where it went.
    let (s, h, v) = api
        .send_full(
            Method::POST,
            "/v1/claims",
            Some(r#"{"gpu_memory": "20Gi", "project": "vision", "holder": "ana", "node": "g5-a10g"}"#),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let id = v["id"].as_u64().unwrap();
    assert_eq!(v["state"], "placed");
    assert_eq!(v["node"], "g5-a10g");
    assert_eq!(v["project"], "vision");
    assert_eq!(v["shares"].as_array().unwrap().len(), 1);
    assert!(v["memory_reserved"].as_u64().unwrap() >= 20 << 30);
    assert_eq!(h["location"], format!("/v1/claims/{id}"));

    // 409 does not fit now: the rest of the A10G node's GPUs pinned and full.
    let full = r#"{"nvidia.com/gpu": 4, "node": "g5-a10g"}"#;
    let (s, v) = api.send(Method::POST, "/v1/claims", Some(full)).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_error(&v, "does_not_fit");
    assert_eq!(v["infeasible"], false);
    let lines = v["reasons"].as_array().unwrap();
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].as_str().unwrap().starts_with("node g5-a10g:"),
        "{v}"
    );
    assert_eq!(v["no_fit"]["nodes"][0]["node"], "g5-a10g");

    // 409 infeasible: more memory than any GPU has.
    let (s, v) = api
        .send(
            Method::POST,
            "/v1/claims",
            Some(r#"{"gpu_memory": "200Gi"}"#),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(v["infeasible"], true, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("too small"), "{v}");

    // 202 pending: the same request, asked to wait.
    let (s, v) = api
        .send(
            Method::POST,
            "/v1/claims",
            Some(r#"{"nvidia.com/gpu": 4, "node": "g5-a10g", "wait": true}"#),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["state"], "pending");
    let pending = v["id"].as_u64().unwrap();
    assert!(!v["pending_reasons"].as_array().unwrap().is_empty(), "{v}");

    // 422 with the rule, for each kind of invalid body.
    for (body, rule, number, field) in [
        (
            r#"{"gpu_memory": "1Gi", "colour": "red"}"#,
            "unknown-field",
            8,
            json!("colour"),
        ),
        (
            r#"{"num_gpus": 0.5, "gpu_memory": "1Gi"}"#,
            "num-gpus-with-gpu-memory",
            5,
            Value::Null,
        ),
        (
            r#"{"num_gpus": 1.5}"#,
            "fraction-above-one",
            6,
            json!("num_gpus"),
        ),
        (r#"{"num_gpus": -1}"#, "out-of-range", 7, json!("num_gpus")),
    ] {
        let (s, v) = api.send(Method::POST, "/v1/claims", Some(body)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {v}");
        assert_error(&v, "invalid_request");
        assert_eq!(v["rule"], rule, "{body}: {v}");
        assert_eq!(v["rule_number"], number, "{body}: {v}");
        if !field.is_null() {
            assert_eq!(v["field"], field, "{body}: {v}");
        }
    }

    // 400 malformed JSON, 413 huge body.
    let (s, v) = api
        .send(Method::POST, "/v1/claims", Some(r#"{"gpu_memory": "#))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_error(&v, "malformed_json");
    assert!(v["detail"].as_str().unwrap().contains("line 1"), "{v}");
    let huge = format!(r#"{{"holder": "{}"}}"#, "x".repeat(1 << 20));
    let (s, v) = api.send(Method::POST, "/v1/claims", Some(&huge)).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert_error(&v, "body_too_large");

    // Renew: 409 without a lease, 200 with a ttl, 404 unknown, 422 bad ttl.
    let path = format!("/v1/claims/{id}/renew");
    let (s, v) = api.send(Method::POST, &path, None).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_error(&v, "no_lease");
    let (s, v) = api.send(Method::POST, &path, Some(r#"{"ttl": 600}"#)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["lease_expires_at"].as_u64().is_some());
    let (s, v) = api.send(Method::POST, &path, Some(r#"{"ttl": 0}"#)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["field"], "ttl");
    let (s, v) = api.send(Method::POST, "/v1/claims/999/renew", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_error(&v, "not_found");

    // Move: 200 to another device, keeping the id; 409 when the target does not fit;
    // 422 with no target; 404 unknown.
    let path = format!("/v1/claims/{id}/move");
    let (s, v) = api
        .send(
            Method::POST,
            &path,
            Some(r#"{"node": "g5-a10g", "devices": [3]}"#),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["id"], id);
    assert_eq!(v["shares"][0]["device"], 3);
    let (s, v) = api
        .send(
            Method::POST,
            &path,
            Some(r#"{"node": "g5-a10g", "devices": [99]}"#),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_error(&v, "does_not_fit");
    let (s, v) = api.send(Method::POST, &path, Some("{}")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (s, v) = api
        .send(Method::POST, &path, Some(r#"{"devices": [1], "rack": 2}"#))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["rule"], "unknown-field");
    let (s, _) = api
        .send(
            Method::POST,
            "/v1/claims/12345/move",
            Some(r#"{"devices": [1]}"#),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // Cordon: a cordoned device takes no pinned claim; 404 for an unknown device.
    let (s, v) = api
        .send(Method::POST, "/v1/devices/dgx-a100-80/2/cordon", None)
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["cordoned"], true);
    let (s, v) = api
        .send(
            Method::POST,
            "/v1/claims",
            Some(r#"{"num_gpus": 0.5, "node": "dgx-a100-80", "devices": [2]}"#),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert!(v["detail"].as_str().unwrap().contains("cordoned"), "{v}");
    let (s, _) = api
        .send(Method::POST, "/v1/devices/dgx-a100-80/2/uncordon", None)
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = api
        .send(Method::POST, "/v1/devices/dgx-a100-80/42/cordon", None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_error(&v, "not_found");
    let (s, _) = api
        .send(Method::POST, "/v1/devices/nowhere/0/cordon", None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // Projects: share, bad share, reset.
    let (s, v) = api
        .send(
            Method::PUT,
            "/v1/projects/vision",
            Some(r#"{"share": 300}"#),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = api
        .send(
            Method::PUT,
            "/v1/projects/vision",
            Some(r#"{"share": 2000000}"#),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["field"], "share");
    let (s, _) = api
        .send(Method::POST, "/v1/projects/vision/reset", None)
        .await;
    assert_eq!(s, StatusCode::OK);

    // Release: 200, then idempotent; the pending claim goes too.
    let (s, v) = api
        .send(Method::DELETE, &format!("/v1/claims/{id}"), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["released"], true);
    assert_eq!(v["claim"]["id"], id);
    let (s, v) = api
        .send(Method::DELETE, &format!("/v1/claims/{id}"), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["released"], false);
    let (s, _) = api
        .send(Method::DELETE, "/v1/claims/not-a-number", None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // Snapshot: schema, share, audit trail; the pending claim is placed once room freed.
    let snap = api.snapshot().await;
    assert_eq!(snap["schema"], 1);
    let vision = snap["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "vision")
        .unwrap();
    assert_eq!(vision["share"], 300);
    let actions: Vec<&str> = snap["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for a in [
        "claim", "renew", "move", "cordon", "uncordon", "share", "reset", "release",
    ] {
        assert!(actions.contains(&a), "{a} audited: {actions:?}");
    }
    let mut placed = false;
    for _ in 0..100 {
        let snap = api.snapshot().await;
        let c = snap["claims"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == pending)
            .cloned()
            .unwrap();
        if c["state"] == "placed" {
            placed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(placed, "the pending claim is placed by the ticker");

    // Metrics, health, unknown routes.
    let (s, v) = api.send(Method::GET, "/metrics", None).await;
    assert_eq!(s, StatusCode::OK);
    let text = v.as_str().unwrap();
    assert!(
        text.contains("gpuboard_claims{state=\"placed\"} 1"),
        "{text}"
    );
    assert!(text.contains("gpuboard_device_memory_allocated_bytes{node=\"g5-a10g\""));
    assert!(text.contains("gpuboard_http_responses_total{code=\"409\"}"));
    // Fair-share series: every project and resource of the snapshot has its line.
    let snap = api.snapshot().await;
    for p in snap["projects"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let line = format!(
            "gpuboard_project_claims_pending{{project=\"{name}\"}} {}",
            p["pending"]
        );
        assert!(text.contains(&line), "{line} in {text}");
        for r in p["resources"].as_array().unwrap() {
            let l = format!(
                "project=\"{name}\",resource=\"{}\"",
                r["resource"].as_str().unwrap()
            );
            let eligible = u8::from(r["eligible"].as_bool().unwrap());
            assert!(
                text.contains(&format!("gpuboard_project_eligible{{{l}}} {eligible}")),
                "{l}"
            );
            assert!(
                text.contains(&format!("gpuboard_project_debt{{{l}}} ")),
                "{l}"
            );
            let left = format!("gpuboard_project_backoff_remaining_seconds{{{l}}} ");
            let value: f64 = text
                .lines()
                .find_map(|x| x.strip_prefix(&left))
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(value > 0.0, !r["backoff_until"].is_null(), "{l}");
        }
    }
    for r in snap["resources"].as_array().unwrap() {
        let name = r["name"].as_str().unwrap();
        let idle = format!("gpuboard_resource_idle_instances{{resource=\"{name}\"}} ");
        let value: f64 = text
            .lines()
            .find_map(|x| x.strip_prefix(&idle))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(value, r["idle"].as_f64().unwrap(), "{name}");
        assert!(text.contains(&format!(
            "gpuboard_resource_shortfall_seconds{{resource=\"{name}\"}} "
        )));
    }
    assert!(!snap["projects"].as_array().unwrap().is_empty());
    let (s, v) = Api::new(&server, None)
        .send(Method::GET, "/healthz", None)
        .await;
    assert_eq!((s, v), (StatusCode::OK, json!("ok\n")));
    let (s, v) = api.send(Method::GET, "/v1/claims", None).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
    assert_error(&v, "method_not_allowed");
    let (s, v) = api.send(Method::GET, "/v2/nothing", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_error(&v, "not_found");
}

#[tokio::test]
async fn auth_failures_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let op = Api::new(&server, Some(server.operator_token()));
    let (s, v) = op
        .send(Method::POST, "/v1/claims", Some(r#"{"num_gpus": 0.5}"#))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let mut before = op.snapshot().await;
    before["taken_at"] = Value::Null;

    let nobody = Api::new(&server, None);
    let wrong = Api::new(&server, Some("0".repeat(64)));
    let reader = Api::new(&server, Some(server.read_token()));
    let mutations: [(Method, &str, Option<&str>); 7] = [
        (Method::POST, "/v1/claims", Some(r#"{"num_gpus": 0.5}"#)),
        (Method::DELETE, "/v1/claims/1", None),
        (
            Method::POST,
            "/v1/claims/1/move",
            Some(r#"{"devices": [1]}"#),
        ),
        (Method::POST, "/v1/claims/1/renew", Some(r#"{"ttl": 5}"#)),
        (Method::POST, "/v1/devices/g5-a10g/0/cordon", None),
        (Method::PUT, "/v1/projects/p", Some(r#"{"share": 5}"#)),
        (Method::POST, "/v1/projects/p/reset", None),
    ];
    for (m, path, body) in &mutations {
        let (s, h, v) = nobody.send_full(m.clone(), path, *body).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{m} {path}");
        assert_eq!(h["www-authenticate"], "Bearer");
        assert_error(&v, "unauthorized");
        let (s, v) = wrong.send(m.clone(), path, *body).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{m} {path}");
        assert_error(&v, "unauthorized");
        let (s, v) = reader.send(m.clone(), path, *body).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{m} {path}");
        assert_error(&v, "forbidden");
    }
    // Reads: the read token works, nothing else does.
    let mut after = reader.snapshot().await;
    after["taken_at"] = Value::Null;
    assert!(after == before, "no state change");
    for path in ["/v1/snapshot", "/metrics", "/v1/watch"] {
        let (s, _) = nobody.send(Method::GET, path, None).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{path}");
        let (s, _) = wrong.send(Method::GET, path, None).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{path}");
    }
    drop(server);

    // --open-reads: reads need no token, mutations still do.
    let server = Server::start(dir.path(), &demo_fleet(), &["--open-reads"]);
    let nobody = Api::new(&server, None);
    let snap = nobody.snapshot().await;
    assert_eq!(
        snap["claims"], before["claims"],
        "state survived the restart"
    );
    let (s, _) = nobody
        .send(Method::POST, "/v1/claims", Some(r#"{"num_gpus": 0.5}"#))
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

/// A random JSON value built from the API's own field names and hostile values.
fn random_value(rng: &mut impl RngExt, depth: u32) -> Value {
    const FIELDS: &[&str] = &[
        "num_gpus",
        "gpu_memory",
        "_gpu_memory",
        "gpu-memory",
        "gpu-memory-ratio",
        "gpu-core",
        "gpu.shared",
        "koordinator.sh/gpu",
        "nvidia.com/gpu",
        "accelerator_type",
        "cpus",
        "node",
        "devices",
        "project",
        "holder",
        "ttl",
        "pid",
        "expected_duration",
        "labels",
        "wait",
        "share",
        "bogus",
        "",
    ];
    match rng.random_range(0..10) {
        0 => Value::Null,
        1 => json!(rng.random_bool(0.5)),
        2 => json!(rng.random_range(-5i64..300)),
        3 => json!(rng.random::<f64>() * 3.0 - 1.0),
        4 => [json!(1e300), json!(-0.0), json!(u64::MAX), json!(i64::MIN)][rng.random_range(0..4)]
            .clone(),
        5 => json!(
            [
                "20Gi", "1e9", "0.5", "-1Gi", "abc", "1e30", "", "512Mi", "\u{0}"
            ][rng.random_range(0..9)]
        ),
        6 if depth < 3 => Value::Array(
            (0..rng.random_range(0..4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ if depth < 3 => {
            let mut m = serde_json::Map::new();
            for _ in 0..rng.random_range(0..5) {
                let k = FIELDS[rng.random_range(0..FIELDS.len())];
                m.insert(k.to_string(), random_value(rng, depth + 1));
            }
            Value::Object(m)
        }
        _ => json!("x"),
    }
}

#[tokio::test]
async fn random_bodies_never_break_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &demo_fleet(), &["--tick-ms", "20"]);
    let api = Api::new(&server, Some(server.operator_token()));
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let paths = [
        (Method::POST, "/v1/claims"),
        (Method::POST, "/v1/claims/1/move"),
        (Method::POST, "/v1/claims/2/renew"),
        (Method::PUT, "/v1/projects/fuzz"),
        (Method::DELETE, "/v1/claims/3"),
    ];
    for i in 0..400 {
        let body = if i % 4 == 0 {
            // Raw bytes, often not UTF-8 or JSON at all.
            let len = rng.random_range(0..200);
            let bytes: Vec<u8> = (0..len).map(|_| rng.random::<u8>()).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            let mut obj = random_value(&mut rng, 0);
            if rng.random_bool(0.7) && !obj.is_object() {
                obj = json!({"num_gpus": obj});
            }
            obj.to_string()
        };
        let (m, path) = &paths[rng.random_range(0..paths.len())];
        let (s, v) = api.send(m.clone(), path, Some(&body)).await;
        assert!(
            [200, 201, 202, 400, 404, 409, 413, 422].contains(&s.as_u16()),
            "{m} {path} {body}: {s} {v}"
        );
        if s.is_client_error() {
            assert!(
                v["error"].is_string() && v["detail"].is_string(),
                "{body}: {v}"
            );
        }
    }
    assert!(server.alive(), "no panic took the server down");
    // Nothing over-committed whatever was accepted.
    let snap = api.snapshot().await;
    for n in snap["nodes"].as_array().unwrap() {
        for d in n["devices"].as_array().unwrap() {
            let cap = d["memory_capacity"].as_u64().unwrap();
            assert!(d["memory_allocated"].as_u64().unwrap() <= cap, "{d}");
            assert!(d["compute_allocated"].as_u64().unwrap() <= 10_000, "{d}");
            assert!(d["slots_allocated"].as_u64().unwrap() <= 100, "{d}");
        }
    }
}

/// Reads SSE frames until one of type `event` whose data contains `needle`.
async fn read_until(resp: &mut reqwest::Response, buf: &mut String, event: &str, needle: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            if frame.contains(&format!("event: {event}\n")) && frame.contains(needle) {
                return;
            }
        }
        let chunk = tokio::time::timeout_at(deadline, resp.chunk())
            .await
            .expect("event within the guard time")
            .unwrap()
            .expect("stream open");
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test]
async fn watch_streams_committed_changes_after_a_revision() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let api = Api::new(&server, Some(server.operator_token()));
    api.send(Method::PUT, "/v1/projects/a", Some(r#"{"share": 10}"#))
        .await;
    let mut resp = api
        .http
        .get(format!("{}/v1/watch?since=0", server.url))
        .bearer_auth(server.read_token())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut buf = String::new();
    // History after revision 0 first, then live changes.
    read_until(&mut resp, &mut buf, "audit", "share set to 10").await;
    read_until(&mut resp, &mut buf, "revision", "\"revision\":1").await;
    let (s, _) = api
        .send(Method::POST, "/v1/claims", Some(r#"{"num_gpus": 0.25}"#))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    read_until(&mut resp, &mut buf, "audit", "\"action\":\"claim\"").await;
    read_until(&mut resp, &mut buf, "revision", "\"revision\":2").await;
    let (s, v) = api.send(Method::GET, "/v1/watch?since=abc", None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
}

/// Polls the snapshot until claim `id` is gone (bounded guard, not a timing assertion).
async fn wait_gone(api: &Api, id: u64) -> Value {
    for _ in 0..200 {
        let snap = api.snapshot().await;
        if !snap["claims"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["id"] == id)
        {
            return snap;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("claim {id} was never released");
}

#[tokio::test]
async fn leases_expire_and_dead_owners_are_released() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &["--tick-ms", "50"]);
    let api = Api::new(&server, Some(server.operator_token()));

    let mut owner = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let body = json!({"num_gpus": 0.5, "pid": owner.id()}).to_string();
    let (s, v) = api.send(Method::POST, "/v1/claims", Some(&body)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let owned = v["id"].as_u64().unwrap();
    let (s, v) = api
        .send(
            Method::POST,
            "/v1/claims",
            Some(r#"{"num_gpus": 0.5, "ttl": 1}"#),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let leased = v["id"].as_u64().unwrap();

    let snap = wait_gone(&api, leased).await;
    assert!(
        snap["claims"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["id"] == owned),
        "the owner still runs, so its claim stays"
    );
    owner.kill().unwrap();
    owner.wait().unwrap();
    let snap = wait_gone(&api, owned).await;
    let events = snap["events"].as_array().unwrap();
    let find = |action: &str, id: u64| {
        events
            .iter()
            .any(|e| e["action"] == action && e["target"] == format!("claim {id}"))
    };
    assert!(find("expire", leased), "{events:?}");
    assert!(find("owner-gone", owned), "{events:?}");
    for n in snap["nodes"].as_array().unwrap() {
        for d in n["devices"].as_array().unwrap() {
            assert_eq!(d["memory_allocated"], 0, "nothing left behind: {d}");
        }
    }
}

/// What an operator's probes found: values the routes cannot read are 400s that say so,
/// never a 500 (a time past what the store holds) nor a 200 that stays silent (a watch
/// parameter it cannot read), and two idempotency keys are refused, not one dropped.
#[tokio::test]
async fn probes_get_a_clear_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let api = Api::new(&server, Some(server.operator_token()));
    for path in [
        "/v1/snapshot?at=9223372036854775808",
        "/v1/snapshot?at=9999-12-31T23:59:59Z",
        "/v1/history/changes?from=0&to=18446744073709551615",
    ] {
        let (s, v) = api.send(Method::GET, path, None).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {v}");
        assert!(v.to_string().contains("after 9999-12-30"), "{path}: {v}");
    }
    for path in [
        "/v1/watch?deltas=x",
        "/v1/watch?deltas=1&format=99",
        "/v1/watch?since=18446744073709551615",
    ] {
        let (s, v) =
            tokio::time::timeout(Duration::from_secs(10), api.send(Method::GET, path, None))
                .await
                .expect("answered at once, not a silent stream");
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {v}");
    }
    let resp = api
        .http
        .post(format!("{}/v1/claims", api.url))
        .bearer_auth(server.operator_token())
        .header("content-type", "application/json")
        .header(gpuboard::wire::IDEMPOTENCY_HEADER, "key-a")
        .header(gpuboard::wire::IDEMPOTENCY_HEADER, "key-b")
        .body(r#"{"gpu_memory": "1Gi", "holder": "p"}"#)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_client_error(), "{}", resp.status());
    let text = resp.text().await.unwrap();
    assert!(text.contains("not several"), "{text}");
    assert!(
        api.snapshot().await["claims"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}
