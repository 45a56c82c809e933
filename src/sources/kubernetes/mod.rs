//! A Kubernetes cluster as a console source: nodes and pods, every GPU-share encoding
//! (extended resources, MIG, HAMi, Koordinator) read into one model, kept up to date by
//! kube-rs watches rather than polled.
//!
//! The client is configured as kube finds it: a kubeconfig file (`kubeconfig`, else
//! `$KUBECONFIG` or `~/.kube/config`) and its `context` (default: the file's current one),
//! or, with neither file nor context named and no kubeconfig found, the in-cluster service
//! account. It needs list and watch on nodes and pods. Kubernetes owns the scheduling:
//! gpuboard's own actions are refused; its engine actions (cordon, uncordon, evict,
//! delete a pod) go through the API (`actions`).
//!
//! Where things live: `objects` (the trimmed node and pod this source keeps), `encodings`
//! (HAMi's and Koordinator's annotations), `decode` (nodes and pods into a snapshot),
//! `cluster` (the watches and their stores), `owners` (pod UIDs from hosts' cgroups named).

mod actions;
mod claims;
pub mod cluster;
pub mod decode;
pub mod encodings;
pub mod objects;
pub mod owners;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::Notify;

use self::cluster::Watching;
use super::adapter::{self, wall_clock};
use super::error::SourceError;
use super::kind::SourceKind;
use super::{Action, Failure, Fetched, Outcome, Source};
use crate::clock::Clock;
use crate::placement::Allocation;
use crate::request::ClaimRequest;
use crate::snapshot::SourceWarning;

/// How to reach the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KubernetesConfig {
    /// Display name; `kubernetes` when empty.
    pub name: String,
    /// A kubeconfig file; kube's own search when `None`.
    pub kubeconfig: Option<PathBuf>,
    /// A context of that file; its current context when `None`.
    pub context: Option<String>,
    /// How long the first list may take, and each fetch.
    pub timeout: Duration,
}

impl KubernetesConfig {
    /// A config for the kubeconfig kube finds, with a 10-second timeout.
    pub fn new() -> KubernetesConfig {
        KubernetesConfig {
            timeout: Duration::from_secs(10),
            ..KubernetesConfig::default()
        }
    }

    /// What messages call the cluster: the file and context named, or kube's default.
    fn shown(&self) -> String {
        let file = self.kubeconfig.as_ref().map_or_else(
            || "kubeconfig as kube finds it".to_string(),
            |p| format!("kubeconfig {}", p.display()),
        );
        match &self.context {
            Some(c) => format!("{file}, context {c}"),
            None => file,
        }
    }
}

/// What the console shows when an operator tries gpuboard's own actions here.
pub fn refuse_action(action: &str) -> String {
    adapter::refusal(
        "Kubernetes schedules these GPUs",
        action,
        "Use kubectl (cordon, drain, delete pod) or the scheduler that placed the pod.",
    )
}

/// The cluster once connected: the client's watches, and the server's version.
struct Connected {
    /// The client actions use (no retries).
    client: kube::Client,
    watching: Watching,
    version: String,
}

struct Inner {
    config: KubernetesConfig,
    clock: Arc<dyn Clock>,
    changed: Arc<Notify>,
    connected: tokio::sync::Mutex<Option<Arc<Connected>>>,
    /// The watch generation the last snapshot was built at (`u64::MAX`: none yet).
    shown: AtomicU64,
}

/// A Kubernetes cluster as a console source.
#[derive(Clone)]
pub struct KubernetesSource {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for KubernetesSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesSource")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl KubernetesSource {
    /// A source for `config`; it connects at its first fetch (kube's client needs the
    /// runtime the console runs on).
    pub fn new(config: KubernetesConfig) -> KubernetesSource {
        KubernetesSource::with_clock(config, wall_clock())
    }

    /// A source on an injected clock (tests).
    pub fn with_clock(config: KubernetesConfig, clock: Arc<dyn Clock>) -> KubernetesSource {
        KubernetesSource {
            inner: Arc::new(Inner {
                config,
                clock,
                changed: Arc::new(Notify::new()),
                connected: tokio::sync::Mutex::new(None),
                shown: AtomicU64::new(u64::MAX),
            }),
        }
    }

    fn display_name(&self) -> &str {
        if self.inner.config.name.is_empty() {
            "kubernetes"
        } else {
            &self.inner.config.name
        }
    }

    /// The client configuration, as kube reads the kubeconfig or the pod's service account.
    async fn config(&self) -> Result<kube::Config, SourceError> {
        let c = &self.inner.config;
        let options = kube::config::KubeConfigOptions {
            context: c.context.clone(),
            cluster: None,
            user: None,
        };
        let bad = |why: String| SourceError::BadUrl {
            url: c.shown(),
            why,
        };
        let config = match &c.kubeconfig {
            Some(path) => {
                let file =
                    kube::config::Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| bad(e.to_string()))?
            }
            None if c.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| bad(e.to_string()))?,
            None => kube::Config::infer()
                .await
                .map_err(|e| bad(e.to_string()))?,
        };
        Ok(config)
    }

    /// Connects (once) and starts the watches.
    async fn connect(&self) -> Result<Arc<Connected>, SourceError> {
        let mut slot = self.inner.connected.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(Arc::clone(c));
        }
        let config = self.config().await?;
        let url = self.inner.config.shown();
        let bad = |e: kube::Error| SourceError::BadUrl {
            url: url.clone(),
            why: e.to_string(),
        };
        // kube's TLS asks rustls for the process's provider.
        crate::client::install_crypto_provider();
        // Actions get no retries: a disruption budget's 429 is an answer to show, not a
        // reason to ask again for minutes (kube retries 429, 503 and 504 by default).
        let mut once = config.clone();
        once.default_retry = false;
        let act_client = kube::Client::try_from(once).map_err(bad)?;
        let client = kube::Client::try_from(config).map_err(bad)?;
        let info = adapter::within(self.inner.config.timeout, url.clone(), async {
            client
                .apiserver_version()
                .await
                .map_err(|e| error_of(&url, &e))
        })
        .await?;
        let connected = Arc::new(Connected {
            watching: Watching::start(&client, &self.inner.changed),
            client: act_client,
            version: format!("kubernetes {}", info.git_version),
        });
        *slot = Some(Arc::clone(&connected));
        Ok(connected)
    }

    /// Reads the cluster: a snapshot when a watch event came since the last one.
    pub async fn read(&self) -> Result<Fetched, SourceError> {
        let c = self.connect().await?;
        let w = &c.watching;
        let url = self.inner.config.shown();
        // The first fetch waits for both lists; a watch that cannot list says why.
        let deadline = tokio::time::Instant::now() + self.inner.config.timeout;
        for (what, health) in [("nodes", &w.nodes_health), ("pods", &w.pods_health)] {
            while !health.listed.load(Ordering::SeqCst) {
                let error = health.error.lock().ok().and_then(|e| e.clone());
                if let Some(e) = error {
                    return Err(listing_error(&url, what, e));
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(SourceError::Timeout {
                        url: format!("{url}: list {what}"),
                        timeout: self.inner.config.timeout,
                    });
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let generation = w.generation.load(Ordering::SeqCst);
        if self.inner.shown.swap(generation, Ordering::SeqCst) == generation {
            return Ok(Fetched::Unchanged);
        }
        let nodes = w.nodes.state();
        let pods = w.pods.state();
        let mut snapshot = decode::snapshot(
            nodes.iter().map(Arc::as_ref),
            pods.iter().map(Arc::as_ref),
            self.display_name(),
            &c.version,
            self.inner.clock.now(),
        );
        for (what, health) in [("nodes", &w.nodes_health), ("pods", &w.pods_health)] {
            if let Some(e) = health.error.lock().ok().and_then(|e| e.clone()) {
                snapshot.endpoint.warnings.push(SourceWarning {
                    section: format!("/api/v1/{what}"),
                    path: "watch".to_string(),
                    found: format!("{e}; retrying"),
                    left_out: format!("changes to {what} since then"),
                });
            }
        }
        Ok(snapshot.into())
    }
}

/// A kube error in the source's words.
fn error_of(url: &str, e: &kube::Error) -> SourceError {
    match e {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => SourceError::Unauthorized {
            url: url.to_string(),
            status: s.code,
            message: format!(
                "{} (RBAC: list and watch on nodes and pods are needed)",
                s.message
            ),
        },
        kube::Error::Api(s) => SourceError::Http {
            url: url.to_string(),
            status: s.code,
            message: s.message.clone(),
        },
        other => SourceError::Unreachable {
            url: url.to_string(),
            detail: other.to_string(),
        },
    }
}

/// A watch that could not list, in words naming what and where.
fn listing_error(url: &str, what: &str, e: String) -> SourceError {
    let forbidden = e.contains("403") || e.to_lowercase().contains("forbidden");
    if forbidden {
        SourceError::Unauthorized {
            url: format!("{url}: list {what}"),
            status: 403,
            message: format!("{e} (RBAC: list and watch on nodes and pods are needed)"),
        }
    } else {
        SourceError::Unreachable {
            url: format!("{url}: list {what}"),
            detail: e,
        }
    }
}

impl Source for KubernetesSource {
    fn name(&self) -> &str {
        self.display_name()
    }
    fn kind(&self) -> SourceKind {
        SourceKind::Kubernetes
    }
    fn can_act(&self) -> bool {
        false
    }
    fn fetch(&self) -> BoxFuture<'static, Result<Fetched, Failure>> {
        let source = self.clone();
        Box::pin(async move { Ok(source.read().await?) })
    }
    fn changed(&self) -> Option<Arc<Notify>> {
        Some(Arc::clone(&self.inner.changed))
    }
    fn plan(&self, _request: ClaimRequest) -> BoxFuture<'static, Result<Allocation, Failure>> {
        adapter::plan_refused(self.display_name(), SourceKind::Kubernetes)
    }
    fn act(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>> {
        match action {
            Action::Engine(a) => {
                let source = self.clone();
                Box::pin(async move { Ok(Outcome::Engine(source.engine_act(&a).await?)) })
            }
            other => adapter::act_refused(refuse_action(other.verb())),
        }
    }
}
