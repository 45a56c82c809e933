//! Snapshot versions: one snapshot per state of the engine, built when first asked for
//! and shared by every reader (with its JSON, serialized once), and the ring of the last
//! deltas between consecutive versions, each computed and serialized once. What
//! `GET /v1/snapshot` and the delta watch serve; nothing is rebuilt while nothing changes,
//! and a build holds no lock that readers of the current version or of deltas need.

use std::collections::VecDeque;
use std::sync::Arc;

use axum::body::Bytes;
use tokio::sync::Mutex;

use crate::endpoint::engine::{Engine, StateKey};
use crate::snapshot::{Snapshot, SnapshotChange, diff, with_figures};
use crate::wire::{DeltaBody, SnapshotVersion};

/// How many deltas are kept: a watcher further behind gets a `resync`.
pub const DELTA_RING: usize = 256;

/// One version: the snapshot, its JSON and its version.
#[derive(Debug)]
pub struct BuiltSnapshot {
    /// `EPOCH.SEQ`.
    pub version: SnapshotVersion,
    /// The state.
    pub snapshot: Arc<Snapshot>,
    /// The state as `GET /v1/snapshot` sends it.
    pub json: Bytes,
}

/// One delta of the ring: the changes from a version to the next, serialized.
#[derive(Debug)]
pub struct StoredDelta {
    /// The version it applies to.
    pub from: SnapshotVersion,
    /// The version it makes.
    pub to: SnapshotVersion,
    /// A `wire::DeltaBody` as JSON.
    pub json: String,
    /// The same in the third form (`snapshot::with_figures`), when it differs.
    pub figures_json: Option<String>,
    /// It changes telemetry alone (`Snapshot::same_but_telemetry`): a watcher that asked
    /// for telemetry at a slower pace may wait to send it.
    pub telemetry_only: bool,
}

/// Why a watcher's version cannot be resumed; the text is the `resync` reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResumeGap {
    /// From another process of the endpoint.
    #[error("version {0} is from before the endpoint restarted (epoch {1} now)")]
    Restarted(SnapshotVersion, u64),
    /// Older than the ring.
    #[error("version {0} is older than the {DELTA_RING} versions kept")]
    TooOld(SnapshotVersion),
    /// Ahead of the endpoint.
    #[error("version {0} is newer than the endpoint's {1}")]
    Future(SnapshotVersion, SnapshotVersion),
}

#[derive(Debug, Default)]
struct Cache {
    key: Option<StateKey>,
    current: Option<Arc<BuiltSnapshot>>,
    ring: VecDeque<Arc<StoredDelta>>,
    /// When the current version was built, and what building it cost.
    built: Option<(std::time::Instant, std::time::Duration)>,
}

impl Cache {
    /// The current version, if it is still current for `key`.
    fn current_for(&self, key: StateKey) -> Option<Arc<BuiltSnapshot>> {
        let (cached, current) = (self.key?, self.current.as_ref()?);
        // The cached state may be ahead of the published revision (it waited for its
        // own commit); it is current until a newer revision is published.
        let revision_current = cached.revision >= key.revision;
        let too_soon = self
            .built
            .is_some_and(|(at, cost)| at.elapsed() < telemetry_spacing(cost));
        (revision_current
            && cached.frozen == key.frozen
            && cached.history_stopped == key.history_stopped
            && (cached.telemetry == key.telemetry || too_soon))
            .then(|| Arc::clone(current))
    }
}

/// A telemetry round alone makes a new version at most this often per unit of building
/// cost: rebuilding for telemetry then takes at most 1/500 (0.2 %) of a core. A host with a
/// few GPUs rebuilds in about a millisecond and so follows `TELEMETRY_PACE`; a 20 000-claim
/// endpoint's telemetry-only versions are spaced out further. A new revision is never held
/// back.
const TELEMETRY_COST_SHARE: u32 = 500;

/// The least time between two versions that differ only by telemetry, however cheap: what
/// every watching console is sent and decodes. Telemetry every two seconds follows a GPU's
/// load as an operator reads it; the sparklines still hold every sample (one a second).
pub const TELEMETRY_PACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The least time between two versions that differ only by telemetry.
fn telemetry_spacing(build_cost: std::time::Duration) -> std::time::Duration {
    (build_cost * TELEMETRY_COST_SHARE).max(TELEMETRY_PACE)
}

/// The versions of one endpoint process.
///
/// A new version is built by one caller at a time (`building`), outside the lock of what
/// is built (`cache`): that lock is held only to read or swap in a version, so a reader
/// whose version is current, or who asks for deltas, never waits on a build; only a
/// reader who needs the state being built waits for it.
#[derive(Debug)]
pub struct SnapshotVersions {
    engine: Engine,
    epoch: u64,
    cache: std::sync::Mutex<Cache>,
    building: Mutex<()>,
}

impl SnapshotVersions {
    /// Versions of `engine`'s state under `epoch` (random per process start).
    pub fn new(engine: Engine, epoch: u64) -> SnapshotVersions {
        SnapshotVersions {
            engine,
            epoch,
            cache: std::sync::Mutex::new(Cache::default()),
            building: Mutex::new(()),
        }
    }

    /// This process's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The engine the versions are of.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The current version: the cached one while the engine's state key is unchanged,
    /// else a new one (its delta from the previous kept in the ring).
    pub async fn current(&self) -> Result<Arc<BuiltSnapshot>, serde_json::Error> {
        // While another process holds the database locked, a new version waits for that
        // lock: readers get the last version built, durable if older.
        if self.engine.store_busy_for().is_some()
            && let Some(last) = self.cache().current.clone()
        {
            return Ok(last);
        }
        let key = self.engine.state_key();
        if let Some(current) = self.cache().current_for(key) {
            return Ok(current);
        }
        let _building = self.building.lock().await;
        // Another caller may have built it while this one waited.
        let (previous, seq) = {
            let cache = self.cache();
            if let Some(current) = cache.current_for(key) {
                return Ok(current);
            }
            let previous = cache.current.clone();
            let seq = previous.as_ref().map_or(1, |c| c.version.seq + 1);
            (previous, seq)
        };
        let started = std::time::Instant::now();
        let snapshot = self.engine.durable_snapshot().await;
        let key = StateKey {
            revision: snapshot.revision,
            ..key
        };
        let json = Bytes::from(serde_json::to_vec(&snapshot)?);
        let version = SnapshotVersion {
            epoch: self.epoch,
            seq,
        };
        let delta = match &previous {
            Some(previous) => {
                let body = DeltaBody {
                    from: previous.version,
                    to: version,
                    changes: diff(&previous.snapshot, &snapshot),
                };
                let compactable = body.changes.iter().any(|c| {
                    matches!(
                        c,
                        SnapshotChange::Node { .. } | SnapshotChange::Claim { .. }
                    )
                });
                let figures = compactable.then(|| DeltaBody {
                    changes: with_figures(body.changes.clone(), &previous.snapshot, &snapshot),
                    ..body.clone()
                });
                let figures_json = match figures {
                    Some(f) if f != body => Some(serde_json::to_string(&f)?),
                    _ => None,
                };
                Some(Arc::new(StoredDelta {
                    from: body.from,
                    to: body.to,
                    json: serde_json::to_string(&body)?,
                    figures_json,
                    telemetry_only: previous.snapshot.same_but_telemetry(&snapshot),
                }))
            }
            None => None,
        };
        let built = Arc::new(BuiltSnapshot {
            version,
            snapshot: Arc::new(snapshot),
            json,
        });
        let mut cache = self.cache();
        if let Some(delta) = delta {
            cache.ring.push_back(delta);
            while cache.ring.len() > DELTA_RING {
                cache.ring.pop_front();
            }
        }
        cache.key = Some(key);
        cache.current = Some(Arc::clone(&built));
        cache.built = Some((started, started.elapsed()));
        Ok(built)
    }

    /// When the telemetry the current version holds back (`TELEMETRY_PACE`) may be built:
    /// `None` while the current version has the engine's latest telemetry, or once that
    /// time has passed. A watcher waits until then rather than for the next round, which
    /// may never come.
    pub fn telemetry_held_until(&self) -> Option<std::time::Instant> {
        let key = self.engine.state_key();
        let cache = self.cache();
        let (cached, (at, cost)) = (cache.key?, cache.built?);
        let until = at + telemetry_spacing(cost);
        (cached.telemetry != key.telemetry && until > std::time::Instant::now()).then_some(until)
    }

    /// The deltas from `since` up to `upto` (a version built here), in order; empty when
    /// `since` is `upto`. Never waits on a build.
    pub fn deltas(
        &self,
        since: SnapshotVersion,
        upto: SnapshotVersion,
    ) -> Result<Vec<Arc<StoredDelta>>, ResumeGap> {
        if since.epoch != self.epoch {
            return Err(ResumeGap::Restarted(since, self.epoch));
        }
        if since.seq > upto.seq {
            return Err(ResumeGap::Future(since, upto));
        }
        let out: Vec<Arc<StoredDelta>> = self
            .cache()
            .ring
            .iter()
            .filter(|d| d.from.seq >= since.seq && d.to.seq <= upto.seq)
            .cloned()
            .collect();
        let complete =
            out.first().is_none_or(|d| d.from == since) && out.len() as u64 == upto.seq - since.seq;
        if complete {
            Ok(out)
        } else {
            Err(ResumeGap::TooOld(since))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, Timestamp};
    use crate::endpoint::engine::{EngineConfig, LocalProcesses};

    fn versions() -> SnapshotVersions {
        let engine = Engine::in_memory(
            EngineConfig::default(),
            vec![crate::inventory::a100_node("a", 2)],
            Arc::new(ManualClock::new(Timestamp(1_000))),
            Arc::new(LocalProcesses),
        )
        .unwrap();
        SnapshotVersions::new(engine, 42)
    }

    #[tokio::test]
    async fn one_build_per_state_and_one_delta_per_version() {
        let v = versions();
        let first = v.current().await.unwrap();
        assert_eq!(first.version, SnapshotVersion { epoch: 42, seq: 1 });
        let again = v.current().await.unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "nothing changed, nothing rebuilt"
        );
        v.engine().cordon("a", 1, true, "op").await.unwrap();
        let second = v.current().await.unwrap();
        assert_eq!(second.version.seq, 2);
        let deltas = v.deltas(first.version, second.version).unwrap();
        assert_eq!(deltas.len(), 1);
        let body: DeltaBody = serde_json::from_str(&deltas[0].json).unwrap();
        let mut model = (*first.snapshot).clone();
        crate::snapshot::apply(&mut model, &body.changes);
        assert_eq!(model, *second.snapshot);
        assert!(v.deltas(second.version, second.version).unwrap().is_empty());
        let other = SnapshotVersion { epoch: 7, seq: 1 };
        assert!(matches!(
            v.deltas(other, second.version),
            Err(ResumeGap::Restarted(..))
        ));
        let ahead = SnapshotVersion { epoch: 42, seq: 9 };
        assert!(matches!(
            v.deltas(ahead, second.version),
            Err(ResumeGap::Future(..))
        ));
        let never = SnapshotVersion { epoch: 42, seq: 0 };
        assert!(matches!(
            v.deltas(never, second.version),
            Err(ResumeGap::TooOld(..))
        ));
    }

    #[tokio::test]
    async fn readers_of_the_current_version_and_of_deltas_never_wait_on_a_build() {
        let v = versions();
        let first = v.current().await.unwrap();
        v.engine().cordon("a", 1, true, "op").await.unwrap();
        let second = v.current().await.unwrap();
        // A build in progress (its lock held) does not hold up what is already built.
        let building = v.building.lock().await;
        let within = std::time::Duration::from_secs(30);
        let again = tokio::time::timeout(within, v.current())
            .await
            .unwrap()
            .unwrap();
        assert!(Arc::ptr_eq(&again, &second));
        assert_eq!(v.deltas(first.version, second.version).unwrap().len(), 1);
        // A reader who needs a newer state waits for the build, then gets it.
        v.engine().cordon("a", 1, false, "op").await.unwrap();
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), v.current()).await;
        assert!(
            waiting.is_err(),
            "the new state waits for the build in progress"
        );
        drop(building);
        let third = v.current().await.unwrap();
        assert_eq!(third.version.seq, 3);
    }

    #[tokio::test]
    async fn telemetry_alone_makes_a_version_at_its_pace_and_a_commit_at_once() {
        use crate::endpoint::live::{LiveConfig, LiveRound};
        use crate::telemetry::fake::{FakeBackend, FakeGpu};
        use crate::telemetry::{DeviceMetrics, SamplerConfig, SamplerCore};
        let v = versions();
        let gpu = |util: u32| FakeGpu {
            metrics: DeviceMetrics {
                utilization_gpu_percent: Some(util),
                ..DeviceMetrics::default()
            },
            ..FakeGpu::default()
        };
        // The sampler's thread takes one round (at 1.5 s on its clock), then none for an hour.
        let core = |util| {
            let config = SamplerConfig {
                metrics_interval: std::time::Duration::from_hours(1),
                ..SamplerConfig::default()
            };
            SamplerCore::new(Box::new(FakeBackend::new(vec![gpu(util)])), None, config)
        };
        let clock = Arc::new(ManualClock::new(Timestamp(1_500)));
        let config = LiveConfig {
            coordination_file: None,
            ..LiveConfig::local("a")
        };
        let first = core(10).round(Timestamp(1_000));
        v.engine()
            .attach_telemetry(core(10), Some(first), clock, config.clone())
            .unwrap();
        let feed = v.engine().telemetry().unwrap();
        for _ in 0..1_000 {
            if feed.latest().unwrap().telemetry.fetched_unix_ms == 1_500 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let built = v.current().await.unwrap();
        assert_eq!(v.telemetry_held_until(), None, "nothing newer to hold back");
        // New figures right after a build wait for the pace, and say until when.
        let next = core(60).round(Timestamp(2_000));
        feed.publish(LiveRound::gather(next, &config));
        let again = v.current().await.unwrap();
        assert!(Arc::ptr_eq(&built, &again), "held back by the pace");
        let until = v.telemetry_held_until().expect("held back until when");
        assert!(until <= std::time::Instant::now() + TELEMETRY_PACE);
        // A commit is never held back, and carries the telemetry with it.
        v.engine().cordon("a", 1, true, "op").await.unwrap();
        let committed = v.current().await.unwrap();
        assert_eq!(committed.version.seq, built.version.seq + 1);
        let util = committed.snapshot.nodes[0].devices[0]
            .telemetry
            .as_ref()
            .and_then(|t| t.utilization_gpu);
        assert_eq!(util, Some(60));
        assert_eq!(v.telemetry_held_until(), None);
    }

    #[tokio::test]
    async fn the_ring_keeps_the_last_versions_only() {
        let v = versions();
        let first = v.current().await.unwrap();
        for i in 0..=DELTA_RING {
            v.engine().cordon("a", 0, i % 2 == 0, "op").await.unwrap();
            v.current().await.unwrap();
        }
        let last = v.current().await.unwrap();
        assert_eq!(last.version.seq, DELTA_RING as u64 + 2);
        assert!(matches!(
            v.deltas(first.version, last.version),
            Err(ResumeGap::TooOld(_))
        ));
        let kept = SnapshotVersion {
            epoch: 42,
            seq: last.version.seq - DELTA_RING as u64,
        };
        assert_eq!(v.deltas(kept, last.version).unwrap().len(), DELTA_RING);
    }
}
