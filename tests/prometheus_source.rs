//! The Prometheus source against a real Prometheus (Debian's package) on 127.0.0.1,
//! scraping a dcgm-exporter fixture served by this test: two hosts, 8 GPUs, one in MIG
//! mode, one DCGM blank. Skipped only with `GPUBOARD_SKIP_PEERS=prometheus`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Reply, Stopper, free_port, serve, skip_peer};
use gpuboard::snapshot::Snapshot;
use gpuboard::sources::prometheus::{PrometheusConfig, PrometheusSource};
use gpuboard::units::Bytes;

fn prometheus_binary() -> PathBuf {
    if let Ok(p) = std::env::var("GPUBOARD_PROMETHEUS") {
        return PathBuf::from(p);
    }
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("prometheus"))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "no `prometheus` binary: run scripts/test (it installs Debian's prometheus), or \
             `apt-get install prometheus`, or set GPUBOARD_SKIP_PEERS=prometheus to skip this test"
        )
    })
}

fn complete(s: &Snapshot) -> bool {
    s.nodes.len() == 2
        && s.nodes.iter().all(|n| {
            n.devices.len() == 4
                && n.devices.iter().all(|d| {
                    d.telemetry
                        .as_ref()
                        .is_some_and(|t| t.memory_used.is_some() && t.temperature_c.is_some())
                })
        })
}

#[tokio::test]
async fn prometheus_reports_dcgm_telemetry() {
    if skip_peer("prometheus") {
        eprintln!("skipped: GPUBOARD_SKIP_PEERS lists prometheus");
        return;
    }
    let started = Instant::now();
    let binary = prometheus_binary();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/prometheus");
    let text = |f: &str| std::fs::read(fixtures.join(f)).unwrap();
    let ctype = "text/plain; version=0.0.4; charset=utf-8";
    let exporter = serve(vec![
        (
            "/node-a/metrics",
            Reply::Full(200, ctype, text("dcgm_node-a.prom")),
        ),
        (
            "/node-b/metrics",
            Reply::Full(200, ctype, text("dcgm_node-b.prom")),
        ),
    ])
    .await;
    let target = exporter.trim_start_matches("http://");
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n\
         - job_name: dcgm-a\n  metrics_path: /node-a/metrics\n  static_configs: [{{targets: [\"{target}\"]}}]\n\
         - job_name: dcgm-b\n  metrics_path: /node-b/metrics\n  static_configs: [{{targets: [\"{target}\"]}}]\n"
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let child = Command::new(&binary)
        .arg(format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let mut prometheus = Stopper {
        child,
        name: "prometheus",
    };

    let mut config = PrometheusConfig::new(format!("http://127.0.0.1:{port}"));
    config.timeout = Duration::from_secs(2);
    let source = PrometheusSource::new(config).unwrap();
    // Poll until both targets have been scraped, within a bound.
    let deadline = Instant::now() + Duration::from_mins(1);
    let snapshot = loop {
        let last = source.fetch().await;
        if let Ok(s) = &last
            && complete(s)
        {
            break last.unwrap();
        }
        if let Ok(Some(status)) = prometheus.child.try_wait() {
            let log =
                std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
            panic!("prometheus exited ({status}):\n{log}");
        }
        assert!(
            Instant::now() < deadline,
            "no complete dcgm data within 60 s; last: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };

    assert_eq!(snapshot.endpoint.kind, "prometheus");
    assert!(
        snapshot.endpoint.version.starts_with("prometheus 2."),
        "{}",
        snapshot.endpoint.version
    );
    assert!(!snapshot.endpoint.actions);
    let names: Vec<&str> = snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["node-a", "node-b"]);
    let a = &snapshot.nodes[0].devices;
    let b = &snapshot.nodes[1].devices;
    let t = |d: &gpuboard::snapshot::DeviceView| d.telemetry.clone().unwrap();
    assert_eq!(
        a[1].uuid.as_deref(),
        Some("GPU-a1c0ffee-0000-4000-8000-00000000a001")
    );
    assert_eq!(a[1].model, "NVIDIA A100-SXM4-40GB");
    assert_eq!(a[1].memory_capacity, Some(Bytes::mib(40960)));
    assert_eq!(t(&a[1]).utilization_gpu, Some(37));
    assert_eq!(t(&a[1]).memory_used, Some(Bytes::mib(8192)));
    assert_eq!(t(&a[1]).power_mw, Some(82_750));
    assert_eq!(t(&a[1]).temperature_c, Some(41));
    // DCGM's blank for node-a GPU 2's power: no data, not 140 TW.
    assert_eq!(t(&a[2]).power_mw, None);
    assert_eq!(t(&a[2]).utilization_gpu, Some(100));
    assert_eq!(t(&b[0]).utilization_gpu, Some(88));
    assert_eq!(t(&b[0]).memory_used, Some(Bytes(70_000 << 20)));
    // The MIG GPU: instances folded in.
    assert_eq!(t(&b[3]).mig_enabled, Some(true));
    assert_eq!(t(&b[3]).memory_used, Some(Bytes::mib(10240 + 512)));
    assert_eq!(b[3].memory_capacity, Some(Bytes::mib(80384)));
    assert_eq!(t(&b[3]).utilization_gpu, None);
    assert!(
        snapshot
            .nodes
            .iter()
            .flat_map(|n| &n.devices)
            .all(|d| t(d).sampled_at.0 > 0)
    );

    prometheus.stop();
    eprintln!(
        "prometheus test took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
