//! The endpoint's TLS: a self-signed certificate generated on first start (rcgen) and kept
//! in the data directory as `tls.crt` and `tls.key` (mode 0600), or the operator's own
//! files; served with rustls (ring). Clients pin its SHA-256 fingerprint, which
//! `gpuboard serve` prints at start and `gpuboard doctor` shows.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::wire::tls_fingerprint;

/// The generated certificate's file in the data directory.
pub const CERT_FILE: &str = "tls.crt";
/// The generated key's file in the data directory.
pub const KEY_FILE: &str = "tls.key";

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no usable certificate or key.
    #[error("{path}: {detail}")]
    Pem {
        /// The file.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// The certificate could not be made.
    #[error("cannot generate a certificate: {0}")]
    Generate(String),
    /// rustls refused the certificate and key.
    #[error("the certificate and key do not make a TLS configuration: {0}")]
    Config(String),
}

/// A certificate chain and its key, ready to serve.
pub struct ServerCert {
    /// The chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's key.
    pub key: PrivateKeyDer<'static>,
}

impl std::fmt::Debug for ServerCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServerCert({})", self.fingerprint())
    }
}

impl ServerCert {
    /// The leaf certificate's SHA-256 fingerprint.
    pub fn fingerprint(&self) -> String {
        self.chain
            .first()
            .map(|c| tls_fingerprint(c.as_ref()))
            .unwrap_or_default()
    }

    /// Reads a PEM certificate chain and a PEM private key.
    pub fn from_files(cert: &Path, key: &Path) -> Result<ServerCert, TlsError> {
        let pem = |path: &Path, e: rustls::pki_types::pem::Error| TlsError::Pem {
            path: path.display().to_string(),
            detail: e.to_string(),
        };
        let chain = CertificateDer::pem_file_iter(cert)
            .map_err(|e| pem(cert, e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem(cert, e))?;
        if chain.is_empty() {
            return Err(TlsError::Pem {
                path: cert.display().to_string(),
                detail: "no CERTIFICATE block".to_string(),
            });
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| pem(key, e))?;
        Ok(ServerCert { chain, key })
    }

    /// The data directory's certificate, made on first use for `names` (host names and
    /// addresses the endpoint is reached by). Returns whether it was made now.
    pub fn load_or_create(dir: &Path, names: &[String]) -> Result<(ServerCert, bool), TlsError> {
        let cert = dir.join(CERT_FILE);
        let key = dir.join(KEY_FILE);
        if cert.exists() && key.exists() {
            return Ok((ServerCert::from_files(&cert, &key)?, false));
        }
        let made = rcgen::generate_simple_self_signed(names.to_vec())
            .map_err(|e| TlsError::Generate(e.to_string()))?;
        write_private(&key, made.signing_key.serialize_pem().as_bytes())?;
        write_private(&cert, made.cert.pem().as_bytes())?;
        Ok((ServerCert::from_files(&cert, &key)?, true))
    }

    /// The rustls server configuration (HTTP/1.1 only).
    pub fn server_config(self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(self.chain, self.key)
            .map_err(|e| TlsError::Config(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), TlsError> {
    let io = |source| TlsError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)
}

/// The fingerprint of the certificate the data directory `dir` holds, if any.
pub fn local_fingerprint(dir: &Path) -> Option<String> {
    let cert = CertificateDer::from_pem_file(dir.join(CERT_FILE)).ok()?;
    Some(tls_fingerprint(cert.as_ref()))
}

/// The names a generated certificate covers: localhost, the loopback addresses, this
/// host's name and the listen address.
pub fn certificate_names(host: &str, listen: std::net::IpAddr) -> Vec<String> {
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    let mut extras = vec![host.to_string()];
    if !listen.is_unspecified() {
        extras.push(listen.to_string());
    }
    for extra in extras {
        if !extra.is_empty() && !names.contains(&extra) {
            names.push(extra);
        }
    }
    names
}

/// Where the data directory's certificate is.
pub fn cert_path(dir: &Path) -> PathBuf {
    dir.join(CERT_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_certificate_is_kept_private_and_reused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let names = certificate_names("gpu-01", "10.0.0.5".parse().unwrap());
        assert!(names.contains(&"gpu-01".to_string()) && names.contains(&"10.0.0.5".to_string()));
        let (first, made) = ServerCert::load_or_create(dir.path(), &names).unwrap();
        assert!(made);
        let (again, made) = ServerCert::load_or_create(dir.path(), &names).unwrap();
        assert!(!made);
        assert_eq!(first.fingerprint(), again.fingerprint());
        assert_eq!(
            local_fingerprint(dir.path()).as_deref(),
            Some(first.fingerprint().as_str())
        );
        for f in [CERT_FILE, KEY_FILE] {
            let mode = std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        assert!(first.server_config().is_ok());
        std::fs::write(dir.path().join("bad.crt"), "not pem").unwrap();
        assert!(matches!(
            ServerCert::from_files(&dir.path().join("bad.crt"), &dir.path().join(KEY_FILE)),
            Err(TlsError::Pem { .. })
        ));
    }
}
