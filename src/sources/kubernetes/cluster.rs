//! The cluster as kube-rs watches it: a watcher for nodes and one for pods, each feeding a
//! store of the trimmed facts of `objects` (not k8s-openapi's full types, which would keep
//! every field of 10 000 pods), and a counter bumped at each watch event so a fetch with
//! nothing new answers `Unchanged` and a change wakes the console at once.
//!
//! kube's watcher lists, then watches from the list's `resourceVersion`, resumes from the
//! last one it saw (bookmarks included) when a watch ends, and lists again on `410 Gone`;
//! the store follows as kube's reflector would, a relist replacing it whole once read (so
//! what it no longer shows is dropped). Not the reflector itself: its store keeps each
//! whole object (its metadata, the facts) and a key of four strings besides; this one keeps
//! the facts only, keyed by namespace and name.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockWriteGuard};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
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

/// The identity the store keys objects by, and the version the watcher resumes from.
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

/// An object as the watch reads it, and the facts its store keeps of it.
pub trait Kept:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + 'static
{
    /// What the store keeps.
    type Facts: Send + Sync + 'static;
    /// Its key (namespace, empty for nodes, and name) and its facts.
    fn into_facts(self) -> (ObjectKey, Self::Facts);
}

/// Where an object is: its namespace (empty for a node) and name.
pub type ObjectKey = (String, String);

fn key_of(meta: ObjectMeta) -> ObjectKey {
    (
        meta.namespace.unwrap_or_default(),
        meta.name.unwrap_or_default(),
    )
}

impl Kept for KeptNode {
    type Facts = NodeFacts;
    fn into_facts(self) -> (ObjectKey, NodeFacts) {
        (key_of(self.meta), self.facts)
    }
}

impl Kept for KeptPod {
    type Facts = PodFacts;
    fn into_facts(self) -> (ObjectKey, PodFacts) {
        (key_of(self.meta), self.facts)
    }
}

type Objects<T> = HashMap<ObjectKey, Arc<T>>;

/// The facts of every object a watch has, by namespace and name. Behind an `Arc` each, so
/// a fetch takes them all under a short lock and decodes with the lock released (the watch
/// never waits on a decode), and a map's free slots cost a pointer, not a pod's facts.
pub struct Facts<T> {
    objects: RwLock<Objects<T>>,
}

impl<T> Default for Facts<T> {
    fn default() -> Self {
        Facts {
            objects: RwLock::new(HashMap::new()),
        }
    }
}

impl<T> Facts<T> {
    /// Everything held now.
    pub fn state(&self) -> Vec<Arc<T>> {
        let objects = self.objects.read().unwrap_or_else(PoisonError::into_inner);
        objects.values().cloned().collect()
    }

    fn write(&self) -> RwLockWriteGuard<'_, Objects<T>> {
        self.objects.write().unwrap_or_else(PoisonError::into_inner)
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
    pub nodes: Arc<Facts<NodeFacts>>,
    /// Pods.
    pub pods: Arc<Facts<PodFacts>>,
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

fn watch<K: Kept>(
    api: Api<K>,
    generation: &Arc<AtomicU64>,
    health: &Arc<WatchHealth>,
    changed: &Arc<Notify>,
) -> (Arc<Facts<K::Facts>>, tokio::task::JoinHandle<()>) {
    let store = Arc::new(Facts::default());
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    let kept = Arc::clone(&store);
    let generation = Arc::clone(generation);
    let health = Arc::clone(health);
    let changed = Arc::clone(changed);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        // A list in progress: read whole before it replaces what is kept.
        let mut listing: Option<Objects<K::Facts>> = None;
        while let Some(event) = stream.next().await {
            match event {
                Ok(e) => {
                    if let Ok(mut err) = health.error.lock() {
                        *err = None;
                    }
                    match e {
                        watcher::Event::Init => listing = Some(HashMap::new()),
                        watcher::Event::InitApply(o) => {
                            let (key, facts) = o.into_facts();
                            listing.get_or_insert_default().insert(key, Arc::new(facts));
                        }
                        watcher::Event::InitDone => {
                            let mut listed = listing.take().unwrap_or_default();
                            listed.shrink_to_fit();
                            *kept.write() = listed;
                            health.listed.store(true, Ordering::SeqCst);
                        }
                        watcher::Event::Apply(o) => {
                            let (key, facts) = o.into_facts();
                            kept.write().insert(key, Arc::new(facts));
                        }
                        watcher::Event::Delete(o) => {
                            let (key, _) = o.into_facts();
                            kept.write().remove(&key);
                        }
                    }
                    // Objects of a list in progress are shown once it is whole.
                    if listing.is_none() {
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
