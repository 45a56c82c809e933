//! A gpuboard endpoint (API v1) as a console source: its state mirrored through the delta
//! watch (`watch::Mirror`), actions through `client::Client`; the client's typed errors
//! become the console's `Failure` keeping the endpoint's own words (the broken rule, the
//! reasons a claim does not fit), with a hint about the token file when the endpoint
//! refuses the token.

use std::sync::Arc;
use std::time::Duration;

use crate::request::ClaimRequest;
use futures::future::BoxFuture;
use tokio::sync::Notify;

use super::watch::{Mirror, RealPace};
use super::{Action, Failure, Fetched, Outcome, Source, plan_on_snapshot};
use crate::client::{Client, ClientError, TlsTrust};
use crate::clock::SystemClock;
use crate::placement::Allocation;
use crate::snapshot::ClaimView;

/// A gpuboard endpoint.
pub struct Http {
    name: String,
    client: Client,
    /// Whether a token was configured, to say what to fix when it is refused.
    has_token: bool,
    mirror: Mirror,
    /// Shown beside the source (how the console found it).
    note: Option<String>,
}

impl Http {
    /// An endpoint at `url` (`http://host:port`), with an optional bearer token (read
    /// from the endpoint's `token_file` in the console config).
    pub fn new(
        name: &str,
        url: &str,
        token: Option<String>,
        timeout: Duration,
    ) -> anyhow::Result<Http> {
        Http::with_trust(name, url, token, timeout, &TlsTrust::default(), None)
    }

    /// The same, trusting an `https://` endpoint as `trust` says, its watch asking for
    /// telemetry at most every `telemetry_pace` when given (`Client::with_telemetry_pace`).
    pub fn with_trust(
        name: &str,
        url: &str,
        token: Option<String>,
        timeout: Duration,
        trust: &TlsTrust,
        telemetry_pace: Option<Duration>,
    ) -> anyhow::Result<Http> {
        let has_token = token.is_some();
        let mut client = Client::with_trust(url, token, timeout, trust)
            .map_err(|e| anyhow::anyhow!("endpoint {name}: {e}"))?;
        if let Some(pace) = telemetry_pace {
            client = client.with_telemetry_pace(pace);
        }
        let words = name.to_string();
        let mirror = Mirror::new(
            name,
            Arc::new(client.clone()),
            Box::new(move |e| failure(&words, has_token, e)),
            Arc::new(SystemClock),
            Arc::new(RealPace),
        );
        Ok(Http {
            name: name.to_string(),
            client,
            has_token,
            mirror,
            note: None,
        })
    }

    /// The same with a note shown beside the source.
    #[must_use]
    pub fn with_note(mut self, note: String) -> Http {
        self.note = Some(note);
        self
    }

    fn failure(&self) -> impl Fn(ClientError) -> Failure + Send + 'static {
        let name = self.name.clone();
        let has_token = self.has_token;
        move |e| failure(&name, has_token, e)
    }
}

/// The console's view of a client error: the endpoint's words, plus what to do about a
/// refused token.
pub(super) fn failure(source: &str, has_token: bool, e: ClientError) -> Failure {
    match e {
        ClientError::BadEndpoint { url, detail } => Failure::Unreachable {
            detail: format!("bad endpoint `{url}`: {detail}"),
            sent: false,
        },
        ClientError::Unreachable {
            endpoint,
            detail,
            sent,
        } => Failure::Unreachable {
            detail: format!("{endpoint}: {detail}"),
            sent,
        },
        ClientError::Timeout { secs, .. } => Failure::Timeout(secs.saturating_mul(1000)),
        ClientError::Unauthorized { detail } => {
            let hint = if has_token {
                format!(
                    "the token in the token_file of endpoint `{source}` in the console config \
                     is not one this endpoint issued; copy its operator.token there"
                )
            } else {
                format!(
                    "no token is configured for `{source}`: add it under [[endpoints]] in the \
                     console config with token_file = the endpoint's operator.token"
                )
            };
            Failure::Unauthorized(format!("{detail} ({hint})"))
        }
        ClientError::Forbidden { detail } => Failure::Unauthorized(format!(
            "{detail} (the token_file of endpoint `{source}` holds a read token; actions need \
             the operator token)"
        )),
        ClientError::Invalid {
            rule,
            rule_number,
            field,
            detail,
        } => {
            let mut at = Vec::new();
            match (rule, rule_number) {
                (Some(r), Some(n)) => at.push(format!("rule {n} `{r}`")),
                (Some(r), None) => at.push(format!("rule `{r}`")),
                _ => {}
            }
            if let Some(f) = field {
                at.push(format!("field `{f}`"));
            }
            Failure::Invalid(if at.is_empty() {
                detail
            } else {
                format!("{detail} ({})", at.join(", "))
            })
        }
        ClientError::DoesNotFit {
            detail, reasons, ..
        } => {
            // The summary usually lists the reasons already; add any it leaves out.
            let missing: Vec<&String> = reasons
                .iter()
                .filter(|r| !detail.contains(r.as_str()))
                .collect();
            Failure::Refused(if missing.is_empty() {
                detail
            } else {
                format!(
                    "{detail} | {}",
                    missing
                        .iter()
                        .map(|r| r.as_str())
                        .collect::<Vec<_>>()
                        .join(" | ")
                )
            })
        }
        ClientError::Conflict { error, detail } if error == crate::wire::IN_FLIGHT => {
            Failure::InFlight(detail)
        }
        ClientError::Conflict { detail, .. } => Failure::Refused(detail),
        ClientError::NotFound { detail } => Failure::Http {
            status: 404,
            message: detail,
        },
        ClientError::Server { status, detail } => Failure::Http {
            status,
            message: detail,
        },
        ClientError::Decode { detail, .. } => Failure::Decode(detail),
        e @ ClientError::NotGpuboard { .. } => Failure::Unreachable {
            detail: e.to_string(),
            sent: true,
        },
    }
}

impl Source for Http {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> super::SourceKind {
        super::SourceKind::Gpuboard
    }
    fn can_act(&self) -> bool {
        true
    }
    fn note(&self) -> Option<String> {
        self.note.clone()
    }
    fn forecast(
        &self,
    ) -> Option<BoxFuture<'static, Result<crate::wire::forecast::Forecast, Failure>>> {
        let client = self.client.clone();
        let failure = self.failure();
        Some(Box::pin(
            async move { client.forecast().await.map_err(failure) },
        ))
    }
    fn preview(
        &self,
        action: crate::wire::forecast::PreviewAction,
    ) -> Option<BoxFuture<'static, Result<crate::wire::forecast::Preview, Failure>>> {
        let client = self.client.clone();
        let failure = self.failure();
        Some(Box::pin(async move {
            client.preview(&action).await.map_err(failure)
        }))
    }
    /// The mirrored state; an endpoint whose commit failed is shown as failed, with its
    /// reason, as the embedded scheduler is (its snapshots stay at the durable state).
    fn fetch(&self) -> BoxFuture<'static, Result<Fetched, Failure>> {
        let fetch = self.mirror.fetch();
        // `Unchanged` means the last snapshot still stands.
        let last_failed = self
            .mirror
            .with_last(|s| s.endpoint.store_failed.clone())
            .flatten();
        Box::pin(async move {
            let got = fetch.await?;
            let failed = match &got {
                Fetched::Snapshot(s) | Fetched::Telemetry(s) => s.endpoint.store_failed.clone(),
                Fetched::Unchanged => last_failed,
            };
            match failed {
                Some(reason) => Err(Failure::Refused(format!(
                    "the endpoint's writing state failed ({reason}); it refuses changes until it \
                     is restarted from its last durable state"
                ))),
                None => Ok(got),
            }
        })
    }
    fn changed(&self) -> Option<Arc<Notify>> {
        Some(self.mirror.changed())
    }
    fn history(&self) -> Option<Arc<dyn super::history::SourceHistory>> {
        let (name, has_token) = (self.name.clone(), self.has_token);
        Some(Arc::new(super::endpoint_history::EndpointHistory::new(
            self.client.clone(),
            Arc::new(move |e| failure(&name, has_token, e)),
        )))
    }
    /// A preview on the fleet rebuilt from the last snapshot (API v1 has no planning
    /// route): the endpoint re-checks the claim when it is submitted, and may place it
    /// elsewhere or refuse it if the fleet changed since.
    fn plan(&self, request: ClaimRequest) -> BoxFuture<'static, Result<Allocation, Failure>> {
        let last = self.mirror.last();
        Box::pin(async move {
            let snap = last.ok_or_else(|| {
                Failure::Refused("no snapshot from this endpoint yet to preview against".into())
            })?;
            plan_on_snapshot(&snap, &request).map_err(|e| match e {
                Failure::Refused(why) => Failure::Refused(format!(
                    "preview on the last snapshot: {why} (the endpoint re-checks when you claim)"
                )),
                other => other,
            })
        })
    }
    fn act(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>> {
        self.act_with(self.client.clone(), action)
    }
    /// The same request with the move id in `wire::MOVE_HEADER`: the endpoint audits it.
    fn act_in_move(
        &self,
        action: Action,
        move_id: &str,
    ) -> BoxFuture<'static, Result<Outcome, Failure>> {
        self.act_with(self.client.for_move(move_id), action)
    }

    fn claim_keyed(
        &self,
        request: ClaimRequest,
        key: String,
        move_id: Option<String>,
        patience: Duration,
    ) -> BoxFuture<'static, Result<Outcome, Failure>> {
        let client = match &move_id {
            Some(id) => self.client.for_move(id),
            None => self.client.clone(),
        };
        Box::pin(claim_through(
            client,
            request,
            key,
            patience,
            self.failure(),
        ))
    }
}

impl Http {
    /// Carries out `action` through `client` (plain, or tagged with a move id).
    fn act_with(
        &self,
        client: Client,
        action: Action,
    ) -> BoxFuture<'static, Result<Outcome, Failure>> {
        // API v1 answers a move with the new place only; the old one is the last seen.
        let from = match &action {
            Action::Move { id, .. } => self.mirror.with_last(|s| s.claim(*id).map(place)).flatten(),
            _ => None,
        };
        Box::pin(act_through(client, action, from, self.failure()))
    }
}

/// Carries out `action` through `client` (over HTTP, or relayed to an SSH host's serve),
/// its errors read by `fail`; `from` is a moved claim's place as last seen.
pub(super) async fn act_through(
    client: Client,
    action: Action,
    from: Option<String>,
    fail: impl Fn(ClientError) -> Failure,
) -> Result<Outcome, Failure> {
    Ok(match action {
        Action::Engine(a) => {
            return Err(Failure::ReadOnly(super::not_an_engine(&a.verb)));
        }
        Action::Claim { request } => {
            let made = client.claim(&request).await.map_err(fail)?;
            Outcome::Claimed(Box::new(made.claim().clone()))
        }
        Action::Release { id } => {
            let gone = client.release(id).await.map_err(fail)?;
            Outcome::Released {
                id,
                place: gone.claim.filter(|_| gone.released).map(|c| place(&c)),
            }
        }
        Action::Move { id, target } => {
            let moved = client.move_claim(id, &target).await.map_err(fail)?;
            Outcome::Moved {
                id,
                from: from.unwrap_or_else(|| "its old place".to_string()),
                to: place(&moved),
            }
        }
        Action::Cordon {
            node,
            index,
            cordoned,
        } => {
            if cordoned {
                client.cordon(&node, index).await
            } else {
                client.uncordon(&node, index).await
            }
            .map_err(fail)?;
            Outcome::Cordoned {
                node,
                index,
                cordoned,
            }
        }
        Action::ResetProject { project } => {
            client.reset_project(&project).await.map_err(fail)?;
            Outcome::Reset { project }
        }
        Action::SetShare { project, share } => {
            client.set_share(&project, share).await.map_err(fail)?;
            Outcome::ShareSet { project, share }
        }
    })
}

/// A claim sent with its idempotency `key` through `client`, waiting up to `patience`.
pub(super) async fn claim_through(
    client: Client,
    request: ClaimRequest,
    key: String,
    patience: Duration,
    fail: impl Fn(ClientError) -> Failure,
) -> Result<Outcome, Failure> {
    let made = client
        .patiently(patience)
        .claim_keyed(&request, Some(&key))
        .await
        .map_err(fail)?;
    Ok(Outcome::Claimed(Box::new(made.claim().clone())))
}

/// `node:0,1`, or `pending`.
pub fn place(c: &ClaimView) -> String {
    match &c.node {
        Some(n) => format!(
            "{n}:{}",
            c.shares
                .iter()
                .map(|s| s.device.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
        None => "pending".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keyed_claim_still_committing_is_in_flight_not_refused() {
        let e = ClientError::Conflict {
            error: crate::wire::IN_FLIGHT.into(),
            detail: "the first request with this key is still being committed".into(),
        };
        assert!(matches!(failure("lab", true, e), Failure::InFlight(_)));
        let e = ClientError::Conflict {
            error: "conflict".into(),
            detail: "claim 3 is not placed".into(),
        };
        assert!(matches!(failure("lab", true, e), Failure::Refused(_)));
    }

    #[test]
    fn refused_tokens_say_what_to_fix() {
        let e = ClientError::Unauthorized {
            detail: "the token is not valid for this endpoint".into(),
        };
        let f = failure("lab", true, e.clone()).to_string();
        assert!(f.starts_with("unauthorized: the token is not valid"), "{f}");
        assert!(f.contains("token_file of endpoint `lab`"), "{f}");
        let f = failure("lab", false, e).to_string();
        assert!(f.contains("no token is configured for `lab`"), "{f}");
        let f = failure(
            "lab",
            true,
            ClientError::Forbidden {
                detail: "read only".into(),
            },
        );
        assert!(
            matches!(&f, Failure::Unauthorized(m) if m.contains("read token")),
            "{f}"
        );
    }

    #[test]
    fn rules_and_reasons_stay_in_the_message() {
        let f = failure(
            "lab",
            true,
            ClientError::Invalid {
                rule: Some("unknown-field".into()),
                rule_number: Some(8),
                field: Some("colour".into()),
                detail: "unknown field `colour`".into(),
            },
        );
        assert_eq!(
            f,
            Failure::Invalid(
                "unknown field `colour` (rule 8 `unknown-field`, field `colour`)".into()
            )
        );
        let f = failure(
            "lab",
            true,
            ClientError::DoesNotFit {
                detail: "does not fit now: node a: full".into(),
                reasons: vec!["node a: full".into(), "node b: cordoned".into()],
                infeasible: false,
                no_fit: None,
            },
        );
        assert_eq!(
            f,
            Failure::Refused("does not fit now: node a: full | node b: cordoned".into())
        );
        let f = failure(
            "lab",
            true,
            ClientError::Timeout {
                endpoint: "http://h:1/".into(),
                secs: 2,
            },
        );
        assert_eq!(f, Failure::Timeout(2000));
    }

    #[test]
    fn only_http_urls_make_a_source() {
        let t = Duration::from_secs(1);
        assert!(Http::new("a", "http://127.0.0.1:7420", None, t).is_ok());
        let Err(e) = Http::new("a", "ftp://h", None, t) else {
            panic!("ftp accepted");
        };
        assert!(e.to_string().contains("only http://"), "{e}");
    }
}
