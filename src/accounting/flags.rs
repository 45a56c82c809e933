//! The flags' episodes of a window added up: GPU-hours double-booked, unexplained and
//! idle, and the idle hours charged to whoever held the GPUs, by engine: a Slurm account,
//! a Kubernetes namespace, a Ray job, a gpuboard or BOINC project. Same-named owners of
//! two engines (an account and a namespace both `ml`) stay apart.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::GpuSeconds;
use crate::clock::Timestamp;
use crate::physical::{FlagEpisode, GpuEngine};

/// One flag's episodes in a window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlagTotal {
    /// `double-booked`, `unexplained` or `idle`.
    pub flag: String,
    /// Episodes overlapping the window.
    pub episodes: usize,
    /// GPUs flagged times how long, inside the window.
    pub gpu_time: GpuSeconds,
}

/// Idle GPU time charged to one owner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IdleOwner {
    /// The engine whose holders these were.
    pub engine: GpuEngine,
    /// What the owner is there: `account`, `namespace`, `job`, `project`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Idle episodes that named its holders.
    pub episodes: usize,
    /// Its part of those GPUs' idle time, inside the window.
    pub idle: GpuSeconds,
}

/// The window's flags added up.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlagTotals {
    /// Per flag, in `double-booked`, `unexplained`, `idle` order; flags with no episode left out.
    pub by_flag: Vec<FlagTotal>,
    /// Idle GPU time per owner, most first.
    pub idle_by_owner: Vec<IdleOwner>,
}

/// What a holder's project is in its engine's words.
pub fn owner_kind(engine: GpuEngine) -> &'static str {
    match engine {
        GpuEngine::Slurm => "account",
        GpuEngine::Kubernetes => "namespace",
        GpuEngine::Ray => "job",
        GpuEngine::Gpuboard | GpuEngine::Boinc | GpuEngine::Telemetry => "project",
    }
}

/// Adds up `episodes` inside `from..to`. An idle GPU's time is shared among the
/// outermost holders the episode names by their compute (equally when none says).
pub fn add_up(episodes: &[&FlagEpisode], from: Timestamp, to: Timestamp) -> FlagTotals {
    let mut by_flag: Vec<FlagTotal> = ["double-booked", "unexplained", "idle"]
        .iter()
        .map(|f| FlagTotal {
            flag: (*f).to_string(),
            ..FlagTotal::default()
        })
        .collect();
    let mut owners: BTreeMap<(&str, String), IdleOwner> = BTreeMap::new();
    for e in episodes {
        let ms = e.ms_within(from, to);
        if e.started > to || e.ended.is_some_and(|end| end <= from) {
            continue;
        }
        if let Some(t) = by_flag.iter_mut().find(|t| t.flag == e.flag) {
            t.episodes += 1;
            t.gpu_time += GpuSeconds::of(1.0, ms);
        }
        if e.flag != "idle" || e.holders.is_empty() {
            continue;
        }
        let compute: u64 = e.holders.iter().map(|h| u64::from(h.compute.0)).sum();
        for h in &e.holders {
            let part = if compute == 0 {
                1.0 / e.holders.len() as f64
            } else {
                f64::from(h.compute.0) / compute as f64
            };
            let o = owners
                .entry((h.engine.word(), h.project.clone()))
                .or_insert_with(|| IdleOwner {
                    engine: h.engine,
                    kind: owner_kind(h.engine).to_string(),
                    name: h.project.clone(),
                    episodes: 0,
                    idle: GpuSeconds::default(),
                });
            o.episodes += 1;
            o.idle += GpuSeconds::of(part, ms);
        }
    }
    by_flag.retain(|t| t.episodes > 0);
    let mut idle_by_owner: Vec<IdleOwner> = owners.into_values().collect();
    idle_by_owner.sort_by(|a, b| b.idle.0.total_cmp(&a.idle.0));
    FlagTotals {
        by_flag,
        idle_by_owner,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::physical::EpisodeHolder;
    use crate::units::Units;

    const H: u64 = 3_600_000;

    fn holder(engine: GpuEngine, project: &str, compute: u32) -> EpisodeHolder {
        EpisodeHolder {
            engine,
            label: format!("{} {project}", engine.word()),
            project: project.to_string(),
            source: engine.word().to_string(),
            compute: Units(compute),
        }
    }

    fn episode(flag: &str, from: u64, to: Option<u64>, holders: Vec<EpisodeHolder>) -> FlagEpisode {
        FlagEpisode {
            flag: flag.to_string(),
            gpu: format!("gpu-{from}"),
            node: "n1".to_string(),
            index: 0,
            uuid: None,
            holders,
            detail: String::new(),
            started: Timestamp(from),
            ended: to.map(Timestamp),
        }
    }

    #[test]
    fn flags_add_up_inside_the_window_and_idle_hours_go_to_each_engines_owner() {
        let all = [
            // Idle 2 h, of which 1 h in the window: Slurm account `ml`.
            episode(
                "idle",
                0,
                Some(2 * H),
                vec![holder(GpuEngine::Slurm, "ml", 10_000)],
            ),
            // Idle, still open at the window's end (3 h in it): namespace `ml`, not the
            // account of the same name; two pods by compute, 3:1.
            episode(
                "idle",
                H,
                None,
                vec![
                    holder(GpuEngine::Kubernetes, "ml", 7_500),
                    holder(GpuEngine::Kubernetes, "web", 2_500),
                ],
            ),
            // Idle, two Ray holders saying no compute: shared equally.
            episode(
                "idle",
                2 * H,
                Some(4 * H),
                vec![
                    holder(GpuEngine::Ray, "ray-job-01", 0),
                    holder(GpuEngine::Ray, "ray-job-02", 0),
                ],
            ),
            episode("double-booked", 3 * H, Some(3 * H + H / 2), vec![]),
            episode("unexplained", 0, Some(H / 2), vec![]),
            // Wholly before the window: not counted.
            episode("double-booked", 0, Some(H / 2), vec![]),
        ];
        let refs: Vec<&FlagEpisode> = all.iter().collect();
        let t = add_up(&refs, Timestamp(H), Timestamp(4 * H));
        let flags: Vec<(&str, usize, f64)> = t
            .by_flag
            .iter()
            .map(|f| (f.flag.as_str(), f.episodes, f.gpu_time.hours()))
            .collect();
        assert_eq!(flags, [("double-booked", 1, 0.5), ("idle", 3, 6.0)]);
        let owners: Vec<(GpuEngine, &str, &str, f64)> = t
            .idle_by_owner
            .iter()
            .map(|o| (o.engine, o.kind.as_str(), o.name.as_str(), o.idle.hours()))
            .collect();
        assert_eq!(
            owners,
            [
                (GpuEngine::Kubernetes, "namespace", "ml", 2.25),
                (GpuEngine::Ray, "job", "ray-job-01", 1.0),
                (GpuEngine::Ray, "job", "ray-job-02", 1.0),
                (GpuEngine::Slurm, "account", "ml", 1.0),
                (GpuEngine::Kubernetes, "namespace", "web", 0.75),
            ]
        );
    }
}
