//! Bearer tokens: an operator token for mutations, a read token for reads. Generated on
//! the endpoint's first start into the data directory (mode 0600), read by the CLI and the
//! console from there, from `--token-file`, or from `GPUBOARD_TOKEN` (`client_token`).
//! Besides these two (named `admin` and `read`), the named tokens of `tokens` are valid.
//! Compared in constant time.

use std::io::{Read as _, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use subtle::ConstantTimeEq;

use crate::clock::Timestamp;
use crate::endpoint::tokens::{ADMIN_NAME, READ_NAME, Role, TokenBook, new_secret, token_hash};

/// The operator token's file in the data directory: mutations and reads.
pub const OPERATOR_TOKEN_FILE: &str = "operator.token";
/// The read token's file in the data directory: reads only.
pub const READ_TOKEN_FILE: &str = "read.token";

/// Why tokens could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file could not be read or created.
    #[error("token file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds no usable token.
    #[error("token file {path} is empty or not one line of printable text")]
    Empty {
        /// The file.
        path: String,
    },
    /// Others can read the file.
    #[error("token file {path} is readable by other users (mode {mode:o}); run `chmod 600 {path}`")]
    TooOpen {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
}

/// Who a valid token belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The token's name (`admin` for operator.token, `read` for read.token).
    pub name: String,
    /// What it may do.
    pub role: Role,
}

/// What a presented token is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Valid now.
    Valid(Identity),
    /// A named token past its expiry.
    Expired(String),
    /// Not a token of this endpoint (never issued, or revoked).
    Unknown,
}

/// The endpoint's two tokens.
#[derive(Clone)]
pub struct Tokens {
    /// Operator token.
    pub operator: String,
    /// Read token.
    pub read: String,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokens(..)")
    }
}

impl Tokens {
    /// Reads the tokens from `dir`, creating each missing one (mode 0600).
    pub fn load_or_create(dir: &Path) -> Result<Tokens, TokenError> {
        // Private from the start: it holds the tokens and the state database.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| TokenError::Io {
                path: dir.display().to_string(),
                source,
            })?;
        Ok(Tokens {
            operator: load_or_create(&dir.join(OPERATOR_TOKEN_FILE))?,
            read: load_or_create(&dir.join(READ_TOKEN_FILE))?,
        })
    }

    /// What `presented` is at `now`: one of the two data-directory tokens, a named token
    /// of `book`, or nothing.
    pub fn check(&self, presented: &str, book: &TokenBook, now: Timestamp) -> Verdict {
        if let Some(role) = self.role(presented) {
            let name = if role == Role::Operator {
                ADMIN_NAME
            } else {
                READ_NAME
            };
            return Verdict::Valid(Identity {
                name: name.to_string(),
                role,
            });
        }
        match book.find(&token_hash(presented)) {
            Some(t) if t.live(now) => Verdict::Valid(Identity {
                name: t.name.clone(),
                role: t.role,
            }),
            Some(t) => Verdict::Expired(t.name.clone()),
            None => Verdict::Unknown,
        }
    }

    /// The role a presented token grants, if any (constant-time in the token's content).
    pub fn role(&self, presented: &str) -> Option<Role> {
        let p = presented.as_bytes();
        let op = p.ct_eq(self.operator.as_bytes());
        let rd = p.ct_eq(self.read.as_bytes());
        if bool::from(op) {
            Some(Role::Operator)
        } else if bool::from(rd) {
            Some(Role::Reader)
        } else {
            None
        }
    }
}

fn load_or_create(path: &Path) -> Result<String, TokenError> {
    let io = |source| TokenError::Io {
        path: path.display().to_string(),
        source,
    };
    let token = new_secret();
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut f) => {
            f.write_all(format!("{token}\n").as_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_token_file(path),
        Err(e) => Err(io(e)),
    }
}

/// Reads a token file (the first line, trimmed); refuses one that others can read.
pub fn read_token_file(path: &Path) -> Result<String, TokenError> {
    let shown = path.display().to_string();
    let io = |source| TokenError::Io {
        path: shown.clone(),
        source,
    };
    // The mode of the file opened, not of whatever the path named a moment before (and
    // one path lookup, not three: a 100-endpoint command reads 100 of these).
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mode = file.metadata().map_err(io)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(TokenError::TooOpen {
            path: shown.clone(),
            mode,
        });
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io)?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() || token.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(TokenError::Empty { path: shown });
    }
    Ok(token)
}

/// Where the CLI looks for the operator token when none is given.
pub fn default_token_path(data_dir: &Path) -> PathBuf {
    data_dir.join(OPERATOR_TOKEN_FILE)
}

/// The token in an `Authorization` header: the `Bearer` scheme, in any case (RFC 9110
/// makes scheme names case-insensitive).
pub fn bearer(header: &str) -> Option<&str> {
    let (scheme, rest) = header.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| rest.trim())
        .filter(|t| !t.is_empty())
}

/// Where a client's token comes from, first found wins.
#[derive(Clone, Debug, Default)]
pub struct TokenSources<'a> {
    /// `--token-file`.
    pub token_file: Option<&'a Path>,
    /// `GPUBOARD_TOKEN`.
    pub env: Option<String>,
    /// The data directory, whose operator.token is used when the endpoint is on this host.
    pub data_dir: Option<&'a Path>,
    /// Whether the endpoint is on this host (a loopback address or this host's name).
    pub local: bool,
    /// The config file's `token_file`.
    pub config_file: Option<&'a Path>,
}

/// The token a client sends: `--token-file`, else `GPUBOARD_TOKEN`, else the data
/// directory's operator.token for an endpoint on this host, else the config's
/// `token_file`; `None` when there is none of them.
pub fn client_token(s: &TokenSources<'_>) -> Result<Option<String>, TokenError> {
    if let Some(path) = s.token_file {
        return read_token_file(path).map(Some);
    }
    if let Some(t) = s.env.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
        return Ok(Some(t.to_string()));
    }
    if s.local
        && let Some(dir) = s.data_dir
    {
        let path = default_token_path(dir);
        if path.exists() {
            return read_token_file(&path).map(Some);
        }
    }
    s.config_file.map(read_token_file).transpose()
}

/// Whether `host` (from an endpoint URL) is this host: a loopback address, `localhost`,
/// or this host's name.
pub fn is_local_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    if h.eq_ignore_ascii_case("localhost") {
        return true;
    }
    if let Ok(ip) = h.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .is_ok_and(|name| name.trim().eq_ignore_ascii_case(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_created_private_and_kept() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("state");
        let t = Tokens::load_or_create(&dir).unwrap();
        assert_eq!(t.operator.len(), 64);
        let dir_mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        assert_ne!(t.operator, t.read);
        let mode = std::fs::metadata(dir.join(OPERATOR_TOKEN_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = Tokens::load_or_create(&dir).unwrap();
        assert_eq!(again.operator, t.operator);
        assert_eq!(t.role(&t.operator), Some(Role::Operator));
        assert_eq!(t.role(&t.read), Some(Role::Reader));
        assert_eq!(t.role("nope"), None);
        assert_eq!(t.role(""), None);
    }

    #[test]
    fn open_token_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, "abc\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            read_token_file(&p),
            Err(TokenError::TooOpen { .. })
        ));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_token_file(&p).unwrap(), "abc");
        std::fs::write(&p, "\n").unwrap();
        assert!(matches!(read_token_file(&p), Err(TokenError::Empty { .. })));
    }

    #[test]
    fn bearer_schemes_are_case_insensitive() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer abc"), Some("abc"));
        assert_eq!(bearer("BEARER  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
        assert_eq!(bearer("Bearerabc"), None);
    }

    #[test]
    fn named_tokens_carry_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let t = Tokens::load_or_create(dir.path()).unwrap();
        let mut book = TokenBook::default();
        let alice = book
            .add("alice", Role::Operator, Some(Timestamp(10)), Timestamp(0))
            .unwrap();
        let admin = |name: &str, role| {
            Verdict::Valid(Identity {
                name: name.to_string(),
                role,
            })
        };
        assert_eq!(
            t.check(&t.operator, &book, Timestamp(0)),
            admin("admin", Role::Operator)
        );
        assert_eq!(
            t.check(&t.read, &book, Timestamp(0)),
            admin("read", Role::Reader)
        );
        assert_eq!(
            t.check(&alice, &book, Timestamp(5)),
            admin("alice", Role::Operator)
        );
        assert_eq!(
            t.check(&alice, &book, Timestamp(10)),
            Verdict::Expired("alice".into())
        );
        book.revoke("alice").unwrap();
        assert_eq!(t.check(&alice, &book, Timestamp(5)), Verdict::Unknown);
    }

    #[test]
    fn client_tokens_come_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let t = Tokens::load_or_create(dir.path()).unwrap();
        let file = dir.path().join("mine");
        std::fs::write(&file, "from-file\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut s = TokenSources {
            token_file: Some(&file),
            env: Some("from-env".into()),
            data_dir: Some(dir.path()),
            local: true,
            config_file: None,
        };
        assert_eq!(client_token(&s).unwrap().as_deref(), Some("from-file"));
        s.token_file = None;
        assert_eq!(client_token(&s).unwrap().as_deref(), Some("from-env"));
        s.env = None;
        assert_eq!(client_token(&s).unwrap(), Some(t.operator.clone()));
        s.local = false;
        assert_eq!(client_token(&s).unwrap(), None);
        s.config_file = Some(&file);
        assert_eq!(client_token(&s).unwrap().as_deref(), Some("from-file"));
        assert!(is_local_host("127.0.0.1") && is_local_host("[::1]") && is_local_host("localhost"));
        assert!(!is_local_host("10.1.2.3"));
    }
}
