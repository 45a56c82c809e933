//! Which hosts to read: `--ssh HOST`, `--ssh-hosts FILE` and `[[ssh]]` entries, each
//! becoming one source. A host is what `ssh` takes (an alias of the ssh config, `HOST`,
//! `USER@HOST`) or `USER@HOST:PORT` / `USER@[V6]:PORT` (all-smi's host-file form), which
//! is handed to ssh as `ssh://USER@HOST:PORT`. A hosts file holds one host a line; blank
//! lines and `#` comments (whole-line or trailing) are skipped.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::sources::kind::{EndpointConfig, SourceKind};

/// One `[[ssh]]` entry of the config file.
///
/// ```toml
/// [[ssh]]
/// host = "gpu-01"                  # or hosts_file = "/etc/gpuboard/hosts"
/// name = "lab-01"                  # optional, with `host`: what the screens call it
/// ssh_config = "~/.ssh/lab.conf"   # optional: ssh -F FILE
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshEntry {
    /// One host.
    #[serde(default)]
    pub host: Option<String>,
    /// A file of hosts, one a line.
    #[serde(default)]
    pub hosts_file: Option<PathBuf>,
    /// The name shown for `host` (default: the host as written).
    #[serde(default)]
    pub name: Option<String>,
    /// An ssh config file for these hosts (`ssh -F`).
    #[serde(default)]
    pub ssh_config: Option<PathBuf>,
}

/// A host or hosts file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadHost {
    /// The host is not one ssh can be given.
    #[error("ssh host `{host}`{at}: {why}")]
    Host {
        /// As written.
        host: String,
        /// Where it was written (` (FILE line N)`), or nothing for a flag.
        at: String,
        /// What is wrong and what is allowed.
        why: String,
    },
    /// The hosts file cannot be read.
    #[error("cannot read ssh hosts file {path}: {why}")]
    File {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// An `[[ssh]]` entry names neither or both of `host` and `hosts_file`.
    #[error("an [[ssh]] entry names {0}; give exactly one of `host` or `hosts_file`")]
    Entry(String),
}

/// A host as ssh takes it, and the name it is shown by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// What the screens call it: the host as written, without `ssh://`.
    pub name: String,
    /// What ssh is given.
    pub destination: String,
}

/// Reads one host. `at` says where it was written, for the error.
pub fn parse(written: &str, at: &str) -> Result<Host, BadHost> {
    let bad = |why: &str| BadHost::Host {
        host: written.to_string(),
        at: at.to_string(),
        why: why.to_string(),
    };
    let s = written.trim();
    let s = s.strip_prefix("ssh://").unwrap_or(s);
    if s.is_empty() {
        return Err(bad("it is empty"));
    }
    if s.starts_with('-') {
        return Err(bad("a host cannot start with `-`"));
    }
    if s.chars()
        .any(|c| c.is_whitespace() || c == '/' || c.is_control())
    {
        return Err(bad(
            "a host has no spaces or `/`: write HOST, USER@HOST, USER@HOST:PORT or an alias",
        ));
    }
    let (user, rest) = match s.rsplit_once('@') {
        Some((u, r)) if !u.is_empty() && !r.is_empty() => (Some(u), r),
        Some(_) => return Err(bad("USER@HOST needs both a user and a host")),
        None => (None, s),
    };
    // `[V6]` or `[V6]:PORT`; `HOST:PORT`; `HOST`.
    let (host, port) = if let Some(inner) = rest.strip_prefix('[') {
        let Some((h, tail)) = inner.split_once(']') else {
            return Err(bad("an IPv6 address in `[` needs its `]`"));
        };
        let port = match tail {
            "" => None,
            t => Some(
                t.strip_prefix(':')
                    .ok_or_else(|| bad("after `]` comes `:PORT`"))?,
            ),
        };
        (format!("[{h}]"), port)
    } else {
        match rest.split_once(':') {
            Some((h, p)) if !p.contains(':') => (h.to_string(), Some(p)),
            Some(_) => {
                return Err(bad(
                    "an IPv6 address is written in brackets: USER@[ADDR]:PORT",
                ));
            }
            None => (rest.to_string(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(bad("the host is empty"));
    }
    let Some(port) = port else {
        return Ok(Host {
            name: s.to_string(),
            destination: s.to_string(),
        });
    };
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err(bad("the port is a number from 1 to 65535")),
    }
    let user = user.map(|u| format!("{u}@")).unwrap_or_default();
    Ok(Host {
        name: s.to_string(),
        destination: format!("ssh://{user}{host}:{port}"),
    })
}

/// Reads a hosts file's text (`path` names it in errors).
pub fn parse_file(text: &str, path: &str) -> Result<Vec<Host>, BadHost> {
    let mut hosts = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        hosts.push(parse(line, &format!(" ({path} line {})", n + 1))?);
    }
    Ok(hosts)
}

/// Reads a hosts file.
pub fn read_file(path: &Path) -> Result<Vec<Host>, BadHost> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| BadHost::File {
        path: shown.clone(),
        why: e.to_string(),
    })?;
    parse_file(&text, &shown)
}

/// The source entry for one host.
pub fn entry(host: &Host, ssh_config: Option<&Path>) -> EndpointConfig {
    let mut e = EndpointConfig::named(&host.name, &host.destination, SourceKind::Ssh);
    e.ssh_config = ssh_config.map(Path::to_path_buf);
    e
}

/// The source entries of `--ssh HOST`, `--ssh-hosts FILE` (in that order) and their
/// `--ssh-config FILE`.
pub fn from_flags(
    hosts: &[String],
    files: &[PathBuf],
    ssh_config: Option<&Path>,
) -> Result<Vec<EndpointConfig>, BadHost> {
    let mut out = Vec::new();
    for h in hosts {
        out.push(entry(&parse(h, " (--ssh)")?, ssh_config));
    }
    for f in files {
        for h in read_file(f)? {
            out.push(entry(&h, ssh_config));
        }
    }
    Ok(out)
}

/// The source entries of the config's `[[ssh]]` entries.
pub fn from_config(entries: &[SshEntry]) -> Result<Vec<EndpointConfig>, BadHost> {
    let mut out = Vec::new();
    for e in entries {
        let config = e.ssh_config.as_deref();
        match (&e.host, &e.hosts_file) {
            (Some(h), None) => {
                let mut host = parse(h, " ([[ssh]] host)")?;
                if let Some(n) = &e.name {
                    host.name.clone_from(n);
                }
                out.push(entry(&host, config));
            }
            (None, Some(f)) if e.name.is_none() => {
                for h in read_file(f)? {
                    out.push(entry(&h, config));
                }
            }
            (None, Some(_)) => {
                return Err(BadHost::Entry(
                    "`name` with `hosts_file` (each host is named as written)".to_string(),
                ));
            }
            (Some(_), Some(_)) => return Err(BadHost::Entry("both".to_string())),
            (None, None) => return Err(BadHost::Entry("neither".to_string())),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(s: &str) -> String {
        parse(s, "").unwrap().destination
    }

    #[test]
    fn hosts_go_to_ssh_as_written_and_ports_as_an_ssh_url() {
        assert_eq!(dest("gpu-01"), "gpu-01");
        assert_eq!(dest("alice@gpu-01"), "alice@gpu-01");
        assert_eq!(dest("alice@gpu-01:2222"), "ssh://alice@gpu-01:2222");
        assert_eq!(dest("ssh://alice@gpu-01:2222"), "ssh://alice@gpu-01:2222");
        assert_eq!(dest("admin@[fd00::1]:2222"), "ssh://admin@[fd00::1]:2222");
        assert_eq!(dest("admin@[fd00::1]"), "admin@[fd00::1]");
        assert_eq!(
            parse("ssh://alice@gpu-01:2222", "").unwrap().name,
            "alice@gpu-01:2222"
        );
    }

    #[test]
    fn a_bad_host_says_what_is_allowed() {
        for (h, why) in [
            ("-oProxyCommand=x", "cannot start with `-`"),
            ("a b", "no spaces"),
            ("@gpu", "both a user and a host"),
            ("u@gpu:99999", "1 to 65535"),
            ("u@fd00::1", "in brackets"),
            ("", "empty"),
        ] {
            let e = parse(h, " (--ssh)").unwrap_err().to_string();
            assert!(e.contains(why), "{h}: {e}");
        }
    }

    #[test]
    fn a_hosts_file_skips_comments_and_blanks_and_names_the_bad_line() {
        let hosts = parse_file(
            "# lab\n\nalice@gpu-01\n  bob@gpu-02:2200   # the old one\ngpu-03\n",
            "hosts",
        )
        .unwrap();
        let names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["alice@gpu-01", "bob@gpu-02:2200", "gpu-03"]);
        let e = parse_file("ok\nu@h:x\n", "hosts").unwrap_err().to_string();
        assert!(e.contains("(hosts line 2)"), "{e}");
    }

    #[test]
    fn ssh_entries_name_one_host_or_a_file() {
        let cfg: Vec<SshEntry> = vec![SshEntry {
            host: Some("u@gpu-01:2222".into()),
            name: Some("lab-01".into()),
            ssh_config: Some("/c".into()),
            ..SshEntry::default()
        }];
        let e = from_config(&cfg).unwrap();
        assert_eq!(e[0].name, "lab-01");
        assert_eq!(e[0].url, "ssh://u@gpu-01:2222");
        assert_eq!(e[0].kind, SourceKind::Ssh);
        assert_eq!(e[0].ssh_config.as_deref(), Some(Path::new("/c")));
        let neither = from_config(&[SshEntry::default()]).unwrap_err().to_string();
        assert!(
            neither.contains("exactly one of `host` or `hosts_file`"),
            "{neither}"
        );
        let missing = from_flags(&[], &[PathBuf::from("/nonexistent/hosts")], None)
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains("cannot read ssh hosts file /nonexistent/hosts"),
            "{missing}"
        );
    }
}
