//! The console's config file: `~/.config/gpuboard/config.toml`, or `--config FILE`.
//!
//! ```toml
//! theme = "light"          # a built-in name or a path
//! refresh = 2              # seconds
//! keymap = "/path/keys.toml"
//! token_file = "~/.config/gpuboard/alice.token"  # for endpoints with none of their own
//! [[endpoints]]
//! name = "gpu-01"
//! url = "https://10.0.0.5:7420"
//! token_file = "/etc/gpuboard/operator.token"
//! tls_fingerprint = "AB:CD:..."   # what `gpuboard serve` printed; or tls_ca = "ca.pem"
//! kind = "gpuboard"        # or "ray", "prometheus", "slurm", "boinc", "kubernetes" (kubeconfig, context)
//! [aliases]                # node names that are one host, where case and short names do not tell
//! "gpu-node-7" = "n7"
//! [[ssh]]
//! host = "gpu-02"          # or hosts_file = "FILE"; ssh_config = "FILE" optional
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Deserialize;

use crate::sources::EndpointConfig;
use crate::sources::kind::check_names;
use crate::sources::ssh::hosts::SshEntry;

/// The config file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Theme name or path.
    #[serde(default)]
    pub theme: Option<String>,
    /// Refresh interval, seconds.
    #[serde(default)]
    pub refresh: Option<f64>,
    /// A keymap file overriding the built-in keys.
    #[serde(default)]
    pub keymap: Option<PathBuf>,
    /// Endpoints to read (the sources layer's entries, which the CLI reads too).
    #[serde(default)]
    pub endpoints: Vec<EndpointConfig>,
    /// Hosts to read over SSH (`world` adds them to the endpoints).
    #[serde(default)]
    pub ssh: Vec<SshEntry>,
    /// The token file for gpuboard endpoints that name none (after `--token-file`,
    /// `GPUBOARD_TOKEN` and a local endpoint's operator.token).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The certificate fingerprint to pin for https endpoints that name none.
    #[serde(default)]
    pub tls_fingerprint: Option<String>,
    /// A CA file for https endpoints that name neither a fingerprint nor a CA.
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    /// Node names that are one host (alias = name), for joining the sources' GPUs where
    /// case and short names do not tell.
    #[serde(default)]
    pub aliases: std::collections::BTreeMap<String, String>,
}

/// `~/.config/gpuboard`.
pub fn config_dir() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("gpuboard"))
}

/// Where user themes are looked up by name.
pub fn theme_dirs() -> Vec<PathBuf> {
    config_dir().map(|d| d.join("themes")).into_iter().collect()
}

/// Where the console's log goes: the state dir (or data dir) under `gpuboard/`.
pub fn log_dir() -> PathBuf {
    dirs::state_dir()
        .or_else(dirs::data_dir)
        .unwrap_or_else(std::env::temp_dir)
        .join("gpuboard")
}

impl Config {
    /// Reads `path`, or the default file when it exists, or nothing.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Config> {
        let (path, required) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => match config_dir() {
                Some(d) => (d.join("config.toml"), false),
                None => return Ok(Config::default()),
            },
        };
        if !required && !path.exists() {
            return Ok(Config::default());
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read config {}", path.display()))?;
        Config::parse(&text).with_context(|| format!("config {}", path.display()))
    }

    /// Parses and checks config text.
    pub fn parse(text: &str) -> anyhow::Result<Config> {
        let cfg: Config = toml::from_str(text)?;
        check_names(&cfg.endpoints)?;
        Ok(cfg)
    }

    /// The sources the file names: its `[[endpoints]]`, then its `[[ssh]]` hosts (hosts
    /// files read now), every name distinct.
    ///
    /// # Errors
    /// A bad host, a hosts file that cannot be read, a name given twice.
    pub fn world(&self) -> anyhow::Result<Vec<EndpointConfig>> {
        let mut all = self.endpoints.clone();
        all.extend(crate::sources::ssh::hosts::from_config(&self.ssh)?);
        check_names(&all)?;
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let c = Config::parse(
            "theme = \"light\"\nrefresh = 5\n[[endpoints]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\n",
        )
        .unwrap();
        assert_eq!(c.endpoints[0].kind, crate::sources::SourceKind::Gpuboard);
        assert_eq!(c.refresh, Some(5.0));
        let e =
            Config::parse("[[endpoints]]\nname = \"r\"\nurl = \"http://x\"\nkind = \"nomad\"\n")
                .unwrap_err();
        assert!(
            e.to_string().contains("kind `nomad` is not supported"),
            "{e}"
        );
        assert!(Config::parse("colour = 1\n").is_err());
    }

    #[test]
    fn ssh_entries_become_ssh_sources_and_a_bad_one_is_named() {
        use crate::sources::SourceKind::{Gpuboard, Ssh};
        let world = |text: &str| Config::parse(text).and_then(|c| c.world());
        let c = world(
            "[[endpoints]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\n\
             [[ssh]]\nhost = \"alice@gpu-01:2222\"\nssh_config = \"/lab.conf\"\n\
             [[ssh]]\nhost = \"gpu-02\"\nname = \"lab-02\"\n",
        )
        .unwrap();
        let kinds: Vec<_> = c.iter().map(|e| (e.name.as_str(), e.kind)).collect();
        assert_eq!(
            kinds,
            [("a", Gpuboard), ("alice@gpu-01:2222", Ssh), ("lab-02", Ssh)]
        );
        assert_eq!(c[1].url, "ssh://alice@gpu-01:2222");
        let e = world("[[ssh]]\nhost = \"-oProxyCommand=x\"\n").unwrap_err();
        assert!(format!("{e:#}").contains("cannot start with `-`"), "{e:#}");
        let e = Config::parse("[[ssh]]\nhots = \"x\"\n").unwrap_err();
        assert!(format!("{e:#}").contains("unknown field `hots`"), "{e:#}");
        let twice = world("[[ssh]]\nhost = \"g\"\n[[ssh]]\nhost = \"g\"\n").unwrap_err();
        assert!(format!("{twice:#}").contains("named twice"), "{twice:#}");
    }
}
