//! The fleet's endpoints as the console's config file lists them (`[[endpoints]]` of
//! `~/.config/gpuboard/config.toml`, or `--config FILE`): name, URL, token file, kind.
//! The console owns that file and its checks (`console::config`, a layer the CLI may not
//! import); this reads only the endpoints and lets every other key be.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Deserialize;

/// The part of the config file the CLI reads.
#[derive(Debug, Default, Deserialize)]
pub(super) struct FleetConfig {
    /// The endpoints, in file order.
    #[serde(default)]
    pub endpoints: Vec<ConfigEndpoint>,
}

/// One `[[endpoints]]` entry.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct ConfigEndpoint {
    /// Its name (what `ENDPOINT/ID` and `--endpoint NAME` say).
    pub name: String,
    /// Its base URL.
    pub url: String,
    /// The file holding its bearer token.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The SHA-256 fingerprint pinned for its https certificate.
    #[serde(default)]
    pub tls_fingerprint: Option<String>,
    /// A PEM file of CA certificates to trust for it instead.
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    /// `gpuboard`, or a read-only engine source the CLI skips.
    #[serde(default = "gpuboard_kind")]
    pub kind: String,
}

fn gpuboard_kind() -> String {
    "gpuboard".to_string()
}

impl FleetConfig {
    /// Reads `path`, or the default file when it exists, or nothing.
    pub(super) fn load(path: Option<&Path>) -> anyhow::Result<FleetConfig> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => match dirs::config_dir().map(|d| d.join("gpuboard").join("config.toml")) {
                Some(p) if p.exists() => p,
                _ => return Ok(FleetConfig::default()),
            },
        };
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read config {}", path.display()))?;
        let cfg: FleetConfig =
            toml::from_str(&text).with_context(|| format!("config {}", path.display()))?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_endpoints_and_lets_the_rest_be() {
        let c: FleetConfig = toml::from_str(
            "theme = \"light\"\n[[endpoints]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\n[[endpoints]]\nname = \"r\"\nurl = \"http://x\"\nkind = \"ray\"\ntoken_file = \"/t\"\n",
        )
        .unwrap();
        assert_eq!(c.endpoints.len(), 2);
        assert_eq!(c.endpoints[0].kind, "gpuboard");
        assert_eq!(c.endpoints[1].token_file.as_deref(), Some(Path::new("/t")));
        let e = FleetConfig::load(Some(Path::new("/nonexistent/config.toml"))).unwrap_err();
        assert!(e.to_string().contains("cannot read config"), "{e}");
    }
}
