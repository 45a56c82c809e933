//! The endpoint under faults, with real processes and sockets: a data directory held by
//! one process and kept private, a commit that fails on a file-size limit (the disk
//! "full" for that process), a stderr that cannot be written, `gpuboard run` killed with
//! -9, and malformed or oversized request bodies.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, demo_fleet, gpuboard, http};
use gpuboard::endpoint::datadir::{Owner, running_owner};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Serve's flags here: a tick every 100 ms.
const TICK: &[&str] = &["--tick-ms", "100"];

/// Starts `cmd` (from [`Server::command`]) with [`TICK`], its stderr on the test's.
fn spawn_serve(cmd: Command, dir: &Path) -> Server {
    Server::spawn_with_stderr(cmd, dir, TICK, Stdio::inherit())
}

fn kill9(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether `pid` runs (exists and is not a zombie).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|s| s != "Z" && s != "X")
    })
}

/// Polls `cond` every 50 ms for up to 20 s.
async fn eventually(what: &str, cond: impl AsyncFnMut() -> bool) {
    wait_or_say(what, Duration::from_secs(20), cond, async || String::new()).await;
}

/// Polls `cond` every 50 ms for up to `within`; a failure says what `why` tells of the
/// state then.
async fn wait_or_say(
    what: &str,
    within: Duration,
    mut cond: impl AsyncFnMut() -> bool,
    why: impl AsyncFn() -> String,
) {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never: {what}\n{}", why().await);
}

async fn snapshot(url: &str, token: &str) -> Value {
    http()
        .get(format!("{url}/v1/snapshot"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn claim(url: &str, token: &str, body: &Value) -> (u16, Value) {
    let r = http()
        .post(format!("{url}/v1/claims"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_second_serve_names_the_holder_of_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let first = Server::start(dir.path(), &demo_fleet(), &[]);
    let owner = running_owner(dir.path()).expect("the lock file names the server");
    assert_eq!(
        owner,
        Owner {
            pid: first.child.id(),
            address: first.url.clone(),
        }
    );
    let second = Server::command(&demo_fleet())
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains(&format!("pid {}", first.child.id())) && err.contains(&first.url),
        "{err}"
    );
    drop(first);
    assert_eq!(
        running_owner(dir.path()),
        None,
        "a killed holder is no owner"
    );
    let again = Server::start(dir.path(), &demo_fleet(), &[]);
    assert_eq!(running_owner(dir.path()).unwrap().pid, again.child.id());
}

#[tokio::test]
async fn an_existing_data_directory_is_made_private_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    drop(Server::start(&dir, &demo_fleet(), &[]));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let chmod = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    assert!(files.iter().any(|p| p.ends_with("operator.token")));
    assert!(files.iter().any(|p| p.ends_with("gpuboard.sqlite")));
    for f in &files {
        assert_eq!(mode(f), 0o600, "{} made by the first start", f.display());
        chmod(f, 0o644);
    }
    chmod(&dir, 0o755);
    let mut server = Server::start(&dir, &demo_fleet(), &[]);
    assert_eq!(mode(&dir), 0o700);
    // A file the second start removed (a WAL or shared-memory file SQLite folds back in
    // on open) is no file open to others.
    for f in files.iter().filter(|f| f.exists()) {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }
    assert!(dir.join("operator.token").exists() && dir.join("gpuboard.sqlite").exists());
    server.kill9();
    let mut err = String::new();
    server
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("warning")
            && err.contains("operator.token was mode 0644, open to other users"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_freezes_the_endpoint_at_the_state_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    // Files this process writes may not grow past 160 KiB: its disk is "full" there.
    let mut cmd = Server::command(&demo_fleet());
    // SAFETY: setrlimit and signal are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 160 * 1024,
                rlim_max: 160 * 1024,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &raw const limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let server = spawn_serve(cmd, dir.path());
    let (url, token) = (server.url.clone(), server.operator_token());
    let mut acknowledged = Vec::new();
    let failure = loop {
        let (status, v) = claim(&url, &token, &json!({"gpu_memory": "1Mi"})).await;
        match status {
            201 => acknowledged.push(v["id"].as_u64().unwrap()),
            503 => break v,
            other => panic!("unexpected {other}: {v}"),
        }
        assert!(acknowledged.len() < 5000, "the file-size limit never hit");
    };
    assert_eq!(failure["error"], "store_failed");
    let reason = failure["detail"].as_str().unwrap().to_string();
    assert!(reason.contains("writing state failed"), "{reason}");
    let before = snapshot(&url, &token).await;
    // Every change is refused with the reason, and none applies.
    let (status, v) = claim(&url, &token, &json!({"gpu_memory": "1Mi"})).await;
    assert_eq!((status, v["error"].as_str()), (503, Some("store_failed")));
    let first = acknowledged[0];
    let r = http()
        .delete(format!("{url}/v1/claims/{first}"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let r = http()
        .post(format!("{url}/v1/devices/dgx-a100-40/0/cordon"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let after = snapshot(&url, &token).await;
    assert_eq!(after["revision"], before["revision"]);
    assert_eq!(after["claims"], before["claims"]);
    let ids: Vec<u64> = after["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_u64().unwrap())
        .collect();
    assert_eq!(
        ids, acknowledged,
        "exactly the acknowledged claims are shown"
    );
    // Health and metrics say so.
    let health = http().get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 503);
    let text = health.text().await.unwrap();
    assert!(text.starts_with("failed: writing state failed"), "{text}");
    let metrics = http()
        .get(format!("{url}/metrics"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("gpuboard_store_failed 1"), "{metrics}");
    // So does the snapshot, and a console reading the endpoint shows the source as failed.
    let frozen = snapshot(&url, &token).await;
    let why = frozen["endpoint"]["store_failed"]
        .as_str()
        .unwrap_or_default();
    assert!(!why.is_empty(), "{}", frozen["endpoint"]);
    let source = gpuboard::sources::endpoint::Http::new(
        "frozen",
        &url,
        Some(token.clone()),
        Duration::from_secs(5),
    )
    .unwrap();
    let seen = gpuboard::sources::Source::fetch(&source).await;
    let Err(failure) = seen else {
        panic!("a frozen endpoint was read as live")
    };
    assert!(
        failure.to_string().contains("writing state failed"),
        "{failure}"
    );
    // What was shown is what the disk holds: a restart without the limit resumes there.
    drop(server);
    let server = spawn_serve(Server::command(&demo_fleet()), dir.path());
    let url = server.url.clone();
    let resumed = snapshot(&url, &token).await;
    assert_eq!(resumed["revision"], after["revision"]);
    assert_eq!(resumed["claims"], after["claims"]);
    let health = http().get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    drop(server);
}

#[tokio::test]
async fn a_stderr_that_cannot_be_written_never_stops_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Server::command(&demo_fleet());
    cmd.env("RUST_LOG", "debug");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut server = Server::spawn_with_stderr(cmd, dir.path(), TICK, full.into());
    let (url, token) = (server.url.clone(), server.operator_token());
    for _ in 0..20 {
        let (status, v) = claim(&url, &token, &json!({"gpu_memory": "1Mi", "ttl": 60})).await;
        assert_eq!(status, 201, "{v}");
    }
    let health = http().get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert!(server.alive(), "serve still runs");
}

/// Starts `gpuboard run` against `url` with `script` as its command (under `sh -c`).
fn start_run(url: &str, dir: &Path, script: &str) -> Child {
    Command::new(gpuboard())
        .args(["run", "--memory", "1GiB", "--endpoint", url, "--data-dir"])
        .arg(dir)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

async fn read_pid(file: &Path) -> u32 {
    let mut pid = 0;
    eventually("the command wrote its pid", async || {
        pid = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        pid != 0
    })
    .await;
    pid
}

async fn claims(url: &str, token: &str) -> usize {
    snapshot(url, token).await["claims"]
        .as_array()
        .unwrap()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_killed_with_9_takes_its_command_along_and_then_the_claim() {
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let serve = spawn_serve(Server::command(&demo_fleet()), dir.path());
    let (url, token) = (serve.url.clone(), serve.operator_token());

    // The command itself dies with `run`; then the claim goes.
    let pid_file = work.path().join("cmd.pid");
    let script = format!("echo $$ > {}; exec sleep 300", pid_file.display());
    let mut run = start_run(&url, dir.path(), &script);
    let cmd = read_pid(&pid_file).await;
    assert_eq!(claims(&url, &token).await, 1);
    kill9(&mut run);
    eventually("the command is gone", async || !runs(cmd)).await;
    eventually("the claim is released", async || {
        claims(&url, &token).await == 0
    })
    .await;

    // A child the command left behind keeps the claim while it runs (its environment
    // names the `run` it came from), and frees it once it is gone.
    let pid_file = work.path().join("bg.pid");
    let script = format!("sleep 300 & echo $! > {}; wait", pid_file.display());
    let mut run = start_run(&url, dir.path(), &script);
    let left = read_pid(&pid_file).await;
    kill9(&mut run);
    // Ten owner checks (tick 100 ms) later the claim is still held.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(runs(left));
    assert_eq!(claims(&url, &token).await, 1, "held while its process runs");
    // SAFETY: ending the process this test's command started.
    unsafe { libc::kill(i32::try_from(left).unwrap(), libc::SIGKILL) };
    eventually("the claim is released", async || {
        claims(&url, &token).await == 0
    })
    .await;

    // A command that exits leaving a background child: `run` ends the child before it
    // releases the claim.
    let pid_file = work.path().join("exit.pid");
    let script = format!("sleep 300 & echo $! > {}", pid_file.display());
    let status = start_run(&url, dir.path(), &script).wait().unwrap();
    assert!(status.success());
    let left = read_pid(&pid_file).await;
    eventually("the background child is gone", async || !runs(left)).await;
    assert_eq!(claims(&url, &token).await, 0);
    drop(serve);
}

/// Sends `raw` on a fresh connection and returns the status line and the rest.
async fn raw_request(url: &str, raw: &str) -> String {
    let addr = url.trim_start_matches("http://");
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(raw.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    // Read until the answer's headers and some body arrived, or the server closed.
    loop {
        let n = tokio::time::timeout(Duration::from_secs(30), sock.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&out);
        if let Some((_, body)) = text.split_once("\r\n\r\n")
            && body.contains('}')
        {
            break;
        }
    }
    String::from_utf8_lossy(&out).to_string()
}

#[tokio::test]
async fn malformed_and_oversized_bodies_and_keys_given_twice() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let token = server.operator_token();
    let head = |extra: &str| {
        format!(
            "POST /v1/claims HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\n{extra}\r\n"
        )
    };
    // A chunk size that is not hexadecimal.
    let answer = raw_request(
        &server.url,
        &format!(
            "{}zz\r\n{{}}\r\n0\r\n\r\n",
            head("Transfer-Encoding: chunked\r\n")
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("malformed_body"), "{answer}");
    // A declared megabyte that never comes: refused before any of it is read.
    let answer = raw_request(&server.url, &head("Content-Length: 1048576\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("body_too_large"), "{answer}");
    // A key given twice is refused, not the last one taken.
    let r = http()
        .post(format!("{}/v1/claims", server.url))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(r#"{"gpu_memory": "1Gi", "gpu_memory": "70Gi"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"], "malformed_json");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("field `gpu_memory` is given twice"),
        "{v}"
    );
    assert_eq!(claims(&server.url, &token).await, 0);
}

/// Every process with its group, the terminal's foreground group and its signal masks
/// (`ps`; empty where it is not installed), for a failure's message.
fn processes() -> String {
    Command::new("ps")
        .args([
            "-eo",
            "pid,ppid,pgid,tpgid,stat,pending,blocked,ignored,caught,args",
        ])
        .output()
        .map_or_else(
            |e| format!("(no ps: {e})"),
            |o| String::from_utf8_lossy(&o.stdout).into_owned(),
        )
}

/// How long the terminal test waits for each step: long enough for a machine busy with
/// the rest of the suite.
const TERMINAL_WAIT: Duration = Duration::from_mins(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_the_command_gets_the_keys() {
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let serve = spawn_serve(Server::command(&demo_fleet()), dir.path());
    let (url, token) = (serve.url.clone(), serve.operator_token());
    let (ready, out, err) = (
        work.path().join("ready"),
        work.path().join("got"),
        work.path().join("run.err"),
    );
    // The command says when it runs (it has the terminal by then: `run` hands it over
    // before the exec), so the keys are typed to it and not to whatever runs before. It
    // ends as `sleep` in its own process: `sh -c` catches SIGINT and, when Ctrl-C comes
    // while it forks a child, defers it until that child ends, and the child, made after
    // the signal, never got it (seen: 6 of ~1 800 runs under the suite's load held the
    // claim for the sleep's 300 s).
    let script = format!(
        "echo $$ > {}; read x; echo got-$x > {}; exec sleep 300",
        ready.display(),
        out.display()
    );
    // A HOME of its own, as `common::isolated_cli` gives, and `run`'s words kept in a file
    // for a failure's message.
    let line = format!(
        "env -u GPUBOARD_TOKEN -u GPUBOARD_ENDPOINT -u GPUBOARD_CONFIG HOME={home} \
         XDG_CONFIG_HOME={home}/config XDG_STATE_HOME={home}/state GPUBOARD_CACHE_DIR={home}/cache \
         {bin} run --memory 1GiB --endpoint {url} --data-dir {data} -- sh -c '{script}' 2>{err}",
        home = work.path().display(),
        bin = gpuboard().display(),
        data = dir.path().display(),
        err = err.display(),
    );
    let pane = common::tmux::Session::start(120, 20, "faults-run", &line);
    let why = async || {
        format!(
            "processes:\n{}\nscreen:\n{}\nrun's stderr:\n{}\nclaims: {}",
            processes(),
            pane.screen(),
            std::fs::read_to_string(&err).unwrap_or_default(),
            snapshot(&url, &token).await["claims"]
        )
    };
    wait_or_say(
        "the command runs under `run`",
        TERMINAL_WAIT,
        async || ready.exists() && claims(&url, &token).await == 1,
        why,
    )
    .await;
    // Typed keys reach the command (a command in a background group would stop on read).
    pane.keys(&["hello", "Enter"]);
    wait_or_say(
        "the command read the line",
        TERMINAL_WAIT,
        async || std::fs::read_to_string(&out).is_ok_and(|t| t.trim() == "got-hello"),
        why,
    )
    .await;
    // Ctrl-C ends the command (once it is `sleep`, past the shell's exec); `run` then
    // releases the claim.
    let pid = std::fs::read_to_string(&ready).unwrap();
    wait_or_say(
        "the command is `sleep`",
        TERMINAL_WAIT,
        async || {
            std::fs::read_to_string(format!("/proc/{}/comm", pid.trim()))
                .is_ok_and(|c| c.trim() == "sleep")
        },
        why,
    )
    .await;
    pane.keys(&["C-c"]);
    wait_or_say(
        "the claim is released",
        TERMINAL_WAIT,
        async || claims(&url, &token).await == 0,
        why,
    )
    .await;
    drop(serve);
}
