//! The forecast backtest over what a real `gpuboard serve` recorded: claims made, waited
//! for, withdrawn and released on the serve, then `gpuboard simulate --backtest --history
//! DIR` replays them through the scheduler and forecasts each waiting claim's start.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Server, text};

fn claim(server: &Server, project: &str) -> String {
    let request = json!({"nvidia.com/gpu": 1, "project": project}).to_string();
    let out = server.cli(&["claim", "--request", &request, "--wait", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["id"].as_u64().unwrap().to_string()
}

fn release(server: &Server, id: &str) {
    let out = server.cli(&["release", id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn simulate(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .arg("simulate")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_serve_s_recorded_claims_are_backtested() {
    let dir = tempfile::tempdir().unwrap();
    let inventory = dir.path().join("one.toml");
    std::fs::write(
        &inventory,
        "[[nodes]]\nname = \"node-a\"\n[[nodes.gpus]]\nmodel = \"NVIDIA A100-SXM4-80GB\"\n\
         memory = \"80GiB\"\ncount = 1\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let server = Server::start(&data, &inventory, &[]);
    // vision holds the GPU; nlp waits for it; speech waits and is withdrawn.
    let first = claim(&server, "vision");
    let waiting = claim(&server, "nlp");
    let withdrawn = claim(&server, "speech");
    std::thread::sleep(Duration::from_millis(400));
    release(&server, &withdrawn);
    std::thread::sleep(Duration::from_millis(1_200));
    release(&server, &first);
    std::thread::sleep(Duration::from_millis(1_200));
    release(&server, &waiting);
    // The recorder coalesces commits for 100 ms: let the last one land.
    std::thread::sleep(Duration::from_millis(600));

    let dir_arg = data.to_str().unwrap();
    let out = simulate(&["--backtest", "--history", dir_arg, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let b: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Two claims started on the serve; the withdrawn one never did.
    assert_eq!(b["claims"], 2, "{b:#}");
    assert_eq!(b["skipped"], 1, "{b:#}");
    for mode in ["declared", "learned"] {
        let waits: Vec<&Value> = b["waits"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["durations"] == mode)
            .collect();
        assert_eq!(waits.len(), 1, "{mode}: {b:#}");
        assert_eq!(waits[0]["project"], "nlp");
        // It started in the replay when vision's hold ended: after the 1.6 s slept between
        // nlp's claim and vision's release (and the CLI calls between, slower under load).
        let waited =
            waits[0]["started_s"].as_f64().unwrap() - waits[0]["submitted_s"].as_f64().unwrap();
        assert!(
            (1.0..4.0).contains(&waited),
            "{mode}: waited {waited} s: {b:#}"
        );
    }
    // With vision's hold declared (rounded up to the second), the forecast is within a
    // second of the start, which the error divides by a minute at least.
    let declared = &b["rows"][0];
    assert_eq!(declared["durations"], "declared");
    assert_eq!(declared["predictor"], "forecast");
    assert!(
        declared["median"].as_f64().unwrap() < 1.0 / 60.0 + 1e-9,
        "{b:#}"
    );

    // The table as text, and the errors that name what is wrong.
    let out = simulate(&["--backtest", "--history", dir_arg]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("2 claims replayed, 1 skipped"),
        "{}",
        text(&out.stdout)
    );
    let out = simulate(&["--backtest", "--history", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no history in"),
        "{}",
        text(&out.stderr)
    );
    let out = simulate(&[
        "--backtest",
        "--history",
        dir_arg,
        "--evaluate-until",
        "100000",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("must be from 1 to the recording's length"),
        "{}",
        text(&out.stderr)
    );
    let out = simulate(&["--history", dir_arg]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--backtest"),
        "{}",
        text(&out.stderr)
    );
}
