//! Engine actions against the real engines on 127.0.0.1: `gpuboard act` and
//! `Source::act(Action::Engine)` on a real Slurm cluster (slurmrestd v0.0.38), a real BOINC
//! client and a real Ray head. Each action's effect is read back from the engine itself
//! (squeue, boinccmd, Ray's Jobs API) and from the source's next snapshot; each failing
//! action (job gone, not permitted, peer down) reports the engine's words and changes
//! nothing; `--readonly` refuses every action kind before anything is sent.
//!
//! `GPUBOARD_SKIP_PEERS=slurm,boinc,ray` skips the real-engine tests.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::items_after_statements
)]

use crate::common;
use crate::common::boinc_client;
use crate::common::ray_head;
use crate::common::slurm_cluster;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{gpuboard, skip_peer, snapshot_until};
use gpuboard::snapshot::{ClaimState, Snapshot};
use gpuboard::sources::actions::{EngineAction, EngineVerb, offers};
use gpuboard::sources::slurm::{SlurmConfig, SlurmSource};
use gpuboard::sources::{Action, Failure, Outcome, Source};
use gpuboard::units::Units;

/// Runs `gpuboard act --config CONFIG ARGS` with its audit log under `state`.
fn act(config: &Path, state: &Path, args: &[&str]) -> Output {
    Command::new(gpuboard())
        .arg("act")
        .arg("--config")
        .arg(config)
        .args(args)
        .env("XDG_STATE_HOME", state)
        .env("USER", "tester")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn audit_log(state: &Path) -> String {
    std::fs::read_to_string(state.join("gpuboard/console.log")).unwrap_or_default()
}

fn job_claim(s: &Snapshot, id: u32) -> Option<&gpuboard::snapshot::ClaimView> {
    s.claims
        .iter()
        .find(|c| c.request.labels.get("slurm.job_id") == Some(&id.to_string()))
}

#[test]
fn read_only_refuses_every_action_kind_before_sending() {
    // Unreachable addresses: a refusal that tried to send would fail differently (exit 5).
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[[endpoints]]\nname = \"s\"\nkind = \"slurm\"\nurl = \"unix:/nonexistent/s.sock\"\n\
         [[endpoints]]\nname = \"b\"\nkind = \"boinc\"\nurl = \"127.0.0.1:1\"\n\
         [[endpoints]]\nname = \"r\"\nkind = \"ray\"\nurl = \"http://127.0.0.1:1\"\n\
         [[endpoints]]\nname = \"k\"\nkind = \"kubernetes\"\nkubeconfig = \"/nonexistent/kubeconfig\"\n",
    )
    .unwrap();
    let mut seen = 0;
    for verb in EngineVerb::ALL {
        let source = match verb.kind().as_str() {
            "slurm" => "s",
            "boinc" => "b",
            "kubernetes" => "k",
            _ => "r",
        };
        let target = match verb.target_kind() {
            "JOB_ID" => "42",
            "NAMESPACE/POD" => "ml/x1",
            "never|auto|always" => "never",
            _ => "x1",
        };
        let o = act(
            &config,
            dir.path(),
            &[source, verb.name(), target, "--yes", "--readonly"],
        );
        assert_eq!(o.status.code(), Some(6), "{verb}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("read-only"),
            "{verb}: {}",
            text(&o)
        );
        seen += 1;
    }
    assert_eq!(seen, EngineVerb::ALL.len());
    let log = audit_log(dir.path());
    let host = common::host();
    for verb in EngineVerb::ALL {
        assert!(
            log.contains(&format!("actor=tester@{host} source="))
                && log.contains(&format!("action={verb} ")),
            "{verb} not audited:\n{log}"
        );
    }
    assert_eq!(
        log.matches("refused: read-only").count(),
        EngineVerb::ALL.len()
    );
}

#[test]
fn bad_actions_are_named_with_what_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "theme = \"light\"\n[[endpoints]]\nname = \"s\"\nkind = \"slurm\"\nurl = \"unix:/nonexistent/s.sock\"\n\
         [[endpoints]]\nname = \"p\"\nkind = \"prometheus\"\nurl = \"http://127.0.0.1:1\"\n",
    )
    .unwrap();
    for (args, code, words) in [
        (vec!["s", "kill", "4"], 3, "it has: cancel, hold, release"),
        (vec!["s", "cancel", "four", "--yes"], 3, "whole number"),
        (
            vec!["s", "requeue", "4", "--yes"],
            3,
            "no requeue operation",
        ),
        (
            vec!["s", "drain", "gpunode", "--yes"],
            3,
            "cannot update nodes",
        ),
        (vec!["nope", "cancel", "4"], 3, "no source `nope`"),
        (vec!["p", "cancel", "4"], 3, "takes no engine actions"),
        // No terminal and no --yes: nothing is sent.
        (vec!["s", "cancel", "4"], 3, "add --yes"),
        // The peer is down: the engine's words, exit 5.
        (vec!["s", "cancel", "4", "--yes"], 5, "/nonexistent/s.sock"),
    ] {
        let o = act(&config, dir.path(), &args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(words), "{args:?}: {}", text(&o));
    }
    let o = act(&config, dir.path(), &["slurm", "--list"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for v in offers("slurm".parse().unwrap()) {
        assert!(out.contains(v.name()), "{out}");
    }
    assert!(
        out.contains("drain") && out.contains("not offered"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_actions_on_a_real_cluster() {
    if skip_peer("slurm") {
        eprintln!("GPUBOARD_SKIP_PEERS has slurm: skipped");
        return;
    }
    let cluster = tokio::task::spawn_blocking(slurm_cluster::Cluster::start)
        .await
        .unwrap();
    // GPUs 0-1: train; three shards of GPU 2: infer; GPU 3: root's job; big (3 GPUs) waits.
    let train = cluster.submit("nobody", "train", "gpu:a100:2");
    let infer = cluster.submit("nobody", "infer", "shard:a100:3");
    let rootjob = cluster.submit("root", "rootjob", "gpu:a100:1");
    let big = cluster.submit("nobody", "big", "gpu:a100:3");
    cluster.wait_for("three running jobs and one pending", || {
        cluster.job(train).starts_with("RUNNING")
            && cluster.job(infer).starts_with("RUNNING")
            && cluster.job(rootjob).starts_with("RUNNING")
            && cluster.job(big).starts_with("PENDING")
    });
    let state = tempfile::tempdir().unwrap();
    let config = state.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[endpoints]]\nname = \"cluster\"\nkind = \"slurm\"\nurl = \"{}\"\n",
            cluster.url()
        ),
    )
    .unwrap();
    let mut cfg = SlurmConfig::new(cluster.url());
    cfg.name = "cluster".into();
    let source = SlurmSource::new(cfg).unwrap();

    // Hold the pending job, through the command: Slurm holds it, the snapshot says so.
    let o = act(
        &config,
        state.path(),
        &["cluster", "hold", &big.to_string(), "--yes"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(cluster.job(big), "PENDING JobHeldUser");
    let s = source.fetch().await.unwrap();
    let reasons = &job_claim(&s, big).unwrap().pending_reasons;
    assert!(
        reasons.iter().any(|r| r.contains("JobHeldUser")),
        "{reasons:?}"
    );

    // A running job cannot be held: Slurm would take it and do nothing; nothing changes.
    let o = act(
        &config,
        state.path(),
        &["cluster", "hold", &train.to_string(), "--yes"],
    );
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(
        text(&o).contains("is RUNNING; only a pending job can be held"),
        "{}",
        text(&o)
    );
    assert_eq!(cluster.job(train), "RUNNING None");

    // Root's job: slurmrestd acts as nobody; Slurm's refusal is shown, the job runs on.
    let e = source
        .act(Action::Engine(
            EngineAction::new(EngineVerb::SlurmCancel, &rootjob.to_string()).unwrap(),
        ))
        .await
        .unwrap_err();
    assert!(matches!(e, Failure::Peer(_)), "{e}");
    assert!(e.to_string().contains("Access/permission denied"), "{e}");
    assert!(cluster.job(rootjob).starts_with("RUNNING"));

    // Cancel the two-GPU job: its GPUs come free in the next snapshots.
    let before = source.fetch().await.unwrap();
    assert_eq!(before.nodes[0].devices[0].compute_allocated, Units::FULL);
    let done = source
        .act(Action::Engine(
            EngineAction::new(EngineVerb::SlurmCancel, &train.to_string()).unwrap(),
        ))
        .await
        .unwrap();
    let Outcome::Engine(done) = done else {
        panic!("{done:?}")
    };
    assert!(
        done.answer.contains(&format!("cancelled job {train}")),
        "{}",
        done.answer
    );
    let s = snapshot_until(&source, "GPUs 0 and 1 free", |s| {
        s.nodes[0].devices[0].compute_allocated == Units(0)
            && s.nodes[0].devices[1].compute_allocated == Units(0)
    })
    .await;
    assert!(job_claim(&s, train).is_none());
    // The held job stays held although two GPUs came free; the others run on.
    assert_eq!(cluster.job(big), "PENDING JobHeldUser");
    assert_eq!(s.nodes[0].devices[3].compute_allocated, Units::FULL);

    // Cancel the shard job through the command: GPU 2's shards come free.
    let o = act(
        &config,
        state.path(),
        &["cluster", "cancel", &infer.to_string(), "--yes"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    snapshot_until(&source, "GPU 2's shards free", |s| {
        s.nodes[0].devices[2].compute_allocated == Units(0)
    })
    .await;

    // Release the held job: it may start now (three GPUs are free) and does.
    let o = act(
        &config,
        state.path(),
        &["cluster", "release", &big.to_string(), "--yes"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = snapshot_until(&source, "big placed", |s| {
        job_claim(s, big).is_some_and(|c| c.state == ClaimState::Placed)
    })
    .await;
    assert_eq!(job_claim(&s, big).unwrap().shares.len(), 3);

    // A job that is gone: slurmrestd's words, exit 8, nothing changes.
    let o = act(
        &config,
        state.path(),
        &["cluster", "cancel", "999999", "--yes"],
    );
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(
        text(&o).contains("Unable to find JobId=999999"),
        "{}",
        text(&o)
    );
    assert!(cluster.job(big).starts_with("RUNNING"));

    // A hand-over in one step: hold a waiting job, then cancel the one running; the GPUs
    // come free and the held job does not take them.
    let small = cluster.submit("nobody", "small", "gpu:a100:1");
    cluster.wait_for("small waits", || cluster.job(small).starts_with("PENDING"));
    let o = act(
        &config,
        state.path(),
        &[
            "cluster",
            "hold",
            &small.to_string(),
            "--then",
            "cancel",
            &big.to_string(),
            "--yes",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = snapshot_until(&source, "GPUs 0-2 free", |s| {
        (0..3).all(|i| s.nodes[0].devices[i].compute_allocated == Units(0))
    })
    .await;
    assert!(job_claim(&s, big).is_none());
    assert_eq!(cluster.job(small), "PENDING JobHeldUser");
    // It stops at the first failure: the release after a failed cancel is not sent.
    let o = act(
        &config,
        state.path(),
        &[
            "cluster",
            "cancel",
            "999998",
            "--then",
            "release",
            &small.to_string(),
            "--yes",
        ],
    );
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(
        text(&o).contains("not run: an earlier step failed"),
        "{}",
        text(&o)
    );
    assert_eq!(cluster.job(small), "PENDING JobHeldUser");

    let log = audit_log(state.path());
    let host = common::host();
    assert!(
        log.contains(&format!(
            "actor=tester@{host} source=cluster action=hold target=job {big} done: slurmrestd held job {big}"
        )),
        "{log}"
    );
    assert!(
        log.contains("action=cancel target=job 999999 refused:")
            && log.contains("Unable to find JobId"),
        "{log}"
    );
}

/// The block of `boinccmd` output after the line `header` (up to the next blank line).
fn section(out: &str, header: &str) -> String {
    out.split(header)
        .nth(1)
        .unwrap_or_default()
        .split("\n\n")
        .next()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boinc_actions_on_a_real_client() {
    if skip_peer("boinc") {
        eprintln!("GPUBOARD_SKIP_PEERS has boinc: skipped");
        return;
    }
    let client = boinc_client::Client::start().await;
    let state = tempfile::tempdir().unwrap();
    let config = state.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[endpoints]]\nname = \"cruncher\"\nkind = \"boinc\"\nurl = \"{}\"\ntoken_file = \"{}\"\n",
            client.addr,
            client.password_file().display()
        ),
    )
    .unwrap();
    let act_ok = |args: &[&str]| {
        let o = act(&config, state.path(), args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };

    // GPU mode: the client reports each new mode.
    // boinccmd words "auto" as "according to prefs".
    for (mode, shown) in [
        ("never", "never"),
        ("always", "always"),
        ("auto", "according to prefs"),
    ] {
        let out = act_ok(&["cruncher", "gpu-mode", mode, "--yes"]);
        assert!(out.contains(&format!("GPU mode is now {mode}")), "{out}");
        let cc = client.boinccmd(&["--get_cc_status"]);
        let gpu = section(&cc, "GPU status");
        assert!(
            gpu.lines()
                .any(|l| l.trim() == format!("current mode: {shown}")),
            "{mode}: {cc}"
        );
    }

    // The project, named as the console shows it: suspend, resume, no new tasks, allow.
    let project = "gpuboard test project";
    let flag = |what: &str| {
        let out = client.boinccmd(&["--get_project_status"]);
        out.lines()
            .find(|l| l.trim().starts_with(what))
            .unwrap_or_else(|| panic!("no `{what}` in {out}"))
            .trim()
            .ends_with("yes")
    };
    act_ok(&["cruncher", "suspend-project", project, "--yes"]);
    assert!(flag("suspended via GUI:"));
    act_ok(&["cruncher", "resume-project", project, "--yes"]);
    assert!(!flag("suspended via GUI:"));
    act_ok(&["cruncher", "no-new-tasks", client.project_url(), "--yes"]);
    assert!(flag("don't request more work:"));
    act_ok(&["cruncher", "allow-new-tasks", project, "--yes"]);
    assert!(!flag("don't request more work:"));

    // Failures in the engine's words, nothing changed: an unknown project and task.
    let o = act(
        &config,
        state.path(),
        &["cruncher", "suspend-project", "SETI", "--yes"],
    );
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(
        text(&o).contains("not attached to a project named `SETI`"),
        "{}",
        text(&o)
    );
    assert!(!flag("suspended via GUI:"));
    let o = act(
        &config,
        state.path(),
        &["cruncher", "abort-task", "wu_7_0", "--yes"],
    );
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(text(&o).contains("no task named `wu_7_0`"), "{}", text(&o));

    // A wrong password: the client's refusal, exit 6, the mode unchanged.
    let wrong = state.path().join("wrong.cfg");
    std::fs::write(&wrong, "not-it\n").unwrap();
    let bad = state.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!(
            "[[endpoints]]\nname = \"cruncher\"\nkind = \"boinc\"\nurl = \"{}\"\ntoken_file = \"{}\"\n",
            client.addr,
            wrong.display()
        ),
    )
    .unwrap();
    let o = act(
        &bad,
        state.path(),
        &["cruncher", "gpu-mode", "never", "--yes"],
    );
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    assert!(text(&o).contains("password"), "{}", text(&o));
    let gpu = section(&client.boinccmd(&["--get_cc_status"]), "GPU status");
    assert!(gpu.contains("current mode: according to prefs"), "{gpu}");

    let log = audit_log(state.path());
    let host = common::host();
    assert!(
        log.contains(&format!("actor=tester@{host} source=cruncher action=gpu-mode target=GPU mode never done: the client's GPU mode is now never")),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ray_stop_job_frees_its_gpus() {
    use gpuboard::sources::ray::{RayConfig, RaySource};
    if skip_peer("ray") {
        eprintln!("GPUBOARD_SKIP_PEERS has ray: skipped");
        return;
    }
    let head = ray_head::Head::start();
    let mut cfg = RayConfig::new(head.url.clone());
    cfg.timeout = Duration::from_secs(10);
    cfg.token = Some(ray_head::TOKEN.to_string());
    let source = RaySource::new(cfg).unwrap();
    let deadline = Instant::now() + Duration::from_mins(3);
    while !source
        .fetch()
        .await
        .is_ok_and(|s| s.nodes.iter().any(|n| n.devices.len() == 4))
    {
        assert!(Instant::now() < deadline, "no dashboard:\n{}", head.log());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // A job submitted through the Jobs API holds two GPUs with an actor.
    let script = head.tmp.path().join("job.py");
    std::fs::write(
        &script,
        "import time, ray\nray.init()\n@ray.remote(num_gpus=2)\nclass Holder:\n    \
         def ping(self):\n        return 1\nh = Holder.remote()\nray.get(h.ping.remote())\n\
         time.sleep(600)\n",
    )
    .unwrap();
    gpuboard::client::install_crypto_provider();
    let http = reqwest::Client::new();
    let submitted: serde_json::Value = http
        .post(format!("{}/api/jobs/", head.url))
        .bearer_auth(ray_head::TOKEN)
        .json(&serde_json::json!({
            "entrypoint": format!("{} {}", ray_head::venv().join("bin/python").display(), script.display()),
            "submission_id": "gpuboard-holder",
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(submitted["submission_id"], "gpuboard-holder", "{submitted}");
    let used = |s: &Snapshot| -> Units {
        s.nodes
            .iter()
            .flat_map(|n| &n.devices)
            .map(|d| d.compute_allocated)
            .fold(Units(0), |a, b| Units(a.0 + b.0))
    };
    let deadline = Instant::now() + Duration::from_mins(4);
    loop {
        let s = source.fetch().await.unwrap();
        if used(&s) == Units(20_000) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the job's actor holds no GPUs: {:#?}\n{}",
            s.claims,
            head.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let state = tempfile::tempdir().unwrap();
    let token = state.path().join("ray.token");
    std::fs::write(&token, ray_head::TOKEN).unwrap();
    let config = state.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[endpoints]]\nname = \"head\"\nkind = \"ray\"\nurl = \"{}\"\ntoken_file = \"{}\"\n",
            head.url,
            token.display()
        ),
    )
    .unwrap();
    // A job Ray does not know: its words, exit 7, the holder keeps its GPUs.
    let o = act(
        &config,
        state.path(),
        &["head", "stop-job", "nosuch", "--yes"],
    );
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));
    assert!(
        text(&o).contains("Job nosuch does not exist"),
        "{}",
        text(&o)
    );
    assert_eq!(used(&source.fetch().await.unwrap()), Units(20_000));

    let o = act(
        &config,
        state.path(),
        &["head", "stop-job", "gpuboard-holder", "--yes"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("Ray stopped job gpuboard-holder"),
        "{}",
        text(&o)
    );
    let deadline = Instant::now() + Duration::from_mins(2);
    loop {
        let s = source.fetch().await.unwrap();
        if used(&s) == Units(0) {
            assert!(
                s.claims.iter().all(|c| c.state != ClaimState::Placed),
                "{:#?}",
                s.claims
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "GPUs still held: {:#?}",
            s.claims
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Stopping it again: Ray says it had ended.
    let o = act(
        &config,
        state.path(),
        &["head", "stop-job", "gpuboard-holder", "--yes"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("already ended"), "{}", text(&o));
}

#[tokio::test]
async fn a_hand_over_stops_at_the_first_failure() {
    use gpuboard::clock::{ManualClock, Timestamp};
    use gpuboard::request::ClaimRequest;
    use gpuboard::sources::demo::{Demo, DemoWorld};
    use gpuboard::sources::handover::{HandoverStep, StepResult, hand_over};
    use gpuboard::units::Bytes;
    use std::sync::Arc;

    let clock = Arc::new(ManualClock::new(Timestamp(1_795_317_400_000)));
    let demo: Arc<dyn Source> = Arc::new(Demo::new(DemoWorld::quiet(7).unwrap(), clock));
    let mut cfg = SlurmConfig::new("unix:/nonexistent/gpuboard/slurmrestd.sock");
    cfg.name = "down".into();
    let slurm: Arc<dyn Source> = Arc::new(SlurmSource::new(cfg).unwrap());
    let claim = |p: &str| Action::Claim {
        request: ClaimRequest::memory(Bytes(1 << 30), p),
    };
    let cancel = Action::Engine(EngineAction::new(EngineVerb::SlurmCancel, "4").unwrap());
    let claims_before = demo.fetch().await.unwrap().snapshot().unwrap().claims.len();
    let steps = [
        HandoverStep {
            source: Arc::clone(&demo),
            action: claim("first"),
        },
        HandoverStep {
            source: Arc::clone(&slurm),
            action: cancel.clone(),
        },
        HandoverStep {
            source: Arc::clone(&demo),
            action: claim("after"),
        },
    ];
    let r = hand_over(&steps, Duration::from_secs(5)).await;
    assert!(
        matches!(r[0], StepResult::Done(Outcome::Claimed(_))),
        "{r:?}"
    );
    let StepResult::Failed(e) = &r[1] else {
        panic!("{r:?}")
    };
    assert!(
        e.to_string()
            .contains("/nonexistent/gpuboard/slurmrestd.sock"),
        "{e}"
    );
    assert_eq!(r[2], StepResult::NotRun);
    assert!(r[2].line("lab", &steps[2].action).contains("not run"));
    // Only the first claim was made.
    let after = demo.fetch().await.unwrap().snapshot().unwrap();
    assert_eq!(after.claims.len(), claims_before + 1);
    assert!(after.claims.iter().all(|c| c.project != "after"));
}

/// Drives the console's update with the real driver's executor until the hand-over in
/// `st` is over: every effect is performed on `sources`, every answer fed back.
async fn run_console(
    st: &mut gpuboard::console::state::State,
    sources: &[std::sync::Arc<dyn Source>],
    first: Vec<gpuboard::console::msg::Effect>,
) {
    use gpuboard::clock::{Clock, SystemClock};
    use gpuboard::console::driver::perform;
    use gpuboard::console::update::update;
    let clock: std::sync::Arc<dyn Clock> = std::sync::Arc::new(SystemClock);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut pending = first;
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        for e in pending.drain(..) {
            perform(
                e,
                sources,
                st.readonly,
                Duration::from_secs(10),
                &clock,
                &tx,
            );
        }
        if st
            .flows
            .handover()
            .is_some_and(|(_, r)| r.current().is_none())
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "hand-over not over: {:?}",
            st.flows.handover()
        );
        if let Ok(Some(msg)) = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
            pending = update(st, msg);
        }
    }
}

/// Types a `:` command line and, when a confirmation opens, the id asked, Tab to OK and
/// Enter; returns the effects of OK.
fn console_command(
    st: &mut gpuboard::console::state::State,
    line: &str,
    id: &str,
) -> Vec<gpuboard::console::msg::Effect> {
    use gpuboard::console::msg::Msg;
    use gpuboard::console::update::update;
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let mut k = |c: KeyCode| update(st, Msg::Key(KeyEvent::new(c, KeyModifiers::NONE)));
    // Closes the last hand-over's result pane.
    k(KeyCode::Esc);
    k(KeyCode::Char(':'));
    for c in line.chars() {
        k(KeyCode::Char(c));
    }
    k(KeyCode::Enter);
    for c in id.chars() {
        k(KeyCode::Char(c));
    }
    k(KeyCode::Tab);
    k(KeyCode::Enter)
}

/// The endpoint's claims of `project`.
async fn endpoint_claims(
    client: &gpuboard::client::Client,
    project: &str,
) -> Vec<gpuboard::snapshot::ClaimView> {
    let s = client.snapshot().await.unwrap();
    s.claims
        .into_iter()
        .filter(|c| c.project == project)
        .collect()
}

/// A hand-over from the console and from `gpuboard act`, end to end: a real Slurm cluster
/// and a real `gpuboard serve` whose inventory has the Slurm node's four GPUs. Hold a
/// pending job, cancel the running one, claim its GPUs on the endpoint: the GPUs come free
/// in the next Slurm snapshot and the endpoint holds the claim. A failing middle step
/// leaves the later ones not run: the job after it runs on, the endpoint gets no claim.
#[tokio::test]
async fn a_hand_over_frees_slurm_gpus_and_claims_them_on_an_endpoint() {
    use gpuboard::console::keymap::Keymap;
    use gpuboard::console::state::{SourceSlot, State};
    use gpuboard::sources::endpoint::Http;
    use gpuboard::sources::handover::StepResult;
    use std::sync::Arc;
    if skip_peer("slurm") {
        eprintln!("GPUBOARD_SKIP_PEERS has slurm: skipped");
        return;
    }
    let cluster = tokio::task::spawn_blocking(slurm_cluster::Cluster::start)
        .await
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let inventory = data.path().join("inventory.toml");
    std::fs::write(
        &inventory,
        "[[nodes]]\nname = \"gpunode\"\ncpus = 4\n[[nodes.gpus]]\nmodel = \"NVIDIA A100-SXM4-80GB\"\nmemory = \"80GiB\"\ncount = 4\n",
    )
    .unwrap();
    let serve_dir = data.path().join("serve");
    std::fs::create_dir(&serve_dir).unwrap();
    let server = common::Server::start(&serve_dir, &inventory, &[]);
    let token = server.operator_token();
    let client =
        gpuboard::client::Client::new(&server.url, Some(token.clone()), Duration::from_secs(10))
            .unwrap();
    let state = data.path().join("state");
    let config = data.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[endpoints]]\nname = \"cluster\"\nkind = \"slurm\"\nurl = \"{}\"\n\
             [[endpoints]]\nname = \"lab\"\nurl = \"{}\"\ntoken_file = \"{}\"\n",
            cluster.url(),
            server.url,
            serve_dir.join("operator.token").display()
        ),
    )
    .unwrap();

    // GPUs 0-1: train; `waiting` asks three and waits.
    let train = cluster.submit("nobody", "train", "gpu:a100:2");
    let waiting = cluster.submit("nobody", "waiting", "gpu:a100:3");
    cluster.wait_for("train runs, waiting waits", || {
        cluster.job(train).starts_with("RUNNING") && cluster.job(waiting).starts_with("PENDING")
    });
    let mut cfg = SlurmConfig::new(cluster.url());
    cfg.name = "cluster".into();
    let slurm = Arc::new(SlurmSource::new(cfg).unwrap());
    let lab =
        Arc::new(Http::new("lab", &server.url, Some(token), Duration::from_secs(10)).unwrap());
    let sources: Vec<Arc<dyn Source>> = vec![slurm.clone(), lab];
    let slots = sources
        .iter()
        .map(|s| SourceSlot::new(s.name(), s.kind(), s.can_act(), s.note()))
        .collect();
    let mut st = State::new(slots, Keymap::builtin(), 2_000, false);

    // The console: hold, cancel, claim, in one confirmation.
    let first = console_command(
        &mut st,
        &format!(
            "handover cluster hold {waiting} then cluster cancel {train} then claim lab \
             --gpus 2 --node gpunode --devices 0,1 --project deadline"
        ),
        &train.to_string(),
    );
    assert_eq!(
        first.len(),
        1,
        "the first step only: {first:?} {:?}",
        st.flash
    );
    run_console(&mut st, &sources, first).await;
    let run = st.flows.handover().unwrap().1.clone();
    for (i, r) in run.results.iter().enumerate() {
        assert!(matches!(r, Some(StepResult::Done(_))), "step {i}: {r:?}");
    }
    let s = snapshot_until(&slurm, "GPUs 0 and 1 free", |s| {
        (0..2).all(|i| s.nodes[0].devices[i].compute_allocated == Units(0))
    })
    .await;
    assert!(job_claim(&s, train).is_none());
    assert_eq!(cluster.job(waiting), "PENDING JobHeldUser");
    let mine = endpoint_claims(&client, "deadline").await;
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0].node.as_deref(), Some("gpunode"));
    let devices: Vec<u32> = mine[0].shares.iter().map(|s| s.device).collect();
    assert_eq!(devices, vec![0, 1]);
    assert_eq!(mine[0].holder, st.operator);
    assert!(
        st.log
            .iter()
            .any(|l| l.contains("hand-over step 3/3: lab: claim"))
    );

    // A failing middle step: the cancel of a job that is gone stops the hand-over; the
    // running job after it is not cancelled, the endpoint gets no claim.
    let runner = cluster.submit("nobody", "runner", "gpu:a100:4");
    let queued = cluster.submit("nobody", "queued", "gpu:a100:1");
    cluster.wait_for("runner runs, queued waits", || {
        cluster.job(runner).starts_with("RUNNING") && cluster.job(queued).starts_with("PENDING")
    });
    let first = console_command(
        &mut st,
        &format!(
            "handover cluster hold {queued} then cluster cancel 999999 then cluster cancel \
             {runner} then claim lab --gpus 2 --node gpunode --devices 2,3 --project late"
        ),
        &format!("999999 {runner}"),
    );
    assert_eq!(first.len(), 1, "{first:?} {:?}", st.flash);
    run_console(&mut st, &sources, first).await;
    let run = st.flows.handover().unwrap().1.clone();
    assert!(
        matches!(run.results[0], Some(StepResult::Done(_))),
        "{run:?}"
    );
    let Some(StepResult::Failed(e)) = &run.results[1] else {
        panic!("{run:?}")
    };
    assert!(e.to_string().contains("Unable to find JobId=999999"), "{e}");
    assert_eq!(run.results[2], Some(StepResult::NotRun));
    assert_eq!(run.results[3], Some(StepResult::NotRun));
    let flash = st.flash.clone().unwrap();
    assert!(
        flash.error && flash.text.contains("STOPPED at step 2/4"),
        "{flash:?}"
    );
    assert!(
        cluster.job(runner).starts_with("RUNNING"),
        "{}",
        cluster.job(runner)
    );
    assert_eq!(cluster.job(queued), "PENDING JobHeldUser");
    assert!(endpoint_claims(&client, "late").await.is_empty());
    assert_eq!(endpoint_claims(&client, "deadline").await.len(), 1);

    // The command: cancel the runner, then claim GPUs 2-3 on the endpoint.
    let o = act(
        &config,
        &state,
        &[
            "cluster",
            "cancel",
            &runner.to_string(),
            "--then-claim",
            "lab",
            "--gpus",
            "2",
            "--node",
            "gpunode",
            "--devices",
            "2,3",
            "--project",
            "cli",
            "--yes",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    snapshot_until(&slurm, "all four GPUs free", |s| {
        (0..4).all(|i| s.nodes[0].devices[i].compute_allocated == Units(0))
    })
    .await;
    let cli = endpoint_claims(&client, "cli").await;
    assert_eq!(cli.len(), 1, "{cli:?}");
    assert_eq!(cli[0].holder.as_deref(), Some("tester"));
    let log = audit_log(&state);
    let host = common::host();
    assert!(
        log.contains(&format!(
            "actor=tester@{host} source=cluster action=cancel target=job {runner} done:"
        )) && log.contains(&format!(
            "actor=tester@{host} source=lab action=claim target="
        )) && log.contains("placed at gpunode:2-3"),
        "{log}"
    );

    // It stops at the first failure: no claim after a failed cancel (exit 8).
    let o = act(
        &config,
        &state,
        &[
            "cluster",
            "cancel",
            "999997",
            "--then-claim",
            "lab",
            "--gpus",
            "1",
            "--project",
            "nope",
            "--yes",
        ],
    );
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(
        text(&o).contains("claim") && text(&o).contains("not run"),
        "{}",
        text(&o)
    );
    assert!(endpoint_claims(&client, "nope").await.is_empty());

    // Bad input names what is wrong and sends nothing: the held job stays held.
    for (args, words) in [
        (
            vec!["--then-claim", "cluster", "--gpus", "1", "--project", "p"],
            "claims go to a gpuboard endpoint",
        ),
        (
            vec!["--then-claim", "nowhere", "--gpus", "1", "--project", "p"],
            "no endpoint `nowhere`",
        ),
        (
            vec![
                "--then-claim",
                "lab",
                "--gpus",
                "1",
                "--fraction",
                "0.5",
                "--project",
                "p",
            ],
            "--then-claim lab: ",
        ),
    ] {
        let mut all = vec!["cluster", "release"];
        let q = queued.to_string();
        all.push(&q);
        all.extend(args);
        all.push("--yes");
        let o = act(&config, &state, &all);
        assert_eq!(o.status.code(), Some(3), "{}", text(&o));
        assert!(
            text(&o).contains(words) && text(&o).contains("nothing was sent"),
            "{}",
            text(&o)
        );
        assert_eq!(cluster.job(queued), "PENDING JobHeldUser");
    }
    drop(server);
}

/// `--readonly` refuses a whole hand-over, its claim included, before anything is sent
/// (unreachable peers: a step that tried would fail differently), with an audit line per
/// step.
#[test]
fn read_only_refuses_a_hand_over_with_its_claim() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[[endpoints]]\nname = \"s\"\nkind = \"slurm\"\nurl = \"unix:/nonexistent/s.sock\"\n\
         [[endpoints]]\nname = \"lab\"\nurl = \"http://127.0.0.1:1\"\n",
    )
    .unwrap();
    let o = act(
        &config,
        dir.path(),
        &[
            "s",
            "hold",
            "12",
            "--then",
            "cancel",
            "11",
            "--then-claim",
            "lab",
            "--gpus",
            "2",
            "--project",
            "p",
            "--yes",
            "--readonly",
        ],
    );
    assert_eq!(o.status.code(), Some(6), "{}", text(&o));
    let log = audit_log(dir.path());
    assert_eq!(log.matches("refused: read-only").count(), 3, "{log}");
    assert!(
        log.contains("source=lab action=claim target=nvidia.com/gpu=2 refused: read-only"),
        "{log}"
    );
    // Claim flags without --then-claim are refused by the parser, naming the flag.
    let o = act(
        &config,
        dir.path(),
        &["s", "hold", "12", "--gpus", "2", "--yes"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--then-claim"), "{}", text(&o));
}
