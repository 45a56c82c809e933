//! What a client trusts on an `https://` endpoint: a pinned SHA-256 certificate fingerprint
//! (the one `gpuboard serve` prints; the endpoint's certificate is usually self-signed)
//! or a CA file. The TLS handshake fails on a mismatch, so no request, and no token, is
//! sent to an endpoint that is not the pinned one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use crate::wire::{normalize_fingerprint, tls_fingerprint};

/// How an `https://` endpoint's certificate is checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsTrust {
    /// The certificate's SHA-256 fingerprint, as `gpuboard serve` prints it.
    pub fingerprint: Option<String>,
    /// A PEM file of CA certificates to verify the endpoint's chain and name against.
    pub ca_file: Option<PathBuf>,
}

impl TlsTrust {
    /// Trust pinned to one fingerprint.
    pub fn pinned(fingerprint: &str) -> TlsTrust {
        TlsTrust {
            fingerprint: Some(fingerprint.to_string()),
            ca_file: None,
        }
    }

    /// Whether nothing is configured.
    pub fn is_empty(&self) -> bool {
        self.fingerprint.is_none() && self.ca_file.is_none()
    }
}

/// Makes ring the process's rustls crypto provider (once; later calls do nothing). The
/// server, this client's configurations and kube already name ring; reqwest (built without a
/// provider of its own, so aws-lc-rs is not compiled in) and kube's platform verifier take
/// the process's provider, and a reqwest client built before one is installed panics.
pub fn install_crypto_provider() {
    // An error only says a provider is installed already: ring, as nothing else is compiled in.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A TLS configuration that trusts no certificate, for clients of `http://` endpoints only.
/// reqwest builds a TLS connector for every client; its default one loads the system's
/// root certificates each time (tens of milliseconds), this one costs microseconds (`None` only if
/// ring refuses the default protocol versions).
pub fn http_only_tls() -> Option<rustls::ClientConfig> {
    static CONFIG: std::sync::OnceLock<Option<rustls::ClientConfig>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .ok()
            .map(|b| {
                b.with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth()
            })
        })
        .clone()
}

/// The last fingerprint mismatch a pinned verifier saw: `(presented, pinned)`.
pub(super) type Mismatch = Arc<Mutex<Option<(String, String)>>>;

/// The rustls client configuration for `trust` (ring as the crypto provider), and the slot
/// where a pinned verifier leaves a mismatch for the error message.
pub(super) fn client_config(trust: &TlsTrust) -> Result<(rustls::ClientConfig, Mismatch), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let mismatch: Mismatch = Arc::default();
    let config = if let Some(given) = &trust.fingerprint {
        let pinned = normalize_fingerprint(given).ok_or_else(|| {
            format!(
                "TLS fingerprint `{given}` is not a SHA-256 fingerprint (64 hex digits, colons \
                 allowed), as `gpuboard serve` and `gpuboard doctor` print it"
            )
        })?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Pinned {
                expected: pinned,
                provider,
                mismatch: Arc::clone(&mismatch),
            }))
            .with_no_client_auth()
    } else if let Some(ca) = &trust.ca_file {
        builder
            .with_root_certificates(roots(ca)?)
            .with_no_client_auth()
    } else {
        return Err(
            "an https:// endpoint needs a pinned certificate fingerprint (--tls-fingerprint, or \
             tls_fingerprint in the console config) or a CA file (--tls-ca, tls_ca)"
                .to_string(),
        );
    };
    Ok((config, mismatch))
}

fn roots(ca: &Path) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    let certs =
        CertificateDer::pem_file_iter(ca).map_err(|e| format!("CA file {}: {e}", ca.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("CA file {}: {e}", ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("CA file {}: {e}", ca.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("CA file {} holds no certificate", ca.display()));
    }
    Ok(roots)
}

/// Accepts exactly the certificate with the pinned fingerprint, whatever its name or
/// issuer (the endpoint's own certificate is self-signed).
#[derive(Debug)]
struct Pinned {
    expected: String,
    provider: Arc<CryptoProvider>,
    mismatch: Mismatch,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let presented = tls_fingerprint(end_entity.as_ref());
        if presented == self.expected {
            return Ok(ServerCertVerified::assertion());
        }
        let message = format!(
            "the endpoint's certificate has fingerprint {presented}, not the pinned {}",
            self.expected
        );
        if let Ok(mut slot) = self.mismatch.lock() {
            *slot = Some((presented, self.expected.clone()));
        }
        Err(rustls::Error::General(message))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
