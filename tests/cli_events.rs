//! The CLI reads what the console reads, on real `gpuboard serve`s: `events` (the audit
//! history across the endpoints in play, filtered, as a table or JSON), `show ID` (a
//! claim's detail as text) and `ls` with the reason a pending claim waits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::process::Output;
use std::time::{Duration, Instant};

use common::{Server, demo_fleet};
use serde_json::Value;

fn text(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// A serve of the demo fleet with claim 1 placed (8 GPUs of dgx-a100-80) and claim 2
/// pending behind it.
fn busy(dir: &std::path::Path) -> Server {
    let server = Server::start(dir, &demo_fleet(), &["--open-reads"]);
    let placed = server.cli(&[
        "claim",
        "--gpus",
        "8",
        "--node",
        "dgx-a100-80",
        "--project",
        "vision",
        "--holder",
        "alice",
    ]);
    assert!(text(&placed).contains("claim 1 placed"));
    let pending = server.cli(&[
        "claim",
        "--gpus",
        "8",
        "--node",
        "dgx-a100-80",
        "--project",
        "nlp",
        "--holder",
        "bob",
        "--wait",
    ]);
    assert!(text(&pending).contains("claim 2 pending"));
    server
}

#[test]
fn ls_gives_the_reason_a_pending_claim_waits() {
    let dir = tempfile::tempdir().unwrap();
    let server = busy(dir.path());
    let table = text(&server.cli(&["ls"]));
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    assert!(header.trim_end().ends_with("REASON"), "{table}");
    let placed = lines.next().unwrap();
    assert!(
        placed.starts_with("1 ") && placed.trim_end().ends_with(" -"),
        "{table}"
    );
    let pending = lines.next().unwrap();
    assert!(
        pending.starts_with("2 ") && pending.contains("pending"),
        "{table}"
    );
    let reason = &pending[header.find("REASON").unwrap()..];
    assert!(
        reason.starts_with("node dgx-a100-80: 8/8 GPUs insufficient memory"),
        "{table}"
    );
}

#[test]
fn events_lists_filters_and_prints_json() {
    let dir = tempfile::tempdir().unwrap();
    let server = busy(dir.path());
    let released = server.cli(&["release", "1"]);
    text(&released);
    let all = text(&server.cli(&["events"]));
    let lines: Vec<&str> = all.lines().collect();
    assert!(
        lines[0].starts_with("TIME") && lines[0].contains("ACTOR"),
        "{all}"
    );
    assert!(
        !lines[0].contains("ENDPOINT"),
        "one endpoint: no endpoint column\n{all}"
    );
    // Each row says whose claim it was, also once it is gone.
    let release = lines
        .iter()
        .find(|l| l.contains("release") && l.contains("claim 1"));
    assert!(
        release.is_some_and(|l| l.contains("project vision, holder alice")),
        "{all}"
    );
    for (target, what) in [
        ("claim 1", "placed"),
        ("claim 2", "pending"),
        ("claim 1", "release"),
        ("claim 1", "project vision, holder alice"),
        ("claim 2", "project nlp, holder bob"),
    ] {
        assert!(
            lines.iter().any(|l| l.contains(target) && l.contains(what)),
            "no `{target}` … `{what}` in\n{all}"
        );
    }
    // When claim 1 left, claim 2 was placed: the scheduler's doing, after the release.
    // The scheduler places it at its next tick: read until it did, with a generous deadline.
    let deadline = Instant::now() + Duration::from_mins(1);
    let json = loop {
        let json: Value =
            serde_json::from_str(&text(&server.cli(&["events", "--target", "2", "--json"])))
                .unwrap();
        if json.as_array().unwrap().len() >= 2 {
            break json;
        }
        assert!(Instant::now() < deadline, "claim 2 never placed: {json:#}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let events = json.as_array().unwrap();
    assert!(events.iter().all(|e| e["target"] == "claim 2"), "{json:#}");
    let at: Vec<u64> = events.iter().map(|e| e["at"].as_u64().unwrap()).collect();
    assert!(
        at.windows(2).all(|w| w[0] <= w[1]),
        "oldest first: {json:#}"
    );
    let actor = events[0]["actor"].as_str().unwrap().to_string();
    // --actor keeps only that actor's events.
    let mine: Value =
        serde_json::from_str(&text(&server.cli(&["events", "--actor", &actor, "--json"]))).unwrap();
    assert!(
        mine.as_array()
            .unwrap()
            .iter()
            .all(|e| e["actor"] == actor.as_str())
    );
    let nobody = text(&server.cli(&["events", "--actor", "nobody"]));
    assert!(nobody.contains("(no events)"), "{nobody}");
    // --since: a time ago keeps them (`1h` or `-1h`, as every command reads times); a time
    // in the future is refused as `status --at` refuses it.
    let recent = text(&server.cli(&["events", "--since", "1h", "--target", "claim"]));
    assert!(recent.lines().count() >= 4, "{recent}");
    let same = text(&server.cli(&["events", "--since", "-1h", "--target", "claim"]));
    assert_eq!(recent, same);
    let future = server.cli(&["events", "--since", "2999-01-01T00:00:00Z"]);
    assert_eq!(future.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&future.stderr).contains("in the future"));
    // A --since that is neither is refused, saying what is allowed.
    let bad = server.cli(&["events", "--since", "soon"]);
    assert_eq!(bad.status.code(), Some(3));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("`soon`") && err.contains("10m"), "{err}");
}

#[test]
fn events_read_every_endpoint_in_play() {
    let a_dir = tempfile::tempdir().unwrap();
    let b_dir = tempfile::tempdir().unwrap();
    let a = busy(a_dir.path());
    let b = Server::start(b_dir.path(), &demo_fleet(), &["--open-reads"]);
    text(&b.cli(&["claim", "--memory", "1GiB", "--project", "infra"]));
    let out = std::process::Command::new(common::gpuboard())
        .args(["events", "--endpoint"])
        .arg(format!("gpu-a={}", a.url))
        .arg("--endpoint")
        .arg(format!("gpu-b={}", b.url))
        .env_remove("GPUBOARD_TOKEN")
        .env_remove("GPUBOARD_ENDPOINT")
        .env("GPUBOARD_CACHE_DIR", a_dir.path().join("cache"))
        .output()
        .unwrap();
    let table = text(&out);
    assert!(
        table.lines().next().unwrap().contains("ENDPOINT"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.contains("gpu-a") && l.contains("claim 2")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.contains("gpu-b") && l.contains("claim 1")),
        "{table}"
    );
    // One endpoint down: the other's events still print, and the exit code says so.
    let dead = format!("http://127.0.0.1:{}", common::free_port());
    let out = std::process::Command::new(common::gpuboard())
        .args(["events", "--json", "--timeout", "5", "--endpoint"])
        .arg(format!("gpu-a={}", a.url))
        .arg("--endpoint")
        .arg(format!("gone={dead}"))
        .env_remove("GPUBOARD_TOKEN")
        .env_remove("GPUBOARD_ENDPOINT")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("gone"));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        json.as_array()
            .unwrap()
            .iter()
            .all(|e| e["endpoint"] == "gpu-a"),
        "{json:#}"
    );
}

#[test]
fn show_prints_a_claims_detail() {
    let dir = tempfile::tempdir().unwrap();
    let server = busy(dir.path());
    let show = |id: &str| {
        std::process::Command::new(common::gpuboard())
            .args(["show", id, "--endpoint", &server.url, "--data-dir"])
            .arg(&server.dir)
            .env_remove("GPUBOARD_TOKEN")
            .output()
            .unwrap()
    };
    let page = text(&show("2"));
    for want in [
        "claim 2 pending",
        "bob",
        "nlp",
        "Why pending",
        "insufficient memory",
        "Audit history",
    ] {
        assert!(page.contains(want), "no `{want}` in\n{page}");
    }
    // The claim alone: no tab bar, no key hints, no blank rows padding it to a screen.
    assert!(!page.contains("1 Overview"), "{page}");
    assert!(!page.ends_with("\n\n"), "{page:?}");
    let placed = text(&show("1"));
    assert!(
        placed.contains("claim 1") && placed.contains("alice") && placed.contains("dgx-a100-80"),
        "{placed}"
    );
    let missing = show("99");
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("show 99: no claim `99`; claims: 1, 2"),
        "{err}"
    );
}
