//! How the console reaches endpoints: the token and TLS trust of each (like the CLI), and,
//! with no source given, the `gpuboard serve` already running on this host, so the console
//! never opens a second, empty world beside it.
//!
//! The local endpoint is found through the data directory's `serve.lock` (JSON `{"pid",
//! "address"}`, written by the serving process), else through the host's scheduler lock
//! (`endpoint::hostlock`), else by the default address answering `/healthz`. One whose
//! store failed counts too. Only when none is there does the embedded scheduler run, and
//! it takes the host lock itself, so a serve started later finds it.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::client::TlsTrust;
use crate::endpoint::{auth, hostlock, tls};
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

    /// These credentials for the serve of this host found at `local`: its own data
    /// directory's token and certificate when the host lock named one this user can read
    /// (a serve with another `--data-dir` than the console's), else these.
    #[must_use]
    pub fn for_local(&self, local: &LocalServe) -> Credentials {
        match &local.data_dir {
            Some(dir) if std::fs::File::open(auth::default_token_path(dir)).is_ok() => {
                Credentials {
                    data_dir: dir.clone(),
                    ..self.clone()
                }
            }
            _ => self.clone(),
        }
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

/// The endpoint of this host the console attaches to instead of starting a scheduler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalServe {
    /// Its URL.
    pub url: String,
    /// How it was found (shown beside the source), and why read-only when it is.
    pub note: String,
    /// Its store failed: it refuses every change, so the console offers none.
    pub read_only: bool,
    /// Its data directory, when the host lock named it (its token and certificate).
    pub data_dir: Option<PathBuf>,
}

/// What a `/healthz` probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Health {
    /// 200 `ok`.
    Ok,
    /// 503: the endpoint is up but its store failed (the reason it gives).
    Failed(String),
    /// Nothing answered as an endpoint does.
    Silent,
}

/// The environment variable naming the address the console probes for this host's serve
/// when no lock names one (default `http://127.0.0.1:7420`).
pub const LOCAL_ENDPOINT_ENV: &str = "GPUBOARD_LOCAL_ENDPOINT";

/// The endpoint running on this host, if there is one: the serve the data directory's
/// `serve.lock` names, else the holder of this host's scheduler lock, else whatever
/// answers at the default address (`GPUBOARD_LOCAL_ENDPOINT` when set, e.g. for a host whose
/// serve listens elsewhere, or a test that must not meet one on 7420). One whose store failed still counts (attached
/// read-only, saying so): a second scheduler beside it would book its GPUs twice. So does
/// a serve holding the host lock that does not answer yet.
pub fn local_serve(data_dir: &Path) -> Option<LocalServe> {
    let host_lock = hostlock::default_path();
    let mut found: Vec<(String, String, Option<PathBuf>)> = Vec::new();
    if let Some(lock) = read_lock(data_dir).filter(|l| alive(l.pid)) {
        found.push((
            lock.address.clone(),
            format!(
                "the gpuboard serve running here (pid {}, {}), found through {}",
                lock.pid,
                lock.address,
                data_dir.join(SERVE_LOCK_FILE).display()
            ),
            None,
        ));
    }
    let holder = hostlock::holder(&host_lock).filter(|o| o.address.starts_with("http"));
    if let Some(o) = &holder {
        found.push((
            o.address.clone(),
            format!(
                "the gpuboard serve scheduling this host's GPUs (pid {}, {}), found through {}",
                o.pid,
                o.address,
                host_lock.display()
            ),
            o.data_dir.clone(),
        ));
    }
    let url = std::env::var(LOCAL_ENDPOINT_ENV)
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(default_endpoint);
    found.push((
        url.clone(),
        format!(
            "the gpuboard serve answering at {url} on this host (the embedded scheduler is \
             not started while an endpoint runs here)"
        ),
        None,
    ));
    for (url, how, data_dir) in found {
        match health(&url) {
            Health::Ok => {
                return Some(LocalServe {
                    url,
                    note: format!("attached to {how}"),
                    read_only: false,
                    data_dir,
                });
            }
            Health::Failed(why) => {
                return Some(LocalServe {
                    url,
                    note: format!(
                        "attached read-only: the local serve's store failed: {why} ({how})"
                    ),
                    read_only: true,
                    data_dir,
                });
            }
            Health::Silent => {}
        }
    }
    holder.map(|o| LocalServe {
        note: format!(
            "attached to the gpuboard serve holding this host's GPUs (pid {}, {}, through {}), \
             which does not answer /healthz yet",
            o.pid,
            o.address,
            host_lock.display()
        ),
        url: o.address,
        read_only: false,
        data_dir: o.data_dir,
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

/// What `url` answers to `/healthz` within the probe timeout. An https address (only read
/// from a lock file, which the endpoint wrote) counts as up when its port accepts.
fn health(url: &str) -> Health {
    let Ok(u) = reqwest::Url::parse(url) else {
        return Health::Silent;
    };
    let (Some(host), Some(port)) = (u.host_str(), u.port_or_known_default()) else {
        return Health::Silent;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let Some(addr) = (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.find(SocketAddr::is_ipv4).or_else(|| a.next()))
    else {
        return Health::Silent;
    };
    let Ok(mut sock) = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT) else {
        return Health::Silent;
    };
    if u.scheme() == "https" {
        return Health::Ok;
    }
    let _ = sock.set_read_timeout(Some(PROBE_TIMEOUT));
    let _ = sock.set_write_timeout(Some(PROBE_TIMEOUT));
    let ask = format!(
        "GET {} HTTP/1.1\r\nhost: {host}:{port}\r\nconnection: close\r\n\r\n",
        paths::HEALTHZ
    );
    if sock.write_all(ask.as_bytes()).is_err() {
        return Health::Silent;
    }
    let mut answer = Vec::new();
    let _ = sock.take(4096).read_to_end(&mut answer);
    read_health(&String::from_utf8_lossy(&answer))
}

/// Reads a `/healthz` answer: 200 `ok`, or 503 `failed: REASON` from a gpuboard endpoint.
fn read_health(text: &str) -> Health {
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    if text.starts_with("HTTP/1.1 200") && body == "ok\n" {
        Health::Ok
    } else if text.starts_with("HTTP/1.1 503")
        && let Some(why) = body.strip_prefix("failed: ")
    {
        Health::Failed(why.trim().to_string())
    } else {
        Health::Silent
    }
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
        assert_eq!(health("http://127.0.0.1:1"), Health::Silent);
        assert_eq!(health("not a url"), Health::Silent);
    }

    #[test]
    fn a_failed_store_is_present_and_anything_else_is_not() {
        let ok = "HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n";
        assert_eq!(read_health(ok), Health::Ok);
        let failed = "HTTP/1.1 503 Service Unavailable\r\n\r\nfailed: writing state failed \
                      (disk full); the endpoint refuses changes until it is restarted\n";
        assert_eq!(
            read_health(failed),
            Health::Failed(
                "writing state failed (disk full); the endpoint refuses changes until it is \
                 restarted"
                    .into()
            )
        );
        assert_eq!(
            read_health("HTTP/1.1 503 Service Unavailable\r\n\r\nbusy\n"),
            Health::Silent,
            "a 503 from something else"
        );
        assert_eq!(read_health("HTTP/1.1 200 OK\r\n\r\n<html>"), Health::Silent);
        assert_eq!(read_health(""), Health::Silent);
    }
}
