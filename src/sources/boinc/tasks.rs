//! BOINC tasks as claims: every unfinished task that uses a GPU is a claim, placed on
//! the device the client names while it runs, pending with why it waits otherwise; and
//! what all tasks use, per project and resource, for the project section.

use std::collections::BTreeMap;

use super::answers::seconds_to_ms;
use super::state::{AppVersion, CcStatus, ClientState, Project, Task};
use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::placement::DeviceShare;
use crate::request::{ClaimRequest, GpuForm, Milli};
use crate::snapshot::{ClaimState, ClaimView};
use crate::units::{Bytes, SLOTS_PER_DEVICE, Slots, UNITS_PER_DEVICE, Units};

/// Where each coprocessor type's devices start, and how many there are: type -> (first, count).
pub(super) type FirstIndex<'a> = BTreeMap<&'a str, (u32, u32)>;

/// What the unfinished tasks use.
#[derive(Debug, Default)]
pub(super) struct TaskUse {
    /// CPUs the running tasks use.
    pub(super) cpus_used: f64,
    /// (project url, resource) -> (used instances, pending tasks).
    pub(super) use_of: BTreeMap<(String, String), (f64, u32)>,
    /// project url -> (running tasks, pending tasks).
    pub(super) tasks_of: BTreeMap<String, (u32, u32)>,
}

/// The claims of the GPU tasks, and what every unfinished task uses.
pub(super) fn task_claims(
    st: &ClientState,
    cc: &CcStatus,
    node_name: &str,
    first_index: &FirstIndex<'_>,
) -> (Vec<ClaimView>, TaskUse) {
    let project_by_url: BTreeMap<&str, &Project> =
        st.projects.iter().map(|p| (p.url.as_str(), p)).collect();
    let mut claims = Vec::new();
    let mut usage = TaskUse::default();
    // GPUs of each type the running tasks take, to say when a waiting task finds none.
    let mut taken: BTreeMap<String, f64> = BTreeMap::new();
    for t in st.tasks.iter().filter(|t| running(t)) {
        if let Some((kind, n)) = version_of(st, t).and_then(|v| v.gpu.clone()) {
            *taken.entry(kind).or_default() += n;
        }
    }
    for t in st.tasks.iter().filter(|t| unfinished(t)) {
        let av = version_of(st, t);
        let cpus = av.map_or(1.0, |v| v.cpus);
        let gpu = av.and_then(|v| v.gpu.clone());
        let run = running(t);
        let counts = usage.tasks_of.entry(t.project.clone()).or_default();
        if run {
            counts.0 += 1;
            usage.cpus_used += cpus;
        } else {
            counts.1 += 1;
        }
        let resource = gpu.as_ref().map_or("CPU".to_string(), |(k, _)| k.clone());
        let u = usage
            .use_of
            .entry((t.project.clone(), resource.clone()))
            .or_default();
        if run {
            u.0 += gpu.as_ref().map_or(cpus, |(_, n)| *n);
        } else {
            u.1 += 1;
        }
        if gpu.is_some() && run {
            usage
                .use_of
                .entry((t.project.clone(), "CPU".to_string()))
                .or_default()
                .0 += cpus;
        }
        let Some((kind, fraction)) = gpu else {
            continue;
        };
        let project = project_by_url.get(t.project.as_str()).copied();
        let count = first_index.get(kind.as_str()).map_or(0, |(_, n)| *n);
        let all_taken =
            count > 0 && taken.get(&kind).copied().unwrap_or(0.0) + fraction > f64::from(count);
        let gpu = GpuUse {
            kind,
            fraction,
            cpus,
            all_taken,
        };
        claims.push(task_claim(t, &gpu, project, cc, node_name, first_index));
    }
    (claims, usage)
}

/// The GPU a task's app version uses: the coprocessor type, the fraction of one device,
/// and the CPUs beside it; whether the running tasks leave too little of that type for it.
struct GpuUse {
    kind: String,
    fraction: f64,
    cpus: f64,
    all_taken: bool,
}

/// One GPU task as a claim.
fn task_claim(
    t: &Task,
    gpu: &GpuUse,
    project: Option<&Project>,
    cc: &CcStatus,
    node_name: &str,
    first_index: &FirstIndex<'_>,
) -> ClaimView {
    let GpuUse {
        kind,
        fraction,
        cpus,
        ..
    } = gpu;
    let (fraction, cpus) = (*fraction, *cpus);
    let run = running(t);
    let project_name = project.map_or(t.project.clone(), |p| p.name.clone());
    let per_device = units(fraction.min(1.0));
    let whole = fraction >= 1.0;
    let (first, count) = first_index.get(kind.as_str()).copied().unwrap_or((0, 0));
    let mut shares = Vec::new();
    let mut reasons = Vec::new();
    if run {
        let mut nums = device_numbers(&t.resources);
        if nums.is_empty() && count == 1 {
            nums.push(0);
        }
        for n in nums.into_iter().filter(|n| *n < count) {
            shares.push(DeviceShare {
                device: first + n,
                memory: Bytes(0),
                compute: per_device,
                slots: if whole {
                    Slots(SLOTS_PER_DEVICE)
                } else {
                    Slots(1)
                },
            });
        }
    } else {
        reasons = waiting_reasons(t, project, gpu, cc);
    }
    let form = if whole {
        GpuForm::RayWhole {
            count: fraction.round().max(1.0) as u32,
        }
    } else {
        GpuForm::RayFraction {
            fraction: per_device,
        }
    };
    let request = ClaimRequest {
        gpu: Some(form),
        accelerator_type: Some(kind.clone()),
        cpus: Some(Milli((cpus.max(0.0) * 1000.0).round() as u64)),
        node: None,
        devices: None,
        project: project_name.clone(),
        holder: Some(t.name.clone()),
        ttl: None,
        pid: None,
        expected_duration: None,
        labels: BTreeMap::from([
            ("boinc.app".to_string(), t.app.clone()),
            ("boinc.project_url".to_string(), t.project.clone()),
            // Whether the GUI suspended it: what the console's `E` offers (resume or suspend).
            ("boinc.suspended".to_string(), t.suspended.to_string()),
        ]),
        wait: !run,
    };
    let form_text = format!(
        "{} ({fraction} {kind} GPU, {cpus} CPU{})",
        request.describe(),
        if cpus == 1.0 { "" } else { "s" }
    );
    ClaimView {
        id: claim_id(&t.project, &t.name),
        // The task's name, as boinccmd and the Manager show it.
        name: Some(t.name.clone()),
        state: if run {
            ClaimState::Placed
        } else {
            ClaimState::Pending
        },
        project: project_name,
        holder: Some(t.name.clone()),
        form: form_text,
        request,
        node: run.then(|| node_name.to_string()),
        compute_reserved: shares.iter().fold(Units(0), |a, s| a + s.compute),
        shares,
        memory_reserved: Bytes(0),
        memory_used: None,
        over_limit: false,
        idle: false,
        created_at: Timestamp(seconds_to_ms(t.received_s)),
        lease_expires_at: None,
        pending_reasons: reasons,
        infeasible: !run && count == 0,
    }
}

/// Why a GPU task that is not running waits, in the client's terms.
fn waiting_reasons(
    t: &Task,
    project: Option<&Project>,
    gpu: &GpuUse,
    cc: &CcStatus,
) -> Vec<String> {
    let kind = &gpu.kind;
    let mut reasons = Vec::new();
    if t.suspended {
        reasons.push("task suspended via the GUI".to_string());
    }
    if project.is_some_and(|p| p.suspended) {
        reasons.push("project suspended via the GUI".to_string());
    }
    if t.coproc_missing {
        reasons.push(format!("the {kind} GPU it needs is missing"));
    }
    if let Some(w) = &t.scheduler_wait {
        reasons.push(format!("postponed: {w}"));
    }
    if cc.gpu_mode == 3 {
        reasons.push("GPU computing is set to never".to_string());
    } else if cc.gpu_suspend_reason != 0 {
        reasons.push(format!(
            "GPU computing suspended: {}",
            suspend_reason(cc.gpu_suspend_reason)
        ));
    }
    if cc.task_suspend_reason != 0 {
        reasons.push(format!(
            "computing suspended: {}",
            suspend_reason(cc.task_suspend_reason)
        ));
    }
    match t.state {
        0 | 1 => reasons.push("its input files are still downloading".to_string()),
        // A task suspended (or stopped by a reason above) is preempted because of it.
        _ if t.scheduled == Some(1) && reasons.is_empty() => {
            reasons.push("preempted by BOINC's CPU scheduler".to_string());
        }
        _ => {}
    }
    if reasons.is_empty() && gpu.all_taken {
        reasons.push(format!("every {kind} GPU is taken by running tasks"));
    }
    if reasons.is_empty() {
        reasons.push("ready; BOINC's scheduler has not started it".to_string());
    }
    reasons
}

/// The client's suspend reasons (`SUSPEND_REASON_*`), in its words.
fn suspend_reason(code: i64) -> String {
    match code {
        1 => "on batteries".to_string(),
        2 => "the computer is in use".to_string(),
        4 => "suspended by the user".to_string(),
        8 => "outside the allowed hours".to_string(),
        16 => "running CPU benchmarks".to_string(),
        32 => "disk space is low".to_string(),
        64 => "CPU throttling".to_string(),
        128 => "no recent input".to_string(),
        256 => "initial delay".to_string(),
        512 => "an exclusive app is running".to_string(),
        1024 => "the CPU is busy (non-BOINC load)".to_string(),
        2048 => "the network transfer limit is exceeded".to_string(),
        4096 => "requested by the operating system".to_string(),
        4097 => "not on Wi-Fi".to_string(),
        4098 => "the battery is charging".to_string(),
        4099 => "the battery is overheated".to_string(),
        4100 => "no GUI keep-alive".to_string(),
        other => format!("suspend reason {other}"),
    }
}

/// `(device N)` or `(devices N, M)` in a task's resources line.
fn device_numbers(resources: &str) -> Vec<u32> {
    let Some(start) = resources.find("(device") else {
        return Vec::new();
    };
    let rest = &resources[start..];
    let inner = rest[1..]
        .split(')')
        .next()
        .unwrap_or_default()
        .trim_start_matches("devices")
        .trim_start_matches("device");
    inner
        .split(',')
        .filter_map(|n| n.trim().parse::<u32>().ok())
        .collect()
}

/// FNV-1a of the task name, so a task keeps its claim id across fetches.
fn claim_id(project: &str, task: &str) -> ClaimId {
    ClaimId::of_name(&format!("{project}/{task}"))
}

/// A GPU fraction in gpuboard's grain.
fn units(fraction: f64) -> Units {
    Units(
        (fraction * f64::from(UNITS_PER_DEVICE))
            .round()
            .clamp(0.0, f64::from(u32::MAX)) as u32,
    )
}

/// A task's app version, matched the way the client matches it.
fn version_of<'a>(st: &'a ClientState, t: &Task) -> Option<&'a AppVersion> {
    st.app_versions.iter().find(|v| {
        v.project == t.project
            && v.app == t.app
            && v.version == t.version
            && v.plan_class == t.plan_class
    })
}

/// A task that has not finished computing: downloading or ready to run.
fn unfinished(t: &Task) -> bool {
    t.state <= 2
}

/// A task the client has scheduled and runs now.
fn running(t: &Task) -> bool {
    unfinished(t) && t.scheduled == Some(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_come_from_the_resources_line() {
        assert_eq!(
            device_numbers("0.985 CPUs + 0.5 NVIDIA GPUs (device 1)"),
            vec![1]
        );
        assert_eq!(
            device_numbers("1 CPU + 2 NVIDIA GPUs (devices 0, 3)"),
            vec![0, 3]
        );
        assert!(device_numbers("1 CPU").is_empty());
        assert!(device_numbers("(device").is_empty());
    }
}
