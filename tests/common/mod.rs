//! Starting a real `gpuboard serve` on a free port of 127.0.0.1, for the integration tests.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The demo fleet shipped in assets/.
pub fn demo_fleet() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/demo-fleet.toml")
}

/// A running `gpuboard serve`, killed when dropped.
pub struct Server {
    pub child: Child,
    /// `http://127.0.0.1:PORT`
    pub url: String,
    pub dir: PathBuf,
}

impl Server {
    /// Starts serve over `inventory` with state in `dir`, plus `extra` flags, and waits
    /// for it to print the address it bound.
    pub fn start(dir: &Path, inventory: &Path, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpuboard"))
            .arg("serve")
            .arg("--inventory")
            .arg(inventory)
            .arg("--data-dir")
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gpuboard serve");
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        let Some(url) = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .map(str::to_string)
        else {
            let _ = child.kill();
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("serve did not start: {line}{err}");
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            let _ = out.read_to_string(&mut sink);
        });
        Server {
            child,
            url,
            dir: dir.to_path_buf(),
        }
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
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(20))
        .build()
        .unwrap()
}
