//! Placing a claim across the endpoints of a command (`members`).
//!
//! A claim with more than one endpoint reads every endpoint's capacity (`GET
//! /v1/capacity`, its snapshot from an endpoint without the route; conditionally, through
//! the snapshot cache, all at once), ranks the endpoints that could take it with the
//! placement policy across hosts (`placement::rank_hosts`), sends it to the best and, on
//! a 409 (the endpoint filled up since it was read: it re-checks, being the authority),
//! to the next. When every one refused, the fleet is read again and the claim goes on
//! while some endpoint has room and `--place-within` has not passed (`--tries` caps the
//! sends when given). Each send carries an idempotency key, and a lost answer is asked
//! for again before the next is tried (`fleet`, `lost_answer`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use clap::Args;

use super::lost_answer;
use super::members::Members;
use super::snapcache::SnapshotCache;
use crate::client::{ClaimOutcome, Client, ClientError};
use crate::fleet::{self, ClaimAnswer as _, Lost, new_attempt};
use crate::placement::{AttemptId, AttemptStep, Fleet, HostRanking, Policy, decide_attempt};
use crate::request::ClaimRequest;
use crate::snapshot::Snapshot;
use crate::wire::capacity::CapacitySummary;

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
    for (i, r) in reads.into_iter().enumerate() {
        let name = &members.list[i].name;
        match r.map_err(|e| e.to_string()).and_then(|c| {
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
    let refs: Vec<&Fleet> = fleets.iter().collect();
    let (ranking, policy) = crate::fleet::rank_members(&refs, request, policy);
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
    suspects: Vec<Lost>,
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
        // Sent, and asked again below, through the fleet protocol's endpoint.
        let first = fleet::Endpoint::claim(client, &self.request, &key, client.timeout()).await;
        let answer = first.reply().attempt();
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
                self.suspects.push(Lost {
                    endpoint: member,
                    attempt: self.attempt.clone(),
                    sent,
                    request: self.request.clone(),
                    key,
                    move_id: None,
                    error: error.clone(),
                    adopt: false,
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
        let suspect = self.suspects.iter().any(|s| s.endpoint == member);
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
        let suspects = std::mem::take(&mut p.suspects);
        let (adopted, lines) = lost_answer::settle(members, suspects, landed.is_some()).await;
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
