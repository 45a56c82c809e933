//! Named tokens, one per person or job: `gpuboard token add NAME --role operator|read
//! [--expires DUR]`, `token ls`, `token revoke NAME`. Kept in `tokens.json` in the data
//! directory (mode 0600) as SHA-256 hashes only: the token itself is printed once, at
//! `add`. The endpoint reads the file again whenever it changes, so a revocation applies
//! to the next request without a restart.
//!
//! The first-start `operator.token` and `read.token` stay valid under the names `admin`
//! and `read` (see `auth`); those two names are reserved.

use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::Digest as _;
use subtle::ConstantTimeEq as _;

use crate::clock::Timestamp;

/// Bytes of randomness in a token (hex-encoded on disk and on the wire).
const TOKEN_BYTES: usize = 32;

/// What a request may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// Reads and mutations.
    #[serde(rename = "operator")]
    Operator,
    /// Reads only.
    #[serde(rename = "read")]
    Reader,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Operator => "operator",
            Role::Reader => "read",
        })
    }
}

/// A new random token, hex.
pub fn new_secret() -> String {
    let mut bytes = [0u8; TOKEN_BYTES];
    rand::fill(&mut bytes);
    hex(&bytes)
}

/// Bytes as lower-case hex, two digits each.
fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The file of named tokens in the data directory.
pub const TOKENS_FILE: &str = "tokens.json";
/// The name the operator token of the data directory goes by.
pub const ADMIN_NAME: &str = "admin";
/// The name the read token of the data directory goes by.
pub const READ_NAME: &str = "read";
/// The longest token name.
const MAX_NAME: usize = 32;

/// Why a token operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TokenBookError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a token list.
    #[error("{path} is not a gpuboard token list: {detail}")]
    Corrupt {
        /// The file.
        path: String,
        /// What the parser said.
        detail: String,
    },
    /// A name that cannot be used.
    #[error(
        "token name `{0}` is not allowed: use 1 to {MAX_NAME} letters, digits, `.`, `_` or `-`; \
         `admin` and `read` are the data directory's own tokens"
    )]
    BadName(String),
    /// A name already taken.
    #[error("a token named `{0}` exists already; revoke it first or pick another name")]
    Exists(String),
    /// No such name.
    #[error("no token named `{0}` (see `gpuboard token ls`)")]
    Unknown(String),
    /// An expiry that cannot be read.
    #[error(
        "expiry `{0}` is not a duration: give a whole number and a unit, s, m, h, d or w \
         (e.g. 90d, 12h)"
    )]
    BadExpiry(String),
}

/// One named token, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedToken {
    /// Who or what holds it; the audit log's actor.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// SHA-256 of the token, hex.
    pub sha256: String,
    /// When it was made.
    pub created: Timestamp,
    /// When it stops working, if ever.
    #[serde(default)]
    pub expires: Option<Timestamp>,
}

impl NamedToken {
    /// Whether it is still valid at `now`.
    pub fn live(&self, now: Timestamp) -> bool {
        self.expires.is_none_or(|e| now < e)
    }
}

/// The token file's content.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBook {
    /// The tokens, in the order they were added.
    pub tokens: Vec<NamedToken>,
}

/// The hex SHA-256 of a token, as stored.
pub fn token_hash(token: &str) -> String {
    hex(&sha2::Sha256::digest(token.as_bytes()))
}

/// Whether `a` and `b` are equal, in time that does not depend on where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// Parses `90d`, `12h`, `30m`, `45s`, `2w` into seconds.
pub fn parse_expiry(text: &str) -> Result<u64, TokenBookError> {
    let bad = || TokenBookError::BadExpiry(text.to_string());
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = t.split_at(split);
    let n: u64 = n.parse().map_err(|_| bad())?;
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(bad()),
    };
    match n.checked_mul(per) {
        Some(secs) if secs > 0 => Ok(secs),
        _ => Err(bad()),
    }
}

fn check_name(name: &str) -> Result<(), TokenBookError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && name != ADMIN_NAME
        && name != READ_NAME;
    if ok {
        Ok(())
    } else {
        Err(TokenBookError::BadName(name.to_string()))
    }
}

impl TokenBook {
    /// The file's path in `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(TOKENS_FILE)
    }

    /// Reads `dir`'s token file; none yet is an empty book.
    pub fn load(dir: &Path) -> Result<TokenBook, TokenBookError> {
        let path = TokenBook::path(dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TokenBook::default()),
            Err(source) => {
                return Err(TokenBookError::Io {
                    path: path.display().to_string(),
                    source,
                });
            }
        };
        serde_json::from_str(&text).map_err(|e| TokenBookError::Corrupt {
            path: path.display().to_string(),
            detail: e.to_string(),
        })
    }

    /// Writes the book to `dir` whole (a temporary file renamed over it, mode 0600), so
    /// the endpoint never reads half a file.
    pub fn save(&self, dir: &Path) -> Result<(), TokenBookError> {
        let path = TokenBook::path(dir);
        let tmp = dir.join(format!(".{TOKENS_FILE}.{}", std::process::id()));
        let io = |source| TokenBookError::Io {
            path: path.display().to_string(),
            source,
        };
        let text = serde_json::to_string_pretty(self).map_err(|e| TokenBookError::Corrupt {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?;
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)
    }

    /// Adds a token named `name` and returns the secret, which is kept nowhere.
    pub fn add(
        &mut self,
        name: &str,
        role: Role,
        expires: Option<Timestamp>,
        now: Timestamp,
    ) -> Result<String, TokenBookError> {
        check_name(name)?;
        if self.tokens.iter().any(|t| t.name == name) {
            return Err(TokenBookError::Exists(name.to_string()));
        }
        let secret = new_secret();
        self.tokens.push(NamedToken {
            name: name.to_string(),
            role,
            sha256: token_hash(&secret),
            created: now,
            expires,
        });
        Ok(secret)
    }

    /// Removes the token named `name`.
    pub fn revoke(&mut self, name: &str) -> Result<NamedToken, TokenBookError> {
        let at = self
            .tokens
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| TokenBookError::Unknown(name.to_string()))?;
        Ok(self.tokens.remove(at))
    }

    /// The token whose hash is `hash`, live or not. Every entry is compared (in constant
    /// time each), so the answer's timing does not say which one matched.
    pub fn find(&self, hash: &str) -> Option<&NamedToken> {
        let mut found = None;
        for t in &self.tokens {
            if same_secret(&t.sha256, hash) && found.is_none() {
                found = Some(t);
            }
        }
        found
    }
}

/// The file of when each token was last used, in the data directory. Apart from
/// `tokens.json` so that recording a use never makes the endpoint reload its tokens, and
/// written by the endpoint in batches ([`TokenUsage::merge_into`]), never per request.
pub const USAGE_FILE: &str = "token-usage.json";

/// When each token (by name, `admin` and `read` included) was last used.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenUsage {
    /// Name to the last request it authorized.
    pub last_used: std::collections::BTreeMap<String, Timestamp>,
}

impl TokenUsage {
    /// The file's path in `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(USAGE_FILE)
    }

    /// Records a use of `name` at `now` (in memory).
    pub fn record(&mut self, name: &str, now: Timestamp) {
        match self.last_used.get_mut(name) {
            Some(at) => *at = (*at).max(now),
            None => {
                self.last_used.insert(name.to_string(), now);
            }
        }
    }

    /// Reads `dir`'s usage file; none yet, or one that cannot be read, is no use recorded
    /// (it is only a report: a damaged one is replaced at the next write).
    pub fn load(dir: &Path) -> TokenUsage {
        std::fs::read_to_string(TokenUsage::path(dir))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    /// Writes these uses into `dir`'s file, keeping the later time of each name, whole (a
    /// temporary file renamed over it, mode 0600).
    pub fn merge_into(&self, dir: &Path) -> Result<(), TokenBookError> {
        let mut all = TokenUsage::load(dir);
        for (name, at) in &self.last_used {
            all.record(name, *at);
        }
        let path = TokenUsage::path(dir);
        let io = |source| TokenBookError::Io {
            path: path.display().to_string(),
            source,
        };
        let text = serde_json::to_string_pretty(&all).map_err(|e| TokenBookError::Corrupt {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?;
        let tmp = dir.join(format!(".{USAGE_FILE}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_are_merged_keeping_the_latest() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = TokenUsage::default();
        first.record("alice", Timestamp(10));
        first.record("alice", Timestamp(5));
        first.record("ci", Timestamp(30));
        first.merge_into(dir.path()).unwrap();
        let mut second = TokenUsage::default();
        second.record("ci", Timestamp(20));
        second.record("admin", Timestamp(40));
        second.merge_into(dir.path()).unwrap();
        let back = TokenUsage::load(dir.path());
        assert_eq!(back.last_used["alice"], Timestamp(10));
        assert_eq!(back.last_used["ci"], Timestamp(30));
        assert_eq!(back.last_used["admin"], Timestamp(40));
        std::fs::write(TokenUsage::path(dir.path()), "garbage").unwrap();
        assert_eq!(TokenUsage::load(dir.path()), TokenUsage::default());
    }

    #[test]
    fn tokens_are_stored_hashed_and_found_by_hash() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let mut book = TokenBook::default();
        let secret = book
            .add("alice", Role::Operator, None, Timestamp(1000))
            .unwrap();
        book.add("ci", Role::Reader, Some(Timestamp(5000)), Timestamp(1000))
            .unwrap();
        book.save(dir.path()).unwrap();
        let text = std::fs::read_to_string(TokenBook::path(dir.path())).unwrap();
        assert!(!text.contains(&secret), "the secret itself is never stored");
        let back = TokenBook::load(dir.path()).unwrap();
        assert_eq!(back, book);
        assert_eq!(back.find(&token_hash(&secret)).unwrap().name, "alice");
        assert!(back.find(&token_hash("nope")).is_none());
        let ci = &back.tokens[1];
        assert!(ci.live(Timestamp(4999)));
        assert!(!ci.live(Timestamp(5000)));
        let mode = std::fs::metadata(TokenBook::path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn names_and_expiries_are_checked() {
        let mut book = TokenBook::default();
        for bad in ["", "admin", "read", "a b", "x/y", &"n".repeat(33)] {
            assert!(
                matches!(
                    book.add(bad, Role::Reader, None, Timestamp(0)),
                    Err(TokenBookError::BadName(_))
                ),
                "{bad}"
            );
        }
        book.add("bob", Role::Reader, None, Timestamp(0)).unwrap();
        assert!(matches!(
            book.add("bob", Role::Reader, None, Timestamp(0)),
            Err(TokenBookError::Exists(_))
        ));
        assert!(matches!(
            book.revoke("carol"),
            Err(TokenBookError::Unknown(_))
        ));
        assert_eq!(book.revoke("bob").unwrap().name, "bob");
        assert_eq!(parse_expiry("90d").unwrap(), 90 * 86_400);
        assert_eq!(parse_expiry("12h").unwrap(), 12 * 3600);
        assert_eq!(parse_expiry("2w").unwrap(), 2 * 604_800);
        for bad in ["", "d", "10", "0d", "5y", "-1d", "99999999999999999999w"] {
            assert!(parse_expiry(bad).is_err(), "{bad}");
        }
    }
}
