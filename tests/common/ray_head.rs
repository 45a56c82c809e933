//! A real Ray 2.60 head on 127.0.0.1 for the Ray source and engine-action tests: four fake
//! GPUs, token auth, every port chosen free, a unique temp dir marking its processes. It
//! measures the memory of its processes on request, and is stopped with every process it
//! started, by pid, when dropped.
//!
//! Needs the virtual environment scripts/test installs (`ray[default]==2.60.0`), at
//! $`GPUBOARD_RAY_VENV` or ~/.cache/gpuboard/venv-ray-2.60.0.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Stopper, free_port};

/// Ray's auth token in the test.
pub const TOKEN: &str = "6770750b6f617264726179746f6b656e";

/// The Ray virtual environment (`GPUBOARD_RAY_VENV`, else the one scripts/test makes).
pub fn venv() -> PathBuf {
    let dir = std::env::var_os("GPUBOARD_RAY_VENV").map_or_else(
        || {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            Path::new(&home).join(".cache/gpuboard/venv-ray-2.60.0")
        },
        PathBuf::from,
    );
    assert!(
        dir.join("bin/ray").is_file(),
        "no Ray at {}: run scripts/test (it installs ray[default]==2.60.0 there), or set \
         GPUBOARD_RAY_VENV, or GPUBOARD_SKIP_PEERS=ray to skip this test",
        dir.display()
    );
    dir
}

/// Sets the environment every Ray process of the tests runs with: token auth on, no
/// usage stats.
pub fn ray_env(cmd: &mut Command) -> &mut Command {
    cmd.env("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        .env("RAY_AUTH_MODE", "token")
        .env("RAY_AUTH_TOKEN", TOKEN)
        .env("RAY_USAGE_STATS_ENABLED", "0")
}

/// Processes whose command line mentions `marker` (a head's unique temp dir): Ray's daemons
/// and workers of that head, and nothing else.
pub fn pids_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmd).contains(marker) && pid != std::process::id() as i32 {
            out.push(pid);
        }
    }
    out
}

/// `root` and every process below it (by parent pid).
fn descendants(root: i32) -> Vec<i32> {
    let mut parent: Vec<(i32, i32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The command name is in parentheses and may hold spaces: read after the last ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) else {
            continue;
        };
        parent.push((pid, ppid));
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// A `Key:  N kB` line of a /proc file, in KiB (0 when unreadable).
fn proc_kib(pid: i32, file: &str, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// What a head's processes hold in memory, summed over them.
pub struct Memory {
    /// How many processes were counted.
    pub processes: usize,
    /// Resident set, MiB (shared pages counted once per process).
    pub rss_mib: u64,
    /// Proportional set, MiB (shared pages split between their processes).
    pub pss_mib: u64,
}

/// The running head. Dropping it stops it: `ray start --block` takes its daemons down on
/// SIGTERM; whatever of ours survives that (workers mid-start) is killed by pid.
pub struct Head {
    start: Stopper,
    marker: String,
    /// Its temp dir (the marker).
    pub tmp: tempfile::TempDir,
    /// The dashboard, `http://127.0.0.1:PORT`.
    pub url: String,
    /// The GCS port, where drivers connect (`127.0.0.1:PORT`).
    pub gcs: u16,
    _turn: crate::common::PeerTurn,
}

impl Drop for Head {
    fn drop(&mut self) {
        // Note every process of ours first: once `ray start` is gone its children are
        // reparented and no longer below it.
        let mut ours = descendants(i32::try_from(self.start.pid()).unwrap_or(0));
        ours.extend(pids_with(&self.marker));
        self.start.stop();
        let alive = |pid: &i32| Path::new(&format!("/proc/{pid}")).exists();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut left: Vec<i32> = ours.iter().copied().filter(alive).collect();
            left.extend(pids_with(&self.marker));
            if left.is_empty() || Instant::now() > deadline + Duration::from_secs(5) {
                return;
            }
            let sig = if Instant::now() > deadline {
                libc::SIGKILL
            } else {
                libc::SIGTERM
            };
            for pid in left {
                // SAFETY: signalling processes this test started (its head's tree).
                unsafe { libc::kill(pid, sig) };
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Head {
    /// Starts the head with four GPUs; returns once `ray start` runs (the dashboard may
    /// still be coming up).
    pub fn start() -> Head {
        Head::start_with(&[])
    }

    /// As [`Head::start`], with `extra` arguments to `ray start` (custom resources).
    pub fn start_with(extra: &[&str]) -> Head {
        let turn = crate::common::heavy_peer_turn();
        let venv = venv();
        let tmp = tempfile::Builder::new()
            .prefix("gpbray")
            .tempdir_in("/tmp")
            .unwrap();
        let marker = tmp.path().to_string_lossy().to_string();
        let (gcs, dashboard) = (free_port(), free_port());
        let log = std::fs::File::create(tmp.path().join("ray-start.log")).unwrap();
        let child = ray_env(&mut Command::new(venv.join("bin/ray")))
            .args(["start", "--head", "--block", "--num-gpus=4", "--num-cpus=2"])
            .args(extra)
            .args(["--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1"])
            .arg(format!("--port={gcs}"))
            .arg(format!("--dashboard-port={dashboard}"))
            .arg(format!("--ray-client-server-port={}", free_port()))
            .arg(format!("--dashboard-agent-listen-port={}", free_port()))
            .arg(format!("--metrics-export-port={}", free_port()))
            .arg("--include-dashboard=true")
            .arg("--disable-usage-stats")
            .arg(format!("--temp-dir={marker}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        Head {
            start: Stopper {
                child,
                name: "ray start",
            },
            marker,
            tmp,
            url: format!("http://127.0.0.1:{dashboard}"),
            gcs,
            _turn: turn,
        }
    }

    /// `ray start`'s log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.tmp.path().join("ray-start.log")).unwrap_or_default()
    }

    /// How `ray start` ended, if it has.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.start.child.try_wait().unwrap()
    }

    /// The string in the command line of every Ray process of this head (its temp dir),
    /// for [`pids_with`] once the head is gone.
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// The memory of every process of this head, and of `also` (other processes this test
    /// started, with their children).
    pub fn memory(&self, also: &[u32]) -> Memory {
        let mut pids = pids_with(&self.marker);
        for root in std::iter::once(self.start.pid()).chain(also.iter().copied()) {
            pids.extend(descendants(i32::try_from(root).unwrap()));
        }
        pids.sort_unstable();
        pids.dedup();
        let sum_mib = |file: &str, key: &str| {
            pids.iter().map(|&p| proc_kib(p, file, key)).sum::<u64>() / 1024
        };
        Memory {
            processes: pids.len(),
            rss_mib: sum_mib("status", "VmRSS:"),
            pss_mib: sum_mib("smaps_rollup", "Pss:"),
        }
    }
}
