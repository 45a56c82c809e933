//! `gpuboard token ls` says when each token was last used: the endpoint records uses in
//! memory and writes them down in batches (every minute and when it stops), never on each
//! request.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{Server, demo_fleet, gpuboard};
use gpuboard::clock::Timestamp;
use gpuboard::endpoint::auth::{Tokens, Verdict};
use gpuboard::endpoint::gate::Gate;
use gpuboard::endpoint::tokens::TokenUsage;
use serde_json::Value;

fn run(dir: &std::path::Path, args: &[&str]) -> Output {
    let out = Command::new(gpuboard())
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .env_remove("GPUBOARD_TOKEN")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn the_gate_records_uses_in_memory_and_writes_them_in_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = Tokens::load_or_create(dir.path()).unwrap();
    let operator = std::fs::read_to_string(dir.path().join("operator.token")).unwrap();
    let gate = Gate::new(tokens, Some(dir.path().to_path_buf()));
    for ms in 1..=1000 {
        assert!(matches!(
            gate.check(operator.trim(), Timestamp(ms)),
            Verdict::Valid(_)
        ));
    }
    assert!(matches!(
        gate.check("nope", Timestamp(2000)),
        Verdict::Unknown
    ));
    // A thousand requests, no write.
    assert!(!TokenUsage::path(dir.path()).exists());
    gate.flush_usage().unwrap();
    let usage = TokenUsage::load(dir.path());
    assert_eq!(usage.last_used.len(), 1, "{usage:?}");
    assert_eq!(usage.last_used["admin"], Timestamp(1000));
    // Nothing new: nothing written.
    let before = std::fs::metadata(TokenUsage::path(dir.path()))
        .unwrap()
        .modified()
        .unwrap();
    std::fs::remove_file(TokenUsage::path(dir.path())).unwrap();
    gate.flush_usage().unwrap();
    assert!(!TokenUsage::path(dir.path()).exists(), "{before:?}");
}

#[tokio::test]
async fn token_ls_shows_when_each_token_was_last_used() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &demo_fleet(), &[]);
    let alice =
        String::from_utf8(run(dir.path(), &["token", "add", "alice", "--role", "operator"]).stdout)
            .unwrap()
            .trim()
            .to_string();
    run(
        dir.path(),
        &["token", "add", "ci", "--role", "read", "--expires", "30d"],
    );
    let answer = common::http()
        .get(format!("{}/v1/snapshot", server.url))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success());
    // Stop the endpoint (SIGTERM): it writes the uses down as it goes.
    let pid = libc::pid_t::try_from(server.child.id()).unwrap();
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_mins(1);
    while server.alive() {
        assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    }
    let table = String::from_utf8(run(dir.path(), &["token", "ls"]).stdout).unwrap();
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("EXPIRES") && header.trim_end().ends_with("LAST USED"),
        "{table}"
    );
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in\n{table}"))
            .to_string()
    };
    assert!(!row("alice").trim_end().ends_with("never"), "{table}");
    assert!(row("ci").trim_end().ends_with("never"), "{table}");
    let json: Value =
        serde_json::from_slice(&run(dir.path(), &["token", "ls", "--json"]).stdout).unwrap();
    let by = |n: &str| {
        json.as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == n)
            .unwrap()
            .clone()
    };
    let used = by("alice")["last_used"].as_u64().unwrap();
    assert!(used >= by("alice")["created"].as_u64().unwrap(), "{json:#}");
    assert!(by("ci")["last_used"].is_null(), "{json:#}");
    assert!(by("ci")["expires"].is_u64(), "{json:#}");
}
