//! `gpuboard serve --inventory FILE --simulate-telemetry[=SEED]` on a real socket: every
//! GPU of the inventory gets telemetry that moves, follows the claims (a claimed GPU is
//! busier) and stays within the board's limits, and it is labelled SIMULATED wherever it
//! shows: the snapshot (`status --json`), `status`, the Sources list, the GPU detail, `doctor` and
//! `/metrics`. Without `--inventory` the flag is refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use gpuboard::snapshot::Snapshot;
use serde_json::Value;

use crate::common::{self, Server};

/// The endpoint's snapshot, as `status --once --json` prints it.
fn snapshot(server: &Server) -> Snapshot {
    let out = server.cli(&["status", "--once", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    serde_json::from_value(doc["sources"][0]["snapshot"].clone()).unwrap()
}

fn text(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn an_inventory_serve_simulates_labelled_telemetry_that_follows_the_claims() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &common::demo_fleet(),
        &["--simulate-telemetry=7"],
    );
    let placed = text(&server.cli(&["claim", "--gpus", "2", "--project", "vision"]));
    assert!(placed.contains("placed on"), "{placed}");
    let first = snapshot(&server);
    let note = first.endpoint.telemetry_note.clone().unwrap_or_default();
    assert!(note.starts_with("SIMULATED telemetry"), "{note}");
    assert!(note.contains("seed 7"), "{note}");
    for (n, d) in first.devices() {
        let name = format!("{}:{}", n.name, d.index);
        let t = d
            .telemetry
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: none"));
        assert!(t.simulated, "{name}");
        let util = t.utilization_gpu.unwrap();
        assert!(util <= 100, "{name}");
        assert!(
            t.memory_used.unwrap() <= d.memory_capacity.unwrap(),
            "{name}"
        );
        assert!(t.power_mw.unwrap() <= t.power_limit_mw.unwrap(), "{name}");
        assert!(t.temperature_c.unwrap() <= 80, "{name}");
        // A claimed GPU works; a free one idles.
        if d.holders.is_empty() {
            assert!(util <= 3, "{name}: {util} % while free");
        } else {
            assert!(util >= 35, "{name}: {util} % while claimed whole");
        }
    }
    let claim = &first.claims[0];
    assert!(claim.memory_used.is_some_and(|u| u.0 > 0), "{claim:?}");
    // It moves: within a few steps some GPU reads differently.
    let utils = |s: &Snapshot| -> Vec<Option<u32>> {
        s.devices()
            .map(|(_, d)| d.telemetry.as_ref().and_then(|t| t.utilization_gpu))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        std::thread::sleep(Duration::from_millis(1_500));
        let now = snapshot(&server);
        if utils(&now) != utils(&first) && now.taken_at > first.taken_at {
            break;
        }
        assert!(Instant::now() < deadline, "the telemetry never moved");
    }
    // Labelled in `status`, the Sources list and the GPU detail.
    let status = text(&server.cli(&["status", "--once"]));
    assert!(
        status.contains("telemetry: SIMULATED telemetry"),
        "{status}"
    );
    let place = claim.place().unwrap();
    let gpu = format!(
        "{}:{}",
        claim.node.as_deref().unwrap(),
        claim.shares[0].device
    );
    let overview = text(&server.cli(&["status", "--dump-screen", "overview", "--size", "120x40"]));
    assert!(overview.contains("SIMULATED telemetry"), "{overview}");
    let detail = text(&server.cli(&[
        "status",
        "--dump-screen",
        &format!("gpu:{gpu}"),
        "--size",
        "120x30",
    ]));
    assert!(detail.contains("telemetry SIMULATED"), "{place}\n{detail}");
    // In doctor's endpoint check.
    let out = server.cli(&["doctor"]);
    let doctor = String::from_utf8_lossy(&out.stdout);
    assert!(
        doctor.contains("telemetry: SIMULATED telemetry"),
        "{doctor}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And in the metrics, per device.
    gpuboard::client::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let metrics = rt.block_on(async {
        reqwest::Client::new()
            .get(format!("{}/metrics", server.url))
            .bearer_auth(server.read_token())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    let simulated = metrics
        .lines()
        .filter(|l| l.starts_with("gpuboard_device_telemetry_simulated{") && l.ends_with(" 1"))
        .count();
    assert_eq!(simulated, first.devices().count(), "{metrics}");
}

#[test]
fn simulated_telemetry_needs_an_inventory() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(common::gpuboard())
        .args(["serve", "--simulate-telemetry", "--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--inventory"), "{err}");
}
