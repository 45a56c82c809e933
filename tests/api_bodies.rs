//! Every request body of API v1 (claim, move, renew, share) against a real `gpuboard serve`
//! on a free port: what the client writes from the `wire` types is accepted, and a body
//! with an unknown field, a wrong type or a missing field is refused 4xx in the project's
//! error shape, naming the field, with nothing changed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::{Server, demo_fleet, http};
use gpuboard::client::{ClaimOutcome, Client, ClientError};
use gpuboard::ids::ClaimId;
use gpuboard::placement::MoveTarget;
use gpuboard::request::ClaimRequest;
use gpuboard::wire::{ErrorBody, MoveBody, RenewBody, ShareBody, paths};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// Sends `body` as JSON with the operator token; the status and the body read as JSON
/// (text when it is not).
async fn send(server: &Server, method: Method, path: &str, body: &str) -> (StatusCode, Value) {
    let resp = http()
        .request(method, format!("{}{path}", server.url))
        .bearer_auth(server.operator_token())
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn client(server: &Server) -> Client {
    Client::new(
        &server.url,
        Some(server.operator_token()),
        Duration::from_secs(20),
    )
    .unwrap()
}

/// A claim on the A10G node with a lease, so that renew and move have something to act on.
fn leased_claim() -> ClaimRequest {
    ClaimRequest::from_json(&json!({
        "gpu_memory": "10Gi", "project": "vision", "node": "g5-a10g", "devices": [0], "ttl": 600
    }))
    .unwrap()
}

/// What a refused body must not change: the durable revision, every claim's placement and
/// lease, every project's share.
async fn state(server: &Server) -> Value {
    let (s, snap) = send(server, Method::GET, paths::SNAPSHOT, "").await;
    assert_eq!(s, StatusCode::OK, "{snap}");
    let claims: Vec<Value> = snap["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            json!([
                c["id"],
                c["state"],
                c["node"],
                c["shares"],
                c["lease_expires_at"],
                c["request"]
            ])
        })
        .collect();
    let projects: Vec<Value> = snap["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| json!([p["name"], p["share"]]))
        .collect();
    json!({"revision": snap["revision"], "claims": claims, "projects": projects})
}

#[tokio::test]
async fn the_clients_typed_bodies_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let api = client(&server);

    let ClaimOutcome::Placed(placed) = api.claim(&leased_claim()).await.unwrap() else {
        panic!("the claim fits an empty fleet")
    };
    assert_eq!(placed.node.as_deref(), Some("g5-a10g"));
    let lease = placed.lease_expires_at.unwrap();

    let moved = api
        .move_claim(
            placed.id,
            &MoveTarget {
                node: None,
                devices: Some(vec![2]),
            },
        )
        .await
        .unwrap();
    assert_eq!((moved.id, moved.shares[0].device), (placed.id, 2));

    // With a ttl, and with none (the claim's own): both are the `RenewBody` the client sends.
    let renewed = api.renew(placed.id, Some(3600)).await.unwrap();
    assert!(renewed.lease_expires_at.unwrap() > lease);
    let own = api.renew(placed.id, None).await.unwrap();
    assert!(own.lease_expires_at.is_some());

    api.set_share("vision", 250).await.unwrap();
    let snap = api.snapshot().await.unwrap();
    let vision = snap.projects.iter().find(|p| p.name == "vision").unwrap();
    assert_eq!(vision.share, 250);

    // The same bodies by hand, written by serde from the wire types: what goes over the
    // wire is exactly what the types say, and the endpoint takes it.
    let id = placed.id;
    for (method, path, body) in [
        (
            Method::POST,
            paths::claim_move(id),
            serde_json::to_string(&MoveBody {
                node: Some("g5-a10g".into()),
                devices: Some(vec![1]),
            })
            .unwrap(),
        ),
        (
            Method::POST,
            paths::claim_renew(id),
            serde_json::to_string(&RenewBody { ttl: Some(900) }).unwrap(),
        ),
        (
            Method::POST,
            paths::claim_renew(id),
            serde_json::to_string(&RenewBody::default()).unwrap(),
        ),
        (
            Method::PUT,
            paths::project("vision"),
            serde_json::to_string(&ShareBody { share: 0 }).unwrap(),
        ),
    ] {
        let (s, v) = send(&server, method, &path, &body).await;
        assert_eq!(s, StatusCode::OK, "{path} {body}: {v}");
    }
    assert_eq!(
        serde_json::to_string(&RenewBody::default()).unwrap(),
        "{}",
        "an empty renew body is the claim's own ttl"
    );
    // A route that takes no body takes none, whitespace or `{}`.
    for (method, path, body) in [
        (Method::POST, "/v1/devices/g5-a10g/3/cordon", ""),
        (Method::POST, "/v1/devices/g5-a10g/3/uncordon", "{}"),
        (Method::POST, "/v1/projects/vision/reset", " \n"),
        (Method::DELETE, paths::claim(id).as_str(), "{ }"),
    ] {
        let (s, v) = send(&server, method, path, body).await;
        assert_eq!(s, StatusCode::OK, "{path} {body:?}: {v}");
    }
}

/// One refused body: where it went, what was sent, and what the answer must say.
struct Refusal {
    method: Method,
    path: String,
    body: &'static str,
    status: StatusCode,
    error: &'static str,
    rule: Option<&'static str>,
    field: Option<&'static str>,
    /// Words the detail must hold (the field, what is allowed).
    says: &'static [&'static str],
}

fn invalid(
    method: &Method,
    path: &str,
    body: &'static str,
    rule: &'static str,
    field: Option<&'static str>,
    says: &'static [&'static str],
) -> Refusal {
    Refusal {
        method: method.clone(),
        path: path.to_string(),
        body,
        status: StatusCode::UNPROCESSABLE_ENTITY,
        error: "invalid_request",
        rule: Some(rule),
        field,
        says,
    }
}

fn malformed(
    method: &Method,
    path: &str,
    body: &'static str,
    says: &'static [&'static str],
) -> Refusal {
    Refusal {
        method: method.clone(),
        path: path.to_string(),
        body,
        status: StatusCode::BAD_REQUEST,
        error: "malformed_json",
        rule: None,
        field: None,
        says,
    }
}

fn refusals(id: ClaimId) -> Vec<Refusal> {
    let post = Method::POST;
    let put = Method::PUT;
    let claims = paths::CLAIMS;
    let mv = paths::claim_move(id);
    let renew = paths::claim_renew(id);
    let share = paths::project("vision");
    vec![
        // Claims: `ClaimRequest::from_json`, the one validator.
        invalid(
            &post,
            claims,
            r#"{"gpu_memory": "1Gi", "colour": "red"}"#,
            "unknown-field",
            Some("colour"),
            &["`colour`", "allowed fields", "gpu_memory"],
        ),
        invalid(
            &post,
            claims,
            r#"{"gpu_memory": true}"#,
            "wrong-type",
            Some("gpu_memory"),
            &["gpu_memory"],
        ),
        invalid(
            &post,
            claims,
            r#"{"project": "vision"}"#,
            "out-of-range",
            None,
            &["allowed fields", "gpu_memory"],
        ),
        invalid(
            &post,
            claims,
            r#"[{"gpu_memory": "1Gi"}]"#,
            "wrong-type",
            None,
            &["JSON object"],
        ),
        malformed(
            &post,
            claims,
            r#"{"gpu_memory": "1Gi", "gpu_memory": "2Gi"}"#,
            &["`gpu_memory` is given twice"],
        ),
        // Move.
        invalid(
            &post,
            &mv,
            r#"{"devices": [1], "rack": 2}"#,
            "unknown-field",
            Some("rack"),
            &["`rack`", "allowed fields: node, devices"],
        ),
        invalid(
            &post,
            &mv,
            r#"{"devices": "1"}"#,
            "wrong-type",
            Some("devices"),
            &[
                "`devices` must be a non-empty list of device indexes",
                "got the text \"1\"",
            ],
        ),
        invalid(
            &post,
            &mv,
            r#"{"node": 7}"#,
            "wrong-type",
            Some("node"),
            &["`node` must be a node name", "got 7"],
        ),
        invalid(
            &post,
            &mv,
            r#"{"devices": [-1]}"#,
            "out-of-range",
            Some("devices"),
            &["got -1"],
        ),
        invalid(
            &post,
            &mv,
            r#"{"devices": []}"#,
            "wrong-type",
            Some("devices"),
            &["non-empty"],
        ),
        invalid(
            &post,
            &mv,
            "{}",
            "out-of-range",
            None,
            &["`node`, `devices`, or both"],
        ),
        invalid(
            &post,
            &mv,
            r#"["g5-a10g"]"#,
            "wrong-type",
            None,
            &["JSON object with fields node, devices"],
        ),
        malformed(&post, &mv, "", &["not valid JSON"]),
        // Renew (its one field is optional: an empty body is the claim's own ttl).
        invalid(
            &post,
            &renew,
            r#"{"ttl": 60, "extend": true}"#,
            "unknown-field",
            Some("extend"),
            &["`extend`", "allowed fields: ttl"],
        ),
        invalid(
            &post,
            &renew,
            r#"{"ttl": "600"}"#,
            "wrong-type",
            Some("ttl"),
            &[
                "`ttl` must be whole seconds from 1 to",
                "got the text \"600\"",
            ],
        ),
        invalid(
            &post,
            &renew,
            r#"{"ttl": 0}"#,
            "out-of-range",
            Some("ttl"),
            &["`ttl` must be whole seconds", "got 0"],
        ),
        invalid(
            &post,
            &renew,
            "600",
            "wrong-type",
            None,
            &["JSON object with fields ttl"],
        ),
        malformed(
            &post,
            &renew,
            r#"{"ttl": 5, "ttl": 6}"#,
            &["`ttl` is given twice"],
        ),
        // Share.
        invalid(
            &put,
            &share,
            r#"{"share": 5, "weight": 1}"#,
            "unknown-field",
            Some("weight"),
            &["`weight`", "allowed fields: share"],
        ),
        invalid(
            &put,
            &share,
            r#"{"share": "5"}"#,
            "wrong-type",
            Some("share"),
            &[
                "`share` must be a whole number from 0 to 1000000",
                "got the text \"5\"",
            ],
        ),
        invalid(
            &put,
            &share,
            r#"{"share": null}"#,
            "wrong-type",
            Some("share"),
            &["got null"],
        ),
        invalid(
            &put,
            &share,
            "{}",
            "out-of-range",
            Some("share"),
            &["`share` is required", "from 0 to 1000000"],
        ),
        invalid(
            &put,
            &share,
            r#"{"share": 2000000}"#,
            "out-of-range",
            Some("share"),
            &["got 2000000"],
        ),
        invalid(
            &put,
            &share,
            r#"{"share": 5000000000}"#,
            "out-of-range",
            Some("share"),
            &["got 5000000000"],
        ),
        malformed(&put, &share, "{share: 5}", &["not valid JSON"]),
        // Routes that take no body refuse one rather than ignore it (a `reason` sent with a
        // cordon would otherwise be dropped without a word).
        invalid(
            &post,
            "/v1/devices/g5-a10g/1/cordon",
            r#"{"reason": "fan noise"}"#,
            "unknown-field",
            Some("reason"),
            &[
                "takes no body",
                "unknown field `reason`",
                "fields allowed: none",
            ],
        ),
        invalid(
            &post,
            "/v1/devices/g5-a10g/1/uncordon",
            "[1]",
            "wrong-type",
            None,
            &["takes no body", "got an array"],
        ),
        invalid(
            &post,
            "/v1/projects/vision/reset",
            r#"{"debts": true}"#,
            "unknown-field",
            Some("debts"),
            &["takes no body", "`debts`"],
        ),
        invalid(
            &Method::DELETE,
            &paths::claim(id),
            r#"{"force": true}"#,
            "unknown-field",
            Some("force"),
            &["takes no body", "`force`"],
        ),
        malformed(
            &Method::DELETE,
            &paths::claim(id),
            "force",
            &["not valid JSON"],
        ),
    ]
}

#[tokio::test]
async fn refused_bodies_name_the_field_in_the_error_shape_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let api = client(&server);
    let id = api.claim(&leased_claim()).await.unwrap().claim().id;
    api.set_share("vision", 300).await.unwrap();
    let before = state(&server).await;

    for r in refusals(id) {
        let what = format!("{} {} {}", r.method, r.path, r.body);
        let (s, v) = send(&server, r.method.clone(), &r.path, r.body).await;
        assert_eq!(s, r.status, "{what}: {v}");
        // The project's error shape, read as the client reads it.
        let e: ErrorBody = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(e.error, r.error, "{what}: {v}");
        assert_eq!(e.rule.as_deref(), r.rule, "{what}: {v}");
        assert_eq!(e.field.as_deref(), r.field, "{what}: {v}");
        if r.rule.is_some() {
            assert!(e.rule_number.is_some(), "{what}: {v}");
        }
        for words in r.says {
            assert!(e.detail.contains(words), "{what}: `{words}` in {v}");
        }
        assert_eq!(state(&server).await, before, "{what} changed nothing");
    }

    // The client reports the same refusal with its field (a share the wire type can carry
    // but the endpoint refuses).
    let e = api.set_share("vision", 2_000_000).await.unwrap_err();
    let ClientError::Invalid { field, rule, .. } = e else {
        panic!("{e:?}")
    };
    assert_eq!(
        (field.as_deref(), rule.as_deref()),
        (Some("share"), Some("out-of-range"))
    );
    assert_eq!(state(&server).await, before);
}
