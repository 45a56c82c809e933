//! `gpuboard report` on a hand-made scenario with known answers: three projects, fractional
//! and whole-GPU claims, one claim idle for 40 minutes, one over its memory, a claim that
//! waited 20 minutes, a backoff, a lease expiry, a release by a named token and a cordon.
//! Recorded through the real recorder (`history::Recording`), accounted by the pure module
//! (figures checked against the hand-computed ones, Markdown a reviewed snapshot), then
//! written into a real `gpuboard serve`'s history and reported by the real CLI over HTTP,
//! beside an endpoint that does not answer. A live serve then records a release by a named
//! token, and the report's timeline shows it with the claim's state before and after.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::scenario::{
    GIB, MIN, T0, ask, expected, flag_episodes, recorded, ticks, write_history,
};
use crate::common::schema;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use gpuboard::accounting::{Ask, IdleRule, Parts, report};
use gpuboard::cli::report::{FleetReport, render};
use gpuboard::client::{ReportAt, SnapshotAt};
use gpuboard::clock::Timestamp;
use gpuboard::endpoint::report_api::window_report;
use gpuboard::ids::ClaimId;
use gpuboard::store::history::HistoryStore;
use gpuboard::units::Bytes;
use serde_json::Value;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-3
}

#[test]
fn the_scenario_adds_up_to_the_hand_computed_figures() {
    let (start, versions) = recorded(T0);
    let w = report(&start, &versions, &ticks(T0), &ask(T0));
    let u = &w.usage;
    assert!(close(u.physical.hours(), 8.0), "4 GPUs x 2 h");
    assert!(
        close(u.unallocated.compute.hours(), 3.0),
        "n0:2 2 h, n0:1 half for 2 h"
    );
    assert!(close(u.unallocated.memory.hours(), 3.0));
    let want = expected();
    for p in &u.projects {
        let (claims, reserved, used, idle) = want[p.project.as_str()];
        let f = &p.figures;
        assert_eq!(p.claims, claims, "{p:?}");
        assert!(close(f.reserved.compute.hours(), reserved), "{p:?}");
        assert!(close(f.reserved.memory.hours(), reserved), "{p:?}");
        assert!(close(f.used.hours(), used), "{p:?}");
        assert!(close(f.idle_allocated.hours(), idle), "{p:?}");
    }
    let order: Vec<&str> = u.projects.iter().map(|p| p.project.as_str()).collect();
    assert_eq!(
        order,
        ["vision", "speech", "nlp"],
        "biggest idle, then reserved"
    );
    // The timeline: three audited actions, each with its target around it.
    let actions: Vec<_> = w
        .actions
        .iter()
        .map(|a| (a.action.as_str(), a.before.as_str(), a.after.as_str()))
        .collect();
    assert_eq!(
        actions,
        [
            ("expire", "placed on n0:3 (1.00 GPU, 16 GiB)", "gone"),
            ("release", "placed on n0:1 (0.50 GPU, 8 GiB)", "gone"),
            (
                "cordon",
                "healthy, 0 claim(s)",
                "cordoned, healthy, 0 claim(s)"
            ),
        ]
    );
    assert_eq!(w.actions[1].actor, "alice (alice@ws1)");
    // What went wrong.
    let t = &w.trouble;
    assert_eq!(t.devices.len(), 1);
    assert_eq!(
        (t.devices[0].gpu.as_str(), t.devices[0].ongoing),
        ("n0:2", true)
    );
    assert_eq!(t.over_limit.len(), 1);
    let o = &t.over_limit[0];
    assert_eq!(
        (o.claim, o.peak, o.reserved),
        (ClaimId(2), Bytes(6 * GIB), Bytes(4 * GIB))
    );
    assert_eq!((o.from.0 - T0, o.to.0 - T0), (30 * MIN, 50 * MIN - 5_000));
    assert_eq!(t.long_pending.len(), 1);
    assert_eq!(t.long_pending[0].to.0 - t.long_pending[0].from.0, 20 * MIN);
    assert_eq!(t.backoffs.len(), 1);
    let b = &t.backoffs[0];
    assert_eq!(
        (b.project.as_str(), b.from.0 - T0, b.to.0 - T0),
        ("nlp", 30 * MIN, 45 * MIN)
    );
}

#[test]
fn the_scenario_reads_as_a_reviewed_markdown_report() {
    let (start, versions) = recorded(T0);
    let w = report(&start, &versions, &ticks(T0), &ask(T0));
    let mut w = w;
    w.history_from = Some(Timestamp(T0));
    w.flags = flag_episodes(T0);
    let merged = FleetReport::merge(
        &ask(T0),
        vec![
            (
                "gpu-a".into(),
                "http://127.0.0.1:7420".into(),
                Ok(ReportAt::Shown(Box::new(w))),
            ),
            (
                "gpu-b".into(),
                "http://127.0.0.1:7421".into(),
                Err("cannot reach http://127.0.0.1:7421: connection refused".into()),
            ),
        ],
    );
    // The flags add up per flag, and the idle hours go to each engine's owner: the Slurm
    // account `ml` and the Kubernetes namespace `ml` apart.
    let t = &merged.flags.totals;
    let by_flag: Vec<_> = t
        .by_flag
        .iter()
        .map(|f| (f.flag.as_str(), f.episodes, f.gpu_time.hours()))
        .collect();
    assert_eq!(
        by_flag,
        [
            ("double-booked", 1, 0.5),
            ("unexplained", 1, 0.25),
            ("idle", 2, 2.0)
        ]
    );
    let owners: Vec<_> = t
        .idle_by_owner
        .iter()
        .map(|o| {
            (
                o.engine.word(),
                o.kind.as_str(),
                o.name.as_str(),
                o.idle.hours(),
            )
        })
        .collect();
    assert_eq!(
        owners,
        [
            ("kubernetes", "namespace", "ml", 1.0),
            ("slurm", "account", "ml", 1.0)
        ]
    );
    assert!(merged.flags.episodes.iter().all(|e| e.endpoint == "gpu-a"));
    let md = render::markdown(&merged);
    for line in md.lines() {
        assert!(
            line.chars().count() <= render::WIDTH,
            "over 100 columns: {line}"
        );
    }
    insta::assert_snapshot!("report_scenario_markdown", md);
}

fn bin() -> std::path::PathBuf {
    std::env::var_os("GPUBOARD_TEST_BIN")
        .map_or_else(|| env!("CARGO_BIN_EXE_gpuboard").into(), Into::into)
}

fn gpuboard(dir: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .env_remove("GPUBOARD_TOKEN")
        .env_remove("GPUBOARD_ENDPOINT")
        .env_remove("GPUBOARD_CONFIG")
        .env("HOME", dir)
        .output()
        .unwrap()
}

fn rfc3339(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(ms as i64)
        .unwrap()
        .to_string()
}

/// The usage table added up from the hours rolled up (and the rest replayed) equals the
/// whole replay, for windows on the hour and off it; the whole scenario's is the
/// hand-computed one.
#[test]
fn usage_from_rolled_up_hours_equals_the_replay() {
    let dir = tempfile::tempdir().unwrap();
    write_history(dir.path(), T0);
    let store = HistoryStore::open(dir.path()).unwrap();
    let whole = Timestamp(T0 + 120 * MIN);
    assert_eq!(store.rollups(Timestamp(T0), whole, 5).unwrap().len(), 2);
    for (from, to) in [
        (0, 120),
        (7, 113),
        (60, 120),
        (0, 60),
        (10, 70),
        (59, 61),
        (30, 90),
    ] {
        let ask = Ask {
            from: Timestamp(T0 + from * MIN),
            to: Timestamp(T0 + to * MIN),
            ..ask(T0)
        };
        let all = window_report(&store, ask, Parts::All).unwrap().unwrap();
        let usage = window_report(&store, ask, Parts::Usage).unwrap().unwrap();
        assert!(
            usage.actions.is_empty() && usage.trouble == gpuboard::accounting::Trouble::default()
        );
        let (a, u) = (&all.usage, &usage.usage);
        assert!(close(a.physical.0, u.physical.0), "{from}..{to}");
        assert!(close(a.unallocated.memory.0, u.unallocated.memory.0));
        assert_eq!(a.projects.len(), u.projects.len(), "{from}..{to}");
        for (p, q) in a.projects.iter().zip(&u.projects) {
            assert_eq!(
                (&p.project, p.claims),
                (&q.project, q.claims),
                "{from}..{to}"
            );
            let (f, g) = (&p.figures, &q.figures);
            for (x, y) in [
                (f.reserved.compute.0, g.reserved.compute.0),
                (f.reserved.memory.0, g.reserved.memory.0),
                (f.used.0, g.used.0),
                (f.idle_allocated.0, g.idle_allocated.0),
            ] {
                assert!(close(x, y), "{from}..{to} {}: {x} vs {y}", p.project);
            }
        }
        let longest = |r: &gpuboard::accounting::WindowReport| {
            r.usage
                .claims
                .iter()
                .map(|c| (c.claim, c.longest_idle_ms))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(longest(&all), longest(&usage), "{from}..{to}");
    }
    let ask = ask(T0);
    let u = window_report(&store, ask, Parts::Usage)
        .unwrap()
        .unwrap()
        .usage;
    for (project, (claims, reserved, used, idle)) in expected() {
        let p = u.projects.iter().find(|p| p.project == project).unwrap();
        assert_eq!(p.claims, claims, "{project}");
        assert!(
            close(p.figures.reserved.compute.hours(), reserved),
            "{project}"
        );
        assert!(close(p.figures.used.hours(), used), "{project}");
        assert!(close(p.figures.idle_allocated.hours(), idle), "{project}");
    }
    // Another idle threshold than the roll-ups' replays the whole window.
    let strict = Ask {
        idle: IdleRule {
            idle_below_pct: 70,
            ..IdleRule::default()
        },
        ..ask
    };
    let all = window_report(&store, strict, Parts::All).unwrap().unwrap();
    let usage = window_report(&store, strict, Parts::Usage)
        .unwrap()
        .unwrap();
    assert!(
        usage
            .usage
            .projects
            .iter()
            .any(|p| p.figures.idle_allocated.0 > 0.0)
    );
    for (p, q) in all.usage.projects.iter().zip(&usage.usage.projects) {
        assert!(close(
            p.figures.idle_allocated.0,
            q.figures.idle_allocated.0
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_serve_reports_the_recorded_scenario_and_names_a_dead_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    // Three hours ago, on the hour: within the history's 30 days, and over by now.
    let now = jiff::Timestamp::now().as_millisecond() as u64;
    let t0 = now - now % 3_600_000 - 3 * 3_600_000;
    write_history(dir.path(), t0);
    let serve = common::Server::start(dir.path(), &common::demo_fleet(), &[]);
    let dead = format!("http://127.0.0.1:{}", common::free_port());
    let from = rfc3339(t0);
    let to = rfc3339(t0 + 120 * MIN);
    let out = gpuboard(
        dir.path(),
        &[
            "report",
            "--from",
            &from,
            "--to",
            &to,
            "--format",
            "json",
            "--timeout",
            "20",
            "--endpoint",
            &format!("a={}", serve.url),
            "--endpoint",
            &format!("dead={dead}"),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // The dead endpoint is named on stderr and its row of the exit-code table is the
    // exit status, as `ls` and `events` do; the report still covers the live one.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{text}{err}");
    assert!(err.contains("gpuboard: endpoint dead:"), "{err}");
    let r: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(r["schema"], "gpuboard.report/1");
    assert_eq!(r["endpoints"][0]["status"], "ok");
    assert_eq!(
        r["endpoints"][1]["status"], "unreachable",
        "{}",
        r["endpoints"]
    );
    assert!(
        r["endpoints"][1]["detail"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1")
    );
    let hours = |v: &Value| v.as_f64().unwrap() / 3600.0;
    assert!(close(hours(&r["usage"]["physical"]), 8.0));
    assert!(close(hours(&r["usage"]["unallocated"]["compute"]), 3.0));
    let want = expected();
    let projects = r["usage"]["projects"].as_array().unwrap();
    assert_eq!(projects.len(), 3);
    for p in projects {
        let (claims, reserved, used, idle) = want[p["project"].as_str().unwrap()];
        assert_eq!(p["claims"], claims, "{p}");
        assert!(close(hours(&p["reserved"]["compute"]), reserved), "{p}");
        assert!(close(hours(&p["reserved"]["memory"]), reserved), "{p}");
        assert!(close(hours(&p["used"]), used), "{p}");
        assert!(close(hours(&p["idle_allocated"]), idle), "{p}");
    }
    assert_eq!(r["timeline"].as_array().unwrap().len(), 3);
    assert_eq!(r["timeline"][1]["actor"], "alice (alice@ws1)");
    assert_eq!(r["timeline"][1]["endpoint"], "a");

    // Bad queries are refused, naming what is allowed.
    let http = common::http();
    for (query, says) in [
        (
            format!("from={t0}&to={t0}&idle_below=200"),
            "`idle_below` must be a whole number from 0 to 100",
        ),
        (format!("from={}&to={t0}", t0 + 1), "`from` is after `to`"),
        (format!("to={t0}"), "`from` is required"),
        (
            format!("from={t0}&to={t0}&bogus=1"),
            "unknown parameter `bogus`",
        ),
    ] {
        let r = http
            .get(format!("{}/v1/history/report?{query}", serve.url))
            .bearer_auth(serve.read_token())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{query}");
        let body = r.text().await.unwrap();
        assert!(body.contains(says), "{query}: {body}");
    }

    // A window before the history: it says where the history begins, and nothing else.
    let early = rfc3339(t0 - 5 * 3_600_000);
    let out = gpuboard(
        dir.path(),
        &[
            "report",
            "--from",
            &early,
            "--to",
            &rfc3339(t0 - 4 * 3_600_000),
            "--endpoint",
            &format!("a={}", serve.url),
        ],
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{md}");
    assert!(
        md.contains("`a`: NO HISTORY in the window: history from"),
        "{md}"
    );
    let begins = gpuboard::clock::date_time(Timestamp(t0), &jiff::tz::TimeZone::UTC);
    assert!(md.contains(&begins), "names where the history begins: {md}");

    // An endpoint that records no history says so; it is not taken for a dead one.
    let other = tempfile::tempdir().unwrap();
    let bare = common::Server::start(
        other.path(),
        &common::demo_fleet(),
        &["--history-days", "0"],
    );
    let out = gpuboard(
        other.path(),
        &[
            "report",
            "--since",
            "1h",
            "--endpoint",
            &format!("bare={}", bare.url),
        ],
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{md}");
    assert!(
        md.contains("`bare`: NO HISTORY in the window: no history recorded"),
        "{md}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_by_a_named_token_is_in_the_timeline_with_the_claim_around_it() {
    let dir = tempfile::tempdir().unwrap();
    let serve = common::Server::start(dir.path(), &common::demo_fleet(), &[]);
    let add = gpuboard(dir.path(), &["token", "add", "alice", "--role", "operator"]);
    assert!(
        add.status.success(),
        "{}",
        String::from_utf8_lossy(&add.stderr)
    );
    let alice = String::from_utf8_lossy(&add.stdout).trim().to_string();
    let admin = gpuboard::client::Client::new(
        &serve.url,
        Some(serve.operator_token()),
        Duration::from_secs(20),
    )
    .unwrap();
    let request =
        gpuboard::request::ClaimRequest::from_json(&serde_json::json!({"num_gpus": 0.25})).unwrap();
    let made = admin.claim(&request).await.unwrap();
    let id = made.claim().id;
    // Recorded before it is released, so the release has a state before it (the first
    // record may already hold it, as a keyframe without a change: look at the state).
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let now = Timestamp(jiff::Timestamp::now().as_millisecond() as u64);
        let seen = matches!(
            admin.snapshot_at(now).await,
            Ok(SnapshotAt::Shown { snapshot, .. }) if snapshot.claim(id).is_some()
        );
        if seen {
            break;
        }
        assert!(Instant::now() < deadline, "the claim was never recorded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let as_alice =
        gpuboard::client::Client::new(&serve.url, Some(alice), Duration::from_secs(20)).unwrap();
    as_alice.release(id).await.unwrap();
    // Today (UTC), as /metrics counts.
    let now = jiff::Timestamp::now().as_millisecond() as u64;
    let today = rfc3339(now - now % 86_400_000);
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let out = gpuboard(
            dir.path(),
            &[
                "report",
                "--from",
                &today,
                "--format",
                "json",
                "--endpoint",
                &serve.url,
            ],
        );
        let r: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let release = r["timeline"].as_array().and_then(|t| {
            t.iter()
                .find(|a| a["action"] == "release" && a["target"] == format!("claim {id}"))
                .cloned()
        });
        if let Some(a) = release {
            assert!(a["actor"].as_str().unwrap().starts_with("alice"), "{a}");
            assert!(
                a["before"].as_str().unwrap().starts_with("placed on "),
                "{a}"
            );
            assert!(a["before"].as_str().unwrap().contains("0.25 GPU"), "{a}");
            assert_eq!(a["after"], "gone", "{a}");
            // /metrics counts the same GPU-seconds today as the report does (the claim is
            // gone, so neither grows any more).
            let project = r["usage"]["projects"][0].clone();
            let reserved = project["reserved"]["compute"].as_f64().unwrap();
            assert!(reserved > 0.0, "{project}");
            let text = common::http()
                .get(format!("{}/metrics", serve.url))
                .bearer_auth(serve.read_token())
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let name = project["project"].as_str().unwrap();
            let line = format!(
                "gpuboard_project_gpu_seconds_total{{project=\"{name}\",state=\"reserved\"}} "
            );
            let counted: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix(&line))
                .unwrap_or_else(|| panic!("no {line} in {text}"))
                .trim()
                .parse()
                .unwrap();
            assert!((counted - reserved).abs() < 1e-6, "{counted} vs {reserved}");
            assert!(text.contains("state=\"idle_allocated\""), "{text}");
            break;
        }
        assert!(Instant::now() < deadline, "the release never showed: {r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

const REPORT_PAGE: &str = "\
# Report schema reference (`gpuboard.report/1`)

What `gpuboard report --format json` prints. The `schema` field names this format and its
version: fields may be added within version 1; a field removed, renamed or changed in meaning
makes it `gpuboard.report/2`. Generated by `tests/report_scenario.rs` from the hand-made
scenario of that test (with an endpoint that has no history and one that does not answer);
the test fails when the code's output and this page differ
(`GPUBOARD_UPDATE_REFERENCE=1 cargo test --test it report_scenario::` rewrites it).

Units: times are milliseconds since the Unix epoch; GPU time is GPU-seconds (a number: a
quarter GPU for an hour is 900); memory is bytes; `idle.idle_for_ms` and `pending_over_ms`
are milliseconds.

- `endpoints[]`: every endpoint asked, in order; `status` is `ok` (its part is in the
  report), `no_history` (the window is before its history begins: `history_from` says where
  it begins, `null` when nothing is recorded) or `unreachable` (`detail` says why; the rest
  of the report is still made). `accounted_from` is set when its history begins inside the
  window.
- `usage`: `physical` is the devices present times the window; `unallocated` what no claim
  reserved, by compute fraction and by memory fraction; per project (`projects[]`, biggest
  `idle_allocated` first, summed across endpoints) and per claim (`claims[]`, with its
  `endpoint`): `reserved.compute` and `reserved.memory` (the claim's share of each device,
  times how long), `used` (the device utilization while a process of the claim ran there,
  times its share), `idle_allocated` (held while every device of the claim ran below
  `idle.idle_below_pct` for `idle.idle_for_ms` or longer; the whole run counts). Per
  endpoint, the projects' `reserved` plus `unallocated` equals `physical`.
- `timeline[]`: audited actions, oldest first: `at`, `endpoint`, `actor`, `action`, `target`,
  `detail`, and the target's state in words just `before` and just `after`.
- `trouble`: `gpus[]` (`condition`: `stale`, `unhealthy` or `cordoned`, from `from` to `to`,
  `ongoing` at the window's end), `over_limit[]` (a claim's processes used more than it
  reserved on `gpu`: the `peak`, first and last sample over), `long_pending[]` (claims that
  waited `pending_over_ms` or longer, with the scheduler's last `reasons`), `backoffs[]`
  (a project backed off on a resource type, from `from` to `to`).
- `flags`: what the endpoints' recorders flagged on their GPUs (a `gpuboard record --config`
  joins several engines' sources, so its flags are across engines). `by_flag[]`: per flag
  (`double-booked`, `unexplained`, `idle`) its `episodes` and `gpu_time` inside the window.
  `idle_by_owner[]`: idle GPU time charged to whoever held the GPU, by `engine` and `kind`
  (a Slurm `account`, a Kubernetes `namespace`, a Ray `job`, a gpuboard or BOINC
  `project`), most first; an idle GPU's time is shared among the holders the episode names
  by their compute. `episodes[]`: each `flag` on a `gpu` (`node`, `index`, `uuid`), the
  outermost `holders` it names (`engine`, `label`, `project`, `source`, `compute` in units
  of 1/10 000 GPU), its `detail` in words, `started` (an idle one: when the GPU went idle)
  and `ended` (absent while it goes on), with its `endpoint`.

";

#[test]
fn the_report_json_reference_matches_the_code() {
    let (start, versions) = recorded(T0);
    let mut w = report(&start, &versions, &ticks(T0), &ask(T0));
    w.history_from = Some(Timestamp(T0));
    w.flags = flag_episodes(T0);
    let merged = FleetReport::merge(
        &ask(T0),
        vec![
            (
                "gpu-a".into(),
                "http://127.0.0.1:7420".into(),
                Ok(ReportAt::Shown(Box::new(w))),
            ),
            (
                "gpu-b".into(),
                "http://127.0.0.1:7421".into(),
                Ok(ReportAt::BeforeHistory {
                    history_from: Some(Timestamp(T0)),
                }),
            ),
            (
                "gpu-c".into(),
                "http://127.0.0.1:7422".into(),
                Err("cannot reach http://127.0.0.1:7422: connection refused".into()),
            ),
        ],
    );
    let mut page = REPORT_PAGE.to_string();
    page.push_str(&schema::schema_table(&[
        serde_json::to_value(&merged).unwrap()
    ]));
    schema::check_generated("report.md", &page);
}
