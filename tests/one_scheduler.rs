//! One scheduler per host, on the real binary over the fake NVML library: whichever of the
//! full-screen console and `gpuboard serve` starts first holds the host's GPUs, the other
//! never schedules them too (a serve exits naming the holder; a console attaches, read-only
//! when the serve's store failed). And a serve that cannot start leaves nothing behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::text;
use crate::common::tmux;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{Server, demo_fleet, fixture, gpuboard};
use serde_json::{Value, json};
use tmux::Session;

/// A fake host: its NVML (the fake library and a fixture of three GPUs), its scheduler
/// lock, a HOME with no config, and a default address where nothing answers (a real
/// `gpuboard serve` on 7420 is not this host's).
struct Host {
    tmp: tempfile::TempDir,
    drivers: tempfile::TempDir,
    default_endpoint: String,
}

impl Host {
    fn new() -> Host {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("home/config")).unwrap();
        Host {
            tmp,
            drivers: common::fake_driver_dir(),
            default_endpoint: format!("http://127.0.0.1:{}", common::free_port()),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn lock(&self) -> PathBuf {
        self.path("scheduler.lock")
    }

    /// The environment of every gpuboard process on this host.
    fn env(&self) -> Vec<(&'static str, PathBuf)> {
        let home = self.path("home");
        vec![
            ("LD_LIBRARY_PATH", self.drivers.path().to_path_buf()),
            ("GPUBOARD_FAKE_NVML_FIXTURE", fixture("mixed.toml")),
            ("GPUBOARD_HOST_LOCK", self.lock()),
            ("XDG_CONFIG_HOME", home.join("config")),
            ("HOME", home),
            (
                "GPUBOARD_LOCAL_ENDPOINT",
                PathBuf::from(&self.default_endpoint),
            ),
        ]
    }

    /// `env`'s arguments for a shell line (the console in tmux).
    fn env_line(&self) -> String {
        use std::fmt::Write as _;
        self.env().iter().fold(String::new(), |mut line, (k, v)| {
            let _ = write!(line, "{k}={} ", v.display());
            line
        })
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(gpuboard());
        cmd.envs(self.env())
            .env_remove("GPUBOARD_TOKEN")
            .env_remove("GPUBOARD_DATA_DIR")
            .env_remove("GPUBOARD_NVML_LIBRARY");
        cmd
    }

    /// `gpuboard serve` of this host's GPUs (no inventory), kept running.
    fn serve(&self, dir: &Path) -> Server {
        let mut cmd = self.command();
        cmd.arg("serve");
        Server::spawn(cmd, dir, &[])
    }

    /// `gpuboard serve` of this host's GPUs that is expected to stop.
    fn serve_output(&self, dir: &Path, extra: &[&str]) -> Output {
        self.command()
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .args(extra)
            .output()
            .unwrap()
    }

    /// `gpuboard status --once --json` with no source, as the console sets up.
    fn status(&self, data_dir: &Path, token: Option<&str>) -> Output {
        let mut cmd = self.command();
        cmd.env("GPUBOARD_DATA_DIR", data_dir)
            .args(["status", "--once", "--json"]);
        if let Some(t) = token {
            cmd.env("GPUBOARD_TOKEN", t);
        }
        cmd.output().unwrap()
    }

    /// What the lock file says: the holder's pid and address.
    fn holder(&self) -> Option<(u32, String)> {
        let text = std::fs::read_to_string(self.lock()).ok()?;
        let v: Value = serde_json::from_str(&text).ok()?;
        Some((
            u32::try_from(v["pid"].as_u64()?).ok()?,
            v["address"].as_str()?.to_string(),
        ))
    }
}

/// The only source of a `status --json` document (printed also when it is down).
fn only_source(out: &Output) -> Value {
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sources = doc["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 1, "{doc:#}");
    sources[0].clone()
}

#[test]
fn a_console_first_keeps_a_later_serve_off_the_gpus() {
    let host = Host::new();
    let data = host.path("data");
    let script = format!(
        "env {}GPUBOARD_DATA_DIR={} {}; sleep 60",
        host.env_line(),
        data.display(),
        gpuboard().display()
    );
    let console = Session::start(120, 40, "one-sched", &script);
    console.wait_for("A100");
    let deadline = Instant::now() + Duration::from_secs(30);
    let (pid, address) = loop {
        if let Some(h) = host.holder() {
            break h;
        }
        assert!(Instant::now() < deadline, "the console never took the lock");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(address, "embedded");
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    assert_eq!(comm.trim(), "gpuboard");

    // A serve on the console's very data directory, and one on a fresh one: both refused,
    // naming the console, and neither leaves tokens or a database.
    let fresh = host.path("fresh");
    for dir in [&data, &fresh] {
        let out = host.serve_output(dir, &[]);
        assert!(!out.status.success(), "a second scheduler started");
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("scheduled by gpuboard pid {pid} (embedded)")),
            "{err}"
        );
        assert!(!dir.join("operator.token").exists(), "{}", dir.display());
        assert!(!dir.join("gpuboard.sqlite").exists(), "{}", dir.display());
    }
    assert!(
        !fresh.exists(),
        "nothing made for a serve that did not start"
    );
    // A second console cannot attach to an embedded scheduler, nor start its own.
    let out = host.status(&host.path("other"), None);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(&format!("pid {pid} (embedded)")),
        "{}",
        text(&out.stderr)
    );
    // Once the console quits, the GPUs are free for a serve.
    console.keys(&["q"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while host.holder().is_some_and(|(p, _)| p == pid)
        && std::fs::metadata(format!("/proc/{pid}")).is_ok()
    {
        assert!(Instant::now() < deadline, "the console never quit");
        std::thread::sleep(Duration::from_millis(100));
    }
    let serve = host.serve(&fresh);
    assert_eq!(
        host.holder().unwrap(),
        (serve.child.id(), serve.url.clone())
    );
}

#[test]
fn a_serve_first_is_attached_to_and_a_second_serve_refused() {
    let host = Host::new();
    let serve = host.serve(&host.path("serve"));
    assert_eq!(
        host.holder().unwrap(),
        (serve.child.id(), serve.url.clone())
    );
    // The console's data directory is another one: the host lock finds the serve, and the
    // serve's own data directory, whose token the console uses.
    let console_dir = host.path("console");
    let out = host.status(&console_dir, None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let src = only_source(&out);
    assert_eq!(src["kind"], "gpuboard", "{src:#}");
    assert_eq!(src["health"], "ok", "{src:#}");
    let note = src["note"].as_str().unwrap();
    assert!(
        note.contains(&format!("pid {}, {}", serve.child.id(), serve.url))
            && note.contains("scheduler.lock"),
        "{note}"
    );
    assert!(
        !console_dir.join("embedded").exists(),
        "no embedded scheduler"
    );
    // A second serve of the same GPUs is refused, naming the first.
    let out = host.serve_output(&host.path("second"), &[]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "scheduled by gpuboard pid {} ({})",
            serve.child.id(),
            serve.url
        )),
        "{err}"
    );
    assert!(!host.path("second").exists());
    // Serves of an inventory schedule no GPU of this host: they take no lock, and start
    // beside it and beside each other.
    let a = Server::spawn(inventory_serve(&host), &host.path("inv-a"), &[]);
    let b = Server::spawn(inventory_serve(&host), &host.path("inv-b"), &[]);
    assert_ne!(a.url, b.url);
    assert_eq!(host.holder().unwrap().0, serve.child.id());
}

fn inventory_serve(host: &Host) -> Command {
    let mut cmd = host.command();
    cmd.arg("serve").arg("--inventory").arg(demo_fleet());
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serve_whose_store_failed_is_attached_read_only() {
    use std::os::unix::process::CommandExt as _;
    let host = Host::new();
    // Files the serve writes may not grow past 160 KiB: its disk is "full" there.
    let mut cmd = host.command();
    cmd.arg("serve");
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
    let serve = Server::spawn(cmd, &host.path("serve"), &[]);
    let token = serve.operator_token();
    let http = common::http();
    for n in 0.. {
        let r = http
            .post(format!("{}/v1/claims", serve.url))
            .bearer_auth(&token)
            .json(&json!({"gpu_memory": "1Mi"}))
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            201 => {}
            503 => break,
            other => panic!("unexpected {other}: {}", r.text().await.unwrap()),
        }
        assert!(n < 5000, "the file-size limit never hit");
    }
    let health = http.get(format!("{}/healthz", serve.url)).send().await;
    assert_eq!(health.unwrap().status(), 503);

    let console_dir = host.path("console");
    let src = only_source(&host.status(&console_dir, Some(&token)));
    assert_eq!(src["kind"], "gpuboard", "{src:#}");
    // It answers that its store failed: shown as such, not as an empty world.
    let error = src["error"].as_str().unwrap_or_default();
    assert!(error.contains("writing state failed"), "{src:#}");
    let note = src["note"].as_str().unwrap();
    assert!(
        note.starts_with(
            "attached read-only: the local serve's store failed: writing state failed"
        ),
        "{note}"
    );
    assert!(
        !console_dir.join("embedded").exists(),
        "no embedded scheduler"
    );
    // On screen, in the full-screen console: read-only, and why.
    let console = Session::start(
        160,
        40,
        "one-sched-failed",
        &format!(
            "env {}GPUBOARD_DATA_DIR={} GPUBOARD_TOKEN={token} {}; sleep 60",
            host.env_line(),
            console_dir.display(),
            gpuboard().display()
        ),
    );
    let screen = console.wait_for("attached read-only: the local serve's store failed");
    assert!(screen.contains("READ-ONLY"), "{screen}");
    assert!(
        !console_dir.join("embedded").exists(),
        "no embedded scheduler"
    );
}

#[test]
fn a_serve_that_cannot_start_leaves_no_data_directory() {
    let host = Host::new();
    let running = Server::start(&host.path("running"), &demo_fleet(), &[]);
    let port = running.url.rsplit(':').next().unwrap().to_string();
    // The port is in use.
    let fresh = host.path("fresh");
    let out = host
        .command()
        .args(["serve", "--inventory"])
        .arg(demo_fleet())
        .args(["--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(&fresh)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("cannot listen"),
        "{}",
        text(&out.stderr)
    );
    assert!(!fresh.exists(), "made {}", fresh.display());
    // A failure after the directory was made (a certificate file that is not there):
    // what was made is removed.
    let missing = host.path("missing.pem");
    let out = host
        .command()
        .args(["serve", "--inventory"])
        .arg(demo_fleet())
        .args(["--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&missing)
        .arg("--tls-key")
        .arg(&missing)
        .arg("--data-dir")
        .arg(&fresh)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("missing.pem"),
        "{}",
        text(&out.stderr)
    );
    assert!(!fresh.exists(), "left {}", fresh.display());
    // A directory that was there before stays, whatever fails.
    let kept = host.path("kept");
    std::fs::create_dir(&kept).unwrap();
    let out = host
        .command()
        .args(["serve", "--inventory"])
        .arg(demo_fleet())
        .args(["--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(&kept)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(kept.exists());
    assert_eq!(
        std::fs::read_dir(&kept).unwrap().count(),
        0,
        "nothing made in it"
    );
}
