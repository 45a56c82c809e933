//! What can go wrong reading a peer, in words an operator can act on.

use std::time::Duration;

/// Why a source could not produce a snapshot. Every variant names the peer's address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The configured address is not one this build can reach.
    #[error("bad address `{url}`: {why}")]
    BadUrl {
        /// The address as configured.
        url: String,
        /// What is wrong and what is allowed.
        why: String,
    },
    /// Nothing listens at the address.
    #[error("{url}: connection refused (is the {peer} running and listening there?)")]
    Refused {
        /// The address tried.
        url: String,
        /// What was expected there (`Ray dashboard`, `Prometheus server`).
        peer: &'static str,
    },
    /// The address could not be reached for another reason (DNS, reset, routing).
    #[error("{url}: unreachable: {detail}")]
    Unreachable {
        /// The address tried.
        url: String,
        /// What the network layer said.
        detail: String,
    },
    /// The peer did not answer in time.
    #[error("{url}: no answer within {} ms", timeout.as_millis())]
    Timeout {
        /// The address tried.
        url: String,
        /// How long we waited.
        timeout: Duration,
    },
    /// The peer refused our credentials (HTTP 401 or 403).
    #[error("{url}: HTTP {status}: {message}")]
    Unauthorized {
        /// The address tried.
        url: String,
        /// 401 or 403.
        status: u16,
        /// What to do about it, and what the peer said.
        message: String,
    },
    /// The peer answers, but it is not a Ray dashboard.
    #[error("{url} is not a Ray dashboard: {why}")]
    NotRayDashboard {
        /// The address tried.
        url: String,
        /// What it answered instead.
        why: String,
    },
    /// The peer answers, but it is not a Prometheus server.
    #[error("{url} is not a Prometheus server: {why}")]
    NotPrometheus {
        /// The address tried.
        url: String,
        /// What it answered instead.
        why: String,
    },
    /// The peer answers, but it is not a BOINC client's GUI RPC.
    #[error("{url} is not a BOINC client's GUI RPC: {why}")]
    NotBoincClient {
        /// The address tried.
        url: String,
        /// What it answered instead.
        why: String,
    },
    /// The peer answers, but it is not slurmrestd.
    #[error("{url} is not slurmrestd: {why}")]
    NotSlurm {
        /// The address tried.
        url: String,
        /// What it answered instead.
        why: String,
    },
    /// A configured secret file (BOINC's GUI RPC password file) cannot be read: nothing
    /// was sent to the peer.
    #[error("cannot read the password file {path} for {url}: {why}; nothing was sent to it")]
    SecretFile {
        /// The peer it is for.
        url: String,
        /// The file, as configured.
        path: String,
        /// What the file system said.
        why: String,
    },
    /// A peer that logs in outside HTTP (the BOINC GUI RPC) refused our credentials.
    #[error("{url}: the {peer} refused the login: {message}")]
    LoginRefused {
        /// The address tried.
        url: String,
        /// Which kind of peer.
        peer: &'static str,
        /// What to do about it.
        message: String,
    },
    /// Any other HTTP error status.
    #[error("{url}: HTTP {status}: {message}")]
    Http {
        /// The address tried.
        url: String,
        /// The status code.
        status: u16,
        /// The start of the body.
        message: String,
    },
    /// The peer understood the request and said it failed.
    #[error("{url}: the {peer} reported an error: {message}")]
    Peer {
        /// The address tried.
        url: String,
        /// Which kind of peer.
        peer: &'static str,
        /// Its message.
        message: String,
    },
    /// The answer is not the JSON we expect: truncated, malformed, or of the wrong shape.
    #[error("{url}: unexpected answer: {what}")]
    Decode {
        /// The address tried.
        url: String,
        /// What is wrong, with the JSON path of the offending value.
        what: String,
    },
}
