//! The endpoints a client command acts on: `--endpoint` is repeatable: a URL,
//! `NAME=URL`, or the name of a `[[endpoints]]` entry of the config file (the console's,
//! with its token files). With no `--endpoint` the config's gpuboard endpoints are the
//! fleet, else the default local endpoint. Claim ids read and print as `ENDPOINT/ID` when
//! more than one endpoint is in play.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use super::{Conn, Usage, token_for, token_source, trust_for};
use crate::client::{Client, TlsTrust};
use crate::endpoint::auth;
use crate::ids::ClaimId;
use crate::sources::kind::EndpointsFile;
use crate::sources::{EndpointConfig, SourceKind};
use crate::wire::default_endpoint;

/// One endpoint of the fleet.
#[derive(Clone, Debug)]
pub(super) struct Member {
    /// Its name: the config's, the one given as `NAME=URL`, else `HOST:PORT`.
    pub name: String,
    /// Its client, with its token.
    pub client: Client,
    /// How it is named again on a command line (`--endpoint ARG`).
    pub arg: String,
}

/// The endpoints of one command.
#[derive(Clone, Debug)]
pub(super) struct Members {
    pub list: Vec<Member>,
    /// The `--config FILE` the command was given, if any.
    pub config: Option<std::path::PathBuf>,
}

impl Members {
    /// Whether ids need their endpoint to be told apart.
    pub fn many(&self) -> bool {
        self.list.len() > 1
    }

    /// How a claim of `member` is written: `NAME/ID` with several endpoints, else `ID`.
    pub fn label(&self, member: usize, id: ClaimId) -> String {
        match self.list.get(member) {
            Some(m) if self.many() => format!("{}/{id}", m.name),
            _ => id.to_string(),
        }
    }

    /// The member named `name`.
    pub fn named(&self, name: &str) -> anyhow::Result<usize> {
        self.list
            .iter()
            .position(|m| m.name == name)
            .ok_or_else(|| {
                Usage(format!(
                    "no endpoint named `{name}`; the fleet has: {}",
                    self.names()
                ))
                .into()
            })
    }

    /// The options that name `member` again on a command line (` --config F --endpoint E`).
    pub fn again(&self, member: usize) -> String {
        let config = self
            .config
            .as_ref()
            .map(|c| format!(" --config {}", c.display()))
            .unwrap_or_default();
        let arg = self.list.get(member).map_or("?", |m| m.arg.as_str());
        format!("{config} --endpoint {arg}")
    }

    /// The members' names, comma-separated.
    pub fn names(&self) -> String {
        self.list
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The member and id a claim reference points at.
    pub fn resolve(&self, r: &ClaimRef) -> anyhow::Result<usize> {
        match &r.endpoint {
            Some(name) => self.named(name),
            None if self.many() => Err(Usage(format!(
                "claim {} is ambiguous with {} endpoints: write ENDPOINT/{} (endpoints: {})",
                r.id,
                self.list.len(),
                r.id,
                self.names()
            ))
            .into()),
            None => Ok(0),
        }
    }

    /// The one endpoint of a command that acts on one.
    pub fn single(&self) -> anyhow::Result<&Member> {
        match self.list.as_slice() {
            [one] => Ok(one),
            _ => Err(Usage(format!(
                "this command acts on one endpoint; name it with --endpoint (the fleet has: {})",
                self.names()
            ))
            .into()),
        }
    }
}

/// A claim as the user names it: `ID`, or `ENDPOINT/ID`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRef {
    /// The endpoint's name, when given.
    pub endpoint: Option<String>,
    /// The id on that endpoint.
    pub id: ClaimId,
}

impl FromStr for ClaimRef {
    type Err = String;
    fn from_str(s: &str) -> Result<ClaimRef, String> {
        let (endpoint, id) = match s.rsplit_once('/') {
            Some((e, id)) if !e.is_empty() => (Some(e.to_string()), id),
            _ => (None, s),
        };
        let id = id.parse().map_err(|_| {
            format!("`{s}` is not a claim: write ID or ENDPOINT/ID (ids are whole numbers)")
        })?;
        Ok(ClaimRef { endpoint, id })
    }
}

impl fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.endpoint {
            Some(e) => write!(f, "{e}/{}", self.id),
            None => write!(f, "{}", self.id),
        }
    }
}

/// The endpoints `conn` names, each with its client, by the one rule the console and
/// `status` follow too (`sources::kind::chosen`): the `--endpoint`s when any is given
/// (a bare NAME is the config's entry), else the config's gpuboard endpoints. Only when
/// no config file lists any endpoint is it the default local one: a config whose entries
/// are all engines (or that names the wrong kind) is refused, never replaced by an
/// endpoint nobody named.
pub(super) fn members(conn: &Conn) -> anyhow::Result<Members> {
    let timeout = Duration::from_secs(conn.timeout.max(1));
    let file = EndpointsFile::load(conn.config.as_deref()).map_err(|e| Usage(e.to_string()))?;
    let (path, config) = match &file {
        Some((p, f)) => (Some(p.as_path()), f.endpoints.as_slice()),
        None => (None, &[][..]),
    };
    let mut named: Vec<Spec> = Vec::new();
    for e in conn
        .endpoint
        .iter()
        .map(|e| e.trim())
        .filter(|e| !e.is_empty())
    {
        named.push(Spec::of_arg(e, path, config)?);
    }
    let mut specs = if named.is_empty() {
        config
            .iter()
            .filter(|ep| ep.kind == SourceKind::Gpuboard)
            .map(Spec::from_config)
            .collect()
    } else {
        named
    };
    if specs.is_empty() {
        if let Some(path) = path.filter(|_| !config.is_empty() || conn.config.is_some()) {
            let have: Vec<String> = config
                .iter()
                .map(|e| format!("{} ({})", e.name, e.kind))
                .collect();
            return Err(Usage(format!(
                "config {} names no gpuboard endpoint (it has: {}): claims and their commands go to gpuboard endpoints; add one, or name one with --endpoint URL",
                path.display(),
                if have.is_empty() { "none".to_string() } else { have.join(", ") }
            ))
            .into());
        }
        let url = default_endpoint();
        specs.push(Spec::given(&host_port(&url), &url));
    }
    let mut list: Vec<Member> = Vec::new();
    // One HTTP client for every plain-HTTP endpoint (its pool keeps a connection per
    // endpoint): building one per endpoint was a measurable part of a 100-endpoint claim.
    let mut plain: Option<Client> = None;
    for Spec {
        name,
        url,
        token_file,
        trust,
        arg,
    } in specs
    {
        if name.is_empty() || name.contains('/') {
            return Err(Usage(format!(
                "endpoint name `{name}` ({url}): names are non-empty and have no `/`"
            ))
            .into());
        }
        if list.iter().any(|m| m.name == name) {
            return Err(Usage(format!("endpoint `{name}` is named twice")).into());
        }
        let (tok, from) = match &token_file {
            Some(path) => (
                Some(auth::read_token_file(path)?),
                format!("token_file {} of [[endpoints]] {name}", path.display()),
            ),
            None => (token_for(conn, &url)?, token_source(conn, &url)),
        };
        let shared = match &plain {
            Some(p) => p.sharing(&url, tok.clone())?,
            None => None,
        };
        let mut client = if let Some(c) = shared {
            c
        } else {
            let trust = trust_for(conn, &url, trust);
            let c = Client::with_trust(&url, tok.clone(), timeout, &trust)?;
            if plain.is_none() && url_is_plain(&url) {
                plain = Some(c.clone());
            }
            c
        };
        if tok.is_some() {
            client = client.with_token_source(from);
        }
        list.push(Member { name, client, arg });
    }
    Ok(Members {
        list,
        config: conn.config.clone(),
    })
}

/// One endpoint named on the command line or in the config, before it is connected.
struct Spec {
    name: String,
    url: String,
    token_file: Option<std::path::PathBuf>,
    trust: TlsTrust,
    /// How the command line named it.
    arg: String,
}

impl Spec {
    fn given(name: &str, url: &str) -> Spec {
        Spec {
            name: name.to_string(),
            url: url.to_string(),
            token_file: None,
            trust: TlsTrust::default(),
            arg: format!("{name}={url}"),
        }
    }

    fn from_config(ep: &EndpointConfig) -> Spec {
        Spec {
            name: ep.name.clone(),
            url: ep.url.clone(),
            token_file: ep.token_file.clone(),
            trust: ep.trust(),
            arg: ep.name.clone(),
        }
    }

    /// One `--endpoint` argument: `NAME=URL`, a URL, or the name of a config entry.
    fn of_arg(e: &str, path: Option<&Path>, config: &[EndpointConfig]) -> Result<Spec, Usage> {
        if let Some((name, url)) = e.split_once('=') {
            return Ok(Spec::given(name.trim(), url.trim()));
        }
        if e.contains("://") {
            return Ok(Spec::given(&host_port(e), e));
        }
        let Some(ep) = config.iter().find(|ep| ep.name == e) else {
            let known: Vec<&str> = config.iter().map(|ep| ep.name.as_str()).collect();
            return Err(Usage(format!(
                "--endpoint {e}: not a URL (write http://HOST:PORT or https://HOST:PORT) and no [[endpoints]] entry of {} has that name (known: {})",
                path.map_or_else(
                    || "the config (there is none)".to_string(),
                    |p| p.display().to_string()
                ),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )));
        };
        if ep.kind != SourceKind::Gpuboard {
            return Err(Usage(format!(
                "endpoint {e} is a {} source: only gpuboard endpoints take claims",
                ep.kind
            )));
        }
        Ok(Spec::from_config(ep))
    }
}

/// Whether `url` is a plain-HTTP one (its client may be shared).
fn url_is_plain(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|u| u.scheme() == "http")
}

/// `HOST:PORT` of a URL, as the name of an endpoint given by URL only.
fn host_port(url: &str) -> String {
    reqwest::Url::parse(url).ok().map_or_else(
        || url.to_string(),
        |u| match (u.host_str(), u.port_or_known_default()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_string(),
            _ => url.to_string(),
        },
    )
}
