//! A Kubernetes API on 127.0.0.1 for the Kubernetes source's tests: kmock's emulator run by
//! `tests/peers/kmock_cluster.py` (which adds increasing resourceVersions, resumable watches,
//! `410 Gone`, bookmarks and control routes), on a free port, with a kubeconfig pointing
//! at it. Stopped by pid when dropped.
//!
//! Needs the virtual environment scripts/install-peers makes (`kmock==0.8`), at
//! $`GPUBOARD_KMOCK_VENV` or ~/.cache/gpuboard/venv-kmock-0.8.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::Stopper;

/// The kmock virtual environment.
pub fn venv() -> PathBuf {
    let dir = std::env::var_os("GPUBOARD_KMOCK_VENV").map_or_else(
        || {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            Path::new(&home).join(".cache/gpuboard/venv-kmock-0.8")
        },
        PathBuf::from,
    );
    assert!(
        dir.join("bin/python").is_file(),
        "no kmock at {}: run scripts/install-peers (it installs kmock==0.8 there), or set \
         GPUBOARD_KMOCK_VENV, or GPUBOARD_SKIP_PEERS=kmock to skip this test",
        dir.display()
    );
    dir
}

/// A running emulated cluster.
pub struct Cluster {
    process: Stopper,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Holds the kubeconfig.
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts the emulator with `args` (`--load FILE`, `--synthetic N P`, `--bookmark-s S`)
    /// and waits for its port.
    pub fn start(args: &[&str]) -> Cluster {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/kmock_cluster.py");
        let mut child = Command::new(venv().join("bin/python"))
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line
            .trim()
            .strip_prefix("PORT ")
            .unwrap_or_else(|| panic!("the kmock harness said `{line}`, not its port"))
            .parse()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("kubeconfig"),
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: kmock\nclusters:\n\
                 - name: kmock\n  cluster:\n    server: {url}\n\
                 - name: nowhere\n  cluster:\n    server: http://127.0.0.1:{}\n\
                 users:\n- name: tester\n  user: {{}}\ncontexts:\n\
                 - name: kmock\n  context:\n    cluster: kmock\n    user: tester\n\
                 - name: down\n  context:\n    cluster: nowhere\n    user: tester\n",
                crate::common::free_port()
            ),
        )
        .unwrap();
        Cluster {
            process: Stopper {
                child,
                name: "kmock_cluster.py",
            },
            url,
            dir,
        }
    }

    /// The fixture cluster of tests/corpus/kubernetes/cluster.
    pub fn fixtures(extra: &[&str]) -> Cluster {
        let at = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/kubernetes/cluster");
        let nodes = at.join("nodes.json").display().to_string();
        let pods = at.join("pods.json").display().to_string();
        let mut args = vec!["--load", &nodes, "--load", &pods];
        args.extend_from_slice(extra);
        Cluster::start(&args)
    }

    /// The kubeconfig: context `kmock` (current) reaches it, `down` a closed port.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// The emulator's pid.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// A control route: `drop-watches`, `expire` (with `{"delete": [[plural, ns, name]]}`).
    pub async fn control(&self, route: &str, body: Value) -> Value {
        gpuboard::client::install_crypto_provider();
        reqwest::Client::new()
            .post(format!("{}/gpuboard-harness/{route}", self.url))
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The harness's counters: lists, watches, gone (410s sent), bookmarks, rv.
    pub async fn stats(&self) -> Value {
        gpuboard::client::install_crypto_provider();
        reqwest::get(format!("{}/gpuboard-harness/stats", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Sends `body` to the Kubernetes API (`POST`, `PATCH` as a merge patch, `DELETE`).
    pub async fn api(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        gpuboard::client::install_crypto_provider();
        let mut req = reqwest::Client::new().request(method.clone(), format!("{}{path}", self.url));
        if let Some(b) = body {
            let kind = if method == reqwest::Method::PATCH {
                "application/merge-patch+json"
            } else {
                "application/json"
            };
            req = req.header("content-type", kind).body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "{path}: {status} {v}");
        v
    }
}
