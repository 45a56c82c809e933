//! The embedded source: the engine in-process, over this machine's GPUs as NVML reports
//! them, with live telemetry, and state kept in the data directory across runs.
//!
//! Without a GPU it serves none and says why (the same reason `gpuboard doctor` gives)
//! and how to see the demo.

use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::{Action, Failure, Fetched, Outcome, Source};
use crate::clock::Clock;
use crate::clock::SystemClock;
use crate::endpoint::engine::{Engine, EngineConfig, EngineError, LocalProcesses};
use crate::endpoint::live::{LiveConfig, hostname};
use crate::placement::{Allocation, Policy};
use crate::request::ClaimRequest;
use crate::scheduler::{SchedulerConfig, Submitted, claim_view};
use crate::store::claims::SyncMode;
use crate::telemetry::{BackendStatus, SamplerConfig};
use crate::units::Bytes;

/// What the console adds when this machine has no GPU.
pub const DEMO_HINT: &str = "run `gpuboard --demo` to see the demo fleet";

/// The in-process engine over local nodes. It ticks on its own timer (leases expire,
/// waiting claims are placed) like `gpuboard serve`; reading it changes nothing.
pub struct Embedded {
    name: String,
    note: Option<String>,
    engine: Engine,
    /// Started by the first fetch, which runs inside the console's runtime.
    ticker: std::sync::OnceLock<tokio::task::JoinHandle<()>>,
    /// The hold on the data directory, for an engine with one (dropped after the engine).
    lock: Option<crate::endpoint::datadir::DataDirLock>,
    /// The hold on this host's GPUs, when it schedules some.
    host_lock: Option<crate::endpoint::hostlock::HostLock>,
}

impl Embedded {
    /// A source over an engine already built (`note`: why it has no GPU, if it has none).
    /// The engine's ticker starts with the first fetch and stops with the source.
    pub fn new(name: &str, engine: Engine, note: Option<String>) -> Embedded {
        Embedded {
            name: name.to_string(),
            note,
            engine,
            ticker: std::sync::OnceLock::new(),
            lock: None,
            host_lock: None,
        }
    }

    /// This machine: GPUs and telemetry from NVML, state in `data_dir`.
    pub fn local(clock: Arc<dyn Clock>, data_dir: &Path) -> anyhow::Result<Embedded> {
        let host = hostname();
        let (core, first) = crate::endpoint::live::open_local(None, SamplerConfig::default());
        let node = crate::endpoint::live::inventory(&first, &host, Bytes(0));
        let note = if node.devices.is_empty() {
            let why = match &first.backend {
                BackendStatus::Unavailable { reason, .. } => reason.to_string(),
                BackendStatus::Ready { .. } => "NVML is running but lists no GPU".to_string(),
            };
            Some(format!("no GPUs on this machine: {why}; {DEMO_HINT}"))
        } else {
            None
        };
        let nodes = if node.devices.is_empty() {
            Vec::new()
        } else {
            vec![node]
        };
        let config = EngineConfig {
            scheduler: SchedulerConfig {
                name: host.clone(),
                kind: "embedded".to_string(),
                policy: Policy::Binpack,
                ..SchedulerConfig::default()
            },
            ..EngineConfig::default()
        };
        // One scheduler for this host's GPUs, whatever the data directory: taken before
        // the directory is touched. With no GPU there is nothing to schedule, nor to lock.
        let host_lock = if nodes.is_empty() {
            None
        } else {
            let path = crate::endpoint::hostlock::default_path();
            Some(crate::endpoint::hostlock::HostLock::acquire(
                &path,
                crate::endpoint::datadir::EMBEDDED,
            )?)
        };
        // One process per data directory: a running `serve` (or console) keeps it.
        let (lock, private) = crate::endpoint::datadir::DataDirLock::acquire(
            data_dir,
            crate::endpoint::datadir::EMBEDDED,
        )?;
        for w in private {
            tracing::warn!("data directory: {w}");
        }
        let (engine, warnings) = Engine::open(
            config,
            nodes,
            data_dir,
            SyncMode::Full,
            clock,
            Arc::new(LocalProcesses),
        )?;
        for w in warnings {
            tracing::warn!("embedded state: {w}");
        }
        engine.attach_telemetry(
            core,
            Some(first),
            Arc::new(SystemClock),
            LiveConfig::local(&host),
        )?;
        let mut embedded = Embedded::new(&host, engine, note);
        embedded.lock = Some(lock);
        embedded.host_lock = host_lock;
        Ok(embedded)
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        if let Some(t) = self.ticker.get() {
            t.abort();
        }
    }
}

fn refused(e: EngineError) -> Failure {
    Failure::Refused(e.to_string())
}

impl Source for Embedded {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> super::SourceKind {
        super::SourceKind::Embedded
    }
    fn can_act(&self) -> bool {
        true
    }
    fn note(&self) -> Option<String> {
        self.note.clone()
    }
    fn fetch(&self) -> BoxFuture<'static, Result<Fetched, Failure>> {
        if tokio::runtime::Handle::try_current().is_ok() {
            self.ticker.get_or_init(|| self.engine.spawn_ticker());
        }
        let engine = self.engine.clone();
        let note = self.note.clone();
        Box::pin(async move {
            if let Some(reason) = engine.failure() {
                return Err(Failure::Refused(format!(
                    "writing state failed ({reason}); restart to resume from the last durable state"
                )));
            }
            let mut snap = engine.snapshot();
            if note.is_some() {
                snap.endpoint.telemetry_note = note;
            }
            Ok(snap.into())
        })
    }
    fn plan(&self, request: ClaimRequest) -> BoxFuture<'static, Result<Allocation, Failure>> {
        let engine = self.engine.clone();
        Box::pin(async move {
            engine
                .plan(&request)
                .map_err(|no| Failure::Refused(no.summary()))
        })
    }
    /// The endpoint's own forecast on a copy of the scheduler, from declared durations and
    /// leases (the console's scheduler learns no hold times).
    fn forecast(
        &self,
    ) -> Option<BoxFuture<'static, Result<crate::wire::forecast::Forecast, Failure>>> {
        let engine = self.engine.clone();
        Some(Box::pin(async move {
            let (copy, now) = engine.scheduler_copy(false);
            let holds = crate::forecast::HoldTimes::default();
            Ok(crate::forecast::forecast(&copy, now, &holds))
        }))
    }
    /// The endpoint's own preview on an exact copy of the scheduler.
    fn preview(
        &self,
        action: crate::wire::forecast::PreviewAction,
    ) -> Option<BoxFuture<'static, Result<crate::wire::forecast::Preview, Failure>>> {
        let engine = self.engine.clone();
        Some(Box::pin(async move {
            let (copy, now) = engine.scheduler_copy(true);
            let holds = crate::forecast::HoldTimes::default();
            Ok(crate::forecast::preview::preview(
                &copy, &action, &holds, "console", now,
            ))
        }))
    }
    fn act(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>> {
        let engine = self.engine.clone();
        Box::pin(async move { act(&engine, action, "console").await })
    }
    /// Audited as `console (move ID)`, as an endpoint audits a move's request.
    fn act_in_move(
        &self,
        action: Action,
        move_id: &str,
    ) -> BoxFuture<'static, Result<Outcome, Failure>> {
        let engine = self.engine.clone();
        let actor = crate::wire::move_actor("console", Some(move_id));
        Box::pin(async move {
            let actor = actor.map_err(Failure::Invalid)?;
            act(&engine, action, &actor).await
        })
    }
}

/// Carries out an action on the engine, durably.
async fn act(engine: &Engine, action: Action, actor: &str) -> Result<Outcome, Failure> {
    match action {
        Action::Engine(a) => Err(Failure::ReadOnly(super::not_an_engine(&a.verb))),
        Action::Claim { request } => match engine.submit(request, actor).await.map_err(refused)? {
            Submitted::Placed(c) | Submitted::Pending(c) => {
                Ok(Outcome::Claimed(Box::new(claim_view(&c))))
            }
            Submitted::Refused(no) => Err(Failure::Refused(no.summary())),
            Submitted::ShareZero(e) => Err(Failure::Refused(e.to_string())),
        },
        Action::Release { id } => {
            let gone = engine.release(id, actor).await.map_err(refused)?;
            Ok(Outcome::Released {
                id,
                place: gone.map(|c| {
                    c.allocation
                        .as_ref()
                        .map_or_else(|| "pending".to_string(), ToString::to_string)
                }),
            })
        }
        Action::Move { id, target } => {
            let from = engine
                .claim(id)
                .and_then(|c| c.allocation.as_ref().map(ToString::to_string))
                .unwrap_or_default();
            let moved = engine
                .move_claim(id, target, actor)
                .await
                .map_err(refused)?;
            let to = moved
                .allocation
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            Ok(Outcome::Moved { id, from, to })
        }
        Action::Cordon {
            node,
            index,
            cordoned,
        } => {
            engine
                .cordon(&node, index, cordoned, actor)
                .await
                .map_err(refused)?;
            Ok(Outcome::Cordoned {
                node,
                index,
                cordoned,
            })
        }
        Action::ResetProject { project } => {
            engine
                .reset_project(&project, actor)
                .await
                .map_err(refused)?;
            Ok(Outcome::Reset { project })
        }
        Action::SetShare { project, share } => {
            engine
                .set_share(&project, share, actor)
                .await
                .map_err(refused)?;
            Ok(Outcome::ShareSet { project, share })
        }
    }
}
