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
use crate::common::schema;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use gpuboard::accounting::{Ask, IdleRule, PENDING_MS, Parts, report};
use gpuboard::cli::report::{FleetReport, render};
use gpuboard::client::{ReportAt, SnapshotAt};
use gpuboard::clock::Timestamp;
use gpuboard::endpoint::history_store::HistoryStore;
use gpuboard::endpoint::report_api::window_report;
use gpuboard::history::sample::{Rare, Tick};
use gpuboard::history::wire::GpuRef;
use gpuboard::history::{DeviceSample, Record, Recording, state_of};
use gpuboard::ids::ClaimId;
use gpuboard::placement::DeviceShare;
use gpuboard::snapshot::{
    AuditEvent, ClaimState, ClaimView, DeviceView, NodeView, ProcessView, ProjectResourceView,
    ProjectView, Snapshot,
};
use gpuboard::units::{Bytes, Slots, Units};
use serde_json::Value;

const GIB: u64 = 1 << 30;
const MIN: u64 = 60_000;
/// 2026-11-25 01:00:00 UTC: the snapshot's window.
const T0: u64 = 1_795_568_400_000;

/// A claim of the scenario: id, project, device on node n0 (None: pending), compute units.
type Claim = (u64, &'static str, Option<u32>, u32);

struct Moment {
    minute: u64,
    claims: Vec<Claim>,
    cordoned: Vec<u32>,
    nlp_backoff_until: Option<u64>,
    event: Option<(&'static str, &'static str, &'static str, &'static str)>,
}

fn claim_view(t0: u64, &(id, project, device, units): &Claim) -> ClaimView {
    let memory = Bytes(16 * GIB * u64::from(units) / 10_000);
    ClaimView {
        id: ClaimId(id),
        state: if device.is_some() {
            ClaimState::Placed
        } else {
            ClaimState::Pending
        },
        project: project.to_string(),
        holder: (id == 1).then(|| "train-resnet".to_string()),
        form: if units == 10_000 {
            "num_gpus=1".into()
        } else {
            format!("num_gpus=0.{}", units / 100)
        },
        request: gpuboard::request::ClaimRequest::from_json(&serde_json::json!({"num_gpus": 1}))
            .unwrap(),
        node: device.map(|_| "n0".to_string()),
        shares: device
            .map(|d| DeviceShare {
                device: d,
                memory,
                compute: Units(units),
                slots: Slots(if units == 10_000 { 100 } else { 1 }),
            })
            .into_iter()
            .collect(),
        memory_reserved: memory,
        compute_reserved: Units(units),
        memory_used: None,
        over_limit: false,
        idle: false,
        created_at: Timestamp(t0),
        lease_expires_at: None,
        pending_reasons: if device.is_none() {
            vec!["n0: no GPU has a whole device free".to_string()]
        } else {
            Vec::new()
        },
        infeasible: false,
    }
}

/// The endpoint's state at each moment, as it served it.
fn states(t0: u64) -> Vec<Snapshot> {
    let base: Vec<Claim> = vec![
        (1, "vision", Some(0), 10_000),
        (2, "nlp", Some(1), 2_500),
        (3, "speech", Some(1), 5_000),
        (4, "speech", None, 10_000),
        (5, "vision", Some(3), 10_000),
    ];
    let after_20: Vec<Claim> = vec![base[0], base[1], base[2], (4, "speech", Some(3), 10_000)];
    let after_60: Vec<Claim> = vec![after_20[0], after_20[1], after_20[3]];
    let moments = [
        Moment {
            minute: 0,
            claims: base,
            cordoned: vec![],
            nlp_backoff_until: None,
            event: None,
        },
        Moment {
            minute: 20,
            claims: after_20.clone(),
            cordoned: vec![],
            nlp_backoff_until: None,
            event: Some(("lease", "expire", "claim 5", "lease expired, released")),
        },
        Moment {
            minute: 30,
            claims: after_20,
            cordoned: vec![],
            nlp_backoff_until: Some(45),
            event: None,
        },
        Moment {
            minute: 60,
            claims: after_60.clone(),
            cordoned: vec![],
            nlp_backoff_until: Some(45),
            event: Some(("alice (alice@ws1)", "release", "claim 3", "released")),
        },
        Moment {
            minute: 90,
            claims: after_60,
            cordoned: vec![2],
            nlp_backoff_until: Some(45),
            event: Some(("ops (ops@ws2)", "cordon", "n0:2", "cordoned")),
        },
    ];
    let mut events = Vec::new();
    let mut out = Vec::new();
    for (i, m) in moments.iter().enumerate() {
        let revision = i as u64 + 1;
        let at = t0 + m.minute * MIN;
        if let Some((actor, action, target, detail)) = m.event {
            events.push(AuditEvent {
                revision,
                at: Timestamp(at),
                actor: actor.into(),
                action: action.into(),
                target: target.into(),
                detail: detail.into(),
            });
        }
        let devices = (0..4)
            .map(|d| {
                let mine: Vec<&Claim> = m.claims.iter().filter(|c| c.2 == Some(d)).collect();
                let units: u32 = mine.iter().map(|c| c.3).sum();
                let mem = Bytes(16 * GIB * u64::from(units) / 10_000);
                DeviceView {
                    index: d,
                    model: "NVIDIA L4".into(),
                    memory_capacity: Some(Bytes(16 * GIB)),
                    memory_allocated: mem,
                    memory_free: Bytes(16 * GIB - mem.0),
                    compute_allocated: Units(units),
                    compute_free: Units(10_000 - units),
                    cordoned: m.cordoned.contains(&d),
                    holders: mine.iter().map(|c| ClaimId(c.0)).collect(),
                    ..DeviceView::default()
                }
            })
            .collect();
        let project = |name: &str, share: u32, until: Option<u64>| ProjectView {
            name: name.into(),
            share,
            resources: vec![ProjectResourceView {
                resource: "gpu".into(),
                eligible: until.is_none(),
                backoff_until: until.map(|u| Timestamp(t0 + u * MIN)),
                ..ProjectResourceView::default()
            }],
            ..ProjectView::default()
        };
        out.push(Snapshot {
            schema: 1,
            revision,
            taken_at: Timestamp(at),
            nodes: vec![NodeView {
                name: "n0".into(),
                devices,
                ..NodeView::default()
            }],
            claims: m.claims.iter().map(|c| claim_view(t0, c)).collect(),
            projects: vec![
                project("nlp", 100, m.nlp_backoff_until),
                project("speech", 100, None),
                project("vision", 200, None),
            ],
            events: events.clone(),
            ..Snapshot::default()
        });
    }
    out
}

fn sample(at: u64, util: u32, procs: &[(u64, u64)]) -> DeviceSample {
    DeviceSample {
        at: Timestamp(at),
        utilization_gpu: Some(util),
        memory_used: Some(Bytes(procs.iter().map(|p| p.1).sum::<u64>() * GIB)),
        rare: Rare {
            processes: procs
                .iter()
                .map(|&(claim, gib)| ProcessView {
                    pid: 1000 + claim as u32,
                    name: Some("python".into()),
                    used_memory: Some(Bytes(gib * GIB)),
                    claim: Some(ClaimId(claim)),
                })
                .collect(),
            ..Rare::default()
        },
        ..DeviceSample::default()
    }
}

/// Every 5 s for two hours: what each GPU's processes did.
fn samples(t0: u64) -> BTreeMap<GpuRef, Vec<DeviceSample>> {
    let mut out: BTreeMap<GpuRef, Vec<DeviceSample>> = BTreeMap::new();
    for i in 0..(120 * MIN / 5_000) {
        let at = t0 + i * 5_000;
        let m = (at - t0) / MIN;
        let gpu = |index| GpuRef {
            node: "n0".into(),
            index,
        };
        // Claim 1 trains, sits idle from minute 60 to 100 (no process), then trains again.
        let a = if (60..100).contains(&m) {
            sample(at, 0, &[])
        } else {
            sample(at, 80, &[(1, 10)])
        };
        // Claim 2 (4 GiB reserved) uses 6 GiB from minute 30 to 50; claim 3 runs until 60.
        let nlp = if (30..50).contains(&m) { 6 } else { 3 };
        let b = if m < 60 {
            sample(at, 60, &[(2, nlp), (3, 2)])
        } else {
            sample(at, 60, &[(2, nlp)])
        };
        let d = if m < 20 {
            sample(at, 90, &[(5, 12)])
        } else {
            sample(at, 50, &[(4, 12)])
        };
        out.entry(gpu(0)).or_default().push(a);
        out.entry(gpu(1)).or_default().push(b);
        out.entry(gpu(2)).or_default().push(sample(at, 0, &[]));
        out.entry(gpu(3)).or_default().push(d);
    }
    out
}

fn recorded(t0: u64) -> (Snapshot, Vec<Record>) {
    let states = states(t0);
    let mut r = Recording::default();
    let mut records: Vec<Record> = states.iter().filter_map(|s| r.observe(s)).collect();
    records.remove(0);
    (state_of(&states[0]), records)
}

fn ask(t0: u64) -> Ask {
    Ask {
        from: Timestamp(t0),
        to: Timestamp(t0 + 120 * MIN),
        idle: IdleRule::default(),
        pending_ms: PENDING_MS,
    }
}

/// The hand-computed figures, GPU-hours: project -> (claims, reserved, used, idle).
fn expected() -> BTreeMap<&'static str, (u32, f64, f64, f64)> {
    [
        // Claim 1: 1 GPU x 2 h; used 0.8 x 80 min; idle 40 min. Claim 5: 1 GPU x 20 min at 90 %.
        (
            "vision",
            (2, 2.0 + 1.0 / 3.0, 0.8 * 80.0 / 60.0 + 0.3, 40.0 / 60.0),
        ),
        // Claim 2: 0.25 GPU x 2 h at 60 %.
        ("nlp", (1, 0.5, 0.25 * 0.6 * 2.0, 0.0)),
        // Claim 3: 0.5 GPU x 1 h at 60 %; claim 4: 1 GPU from minute 20 at 50 %.
        (
            "speech",
            (2, 0.5 + 100.0 / 60.0, 0.3 + 0.5 * 100.0 / 60.0, 0.0),
        ),
    ]
    .into()
}

/// What accounting reads of the scenario's samples.
fn ticks(t0: u64) -> BTreeMap<GpuRef, Vec<Tick>> {
    samples(t0)
        .into_iter()
        .map(|(gpu, series)| (gpu, series.iter().map(Tick::from).collect()))
        .collect()
}

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

/// Writes the scenario into `dir`'s history as the recorder would have.
fn write_history(dir: &Path, t0: u64) {
    let start_states = states(t0);
    let mut store = HistoryStore::open(dir).unwrap();
    let mut r = Recording::default();
    for s in &start_states {
        if let Some(rec) = r.observe(s) {
            store.append(&rec).unwrap();
        }
    }
    for (gpu, series) in samples(t0) {
        for hour in series.chunk_by(|a, b| a.at.0 / 3_600_000 == b.at.0 / 3_600_000) {
            store.add_chunk(&gpu, hour).unwrap();
        }
    }
    // As the recorder does when it seals each hour.
    for hour in [t0, t0 + 60 * MIN] {
        store.roll_up(Timestamp(hour)).unwrap();
    }
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
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
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

";

#[test]
fn the_report_json_reference_matches_the_code() {
    let (start, versions) = recorded(T0);
    let mut w = report(&start, &versions, &ticks(T0), &ask(T0));
    w.history_from = Some(Timestamp(T0));
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
