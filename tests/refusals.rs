//! Requests refused with the rule they broke, through a real `gpuboard serve` and the CLI:
//! labels (rule 10: printable, bounded keys and values, a limit on count and size) answer
//! 422 naming the rule and what is allowed, exit 3 in the CLI, and nothing is stored; a
//! waiting claim of a project whose share is 0 is refused (409 `share_zero`, exit 8)
//! saying how to give the project a share, instead of waiting forever.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::{Server, demo_fleet, http};
use serde_json::{Value, json};

async fn post(server: &Server, path: &str, method: reqwest::Method, body: &Value) -> (u16, Value) {
    let resp = http()
        .request(method, format!("{}{path}", server.url))
        .bearer_auth(server.operator_token())
        .json(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn claim_count(server: &Server) -> usize {
    let snap: Value = http()
        .get(format!("{}/v1/snapshot", server.url))
        .bearer_auth(server.operator_token())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    snap["claims"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread")]
async fn labels_that_break_rule_10_are_refused_naming_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let big = "v".repeat(60 * 1024);
    for (labels, says) in [
        (json!({"": "x"}), "is empty"),
        (json!({"team\u{7}": "x"}), "U+0007"),
        (json!({"team": big}), "at most 1024 characters"),
    ] {
        let body = json!({"gpu_memory": "1Gi", "labels": labels});
        let (status, v) = post(&server, "/v1/claims", reqwest::Method::POST, &body).await;
        assert_eq!(status, 422, "{v}");
        assert_eq!(v["rule"], "labels", "{v}");
        assert_eq!(v["rule_number"], 10, "{v}");
        assert_eq!(v["field"], "labels", "{v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{detail}");
    }
    assert_eq!(
        claim_count(&server).await,
        0,
        "a refused request stored nothing"
    );
    // Good labels still go through.
    let body =
        json!({"gpu_memory": "1Gi", "labels": {"team": "vision", "gpuboard.attempt": "1-2-3"}});
    let (status, v) = post(&server, "/v1/claims", reqwest::Method::POST, &body).await;
    assert_eq!(status, 201, "{v}");

    // The CLI checks before sending: exit 3, the rule named.
    let out = server.cli(&[
        "claim",
        "--request",
        r#"{"gpu_memory": "1Gi", "labels": {"my team": "cv"}}"#,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("rule labels") && stderr.contains("label keys are"),
        "{stderr}"
    );
    assert_eq!(claim_count(&server).await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_claim_of_a_share_0_project_is_refused_saying_how_to_give_it_a_share() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let (status, v) = post(
        &server,
        "/v1/projects/idle",
        reqwest::Method::PUT,
        &json!({"share": 0}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    // GPU 0 of one node taken: a request for it would wait.
    let pinned = json!({"nvidia.com/gpu": 1, "node": "dgx-a100-40", "devices": [0]});
    let (status, v) = post(&server, "/v1/claims", reqwest::Method::POST, &pinned).await;
    assert_eq!(status, 201, "{v}");
    let waiting = json!({"nvidia.com/gpu": 1, "node": "dgx-a100-40", "devices": [0],
                         "wait": true, "project": "idle"});
    let (status, v) = post(&server, "/v1/claims", reqwest::Method::POST, &waiting).await;
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"], "share_zero", "{v}");
    let detail = v["detail"].as_str().unwrap();
    assert!(
        detail.contains("share 0")
            && detail.contains("would never run")
            && detail.contains("gpuboard project set idle --share"),
        "{detail}"
    );
    assert_eq!(claim_count(&server).await, 1, "nothing was queued");
    // The CLI says the same, exit 8 (conflict).
    let out = server.cli(&[
        "claim",
        "--gpus",
        "1",
        "--node",
        "dgx-a100-40",
        "--devices",
        "0",
        "--wait",
        "--project",
        "idle",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(8), "{stderr}");
    assert!(stderr.contains("share 0"), "{stderr}");
    // With a share it queues.
    let (status, _) = post(
        &server,
        "/v1/projects/idle",
        reqwest::Method::PUT,
        &json!({"share": 100}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, v) = post(&server, "/v1/claims", reqwest::Method::POST, &waiting).await;
    assert_eq!(status, 202, "{v}");
}
