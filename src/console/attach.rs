//! How the console reaches endpoints: the token and TLS trust of each (like the CLI), and,
//! with no source given, the `gpuboard serve` already running on this host, so the console
//! never opens a second, empty world beside it.
//!
//! The local endpoint is found through the data directory's `serve.lock` (JSON `{"pid",
//! "address"}`, written by the serving process), else by the default address answering
//! `/healthz`. Only when neither answers does the embedded scheduler run.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::client::TlsTrust;
use crate::endpoint::{auth, tls};
use crate::wire::{default_endpoint, paths};

/// The file a running `gpuboard serve` keeps in its data directory.
pub const SERVE_LOCK_FILE: &str = "serve.lock";
/// How long the probe of a local endpoint waits.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Where credentials and trust come from, besides each endpoint's own settings.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    /// `--token-file`.
    pub token_file: Option<PathBuf>,
    /// `GPUBOARD_TOKEN`.
    pub env_token: Option<String>,
    /// The data directory (`--data-dir`, `GPUBOARD_DATA_DIR`, else the default).
    pub data_dir: PathBuf,
    /// The config's `token_file`.
    pub config_token_file: Option<PathBuf>,
    /// `--tls-fingerprint`, else the config's.
    pub fingerprint: Option<String>,
    /// `--tls-ca`, else the config's.
    pub ca_file: Option<PathBuf>,
}

impl Credentials {
    /// The token for the endpoint at `url`: `--token-file`, `GPUBOARD_TOKEN`, the data
    /// directory's operator.token when the endpoint is on this host, the config's
    /// `token_file`.
    pub fn token(&self, url: &str) -> anyhow::Result<Option<String>> {
        Ok(auth::client_token(&auth::TokenSources {
            token_file: self.token_file.as_deref(),
            env: self.env_token.clone(),
            data_dir: Some(&self.data_dir),
            local: is_local(url),
            config_file: self.config_token_file.as_deref(),
        })?)
    }

    /// How to trust `url` when it is https: the endpoint's own settings, else the flags and
    /// config, else, on this host, the data directory's certificate.
    pub fn trust(&self, url: &str, own: &TlsTrust) -> TlsTrust {
        if !own.is_empty() {
            return own.clone();
        }
        let mut t = TlsTrust {
            fingerprint: self.fingerprint.clone(),
            ca_file: self.ca_file.clone(),
        };
        if t.is_empty() && is_local(url) {
            t.fingerprint = tls::local_fingerprint(&self.data_dir);
        }
        t
    }
}

/// Whether `url`'s host is this host.
pub fn is_local(url: &str) -> bool {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(auth::is_local_host))
        .unwrap_or(false)
}

/// The content of `serve.lock`.
#[derive(Debug, Deserialize)]
struct ServeLock {
    pid: u32,
    address: String,
}

/// The endpoint running on this host, if one answers: its URL and how it was found.
pub fn local_serve(data_dir: &Path) -> Option<(String, String)> {
    if let Some(lock) = read_lock(data_dir)
        && alive(lock.pid)
        && answers(&lock.address)
    {
        let note = format!(
            "attached to the gpuboard serve running here (pid {}, {}), found through {}",
            lock.pid,
            lock.address,
            data_dir.join(SERVE_LOCK_FILE).display()
        );
        return Some((lock.address, note));
    }
    let url = default_endpoint();
    answers(&url).then(|| {
        let note = format!(
            "attached to the gpuboard serve answering at {url} on this host (the embedded \
             scheduler is not started while an endpoint runs here)"
        );
        (url, note)
    })
}

fn read_lock(dir: &Path) -> Option<ServeLock> {
    let text = std::fs::read_to_string(dir.join(SERVE_LOCK_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    pid > 0 && unsafe { libc::kill(pid, 0) } == 0
}

/// Whether `url` answers `/healthz` with 200 within the probe timeout. An https address
/// (only read from `serve.lock`, which the endpoint wrote) counts when its port accepts.
fn answers(url: &str) -> bool {
    let Ok(u) = reqwest::Url::parse(url) else {
        return false;
    };
    let (Some(host), Some(port)) = (u.host_str(), u.port_or_known_default()) else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let Some(addr) = (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.find(SocketAddr::is_ipv4).or_else(|| a.next()))
    else {
        return false;
    };
    let Ok(mut sock) = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT) else {
        return false;
    };
    if u.scheme() == "https" {
        return true;
    }
    let _ = sock.set_read_timeout(Some(PROBE_TIMEOUT));
    let _ = sock.set_write_timeout(Some(PROBE_TIMEOUT));
    let ask = format!(
        "GET {} HTTP/1.1\r\nhost: {host}:{port}\r\nconnection: close\r\n\r\n",
        paths::HEALTHZ
    );
    if sock.write_all(ask.as_bytes()).is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let _ = sock.take(4096).read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.starts_with("HTTP/1.1 200") && text.ends_with("ok\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_of_a_dead_process_or_garbage_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_lock(dir.path()).is_none());
        std::fs::write(dir.path().join(SERVE_LOCK_FILE), "not json").unwrap();
        assert!(read_lock(dir.path()).is_none());
        std::fs::write(
            dir.path().join(SERVE_LOCK_FILE),
            r#"{"pid": 4000000, "address": "http://127.0.0.1:1"}"#,
        )
        .unwrap();
        let lock = read_lock(dir.path()).unwrap();
        assert!(!alive(lock.pid));
        assert!(alive(std::process::id()));
        assert!(!answers("http://127.0.0.1:1"));
        assert!(!answers("not a url"));
    }
}
