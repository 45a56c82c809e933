//! The BOINC source: captured BOINC 7.20.5 GUI RPC replies, peers that misbehave, and a real
//! `boinc` client on 127.0.0.1 attached to a project scheduler of our own that never has
//! work, so the client sets real per-resource backoffs. The source must report the
//! project, its share, priority and the backoffs exactly as the client's raw `get_state`
//! says, and "update project" must clear them.
//!
//! Needs Debian's `boinc-client` (scripts/test installs it); `GPUBOARD_SKIP_PEERS=boinc`
//! skips the real-client test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::boinc_client;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{fixture, free_port, skip_peer};
use gpuboard::clock::{ManualClock, Timestamp};
use gpuboard::snapshot::{ClaimState, Snapshot};
use gpuboard::sources::boinc::{BoincAnswers, BoincConfig, BoincSource, snapshot};
use gpuboard::sources::error::SourceError;
use gpuboard::sources::guirpc::GuiRpc;
use gpuboard::units::Units;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const TAKEN: Timestamp = Timestamp(1_795_317_020_000);

fn answers(state: &str, cc: &str) -> BoincAnswers {
    let read = |n: &str| std::fs::read_to_string(fixture(&format!("boinc/{n}"))).unwrap();
    BoincAnswers {
        state: read(state),
        cc_status: read(cc),
    }
}

fn from_fixture(state: &str, cc: &str) -> Snapshot {
    snapshot(&answers(state, cc), "", TAKEN).unwrap()
}

#[test]
fn captured_backoff_is_reported_per_resource() {
    let s = from_fixture("state_backoff.xml", "cc_status_backoff.xml");
    assert_eq!(s.endpoint.kind, "boinc");
    assert_eq!(s.endpoint.version, "boinc 7.20.5");
    assert_eq!(s.endpoint.name, "vm");
    assert!(!s.endpoint.actions);
    assert_eq!(s.nodes.len(), 1);
    assert_eq!(s.nodes[0].cpus_milli, Some(2000));
    assert!(s.nodes[0].devices.is_empty());
    assert_eq!(s.projects.len(), 1);
    let p = &s.projects[0];
    assert_eq!(p.name, "gpuboard test project");
    assert_eq!(p.share, 100);
    assert_eq!(p.priority, Some(0.0));
    assert_eq!(p.resources.len(), 1);
    let cpu = &p.resources[0];
    assert_eq!(cpu.resource, "CPU");
    assert_eq!(cpu.backoff_until, Some(Timestamp(1_795_317_672_794)));
    assert_eq!(cpu.backoff_interval_s, Some(600));
    assert!(cpu.eligible);
    assert_eq!(cpu.target, 2.0);
    assert_eq!(
        cpu.reason.as_deref(),
        Some("CPU work fetch backed off for 10m56s (interval 10m)")
    );
}

#[test]
fn captured_update_clears_the_backoff_and_suspension_gives_reasons() {
    let s = from_fixture("state_after_update.xml", "cc_status_backoff.xml");
    let cpu = &s.projects[0].resources[0];
    assert_eq!(cpu.backoff_until, None);
    assert_eq!(cpu.backoff_interval_s, None);

    let s = from_fixture("state_suspended.xml", "cc_status_suspended.xml");
    let cpu = &s.projects[0].resources[0];
    assert!(!cpu.eligible);
    assert_eq!(cpu.target, 0.0);
    let reason = cpu.reason.clone().unwrap();
    assert!(reason.contains("suspended via the GUI"), "{reason}");
    assert!(reason.contains("dont_request_more_work"), "{reason}");

    // Right after attaching: the initial request asked only for a delay.
    let s = from_fixture("state_after_attach.xml", "cc_status_after_attach.xml");
    let cpu = &s.projects[0].resources[0];
    assert_eq!(cpu.backoff_until, None);
    assert!(
        cpu.reason
            .as_deref()
            .unwrap()
            .starts_with("no scheduler contact for 1m48s (min_rpc_time"),
        "{:?}",
        cpu.reason
    );
}

#[test]
fn gpu_tasks_are_claims_on_their_device() {
    let s = from_fixture("state_gpu_edited.xml", "cc_status_after_attach.xml");
    let devices = &s.nodes[0].devices;
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[1].model, "NVIDIA A100-SXM4-40GB");
    assert_eq!(devices[0].compute_allocated, Units(0));
    assert_eq!(devices[1].compute_allocated, Units(5000));
    assert_eq!(s.claims.len(), 2);
    let run = &s.claims[0];
    assert_eq!(run.state, ClaimState::Placed);
    assert_eq!(run.holder.as_deref(), Some("wu_a_0"));
    assert_eq!(run.project, "gpuboard test project");
    assert_eq!(run.shares.len(), 1);
    assert_eq!(run.shares[0].device, 1);
    assert_eq!(devices[1].holders, vec![run.id]);
    let wait = &s.claims[1];
    assert_eq!(wait.state, ClaimState::Pending);
    assert!(
        wait.pending_reasons
            .contains(&"task suspended via the GUI".to_string()),
        "{:?}",
        wait.pending_reasons
    );
    assert!(
        wait.pending_reasons
            .iter()
            .any(|r| r.contains("the CPU is busy")),
        "{:?}",
        wait.pending_reasons
    );
    let p = &s.projects[0];
    assert_eq!((p.running, p.pending), (1, 1));
    let gpu = p.resources.iter().find(|r| r.resource == "NVIDIA").unwrap();
    assert_eq!(gpu.used, 0.5);
    assert_eq!(gpu.pending, 1);
    assert_eq!(gpu.target, 2.0);
    assert_eq!(gpu.backoff_interval_s, Some(1200));
    let speeds: Vec<(String, f64)> = s
        .resources
        .iter()
        .map(|r| (r.name.clone(), r.speed))
        .collect();
    assert_eq!(
        speeds,
        vec![("CPU".to_string(), 1.0), ("NVIDIA".to_string(), 19_500.0)]
    );
}

#[test]
fn console_fixture_has_backoffs_on_both_resources() {
    let s = common::boinc_snapshot();
    assert_eq!(s.endpoint.name, "boinc-host");
    let p = &s.projects[0];
    let backoffs: Vec<(&str, Option<u64>)> = p
        .resources
        .iter()
        .map(|r| (r.resource.as_str(), r.backoff_interval_s))
        .collect();
    assert_eq!(backoffs, vec![("CPU", Some(600)), ("NVIDIA", Some(1200))]);
    assert_eq!(s.claims.len(), 2);
}

#[test]
fn malformed_answers_name_what_is_wrong() {
    let good = answers("state_backoff.xml", "cc_status_backoff.xml");
    // A project that cannot be read is a warning; the host and its GPUs stay.
    let whole = snapshot(&good, "", TAKEN).unwrap();
    let warned = [
        (
            good.state
                .replace("<value>600.000000</value>", "<value>lots</value>"),
            "`client_state/project/rsc_backoff_interval/value` is \"lots\"",
        ),
        (
            good.state
                .replace("<master_url>http://127.0.0.1:18778/</master_url>", ""),
            "has no <master_url>",
        ),
    ];
    for (state, want) in warned {
        let a = BoincAnswers {
            state,
            cc_status: good.cc_status.clone(),
        };
        let s = snapshot(&a, "", TAKEN).unwrap();
        assert_eq!(s.nodes.len(), whole.nodes.len());
        assert_eq!(s.devices().count(), whole.devices().count());
        let w = &s.endpoint.warnings[0];
        assert_eq!(w.path, "client_state/project[0]");
        assert_eq!(w.left_out, "this project, its apps and tasks");
        assert!(w.found.contains(want), "{w} lacks {want}");
        assert!(s.projects.is_empty() && s.claims.is_empty());
    }
    let cases = [
        (good.state[..good.state.len() / 2].to_string(), "cut off"),
        (
            "<html><body>hi</body></html>".to_string(),
            "not `<boinc_gui_rpc_reply>`",
        ),
        (
            "<boinc_gui_rpc_reply><x/></boinc_gui_rpc_reply>".to_string(),
            "no <client_state>",
        ),
    ];
    for (state, want) in cases {
        let a = BoincAnswers {
            state,
            cc_status: good.cc_status.clone(),
        };
        let e = snapshot(&a, "", TAKEN).unwrap_err().to_string();
        assert!(e.contains(want), "{e} lacks {want}");
    }
}

proptest::proptest! {
    #[test]
    fn arbitrary_replies_never_panic(s in "(<[a-z_/]{0,12}>|[^<]{0,8}|&[a-z#0-9]{0,5};?){0,40}") {
        let a = BoincAnswers { state: s.clone(), cc_status: s };
        let _ = snapshot(&a, "", TAKEN);
    }

    #[test]
    fn mutated_captures_never_panic(cut in 0usize..7000, byte in 0u8..128) {
        let mut st = answers("state_gpu_edited.xml", "cc_status_backoff.xml");
        let mut bytes = st.state.into_bytes();
        if cut < bytes.len() {
            bytes[cut] = byte;
        }
        st.state = String::from_utf8_lossy(&bytes).into_owned();
        let _ = snapshot(&st, "", TAKEN);
    }
}

/// A peer on 127.0.0.1 that answers each connection with `reply` (or stays silent).
async fn fake_peer(reply: Option<&'static [u8]>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                match reply {
                    Some(r) => {
                        let _ = sock.write_all(r).await;
                        let _ = sock.shutdown().await;
                    }
                    None => tokio::time::sleep(Duration::from_hours(1)).await,
                }
            });
        }
    });
    addr
}

async fn fetch_from(addr: &str) -> SourceError {
    let mut cfg = BoincConfig::new(addr);
    cfg.timeout = Duration::from_millis(700);
    let clock = Arc::new(ManualClock::new(TAKEN));
    BoincSource::with_clock(cfg, clock)
        .unwrap()
        .fetch()
        .await
        .unwrap_err()
}

#[tokio::test]
async fn misbehaving_peers_give_errors_not_hangs() {
    let http = fake_peer(Some(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
    ))
    .await;
    let e = fetch_from(&http).await;
    assert!(matches!(e, SourceError::NotBoincClient { .. }), "{e}");
    assert!(e.to_string().contains("answered HTTP"), "{e}");

    let silent = fake_peer(None).await;
    let e = fetch_from(&silent).await;
    assert!(matches!(e, SourceError::Timeout { .. }), "{e}");

    let cut = fake_peer(Some(b"<boinc_gui_rpc_reply>\n<client_state>")).await;
    let e = fetch_from(&cut).await;
    assert!(matches!(e, SourceError::Decode { .. }), "{e}");
    assert!(e.to_string().contains("cut off"), "{e}");

    let garbage = fake_peer(Some(b"\x00\x01garbage\x03")).await;
    let e = fetch_from(&garbage).await;
    assert!(matches!(e, SourceError::NotBoincClient { .. }), "{e}");

    let refused = format!("127.0.0.1:{}", free_port());
    let e = fetch_from(&refused).await;
    assert!(matches!(e, SourceError::Refused { .. }), "{e}");
}

/// The text of the first `<tag>` after `after` in raw XML: read by hand, so the check does
/// not lean on the parser under test.
fn raw_after(xml: &str, after: &str, tag: &str) -> Option<String> {
    let from = xml.find(after)?;
    let rest = &xml[from..];
    let open = format!("<{tag}>");
    let start = rest.find(&open)? + open.len();
    let end = rest[start..].find(&format!("</{tag}>"))?;
    Some(rest[start..start + end].trim().to_string())
}

/// The CPU backoff (time, interval) as the client's raw `get_state` writes it.
fn raw_cpu_backoff(state: &str) -> (f64, f64) {
    let t = raw_after(state, "<rsc_backoff_time>", "value").unwrap();
    let i = raw_after(state, "<rsc_backoff_interval>", "value").unwrap();
    (t.parse().unwrap(), i.parse().unwrap())
}

async fn raw_state(addr: &str, password: &str) -> String {
    let mut rpc = GuiRpc::connect(addr, Duration::from_secs(5)).await.unwrap();
    rpc.login(password).await.unwrap();
    rpc.exchange("<get_state/>").await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_client_backoffs_priority_and_update() {
    if skip_peer("boinc") {
        eprintln!("GPUBOARD_SKIP_PEERS has boinc: skipped");
        return;
    }
    let mut client = boinc_client::Client::launch().await;
    let (addr, password) = (client.addr.clone(), boinc_client::PASSWORD);
    let project = boinc_client::Project::serve(1, 0).await;
    let (url, posts, delay) = (
        project.url.clone(),
        project.posts.clone(),
        project.delay.clone(),
    );
    client.attach(project);
    // The first request only initializes; a work request that gets nothing backs off.
    // Re-reading cc_config makes the client reconsider work fetch at once.
    let deadline = Instant::now() + Duration::from_secs(90);
    let state = loop {
        assert!(
            Instant::now() < deadline,
            "the client set no CPU backoff; log: {}",
            client.log()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        if posts.load(Ordering::SeqCst) == 0 {
            continue;
        }
        let state = raw_state(&addr, password).await;
        if raw_after(&state, "<rsc_backoff_time>", "value").is_some()
            && raw_cpu_backoff(&state).0 > 0.0
        {
            break state;
        }
        client.boinccmd(&["--read_cc_config"]);
    };
    // From now on the project asks for an hour's quiet, so no new work request (and no
    // new backoff) races the checks below.
    delay.store(3600, Ordering::SeqCst);
    let (until, interval) = raw_cpu_backoff(&state);
    let priority: f64 = raw_after(&state, "<project>", "sched_priority")
        .unwrap()
        .parse()
        .unwrap();

    let mut cfg = BoincConfig::new(&addr);
    cfg.password_file = Some(client.password_file());
    let clock = Arc::new(ManualClock::new(TAKEN));
    let source = BoincSource::with_clock(cfg.clone(), clock.clone()).unwrap();
    let snap = source.fetch().await.unwrap();
    assert_eq!(snap.endpoint.kind, "boinc");
    assert!(
        snap.endpoint.version.starts_with("boinc 7."),
        "{}",
        snap.endpoint.version
    );
    assert_eq!(snap.projects.len(), 1, "{:?}", snap.projects);
    let p = &snap.projects[0];
    assert_eq!(p.name, "gpuboard test project");
    assert_eq!(p.share, 100);
    assert_eq!(p.priority, Some(priority));
    let cpu = p.resources.iter().find(|r| r.resource == "CPU").unwrap();
    // The backoff may have moved between the two reads only if it expired: it has not (600 s+).
    assert_eq!(
        cpu.backoff_until,
        Some(Timestamp((until * 1000.0).round() as u64))
    );
    assert_eq!(cpu.backoff_interval_s, Some(interval.round() as u64));
    assert!(
        interval >= 600.0,
        "BOINC's first backoff interval is 600 s: {interval}"
    );
    assert!(
        cpu.reason
            .as_deref()
            .unwrap()
            .contains("CPU work fetch backed off"),
        "{:?}",
        cpu.reason
    );

    // A wrong password is refused by name, and nothing is half-read.
    let wrong = client.dir.path().join("wrong.cfg");
    std::fs::write(&wrong, "not-it\n").unwrap();
    let mut bad = cfg.clone();
    bad.password_file = Some(wrong);
    let e = BoincSource::with_clock(bad, clock.clone())
        .unwrap()
        .fetch()
        .await
        .unwrap_err();
    assert!(matches!(e, SourceError::LoginRefused { .. }), "{e}");

    // "Update project" contacts the project now; the client clears the backoff.
    let before = posts.load(Ordering::SeqCst);
    source.update_project(&url).await.unwrap();
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        assert!(
            Instant::now() < deadline,
            "update did not clear the backoff"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let snap = source.fetch().await.unwrap();
        let cpu = &snap.projects[0].resources[0];
        if posts.load(Ordering::SeqCst) > before && cpu.backoff_until.is_none() {
            assert_eq!(raw_cpu_backoff(&raw_state(&addr, password).await).0, 0.0);
            break;
        }
    }
    let e = source
        .update_project("http://127.0.0.1:1/nothing/")
        .await
        .unwrap_err();
    assert!(matches!(e, SourceError::Peer { .. }), "{e}");
}
