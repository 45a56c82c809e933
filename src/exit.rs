//! The exit codes of every command (README, "Exit codes") and the one mapping from a
//! fault to its code. Below both front ends, so the CLI and the console's `status`,
//! `show` and `doctor` classify a fault the same way.

use crate::client::ClientError;

/// The endpoint failed (HTTP 5xx) or answered something unreadable: exit 1, as any other
/// failure.
const FAILED: u8 = 1;
/// Exit code: the request was invalid (422, 400, 413, bad flags, a time or an endpoint URL
/// that cannot be read), nothing sent.
pub const EXIT_INVALID: u8 = 3;
/// Exit code: the claim does not fit (409).
pub const EXIT_DOES_NOT_FIT: u8 = 4;
/// Exit code: no gpuboard endpoint answered (unreachable, timed out, not gpuboard).
pub const EXIT_UNREACHABLE: u8 = 5;
/// Exit code: no token, a wrong one, or a read token on a mutation (401, 403).
pub const EXIT_AUTH: u8 = 6;
/// Exit code: not found (404; a claim or GPU that no source lists).
pub const EXIT_NOT_FOUND: u8 = 7;
/// Exit code: another conflict: nothing to move, no lease to renew, a waiting claim of a
/// share-0 project, an engine refusing the action in its own words (job gone, not pending).
pub const EXIT_CONFLICT: u8 = 8;

/// A command line that cannot be carried out as written (a malformed `--endpoint` or
/// `--request`, a config it cannot use, an ambiguous id, a view that does not exist):
/// exit 3, nothing sent.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A claim or a GPU named on the command line that no source lists: exit 7 (not found),
/// as `release` of an id the endpoint never issued.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NoSuchClaim(pub String);

/// No source answered (`status --once`, or `show` where every source is down): the code
/// of the first source's fault, and its words.
#[derive(Debug, thiserror::Error)]
#[error("no source answered{}", .first.as_ref().map(|f| format!(" (the first: {f})")).unwrap_or_default())]
pub struct NoSourceAnswered {
    /// Its row: 6 for a refused token, 1 for an endpoint that failed, else 5.
    pub code: u8,
    /// The first source's fault, in words.
    pub first: Option<String>,
}

/// The exit code of any failed command: the client's classification, 3 for a command
/// line that cannot be carried out (a time or a view that cannot be read), 5 when no
/// source answered, 7 for a claim no source lists, else 1.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if let Some(c) = cause.downcast_ref::<ClientError>() {
            return c.exit_code();
        }
        if cause.downcast_ref::<UsageError>().is_some()
            || cause.downcast_ref::<crate::when::WhenError>().is_some()
        {
            return EXIT_INVALID;
        }
        if cause.downcast_ref::<NoSuchClaim>().is_some() {
            return EXIT_NOT_FOUND;
        }
        if let Some(n) = cause.downcast_ref::<NoSourceAnswered>() {
            return n.code;
        }
    }
    FAILED
}
