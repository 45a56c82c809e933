//! The SSH source against a real OpenSSH server on 127.0.0.1 (`common::sshd`): every host
//! of the test's ssh config is read at once, through one shared bound on connections, and
//! each shows its reader or its reason: GPUs and processes from a fake nvidia-smi (with
//! its garbled line a warning), a gpuboard binary detected, a refused key, an unknown host
//! key, a command that hangs, no nvidia-smi, nothing listening. The connection is kept
//! (its control socket stays), and `gpuboard status --ssh` shows the same through the CLI.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::sshd::Sshd;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuboard::clock::SystemClock;
use gpuboard::snapshot::Snapshot;
use gpuboard::sources::ssh::command::SshOptions;
use gpuboard::sources::ssh::{SshConfig, SshSource};
use gpuboard::sources::{Failure, Fetched, Source};
use gpuboard::units::Bytes;
use serde_json::Value;

/// Generous: two cores shared with other builders.
const PATIENCE: Duration = Duration::from_mins(1);

pub(crate) fn config(server: &Sshd, alias: &str) -> SshConfig {
    SshConfig {
        name: alias.to_string(),
        destination: alias.to_string(),
        options: SshOptions {
            program: "ssh".into(),
            config_file: Some(server.ssh_config()),
            control_dir: server.control_dir(),
            control_persist: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
        },
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(4),
        first_wait: Duration::from_millis(200),
        reprobe: Duration::from_mins(1),
    }
}

/// A serve of this build over one node `node` of two 24 GiB GPUs, in the data directory
/// `dir` (where the SSH user's `gpuboard` looks), started with `args`; with it the
/// directory its inventory is in.
pub(crate) fn serve_on(
    dir: &std::path::Path,
    node: &str,
    args: &[&str],
) -> (common::Server, tempfile::TempDir) {
    let inventory_dir = tempfile::tempdir().unwrap();
    let inventory = common::one_node_inventory(inventory_dir.path(), node, "Far GPU", "24GiB", 2);
    (common::Server::start(dir, &inventory, args), inventory_dir)
}

/// Fetches until the host answers with something other than "connecting".
pub(crate) async fn settled(src: &SshSource) -> Result<Snapshot, Failure> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match src.fetch().await {
            Ok(Fetched::Snapshot(s) | Fetched::Telemetry(s)) => return Ok(*s),
            Err(Failure::Unreachable { detail, .. }) if detail.starts_with("connecting") => {}
            Err(e) => return Err(e),
            Ok(Fetched::Unchanged) => panic!("{}: unchanged before any snapshot", src.name()),
        }
        assert!(
            Instant::now() < deadline,
            "{}: still connecting",
            src.name()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Fetches until a reading (a snapshot or a failure) that `pred` accepts arrives.
pub(crate) async fn until(
    src: &SshSource,
    what: &str,
    mut pred: impl FnMut(&Result<Snapshot, Failure>) -> bool,
) -> Result<Snapshot, Failure> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let got = match src.fetch().await {
            Ok(Fetched::Snapshot(s) | Fetched::Telemetry(s)) => Some(Ok(*s)),
            Ok(Fetched::Unchanged) => None,
            Err(e) => Some(Err(e)),
        };
        if let Some(got) = got
            && pred(&got)
        {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{}: no {what} within {PATIENCE:?}",
            src.name()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn note(s: &Snapshot) -> String {
    s.endpoint.telemetry_note.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_host_shows_its_reader_or_its_reason() {
    if common::skip_peer("ssh") {
        return;
    }
    let server = Sshd::start();
    // The host with a serve: this build's, over an inventory, in the data directory its
    // SSH user's `gpuboard` looks in.
    let (serve, _inventory) = serve_on(&server.serve_dir(), "far-node", &[]);
    // Two connects at a time for ten hosts: the bound holds them, it does not lose them.
    let connects = Arc::new(tokio::sync::Semaphore::new(2));
    let aliases = [
        "gpu-fake",
        "gpu-ours",
        "gpu-nosmi",
        "gpu-hang",
        "gpu-refused",
        "gpu-badkey",
        "gpu-down",
        "gpu-serve",
        "gpu-nvml",
        "gpu-stall",
    ];
    let sources: Vec<SshSource> = aliases
        .iter()
        .map(|a| {
            SshSource::with(
                config(&server, a),
                Arc::clone(&connects),
                Arc::new(SystemClock),
            )
            .unwrap()
        })
        .collect();
    let results = futures::future::join_all(sources.iter().map(settled)).await;
    let at = |alias: &str| aliases.iter().position(|a| *a == alias).unwrap();
    let result = |alias: &str| results[at(alias)].clone();

    // The fake nvidia-smi: two GPUs with their telemetry, the process, the garbled line.
    let fake = result("gpu-fake").unwrap_or_else(|e| panic!("gpu-fake: {e}"));
    assert_eq!(fake.endpoint.kind, "ssh");
    assert!(!fake.endpoint.actions);
    assert!(
        note(&fake).starts_with("reader: nvidia-smi -l 1 (nothing of gpuboard's"),
        "{}",
        note(&fake)
    );
    assert_eq!(fake.nodes.len(), 1);
    let devices = &fake.nodes[0].devices;
    assert_eq!(devices.len(), 2, "{devices:#?}");
    assert_eq!(devices[0].model, "NVIDIA A100-SXM4-40GB");
    assert_eq!(devices[0].memory_capacity, Some(Bytes::mib(40960)));
    let t0 = devices[0].telemetry.as_ref().unwrap();
    assert_eq!(t0.utilization_gpu, Some(37));
    assert_eq!(t0.power_mw, Some(71_500));
    assert_eq!(t0.memory_used, Some(Bytes::mib(1234)));
    assert_eq!(t0.processes.len(), 1);
    assert_eq!(t0.processes[0].pid, 4242);
    assert_eq!(t0.processes[0].name.as_deref(), Some("python train.py"));
    let t1 = devices[1].telemetry.as_ref().unwrap();
    assert_eq!((t1.utilization_gpu, t1.memory_used), (None, None));
    let warnings = &fake.endpoint.warnings;
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].found.contains("`this is not a GPU line`") && warnings[0].path == "line 3",
        "{}",
        warnings[0]
    );

    // A gpuboard binary that is not this one: its telemetry fails, nvidia-smi reads.
    let ours = result("gpu-ours").unwrap_or_else(|e| panic!("gpu-ours: {e}"));
    let n = note(&ours);
    assert!(
        n.starts_with("reader: nvidia-smi -l 1 (gpuboard 0.0.0-test is on the host, but its telemetry failed: a line that is not a snapshot"),
        "{n}"
    );
    assert_eq!(ours.nodes[0].devices.len(), 2);

    // Reader 1: the serve's own state (its inventory, its claims) through the channel.
    let far = result("gpu-serve").unwrap_or_else(|e| panic!("gpu-serve: {e}"));
    let n = note(&far);
    assert!(
        n.starts_with("reader: gpuboard serve over ssh (pid ")
            && n.contains("through its operator token"),
        "{n}"
    );
    assert_eq!(far.endpoint.kind, "ssh");
    assert!(
        far.endpoint.actions,
        "its SSH user reads the operator token"
    );
    assert_eq!(far.nodes[0].name, "far-node");
    assert_eq!(far.nodes[0].devices.len(), 2);
    assert!(far.claims.is_empty());
    // A claim made there comes as a delta over the same channel.
    let out = serve.cli(&["claim", "--memory", "1GiB", "--project", "far"]);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let src = &sources[at("gpu-serve")];
    let claimed = until(src, "claim over the watch", |r| {
        r.as_ref().is_ok_and(|s| s.claims.len() == 1)
    })
    .await
    .unwrap();
    assert_eq!(claimed.claims[0].project, "far");
    // The serve goes: the host falls through the readers it has left (its gpuboard finds no
    // NVML here, and there is no nvidia-smi), and says each why.
    drop(serve);
    let gone = until(src, "the readers left", |r| {
        r.as_ref()
            .is_err_and(|e| e.to_string().contains("; before it:"))
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(
        gone.starts_with("no nvidia-smi on the remote PATH")
            && gone.contains(
                "is on the host, but its telemetry failed: gpuboard: no GPU telemetry on this host"
            ),
        "{gone}"
    );

    // Reader 2: this build's NVML telemetry, sampled on the host.
    let nvml = result("gpu-nvml").unwrap_or_else(|e| panic!("gpu-nvml: {e}"));
    let n = note(&nvml);
    assert!(
        n.starts_with("reader: gpuboard's NVML telemetry over ssh (gpuboard "),
        "{n}"
    );
    let d = &nvml.nodes[0].devices;
    assert_eq!(d.len(), 3, "{d:#?}");
    assert_eq!(d[0].model, "NVIDIA A100-SXM4-80GB");
    assert_eq!(
        d[0].telemetry.as_ref().and_then(|t| t.utilization_gpu),
        Some(35)
    );
    assert_eq!(
        d[1].uuid.as_deref(),
        Some("GPU-40904090-0000-0000-0000-000000000000")
    );

    // Each failing host says why.
    let reason = |alias: &str| match result(alias) {
        Ok(s) => panic!("{alias} answered: {s:?}"),
        Err(e) => e,
    };
    let refused = reason("gpu-refused");
    assert!(matches!(refused, Failure::Unauthorized(_)), "{refused:?}");
    let text = refused.to_string();
    assert!(
        text.contains("authentication refused") && text.contains("Permission denied"),
        "{text}"
    );
    let badkey = reason("gpu-badkey").to_string();
    assert!(
        badkey.contains("host key not trusted") && badkey.contains("Host key verification failed"),
        "{badkey}"
    );
    let hang = reason("gpu-hang").to_string();
    assert!(
        hang.contains("connected, but the command did not finish within 4 s"),
        "{hang}"
    );
    let nosmi = reason("gpu-nosmi").to_string();
    assert!(
        nosmi.contains("no nvidia-smi on the remote PATH"),
        "{nosmi}"
    );
    let down = reason("gpu-down").to_string();
    assert!(
        down.contains("unreachable") && down.contains("Connection refused"),
        "{down}"
    );

    // The stream that stops printing is a timeout after three periods.
    let stall = &sources[at("gpu-stall")];
    let silent = until(stall, "silence", Result::is_err).await.unwrap_err();
    assert!(
        silent
            .to_string()
            .contains("connected, but nvidia-smi -l 1 printed nothing for 3 s"),
        "{silent}"
    );

    // The connection is kept (a control socket), and later readings come streamed.
    let sockets = std::fs::read_dir(server.control_dir()).unwrap().count();
    assert!(
        sockets >= 1,
        "no control socket in {}",
        server.control_dir().display()
    );
    let again = until(&sources[at("gpu-fake")], "newer reading", |r| {
        r.as_ref().is_ok_and(|s| s.taken_at > fake.taken_at)
    })
    .await
    .unwrap();
    assert_eq!(again.nodes[0].devices.len(), 2);
    assert_eq!(again.endpoint.warnings.len(), 1, "the garbled line again");
    drop(sources);
    drop(server);
}

#[tokio::test]
async fn status_shows_ssh_hosts_from_the_flags() {
    if common::skip_peer("ssh") {
        return;
    }
    let server = Sshd::start();
    let home = tempfile::tempdir().unwrap();
    let hosts = home.path().join("hosts");
    std::fs::write(&hosts, "# the lab\ngpu-nosmi\n").unwrap();
    let config = server.ssh_config();
    let runtime = server.dir.path().join("run");
    std::fs::create_dir_all(&runtime).unwrap();
    let run_dir = runtime.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(common::gpuboard())
            .args([
                "status",
                "--once",
                "--json",
                "--ssh",
                "gpu-fake",
                "--ssh-hosts",
            ])
            .arg(&hosts)
            .arg("--ssh-config")
            .arg(&config)
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("XDG_RUNTIME_DIR", &run_dir)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let sources = doc["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 2, "{doc:#}");
    assert_eq!(sources[0]["kind"], "ssh", "{doc:#}");
    let text = doc.to_string();
    assert!(text.contains("NVIDIA A100-SXM4-40GB"), "{doc:#}");
    assert!(text.contains("no nvidia-smi on the remote PATH"), "{doc:#}");
    assert!(
        runtime.join("gpuboard-ssh").is_dir(),
        "control sockets go under XDG_RUNTIME_DIR"
    );
}

#[test]
fn the_console_shows_each_host_and_stays_responsive_while_one_hangs() {
    if common::skip_peer("ssh") {
        return;
    }
    let server = Sshd::start();
    let _serve = serve_on(&server.serve_dir(), "far-node", &[]);
    let home = tempfile::tempdir().unwrap();
    let runtime = home.path().join("run");
    std::fs::create_dir_all(&runtime).unwrap();
    let script = format!(
        "env HOME={h} XDG_CONFIG_HOME={h}/config XDG_STATE_HOME={h}/state XDG_RUNTIME_DIR={r} \
         {bin} --refresh 1 --ssh gpu-fake --ssh gpu-ours --ssh gpu-refused --ssh gpu-nosmi \
         --ssh gpu-hang --ssh gpu-serve --ssh gpu-nvml --ssh-config {c}; echo EXIT=$?; sleep 60",
        h = home.path().display(),
        r = runtime.display(),
        bin = common::gpuboard().display(),
        c = server.ssh_config().display()
    );
    let s = common::tmux::Session::start(200, 50, "ssh", &script);
    // Each host with its reader, its unread line or its reason, in the Overview's Sources.
    s.wait_for("GPUs");
    s.keys(&["1"]);
    s.wait_for("reader: gpuboard serve over ssh");
    s.wait_for("reader: gpuboard's NVML telemetry over ssh");
    s.wait_for("(gpuboard 0.0.0-test is on the host");
    s.wait_for("this is not a GPU line");
    s.wait_for("authentication refused");
    s.wait_for("no nvidia-smi on the remote PATH");
    // The hanging host holds nothing up: the GPUs of the others are one key away (2 from
    // nvidia-smi twice, 2 of the serve's, 3 of the NVML host's).
    s.keys(&["2"]);
    let gpus = s.wait_for("GPUs (9)");
    assert!(gpus.contains("A100") && gpus.contains("Far GPU"), "{gpus}");
    s.keys(&["1"]);
    // Its own reason comes when its reading's limit (20 s) is past.
    s.wait_until("the hanging host's reason", |screen| {
        screen.contains("did not finish within 20 s")
    });
    s.keys(&["q"]);
    let screen = s.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
}
