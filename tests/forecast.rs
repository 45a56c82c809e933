//! Expected starts and previews on a real `gpuboard serve`: `GET /v1/forecast`, the `ls`
//! START column and `ls --pending`, `POST /v1/preview` and `--dry-run`, which changes
//! nothing (the snapshot's revision and audit stay as they were).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Server, http, text};

use serde_json::{Value, json};

/// One node of two GPUs: claim 1 holds one for a declared 10 minutes, claim 2 the other
/// with no end known, claim 3 waits for one GPU.
fn busy_server(dir: &std::path::Path) -> Server {
    let inventory = dir.join("one.toml");
    std::fs::write(
        &inventory,
        "[[nodes]]\nname = \"node-a\"\n[[nodes.gpus]]\nmodel = \"NVIDIA A100-SXM4-80GB\"\n\
         memory = \"80GiB\"\ncount = 2\n",
    )
    .unwrap();
    let server = Server::start(dir, &inventory, &[]);
    for (request, wait) in [
        (
            json!({"nvidia.com/gpu": 1, "project": "vision", "expected_duration": 600}),
            false,
        ),
        (json!({"nvidia.com/gpu": 1, "project": "vision"}), false),
        (json!({"nvidia.com/gpu": 1, "project": "nlp"}), true),
    ] {
        let mut args = vec!["claim".to_string(), "--request".into(), request.to_string()];
        if wait {
            args.push("--wait".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = server.cli(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    server
}

async fn get(server: &Server, path: &str) -> Value {
    let resp = http()
        .get(format!("{}{path}", server.url))
        .bearer_auth(server.read_token())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
    resp.json().await.unwrap()
}

async fn preview(server: &Server, body: &Value) -> (u16, Value) {
    let resp = http()
        .post(format!("{}/v1/preview", server.url))
        .bearer_auth(server.operator_token())
        .json(body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test]
async fn the_forecast_route_and_ls_say_when_a_waiting_claim_starts() {
    let dir = tempfile::tempdir().unwrap();
    let server = busy_server(dir.path());
    let f = get(&server, "/v1/forecast").await;
    let starts = f["starts"].as_array().unwrap();
    assert_eq!(starts.len(), 1, "{f}");
    let e = &starts[0];
    assert_eq!(e["claim"], 3);
    assert_eq!(e["node"], "node-a");
    assert_eq!(e["freed_by"]["claim"], 1, "{e}");
    assert_eq!(e["freed_by"]["basis"], "declared");
    let p50 = e["start"]["p50"].as_u64().unwrap();
    let at = f["at"].as_u64().unwrap();
    // Claim 1 declared 600 s a moment ago.
    assert!((590_000..=600_000).contains(&(p50 - at)), "{e}");

    let out = server.cli(&["ls"]);
    let table = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let header = table.lines().next().unwrap();
    assert!(header.contains("START"), "{table}");
    let row = table.lines().find(|l| l.starts_with('3')).unwrap();
    assert!(row.contains("~10m") || row.contains("~9m"), "{table}");

    let out = server.cli(&["ls", "--pending"]);
    let listed = text(&out.stdout);
    assert!(!listed.lines().any(|l| l.starts_with("1 ")), "{listed}");
    assert!(
        listed.contains("claim 3: expected to start ~") && listed.contains("when claim 1 ends"),
        "{listed}"
    );

    let out = server.cli(&["ls", "--json"]);
    let all: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let pending = all.iter().find(|c| c["id"] == 3).unwrap();
    assert_eq!(pending["expected_start"]["freed_by"]["claim"], 1);

    // `status --json` carries the endpoint's forecast beside its snapshot.
    let out = server.cli(&["status", "--once", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    let starts = &status["sources"][0]["forecast"]["starts"];
    assert_eq!(starts[0]["claim"], 3, "{status:#}");
    assert_eq!(starts[0]["freed_by"]["claim"], 1, "{status:#}");
}

#[tokio::test]
async fn a_preview_and_a_dry_run_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = busy_server(dir.path());
    let before = get(&server, "/v1/snapshot").await;

    let (status, p) = preview(&server, &json!({"action": "release", "claim": 2})).await;
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["placed"][0]["claim"], 3, "{p}");
    assert_eq!(p["placed"][0]["at"], "node-a:1", "{p}");

    let (status, p) = preview(
        &server,
        &json!({"action": "cordon", "node": "node-a", "index": 0}),
    )
    .await;
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["on_cordoned"], json!([1]), "{p}");

    let (status, p) = preview(&server, &json!({"action": "release", "claim": 99})).await;
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["refused"], "no claim 99", "{p}");

    let (status, p) = preview(&server, &json!({"action": "drain", "node": "node-a"})).await;
    assert_eq!(status, 400, "{p}");
    assert_eq!(p["error"], "bad_preview");
    assert!(p["detail"].as_str().unwrap().contains("release"), "{p}");

    let out = server.cli(&["release", "2", "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("dry run: release claim 2 (nothing was changed)"),
        "{said}"
    );
    assert!(
        said.contains("claim 3 (nlp) would be placed on node-a:1"),
        "{said}"
    );
    for args in [
        vec!["cordon", "node-a", "0", "--dry-run"],
        vec!["project", "set", "nlp", "--share", "300", "--dry-run"],
        vec!["project", "reset", "nlp", "--dry-run"],
        vec![
            "claim",
            "--gpus",
            "1",
            "--project",
            "nlp",
            "--wait",
            "--dry-run",
        ],
    ] {
        let out = server.cli(&args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stdout).starts_with("dry run: "), "{args:?}");
    }

    // Device 1 is taken: the move would be refused, and the dry run says so.
    let out = server.cli(&["move", "1", "--devices", "1", "--dry-run"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stdout).contains("the endpoint would refuse it"),
        "{}",
        text(&out.stdout)
    );

    let after = get(&server, "/v1/snapshot").await;
    assert_eq!(after["revision"], before["revision"]);
    assert_eq!(after["events"], before["events"]);
    assert_eq!(after["claims"], before["claims"]);
    assert_eq!(after["nodes"], before["nodes"]);
}
