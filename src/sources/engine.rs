//! Engine adapters as console sources: a Ray cluster, a Prometheus server, a Slurm
//! cluster or a BOINC client is read like any other source and refuses every action
//! (those engines own their scheduling), except BOINC's "update project", which is the
//! clear-backoff action there.

use std::sync::Arc;

use crate::request::ClaimRequest;
use futures::future::BoxFuture;

use super::boinc::BoincSource;
use super::prometheus::PrometheusSource;
use super::ray::RaySource;
use super::slurm::SlurmSource;
use super::{Action, Failure, Outcome, Source};
use crate::placement::Allocation;
use crate::snapshot::Snapshot;

/// Which engine.
enum Inner {
    Ray(Arc<RaySource>),
    Prometheus(Arc<PrometheusSource>),
    Slurm(Arc<SlurmSource>),
    Boinc(Arc<BoincSource>),
}

/// A read-only engine source.
pub struct Engine {
    name: String,
    inner: Inner,
}

impl Engine {
    /// A Ray dashboard.
    pub fn ray(name: &str, source: RaySource) -> Engine {
        Engine {
            name: name.to_string(),
            inner: Inner::Ray(Arc::new(source)),
        }
    }
    /// A Prometheus server with dcgm-exporter metrics.
    pub fn prometheus(name: &str, source: PrometheusSource) -> Engine {
        Engine {
            name: name.to_string(),
            inner: Inner::Prometheus(Arc::new(source)),
        }
    }
    /// A Slurm cluster through slurmrestd.
    pub fn slurm(name: &str, source: SlurmSource) -> Engine {
        Engine {
            name: name.to_string(),
            inner: Inner::Slurm(Arc::new(source)),
        }
    }
    /// A BOINC client through its GUI RPC.
    pub fn boinc(name: &str, source: BoincSource) -> Engine {
        Engine {
            name: name.to_string(),
            inner: Inner::Boinc(Arc::new(source)),
        }
    }
}

impl Source for Engine {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> &str {
        match self.inner {
            Inner::Ray(_) => "ray",
            Inner::Prometheus(_) => "prometheus",
            Inner::Slurm(_) => "slurm",
            Inner::Boinc(_) => "boinc",
        }
    }
    fn can_act(&self) -> bool {
        // BOINC takes one action (update project); `act` refuses the rest with a message.
        matches!(self.inner, Inner::Boinc(_))
    }
    fn fetch(&self) -> BoxFuture<'static, Result<Snapshot, Failure>> {
        match &self.inner {
            Inner::Ray(r) => {
                let r = Arc::clone(r);
                Box::pin(async move { Ok(r.fetch().await?) })
            }
            Inner::Prometheus(p) => {
                let p = Arc::clone(p);
                Box::pin(async move { Ok(p.fetch().await?) })
            }
            Inner::Slurm(x) => {
                let x = Arc::clone(x);
                Box::pin(async move { Ok(x.fetch().await?) })
            }
            Inner::Boinc(b) => {
                let b = Arc::clone(b);
                Box::pin(async move { Ok(b.fetch().await?) })
            }
        }
    }
    fn plan(&self, _request: ClaimRequest) -> BoxFuture<'static, Result<Allocation, Failure>> {
        let why = format!(
            "{} is a {} source: it places nothing",
            self.name,
            self.kind()
        );
        Box::pin(async move { Err(Failure::ReadOnly(why)) })
    }
    fn act(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>> {
        if let (Inner::Boinc(b), Action::ResetProject { project }) = (&self.inner, &action) {
            let (b, project) = (Arc::clone(b), project.clone());
            return Box::pin(async move {
                b.update_project_named(&project).await?;
                Ok(Outcome::Reset { project })
            });
        }
        let why = match &self.inner {
            Inner::Ray(_) => super::ray::refuse_action(action.verb()),
            Inner::Slurm(_) => super::slurm::refuse_action(action.verb()),
            Inner::Boinc(_) => super::boinc::refuse_action(action.verb()),
            Inner::Prometheus(_) => format!(
                "{} reads telemetry only; {} {} must be done where the GPUs are scheduled",
                self.name,
                action.verb(),
                action.target()
            ),
        };
        Box::pin(async move { Err(Failure::ReadOnly(why)) })
    }
}
