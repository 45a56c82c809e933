//! Flags over time: each flag a GPU carries from the join where it is first seen to the
//! join where it is gone is one episode, with the holders it named. What the history
//! keeps, `/metrics` exports while open, and the report adds up.

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::units::Units;

use super::{GpuEngine, GpuFlag, IdleClock, PhysicalFleet, PhysicalGpu};

/// A holder as an episode names it: enough to charge it without the join.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeHolder {
    /// Its engine.
    pub engine: GpuEngine,
    /// What it is (`Slurm job 42`, `pod ml/train-0`, `claim 7 (alice)`).
    pub label: String,
    /// Its project: the Slurm account, Kubernetes namespace, Ray job, gpuboard project.
    pub project: String,
    /// The source that reports it.
    pub source: String,
    /// Compute it holds on the GPU (10 000 = all of it; zero where its engine does not say).
    pub compute: Units,
}

/// One flag on one GPU, from when it began until it ended (`None`: still on).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlagEpisode {
    /// `double-booked`, `unexplained` or `idle` (`GpuFlag::word`).
    pub flag: String,
    /// The GPU (`PhysicalGpu::id`: its UUID, else `node:index`).
    pub gpu: String,
    /// Its node.
    pub node: String,
    /// Its index on the node.
    pub index: u32,
    /// Its UUID, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The holders the flag names (none for unexplained memory), outermost ones.
    pub holders: Vec<EpisodeHolder>,
    /// The flag in one line, as it was first seen.
    pub detail: String,
    /// When it began (an idle one: when the GPU went idle, not when it was flagged).
    pub started: Timestamp,
    /// When it was last seen gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<Timestamp>,
}

impl FlagEpisode {
    /// The episode `flag` of `gpu` opens at `now`.
    fn of(gpu: &PhysicalGpu, flag: &GpuFlag, now: Timestamp) -> FlagEpisode {
        let (holders, started): (&[usize], Timestamp) = match flag {
            GpuFlag::DoubleBooked { holders, .. } => (holders, now),
            GpuFlag::Idle { holders, since } => (holders, (*since).min(now)),
            GpuFlag::Unexplained { .. } => (&[], now),
        };
        FlagEpisode {
            flag: flag.word().to_string(),
            gpu: gpu.id(),
            node: gpu.node.clone(),
            index: gpu.index,
            uuid: gpu.uuid.clone(),
            holders: holders
                .iter()
                .filter_map(|&i| gpu.holders.get(i))
                .map(|h| EpisodeHolder {
                    engine: h.engine,
                    label: h.label.to_string(),
                    project: h.project.to_string(),
                    source: h.source_name.to_string(),
                    compute: h.compute,
                })
                .collect(),
            detail: flag.describe(gpu),
            started,
            ended: None,
        }
    }

    /// Whether `other` is this episode going on: the same flag on the same GPU naming the
    /// same holders (another holder joining a double booking is another episode).
    pub fn continues(&self, other: &FlagEpisode) -> bool {
        self.flag == other.flag
            && self.gpu == other.gpu
            && self.holders.len() == other.holders.len()
            && self
                .holders
                .iter()
                .zip(&other.holders)
                .all(|(a, b)| a.engine == b.engine && a.label == b.label && a.source == b.source)
    }

    /// Milliseconds of it inside `from..to` (an open one runs to `to`).
    pub fn ms_within(&self, from: Timestamp, to: Timestamp) -> u64 {
        let end = self.ended.unwrap_or(to).min(to);
        end.0.saturating_sub(self.started.max(from).0)
    }
}

/// The flags' episodes as joins come: the idle clock, and the episodes open now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlagTracker {
    idle: IdleClock,
    open: Vec<FlagEpisode>,
}

impl FlagTracker {
    /// Adds the idle flags to a fresh join of `now` and returns what changed: the
    /// episodes that began (`ended: None`) and those that ended (`ended` set).
    pub fn observe(&mut self, fleet: &mut PhysicalFleet, now: Timestamp) -> Vec<FlagEpisode> {
        self.idle.observe(fleet, now);
        let seen: Vec<FlagEpisode> = fleet
            .gpus
            .iter()
            .flat_map(|g| g.flags.iter().map(move |f| FlagEpisode::of(g, f, now)))
            .collect();
        let mut changes = Vec::new();
        let mut open = Vec::with_capacity(seen.len());
        let mut was = std::mem::take(&mut self.open);
        for e in seen {
            if let Some(at) = was.iter().position(|o| o.continues(&e)) {
                open.push(was.swap_remove(at));
            } else {
                changes.push(e.clone());
                open.push(e);
            }
        }
        for mut gone in was {
            gone.ended = Some(now);
            changes.push(gone);
        }
        self.open = open;
        changes
    }

    /// The episodes open now.
    pub fn open(&self) -> &[FlagEpisode] {
        &self.open
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::physical::{GpuHolder, GpuProcess};
    use crate::snapshot::DeviceTelemetry;
    use crate::units::Bytes;
    use std::sync::Arc;

    fn holder(label: &str, engine: GpuEngine, project: &str) -> GpuHolder {
        GpuHolder {
            source: 0,
            source_name: Arc::from("s"),
            engine,
            claim: crate::ids::ClaimId::of_name(label),
            label: Arc::from(label),
            project: Arc::from(project),
            memory: Bytes(0),
            compute: Units::FULL,
            parent: None,
            guessed: false,
        }
    }

    fn gpu(util: Option<u32>, holders: Vec<GpuHolder>, loose_pid: Option<u32>) -> PhysicalGpu {
        PhysicalGpu {
            node: "n1".into(),
            index: 3,
            uuid: Some("gpu-3".into()),
            model: "H100".into(),
            memory: Some(Bytes(80 << 30)),
            seen_by: Vec::new(),
            telemetry: Some(Arc::new(DeviceTelemetry {
                utilization_gpu: util,
                ..DeviceTelemetry::default()
            })),
            telemetry_from: None,
            holders,
            processes: loose_pid
                .map(|pid| GpuProcess {
                    pid,
                    name: None,
                    used_memory: Some(Bytes(1 << 30)),
                    owner: None,
                    holder: None,
                    source: 0,
                })
                .into_iter()
                .collect(),
            flags: Vec::new(),
            unmatched: None,
        }
    }

    fn fleet(g: PhysicalGpu) -> PhysicalFleet {
        let mut g = g;
        if let Some(p) = g.processes.first() {
            g.flags.push(GpuFlag::Unexplained {
                memory: p.used_memory.unwrap_or_default(),
                pids: vec![p.pid],
            });
        }
        PhysicalFleet {
            gpus: vec![Arc::new(g)],
            warnings: Vec::new(),
        }
    }

    #[test]
    fn an_idle_gpu_opens_one_episode_from_when_it_went_idle_and_closes_it_when_busy() {
        let mut t = FlagTracker::default();
        let job = || vec![holder("Slurm job 42", GpuEngine::Slurm, "physics")];
        let min = 60_000;
        let mut changes = Vec::new();
        for m in 0..=30 {
            changes.extend(t.observe(&mut fleet(gpu(Some(1), job(), None)), Timestamp(m * min)));
        }
        assert_eq!(changes.len(), 1, "{changes:?}");
        let e = &changes[0];
        assert_eq!((e.flag.as_str(), e.gpu.as_str()), ("idle", "gpu-3"));
        assert_eq!((e.started, e.ended), (Timestamp(0), None));
        assert_eq!(e.holders[0].project, "physics");
        assert_eq!(e.holders[0].engine, GpuEngine::Slurm);
        assert_eq!(t.open().len(), 1);
        // Still idle: nothing new.
        assert!(
            t.observe(&mut fleet(gpu(Some(0), job(), None)), Timestamp(31 * min))
                .is_empty()
        );
        let ended = t.observe(&mut fleet(gpu(Some(90), job(), None)), Timestamp(40 * min));
        assert_eq!(ended.len(), 1);
        assert_eq!(ended[0].ended, Some(Timestamp(40 * min)));
        assert_eq!(
            ended[0].ms_within(Timestamp(10 * min), Timestamp(60 * min)),
            30 * min
        );
        assert!(t.open().is_empty());
    }

    #[test]
    fn another_holder_is_another_episode_and_unexplained_memory_goes_on_while_it_stays() {
        let mut t = FlagTracker::default();
        let one = vec![holder("claim 1", GpuEngine::Gpuboard, "a")];
        let two = vec![
            holder("claim 1", GpuEngine::Gpuboard, "a"),
            holder("pod ml/x", GpuEngine::Kubernetes, "ml"),
        ];
        let mk = |hs: Vec<GpuHolder>, pid: Option<u32>| {
            let mut f = fleet(gpu(Some(50), hs.clone(), pid));
            if hs.len() == 2 {
                Arc::make_mut(&mut f.gpus[0])
                    .flags
                    .push(GpuFlag::DoubleBooked {
                        holders: vec![0, 1],
                        resource: crate::physical::Resource::Compute,
                        held: 20_000,
                        has: 10_000,
                    });
            }
            f
        };
        let a = t.observe(&mut mk(one.clone(), Some(7)), Timestamp(1_000));
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].flag, "unexplained");
        let b = t.observe(&mut mk(two, Some(8)), Timestamp(2_000));
        assert_eq!(b.len(), 1, "the unexplained one goes on: {b:?}");
        assert_eq!(b[0].flag, "double-booked");
        assert_eq!(b[0].holders.len(), 2);
        assert!(
            b[0].detail.contains("claim 1 [s] and pod ml/x [s]"),
            "{}",
            b[0].detail
        );
        let c = t.observe(&mut mk(one, None), Timestamp(3_000));
        let mut words: Vec<_> = c.iter().map(|e| (e.flag.as_str(), e.ended)).collect();
        words.sort();
        assert_eq!(
            words,
            [
                ("double-booked", Some(Timestamp(3_000))),
                ("unexplained", Some(Timestamp(3_000)))
            ]
        );
        assert_eq!(
            c.iter().find(|e| e.flag == "unexplained").unwrap().started,
            Timestamp(1_000)
        );
    }
}
