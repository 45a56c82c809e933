//! The command-line client against a real endpoint: `run` end to end, `claim`/`ls`/
//! `release`/`move`/`cordon`/`project`, and the exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::text;

use std::process::{Command, Output};

use common::{Server, demo_fleet};
use serde_json::Value;

fn gpuboard(server: &Server, args: &[&str]) -> Output {
    server.cli(args)
}

fn claims(server: &Server) -> Vec<Value> {
    let out = gpuboard(server, &["ls", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn run_sets_the_environment_passes_the_status_and_releases() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let seen = dir.path().join("seen");
    let script = format!(
        "echo \"$CUDA_VISIBLE_DEVICES|$GPUBOARD_MEMORY_LIMIT|$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT|$GPUBOARD_CLAIM_ID\" > {}; exit 7",
        seen.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args([
            "run",
            "--memory",
            "20GiB",
            "--ttl",
            "30",
            "--node",
            "dgx-a100-80",
        ])
        .args(["--endpoint", &server.url, "--data-dir"])
        .arg(&server.dir)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(7),
        "CMD's status: {}",
        text(&out.stderr)
    );
    let seen = std::fs::read_to_string(seen).unwrap();
    let parts: Vec<&str> = seen.trim().split('|').collect();
    assert_eq!(parts.len(), 4, "{seen}");
    let device: u32 = parts[0].parse().expect("one device index");
    assert!(device < 8);
    let limit: u64 = parts[1].parse().unwrap();
    // 20 GiB on an 80 GiB GPU is exactly a quarter.
    assert_eq!(limit, 20 << 30);
    assert_eq!(parts[2], "0=20G");
    let id: u64 = parts[3].parse().unwrap();
    assert!(claims(&server).is_empty(), "released after CMD exited");
    // A command that cannot start: the claim is released too.
    let out = Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args([
            "run",
            "--memory",
            "1GiB",
            "--endpoint",
            &server.url,
            "--data-dir",
        ])
        .arg(&server.dir)
        .args(["--", "/nonexistent/cmd"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot start"),
        "{}",
        text(&out.stderr)
    );
    assert!(claims(&server).is_empty());
    assert!(id >= 1);
}

#[test]
fn client_commands_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);

    let out = gpuboard(
        &server,
        &["claim", "--fraction", "0.5", "--project", "p", "--json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["id"].as_u64().unwrap().to_string();
    assert_eq!(v["project"], "p");

    let out = gpuboard(&server, &["ls"]);
    let table = text(&out.stdout);
    assert!(table.starts_with("ID"), "{table}");
    assert!(table.contains("num_gpus=0.5"), "{table}");

    let out = gpuboard(&server, &["move", &id, "--devices", "3"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(claims(&server)[0]["shares"][0]["device"], 3);

    let out = gpuboard(&server, &["renew", &id, "--ttl", "100"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(claims(&server)[0]["lease_expires_at"].is_u64());

    for args in [
        vec!["cordon", "g5-a10g", "1"],
        vec!["uncordon", "g5-a10g", "1"],
        vec!["project", "set", "p", "--share", "200"],
        vec!["project", "reset", "p"],
    ] {
        let out = gpuboard(&server, &args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }

    // 3: invalid (rule named), 4: does not fit (reasons listed), 7: not found.
    let out = gpuboard(&server, &["claim", "--fraction", "1.5"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("fraction-above-one"),
        "{}",
        text(&out.stderr)
    );
    let out = gpuboard(&server, &["claim", "--memory", "500GiB"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stderr).contains("node g5-a10g: 4/4 GPUs too small"),
        "{}",
        text(&out.stderr)
    );
    let out = gpuboard(&server, &["renew", "999"]);
    assert_eq!(out.status.code(), Some(7));
    // 6: a read token on a mutation, and a wrong token.
    let read = dir.path().join("read.token");
    let out = gpuboard(
        &server,
        &["release", &id, "--token-file", read.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("forbidden"));
    let out = Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args(["release", &id, "--endpoint", &server.url])
        .env("GPUBOARD_TOKEN", "wrong")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6));
    assert_eq!(claims(&server).len(), 1, "auth failures released nothing");

    let out = gpuboard(&server, &["release", &id]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("released"));
    let out = gpuboard(&server, &["release", &id]);
    assert!(text(&out.stdout).contains("already released"), "idempotent");
    // An id the endpoint never issued is a mistake, not a no-op: 404, exit 7.
    let out = gpuboard(&server, &["release", "999999"]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("never issued"),
        "{}",
        text(&out.stderr)
    );

    // 5: unreachable.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let out = Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args(["ls", "--endpoint", &url])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("cannot reach"));
}

#[test]
fn serve_without_an_inventory_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--inventory"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn usage_errors_exit_2_with_what_is_allowed() {
    for args in [
        &["status", "--dump-screen", "gpu"][..],
        &["status", "--dump-screen", "gpus", "--size", "9x9"][..],
        &["claim", "--no-such-flag"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_gpuboard"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args(["status", "--dump-screen", "gpu"])
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).contains("views: overview"),
        "{}",
        text(&out.stderr)
    );
}
