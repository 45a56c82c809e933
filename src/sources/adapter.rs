//! What every engine adapter (Ray, Prometheus, Slurm, BOINC) shares: the shell holding
//! its configuration, its way to the peer and its clock; the secret-hiding `Debug` helper;
//! the refusal messages; and `Adapter`, whose blanket `impl Source` gives every adapter
//! the same answers: engines own their scheduling, so `plan` always refuses, and each
//! adapter says only how it reads its peer and which actions it carries out (`engine_adapter!`
//! says it for an adapter whose only actions are its engine's).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::error::SourceError;
use super::kind::SourceKind;
use super::{Action, Failure, Fetched, Outcome, Source};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::placement::Allocation;
use crate::request::ClaimRequest;
use crate::snapshot::Snapshot;
use crate::wire::forecast::Forecast;

/// An engine adapter: what it is, how it reads its peer and what it does with an action.
/// Every adapter is a `Source` through the blanket impl below.
pub trait Adapter: Clone + Send + Sync + 'static {
    /// Its kind.
    const KIND: SourceKind;
    /// Whether it takes any of gpuboard's own actions (BOINC's update project); engine
    /// actions are offered by kind (`actions::offers`), not by this flag.
    const CAN_ACT: bool = false;
    /// The name operators see.
    fn source_name(&self) -> &str;
    /// Reads the peer into a snapshot.
    fn read(&self) -> impl Future<Output = Result<Snapshot, SourceError>> + Send + '_;
    /// Carries out an action, or refuses it in the engine's words.
    fn carry_out(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>>;
    /// The engine's own expected starts of its waiting work, where it gives them
    /// (`Source::forecast`); `None` (the default) for engines that give none.
    fn engine_forecast(&self) -> Option<BoxFuture<'static, Result<Forecast, Failure>>> {
        None
    }
}

/// What an engine that gives no expected starts answers (`engine_adapter!` without
/// `forecast =`).
pub fn no_forecast<T>(_: &T) -> Option<BoxFuture<'static, Result<Forecast, Failure>>> {
    None
}

/// `impl Adapter` for an engine adapter whose only actions are its engine actions (Ray,
/// Slurm): named by its shell's config, read with its own `fetch`, `Action::Engine` carried
/// out with its own `engine_act`, and every other action refused in `$refuse`'s words.
macro_rules! engine_adapter {
    ($source:ty, $kind:expr, $refuse:path) => {
        $crate::sources::adapter::engine_adapter!(
            $source,
            $kind,
            $refuse,
            forecast = $crate::sources::adapter::no_forecast
        );
    };
    ($source:ty, $kind:expr, $refuse:path, forecast = $forecast:path) => {
        impl $crate::sources::adapter::Adapter for $source {
            const KIND: $crate::sources::SourceKind = $kind;
            fn source_name(&self) -> &str {
                &self.shell.config.name
            }
            fn read(
                &self,
            ) -> impl ::std::future::Future<
                Output = ::std::result::Result<
                    $crate::snapshot::Snapshot,
                    $crate::sources::error::SourceError,
                >,
            > + Send
            + '_ {
                <$source>::fetch(self)
            }
            fn carry_out(
                &self,
                action: $crate::sources::Action,
            ) -> ::futures::future::BoxFuture<
                'static,
                ::std::result::Result<$crate::sources::Outcome, $crate::sources::Failure>,
            > {
                match action {
                    $crate::sources::Action::Engine(a) => {
                        let source = ::std::clone::Clone::clone(self);
                        ::std::boxed::Box::pin(async move {
                            Ok($crate::sources::Outcome::Engine(
                                source.engine_act(&a).await?,
                            ))
                        })
                    }
                    other => $crate::sources::adapter::act_refused($refuse(other.verb())),
                }
            }
            fn engine_forecast(
                &self,
            ) -> ::std::option::Option<
                ::futures::future::BoxFuture<
                    'static,
                    ::std::result::Result<
                        $crate::wire::forecast::Forecast,
                        $crate::sources::Failure,
                    >,
                >,
            > {
                $forecast(self)
            }
        }
    };
}
pub(super) use engine_adapter;

impl<A: Adapter> Source for A {
    fn name(&self) -> &str {
        self.source_name()
    }
    fn kind(&self) -> SourceKind {
        A::KIND
    }
    fn can_act(&self) -> bool {
        A::CAN_ACT
    }
    fn fetch(&self) -> BoxFuture<'static, Result<Fetched, Failure>> {
        let source = self.clone();
        Box::pin(async move { Ok(source.read().await?.into()) })
    }
    fn plan(&self, _request: ClaimRequest) -> BoxFuture<'static, Result<Allocation, Failure>> {
        plan_refused(self.source_name(), A::KIND)
    }
    fn act(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>> {
        self.carry_out(action)
    }
    fn forecast(&self) -> Option<BoxFuture<'static, Result<Forecast, Failure>>> {
        self.engine_forecast()
    }
}

/// An engine adapter's fixed parts: the configuration the operator gave, how the peer is
/// reached (an HTTP client, a checked address), and the clock that stamps snapshots.
#[derive(Clone)]
pub struct Shell<C, P> {
    /// The configuration.
    pub config: C,
    /// The way to the peer.
    pub peer: P,
    clock: Arc<dyn Clock>,
}

impl<C, P> Shell<C, P> {
    /// A shell on `clock` (`wall_clock()` outside tests).
    pub fn new(config: C, peer: P, clock: Arc<dyn Clock>) -> Shell<C, P> {
        Shell {
            config,
            peer,
            clock,
        }
    }

    /// The time a snapshot taken now carries.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

/// The wall clock, for the adapters' `new`.
pub fn wall_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

/// Shows whether a secret is set, never the secret itself (`Some("..")` or `None`), for
/// `Debug` output.
pub fn hidden<T>(secret: Option<&T>) -> Option<&'static str> {
    secret.map(|_| "..")
}

/// The display name: the configured one, or the peer's host when none was given.
pub fn name_or_host(name: &str, base: &reqwest::Url) -> String {
    if name.is_empty() {
        base.host_str().unwrap_or_default().to_string()
    } else {
        name.to_string()
    }
}

/// Runs `work` within `timeout`; past it, a timeout error naming `url`.
pub async fn within<T>(
    timeout: Duration,
    url: String,
    work: impl Future<Output = Result<T, SourceError>>,
) -> Result<T, SourceError> {
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| SourceError::Timeout { url, timeout })?
}

/// What an engine says when asked to act where it owns the work: who owns it, that
/// gpuboard cannot do `action`, and how to do it instead.
pub fn refusal(owner: &str, action: &str, instead: &str) -> String {
    format!("{owner}; gpuboard cannot {action} here. {instead}")
}

/// `Source::plan` of an engine source: it places nothing.
pub fn plan_refused(
    name: &str,
    kind: SourceKind,
) -> BoxFuture<'static, Result<Allocation, Failure>> {
    let why = format!("{name} is a {kind} source: it places nothing");
    Box::pin(async move { Err(Failure::ReadOnly(why)) })
}

/// `Source::act` refusing with the engine's words.
pub fn act_refused(why: String) -> BoxFuture<'static, Result<Outcome, Failure>> {
    Box::pin(async move { Err(Failure::ReadOnly(why)) })
}

/// The projects an engine's claims name (Slurm accounts, Kubernetes namespaces), with their
/// running and pending counts. Engines keep no gpuboard shares, so each has the default.
pub(crate) fn projects_of(
    claims: &[crate::snapshot::ClaimView],
) -> Vec<crate::snapshot::ProjectView> {
    use crate::snapshot::{ClaimState, ProjectView};
    let mut projects: std::collections::BTreeMap<String, ProjectView> =
        std::collections::BTreeMap::new();
    for c in claims {
        let p = projects
            .entry(c.project.clone())
            .or_insert_with(|| ProjectView {
                name: c.project.clone(),
                share: crate::scheduler::DEFAULT_SHARE,
                ..ProjectView::default()
            });
        match c.state {
            ClaimState::Placed => p.running += 1,
            ClaimState::Pending => p.pending += 1,
        }
    }
    projects.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_show() {
        let token = Some("s3cret".to_string());
        assert_eq!(format!("{:?}", hidden(token.as_ref())), "Some(\"..\")");
        assert_eq!(hidden::<String>(None), None);
    }

    #[test]
    fn refusals_name_owner_action_and_way() {
        assert_eq!(
            refusal("X owns these GPUs", "move claim 3", "Use X."),
            "X owns these GPUs; gpuboard cannot move claim 3 here. Use X."
        );
    }
}
