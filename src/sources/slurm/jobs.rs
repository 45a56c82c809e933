//! Slurm jobs as claims: a running job is a placed claim per node it holds GPUs or shards
//! on, a pending job asking for them is a pending claim with Slurm's reason, explained.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::answers::SlurmJob;
use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::placement::DeviceShare;
use crate::request::{ClaimRequest, GpuForm};
use crate::snapshot::{ClaimState, ClaimView};
use crate::sources::gres::{self, Gres};
use crate::units::{Bytes, SLOTS_PER_DEVICE, Slots, UNITS_PER_DEVICE, Units};

/// Shards per GPU on each node, by node name.
pub(super) type ShardsPerGpu<'a> = BTreeMap<&'a str, u64>;

/// The claims of one job: pending, or placed on each node it holds GPUs on.
pub(super) fn job_claims(j: &SlurmJob, shards_per_gpu: &ShardsPerGpu<'_>) -> Vec<ClaimView> {
    if j.state == "PENDING" {
        return pending_claim(j).into_iter().collect();
    }
    j.held
        .iter()
        .filter_map(|(node, held)| {
            let per_gpu = shards_per_gpu.get(node.as_str()).copied().unwrap_or(0);
            placed_claim(j, node, held, per_gpu, j.held.len() > 1)
        })
        .collect()
}

/// The request behind a job's claims, in gpuboard's terms.
fn request_of(j: &SlurmJob, form: GpuForm, wait: bool) -> ClaimRequest {
    let (_, _, want_type) = wanted(&j.wants);
    ClaimRequest {
        gpu: Some(form),
        accelerator_type: want_type,
        cpus: None,
        node: None,
        devices: None,
        project: project_of(&j.account),
        holder: Some(j.user.clone()),
        ttl: None,
        pid: None,
        expected_duration: None,
        labels: BTreeMap::from([
            ("slurm.job_id".to_string(), j.id.to_string()),
            ("slurm.name".to_string(), j.name.clone()),
            ("slurm.partition".to_string(), j.partition.clone()),
        ]),
        wait,
    }
}

/// `job 42 train [gpu]: gpu:a100:2(IDX:0,1)`.
fn form_text(j: &SlurmJob, detail: &str) -> String {
    format!(
        "job {} {} [{}]: {detail}",
        j.id,
        j.name,
        if j.partition.is_empty() {
            "?"
        } else {
            &j.partition
        }
    )
}

/// A pending job asking for GPUs or shards; `None` when it asks for neither.
fn pending_claim(j: &SlurmJob) -> Option<ClaimView> {
    let (want_gpus, want_shards, _) = wanted(&j.wants);
    if want_gpus == 0 && want_shards == 0 {
        return None;
    }
    let form = if want_gpus > 0 {
        GpuForm::Vendor {
            count: u32_of(want_gpus),
        }
    } else {
        GpuForm::RayFraction {
            fraction: Units(u32_of(want_shards)),
        }
    };
    Some(ClaimView {
        id: claim_id(j.id, ""),
        name: Some(j.id.to_string()),
        state: ClaimState::Pending,
        project: project_of(&j.account),
        holder: Some(j.user.clone()),
        form: form_text(j, &j.wants),
        request: request_of(j, form, true),
        node: None,
        shares: Vec::new(),
        memory_reserved: Bytes(0),
        compute_reserved: Units(0),
        memory_used: None,
        over_limit: false,
        idle: false,
        created_at: Timestamp(j.submit_s.saturating_mul(1000)),
        lease_expires_at: None,
        pending_reasons: vec![explain(&j.reason)],
        infeasible: j.reason == "BadConstraints" || j.reason == "DependencyNeverSatisfied",
    })
}

/// What a running job holds on one node: whole GPUs at their indexes, shards as that
/// part of their GPU (`per_gpu` shards make a GPU). `None` when it holds neither there.
/// `several`: the job holds GPUs on more than one node, so each part is named by its node.
fn placed_claim(
    j: &SlurmJob,
    node: &str,
    held: &[Gres],
    per_gpu: u64,
    several: bool,
) -> Option<ClaimView> {
    let mut shares: BTreeMap<u32, (Units, Slots)> = BTreeMap::new();
    let mut whole = 0u64;
    let mut shard_count = 0u64;
    for g in held {
        let Some(idx) = &g.indexes else {
            continue;
        };
        match g.name.as_str() {
            "gpu" => {
                for &i in idx {
                    shares.insert(i, (Units::FULL, Slots(SLOTS_PER_DEVICE)));
                    whole += 1;
                }
            }
            "shard" if !idx.is_empty() => {
                shard_count += g.count;
                // Shards over several GPUs: Slurm spreads them evenly.
                let n = idx.len() as u64;
                for (k, &i) in idx.iter().enumerate() {
                    let here = g.count / n + u64::from((k as u64) < g.count % n);
                    // Unknown shards per GPU (none configured): no compute counted.
                    let compute = u64::from(UNITS_PER_DEVICE)
                        .saturating_mul(here)
                        .checked_div(per_gpu)
                        .map_or(Units(0), |u| {
                            Units(u32_of(u.min(u64::from(UNITS_PER_DEVICE))))
                        });
                    let e = shares.entry(i).or_insert((Units(0), Slots(0)));
                    e.0 += compute;
                    e.1 += Slots(u32_of(here.min(u64::from(SLOTS_PER_DEVICE))));
                }
            }
            _ => {}
        }
    }
    if shares.is_empty() {
        return None;
    }
    let shares: Vec<DeviceShare> = shares
        .into_iter()
        .map(|(device, (compute, slots))| DeviceShare {
            device,
            memory: Bytes(0),
            compute,
            slots,
        })
        .collect();
    let form = if whole > 0 {
        GpuForm::Vendor {
            count: u32_of(whole),
        }
    } else {
        GpuForm::RayFraction {
            fraction: shares.iter().fold(Units(0), |a, s| a + s.compute),
        }
    };
    let detail: Vec<String> = held.iter().map(show_gres).collect();
    let detail = if shard_count > 0 && per_gpu > 0 {
        format!("{} ({per_gpu} shards per GPU)", detail.join(","))
    } else {
        detail.join(",")
    };
    Some(ClaimView {
        id: claim_id(j.id, node),
        // The job id squeue prints; a job on several nodes is a claim per node.
        name: Some(if several {
            format!("{}@{node}", j.id)
        } else {
            j.id.to_string()
        }),
        state: ClaimState::Placed,
        project: project_of(&j.account),
        holder: Some(j.user.clone()),
        form: form_text(j, &detail),
        request: request_of(j, form, false),
        node: Some(node.to_string()),
        compute_reserved: shares.iter().fold(Units(0), |a, s| a + s.compute),
        shares,
        memory_reserved: Bytes(0),
        memory_used: None,
        over_limit: false,
        idle: false,
        created_at: Timestamp(j.start_s.saturating_mul(1000)),
        lease_expires_at: None,
        pending_reasons: Vec::new(),
        infeasible: false,
    })
}

/// GPUs and shards a request asks for per node: (gpus, shards, type).
fn wanted(wants: &str) -> (u64, u64, Option<String>) {
    let mut out = (0, 0, None);
    for part in wants.split(',') {
        let Ok(items) = gres::parse(part) else {
            continue;
        };
        for g in items {
            match g.name.as_str() {
                "gpu" => out.0 += g.count,
                "shard" => out.1 += g.count,
                _ => continue,
            }
            if out.2.is_none() {
                out.2.clone_from(&g.kind);
            }
        }
    }
    out
}

/// Slurm's pending reasons, explained.
fn explain(reason: &str) -> String {
    let why = match reason {
        "Resources" => "waiting for resources to become free",
        "Priority" => "higher-priority jobs are ahead of it",
        "Dependency" => "waiting for a job it depends on",
        "DependencyNeverSatisfied" => "a job it depends on failed; it will never start",
        "ReqNodeNotAvail" => "a node it needs is unavailable (down, drained or reserved)",
        "PartitionDown" => "its partition is down",
        "PartitionInactive" => "its partition is inactive",
        "PartitionNodeLimit" | "PartitionConfig" => "it asks for more than its partition allows",
        "BadConstraints" => "no node could ever satisfy it",
        "JobHeldUser" => "held by its user",
        "JobHeldAdmin" => "held by an administrator",
        "BeginTime" => "its start time has not come",
        "Reservation" => "waiting for its reservation",
        "None" | "" => "not yet considered by the scheduler",
        r if r.starts_with("QOS") || r.starts_with("Assoc") => "a limit of its QOS or account",
        _ => "",
    };
    if why.is_empty() {
        format!("Slurm: {reason}")
    } else {
        format!("Slurm: {reason} ({why})")
    }
}

/// A stable claim id for a job's part on one node (`""` for a pending job).
fn claim_id(job: u64, node: &str) -> ClaimId {
    ClaimId::of_name(&format!("slurm-job/{job}/{node}"))
}

/// A count as `u32`, saturating.
pub(super) fn u32_of(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The project a job counts under: its account.
fn project_of(account: &str) -> String {
    if account.is_empty() || account == "(null)" {
        "(no account)".to_string()
    } else {
        account.to_string()
    }
}

/// A GRES as Slurm writes it: `gpu:a100:2(IDX:0,1)`.
fn show_gres(g: &Gres) -> String {
    let mut s = g.name.clone();
    if let Some(k) = &g.kind {
        s.push(':');
        s.push_str(k);
    }
    let _ = write!(s, ":{}", g.count);
    if let Some(idx) = &g.indexes {
        let list: Vec<String> = idx.iter().map(u32::to_string).collect();
        let _ = write!(s, "(IDX:{})", list.join(","));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_from_job_tres() {
        assert_eq!(wanted("gres:gpu:a100:3"), (3, 0, Some("a100".into())));
        assert_eq!(wanted("gres:shard:8"), (0, 8, None));
        assert_eq!(
            wanted("gres:gpu:1,gres:shard:a100:2"),
            (1, 2, Some("a100".into()))
        );
        assert_eq!(wanted(""), (0, 0, None));
    }

    #[test]
    fn a_job_goes_by_its_id_and_by_node_when_it_spans_several() {
        let gpus = |detail: &str| gres::parse(detail).unwrap();
        let mut job = SlurmJob {
            id: 4242,
            name: "train".into(),
            user: "ann".into(),
            account: "vision".into(),
            partition: "gpu".into(),
            state: "RUNNING".into(),
            reason: "None".into(),
            wants: "gres:gpu:2".into(),
            held: vec![("node-a".into(), gpus("gpu:a100:2(IDX:0-1)"))],
            start_s: 1_800_000_000,
            submit_s: 1_799_999_000,
        };
        let names = |j: &SlurmJob| -> Vec<Option<String>> {
            job_claims(j, &ShardsPerGpu::new())
                .into_iter()
                .map(|c| c.name)
                .collect()
        };
        assert_eq!(names(&job), [Some("4242".to_string())]);
        job.held
            .push(("node-b".into(), gpus("gpu:a100:2(IDX:0-1)")));
        assert_eq!(
            names(&job),
            [
                Some("4242@node-a".to_string()),
                Some("4242@node-b".to_string())
            ]
        );
        // Pending: the job id, and its age from when it was submitted.
        job.state = "PENDING".into();
        let pending = job_claims(&job, &ShardsPerGpu::new());
        assert_eq!(pending[0].name.as_deref(), Some("4242"));
        assert_eq!(pending[0].created_at, Timestamp(1_799_999_000_000));
    }

    #[test]
    fn reasons_are_explained() {
        assert_eq!(
            explain("Resources"),
            "Slurm: Resources (waiting for resources to become free)"
        );
        assert_eq!(explain("Odd"), "Slurm: Odd");
        assert!(explain("QOSMaxGRESPerUser").contains("QOS"));
    }
}
