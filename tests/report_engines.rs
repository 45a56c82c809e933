//! Engines recorded by `gpuboard record` are accounted by their own projects: a real BOINC
//! client (Debian's `boinc-client`) running two GPU tasks of a project of our own (as
//! `boinc_tasks` starts it), recorded for a while, and the recorder's report route asked
//! for the window, whole and usage only. Each task is a claim of the BOINC project holding
//! a whole GPU, so the project has reserved GPU time. `GPUBOARD_SKIP_PEERS=boinc` skips it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::boinc_client::{Client as Boinc, PROJECT_NAME};

use std::time::{Duration, Instant};

use common::skip_peer;
use gpuboard::accounting::{Ask, IdleRule, PENDING_MS, Parts, WindowReport};
use gpuboard::client::{Client, ReportAt};
use gpuboard::clock::{Clock, SystemClock, Timestamp};

/// Starts `gpuboard record` with `args`, its history in `data`; its URL.
fn record(args: &[&str], data: &std::path::Path) -> (common::Recorder, String) {
    let recorder = common::start_record(args, data, &data.join("record.log"));
    let url = recorder.url.clone();
    (recorder, url)
}

/// The BOINC project's reserved GPU-seconds (by compute) in `r`.
fn reserved(r: &WindowReport) -> f64 {
    r.usage
        .projects
        .iter()
        .filter(|p| p.project == PROJECT_NAME)
        .map(|p| p.figures.reserved.compute.0)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_boinc_clients_tasks_are_accounted_to_its_project() {
    if skip_peer("boinc") {
        eprintln!("GPUBOARD_SKIP_PEERS has boinc: skipped");
        return;
    }
    let boinc = Boinc::with_gpu_tasks(2).await;
    let data = tempfile::tempdir().unwrap();
    let password = boinc.password_file();
    let (_record, url) = record(
        &[
            "--kind",
            "boinc",
            "--url",
            &boinc.addr,
            "--secret-file",
            password.to_str().unwrap(),
            "--every-ms",
            "500",
        ],
        data.path(),
    );
    let client = Client::new(&url, None, Duration::from_secs(30)).unwrap();
    let from = Timestamp(SystemClock.now().0 - 60_000);
    // Until the recorder has held the running tasks for a while (bounded).
    let deadline = Instant::now() + Duration::from_mins(3);
    let (whole, usage) = loop {
        let ask = Ask {
            from,
            to: SystemClock.now(),
            idle: IdleRule::default(),
            pending_ms: PENDING_MS,
        };
        let both = (
            client.history_report_parts(&ask, Parts::All).await,
            client.history_report_parts(&ask, Parts::Usage).await,
        );
        if let (Ok(ReportAt::Shown(w)), Ok(ReportAt::Shown(u))) = &both
            && reserved(w) >= 2.0
            && reserved(u) >= 2.0
        {
            break (w.clone(), u.clone());
        }
        assert!(
            Instant::now() < deadline,
            "the tasks were never accounted: {both:?}\nrecord log: {}",
            std::fs::read_to_string(data.path().join("record.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for r in [&whole, &usage] {
        let p = r
            .usage
            .projects
            .iter()
            .find(|p| p.project == PROJECT_NAME)
            .unwrap();
        assert_eq!(p.claims, 2, "{p:?}");
        // Two whole GPUs, each held by one task: reserved is all there was on them.
        assert!(p.figures.reserved.compute.0 <= r.usage.physical.0 + 1e-6);
        let holders: Vec<_> = r.usage.claims.iter().map(|c| c.holder.clone()).collect();
        assert!(holders.iter().all(Option::is_some), "{holders:?}");
    }
    assert!(usage.actions.is_empty());
}
