//! `gpuboard serve` without an inventory: its GPUs, telemetry and process attribution come
//! from the fake NVML library loaded through `LD_LIBRARY_PATH`, as a real driver would be.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn fixture(dir: &Path) -> std::path::PathBuf {
    let text = format!(
        r#"driver_version = "550.54.15"

[[devices]]
name = "NVIDIA L4"
uuid = "GPU-l4-0"
memory_total = 24152899584
memory_reserved = 536870912
memory_used = 1073741824
utilization_gpu = 40
utilization_memory = 10
processes_file = "{dir}/procs-0.toml"

[[devices]]
name = "NVIDIA L4"
uuid = "GPU-l4-1"
memory_total = 24152899584
memory_reserved = 536870912
memory_used = 1073741824
utilization_gpu = 30
utilization_memory = 10
processes_file = "{dir}/procs-1.toml"
"#,
        dir = dir.display()
    );
    let path = dir.join("fixture.toml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn snapshot(server: &common::Server) -> Value {
    common::http()
        .get(format!("{}/v1/snapshot", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Polls the snapshot until `check` holds (the sampler lists processes every 2 s).
async fn wait_for(server: &common::Server, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let snap = snapshot(server).await;
        if check(&snap) {
            return snap;
        }
        assert!(Instant::now() < deadline, "never saw {what}: {snap:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn device(snap: &Value, index: usize) -> &Value {
    &snap["nodes"][0]["devices"][index]
}

#[tokio::test]
async fn serve_takes_gpus_from_nvml_and_attributes_a_run_claims_process() {
    let driver = common::fake_driver_dir();
    let work = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let fixture = fixture(work.path());
    let coordination = work.path().join("coordination");
    std::fs::write(&coordination, format!("1 {}\n", 0x7fff_fff0u32)).unwrap();
    let server = common::Server::start_nvml(
        data.path(),
        driver.path(),
        &fixture,
        &[
            "--open-reads",
            "--memory-headroom",
            "512MiB",
            "--coordination-file",
            coordination.to_str().unwrap(),
        ],
    );

    let snap = snapshot(&server).await;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(snap["nodes"][0]["name"], host.trim());
    let devices = snap["nodes"][0]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    let d0 = device(&snap, 0);
    assert_eq!(d0["model"], "NVIDIA L4");
    assert_eq!(d0["uuid"], "GPU-l4-0");
    // Total less the driver's reservation less the headroom.
    assert_eq!(
        d0["memory_capacity"].as_u64(),
        Some(24_152_899_584 - 536_870_912 - 536_870_912)
    );
    let t = &d0["telemetry"];
    assert_eq!(t["utilization_gpu"], 40);
    assert_eq!(t["memory_total"].as_u64(), Some(24_152_899_584));
    assert!(
        t["temperature_c"].is_null(),
        "not in the fixture: null, not 0"
    );
    assert!(t["power_mw"].is_null());
    assert_eq!(snap["coordination"][0]["index"], 1);
    assert_eq!(snap["coordination"][0]["dead"], true);
    assert!(snap["host"]["memory_total"].as_u64().unwrap() > 0);
    assert!(snap["endpoint"]["telemetry_note"].is_null());

    // A command started by `gpuboard run` under a 1 GiB claim.
    let pidfile = work.path().join("child.pid");
    let run = common::Stopper {
        child: Command::new(common::gpuboard())
            .args(["run", "--endpoint", &server.url, "--data-dir"])
            .arg(data.path())
            .args(["--memory", "1GiB", "--", "sh", "-c"])
            .arg(format!("echo $$ > {}; exec sleep 60", pidfile.display()))
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
        name: "gpuboard run",
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let child_pid: u32 = loop {
        if let Ok(text) = std::fs::read_to_string(&pidfile)
            && let Ok(pid) = text.trim().parse()
        {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "gpuboard run never started its command"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let snap = snapshot(&server).await;
    let claim = &snap["claims"][0];
    let claim_id = claim["id"].as_u64().unwrap();
    let on = claim["shares"][0]["device"].as_u64().unwrap();
    // Its command uses 2 GiB of its 1 GiB; a stranger uses 512 MiB of the same GPU.
    std::fs::write(
        work.path().join(format!("procs-{on}.toml")),
        format!(
            "[[processes]]\npid = {child_pid}\nused_memory = 2147483648\nname = \"sleep\"\n\n\
             [[processes]]\npid = 999999\nused_memory = 536870912\nname = \"rogue\"\n"
        ),
    )
    .unwrap();
    let snap = wait_for(&server, "the run's process attributed", |s| {
        device(s, on as usize)["telemetry"]["processes"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["pid"] == child_pid))
    })
    .await;
    let d = device(&snap, on as usize);
    let procs = d["telemetry"]["processes"].as_array().unwrap();
    let ours = procs.iter().find(|p| p["pid"] == child_pid).unwrap();
    assert_eq!(ours["claim"].as_u64(), Some(claim_id));
    let rogue = procs.iter().find(|p| p["pid"] == 999_999).unwrap();
    assert!(rogue["claim"].is_null());
    assert_eq!(d["unclaimed_memory"].as_u64(), Some(536_870_912));
    let claim = &snap["claims"][0];
    assert_eq!(claim["memory_used"].as_u64(), Some(2_147_483_648));
    assert_eq!(claim["over_limit"], true);
    assert_eq!(claim["idle"], false);
    let other = device(&snap, 1 - on as usize);
    assert_eq!(other["unclaimed_memory"].as_u64(), Some(0));
    // The same through /metrics: used beside allocated, and the unclaimed use.
    let text = common::http()
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let labels = format!(
        "{{node=\"{}\",index=\"{on}\",model=\"NVIDIA L4\"}}",
        host.trim()
    );
    for (series, value) in [
        ("device_memory_used_bytes", 1_073_741_824u64),
        (
            "device_memory_allocated_bytes",
            d["memory_allocated"].as_u64().unwrap(),
        ),
        ("device_memory_unclaimed_bytes", 536_870_912),
    ] {
        let line = format!("gpuboard_{series}{labels} {value}");
        assert!(text.lines().any(|l| l == line), "{line} in {text}");
    }
    // The stranger's memory flags its GPU: in /metrics as soon as the recorder has joined a
    // snapshot with it, and in the history as an episode the report reads back.
    let flagged = format!(
        "gpuboard_gpu_flagged{{node=\"{}\",index=\"{on}\",uuid=\"gpu-l4-{on}\",\
         flag=\"unexplained\",holder=\"\",engine=\"\",project=\"\"}} 1",
        host.trim().to_lowercase().split('.').next().unwrap()
    );
    let text = metrics_until(&server, |t| t.lines().any(|l| l == flagged)).await;
    assert!(
        !text.contains("flag=\"double-booked\"") && !text.contains("flag=\"idle\""),
        "{text}"
    );
    // The stranger leaves: the episode ends, and the flag is gone from /metrics.
    std::fs::write(
        work.path().join(format!("procs-{on}.toml")),
        format!("[[processes]]\npid = {child_pid}\nused_memory = 2147483648\nname = \"sleep\"\n"),
    )
    .unwrap();
    metrics_until(&server, |t| !t.contains("flag=\"unexplained\"")).await;
    let now = jiff::Timestamp::now().as_millisecond();
    let report: Value = common::http()
        .get(format!(
            "{}/v1/history/report?from={}&to={now}",
            server.url,
            now - 600_000
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let episodes = report["flags"].as_array().unwrap();
    assert_eq!(episodes.len(), 1, "{report:#}");
    let e = &episodes[0];
    assert_eq!(e["flag"], "unexplained");
    assert_eq!(e["index"].as_u64(), Some(on));
    assert_eq!(e["uuid"], format!("gpu-l4-{on}"));
    assert!(e["detail"].as_str().unwrap().contains("999999"), "{e}");
    let (started, ended) = (e["started"].as_u64().unwrap(), e["ended"].as_u64().unwrap());
    assert!(started < ended, "{e}");
    drop(run);
}

/// Polls `/metrics` until `check` holds (the recorder joins a snapshot every 5 s).
async fn metrics_until(server: &common::Server, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let text = common::http()
            .get(format!("{}/metrics", server.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if check(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "/metrics never changed: {text}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[test]
fn serve_without_a_gpu_or_inventory_says_why_and_what_to_do() {
    let driver = common::fake_driver_dir();
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let fixture = work.path().join("fixture.toml");
    std::fs::write(&fixture, "init_error = \"driver_not_loaded\"\n").unwrap();
    let out = Command::new(common::gpuboard())
        .env("LD_LIBRARY_PATH", driver.path())
        .env("GPUBOARD_FAKE_NVML_FIXTURE", &fixture)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no GPUs to serve"), "{err}");
    assert!(err.contains("kernel driver is not loaded"), "{err}");
    assert!(
        err.contains("--inventory") && err.contains("--demo"),
        "{err}"
    );
}
