//! What ships beside the binary: shell completions and man pages for every subcommand,
//! `--version` with its commit, the systemd unit (verified by `systemd-analyze`, and
//! `serve` telling systemd READY once it listens), and the Prometheus alerting rules and
//! Grafana dashboard (checked by promtool, on the names a real `serve` exports).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Server, Stopper, demo_fleet, gpuboard};

fn run(args: &[&str]) -> Output {
    let out = Command::new(gpuboard()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "gpuboard {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(args: &[&str]) -> String {
    String::from_utf8(run(args).stdout).unwrap()
}

/// Every subcommand path (`["serve"]`, `["project", "share"]`...), read from `--help` the
/// way a user finds them, so a subcommand added later is covered without editing this test.
fn subcommands(path: &[String]) -> Vec<Vec<String>> {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let help = stdout(&args);
    let mut found = Vec::new();
    let mut in_commands = false;
    for line in help.lines() {
        if line.starts_with("Commands:") {
            in_commands = true;
            continue;
        }
        if in_commands {
            if !line.starts_with("  ") {
                break;
            }
            let name = line.split_whitespace().next().unwrap().to_string();
            if name == "help" {
                continue;
            }
            let mut sub = path.to_vec();
            sub.push(name);
            found.extend(subcommands(&sub));
            found.push(sub);
        }
    }
    found
}

#[test]
fn completions_cover_every_subcommand_in_bash_zsh_and_fish() {
    let all = subcommands(&[]);
    assert!(all.len() > 15, "too few subcommands found: {all:?}");
    for expected in [
        vec!["serve"],
        vec!["token", "ls"],
        vec!["completions"],
        vec!["man"],
    ] {
        assert!(
            all.contains(&expected.iter().map(ToString::to_string).collect()),
            "{all:?}"
        );
    }
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout(&["completions", shell]);
        for sub in &all {
            let name = sub.last().unwrap();
            assert!(
                script.contains(name.as_str()),
                "{shell} completion lacks `{}`",
                sub.join(" ")
            );
        }
        // Flags of a nested subcommand are completed too.
        assert!(
            script.contains("print-unit"),
            "{shell}: serve's flags missing"
        );
    }
    // The bash script is valid bash.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gpuboard.bash");
    std::fs::write(&file, stdout(&["completions", "bash"])).unwrap();
    let check = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // An unknown shell is refused, naming the ones there are.
    let bad = Command::new(gpuboard())
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("tcsh") && err.contains("bash"), "{err}");
}

#[test]
fn man_pages_are_written_for_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let out = stdout(&["man", "--out", dir.path().to_str().unwrap()]);
    assert!(out.contains("man pages"), "{out}");
    let pages: BTreeSet<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(pages.contains("gpuboard.1"), "{pages:?}");
    for sub in subcommands(&[]) {
        let page = format!("gpuboard-{}.1", sub.join("-"));
        assert!(pages.contains(&page), "no {page} in {pages:?}");
    }
    let serve = std::fs::read_to_string(dir.path().join("gpuboard-serve.1")).unwrap();
    assert!(serve.starts_with(".ie") || serve.contains(".TH"), "{serve}");
    assert!(serve.contains("print\\-unit"), "{serve}");
    // Without --out, gpuboard(1) goes to stdout, with the version and commit.
    let page = stdout(&["man"]);
    assert!(page.contains(".TH gpuboard 1"), "{page}");
    assert!(page.contains("commit"), "{page}");
}

#[test]
fn version_names_the_commit_and_the_build_date() {
    let v = stdout(&["--version"]);
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "unknown".to_string(),
            |o| String::from_utf8(o.stdout).unwrap().trim().to_string(),
        );
    assert!(
        v.starts_with(&format!("gpuboard {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    // The build may predate the last commit of a running checkout: a 12-digit hash, or
    // `unknown` without git.
    let stamped = v
        .split("(commit ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    assert!(
        stamped == "unknown"
            || (stamped.len() == 12 && stamped.chars().all(|c| c.is_ascii_hexdigit())),
        "{v}"
    );
    if commit == "unknown" {
        assert_eq!(stamped, "unknown", "{v}");
    }
    let date = v
        .split("built ")
        .nth(1)
        .unwrap()
        .trim()
        .trim_end_matches(')');
    let ymd: Vec<&str> = date.split('-').collect();
    assert_eq!(ymd.len(), 3, "{v}");
    assert!(ymd[0].parse::<u32>().unwrap() >= 2025, "{v}");
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    let Ok(which) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!(
            "SKIPPED the_unit_passes_systemd_analyze_verify: systemd-analyze is not installed \
             (Debian's `systemd` package has it; scripts/install-peers installs it)"
        );
        return;
    };
    assert!(which.status.success());
    let unit = stdout(&["serve", "--print-unit"]);
    assert!(
        unit.contains(&format!("ExecStart={} serve", gpuboard().display())),
        "{unit}"
    );
    for directive in [
        "Type=notify",
        "WatchdogSec=",
        "Restart=on-failure",
        "User=gpuboard",
        "StateDirectory=gpuboard",
        "--data-dir /var/lib/gpuboard",
        "DeviceAllow=/dev/nvidiactl rw",
    ] {
        assert!(unit.contains(directive), "unit lacks {directive}");
    }
    assert!(
        !unit.contains("PrivateDevices=yes"),
        "NVML needs /dev/nvidia*"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpuboard.service");
    std::fs::write(&path, &unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify failed: {err}");
    // Unknown keys are only warned about: any warning fails the test.
    assert!(
        err.trim().is_empty(),
        "systemd-analyze verify warned: {err}"
    );
    // The test can fail: a bad directive is caught.
    std::fs::write(
        &path,
        unit.replace("Restart=on-failure", "Restart=sometimes"),
    )
    .unwrap();
    let bad = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&bad.stderr).trim().is_empty());
}

/// Datagrams received on `sock` until one contains `want`, for at most two minutes.
fn wait_for_datagram(sock: &UnixDatagram, want: &str, seen: &mut Vec<String>) {
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_mins(2);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if let Ok(n) = sock.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).to_string();
            let done = msg.lines().any(|l| l == want);
            seen.push(msg);
            if done {
                return;
            }
        }
    }
    panic!("no {want} from serve within two minutes; got {seen:?}");
}

#[test]
fn serve_notifies_ready_once_it_listens_and_pings_the_watchdog() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&socket).unwrap();
    let data = dir.path().join("data");
    let mut child = Stopper {
        child: Server::command(&demo_fleet())
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen", "127.0.0.1:0", "--open-reads"])
            .env("NOTIFY_SOCKET", &socket)
            .env("WATCHDOG_USEC", "200000")
            .env("JOURNAL_STREAM", "8:12345")
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        name: "serve",
    };
    let mut seen = Vec::new();
    wait_for_datagram(&sock, "READY=1", &mut seen);
    // READY came after the listener was up: the address is written and answers at once.
    let mut line = String::new();
    BufReader::new(child.child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_string();
    assert!(
        seen.iter()
            .any(|m| m.contains(&format!("STATUS=listening on {url}"))),
        "{seen:?}"
    );
    let addr = url.trim_start_matches("http://");
    std::net::TcpStream::connect(addr).expect("READY before the listener answers");
    wait_for_datagram(&sock, "WATCHDOG=1", &mut seen);
    // SIGTERM: STOPPING=1 before it exits.
    let pid = libc::pid_t::try_from(child.pid()).unwrap();
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_for_datagram(&sock, "STOPPING=1", &mut seen);
    child.stop();
    // Under the journal the log lines carry no timestamp or colour codes of their own.
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        !err.contains('\u{1b}'),
        "colour codes in journal logs: {err}"
    );
    for l in err.lines().filter(|l| !l.trim().is_empty()) {
        assert!(!l.starts_with("20"), "timestamp in a journal line: {l}");
    }
}

fn promtool(args: &[&str], dir: &Path) -> Output {
    Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool (Debian's prometheus package, installed by scripts/install-peers)")
}

fn assets() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/assets"))
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    if common::skip_peer("prometheus") {
        eprintln!("SKIPPED: prometheus is in GPUBOARD_SKIP_PEERS");
        return;
    }
    let check = promtool(&["check", "rules", "prometheus-alerts.yml"], assets());
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let test = promtool(&["test", "rules", "prometheus-alerts.test.yml"], assets());
    assert!(
        test.status.success(),
        "{}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
    let text = std::fs::read_to_string(assets().join("prometheus-alerts.yml")).unwrap();
    for alert in [
        "GpuboardEndpointDown",
        "GpuboardStoreFailed",
        "GpuboardAllocatedButIdle",
        "GpuboardClaimsOverLimit",
        "GpuboardClaimsPendingLong",
        "GpuboardDoubleBooked",
    ] {
        assert!(text.contains(&format!("alert: {alert}")), "no {alert}");
    }
}

/// The `gpuboard_*` names an expression uses.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("gpuboard_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// The dashboard's panel queries.
fn dashboard_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(assets().join("grafana-dashboard.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut exprs = Vec::new();
    for panel in dash["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            exprs.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(exprs.len() > 10, "{exprs:?}");
    exprs
}

#[test]
fn the_dashboard_queries_are_valid_promql() {
    if common::skip_peer("prometheus") {
        eprintln!("SKIPPED: prometheus is in GPUBOARD_SKIP_PEERS");
        return;
    }
    // promtool parses rule expressions: each query becomes a recording rule, with the
    // dashboard's $instance variable as Grafana would expand it.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in dashboard_exprs().iter().enumerate() {
        let e = e.replace("$instance", ".*").replace('\'', "''");
        let _ = write!(
            rules,
            "      - record: dashboard:query{i}\n        expr: '{e}'\n"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dashboard.yml"), rules).unwrap();
    let check = promtool(&["check", "rules", "dashboard.yml"], dir.path());
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

/// Names exported at `url`'s /metrics (series lines, not comments).
async fn exported_names(url: &str) -> BTreeSet<String> {
    let body = common::http()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn the_rules_and_dashboard_use_names_serve_exports() {
    // GPUs from the fake NVML library, so telemetry (memory used, unclaimed) is exported.
    let driver = common::fake_driver_dir();
    let work = tempfile::tempdir().unwrap();
    let fixture = work.path().join("fixture.toml");
    std::fs::write(
        &fixture,
        "driver_version = \"550.54.15\"\n\n[[devices]]\nname = \"NVIDIA L4\"\nuuid = \"GPU-l4-0\"\n\
         memory_total = 24152899584\nmemory_used = 1073741824\nutilization_gpu = 40\n\n\
         [[devices.processes]]\npid = 4242\nused_memory = 536870912\nname = \"stray\"\n",
    )
    .unwrap();
    let server = Server::start_nvml(work.path(), driver.path(), &fixture, &["--open-reads"]);
    let claim = server.cli(&["claim", "--memory", "1GiB", "--project", "vision"]);
    assert!(
        claim.status.success(),
        "{}",
        String::from_utf8_lossy(&claim.stderr)
    );
    let rules = std::fs::read_to_string(assets().join("prometheus-alerts.yml")).unwrap();
    let mut used = metric_names(&rules);
    for e in dashboard_exprs() {
        used.extend(metric_names(&e));
    }
    assert!(used.len() > 10, "{used:?}");
    // Telemetry arrives with the sampler's next round: poll, with a generous deadline.
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let exported = exported_names(&server.url).await;
        let missing: Vec<&String> = used.iter().filter(|n| !exported.contains(*n)).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "used but not exported: {missing:?}\nexported: {exported:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
