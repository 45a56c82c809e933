//! The endpoints a client command acts on, and placing a claim across them.
//!
//! `--endpoint` is repeatable: a URL, `NAME=URL`, or the name of a `[[endpoints]]` entry
//! of the config file (the console's, with its token files). With no `--endpoint` the
//! config's gpuboard endpoints are the fleet, else the default local endpoint. Claim ids
//! read and print as `ENDPOINT/ID` when more than one endpoint is in play.
//!
//! A claim with more than one endpoint reads every endpoint's snapshot (conditionally,
//! through the snapshot cache), ranks the endpoints that could take it with the
//! placement policy across hosts (`placement::rank_hosts`), sends it to the best and, on
//! a 409 (the endpoint filled up since it was read: it re-checks, being the authority),
//! to the next, at most `--tries` endpoints.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use clap::Args;

use super::lost_answer::{self, Suspect, answer_of, new_attempt, outcome_of};
use super::snapcache::SnapshotCache;
use super::{Conn, Usage, token_for, token_source, trust_for};
use crate::client::{ClaimOutcome, Client, ClientError, TlsTrust};
use crate::endpoint::auth;
use crate::ids::ClaimId;
use crate::placement::{AttemptAnswer, AttemptStep, Fleet, Policy, decide_attempt, rank_hosts};
use crate::request::ClaimRequest;
use crate::snapshot::Snapshot;
use crate::sources::kind::EndpointsFile;
use crate::sources::{EndpointConfig, SourceKind, fleet_of_snapshot};
use crate::wire::default_endpoint;

/// How a claim is placed across several endpoints.
#[derive(Args, Debug, Clone)]
pub struct PlaceArgs {
    /// Across endpoints: `binpack` (fill the fullest GPU that fits) or `spread` (the
    /// emptiest host). Default: spread when every endpoint spreads, else binpack.
    #[arg(long, value_parser = parse_policy)]
    pub policy: Option<Policy>,
    /// Endpoints to try, best first, when the best one refuses (409).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub tries: u32,
}

impl Default for PlaceArgs {
    fn default() -> PlaceArgs {
        PlaceArgs {
            policy: None,
            tries: 3,
        }
    }
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    match s {
        "binpack" => Ok(Policy::Binpack),
        "spread" => Ok(Policy::Spread),
        _ => Err(format!("`{s}` is not a policy; use binpack or spread")),
    }
}

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

    fn names(&self) -> String {
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
        let trust = trust_for(conn, &url, trust);
        let mut client = Client::with_trust(&url, tok.clone(), timeout, &trust)?;
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

/// Every member's snapshot, read concurrently (through the cache), in member order.
pub(super) async fn read_all(
    members: &Members,
    cache: &SnapshotCache,
) -> Vec<Result<Snapshot, ClientError>> {
    futures::future::join_all(members.list.iter().map(|m| cache.read(&m.client))).await
}

/// A claim sent somewhere in the fleet.
#[derive(Debug)]
pub(super) struct Placed {
    /// The member that took it.
    pub member: usize,
    /// Its answer.
    pub outcome: ClaimOutcome,
    /// Endpoints skipped on the way (unreadable, or refusing), one line each.
    pub skipped: Vec<String>,
}

/// Sends `request` to the best endpoint of `members` for it, falling back to the next on
/// a 409 or an unreachable endpoint, at most `args.tries` endpoints. With one endpoint it
/// is sent there directly. A claim that fits nowhere fails with `DoesNotFit` whose reasons
/// are each endpoint's lines prefixed with its name; with `wait` it is queued on the best
/// endpoint where it could fit later (none when it is infeasible everywhere).
pub(super) async fn place(
    members: &Members,
    request: &ClaimRequest,
    args: &PlaceArgs,
    cache: &SnapshotCache,
) -> Result<Placed, ClientError> {
    if let [one] = members.list.as_slice() {
        let outcome = one.client.claim(request).await?;
        return Ok(Placed {
            member: 0,
            outcome,
            skipped: Vec::new(),
        });
    }
    let reads = read_all(members, cache).await;
    let mut skipped = Vec::new();
    let mut fleets: Vec<Fleet> = Vec::new();
    let mut of_fleet: Vec<usize> = Vec::new();
    let mut spread_all = true;
    for (i, r) in reads.into_iter().enumerate() {
        let name = &members.list[i].name;
        match r.map_err(|e| e.to_string()).and_then(|s| {
            spread_all &= s.endpoint.policy == "spread";
            fleet_of_snapshot(&s).map_err(|e| format!("unreadable snapshot: {e}"))
        }) {
            Ok(f) => {
                fleets.push(f);
                of_fleet.push(i);
            }
            Err(e) => {
                skipped.push(format!("{name}: {e}"));
            }
        }
    }
    if fleets.is_empty() {
        return Err(ClientError::Unreachable {
            endpoint: members.names(),
            detail: format!("no endpoint could be read: {}", skipped.join("; ")),
        });
    }
    let policy = args.policy.unwrap_or(if spread_all {
        Policy::Spread
    } else {
        Policy::Binpack
    });
    let refs: Vec<&Fleet> = fleets.iter().collect();
    let ranking = rank_hosts(&refs, request, policy);
    let mut reasons = Vec::new();
    let mut infeasible = true;
    for (h, no) in &ranking.refused {
        let name = &members.list[of_fleet[*h]].name;
        infeasible &= no.infeasible;
        reasons.extend(no.lines().into_iter().map(|l| format!("{name}: {l}")));
        if no.nodes.is_empty() {
            reasons.push(format!("{name}: no node matches"));
        }
    }
    let tries = usize::try_from(args.tries).unwrap_or(usize::MAX);
    // One label for every endpoint this claim is sent to, so a lost answer can be found.
    let attempt = new_attempt(lost_answer::now());
    let mut request = request.clone();
    attempt.put_on(&mut request.labels);
    let request = &request;
    let mut suspects: Vec<Suspect> = Vec::new();
    let mut landed: Option<(usize, ClaimOutcome)> = None;
    for fit in ranking.fits.iter().take(tries) {
        let member = of_fleet[fit.host];
        let client = &members.list[member].client;
        let name = &members.list[member].name;
        let sent = lost_answer::now();
        let result = client.claim(request).await;
        let mut step = decide_attempt(answer_of(&result), None);
        let mut found = None;
        let asked = step == AttemptStep::Recheck;
        if asked {
            let (what, view) = lost_answer::recheck(client, &attempt).await;
            step = decide_attempt(AttemptAnswer::NoAnswer, Some(what));
            found = view;
        }
        match (step, result) {
            (AttemptStep::Adopt, Err(e)) => {
                if let Some(view) = found {
                    eprintln!(
                        "gpuboard: {name} placed it; its answer was lost ({e}): found it as {} by its label {}",
                        members.label(member, view.id),
                        attempt.label()
                    );
                    landed = Some((member, outcome_of(view)));
                    break;
                }
            }
            (
                _,
                Err(ClientError::DoesNotFit {
                    reasons: r,
                    infeasible: inf,
                    ..
                }),
            ) => {
                infeasible &= inf;
                let line = format!("{name}: refused since it was read ({})", r.join(" | "));
                skipped.push(line.clone());
                reasons.push(line);
            }
            (AttemptStep::TryNext, Err(e)) => {
                let line = if asked {
                    format!(
                        "{name}: {e}; asked again, it holds no claim labelled {}",
                        attempt.label()
                    )
                } else {
                    format!("{name}: {e}")
                };
                skipped.push(line.clone());
                reasons.push(line);
            }
            (AttemptStep::TryNextSuspect, Err(e)) => {
                let line = format!("{name}: {e}; still no answer when asked again");
                skipped.push(line.clone());
                reasons.push(line);
                suspects.push(Suspect {
                    member,
                    error: e.to_string(),
                    sent,
                });
            }
            (_, Err(e)) => return Err(e),
            // Answered: that is the claim.
            (_, Ok(outcome)) => {
                landed = Some((member, outcome));
                break;
            }
        }
    }
    if !suspects.is_empty() {
        let (adopted, lines) = lost_answer::settle(
            members,
            &suspects,
            &attempt,
            request.ttl,
            landed.as_ref().map(|p| p.0),
        )
        .await;
        for l in lines {
            eprintln!("gpuboard: {l}");
        }
        landed = landed.or(adopted);
    }
    // `--wait`: fitting nowhere now, it queues on the best endpoint where it could fit
    // later (the first in ranking order whose refusal is not "never").
    if landed.is_none() && request.wait {
        let later = ranking
            .fits
            .first()
            .map(|f| f.host)
            .or_else(|| ranking.could_wait());
        if let Some(h) = later {
            let member = of_fleet[h];
            let outcome = members.list[member].client.claim(request).await?;
            return Ok(Placed {
                member,
                outcome,
                skipped,
            });
        }
    }
    if let Some((member, outcome)) = landed {
        return Ok(Placed {
            member,
            outcome,
            skipped,
        });
    }
    let tried = ranking.fits.len().min(tries);
    let detail = if tried > 0 {
        format!(
            "does not fit now: {tried} endpoint(s) refused it since they were read, {} cannot take it",
            ranking.refused.len()
        )
    } else if infeasible {
        "infeasible (no device of any endpoint could ever hold it)".to_string()
    } else {
        "does not fit now on any endpoint".to_string()
    };
    Err(ClientError::DoesNotFit {
        detail,
        reasons,
        infeasible: infeasible && tried == 0,
        no_fit: None,
    })
}
