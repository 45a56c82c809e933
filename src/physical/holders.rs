//! Every engine's holders of one GPU in one tree, and each process under its holder.
//!
//! Nesting, so one hold is not counted twice:
//! - a Ray worker on a Ray node that is a pod is inside that pod;
//! - a claim (`gpuboard run`) whose process runs in a Slurm job's or a pod's cgroup is
//!   inside that job or pod;
//! - a process goes to the claim its environment names, else to the pod or job its cgroup
//!   names (to the pod's one Ray worker on the GPU, when it has exactly one); a process no
//!   holder accounts for is unexplained.

use crate::ids::ClaimId;
use crate::snapshot::{ClaimView, ProcessOwner};

use super::join::Seen;
use super::prepare::Hold;
use super::{GpuEngine, GpuHolder, GpuProcess};

/// What a holder is, in a few words.
pub(super) fn label(engine: GpuEngine, c: &ClaimView) -> String {
    let l = |k: &str| c.request.labels.get(k);
    let holder = c.holder.as_deref().unwrap_or_default();
    match engine {
        GpuEngine::Slurm => match l("slurm.job_id") {
            Some(id) => format!("Slurm job {id}"),
            None => c.form.clone(),
        },
        GpuEngine::Kubernetes => match (l("k8s.namespace"), l("k8s.pod")) {
            (Some(ns), Some(pod)) => format!("pod {ns}/{pod}"),
            _ => c.form.clone(),
        },
        GpuEngine::Ray => format!("Ray {holder}"),
        GpuEngine::Boinc => format!("BOINC {}", if holder.is_empty() { &c.form } else { holder }),
        GpuEngine::Gpuboard if holder.is_empty() => format!("claim {}", c.id),
        GpuEngine::Gpuboard => format!("claim {} ({holder})", c.id),
        GpuEngine::Telemetry => c.form.clone(),
    }
}

/// Whether the engine says which GPU it holds (Kubernetes without a sharing scheduler's
/// annotation does not: the claim is shown on the first free ones).
pub(super) fn guessed(engine: GpuEngine, c: &ClaimView) -> bool {
    engine == GpuEngine::Kubernetes
        && c.request.labels.get("k8s.devices").map(String::as_str) == Some("guessed")
}

/// The holders of one GPU and its processes, each under its holder.
pub(super) fn holders_of(seen: &[Seen<'_>]) -> (Vec<GpuHolder>, Vec<GpuProcess>) {
    let mut holders: Vec<GpuHolder> = Vec::new();
    let mut holds: Vec<&Hold> = Vec::new();
    // One hold per engine claim (two sources reading one cluster report it once); a
    // gpuboard claim id is its endpoint's own, so there it is per source.
    // A GPU has a few holders: looking through them is cheaper than a map.
    let mut insides: Vec<(usize, (usize, ClaimId))> = Vec::new();
    for s in seen {
        let engine = s.sighting.engine;
        for hold in s.holds {
            let claim = hold.holder.claim;
            if holders.iter().any(|h| {
                h.engine == engine
                    && h.claim == claim
                    && (engine != GpuEngine::Gpuboard || h.source == s.sighting.source)
            }) {
                continue;
            }
            if let Some(inside) = s.inside {
                insides.push((holders.len(), inside));
            }
            holds.push(hold);
            holders.push(hold.holder.clone());
        }
    }
    let find = |holders: &[GpuHolder], source: usize, claim: ClaimId| {
        holders
            .iter()
            .position(|h| h.source == source && h.claim == claim)
    };
    for (child, (source, claim)) in insides {
        if let Some(p) = find(&holders, source, claim)
            && p != child
        {
            holders[child].parent = Some(p);
        }
    }
    let owner_of = |holders: &[GpuHolder], owner: &ProcessOwner| -> Option<usize> {
        holders.iter().zip(&holds).position(|(h, c)| match owner {
            ProcessOwner::Pod { uid, .. } => {
                h.engine == GpuEngine::Kubernetes && c.pod_uid.as_deref() == Some(uid.as_str())
            }
            ProcessOwner::SlurmJob { job, .. } => {
                h.engine == GpuEngine::Slurm && c.job == Some(*job)
            }
            ProcessOwner::Docker { .. } => false,
        })
    };
    let (mut processes, claims_of) = processes_of(seen);
    // First the claims the processes name, nested in the job or pod their cgroup names.
    for (p, claim) in processes.iter_mut().zip(&claims_of) {
        let Some(claim) = claim else { continue };
        let Some(h) = find(&holders, p.source, *claim) else {
            continue;
        };
        p.holder = Some(h);
        if let Some(o) = p.owner.as_ref().and_then(|o| owner_of(&holders, o))
            && o != h
            && holders[h].parent.is_none()
            && !is_under(&holders, o, h)
        {
            holders[h].parent = Some(o);
        }
    }
    // Then the rest by cgroup: to the pod's one Ray worker when it has exactly one.
    for p in processes.iter_mut().filter(|p| p.holder.is_none()) {
        let Some(o) = p.owner.as_ref().and_then(|o| owner_of(&holders, o)) else {
            continue;
        };
        let mut workers = holders
            .iter()
            .enumerate()
            .filter(|(_, h)| h.parent == Some(o) && h.engine == GpuEngine::Ray);
        p.holder = match (workers.next(), workers.next()) {
            (Some((w, _)), None) => Some(w),
            _ => Some(o),
        };
    }
    (holders, processes)
}

/// Every process on the GPU, each once (the first source's listing), with the source that
/// listed it, not yet placed; and the claim each one's environment names.
fn processes_of(seen: &[Seen<'_>]) -> (Vec<GpuProcess>, Vec<Option<ClaimId>>) {
    let mut processes: Vec<GpuProcess> = Vec::new();
    let mut claims_of: Vec<Option<ClaimId>> = Vec::new();
    for s in seen {
        let Some(t) = &s.device.telemetry else {
            continue;
        };
        for p in &t.processes {
            if processes.iter().any(|q| q.pid == p.pid) {
                continue;
            }
            claims_of.push(p.claim);
            processes.push(GpuProcess {
                pid: p.pid,
                name: p.name.clone(),
                used_memory: p.used_memory,
                owner: p.owner.clone(),
                holder: None,
                source: s.sighting.source,
            });
        }
    }
    (processes, claims_of)
}

/// Whether `a` is `b` or nested (at any depth) in `b`.
fn is_under(holders: &[GpuHolder], a: usize, b: usize) -> bool {
    let mut at = Some(a);
    for _ in 0..=holders.len() {
        match at {
            Some(i) if i == b => return true,
            Some(i) => at = holders.get(i).and_then(|h| h.parent),
            None => return false,
        }
    }
    false
}
