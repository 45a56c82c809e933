//! The Ray source against a real Ray 2.60 head on 127.0.0.1 (token auth on), holding
//! actors, tasks and a placement-group bundle with 0.25 and 0.5 GPU, one infeasible task
//! and one placement group waiting for GPUs (`STRICT_PACK`, 2 bundles of 2 GPUs): the source
//! must stay live with no warning and report exactly the GPU index each holder sees
//! through `ray.get_gpu_ids()`, the totals, availability, the pending demand and the
//! waiting group with its strategy and bundles.
//!
//! Needs the virtual environment scripts/test installs (`ray[default]==2.60.0`), at
//! $`GPUBOARD_RAY_VENV` or ~/.cache/gpuboard/venv-ray-2.60.0. Without it the test fails;
//! `GPUBOARD_SKIP_PEERS=ray` skips it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::ray_head;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Stopper, skip_peer};
use gpuboard::snapshot::{ClaimState, Snapshot};
use gpuboard::sources::error::SourceError;
use gpuboard::sources::ray::{RayConfig, RaySource};
use gpuboard::units::Units;
use ray_head::{Head, TOKEN, pids_with, ray_env};
use serde_json::Value;

/// What the driver saw: holder ("actor actor-half") -> (GPU index, fraction).
fn expected(report: &Value) -> BTreeMap<String, (u32, Units)> {
    let fraction = |label: &str| {
        if label.contains("quarter") || label == "task-in-pg" {
            Units(2500)
        } else {
            Units(5000)
        }
    };
    report["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let label = h["label"].as_str().unwrap();
            let ids = h["gpu_ids"].as_array().unwrap();
            assert_eq!(ids.len(), 1, "{label} sees {ids:?}");
            let gpu = u32::try_from(ids[0].as_u64().unwrap()).unwrap();
            (
                format!("{} {label}", h["kind"].as_str().unwrap()),
                (gpu, fraction(label)),
            )
        })
        .collect()
}

fn reported(s: &Snapshot) -> BTreeMap<String, (u32, Units)> {
    s.claims
        .iter()
        .filter(|c| {
            c.state == ClaimState::Placed
                && c.request.labels.get("ray.kind").map(String::as_str) != Some("bundle")
        })
        .filter_map(|c| {
            let share = c.shares.first()?;
            Some((c.holder.clone()?, (share.device, share.compute)))
        })
        .collect()
}

#[tokio::test]
async fn ray_source_reports_what_ray_tasks_see() {
    if skip_peer("ray") {
        eprintln!("skipped: GPUBOARD_SKIP_PEERS lists ray");
        return;
    }
    let started = Instant::now();
    let mut head = Head::start_with(&["--resources={\"accelerator_type:A100\": 1}"]);
    let url = head.url.clone();
    let mut config = RayConfig::new(url.clone());
    config.timeout = Duration::from_secs(10);
    config.token = Some(TOKEN.to_string());
    let source = RaySource::new(config).unwrap();

    // Wait for the dashboard (bounded).
    let deadline = Instant::now() + Duration::from_mins(3);
    loop {
        let r = source.fetch().await;
        if r.as_ref()
            .is_ok_and(|s| s.nodes.iter().any(|n| n.devices.len() == 4))
        {
            break;
        }
        if let Some(status) = head.exited() {
            panic!("ray start exited ({status}):\n{}", head.log());
        }
        assert!(
            Instant::now() < deadline,
            "Ray's dashboard not up within 180 s; last: {r:?}\n{}",
            head.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let up_after = started.elapsed();

    // Without the token, Ray refuses, and the source says so.
    let anonymous = RaySource::new(RayConfig::new(url.clone())).unwrap();
    let e = anonymous.fetch().await.unwrap_err();
    assert!(
        matches!(e, SourceError::Unauthorized { status: 401, .. }),
        "{e:?}"
    );

    // The driver takes its shares and reports what each holder sees.
    let report_path = head.tmp.path().join("driver.json");
    let driver_log = std::fs::File::create(head.tmp.path().join("driver.log")).unwrap();
    let driver = ray_env(&mut Command::new(ray_head::venv().join("bin/python")))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/ray_driver.py"))
        .arg(format!("127.0.0.1:{}", head.gcs))
        .arg(&report_path)
        .stdin(Stdio::piped())
        .stdout(driver_log.try_clone().unwrap())
        .stderr(driver_log)
        .process_group(0)
        .spawn()
        .unwrap();
    let mut driver = Stopper {
        child: driver,
        name: "ray driver",
    };
    let driver_log =
        || std::fs::read_to_string(head.tmp.path().join("driver.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_mins(4);
    let report: Value = loop {
        if let Ok(text) = std::fs::read_to_string(&report_path) {
            break serde_json::from_str(&text).unwrap();
        }
        if let Ok(Some(status)) = driver.child.try_wait() {
            panic!("driver exited ({status}):\n{}", driver_log());
        }
        assert!(
            Instant::now() < deadline,
            "driver did not report within 240 s:\n{}",
            driver_log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let want = expected(&report);
    assert_eq!(want.len(), 5);

    // The dashboard lags the scheduler: poll until it agrees with the driver (bounded).
    let deadline = Instant::now() + Duration::from_mins(2);
    let snapshot = loop {
        let r = source.fetch().await;
        if let Ok(s) = &r
            && reported(s) == want
            && s.claims.iter().any(|c| c.state == ClaimState::Pending)
            && s.claims
                .iter()
                .any(|c| c.request.labels.contains_key("ray.strategy"))
            && s.claims
                .iter()
                .any(|c| c.holder.as_deref() == Some("placement group pg-half bundle 0"))
        {
            break r.unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the source never agreed with the driver:\nwant {want:?}\nlast {:?}",
            r.map(|s| reported(&s))
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let consistent_after = started.elapsed();

    // Totals and availability: 4 A100s; 2.0 GPU held (0.25+0.5+0.25, 0.5 + the 0.5 bundle).
    assert_eq!(snapshot.endpoint.kind, "ray");
    assert!(!snapshot.endpoint.actions);
    assert_eq!(snapshot.endpoint.version, "ray 2.60.0");
    let node = &snapshot.nodes[0];
    assert_eq!(node.devices.len(), 4);
    assert!(node.devices.iter().all(|d| d.model == "A100"));
    let free: u32 = node.devices.iter().map(|d| d.compute_free.0).sum();
    assert_eq!(Units(free), Units(20_000));
    // The bundle sits on the GPU its member task sees.
    let bundle = snapshot
        .claims
        .iter()
        .find(|c| c.holder.as_deref() == Some("placement group pg-half bundle 0"))
        .unwrap();
    assert_eq!(bundle.shares.len(), 1);
    assert_eq!(bundle.shares[0].device, want["task task-in-pg"].0);
    assert_eq!(bundle.shares[0].compute, Units(5000));
    // Per device, the counted fractions are the holders outside bundles plus the bundle.
    for d in &node.devices {
        let outside: u32 = want
            .iter()
            .filter(|(h, (gpu, _))| *gpu == d.index && h.as_str() != "task task-in-pg")
            .map(|(_, (_, u))| u.0)
            .sum();
        let bundle_here = if bundle.shares[0].device == d.index {
            5000
        } else {
            0
        };
        assert_eq!(
            d.compute_allocated,
            Units(outside + bundle_here),
            "GPU {}",
            d.index
        );
    }
    // Everything was read: the source is live, with no warning.
    assert!(
        snapshot.endpoint.warnings.is_empty(),
        "{:?}",
        snapshot.endpoint.warnings
    );
    // The waiting placement group: one pending claim per bundle, with its strategy and
    // bundles, and Ray's own reason (no resources now, not infeasible).
    let waiting_id = report["waiting"]["id"].as_str().unwrap();
    let groups: Vec<_> = snapshot
        .claims
        .iter()
        .filter(|c| {
            c.request
                .labels
                .get("ray.placement_group")
                .map(String::as_str)
                == Some(waiting_id)
        })
        .collect();
    assert_eq!(groups.len(), 2, "{groups:?}");
    for (i, g) in groups.iter().enumerate() {
        assert_eq!(g.state, ClaimState::Pending);
        assert_eq!(
            g.holder.as_deref(),
            Some(format!("placement group pg-waiting bundle {i}").as_str())
        );
        assert_eq!(g.request.labels["ray.strategy"], "STRICT_PACK");
        assert_eq!(g.request.labels["ray.bundles"], "2 × {GPU: 2}");
        assert!(!g.infeasible);
        assert!(
            g.pending_reasons
                .iter()
                .any(|r| r.contains("(PENDING, NO_RESOURCES)")),
            "{:?}",
            g.pending_reasons
        );
        assert!(
            g.pending_reasons.iter().any(|r| r.starts_with(
                "Ray pgDemand 2 × {GPU: 2} STRICT_PACK: 1 pending group(s)"
            )),
            "{:?}",
            g.pending_reasons
        );
    }
    // The infeasible task: pending, with Ray's reason.
    let pending: Vec<_> = snapshot
        .claims
        .iter()
        .filter(|c| {
            c.state == ClaimState::Pending
                && c.request.labels.get("ray.kind").map(String::as_str) == Some("task")
        })
        .collect();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].holder.as_deref(), Some("task task-infeasible"));
    assert_eq!(pending[0].form, "num_gpus=8");
    assert!(pending[0].infeasible);
    assert!(
        pending[0]
            .pending_reasons
            .iter()
            .any(|r| r.contains("PENDING_NODE_ASSIGNMENT")),
        "{:?}",
        pending[0].pending_reasons
    );
    let infeasible = format!(
        "infeasible: no node has GPU 8; the largest has 4 on {}",
        node.name
    );
    assert!(
        pending[0].pending_reasons.contains(&infeasible),
        "{:?}",
        pending[0].pending_reasons
    );

    // Ray's memory: every process of this head and the driver.
    let memory = head.memory(&[driver.pid()]);
    eprintln!(
        "ray test: dashboard up after {:.1} s, consistent after {:.1} s; {} Ray processes, RSS {} MiB, PSS {} MiB",
        up_after.as_secs_f64(),
        consistent_after.as_secs_f64(),
        memory.processes,
        memory.rss_mib,
        memory.pss_mib
    );

    drop(driver.child.stdin.take());
    driver.stop();
    let marker = head.marker().to_string();
    drop(head);
    assert!(pids_with(&marker).is_empty(), "Ray processes left behind");
    eprintln!(
        "ray test took {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
}
