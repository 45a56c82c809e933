//! Engine adapters as console sources: a Ray cluster or a Prometheus server is read like
//! any other source and refuses every action (those engines own their scheduling).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::prometheus::PrometheusSource;
use super::ray::RaySource;
use super::{Action, Failure, Outcome, Source};
use crate::placement::Allocation;
use crate::snapshot::Snapshot;

/// Which engine.
enum Inner {
    Ray(Arc<RaySource>),
    Prometheus(Arc<PrometheusSource>),
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
}

impl Source for Engine {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> &str {
        match self.inner {
            Inner::Ray(_) => "ray",
            Inner::Prometheus(_) => "prometheus",
        }
    }
    fn can_act(&self) -> bool {
        false
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
        }
    }
    fn plan(&self, _request: Value) -> BoxFuture<'static, Result<Allocation, Failure>> {
        let why = format!(
            "{} is a {} source: it places nothing",
            self.name,
            self.kind()
        );
        Box::pin(async move { Err(Failure::ReadOnly(why)) })
    }
    fn act(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>> {
        let why = match &self.inner {
            Inner::Ray(_) => super::ray::refuse_action(action.verb()),
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
