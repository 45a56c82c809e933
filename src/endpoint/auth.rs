//! Bearer tokens: an operator token for mutations, a read token for reads. Generated on
//! the endpoint's first start into the data directory (mode 0600), read by the CLI from
//! there, from `--token-file`, or from `GPUBOARD_TOKEN`. Compared in constant time.

use std::fmt::Write as _;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use subtle::ConstantTimeEq;

/// The operator token's file in the data directory: mutations and reads.
pub const OPERATOR_TOKEN_FILE: &str = "operator.token";
/// The read token's file in the data directory: reads only.
pub const READ_TOKEN_FILE: &str = "read.token";
/// Bytes of randomness in a token (hex-encoded on disk and on the wire).
const TOKEN_BYTES: usize = 32;

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

/// What a request may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Reads and mutations.
    Operator,
    /// Reads only.
    Reader,
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
    let mut bytes = [0u8; TOKEN_BYTES];
    rand::fill(&mut bytes);
    let token = bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    });
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
    let meta = std::fs::metadata(path).map_err(|source| TokenError::Io {
        path: shown.clone(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(TokenError::TooOpen { path: shown, mode });
    }
    let text = std::fs::read_to_string(path).map_err(|source| TokenError::Io {
        path: shown.clone(),
        source,
    })?;
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
}
