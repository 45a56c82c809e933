//! `gpuboard record` against a real Prometheus (Debian's package) scraping a dcgm-exporter
//! fixture: it records the source's GPUs and their telemetry into its own history and
//! serves it read-only, and the client rewinds it as it rewinds an endpoint. Skipped only
//! with `GPUBOARD_SKIP_PEERS=prometheus`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Reply, Stopper, free_port, serve, skip_peer};
use gpuboard::client::{Client, SnapshotAt};
use gpuboard::clock::{Clock, SystemClock, Timestamp};
use gpuboard::wire::history::GpuRef;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_rewinds_a_prometheus_like_an_endpoint() {
    if skip_peer("prometheus") {
        eprintln!("skipped: GPUBOARD_SKIP_PEERS lists prometheus");
        return;
    }
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/prometheus");
    let text = |f: &str| std::fs::read(fixtures.join(f)).unwrap();
    let ctype = "text/plain; version=0.0.4; charset=utf-8";
    let exporter = serve(vec![(
        "/node-a/metrics",
        Reply::Full(200, ctype, text("dcgm_node-a.prom")),
    )])
    .await;
    let target = exporter.trim_start_matches("http://");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n\
             - job_name: dcgm-a\n  metrics_path: /node-a/metrics\n  static_configs: [{{targets: [\"{target}\"]}}]\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let _prometheus = Stopper {
        child: Command::new("prometheus")
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
            .expect("start prometheus (Debian's package)"),
        name: "prometheus",
    };

    let data = tempfile::tempdir().unwrap();
    let prometheus = format!("http://127.0.0.1:{port}");
    let record = common::start_record(
        &[
            "--kind",
            "prometheus",
            "--name",
            "dcgm",
            "--every-ms",
            "1000",
            "--url",
            &prometheus,
        ],
        data.path(),
        &dir.path().join("record.log"),
    );
    let url = record.url.clone();
    let client = Client::new(&url, None, Duration::from_secs(10)).unwrap();
    let gpu = GpuRef {
        node: "node-a".to_string(),
        index: 1,
    };

    // Wait, within a bound, for Prometheus to have scraped and record to have sampled.
    let deadline = Instant::now() + Duration::from_secs(90);
    let series = loop {
        let now = SystemClock.now();
        if let Ok(s) = client
            .history_telemetry(&gpu, Timestamp(now.0 - 600_000), now)
            .await
            && !s.samples.is_empty()
        {
            break s;
        }
        if Instant::now() > deadline {
            let latest = client.snapshot().await;
            panic!(
                "record never sampled node-a:1: {}\nlatest: {latest:?}\nhistory: {:?}",
                std::fs::read_to_string(dir.path().join("record.log")).unwrap_or_default(),
                client.history_info().await
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(series.samples[0].utilization_gpu, Some(37));

    let info = client.history_info().await.unwrap();
    let from = info.from.unwrap();
    let SnapshotAt::Shown { snapshot, .. } = client.snapshot_at(SystemClock.now()).await.unwrap()
    else {
        panic!("no state now")
    };
    assert_eq!(snapshot.endpoint.kind, "prometheus");
    assert_eq!(snapshot.nodes[0].name, "node-a");
    let t = snapshot.nodes[0].devices[1].telemetry.as_ref().unwrap();
    assert_eq!(t.utilization_gpu, Some(37));
    assert_eq!(
        client.snapshot_at(Timestamp(from.0 - 1)).await.unwrap(),
        SnapshotAt::BeforeHistory {
            history_from: Some(from)
        }
    );
    // The latest snapshot is served as an endpoint's is.
    let latest = client.snapshot().await.unwrap();
    assert_eq!(
        latest.nodes[0].devices.len(),
        snapshot.nodes[0].devices.len()
    );
}
