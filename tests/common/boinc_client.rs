//! A real `boinc` client on 127.0.0.1 for the tests (own data directory, GUI RPC password,
//! GUI RPC bound to 127.0.0.1: no `--allow_remote_gui_rpc`), and a BOINC project of our own
//! on 127.0.0.1 whose scheduler hands out a given number of tasks, then none. A client with
//! work runs them for real: the project's app is `tests/fixtures/boinc/app` (the anonymous
//! platform, so nothing needs signing) on two GPUs of a custom coprocessor type
//! `gpuboard_gpu` declared in `cc_config.xml`. Everything is stopped by pid when dropped.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::{Stopper, fixture, free_port};

/// The GUI RPC password of the test client.
pub const PASSWORD: &str = "gpuboard-engine-actions";

/// The project's name, as its scheduler gives it.
pub const PROJECT_NAME: &str = "gpuboard test project";

/// The custom coprocessor type of the client with work (`tests/fixtures/boinc/app`).
pub const GPU_TYPE: &str = "gpuboard_gpu";

/// A project of our own: a master page naming the scheduler, and the scheduler.
pub struct Project {
    /// The master URL.
    pub url: String,
    /// Scheduler requests answered so far.
    pub posts: Arc<AtomicUsize>,
    /// The `request_delay` (seconds) of the next replies.
    pub delay: Arc<AtomicU64>,
    /// Tasks still to hand out: all of them go in the next scheduler reply.
    pub work: Arc<AtomicUsize>,
}

impl Project {
    /// Serves the project on 127.0.0.1 until the test's runtime ends.
    pub async fn serve(delay_s: u64, tasks: usize) -> Project {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let p = Project {
            url: format!("http://{}/", l.local_addr().unwrap()),
            posts: Arc::new(AtomicUsize::new(0)),
            delay: Arc::new(AtomicU64::new(delay_s)),
            work: Arc::new(AtomicUsize::new(tasks)),
        };
        let (base, posts, delay, work) = (
            p.url.clone(),
            p.posts.clone(),
            p.delay.clone(),
            p.work.clone(),
        );
        let next_task = Arc::new(AtomicUsize::new(1));
        tokio::spawn(async move {
            while let Ok((sock, _)) = l.accept().await {
                let (base, posts, delay, work, next) = (
                    base.clone(),
                    posts.clone(),
                    delay.clone(),
                    work.clone(),
                    next_task.clone(),
                );
                tokio::spawn(async move {
                    answer(sock, |post| {
                        if !post {
                            return format!(
                                "<html><head><title>gpuboard test</title></head><body>\
                                 <scheduler>{base}cgi</scheduler></body></html>"
                            );
                        }
                        posts.fetch_add(1, Ordering::SeqCst);
                        let n = work.swap(0, Ordering::SeqCst);
                        let first = next.fetch_add(n, Ordering::SeqCst);
                        let tasks: String = (first..first + n).map(task_xml).collect();
                        let message = if n == 0 {
                            "<message priority=\"low\">No work available</message>\n"
                        } else {
                            ""
                        };
                        format!(
                            "<scheduler_reply>\n<scheduler_version>720</scheduler_version>\n\
                             <project_name>{PROJECT_NAME}</project_name>\n\
                             <master_url>{base}</master_url>\n\
                             <request_delay>{}</request_delay>\n{message}{tasks}</scheduler_reply>\n",
                            delay.load(Ordering::SeqCst)
                        )
                    })
                    .await;
                });
            }
        });
        p
    }
}

/// The name of the `n`th task the project hands out.
pub fn task_name(n: usize) -> String {
    format!("gpuboard_wu_{n}_0")
}

/// A workunit and its one result (task) for the app of `tests/fixtures/boinc/app`, due in a
/// day. No input or output files: the app reads and writes nothing.
fn task_xml(n: usize) -> String {
    let deadline = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 86_400;
    format!(
        "<workunit>\n<name>gpuboard_wu_{n}</name>\n<app_name>idle</app_name>\n\
         <version_num>100</version_num>\n<rsc_fpops_est>1e12</rsc_fpops_est>\n\
         <rsc_fpops_bound>1e16</rsc_fpops_bound>\n<rsc_memory_bound>100000000</rsc_memory_bound>\n\
         <rsc_disk_bound>100000000</rsc_disk_bound>\n</workunit>\n\
         <result>\n<name>{}</name>\n<wu_name>gpuboard_wu_{n}</wu_name>\n\
         <report_deadline>{deadline}</report_deadline>\n<version_num>100</version_num>\n</result>\n",
        task_name(n)
    )
}

/// Reads one HTTP request and answers it with `body(is_post)`, then closes.
async fn answer(mut sock: tokio::net::TcpStream, body: impl FnOnce(bool) -> String) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    if head.contains("expect: 100-continue") {
        let _ = sock.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
    }
    while buf.len() < head_end + length {
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = body(head.starts_with("post"));
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = sock.write_all(reply.as_bytes()).await;
    let _ = sock.shutdown().await;
}

/// A running client.
pub struct Client {
    boinc: Stopper,
    /// `127.0.0.1:PORT` of its GUI RPC.
    pub addr: String,
    /// Its data directory (holds `gui_rpc_auth.cfg` and `client.log`).
    pub dir: tempfile::TempDir,
    /// The project it is attached to, once attached.
    pub project: Option<Project>,
}

impl Client {
    /// The password file.
    pub fn password_file(&self) -> PathBuf {
        self.dir.path().join("gui_rpc_auth.cfg")
    }

    /// The attached project's master URL.
    pub fn project_url(&self) -> &str {
        &self.project.as_ref().expect("attached to a project").url
    }

    /// The client's own log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("client.log")).unwrap_or_default()
    }

    /// Runs boinccmd against the client and returns its output.
    pub fn boinccmd(&self, args: &[&str]) -> String {
        let out = Command::new("boinccmd")
            .args(["--host", &self.addr, "--passwd", PASSWORD])
            .args(args)
            .output()
            .expect("run boinccmd (Debian's boinc-client)");
        assert!(
            out.status.success(),
            "boinccmd {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts a client with no project and no GPUs.
    pub async fn launch() -> Client {
        Client::launch_in(tempfile::tempdir().unwrap(), &["--no_gpus"]).await
    }

    /// Starts a client attached (as a user would, with boinccmd) to a project that never has
    /// work and asks for an hour's quiet; waits until the project has a name.
    pub async fn start() -> Client {
        let mut c = Client::launch().await;
        c.attach(Project::serve(3600, 0).await);
        c.wait_for("the project got no name", |c| {
            c.boinccmd(&["--get_project_status"]).contains(PROJECT_NAME)
        })
        .await;
        c
    }

    /// Starts a client attached to a project that hands out `tasks` tasks at its first
    /// scheduler request, with two `gpuboard_gpu` GPUs, one task on each; waits until the
    /// client runs `min(tasks, 2)` of them.
    pub async fn with_gpu_tasks(tasks: usize) -> Client {
        let project = Project::serve(3600, tasks).await;
        let dir = tempfile::tempdir().unwrap();
        // Attached before the start, so that the client reads the project's app_info.xml
        // (it does only when starting): the account file, then the project's directory.
        let host = project
            .url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .replace(':', "_");
        std::fs::write(
            dir.path().join(format!("account_{host}.xml")),
            format!(
                "<account>\n<master_url>{}</master_url>\n\
                 <authenticator>0123456789abcdef</authenticator>\n</account>\n",
                project.url
            ),
        )
        .unwrap();
        let app = fixture("boinc/app");
        let pdir = dir.path().join("projects").join(&host);
        std::fs::create_dir_all(&pdir).unwrap();
        for f in ["app_info.xml", "idle-app.pl"] {
            std::fs::copy(app.join(f), pdir.join(f)).unwrap();
        }
        for f in ["cc_config.xml", "global_prefs_override.xml"] {
            std::fs::copy(app.join(f), dir.path().join(f)).unwrap();
        }
        let mut c = Client::launch_in(dir, &[]).await;
        c.project = Some(project);
        let want = tasks.min(2);
        c.wait_for("the client ran no tasks", |c| {
            c.boinccmd(&["--get_tasks"])
                .matches("active_task_state: EXECUTING")
                .count()
                == want
        })
        .await;
        c
    }

    /// Attaches the client to `project` with boinccmd.
    pub fn attach(&mut self, project: Project) {
        self.boinccmd(&["--project_attach", &project.url, "0123456789abcdef"]);
        self.project = Some(project);
    }

    /// Polls `ok` every half second for up to a minute; panics with `what` and the log.
    pub async fn wait_for(&self, what: &str, ok: impl Fn(&Client) -> bool) {
        let deadline = Instant::now() + Duration::from_mins(1);
        while !ok(self) {
            assert!(Instant::now() < deadline, "{what}; log: {}", self.log());
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The pid of the client.
    pub fn pid(&self) -> u32 {
        self.boinc.pid()
    }

    async fn launch_in(dir: tempfile::TempDir, extra: &[&str]) -> Client {
        assert!(
            Path::new("/usr/bin/boinc").is_file(),
            "no /usr/bin/boinc: run scripts/test (it installs Debian's boinc-client), or set \
             GPUBOARD_SKIP_PEERS=boinc"
        );
        std::fs::write(dir.path().join("gui_rpc_auth.cfg"), format!("{PASSWORD}\n")).unwrap();
        // Every client computes and fetches work whatever else loads the machine: left to its
        // defaults it suspends above 25 % of non-BOINC CPU load, and then sets no backoff a
        // test could wait for.
        let prefs = dir.path().join("global_prefs_override.xml");
        if !prefs.exists() {
            std::fs::copy(
                fixture("boinc/app").join("global_prefs_override.xml"),
                prefs,
            )
            .unwrap();
        }
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("client.log")).unwrap();
        let child = Command::new("/usr/bin/boinc")
            .arg("--dir")
            .arg(dir.path())
            .args(["--gui_rpc_port", &port.to_string(), "--skip_cpu_benchmarks"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let boinc = Stopper {
            child,
            name: "boinc",
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(&addr).await.is_err() {
            assert!(Instant::now() < deadline, "boinc did not open {addr}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Client {
            boinc,
            addr,
            dir,
            project: None,
        }
    }
}
