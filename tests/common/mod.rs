//! Shared by the integration tests: a real `gpuboard serve` on a free port, the fake NVML
//! library, free ports, a tiny canned HTTP server, the `GPUBOARD_SKIP_PEERS` switch, and
//! processes stopped by pid.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The gpuboard binary under test.
pub fn gpuboard() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_gpuboard"))
}

/// Builds `tests/fake-nvml` (a no-op when up to date) and returns the library's path.
pub fn fake_nvml_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let out_dir = gpuboard().parent().unwrap().to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let mut build = Command::new(cargo);
        build.args(["build", "--quiet", "-p", "fake-nvml", "--manifest-path"]);
        build.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
        if out_dir.ends_with("release") {
            build.arg("--release");
        }
        let status = build
            .status()
            .expect("run cargo to build the fake NVML library");
        assert!(status.success(), "building tests/fake-nvml failed");
        let lib = out_dir.join("libfake_nvml.so");
        assert!(lib.exists(), "{} missing after the build", lib.display());
        lib
    })
}

/// A directory holding the fake as `libnvidia-ml.so.1`, for `LD_LIBRARY_PATH`.
pub fn fake_driver_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(fake_nvml_library(), dir.path().join("libnvidia-ml.so.1")).unwrap();
    dir
}

/// The fixture file path inside `tests/fixtures`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// This host's name as audit lines write it (`user@host`, `gpuboard::identity`).
#[allow(dead_code)]
pub fn host() -> String {
    gpuboard::identity::LocalUser::current().host
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether `peer` (`ray`, `prometheus`) is listed in `GPUBOARD_SKIP_PEERS`. Only an explicit
/// opt-out skips a real-peer test; a missing install otherwise fails it.
pub fn skip_peer(peer: &str) -> bool {
    std::env::var("GPUBOARD_SKIP_PEERS").is_ok_and(|v| v.split(',').any(|p| p.trim() == peer))
}

/// What the canned server answers for a path.
#[derive(Clone)]
pub enum Reply {
    /// Status, content type, body (Content-Length matches the body).
    Full(u16, &'static str, Vec<u8>),
    /// Headers promising `promised` bytes, then only `body`, then the connection closes.
    CutOff(Vec<u8>, usize),
    /// Accept, read the request, never answer.
    Silent,
}

/// Serves canned replies on 127.0.0.1 by request path (query ignored); `*` matches any
/// path. Returns the base URL. The server lives until the test's runtime ends.
pub async fn serve(routes: Vec<(&'static str, Reply)>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let routes: Arc<HashMap<&'static str, Reply>> = Arc::new(routes.into_iter().collect());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let routes = routes.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = 0;
                while !buf[..got].windows(4).any(|w| w == b"\r\n\r\n") && got < buf.len() {
                    match sock.read(&mut buf[got..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got += n,
                    }
                }
                let head = String::from_utf8_lossy(&buf[..got]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/");
                let path = path.split('?').next().unwrap_or(path);
                let reply = routes.get(path).or_else(|| routes.get("*")).cloned();
                let (status, ctype, body, promised) = match reply {
                    Some(Reply::Full(s, c, b)) => (s, c, b.clone(), b.len()),
                    Some(Reply::CutOff(b, n)) => (200, "application/json", b, n),
                    Some(Reply::Silent) => {
                        // Hold the connection open without answering.
                        tokio::time::sleep(std::time::Duration::from_hours(1)).await;
                        return;
                    }
                    None => (404, "text/plain", b"404: Not Found".to_vec(), 14),
                };
                let reason = match status {
                    200 => "OK",
                    401 => "Unauthorized",
                    403 => "Forbidden",
                    404 => "Not Found",
                    _ => "Other",
                };
                let header = format!(
                    "HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {promised}\r\nConnection: close\r\n\r\n"
                );
                let _ = sock.write_all(header.as_bytes()).await;
                let _ = sock.write_all(&body).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

/// A child process stopped (SIGTERM, then SIGKILL) by its pid when dropped.
pub struct Stopper {
    pub child: Child,
    pub name: &'static str,
}

impl Stopper {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the child: SIGTERM, a bounded wait, then SIGKILL.
    pub fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: signalling a child we spawned and have not reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Stopper {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The demo fleet shipped in assets/.
pub fn demo_fleet() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/demo-fleet.toml")
}

/// A running `gpuboard serve`, killed when dropped.
pub struct Server {
    pub child: Child,
    /// `http://127.0.0.1:PORT`, or `https://` with `--tls`.
    pub url: String,
    pub dir: PathBuf,
    /// The certificate's SHA-256 fingerprint serve prints when it serves https.
    pub fingerprint: Option<String>,
}

impl Server {
    /// Starts serve over `inventory` with state in `dir`, plus `extra` flags, and waits
    /// for it to print the address it bound.
    pub fn start(dir: &Path, inventory: &Path, extra: &[&str]) -> Server {
        Server::spawn(Server::command(inventory), dir, extra)
    }

    /// `gpuboard serve --inventory INVENTORY`, to adjust before [`Server::spawn`].
    pub fn command(inventory: &Path) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpuboard"));
        cmd.arg("serve").arg("--inventory").arg(inventory);
        cmd
    }

    /// Starts serve over the GPUs the fake NVML library reports from `fixture` (no
    /// inventory file), with state in `dir` and its host scheduler lock in there too (each
    /// test's fake host is its own).
    pub fn start_nvml(dir: &Path, driver_dir: &Path, fixture: &Path, extra: &[&str]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpuboard"));
        // The fixture's pids are this machine's: their owners are not read from its /proc.
        cmd.env("LD_LIBRARY_PATH", driver_dir)
            .env("GPUBOARD_FAKE_NVML_FIXTURE", fixture)
            .env("GPUBOARD_HOST_LOCK", dir.join("host.lock"))
            .env("GPUBOARD_HOST_PROC", dir.join("no-proc"))
            .arg("serve");
        Server::spawn(cmd, dir, extra)
    }

    /// Starts `cmd` (a `gpuboard serve` without `--data-dir` and `--listen`) with state in
    /// `dir`, plus `extra` flags; its stderr is kept in a pipe (`child.stderr`).
    pub fn spawn(cmd: Command, dir: &Path, extra: &[&str]) -> Server {
        Server::spawn_with_stderr(cmd, dir, extra, Stdio::piped())
    }

    /// As [`Server::spawn`], with serve's stderr going to `stderr`.
    pub fn spawn_with_stderr(
        mut cmd: Command,
        dir: &Path,
        extra: &[&str],
        stderr: Stdio,
    ) -> Server {
        let mut child = cmd
            .arg("--data-dir")
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start gpuboard serve");
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        let Some(url) = line
            .split_whitespace()
            .find(|w| w.starts_with("http://") || w.starts_with("https://"))
            .map(str::to_string)
        else {
            let _ = child.kill();
            let mut err = String::new();
            if let Some(mut piped) = child.stderr.take() {
                piped.read_to_string(&mut err).unwrap();
            }
            panic!("serve did not start: {line}{err}");
        };
        // With https, the next line gives the certificate's fingerprint (32 hex pairs).
        let mut fingerprint = None;
        if url.starts_with("https://") {
            let mut fp = String::new();
            out.read_line(&mut fp).unwrap();
            fingerprint = fp
                .split_whitespace()
                .find(|w| w.len() == 95 && w.contains(':'))
                .map(str::to_string);
            assert!(fingerprint.is_some(), "no fingerprint printed: {fp}");
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            let _ = out.read_to_string(&mut sink);
        });
        Server {
            child,
            url,
            dir: dir.to_path_buf(),
            fingerprint,
        }
    }

    /// Runs the CLI with `args` against this server (its URL and data directory; no token
    /// or endpoint from the environment).
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_gpuboard"))
            .args(args)
            .args(["--endpoint", &self.url, "--data-dir"])
            .arg(&self.dir)
            .env_remove("GPUBOARD_TOKEN")
            .env_remove("GPUBOARD_ENDPOINT")
            .output()
            .unwrap()
    }

    pub fn operator_token(&self) -> String {
        std::fs::read_to_string(self.dir.join("operator.token"))
            .unwrap()
            .trim()
            .to_string()
    }

    pub fn read_token(&self) -> String {
        std::fs::read_to_string(self.dir.join("read.token"))
            .unwrap()
            .trim()
            .to_string()
    }

    /// SIGKILL, and reap it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Still running?
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// An HTTP client for raw status and body checks.
pub fn http() -> reqwest::Client {
    gpuboard::client::install_crypto_provider();
    let mut builder = reqwest::Client::builder();
    // http:// only: skips loading the system's root certificates for every client.
    if let Some(tls) = gpuboard::client::http_only_tls() {
        builder = builder.tls_backend_preconfigured(tls);
    }
    builder
        .timeout(std::time::Duration::from_secs(20))
        .build()
        .unwrap()
}

/// A BOINC client as the console sees it, from captured GUI RPC replies (BOINC 7.20.5):
/// one project backed off on CPU and on NVIDIA, two A100s, a task running on device 1 and
/// one waiting. For the Fair share and GPUs views' snapshot tests.
pub fn boinc_snapshot() -> gpuboard::snapshot::Snapshot {
    let read = |n: &str| std::fs::read_to_string(fixture(&format!("boinc/{n}"))).unwrap();
    let answers = gpuboard::sources::boinc::BoincAnswers {
        state: read("state_gpu_edited.xml"),
        cc_status: read("cc_status_backoff.xml"),
    };
    gpuboard::sources::boinc::snapshot(
        &answers,
        "boinc-host",
        gpuboard::clock::Timestamp(1_795_317_020_000),
    )
    .unwrap()
}

/// A Slurm cluster as the console sees it, from captured slurmrestd answers (Slurm
/// 22.05.8): one node with four a100 GPUs and 16 shards, a job on GPUs 0-1, a job on three
/// shards of GPU 2, one job pending for resources. `draining` picks the capture taken with
/// the node set to DRAIN.
pub fn slurm_snapshot(draining: bool) -> gpuboard::snapshot::Snapshot {
    let read = |n: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(fixture(&format!("slurm/{n}"))).unwrap()).unwrap()
    };
    let answers = gpuboard::sources::slurm::SlurmAnswers {
        nodes: read(if draining {
            "nodes_draining.json"
        } else {
            "nodes.json"
        }),
        jobs: read("jobs.json"),
    };
    gpuboard::sources::slurm::snapshot(
        &answers,
        "slurm",
        gpuboard::clock::Timestamp(1_795_317_400_000),
    )
    .unwrap()
}

/// A peer source the tests poll for its snapshot (its own `fetch`, never "unchanged").
pub trait FetchSnapshot {
    /// The source's state now.
    fn snapshot(&self) -> impl std::future::Future<Output = gpuboard::snapshot::Snapshot>;
}

impl FetchSnapshot for gpuboard::sources::boinc::BoincSource {
    async fn snapshot(&self) -> gpuboard::snapshot::Snapshot {
        self.fetch().await.unwrap()
    }
}

impl FetchSnapshot for gpuboard::sources::slurm::SlurmSource {
    async fn snapshot(&self) -> gpuboard::snapshot::Snapshot {
        self.fetch().await.unwrap()
    }
}

impl<T: FetchSnapshot> FetchSnapshot for Arc<T> {
    async fn snapshot(&self) -> gpuboard::snapshot::Snapshot {
        self.as_ref().snapshot().await
    }
}

/// Fetches `source` until `ok` holds for its snapshot (engines apply some actions a moment
/// later, BOINC at its next scheduling pass), for at most a minute; panics with the last
/// snapshot's claims and devices.
pub async fn snapshot_until(
    source: &impl FetchSnapshot,
    what: &str,
    ok: impl Fn(&gpuboard::snapshot::Snapshot) -> bool,
) -> gpuboard::snapshot::Snapshot {
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    loop {
        let s = source.snapshot().await;
        if ok(&s) {
            return s;
        }
        let devices: Vec<_> = s.nodes.iter().flat_map(|n| &n.devices).collect();
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}: {:#?}\n{devices:#?}",
            s.claims
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

/// Writes `DIR/NODE.toml`, an inventory of one node `node` with `count` GPUs of one model,
/// and returns its path.
pub fn one_node_inventory(
    dir: &Path,
    node: &str,
    model: &str,
    memory: &str,
    count: u32,
) -> PathBuf {
    let path = dir.join(format!("{node}.toml"));
    std::fs::write(
        &path,
        format!(
            "[[nodes]]\nname = \"{node}\"\n[[nodes.gpus]]\nmodel = \"{model}\"\nmemory = \"{memory}\"\ncount = {count}\n"
        ),
    )
    .unwrap();
    path
}

/// A process's output as text (lossy: a test prints it, never parses bytes).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The stdout of a command that must have succeeded; its exit, stdout and stderr otherwise.
pub fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// One heavy peer (a Slurm cluster, a Ray head) at a time in the test binary: the tests of
/// every file share one process now, and two of these at once would share two cores. Held by
/// the peer's handle and given up when it is dropped, after its processes are stopped.
pub struct PeerTurn(());

static PEER_BUSY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Waits for the heavy-peer turn (see [`PeerTurn`]).
pub fn heavy_peer_turn() -> PeerTurn {
    use std::sync::atomic::Ordering;
    while PEER_BUSY
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    PeerTurn(())
}

impl Drop for PeerTurn {
    fn drop(&mut self) {
        PEER_BUSY.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// `gpuboard` with a HOME of its own (so no default config, cache or state is read) and
/// no token, endpoint, data directory, config or pin from the environment.
pub fn isolated_cli(home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpuboard"));
    cmd.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("GPUBOARD_CACHE_DIR", home.join("cache"));
    for var in [
        "GPUBOARD_TOKEN",
        "GPUBOARD_ENDPOINT",
        "GPUBOARD_DATA_DIR",
        "GPUBOARD_CONFIG",
        "GPUBOARD_TLS_FINGERPRINT",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Starts `gpuboard record ARGS` (`GPUBOARD_TEST_BIN` when set: a copy, safe from a shared
/// target directory's concurrent rebuilds), its history in `data`, its log in `log`, on a
/// free port: it runs until the answer is dropped.
pub fn start_record<S: AsRef<std::ffi::OsStr>>(args: &[S], data: &Path, log: &Path) -> Recorder {
    let bin = std::env::var_os("GPUBOARD_TEST_BIN")
        .map_or_else(|| gpuboard().to_path_buf(), PathBuf::from);
    let mut child = Command::new(bin)
        .arg("record")
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .args(["--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let stopper = Stopper {
        child,
        name: "gpuboard record",
    };
    let url = line
        .rsplit_once("serving ")
        .map(|(_, url)| url.trim().to_string())
        .filter(|u| u.starts_with("http://"))
        .unwrap_or_else(|| {
            panic!(
                "record did not start: {line}{}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        });
    Recorder {
        url,
        said: line,
        _stop: stopper,
    }
}

/// A running `gpuboard record`.
pub struct Recorder {
    /// The URL it serves its history on.
    pub url: String,
    /// Its first line on stdout (what it records, where).
    pub said: String,
    _stop: Stopper,
}

pub mod boinc_client;
pub mod console_fixtures;
pub mod fleet_map_fixtures;
pub mod flood;
pub mod foreign;
pub mod kmock;
pub mod ray_head;
pub mod relay;
pub mod scenario;
pub mod schema;
pub mod slurm_cluster;
pub mod sshd;
pub mod tmux;
