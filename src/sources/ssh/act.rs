//! Actions on a host read over SSH. Only a host whose serve is read can be acted on, and
//! only when its SSH user can read that serve's operator token: the probe asks
//! `gpuboard relay --check` there, and the answer (`ok USER@HOST`, or `read-only: WHY`)
//! says which (`Acting`). Each action is then one `gpuboard relay --request JSON` over the
//! host's kept connection: the console's own API client (`client::Client::relayed`) writes
//! the request, the relay makes it to its serve with the token it read, and the serve's
//! answer comes back to be read as any endpoint's (`client::relay`). The token never leaves
//! the host; the serve audits the action as the SSH user.

use std::time::Duration;

use futures::future::BoxFuture;

use super::command::SshOptions;
use super::failure::{Ended, HostFailure, connection_failure, telling_line};
use super::probe::quote;
use crate::client::{ClientError, RELAY_OK, RELAY_READ_ONLY, Relay, RelayAnswer, Relayed};
use crate::sources::Failure;

/// Whether actions can go to a host's serve now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Acting {
    /// No serve is read on the host: there is nothing to act on.
    #[default]
    NoServe,
    /// Its serve takes actions, relayed as this user (`user@host` there).
    As(String),
    /// Its serve is read, but cannot be acted on: why.
    ReadOnly(String),
}

impl Acting {
    /// What the host's `gpuboard relay --check` said (its first line; `None`: nothing).
    pub fn from_check(line: Option<&str>) -> Acting {
        let line = line.map(str::trim).unwrap_or_default();
        if let Some(user) = line.strip_prefix(RELAY_OK).filter(|u| u.starts_with(' ')) {
            return Acting::As(user.trim().to_string());
        }
        if let Some(why) = line.strip_prefix(RELAY_READ_ONLY) {
            return Acting::ReadOnly(why.trim().to_string());
        }
        Acting::ReadOnly(if line.is_empty() {
            "the host's gpuboard said nothing to `gpuboard relay --check`".to_string()
        } else {
            format!("the host's gpuboard cannot relay actions ({line}); install this version there")
        })
    }

    /// Whether actions go through.
    pub fn can(&self) -> bool {
        matches!(self, Acting::As(_))
    }

    /// What the host's note says of actions.
    pub fn note(&self) -> String {
        match self {
            Acting::As(user) => format!("actions as {user} through its operator token"),
            Acting::ReadOnly(why) => format!("{READ_ONLY_NOTE}{why}"),
            Acting::NoServe => format!("{READ_ONLY_NOTE}actions need a gpuboard serve on the host"),
        }
    }

    /// Why an action is refused, when it is.
    pub fn refusal(&self) -> Option<String> {
        match self {
            Acting::As(_) => None,
            Acting::ReadOnly(why) => Some(why.clone()),
            Acting::NoServe => Some(
                "this host is read without a gpuboard serve; actions need one running there"
                    .to_string(),
            ),
        }
    }
}

/// How a host's note starts the reason it takes no actions.
pub const READ_ONLY_NOTE: &str = "read-only: ";

/// Why an SSH host's note says it is read-only: the words after `READ_ONLY_NOTE`, or the
/// whole note when it does not say.
pub fn read_only_reason(note: &str) -> &str {
    note.rsplit_once(READ_ONLY_NOTE)
        .map_or(note, |(_, why)| why)
}

/// How long an action's run may take beyond the API call's own limit: connecting, and the
/// relay finding its serve.
const MARGIN: Duration = Duration::from_secs(10);

/// The road of an action's requests to a host's serve: one `gpuboard relay --request` each,
/// over the host's kept connection.
#[derive(Debug)]
pub struct SshRelay {
    /// How ssh runs.
    pub options: SshOptions,
    /// The host, as ssh is given it.
    pub destination: String,
}

impl Relay for SshRelay {
    fn send(
        &self,
        request: Relayed,
        limit: Duration,
    ) -> BoxFuture<'static, Result<RelayAnswer, ClientError>> {
        let options = self.options.clone();
        let destination = self.destination.clone();
        Box::pin(async move {
            let endpoint = format!("ssh {destination}");
            let line = serde_json::to_string(&request).map_err(|e| ClientError::Decode {
                endpoint: endpoint.clone(),
                detail: format!("the request could not be written: {e}"),
            })?;
            let remote = format!("gpuboard relay --request {}", quote(&line));
            let run = options.run(&destination, &remote, limit + MARGIN).await;
            read_run(&endpoint, &run.ended, &run.stdout, &run.stderr)
        })
    }
}

/// What a run of the relay answered, from its exit, stdout and stderr.
fn read_run(
    endpoint: &str,
    ended: &Ended,
    stdout: &str,
    stderr: &str,
) -> Result<RelayAnswer, ClientError> {
    let last = stdout.lines().rev().map(str::trim).find(|l| !l.is_empty());
    match (ended, last) {
        (Ended::TimedOut(limit), _) => Err(ClientError::Timeout {
            endpoint: endpoint.to_string(),
            secs: limit.as_secs(),
        }),
        (Ended::Exited(Some(0)), Some(line)) => {
            serde_json::from_str(line).map_err(|e| ClientError::Decode {
                endpoint: endpoint.to_string(),
                detail: format!("the relay's answer `{line}` is not one ({e})"),
            })
        }
        (Ended::Exited(Some(255)), None) => {
            let why = connection_failure(stderr);
            // Refused before the command ran: surely nothing was sent.
            let sent = !matches!(
                why,
                HostFailure::Authentication { .. }
                    | HostFailure::HostKey { .. }
                    | HostFailure::ConnectTimeout { .. }
            ) && !stderr.contains("Connection refused")
                && !stderr.contains("Could not resolve hostname");
            Err(ClientError::Unreachable {
                endpoint: endpoint.to_string(),
                detail: why.to_string(),
                sent,
            })
        }
        // Anything else may have happened after the request went out.
        (Ended::Exited(status), _) => Err(ClientError::Unreachable {
            endpoint: endpoint.to_string(),
            detail: format!(
                "the host's `gpuboard relay` ended{} without an answer: {}",
                status.map(|s| format!(" (exit {s})")).unwrap_or_default(),
                telling_line(stderr)
            ),
            sent: true,
        }),
    }
}

/// The console's view of a relayed request's error: a refusal of the relay is the host's
/// read-only reason, a refused token says whose it was, the rest as any endpoint's.
pub fn failure(host: &str, e: ClientError) -> Failure {
    match e {
        ClientError::Forbidden { detail } => Failure::ReadOnly(format!("{host}: {detail}")),
        ClientError::Unauthorized { detail } => Failure::Unauthorized(format!(
            "{detail} (the serve on {host} refused the token its SSH user read there)"
        )),
        other => crate::sources::endpoint::failure(host, true, other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_says_who_acts_or_why_none_can() {
        assert_eq!(
            Acting::from_check(Some("ok ann@gpu-01")),
            Acting::As("ann@gpu-01".into())
        );
        let ro = Acting::from_check(Some(
            "read-only: bob@gpu-01 cannot read the operator token of the serve",
        ));
        assert_eq!(
            ro,
            Acting::ReadOnly("bob@gpu-01 cannot read the operator token of the serve".into())
        );
        assert!(!ro.can());
        let old = Acting::from_check(Some("error: unrecognized subcommand 'relay'"));
        assert!(
            old.refusal().unwrap().contains("cannot relay actions"),
            "{old:?}"
        );
        assert!(matches!(Acting::from_check(None), Acting::ReadOnly(_)));
        let note = format!("reader: gpuboard serve over ssh (pid 7), {}", ro.note());
        assert_eq!(
            read_only_reason(&note),
            "bob@gpu-01 cannot read the operator token of the serve"
        );
    }

    #[test]
    fn a_run_of_the_relay_reads_as_an_answer_or_as_what_went_wrong() {
        let ok = read_run(
            "ssh h",
            &Ended::Exited(Some(0)),
            "{\"answer\":\"http\",\"status\":200,\"body\":\"{}\"}\n",
            "",
        )
        .unwrap();
        assert_eq!(
            ok,
            RelayAnswer::Http {
                status: 200,
                body: "{}".into()
            }
        );
        let refused = read_run(
            "ssh h",
            &Ended::Exited(Some(255)),
            "",
            "u@h: Permission denied (publickey).\n",
        )
        .unwrap_err();
        assert!(
            matches!(refused, ClientError::Unreachable { sent: false, .. }),
            "{refused:?}"
        );
        let cut = read_run(
            "ssh h",
            &Ended::Exited(Some(255)),
            "",
            "Connection to h closed by remote host.\n",
        )
        .unwrap_err();
        assert!(
            matches!(cut, ClientError::Unreachable { sent: true, .. }),
            "{cut:?}"
        );
        let late =
            read_run("ssh h", &Ended::TimedOut(Duration::from_secs(30)), "", "").unwrap_err();
        assert!(matches!(late, ClientError::Timeout { secs: 30, .. }));
        let garbage = read_run("ssh h", &Ended::Exited(Some(0)), "hello\n", "").unwrap_err();
        assert!(matches!(garbage, ClientError::Decode { .. }));
    }
}
