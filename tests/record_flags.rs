//! `gpuboard record --config` over two real serves that each book the one GPU of node `n1`
//! whole: neither sees the other, the joined recorder does. The double booking shows in its
//! `/metrics` with both holders named, ends when one claim is released, is kept in its
//! history and read back by its report route and by `gpuboard report`. And a serve's own
//! recorder, fed snapshots over 40 minutes of their time, keeps its GPUs' unexplained and
//! idle episodes in its `SQLite` history and ends the open ones when it starts again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use common::{Server, one_node_inventory, text};
use serde_json::Value;

async fn get(url: &str) -> (u16, String) {
    let r = common::http().get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Polls `url` until `check` holds on its body.
async fn until(url: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let (_, body) = get(url).await;
        if check(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "never saw {what}: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_recorder_flags_records_and_reports_a_double_booking_across_sources() {
    let work = tempfile::tempdir().unwrap();
    let inventory = one_node_inventory(work.path(), "n1", "NVIDIA H100 80GB HBM3", "80GiB", 1);
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Server::start(da.path(), &inventory, &["--open-reads"]);
    let b = Server::start(db.path(), &inventory, &["--open-reads"]);
    for (s, project) in [(&a, "vision"), (&b, "speech")] {
        let out = s.cli(&[
            "claim",
            "--gpus",
            "1",
            "--project",
            project,
            "--holder",
            project,
        ]);
        assert!(text(&out.stdout).contains("claim 1 placed"), "{out:?}");
    }
    let config = work.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[endpoints]]\nname = \"a\"\nurl = \"{}\"\n\n[[endpoints]]\nname = \"b\"\nurl = \"{}\"\n",
            a.url, b.url
        ),
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let rec = common::start_record(
        &["--config", config.to_str().unwrap(), "--every-ms", "300"],
        data.path(),
        &work.path().join("record.log"),
    );
    assert!(
        rec.said.contains("joining a (gpuboard), b (gpuboard)"),
        "{}",
        rec.said
    );
    let metrics = format!("{}/metrics", rec.url);
    let booked = |t: &str| {
        t.lines()
            .filter(|l| l.starts_with("gpuboard_gpu_flagged{") && l.contains("double-booked"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let text_now = until(&metrics, "the double booking", |t| booked(t).len() == 2).await;
    let lines = booked(&text_now);
    for project in ["vision", "speech"] {
        assert!(
            lines.iter().any(|l| l.contains("node=\"n1\",index=\"0\"")
                && l.contains(&format!("holder=\"claim 1 ({project})\""))
                && l.contains(&format!("project=\"{project}\""))
                && l.contains("engine=\"gpuboard\"")
                && l.ends_with(" 1")),
            "{project}: {text_now}"
        );
    }
    // Each serve alone sees nothing wrong.
    for s in [&a, &b] {
        let (_, own) = get(&format!("{}/metrics", s.url)).await;
        assert!(!own.contains("double-booked"), "{own}");
    }
    // A joined recorder keeps flags, not snapshots, and says so.
    let (status, body) = get(&format!("{}/v1/snapshot", rec.url)).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("flags_only"), "{body}");

    let out = b.cli(&["release", "1"]);
    assert!(out.status.success(), "{out:?}");
    until(&metrics, "the booking's end", |t| booked(t).is_empty()).await;

    let now = jiff::Timestamp::now().as_millisecond();
    let (status, body) = get(&format!(
        "{}/v1/history/report?from={}&to={now}",
        rec.url,
        now - 600_000
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    let w: Value = serde_json::from_str(&body).unwrap();
    let episodes = w["flags"].as_array().unwrap();
    assert_eq!(episodes.len(), 1, "{body}");
    let e = &episodes[0];
    assert_eq!(
        (e["flag"].as_str(), e["gpu"].as_str()),
        (Some("double-booked"), Some("n1:0"))
    );
    let sources: Vec<&str> = e["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["a", "b"]);
    assert!(e["ended"].as_u64().unwrap() > e["started"].as_u64().unwrap());

    // `gpuboard report` reads it as it reads any endpoint's part.
    let out = std::process::Command::new(common::gpuboard())
        .args(["report", "--since", "1h", "--format", "json", "--endpoint"])
        .arg(format!("joined={}", rec.url))
        .env_remove("GPUBOARD_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["flags"]["by_flag"][0]["flag"], "double-booked");
    assert_eq!(r["flags"]["by_flag"][0]["episodes"], 1);
    assert_eq!(r["flags"]["episodes"][0]["endpoint"], "joined");
}

/// The lab's snapshot at `at` minutes, every GPU at `util` %.
fn lab_at(t0: u64, at: u64, util: u32) -> gpuboard::snapshot::Snapshot {
    let mut s = crate::common::console_fixtures::lab_snapshot();
    s.taken_at = gpuboard::clock::Timestamp(t0 + at * 60_000);
    s.revision = at + 1;
    for d in s.nodes.iter_mut().flat_map(|n| n.devices.iter_mut()) {
        if let Some(t) = d.telemetry.as_mut() {
            t.utilization_gpu = Some(util);
            t.sampled_at = s.taken_at;
        }
    }
    s
}

/// A serve's recorder, fed the lab's snapshots (its own clock is theirs): the stray process
/// on `lab-b:0` is one unexplained episode from the first snapshot; the held GPUs below 5 %
/// for 31 minutes are idle episodes from when they went idle, ended when they get busy; all
/// read back from the `SQLite` file. Started again, it ends what was left open.
#[test]
fn a_serves_recorder_keeps_its_gpus_flags_as_episodes_in_its_history() {
    use gpuboard::clock::Timestamp;
    use gpuboard::endpoint::history_recorder::RecordedHistory;
    use gpuboard::store::history::{HistoryStore, Retention};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let t0 = 1_795_568_400_000;
    let h = RecordedHistory::open(dir.path(), Retention::default()).unwrap();
    for (at, util) in [(0, 1), (10, 2), (31, 0), (40, 90)] {
        h.feed(Arc::new(lab_at(t0, at, util)));
    }
    let reader = HistoryStore::open_reader(dir.path()).unwrap();
    let read = || {
        reader
            .flag_episodes(Timestamp(t0), Timestamp(t0 + 3_600_000))
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_mins(1);
    while read().iter().filter(|e| e.ended.is_some()).count() < 2 {
        assert!(Instant::now() < deadline, "never recorded: {:?}", read());
        std::thread::sleep(Duration::from_millis(20));
    }
    let episodes = read();
    let stray = episodes.iter().find(|e| e.flag == "unexplained").unwrap();
    assert_eq!(
        (stray.node.as_str(), stray.index, stray.started),
        ("lab-b", 0, Timestamp(t0))
    );
    assert!(stray.ended.is_none(), "the stray process is still there");
    assert!(stray.detail.contains("4242"), "{}", stray.detail);
    let idle: Vec<_> = episodes.iter().filter(|e| e.flag == "idle").collect();
    assert!(!idle.is_empty());
    for e in &idle {
        assert_eq!(e.started, Timestamp(t0), "{e:?}");
        assert_eq!(e.ended, Some(Timestamp(t0 + 40 * 60_000)), "{e:?}");
        assert!(!e.holders.is_empty(), "{e:?}");
        assert!(
            e.holders.iter().all(|h| h.engine.word() == "gpuboard"),
            "{e:?}"
        );
    }
    assert_eq!(h.open_flags().len(), 1, "the stray process's, open now");
    drop(reader);
    drop(h);
    // Started again: what was open ended at the last thing recorded.
    let again = RecordedHistory::open(dir.path(), Retention::default()).unwrap();
    let reader = HistoryStore::open_reader(dir.path()).unwrap();
    let stray = reader
        .flag_episodes(Timestamp(t0), Timestamp(t0 + 3_600_000))
        .unwrap()
        .into_iter()
        .find(|e| e.flag == "unexplained")
        .unwrap();
    assert_eq!(stray.ended, Some(Timestamp(t0 + 40 * 60_000)));
    drop(again);
}
