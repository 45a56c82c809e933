//! What kind of source an operator names, the `[[endpoints]]` entry that names one, and
//! `connect`, the one place a configured source is built (for the console, `status` and
//! the CLI alike).
//!
//! A kind is an enum, never a string to match: an unknown kind in a config file is an
//! error naming the kinds there are, wherever the file is read.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Source;
use super::boinc::{BoincConfig, BoincSource};
use super::endpoint::Http;
use super::http::Auth;
use super::kubernetes::{KubernetesConfig, KubernetesSource};
use super::prometheus::{PrometheusConfig, PrometheusSource};
use super::ray::{RayConfig, RaySource};
use super::slurm::{SlurmConfig, SlurmSource};
use super::ssh::{SshConfig, SshSource};
use crate::client::TlsTrust;

/// What a source is. The first five can be named in a config file; `demo` and `embedded`
/// are the console's own (`--demo`, and the scheduler it runs when nothing is named).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum SourceKind {
    /// A `gpuboard serve` endpoint: read and act (the default in a config).
    #[default]
    Gpuboard,
    /// A Ray dashboard (stop a job).
    Ray,
    /// A Prometheus server with dcgm-exporter metrics: telemetry only.
    Prometheus,
    /// slurmrestd (cancel, hold, release, drain, resume).
    Slurm,
    /// A BOINC client's GUI RPC (update project, GPU mode, suspend and resume tasks).
    Boinc,
    /// A Kubernetes cluster's nodes and pods (read through its kubeconfig).
    Kubernetes,
    /// A host read over SSH with nvidia-smi: telemetry only.
    Ssh,
    /// The simulated fleet of `--demo`.
    Demo,
    /// The scheduler the console runs in-process when no endpoint is named.
    Embedded,
}

impl SourceKind {
    /// The engine the physical-GPU join counts its holders under.
    pub fn gpu_engine(self) -> crate::physical::GpuEngine {
        use crate::physical::GpuEngine;
        match self {
            SourceKind::Gpuboard | SourceKind::Demo | SourceKind::Embedded => GpuEngine::Gpuboard,
            SourceKind::Ray => GpuEngine::Ray,
            // A host read over SSH shows telemetry and processes, no allocations.
            SourceKind::Prometheus | SourceKind::Ssh => GpuEngine::Telemetry,
            SourceKind::Slurm => GpuEngine::Slurm,
            SourceKind::Boinc => GpuEngine::Boinc,
            SourceKind::Kubernetes => GpuEngine::Kubernetes,
        }
    }

    /// The kinds a config file may name, in the order the docs list them.
    pub const CONFIGURABLE: [SourceKind; 7] = [
        SourceKind::Gpuboard,
        SourceKind::Ray,
        SourceKind::Prometheus,
        SourceKind::Slurm,
        SourceKind::Boinc,
        SourceKind::Kubernetes,
        SourceKind::Ssh,
    ];

    /// Its name, as a config file and the screens write it.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Gpuboard => "gpuboard",
            SourceKind::Ray => "ray",
            SourceKind::Prometheus => "prometheus",
            SourceKind::Slurm => "slurm",
            SourceKind::Boinc => "boinc",
            SourceKind::Kubernetes => "kubernetes",
            SourceKind::Ssh => "ssh",
            SourceKind::Demo => "demo",
            SourceKind::Embedded => "embedded",
        }
    }

    /// The configurable kind named `s` (exactly as the docs write it), or an error naming
    /// the kinds a config may name.
    pub fn parse(s: &str) -> Result<SourceKind, UnknownKind> {
        SourceKind::CONFIGURABLE
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownKind(s.to_string()))
    }

    /// Any kind named `s`, the console's own (`demo`, `embedded`) included.
    pub fn named(s: &str) -> Result<SourceKind, UnknownKind> {
        match s {
            "demo" => Ok(SourceKind::Demo),
            "embedded" => Ok(SourceKind::Embedded),
            _ => SourceKind::parse(s),
        }
    }

    /// Whether it is a gpuboard scheduler, which takes claims (an endpoint, the demo, the
    /// embedded one), rather than an engine that owns its GPUs.
    pub fn is_scheduler(self) -> bool {
        matches!(
            self,
            SourceKind::Gpuboard | SourceKind::Demo | SourceKind::Embedded
        )
    }

    /// Whether it reads telemetry only and holds no claims (Prometheus, an SSH host).
    pub fn is_telemetry(self) -> bool {
        matches!(self, SourceKind::Prometheus | SourceKind::Ssh)
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<String> for SourceKind {
    type Error = UnknownKind;
    fn try_from(s: String) -> Result<SourceKind, UnknownKind> {
        SourceKind::parse(&s)
    }
}

impl std::str::FromStr for SourceKind {
    type Err = UnknownKind;
    fn from_str(s: &str) -> Result<SourceKind, UnknownKind> {
        SourceKind::named(s)
    }
}

/// A kind no config may name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "kind `{0}` is not supported; supported: gpuboard, ray, prometheus, slurm, boinc, kubernetes, ssh"
)]
pub struct UnknownKind(pub String);

/// One `[[endpoints]]` entry of the config file.
///
/// ```toml
/// [[endpoints]]
/// name = "gpu-01"
/// url = "https://10.0.0.5:7420"
/// token_file = "/etc/gpuboard/operator.token"
/// tls_fingerprint = "AB:CD:..."   # what `gpuboard serve` printed; or tls_ca = "ca.pem"
/// kind = "gpuboard"               # or ray, prometheus, slurm, boinc, kubernetes, ssh
/// ```
///
/// A `kubernetes` entry names no `url`: `kubeconfig = "FILE"` and `context = "NAME"`
/// (each optional: what kube finds). An `ssh` entry's `url` is the host as ssh takes it,
/// with `ssh_config = "FILE"` optional (`[[ssh]]` entries become these).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// Its name: what the screens show, `ENDPOINT/ID` and `--endpoint NAME` say.
    pub name: String,
    /// Its base URL (for BOINC, the GUI RPC `host:port`); none for Kubernetes.
    #[serde(default)]
    pub url: String,
    /// The file holding its bearer token (for BOINC, the GUI RPC password file).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// What it is (default `gpuboard`).
    #[serde(default)]
    pub kind: SourceKind,
    /// For an https endpoint: its certificate's SHA-256 fingerprint.
    #[serde(default)]
    pub tls_fingerprint: Option<String>,
    /// For an https endpoint: a PEM file of CA certificates.
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    /// For Kubernetes: the kubeconfig file (default: what kube finds).
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// For Kubernetes: the kubeconfig context (default: the file's current one).
    #[serde(default)]
    pub context: Option<String>,
    /// For SSH: an ssh config file (`ssh -F`) instead of `~/.ssh/config`.
    #[serde(default)]
    pub ssh_config: Option<PathBuf>,
}

impl EndpointConfig {
    /// An entry for a source named on the command line (`NAME=URL`, `--ray URL`).
    pub fn named(name: &str, url: &str, kind: SourceKind) -> EndpointConfig {
        EndpointConfig {
            name: name.to_string(),
            url: url.to_string(),
            token_file: None,
            kind,
            tls_fingerprint: None,
            tls_ca: None,
            kubeconfig: None,
            context: None,
            ssh_config: None,
        }
    }

    /// The entry `--kubeconfig FILE` / `--kube-context NAME` name, called `kubernetes`.
    pub fn kubernetes(kubeconfig: Option<PathBuf>, context: Option<String>) -> EndpointConfig {
        let mut e = EndpointConfig::named("kubernetes", "", SourceKind::Kubernetes);
        e.kubeconfig = kubeconfig;
        e.context = context;
        e
    }

    /// The trust its own entry names for https.
    pub fn trust(&self) -> TlsTrust {
        TlsTrust {
            fingerprint: self.tls_fingerprint.clone(),
            ca_file: self.tls_ca.clone(),
        }
    }

    /// The token in its `token_file` (not for BOINC, whose file is a GUI RPC password
    /// the adapter reads itself).
    pub fn file_token(&self) -> Result<Option<String>, BadEntry> {
        if self.kind == SourceKind::Boinc {
            return Ok(None);
        }
        self.token_file
            .as_deref()
            .map(|p| read_secret(&self.name, p))
            .transpose()
    }
}

/// An `[[endpoints]]` entry that cannot be used as written.
#[derive(Debug, thiserror::Error)]
pub enum BadEntry {
    /// Its token file cannot be read.
    #[error("endpoint {name}: cannot read token_file {}: {source}", path.display())]
    TokenFile {
        /// The entry.
        name: String,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Its name is empty or has a `/` (which `ENDPOINT/ID` needs free).
    #[error("endpoint name `{name}` ({url}): names are non-empty and have no `/`")]
    Name {
        /// The name as written.
        name: String,
        /// Its URL.
        url: String,
    },
    /// Two entries share a name.
    #[error("endpoint `{0}` is named twice")]
    Twice(String),
}

fn read_secret(name: &str, path: &Path) -> Result<String, BadEntry> {
    std::fs::read_to_string(path)
        .map(|t| t.trim().to_string())
        .map_err(|source| BadEntry::TokenFile {
            name: name.to_string(),
            path: path.to_path_buf(),
            source,
        })
}

/// Checks that the entries' names are usable and distinct.
pub fn check_names(entries: &[EndpointConfig]) -> Result<(), BadEntry> {
    for (i, e) in entries.iter().enumerate() {
        if e.name.trim().is_empty() || e.name.contains('/') {
            return Err(BadEntry::Name {
                name: e.name.clone(),
                url: e.url.clone(),
            });
        }
        if entries[..i].iter().any(|o| o.name == e.name) {
            return Err(BadEntry::Twice(e.name.clone()));
        }
    }
    Ok(())
}

/// The one rule for which sources a command uses (console, `status` and the CLI alike):
/// the sources named on the command line when it names any; else the config file's
/// `[[endpoints]]` (of `--config FILE`, or the default file). The config file is read
/// either way, so a kind it does not know is refused either way, and it resolves a bare
/// `--endpoint NAME`.
pub fn chosen(
    on_command_line: Vec<EndpointConfig>,
    config: &[EndpointConfig],
) -> Vec<EndpointConfig> {
    if on_command_line.is_empty() {
        config.to_vec()
    } else {
        on_command_line
    }
}

/// Builds the source an entry names, with the `token` and `trust` resolved for it (for a
/// gpuboard endpoint, by its caller's rules; for an engine, its `token_file`); a gpuboard
/// endpoint's watch asks for telemetry at most every `telemetry_pace` when given.
///
/// # Errors
/// A bad URL, or a kind that no config names (`demo`, `embedded`).
pub fn connect(
    entry: &EndpointConfig,
    token: Option<String>,
    trust: &TlsTrust,
    timeout: Duration,
    telemetry_pace: Option<Duration>,
) -> anyhow::Result<Arc<dyn Source>> {
    let name = entry.name.clone();
    let url = entry.url.as_str();
    if url.trim().is_empty() && entry.kind != SourceKind::Kubernetes {
        anyhow::bail!(
            "endpoint {name}: `url` is required for a {} source",
            entry.kind
        );
    }
    Ok(match entry.kind {
        SourceKind::Gpuboard => Arc::new(Http::with_trust(
            &name,
            url,
            token,
            timeout,
            trust,
            telemetry_pace,
        )?),
        SourceKind::Ray => {
            let mut c = RayConfig::new(url);
            c.name = name;
            c.token = token;
            c.timeout = timeout;
            Arc::new(RaySource::new(c)?)
        }
        SourceKind::Slurm => {
            let mut c = SlurmConfig::new(url);
            c.name = name;
            c.token = token;
            c.timeout = timeout;
            Arc::new(SlurmSource::new(c)?)
        }
        SourceKind::Boinc => {
            let mut c = BoincConfig::new(url);
            c.name = name;
            c.password_file.clone_from(&entry.token_file);
            c.timeout = timeout;
            Arc::new(BoincSource::new(c)?)
        }
        SourceKind::Prometheus => {
            let mut c = PrometheusConfig::new(url);
            c.name = name;
            c.auth = token.map(Auth::Bearer);
            c.timeout = timeout;
            Arc::new(PrometheusSource::new(c)?)
        }
        SourceKind::Kubernetes => {
            let mut c = KubernetesConfig::new();
            c.name = name;
            c.kubeconfig.clone_from(&entry.kubeconfig);
            c.context.clone_from(&entry.context);
            c.timeout = timeout.max(c.timeout);
            Arc::new(KubernetesSource::new(c))
        }
        SourceKind::Ssh => {
            let host = super::ssh::hosts::parse(url, &format!(" (endpoint {name})"))?;
            let mut c = SshConfig::new(&name, &host.destination);
            c.options.config_file.clone_from(&entry.ssh_config);
            c.interval = timeout.max(c.interval);
            // Just within the fetch's timeout, so a host that answers in time has its first
            // reading in its first answer (`status --once` too); a slower one shows as
            // connecting until it answers.
            c.first_wait = timeout.saturating_sub(Duration::from_millis(200));
            Arc::new(SshSource::new(c)?)
        }
        SourceKind::Demo | SourceKind::Embedded => {
            anyhow::bail!(
                "endpoint {name}: a {} source is not configured by URL",
                entry.kind
            )
        }
    })
}

/// The `[[endpoints]]` of a config file, and nothing else of it (the console reads the
/// rest): what the CLI reads.
#[derive(Debug, Default, Deserialize)]
pub struct EndpointsFile {
    /// The entries, in file order.
    #[serde(default)]
    pub endpoints: Vec<EndpointConfig>,
    /// Node names that are one host (`[aliases]`), for joining the entries' GPUs.
    #[serde(default)]
    pub aliases: std::collections::BTreeMap<String, String>,
}

/// `~/.config/gpuboard/config.toml`, the config file read when none is named.
pub fn default_config_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("gpuboard").join("config.toml"))
}

/// A config file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// It cannot be read.
    #[error("cannot read config {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not a config (bad TOML, an unknown kind or key in an entry, a bad name).
    #[error("config {}: {why}", path.display())]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong, in the parser's words.
        why: String,
    },
}

impl EndpointsFile {
    /// Reads `path`, or the default file when it exists; `None` when no file was named
    /// and the default does not exist.
    ///
    /// # Errors
    /// A named file that cannot be read, or any file that is not a config.
    pub fn load(path: Option<&Path>) -> Result<Option<(PathBuf, EndpointsFile)>, ConfigFileError> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => match default_config_path() {
                Some(p) if p.exists() => p,
                _ => return Ok(None),
            },
        };
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigFileError::Read {
            path: path.clone(),
            source,
        })?;
        let bad = |why: String| ConfigFileError::Bad {
            path: path.clone(),
            why,
        };
        let file: EndpointsFile = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        check_names(&file.endpoints).map_err(|e| bad(e.to_string()))?;
        Ok(Some((path, file)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_kind_is_one_of_five_and_an_unknown_one_names_them() {
        for k in SourceKind::CONFIGURABLE {
            assert_eq!(SourceKind::parse(k.as_str()).unwrap(), k);
        }
        let e = toml::from_str::<EndpointsFile>(
            "[[endpoints]]\nname = \"a\"\nurl = \"http://x\"\nkind = \"gpuBoard\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("kind `gpuBoard` is not supported"), "{e}");
        assert!(
            e.contains("gpuboard, ray, prometheus, slurm, boinc, kubernetes, ssh"),
            "{e}"
        );
        assert!(
            SourceKind::parse("demo").is_err(),
            "demo is a flag, not a config kind"
        );
    }

    #[test]
    fn an_entry_defaults_to_gpuboard_and_lets_the_rest_of_the_file_be() {
        let f: EndpointsFile = toml::from_str(
            "theme = \"light\"\n[[endpoints]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\n[[endpoints]]\nname = \"r\"\nurl = \"http://x\"\nkind = \"ray\"\ntoken_file = \"/t\"\n",
        )
        .unwrap();
        assert_eq!(f.endpoints[0].kind, SourceKind::Gpuboard);
        assert_eq!(f.endpoints[1].kind, SourceKind::Ray);
        assert_eq!(f.endpoints[1].token_file.as_deref(), Some(Path::new("/t")));
        let e = EndpointsFile::load(Some(Path::new("/nonexistent/config.toml"))).unwrap_err();
        assert!(e.to_string().contains("cannot read config"), "{e}");
    }

    #[test]
    fn a_kubernetes_entry_names_a_kubeconfig_and_context_and_no_url() {
        let f: EndpointsFile = toml::from_str(
            "[[endpoints]]\nname = \"k\"\nkind = \"kubernetes\"\nkubeconfig = \"/k/config\"\ncontext = \"prod\"\n[[endpoints]]\nname = \"r\"\nkind = \"ray\"\n",
        )
        .unwrap();
        let k = &f.endpoints[0];
        assert_eq!(k.kind, SourceKind::Kubernetes);
        assert_eq!(k.kubeconfig.as_deref(), Some(Path::new("/k/config")));
        assert_eq!(k.context.as_deref(), Some("prod"));
        let e = connect(
            &f.endpoints[1],
            None,
            &TlsTrust::default(),
            Duration::from_secs(1),
            None,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("`url` is required for a ray source"), "{e}");
    }

    #[test]
    fn the_command_line_replaces_the_config_when_it_names_any_source() {
        let cfg = vec![EndpointConfig::named("a", "http://a", SourceKind::Gpuboard)];
        let flag = EndpointConfig::named("b", "http://b", SourceKind::Gpuboard);
        assert_eq!(chosen(Vec::new(), &cfg), cfg);
        assert_eq!(chosen(vec![flag.clone()], &cfg), vec![flag]);
    }

    #[test]
    fn names_are_usable_and_distinct() {
        let a = EndpointConfig::named("a", "http://a", SourceKind::Gpuboard);
        let slash = EndpointConfig::named("a/b", "http://a", SourceKind::Gpuboard);
        assert!(check_names(std::slice::from_ref(&a)).is_ok());
        assert!(matches!(check_names(&[slash]), Err(BadEntry::Name { .. })));
        assert!(matches!(
            check_names(&[a.clone(), a]),
            Err(BadEntry::Twice(_))
        ));
    }
}
