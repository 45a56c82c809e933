//! `--slurm URL` and `--boinc HOST:PORT` add engine sources from the command line, as
//! `--ray` and `--prometheus` do, without a config file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::process::Command;

use common::{Reply, fixture, gpuboard};
use serde_json::Value;

fn status(args: &[&str], home: &std::path::Path) -> Value {
    let out = Command::new(gpuboard())
        .args(["status", "--once", "--json"])
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env_remove("SLURM_JWT")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn slurm_and_boinc_flags_add_their_sources() {
    let body = |n: &str| std::fs::read(fixture(&format!("slurm/{n}"))).unwrap();
    let url = common::serve(vec![
        (
            "/slurm/v0.0.38/nodes",
            Reply::Full(200, "application/json", body("nodes.json")),
        ),
        (
            "/slurm/v0.0.38/jobs",
            Reply::Full(200, "application/json", body("jobs.json")),
        ),
        (
            "/slurm/v0.0.38/ping",
            Reply::Full(200, "application/json", body("ping.json")),
        ),
    ])
    .await;
    let home = tempfile::tempdir().unwrap();
    let boinc = format!("127.0.0.1:{}", common::free_port());
    let doc = tokio::task::spawn_blocking({
        let home = home.path().to_path_buf();
        let boinc = boinc.clone();
        move || status(&["--slurm", &url, "--boinc", &boinc], &home)
    })
    .await
    .unwrap();
    let sources = doc["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 2, "{doc:#}");
    let slurm = &sources[0];
    assert_eq!(slurm["kind"], "slurm", "{doc:#}");
    assert_eq!(slurm["name"], "slurm1");
    assert_eq!(slurm["health"], "ok", "{doc:#}");
    assert!(
        !slurm["snapshot"]["nodes"].as_array().unwrap().is_empty(),
        "{doc:#}"
    );
    assert!(
        !slurm["snapshot"]["claims"].as_array().unwrap().is_empty(),
        "{doc:#}"
    );
    // Nothing listens at the BOINC address: that source is down and says where it looked.
    let b = &sources[1];
    assert_eq!(b["kind"], "boinc", "{doc:#}");
    assert_eq!(b["name"], "boinc1");
    assert_eq!(b["health"], "down", "{doc:#}");
    let error = b["error"].as_str().unwrap();
    assert!(error.contains(&boinc), "{error}");
}
