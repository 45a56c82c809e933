//! The cluster as kube-rs watches it: a watcher and a reflector for nodes and for pods,
//! each keeping the trimmed objects of `objects` (not k8s-openapi's full types, which
//! would keep every field of 10 000 pods), and a counter bumped at each watch event so a
//! fetch with nothing new answers `Unchanged` and a change wakes the console at once.
//!
//! kube's watcher lists, then watches from the list's `resourceVersion`, resumes from the
//! last one it saw (bookmarks included) when a watch ends, and lists again on `410 Gone`;
//! the reflector's store follows, dropping what a relist no longer shows.

use std::borrow::Cow;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use tokio::sync::Notify;

use super::objects::{NodeFacts, PodFacts, node_facts, pod_facts};

/// A node as the store keeps it: the identity kube needs and the facts decoding reads.
#[derive(Clone, Debug)]
pub struct KeptNode {
    meta: ObjectMeta,
    /// What decoding reads.
    pub facts: NodeFacts,
}

/// A pod as the store keeps it.
#[derive(Clone, Debug)]
pub struct KeptPod {
    meta: ObjectMeta,
    /// What decoding reads.
    pub facts: PodFacts,
}

/// The identity the reflector keys objects by, and the version the watcher resumes from.
fn meta_of(v: &Value) -> ObjectMeta {
    let text = |key: &str| {
        v.get("metadata")
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    ObjectMeta {
        name: text("name"),
        namespace: text("namespace"),
        uid: text("uid"),
        resource_version: text("resourceVersion"),
        ..ObjectMeta::default()
    }
}

impl<'de> Deserialize<'de> for KeptNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Ok(KeptNode {
            meta: meta_of(&v),
            facts: node_facts(&v),
        })
    }
}

impl<'de> Deserialize<'de> for KeptPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Ok(KeptPod {
            meta: meta_of(&v),
            facts: pod_facts(&v),
        })
    }
}

impl Resource for KeptNode {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;
    fn kind((): &()) -> Cow<'_, str> {
        "Node".into()
    }
    fn group((): &()) -> Cow<'_, str> {
        "".into()
    }
    fn version((): &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural((): &()) -> Cow<'_, str> {
        "nodes".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

impl Resource for KeptPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;
    fn kind((): &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group((): &()) -> Cow<'_, str> {
        "".into()
    }
    fn version((): &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural((): &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

/// What one watch last said: its error, while it has not recovered from it.
#[derive(Debug, Default)]
pub struct WatchHealth {
    /// The watch's last error, cleared by the next event.
    pub error: Mutex<Option<String>>,
    /// Whether its first list has been read.
    pub listed: std::sync::atomic::AtomicBool,
}

/// The stores of a running watch of the cluster; the watches stop when it is dropped.
pub struct Watching {
    /// Nodes.
    pub nodes: Store<KeptNode>,
    /// Pods.
    pub pods: Store<KeptPod>,
    /// The nodes watch's health.
    pub nodes_health: Arc<WatchHealth>,
    /// The pods watch's health.
    pub pods_health: Arc<WatchHealth>,
    /// Bumped at every event of either watch.
    pub generation: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Watching {
    /// Starts watching nodes and pods (all namespaces) through `client`, waking `changed`
    /// at every event.
    pub fn start(client: &Client, changed: &Arc<Notify>) -> Watching {
        let generation = Arc::new(AtomicU64::new(0));
        let nodes_health = Arc::new(WatchHealth::default());
        let pods_health = Arc::new(WatchHealth::default());
        let (nodes, node_task) = watch::<KeptNode>(
            Api::all(client.clone()),
            &generation,
            &nodes_health,
            changed,
        );
        let (pods, pod_task) =
            watch::<KeptPod>(Api::all(client.clone()), &generation, &pods_health, changed);
        Watching {
            nodes,
            pods,
            nodes_health,
            pods_health,
            generation,
            tasks: vec![node_task, pod_task],
        }
    }
}

fn watch<K>(
    api: Api<K>,
    generation: &Arc<AtomicU64>,
    health: &Arc<WatchHealth>,
    changed: &Arc<Notify>,
) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    K: for<'de> Deserialize<'de>,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    let generation = Arc::clone(generation);
    let health = Arc::clone(health);
    let changed = Arc::clone(changed);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(e) => {
                    if let Ok(mut err) = health.error.lock() {
                        *err = None;
                    }
                    if matches!(e, watcher::Event::InitDone) {
                        health.listed.store(true, Ordering::SeqCst);
                    }
                    // Objects of a list in progress are shown once it is whole.
                    if !matches!(e, watcher::Event::Init | watcher::Event::InitApply(_)) {
                        generation.fetch_add(1, Ordering::SeqCst);
                        changed.notify_one();
                    }
                }
                Err(e) => {
                    if let Ok(mut err) = health.error.lock() {
                        *err = Some(e.to_string());
                    }
                    generation.fetch_add(1, Ordering::SeqCst);
                    changed.notify_one();
                }
            }
        }
    });
    (store, task)
}
