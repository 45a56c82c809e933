//! The endpoints a client command acts on, and placing a claim across them.
//!
//! `--endpoint` is repeatable: a URL, `NAME=URL`, or the name of a `[[endpoints]]` entry
//! of the config file (the console's, with its token files). With no `--endpoint` the
//! config's gpuboard endpoints are the fleet, else the default local endpoint. Claim ids
//! read and print as `ENDPOINT/ID` when more than one endpoint is in play.
//!
//! A claim with more than one endpoint reads every endpoint's capacity (`GET
//! /v1/capacity`, its snapshot from an endpoint without the route; conditionally, through
//! the snapshot cache, all at once), ranks the endpoints that could take it with the
//! placement policy across hosts (`placement::rank_hosts`), sends it to the best and, on
//! a 409 (the endpoint filled up since it was read: it re-checks, being the authority),
//! to the next. When every one refused, the fleet is read again and the claim goes on
//! while some endpoint has room and `--place-within` has not passed (`--tries` caps the
//! sends when given). Each send carries an idempotency key (`lost_answer`).

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use clap::Args;

use super::lost_answer::{self, Suspect, answer_of, new_attempt};
use super::snapcache::SnapshotCache;
use super::{Conn, Usage, token_for, token_source, trust_for};
use crate::client::{ClaimOutcome, Client, ClientError, TlsTrust};
use crate::endpoint::auth;
use crate::ids::ClaimId;
use crate::placement::{
    AttemptId, AttemptStep, Fleet, HostRanking, Policy, decide_attempt, rank_hosts,
};
use crate::request::ClaimRequest;
use crate::snapshot::Snapshot;
use crate::sources::kind::EndpointsFile;
use crate::sources::{EndpointConfig, SourceKind};
use crate::wire::capacity::CapacitySummary;
use crate::wire::default_endpoint;

/// How a claim is placed across several endpoints.
#[derive(Args, Debug, Clone)]
pub struct PlaceArgs {
    /// Across endpoints: `binpack` (fill the fullest GPU that fits) or `spread` (the
    /// emptiest host). Default: spread when every endpoint spreads, else binpack.
    #[arg(long, value_parser = parse_policy)]
    pub policy: Option<Policy>,
    /// At most this many sends across the fleet (each endpoint that refuses counts one).
    /// Default: no cap; `--place-within` bounds the claim.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub tries: Option<u32>,
    /// Across endpoints: keep trying for up to this many seconds while some endpoint has
    /// room (each is tried at least once, and one whose answer was lost is asked again).
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_PLACE_WITHIN,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub place_within: u64,
}

/// `--place-within`'s default, in seconds.
pub const DEFAULT_PLACE_WITHIN: u64 = 60;

impl Default for PlaceArgs {
    fn default() -> PlaceArgs {
        PlaceArgs {
            policy: None,
            tries: None,
            place_within: DEFAULT_PLACE_WITHIN,
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

/// Every member's snapshot, read concurrently (through the cache), in member order.
pub(super) async fn read_all(
    members: &Members,
    cache: &SnapshotCache,
) -> Vec<Result<Snapshot, ClientError>> {
    futures::future::join_all(members.list.iter().map(|m| cache.read(&m.client))).await
}

/// Every member's capacity (what placement needs: `GET /v1/capacity`, else its snapshot),
/// read concurrently (through the cache), in member order.
async fn read_capacities(
    members: &Members,
    cache: &SnapshotCache,
) -> Vec<Result<CapacitySummary, ClientError>> {
    let clients: Vec<&Client> = members.list.iter().map(|m| &m.client).collect();
    cache.capacities(&clients).await
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

/// The fleet as read for one round: the ranking, and what could not be read or take it.
struct Round {
    ranking: HostRanking,
    /// Member of each ranked host.
    of_fleet: Vec<usize>,
    /// Each member's revision as read.
    revisions: HashMap<usize, u64>,
    /// The reasons of the endpoints that cannot take it, one line each.
    reasons: Vec<String>,
    /// Lines of the endpoints that could not be read.
    unread: Vec<String>,
    /// No device anywhere could ever hold it.
    infeasible: bool,
}

/// Reads every member and ranks those that could take `request` (with `policy`, else
/// the fleet's default).
async fn read_round(
    members: &Members,
    request: &ClaimRequest,
    policy: Option<Policy>,
    cache: &SnapshotCache,
) -> Result<(Round, Policy), ClientError> {
    let reads = read_capacities(members, cache).await;
    let mut unread = Vec::new();
    let mut fleets: Vec<Fleet> = Vec::new();
    let mut of_fleet: Vec<usize> = Vec::new();
    let mut revisions = HashMap::new();
    let mut spread_all = true;
    for (i, r) in reads.into_iter().enumerate() {
        let name = &members.list[i].name;
        match r.map_err(|e| e.to_string()).and_then(|c| {
            spread_all &= c.policy == "spread";
            revisions.insert(i, c.revision);
            c.fleet().map_err(|e| format!("unreadable capacity: {e}"))
        }) {
            Ok(f) => {
                fleets.push(f);
                of_fleet.push(i);
            }
            Err(e) => unread.push(format!("{name}: {e}")),
        }
    }
    if fleets.is_empty() {
        return Err(ClientError::Unreachable {
            endpoint: members.names(),
            detail: format!("no endpoint could be read: {}", unread.join("; ")),
            sent: false,
        });
    }
    let policy = policy.unwrap_or(if spread_all {
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
    let round = Round {
        ranking,
        of_fleet,
        revisions,
        reasons,
        unread,
        infeasible,
    };
    Ok((round, policy))
}

/// One claim being placed across the fleet: its attempt, its sends so far, and what came
/// of them.
struct Placing<'a> {
    members: &'a Members,
    request: ClaimRequest,
    attempt: AttemptId,
    deadline: Instant,
    sends: u32,
    max_sends: u32,
    /// Endpoints that refused, with the revision they were read at: asked again only once
    /// that moved (else they would refuse again).
    refused_at: HashMap<usize, Option<u64>>,
    suspects: Vec<Suspect>,
    skipped: Vec<String>,
    reasons: Vec<String>,
    infeasible: bool,
}

impl Placing<'_> {
    /// Sends the claim to `member` with a fresh key; an answer that was lost is asked for
    /// again with the same key before anything else is tried. `None`: not there, the next.
    async fn send(
        &mut self,
        member: usize,
        read_at: Option<u64>,
    ) -> Result<Option<ClaimOutcome>, ClientError> {
        let client = &self.members.list[member].client;
        let name = &self.members.list[member].name;
        self.sends += 1;
        let key = self.attempt.key(self.sends);
        let sent = lost_answer::now();
        let first = client.claim_keyed(&self.request, Some(&key)).await;
        let answer = answer_of(&first);
        // After a lost answer: the step, the answer asked again, and the lost one's error.
        let (step, result, lost) = match decide_attempt(answer, None) {
            AttemptStep::Recheck => {
                let lost = first.err().map(|e| e.to_string()).unwrap_or_default();
                let (what, again) =
                    lost_answer::resolve(client, &self.request, &key, self.deadline).await;
                (decide_attempt(answer, Some(what)), again, Some(lost))
            }
            step => (step, first, None),
        };
        let line = match (step, result) {
            (AttemptStep::TryNextSuspect, r) => {
                let error = lost.unwrap_or_default();
                let e = r.err().map(|e| e.to_string()).unwrap_or_default();
                self.suspects.push(Suspect {
                    member,
                    error: error.clone(),
                    sent,
                    key,
                });
                format!("{name}: {error}; still no answer when asked again ({e})")
            }
            (_, Ok(outcome)) => {
                if let Some(lost) = lost {
                    eprintln!(
                        "gpuboard: {name} placed it; its answer was lost ({lost}): found it as {} \
                         by its label {} (asked again with the same key)",
                        self.members.label(member, outcome.claim().id),
                        self.attempt.label()
                    );
                }
                return Ok(Some(outcome));
            }
            (
                _,
                Err(ClientError::DoesNotFit {
                    reasons: r,
                    infeasible: inf,
                    ..
                }),
            ) => {
                self.infeasible &= inf;
                self.refused_at.insert(member, read_at);
                match lost {
                    Some(lost) => format!(
                        "{name}: {lost}; asked again with the same key, it had refused the claim \
                         labelled {} ({})",
                        self.attempt.label(),
                        r.join(" | ")
                    ),
                    None => format!("{name}: refused since it was read ({})", r.join(" | ")),
                }
            }
            (AttemptStep::TryNext, Err(e)) => {
                self.refused_at.insert(member, read_at);
                format!("{name}: {e}")
            }
            (_, Err(e)) => return Err(e),
        };
        self.skipped.push(line.clone());
        self.reasons.push(line);
        Ok(None)
    }

    /// Whether `member`, read at `revision`, may be sent the claim in this round.
    fn may_send(&self, member: usize, revision: Option<u64>) -> bool {
        let suspect = self.suspects.iter().any(|s| s.member == member);
        let unchanged = self
            .refused_at
            .get(&member)
            .is_some_and(|at| at.is_none() || *at == revision);
        !suspect && !unchanged && self.sends < self.max_sends
    }
}

/// Sends `request` to the best endpoint of `members` for it, falling back to the next on
/// a 409 or an unreachable endpoint; once every ranked endpoint refused, the fleet is read
/// again and the claim goes on while some endpoint that changed since it refused has room,
/// until `args.place_within` (or `args.tries` sends) is spent. With one endpoint it is
/// sent there directly. A claim that fits nowhere fails with `DoesNotFit` whose reasons
/// are each endpoint's lines prefixed with its name; with `wait` it is queued on the best
/// endpoint where it could fit later (none when it is infeasible everywhere).
// Left whole for now: the fleet protocol is being moved into its own module, where this
// loop becomes its state machine.
#[allow(clippy::too_many_lines)]
pub(super) async fn place(
    members: &Members,
    request: &ClaimRequest,
    args: &PlaceArgs,
    cache: &SnapshotCache,
) -> Result<Placed, ClientError> {
    if let [one] = members.list.as_slice() {
        // Keyed too, so that the endpoint runs this request once however it is delivered.
        let key = new_attempt(lost_answer::now()).key(1);
        let outcome = one.client.claim_keyed(request, Some(&key)).await?;
        return Ok(Placed {
            member: 0,
            outcome,
            skipped: Vec::new(),
        });
    }
    let deadline = Instant::now() + Duration::from_secs(args.place_within);
    let (mut round, policy) = read_round(members, request, args.policy, cache).await?;
    // One label for every endpoint this claim is sent to, so a lost answer can be found.
    let attempt = new_attempt(lost_answer::now());
    let mut labelled = request.clone();
    attempt.put_on(&mut labelled.labels);
    let mut p = Placing {
        members,
        request: labelled,
        attempt,
        deadline,
        sends: 0,
        max_sends: args.tries.unwrap_or(u32::MAX),
        refused_at: HashMap::new(),
        suspects: Vec::new(),
        skipped: round.unread.clone(),
        reasons: Vec::new(),
        infeasible: round.infeasible,
    };
    let mut landed: Option<(usize, ClaimOutcome)> = None;
    let mut pause = Duration::from_millis(100);
    'rounds: for n in 0.. {
        let mut sent_any = false;
        for fit in &round.ranking.fits {
            let member = round.of_fleet[fit.host];
            let revision = round.revisions.get(&member).copied();
            if !p.may_send(member, revision) || (n > 0 && Instant::now() >= deadline) {
                continue;
            }
            sent_any = true;
            if let Some(outcome) = p.send(member, revision).await? {
                landed = Some((member, outcome));
                break 'rounds;
            }
        }
        if !sent_any || Instant::now() >= deadline || p.sends >= p.max_sends {
            break;
        }
        // Every endpoint that had room refused: read the fleet again, briefly later.
        tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
        pause = (pause * 2).min(Duration::from_secs(1));
        round = match read_round(members, &p.request, Some(policy), cache).await {
            Ok((r, _)) => r,
            Err(_) => break,
        };
    }
    if !p.suspects.is_empty() {
        let (adopted, lines) = lost_answer::settle(
            members,
            &p.suspects,
            (&p.attempt, &p.request),
            landed.as_ref().map(|l| l.0),
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
        let later = round
            .ranking
            .fits
            .first()
            .map(|f| f.host)
            .or_else(|| round.ranking.could_wait());
        if let Some(h) = later {
            let member = round.of_fleet[h];
            let key = p.attempt.key(p.sends + 1);
            let outcome = members.list[member]
                .client
                .claim_keyed(&p.request, Some(&key))
                .await?;
            return Ok(Placed {
                member,
                outcome,
                skipped: p.skipped,
            });
        }
    }
    if let Some((member, outcome)) = landed {
        return Ok(Placed {
            member,
            outcome,
            skipped: p.skipped,
        });
    }
    let mut reasons = round.reasons;
    reasons.extend(p.reasons);
    let tried = p.sends;
    let detail = if tried > 0 {
        format!(
            "does not fit now: {tried} send(s) across the fleet refused it since it was read, {} \
             endpoint(s) cannot take it",
            round.ranking.refused.len()
        )
    } else if round.infeasible {
        "infeasible (no device of any endpoint could ever hold it)".to_string()
    } else {
        "does not fit now on any endpoint".to_string()
    };
    Err(ClientError::DoesNotFit {
        detail,
        reasons,
        infeasible: round.infeasible && p.infeasible && tried == 0,
        no_fit: None,
    })
}
