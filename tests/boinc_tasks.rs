//! BOINC task actions on tasks a real client runs: a `boinc` client on 127.0.0.1 attached
//! to a project of our own that hands out two tasks of an app the client runs without
//! code signing (the anonymous platform, `tests/fixtures/boinc/app`), one on each of two
//! GPUs of a custom coprocessor type. `suspend-task`, `resume-task` and `abort-task` go
//! through the BOINC source's executor (`Source::act(Action::Engine)`) and once through
//! `gpuboard act`; each effect is read back from boinccmd and from the source's next
//! snapshot (the task's claim waits, runs again or is gone; its GPU comes free). GPU mode
//! never (BOINC's cordon) stops a running task too.
//!
//! Needs Debian's `boinc-client` and perl; `GPUBOARD_SKIP_PEERS=boinc` skips it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::boinc_client;

use std::process::Command;

use boinc_client::{Client, GPU_TYPE, PROJECT_NAME, task_name};
use common::{gpuboard, skip_peer, snapshot_until};
use gpuboard::snapshot::{ClaimState, ClaimView, DeviceView, Snapshot};
use gpuboard::sources::actions::{EngineAction, EngineVerb};
use gpuboard::sources::boinc::{BoincConfig, BoincSource};
use gpuboard::sources::{Action, Failure, Outcome, Source};
use gpuboard::units::Units;

/// The block boinccmd `--get_tasks` prints for the task `name` (empty when it has none).
fn task_block(client: &Client, name: &str) -> String {
    let out = client.boinccmd(&["--get_tasks"]);
    out.split(") -----------")
        .find(|b| b.lines().any(|l| l.trim() == format!("name: {name}")))
        .unwrap_or_default()
        .to_string()
}

/// The claim of the task `name`.
fn claim<'a>(s: &'a Snapshot, name: &str) -> Option<&'a ClaimView> {
    // A task's claim goes by the task's name, as boinccmd shows it.
    s.claims
        .iter()
        .find(|c| c.holder.as_deref() == Some(name))
        .inspect(|c| assert_eq!(c.name.as_deref(), Some(name)))
}

/// The GPUs of the custom type (a host with GPUs of its own shows those too).
fn ours(s: &Snapshot) -> Vec<&DeviceView> {
    s.nodes[0]
        .devices
        .iter()
        .filter(|d| d.model == GPU_TYPE)
        .collect()
}

/// The device the task `name` runs on, from its claim.
fn device_of(s: &Snapshot, name: &str) -> Option<u32> {
    claim(s, name)
        .and_then(|c| c.shares.first())
        .map(|d| d.device)
}

async fn act(source: &BoincSource, verb: EngineVerb, task: &str) -> Result<String, Failure> {
    let done = source
        .act(Action::Engine(EngineAction::new(verb, task).unwrap()))
        .await?;
    let Outcome::Engine(done) = done else {
        panic!("{done:?}")
    };
    Ok(done.answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_actions_on_running_gpu_tasks() {
    if skip_peer("boinc") {
        eprintln!("GPUBOARD_SKIP_PEERS has boinc: skipped");
        return;
    }
    let client = Client::with_gpu_tasks(2).await;
    let (one, two) = (task_name(1), task_name(2));
    let mut cfg = BoincConfig::new(&client.addr);
    cfg.password_file = Some(client.password_file());
    let source = BoincSource::new(cfg).unwrap();

    // As the client runs them: two GPUs of the custom type, a task on each, both placed.
    let s = snapshot_until(&source, "both tasks placed", |s| {
        s.claims.len() == 2 && s.claims.iter().all(|c| c.state == ClaimState::Placed)
    })
    .await;
    assert!(s.endpoint.warnings.is_empty(), "{:?}", s.endpoint.warnings);
    let devices = ours(&s);
    assert_eq!(devices.len(), 2, "{devices:#?}");
    assert!(
        devices.iter().all(|d| d.compute_allocated == Units::FULL),
        "{devices:#?}"
    );
    let mut on: Vec<u32> = [&one, &two]
        .iter()
        .map(|t| device_of(&s, t).unwrap())
        .collect();
    on.sort_unstable();
    assert_eq!(on, devices.iter().map(|d| d.index).collect::<Vec<_>>());
    let devices = &s.nodes[0].devices;
    let gpu = device_of(&s, &one).unwrap();
    let c = claim(&s, &one).unwrap();
    assert_eq!(c.project, PROJECT_NAME);
    assert_eq!(c.request.accelerator_type.as_deref(), Some(GPU_TYPE));
    assert_eq!(devices[gpu as usize].holders, vec![c.id]);
    let p = &s.projects[0];
    assert_eq!((p.running, p.pending), (2, 0));

    // Suspend: the client says so and stops it; the claim waits and its GPU is free.
    let answer = act(&source, EngineVerb::BoincSuspendTask, &one)
        .await
        .unwrap();
    assert_eq!(answer, format!("task {one} suspended"));
    let block = task_block(&client, &one);
    assert!(block.contains("suspended via GUI: yes"), "{block}");
    let s = snapshot_until(&source, "the suspended task waiting", |s| {
        claim(s, &one).is_some_and(|c| c.state == ClaimState::Pending)
    })
    .await;
    let c = claim(&s, &one).unwrap();
    assert!(c.shares.is_empty() && c.node.is_none(), "{c:#?}");
    assert!(
        c.pending_reasons
            .contains(&"task suspended via the GUI".to_string()),
        "{:?}",
        c.pending_reasons
    );
    let d = &s.nodes[0].devices[gpu as usize];
    assert_eq!(d.compute_allocated, Units(0), "{d:#?}");
    assert!(d.holders.is_empty(), "{d:#?}");
    assert_eq!(
        claim(&s, &two).unwrap().state,
        ClaimState::Placed,
        "the other task runs on"
    );
    client
        .wait_for("the suspended task still executes", |c| {
            !task_block(c, &one).contains("active_task_state: EXECUTING")
        })
        .await;

    // Resume: it runs again, holding a GPU.
    let answer = act(&source, EngineVerb::BoincResumeTask, &one)
        .await
        .unwrap();
    assert_eq!(answer, format!("task {one} resumed"));
    client
        .wait_for("the resumed task did not run again", |c| {
            let b = task_block(c, &one);
            b.contains("active_task_state: EXECUTING") && !b.contains("suspended via GUI: yes")
        })
        .await;
    let s = snapshot_until(&source, "the resumed task placed", |s| {
        claim(s, &one).is_some_and(|c| c.state == ClaimState::Placed)
    })
    .await;
    assert!(ours(&s).iter().all(|d| d.compute_allocated == Units::FULL));

    // Abort: the client reports it aborted; its claim is gone, its GPU free for good.
    let gpu = device_of(&s, &one).unwrap();
    let answer = act(&source, EngineVerb::BoincAbortTask, &one)
        .await
        .unwrap();
    assert_eq!(answer, format!("task {one} aborted"));
    let block = task_block(&client, &one);
    assert!(
        block.is_empty() || block.contains("state: aborted"),
        "{block}"
    );
    let s = snapshot_until(&source, "the aborted task's claim gone", |s| {
        claim(s, &one).is_none()
    })
    .await;
    let d = &s.nodes[0].devices[gpu as usize];
    assert_eq!(d.compute_allocated, Units(0), "{d:#?}");
    assert_eq!(s.claims.len(), 1, "{:#?}", s.claims);
    let p = &s.projects[0];
    assert_eq!((p.running, p.pending), (1, 0));
    client
        .wait_for("the aborted task's app still runs", |c| {
            !task_block(c, &one).contains("active_task_state: EXECUTING")
        })
        .await;
    // Acting on it again: refused, nothing sent (the client would answer success).
    for verb in [EngineVerb::BoincAbortTask, EngineVerb::BoincResumeTask] {
        let e = act(&source, verb, &one).await.unwrap_err();
        assert!(matches!(e, Failure::Peer(_)), "{e}");
        assert!(e.to_string().contains("already aborted"), "{e}");
    }

    // The headless command on the other task: the client's answer, an audit line, and the
    // task waits with its GPU free.
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
    let o = Command::new(gpuboard())
        .args(["act", "--config"])
        .arg(&config)
        .args(["cruncher", "suspend-task", &two, "--yes"])
        .env("XDG_STATE_HOME", state.path())
        .env("USER", "tester")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.contains(&format!("task {two} suspended")),
        "{stdout}"
    );
    assert!(task_block(&client, &two).contains("suspended via GUI: yes"));
    let log = std::fs::read_to_string(state.path().join("gpuboard/console.log")).unwrap();
    let host = common::host();
    assert!(
        log.contains(&format!(
            "actor=tester@{host} source=cruncher action=suspend-task target=task {two} done: task {two} suspended"
        )),
        "{log}"
    );
    let s = snapshot_until(&source, "both GPUs free", |s| {
        ours(s).iter().all(|d| d.compute_allocated == Units(0))
    })
    .await;
    assert_eq!(claim(&s, &two).unwrap().state, ClaimState::Pending);

    // BOINC's cordon on a running task: GPU mode never stops it and marks every GPU
    // cordoned; auto lets it run again.
    act(&source, EngineVerb::BoincResumeTask, &two)
        .await
        .unwrap();
    snapshot_until(&source, "the other task placed again", |s| {
        claim(s, &two).is_some_and(|c| c.state == ClaimState::Placed)
    })
    .await;
    let answer = act(&source, EngineVerb::BoincGpuMode, "never")
        .await
        .unwrap();
    assert_eq!(answer, "the client's GPU mode is now never");
    let s = snapshot_until(&source, "GPU mode never stopping the task", |s| {
        claim(s, &two).is_some_and(|c| c.state == ClaimState::Pending)
    })
    .await;
    assert!(
        claim(&s, &two)
            .unwrap()
            .pending_reasons
            .contains(&"GPU computing is set to never".to_string()),
        "{:?}",
        claim(&s, &two).unwrap().pending_reasons
    );
    assert!(
        s.nodes[0]
            .devices
            .iter()
            .all(|d| d.cordoned && d.holders.is_empty()),
        "{:#?}",
        s.nodes[0].devices
    );
    client
        .wait_for("GPU mode never left the task executing", |c| {
            !task_block(c, &two).contains("active_task_state: EXECUTING")
        })
        .await;
    act(&source, EngineVerb::BoincGpuMode, "auto")
        .await
        .unwrap();
    let s = snapshot_until(&source, "GPU mode auto running the task again", |s| {
        claim(s, &two).is_some_and(|c| c.state == ClaimState::Placed)
    })
    .await;
    assert!(s.nodes[0].devices.iter().all(|d| !d.cordoned));
}
