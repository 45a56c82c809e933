//! Physical GPUs across sources: every source that sees a GPU (a gpuboard endpoint's
//! NVML, Slurm's gres, Kubernetes' nodes, Ray's raylets, Prometheus' dcgm series) lists
//! it as its own device; this joins those devices into one GPU each, puts every engine's
//! holders of it in one tree (a pod over the Ray worker in it over the process in its
//! cgroup; a Slurm job over the `gpuboard run` inside it), and flags what no one engine
//! can see: two holders that together ask more than the GPU has, memory used by processes
//! no holder accounts for, and holders of a GPU that has done nothing for long.
//!
//! A GPU is known by its UUID where any source gives one, else by node and index, with
//! node names matched across sources (`names`). A device that cannot be matched stays
//! alone, with a warning that says why. Pure: the caller brings the snapshots and the time.

mod episodes;
mod flags;
mod holders;
mod join;
mod kept;
mod names;
mod prepare;

use std::sync::Arc;

use serde::Serialize;

use crate::ids::ClaimId;
use crate::snapshot::{DeviceTelemetry, ProcessOwner, Snapshot};
use crate::units::{Bytes, Units};

pub use episodes::{EpisodeHolder, FlagEpisode, FlagTracker};
pub use flags::{GpuFlag, IDLE_BELOW_PERCENT, IDLE_FOR_MS, IdleClock, Resource};
pub use join::join;
pub use kept::{Joiner, SharedSource};
pub use names::{Aliases, NodeMatch, NodeNames};

/// One source's data, as the join reads it.
#[derive(Clone, Copy, Debug)]
pub struct SourceView<'a> {
    /// The source's position (the console's source index).
    pub source: usize,
    /// Its display name.
    pub name: &'a str,
    /// The engine it speaks for.
    pub engine: GpuEngine,
    /// Its snapshot.
    pub snapshot: &'a Snapshot,
}

/// The engine a source speaks for (its `SourceKind`, as the join needs it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuEngine {
    /// A gpuboard endpoint (or the embedded scheduler, or the demo).
    Gpuboard,
    /// Slurm.
    Slurm,
    /// Kubernetes.
    Kubernetes,
    /// Ray.
    Ray,
    /// BOINC.
    Boinc,
    /// Telemetry only (Prometheus dcgm series, a host read over SSH): sees GPUs, holds none.
    Telemetry,
}

impl GpuEngine {
    /// Its name as screens show it.
    pub fn word(self) -> &'static str {
        match self {
            GpuEngine::Gpuboard => "gpuboard",
            GpuEngine::Slurm => "slurm",
            GpuEngine::Kubernetes => "kubernetes",
            GpuEngine::Ray => "ray",
            GpuEngine::Boinc => "boinc",
            GpuEngine::Telemetry => "telemetry",
        }
    }
}

/// A shared string, written as a string.
fn shared_str<S: serde::Serializer>(s: &Arc<str>, to: S) -> Result<S::Ok, S::Error> {
    to.serialize_str(s)
}

/// A shared string or none, written as a string or null.
// serde's signature for `serialize_with`: the field's type by reference.
#[allow(clippy::ref_option)]
fn shared_opt_str<S: serde::Serializer>(s: &Option<Arc<str>>, to: S) -> Result<S::Ok, S::Error> {
    match s {
        Some(s) => to.serialize_some(&**s),
        None => to.serialize_none(),
    }
}

/// Shared telemetry, written as the telemetry.
#[allow(clippy::ref_option)]
fn shared_telemetry<S: serde::Serializer>(
    t: &Option<Arc<DeviceTelemetry>>,
    to: S,
) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => to.serialize_some(&**t),
        None => to.serialize_none(),
    }
}

/// One source's device, as a sighting of a physical GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Sighting {
    /// The source's position.
    pub source: usize,
    /// The source's name (shared by all its sightings).
    #[serde(serialize_with = "shared_str")]
    pub source_name: Arc<str>,
    /// Its engine.
    pub engine: GpuEngine,
    /// The node as that source names it (shared by the node's devices).
    #[serde(serialize_with = "shared_str")]
    pub node: Arc<str>,
    /// The device index in that source.
    pub index: u32,
    /// The UUID that source gives, if any (trimmed, lower case; shared likewise).
    #[serde(serialize_with = "shared_opt_str")]
    pub uuid: Option<Arc<str>>,
}

/// One engine's hold on a GPU: a claim, a Slurm job, a pod, a Ray worker, a BOINC task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuHolder {
    /// The source that reports it.
    pub source: usize,
    /// That source's name.
    #[serde(serialize_with = "shared_str")]
    pub source_name: Arc<str>,
    /// Its engine.
    pub engine: GpuEngine,
    /// Its claim id in that source.
    pub claim: ClaimId,
    /// What it is, in a few words (`Slurm job 42`, `pod ml/train-0`, `Ray actor Trainer`);
    /// shared with the next joins while its source does not change.
    #[serde(serialize_with = "shared_str")]
    pub label: Arc<str>,
    /// Its project (account, namespace, Ray job), shared likewise.
    #[serde(serialize_with = "shared_str")]
    pub project: Arc<str>,
    /// Memory it holds on this GPU (zero when its engine does not count memory).
    pub memory: Bytes,
    /// Compute it holds on this GPU.
    pub compute: Units,
    /// The holder it is nested in (an index into the same GPU's holders).
    pub parent: Option<usize>,
    /// Its engine does not say which GPU it holds; it is shown on one, not known there,
    /// so it books nothing twice.
    pub guessed: bool,
}

/// A process on a GPU and the holder it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuProcess {
    /// Host pid.
    pub pid: u32,
    /// Name, when readable.
    pub name: Option<String>,
    /// GPU memory it uses.
    pub used_memory: Option<Bytes>,
    /// Whose it is by its cgroup.
    pub owner: Option<ProcessOwner>,
    /// The holder it belongs to (an index into the GPU's holders); `None`: unexplained.
    pub holder: Option<usize>,
    /// The source whose telemetry listed it.
    pub source: usize,
}

/// One physical GPU as every source sees it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhysicalGpu {
    /// Its node (the key its names matched on: lower case, short unless ambiguous).
    pub node: String,
    /// Its index on the node.
    pub index: u32,
    /// Its UUID, when any source gives one (lower case).
    pub uuid: Option<String>,
    /// Model name.
    pub model: String,
    /// Memory, from the sources' capacity or the driver's total.
    pub memory: Option<Bytes>,
    /// The sources that see it, in source order.
    pub seen_by: Vec<Sighting>,
    /// Live telemetry from whichever source has it (NVML first: it lists processes),
    /// shared with the next joins while that source does not change.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "shared_telemetry"
    )]
    pub telemetry: Option<Arc<DeviceTelemetry>>,
    /// The source the telemetry is from.
    pub telemetry_from: Option<usize>,
    /// Every engine's holders; children name their parent.
    pub holders: Vec<GpuHolder>,
    /// Processes on it, each with its holder.
    pub processes: Vec<GpuProcess>,
    /// What is wrong with it.
    pub flags: Vec<GpuFlag>,
    /// Why this device could not be matched to other sources' devices, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unmatched: Option<String>,
}

impl PhysicalGpu {
    /// A stable key: the UUID, else `node:index`.
    pub fn id(&self) -> String {
        self.uuid
            .clone()
            .unwrap_or_else(|| format!("{}:{}", self.node, self.index))
    }

    /// Whether its `id` is `id`, without making the id.
    pub fn is(&self, id: &str) -> bool {
        match &self.uuid {
            Some(u) => u == id,
            None => id.rsplit_once(':').is_some_and(|(node, index)| {
                node == self.node
                    && (index == "0" || !index.starts_with('0'))
                    && index.bytes().all(|b| b.is_ascii_digit())
                    && index.parse() == Ok(self.index)
            }),
        }
    }

    /// `node:index`, as `:gpu` takes it.
    pub fn place(&self) -> String {
        format!("{}:{}", self.node, self.index)
    }

    /// The chain of holders from the outermost down to `holder` (labels).
    pub fn chain(&self, holder: usize) -> Vec<&GpuHolder> {
        let mut out = Vec::new();
        let mut at = Some(holder);
        while let Some(i) = at {
            let Some(h) = self.holders.get(i) else { break };
            if out.len() > self.holders.len() {
                break;
            }
            out.push(h);
            at = h.parent;
        }
        out.reverse();
        out
    }

    /// Holders nested in none.
    pub fn roots(&self) -> impl Iterator<Item = (usize, &GpuHolder)> {
        self.holders
            .iter()
            .enumerate()
            .filter(|(_, h)| h.parent.is_none())
    }

    /// The holders directly inside `parent` (or the roots for `None`).
    pub fn children(&self, parent: Option<usize>) -> impl Iterator<Item = (usize, &GpuHolder)> {
        self.holders
            .iter()
            .enumerate()
            .filter(move |(_, h)| h.parent == parent)
    }

    /// The sources that see it, by name, each once.
    pub fn source_names(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for s in &self.seen_by {
            if !out.contains(&&*s.source_name) {
                out.push(&s.source_name);
            }
        }
        out
    }

    /// Whether it carries a flag of this kind (`double-booked`, `unexplained`, `idle`).
    pub fn has_flag(&self, word: &str) -> bool {
        self.flags.iter().any(|f| f.word() == word)
    }
}

/// Shared GPUs, written as the GPUs.
fn shared_gpus<S: serde::Serializer>(gpus: &[Arc<PhysicalGpu>], to: S) -> Result<S::Ok, S::Error> {
    to.collect_seq(gpus.iter().map(|g| &**g))
}

/// Every physical GPU, and what could not be matched.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PhysicalFleet {
    /// GPUs by node and index, each shared with the next joins while no device of it
    /// changes (`Joiner`); one changed here is copied first (`Arc::make_mut`).
    #[serde(serialize_with = "shared_gpus")]
    pub gpus: Vec<Arc<PhysicalGpu>>,
    /// Why devices were left unmatched, one line each.
    pub warnings: Vec<String>,
}

impl PhysicalFleet {
    /// The GPU at `node:index`, the node matched as the join matches names (case, short
    /// name, or any source's own name for it).
    pub fn find(&self, node: &str, index: u32) -> Option<&PhysicalGpu> {
        let lower = node.to_lowercase();
        let short = lower.split('.').next().unwrap_or(&lower).to_string();
        let at = |g: &&PhysicalGpu| {
            g.index == index
                && (g.node == lower
                    || g.node == short
                    || g.seen_by.iter().any(|s| s.node.eq_ignore_ascii_case(node)))
        };
        let gpus = || self.gpus.iter().map(|g| &**g);
        gpus()
            .find(|g| at(g) && g.unmatched.is_none())
            .or_else(|| gpus().find(at))
    }

    /// How many GPUs carry a flag of this kind.
    pub fn count_flag(&self, word: &str) -> usize {
        self.gpus.iter().filter(|g| g.has_flag(word)).count()
    }
}

#[cfg(test)]
mod tests;
