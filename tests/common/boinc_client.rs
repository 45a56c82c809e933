//! A real `boinc` client on 127.0.0.1 for the engine-action tests, started as
//! `tests/boinc_source.rs` starts its own (own data directory, GUI RPC password, no GPUs,
//! GUI RPC bound to 127.0.0.1), attached to a project of our own whose scheduler never has
//! work and asks for an hour's quiet. Stopped by pid when dropped.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::{Stopper, free_port};

/// The GUI RPC password of the test client.
pub const PASSWORD: &str = "gpuboard-engine-actions";

/// A running client attached to the no-work project.
pub struct Client {
    _boinc: Stopper,
    /// `127.0.0.1:PORT` of its GUI RPC.
    pub addr: String,
    /// Its data directory (holds `gui_rpc_auth.cfg`).
    pub dir: tempfile::TempDir,
    /// The project's master URL.
    pub project_url: String,
}

impl Client {
    /// The password file.
    pub fn password_file(&self) -> PathBuf {
        self.dir.path().join("gui_rpc_auth.cfg")
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

    /// Starts the client and attaches it; waits until the project has a name.
    pub async fn start() -> Client {
        assert!(
            Path::new("/usr/bin/boinc").is_file(),
            "no /usr/bin/boinc: run scripts/test (it installs Debian's boinc-client), or set \
             GPUBOARD_SKIP_PEERS=boinc"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("gui_rpc_auth.cfg"), format!("{PASSWORD}\n")).unwrap();
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("client.log")).unwrap();
        let child = Command::new("/usr/bin/boinc")
            .arg("--dir")
            .arg(dir.path())
            .args(["--gui_rpc_port", &port.to_string()])
            .args(["--skip_cpu_benchmarks", "--no_gpus"])
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
        let project_url = no_work_project().await;
        let c = Client {
            _boinc: boinc,
            addr,
            dir,
            project_url,
        };
        c.boinccmd(&["--project_attach", &c.project_url, "0123456789abcdef"]);
        let deadline = Instant::now() + Duration::from_mins(1);
        while !c
            .boinccmd(&["--get_project_status"])
            .contains("gpuboard test project")
        {
            assert!(
                Instant::now() < deadline,
                "the project got no name; log: {}",
                std::fs::read_to_string(c.dir.path().join("client.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        c
    }
}

/// A project whose master page names its scheduler, which answers every request with no
/// work and a request delay of an hour. Returns the master URL.
async fn no_work_project() -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/", l.local_addr().unwrap());
    let b = base.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = l.accept().await {
            let base = b.clone();
            tokio::spawn(async move {
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
                let body = if head.starts_with("post") {
                    format!(
                        "<scheduler_reply>\n<scheduler_version>720</scheduler_version>\n\
                         <project_name>gpuboard test project</project_name>\n\
                         <master_url>{base}</master_url>\n<request_delay>3600</request_delay>\n\
                         <message priority=\"low\">No work available</message>\n</scheduler_reply>\n"
                    )
                } else {
                    format!(
                        "<html><head><title>gpuboard test</title></head><body>\
                         <scheduler>{base}cgi</scheduler></body></html>"
                    )
                };
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    base
}
