//! Leases follow their processes, on real processes: `gpuboard run --ttl 3` whose command
//! leaves a process running in the background, then `kill -9` of `run`. The command dies
//! with `run`; the background process lives on, and with it the claim: held past its ttl
//! (the lease extended, audited), released once that last process has ended.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, demo_fleet};
use serde_json::Value;

/// Generous: the machine is shared and loaded.
const DEADLINE: Duration = Duration::from_mins(1);
const TTL: u64 = 3;

async fn snapshot(server: &Server) -> Value {
    common::http()
        .get(format!("{}/v1/snapshot", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Waits (bounded) until `ok` holds for the endpoint's snapshot; returns that snapshot.
async fn until(server: &Server, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let snap = snapshot(server).await;
        if ok(&snap) {
            return snap;
        }
        assert!(start.elapsed() < DEADLINE, "never saw {what}: {snap:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn held(snap: &Value, id: u64) -> bool {
    snap["claims"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["id"] == id)
}

fn events<'a>(snap: &'a Value, action: &str, id: u64) -> Vec<&'a Value> {
    let target = format!("claim {id}");
    snap["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == action && e["target"] == target.as_str())
        .collect()
}

/// Reads a pid the command wrote, waiting (bounded) for the file.
fn pid_in(path: &Path) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{} never written",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn runs(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X")
    })
}

/// `gpuboard run --ttl 3` of `sh -c SCRIPT` against `server`.
fn run(server: &Server, script: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args(["run", "--memory", "1GiB", "--ttl", &TTL.to_string()])
        .args(["--endpoint", &server.url, "--data-dir"])
        .arg(&server.dir)
        .args(["--", "sh", "-c", script])
        .env_remove("GPUBOARD_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// The scenario: `run` of a command that starts `background` (a shell word list) and
/// records its pid, then `kill -9` of `run`; the claim must be held past its ttl while that
/// process runs, and released once it ends. Returns the background process's pid while it
/// still runs, for the caller's own checks, through `check`.
async fn held_while_the_background_runs(background: &str, check: impl Fn(i32)) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &demo_fleet(),
        &["--open-reads", "--tick-ms", "200"],
    );
    let (bg, fg) = (dir.path().join("bg"), dir.path().join("fg"));
    let script = format!(
        "{background} & echo $! > {}; echo $$ > {}; exec sleep 301",
        bg.display(),
        fg.display()
    );
    let mut run = run(&server, &script);
    let (bg, fg) = (pid_in(&bg), pid_in(&fg));
    let snap = until(&server, "the claim", |s| {
        s["claims"].as_array().is_some_and(|c| c.len() == 1)
    })
    .await;
    let id = snap["claims"][0]["id"].as_u64().unwrap();
    check(bg);

    run.kill().unwrap();
    run.wait().unwrap();
    let killed = Instant::now();
    // The command itself goes with `run` (its parent-death signal).
    let start = Instant::now();
    while runs(fg) {
        assert!(start.elapsed() < DEADLINE, "the command outlived run");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(runs(bg), "the background process lives on");
    // Nothing renews the lease now: it runs out, and is extended for the live process.
    let snap = until(&server, "the lease extended", |s| {
        !events(s, "lease-extended", id).is_empty()
    })
    .await;
    assert!(held(&snap, id), "held while its process runs: {snap:#}");
    while killed.elapsed() < Duration::from_secs(TTL + 1) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let snap = snapshot(&server).await;
    assert!(
        held(&snap, id),
        "still held {} s after kill -9 of run, past its {TTL} s ttl: {snap:#}",
        killed.elapsed().as_secs()
    );
    assert!(events(&snap, "expire", id).is_empty(), "{snap:#}");

    // The last process ends: the claim goes, and the audit says why.
    // SAFETY: killing the background process this test started.
    unsafe { libc::kill(bg, libc::SIGKILL) };
    let snap = until(&server, "the claim released", |s| !held(s, id)).await;
    let gone = events(&snap, "owner-gone", id);
    assert_eq!(gone.len(), 1, "{snap:#}");
    assert!(
        gone[0]["detail"].as_str().unwrap().contains("last process"),
        "{}",
        gone[0]
    );
    assert!(events(&snap, "expire", id).is_empty(), "{snap:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_outlives_kill_9_of_run_while_a_background_process_runs() {
    held_while_the_background_runs("sleep 300", |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_process_that_clears_its_environment_is_kept_by_the_cgroup() {
    // Only the cgroup can find a process without GPUBOARD_RUN_PID: where `run` cannot make
    // one (no writable cgroup v2 here), there is nothing to test.
    let probe = tempfile::tempdir().unwrap();
    let server = Server::start(probe.path(), &demo_fleet(), &[]);
    let cgroup = probe.path().join("cgroup");
    let mut child = run(
        &server,
        &format!("cat /proc/self/cgroup > {}", cgroup.display()),
    );
    child.wait().unwrap();
    let text = std::fs::read_to_string(&cgroup).unwrap_or_default();
    if !text.contains("gpuboard-run-") {
        eprintln!("no cgroup for run on this host ({text:?}): the variable alone is tested");
        return;
    }
    drop(server);
    held_while_the_background_runs("env -i sleep 300", |bg| {
        let env = std::fs::read(format!("/proc/{bg}/environ")).unwrap();
        assert!(
            !String::from_utf8_lossy(&env).contains("GPUBOARD_RUN_PID"),
            "the background process kept the variable"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_left_the_process_group_is_still_ended_when_the_command_exits() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &["--open-reads"]);
    let (bg, cgroup) = (dir.path().join("bg"), dir.path().join("cgroup"));
    // `setsid` takes the background process out of the command's process group, which is
    // all `run` could end without a cgroup.
    let script = format!(
        "cat /proc/self/cgroup > {}; setsid sleep 300 & echo $! > {}",
        cgroup.display(),
        bg.display()
    );
    let status = run(&server, &script).wait().unwrap();
    assert!(status.success());
    let bg = pid_in(&bg);
    let in_cgroup = std::fs::read_to_string(&cgroup)
        .unwrap_or_default()
        .contains("gpuboard-run-");
    if !in_cgroup {
        // SAFETY: killing the process this test started.
        unsafe { libc::kill(bg, libc::SIGKILL) };
        eprintln!("no cgroup for run on this host: a process that left the group outlives it");
        return;
    }
    assert!(!runs(bg), "run ended what its command left in its cgroup");
    let snap = snapshot(&server).await;
    assert!(snap["claims"].as_array().unwrap().is_empty(), "{snap:#}");
}
