//! Why a host could not be read, told from what `ssh` left behind: its exit status, its
//! stderr and what the script printed before it stopped. Pure.

use std::time::Duration;

use super::probe::Probed;
use crate::sources::Failure;

/// Why one host could not be read, in words an operator can act on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostFailure {
    /// The server refused every key (or asked for a password, which `BatchMode` never gives).
    #[error(
        "authentication refused: {said} (ssh never prompts here: load the key into ssh-agent \
         or name it with IdentityFile in the ssh config)"
    )]
    Authentication {
        /// ssh's own line.
        said: String,
    },
    /// The host key is unknown or has changed.
    #[error(
        "host key not trusted: {said} (ssh never prompts here: check the key and add it to \
         known_hosts, e.g. by connecting once by hand)"
    )]
    HostKey {
        /// ssh's own line.
        said: String,
    },
    /// No connection within the limit (ssh's `ConnectTimeout`, or ours).
    #[error("timed out connecting: {said}")]
    ConnectTimeout {
        /// ssh's line, or how long we waited.
        said: String,
    },
    /// Connected, but the command did not finish in time.
    #[error("connected, but the command did not finish within {} s", .0.as_secs())]
    CommandTimeout(Duration),
    /// The host could not be reached (refused, unknown name, no route).
    #[error("unreachable: {said}")]
    Unreachable {
        /// ssh's own line.
        said: String,
    },
    /// Nothing to read GPUs with on the remote PATH.
    #[error("no nvidia-smi on the remote PATH (exit 127): nothing to read GPUs with there")]
    NoNvidiaSmi,
    /// nvidia-smi ran and failed, listing no GPU.
    #[error("nvidia-smi failed{}: {said}", .status.map(|s| format!(" (exit {s})")).unwrap_or_default())]
    NvidiaSmi {
        /// Its exit status, when it finished.
        status: Option<i32>,
        /// Its first line.
        said: String,
    },
    /// The answer was not the script's.
    #[error("unreadable answer: {0}")]
    Unreadable(String),
    /// No reader could read the host: the last one's failure, and why the better ones
    /// could not start.
    #[error("{last}; before it: {tried}")]
    NoReader {
        /// nvidia-smi's failure.
        last: Box<HostFailure>,
        /// Why gpuboard's readers could not start.
        tried: String,
    },
    /// A reader's stream stopped saying anything (a hung command or connection).
    #[error("connected, but {what} printed nothing for {secs} s")]
    Silent {
        /// The reader (`nvidia-smi -l 2`...).
        what: String,
        /// How long it was silent.
        secs: u64,
    },
    /// A reader's stream ended after it had been read.
    #[error("{what} stopped: {said}")]
    Stopped {
        /// The reader.
        what: String,
        /// How it ended, and its last words.
        said: String,
    },
    /// ssh failed for another reason.
    #[error("ssh failed (exit {status}): {said}")]
    Ssh {
        /// ssh's exit status.
        status: i32,
        /// Its last line.
        said: String,
    },
}

impl From<HostFailure> for Failure {
    fn from(f: HostFailure) -> Failure {
        let text = f.to_string();
        match f {
            HostFailure::Authentication { .. } => Failure::Unauthorized(text),
            HostFailure::ConnectTimeout { .. } | HostFailure::Unreachable { .. } => {
                Failure::Unreachable {
                    detail: text,
                    sent: false,
                }
            }
            HostFailure::Unreadable(_) => Failure::Decode(text),
            _ => Failure::Refused(text),
        }
    }
}

/// The line of ssh's stderr that says what went wrong (the last one that is not a
/// warning), or all of it when no line stands out.
pub fn telling_line(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .rev()
        .find(|l| !l.starts_with("Warning:") && !l.starts_with("**"))
        .or(lines.last())
        .map_or_else(|| "(nothing on stderr)".to_string(), |l| (*l).to_string())
}

/// What ssh's stderr says went wrong, when it is about the connection (exit 255).
pub fn connection_failure(stderr: &str) -> HostFailure {
    let said = telling_line(stderr);
    let has = |needle: &str| stderr.contains(needle);
    if has("Permission denied") || has("Too many authentication failures") {
        let said = stderr
            .lines()
            .find(|l| l.contains("Permission denied") || l.contains("Too many"))
            .map_or(said, |l| l.trim().to_string());
        HostFailure::Authentication { said }
    } else if has("Host key verification failed")
        || has("REMOTE HOST IDENTIFICATION HAS CHANGED")
        || has("host key for")
        || has("No matching host key")
    {
        HostFailure::HostKey { said }
    } else if has("timed out") || has("Connection timed out") {
        HostFailure::ConnectTimeout { said }
    } else if has("Connection refused")
        || has("Could not resolve hostname")
        || has("No route to host")
        || has("Network is unreachable")
        || has("Connection closed")
        || has("Connection reset")
    {
        HostFailure::Unreachable { said }
    } else {
        HostFailure::Ssh { status: 255, said }
    }
}

/// How a run of the script ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this status (`None`: killed by a signal).
    Exited(Option<i32>),
    /// It ran past `limit` and was stopped.
    TimedOut(Duration),
}

/// Whether a run failed, and why; `None` when the answer can be read for GPUs.
pub fn classify(ended: &Ended, stderr: &str, answer: &Probed) -> Option<HostFailure> {
    // The script's first line comes from the host: after it, a stop is the command's.
    let connected = answer.reached || answer.gpus.is_some();
    match ended {
        Ended::TimedOut(limit) if connected => return Some(HostFailure::CommandTimeout(*limit)),
        Ended::TimedOut(limit) => {
            return Some(HostFailure::ConnectTimeout {
                said: format!("no connection within {} s", limit.as_secs()),
            });
        }
        Ended::Exited(Some(255)) if !connected => return Some(connection_failure(stderr)),
        Ended::Exited(_) => {}
    }
    if answer.no_nvidia_smi || (!connected && *ended == Ended::Exited(Some(127))) {
        return Some(HostFailure::NoNvidiaSmi);
    }
    match &answer.gpus {
        Some((text, status)) if *status != Some(0) && !has_gpu_line(text) => {
            Some(HostFailure::NvidiaSmi {
                status: *status,
                said: text
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("(no output)")
                    .trim()
                    .to_string(),
            })
        }
        Some(_) => None,
        None => Some(match ended {
            Ended::Exited(Some(0) | None) => HostFailure::Unreadable(format!(
                "no nvidia-smi section in what the host printed (first line: `{}`)",
                answer.first_line.as_deref().unwrap_or("(nothing)")
            )),
            Ended::Exited(Some(s)) => HostFailure::Ssh {
                status: *s,
                said: telling_line(stderr),
            },
            Ended::TimedOut(limit) => HostFailure::CommandTimeout(*limit),
        }),
    }
}

/// Why a reader's stream (`what`) that had been read ended: the connection's failure when
/// ssh says so (exit 255), else how the command ended and its last words.
pub fn stopped(what: &str, ended: &Ended, stderr: &str) -> HostFailure {
    match ended {
        Ended::Exited(Some(255)) => connection_failure(stderr),
        Ended::TimedOut(limit) => HostFailure::Silent {
            what: what.to_string(),
            secs: limit.as_secs(),
        },
        Ended::Exited(status) => HostFailure::Stopped {
            what: what.to_string(),
            said: format!(
                "{}: {}",
                status.map_or_else(|| "stopped".to_string(), |s| format!("exit {s}")),
                telling_line(stderr)
            ),
        },
    }
}

/// Whether `text` has a line that looks like a GPU's (it starts with an index).
fn has_gpu_line(text: &str) -> bool {
    text.lines().any(|l| {
        l.split(',')
            .next()
            .is_some_and(|i| i.trim().parse::<u32>().is_ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::ssh::probe::read;

    fn none() -> Probed {
        Probed::default()
    }

    #[test]
    fn ssh_failures_are_told_apart_by_what_ssh_said() {
        let exit = Ended::Exited(Some(255));
        let auth = classify(
            &exit,
            "Warning: Permanently added '[127.0.0.1]:2222' (ED25519) to the list of known hosts.\r\nu@127.0.0.1: Permission denied (publickey).\r\n",
            &none(),
        );
        assert_eq!(
            auth,
            Some(HostFailure::Authentication {
                said: "u@127.0.0.1: Permission denied (publickey).".into()
            })
        );
        let key = classify(
            &exit,
            "No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking.\nHost key verification failed.\n",
            &none(),
        );
        assert!(matches!(key, Some(HostFailure::HostKey { .. })), "{key:?}");
        let t = classify(
            &exit,
            "ssh: connect to host 10.0.0.1 port 22: Connection timed out\n",
            &none(),
        );
        assert!(
            matches!(t, Some(HostFailure::ConnectTimeout { .. })),
            "{t:?}"
        );
        let r = classify(
            &exit,
            "ssh: connect to host 127.0.0.1 port 1: Connection refused\n",
            &none(),
        );
        assert!(matches!(r, Some(HostFailure::Unreachable { .. })), "{r:?}");
        let other = classify(&exit, "kex_exchange_identification: odd\n", &none());
        assert_eq!(
            other,
            Some(HostFailure::Ssh {
                status: 255,
                said: "kex_exchange_identification: odd".into()
            })
        );
    }

    #[test]
    fn remote_failures_are_the_commands() {
        let no_smi = read("@host h\n@no-nvidia-smi\n");
        assert_eq!(
            classify(&Ended::Exited(Some(127)), "", &no_smi),
            Some(HostFailure::NoNvidiaSmi)
        );
        let hung = read("@host h\n");
        assert_eq!(
            classify(&Ended::TimedOut(Duration::from_secs(3)), "", &hung),
            Some(HostFailure::CommandTimeout(Duration::from_secs(3)))
        );
        assert!(matches!(
            classify(&Ended::TimedOut(Duration::from_secs(3)), "", &none()),
            Some(HostFailure::ConnectTimeout { .. })
        ));
        let failed = read(
            "@host h\n@gpus\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n@gpus-exit 9\n",
        );
        let f = classify(&Ended::Exited(Some(0)), "", &failed).unwrap();
        assert!(
            f.to_string()
                .starts_with("nvidia-smi failed (exit 9): NVIDIA-SMI has failed"),
            "{f}"
        );
        let garbage = read("Welcome to the machine\n");
        assert!(matches!(
            classify(&Ended::Exited(Some(0)), "", &garbage),
            Some(HostFailure::Unreadable(_))
        ));
        let fine = read("@host h\n@gpus\n0, GPU-a, T4, 1, 1, 1, 1, 1\n@gpus-exit 0\n");
        assert_eq!(classify(&Ended::Exited(Some(0)), "", &fine), None);
    }

    #[test]
    fn failures_become_the_consoles_kinds() {
        let auth: Failure = HostFailure::Authentication { said: "x".into() }.into();
        assert!(matches!(auth, Failure::Unauthorized(_)));
        let smi: Failure = HostFailure::NoNvidiaSmi.into();
        assert!(smi.to_string().contains("no nvidia-smi"), "{smi}");
    }
}
