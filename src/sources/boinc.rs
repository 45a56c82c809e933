//! A BOINC client read through its GUI RPC, as a console source.
//!
//! Each fetch logs in (when a password file is configured) and sends `<get_state/>` (host,
//! coprocessors, projects, app versions, tasks, the client's clock) and `<get_cc_status/>`
//! (why computing or the GPU is suspended, GPU mode). In the snapshot:
//! - the host is one node; each coprocessor instance is a device (index across types in
//!   the order the client lists them), cordoned when the client's GPU mode is "never";
//! - every task that uses a GPU is a claim: placed while BOINC has it scheduled, on the
//!   device the client names, with the app version's GPU fraction; pending otherwise, with
//!   why it waits;
//! - every project carries its resource share, BOINC's scheduling priority, and per
//!   resource type (`CPU`, `NVIDIA`, `ATI`, `intel_gpu`...) the work-fetch backoff the
//!   client reports (`rsc_backoff_time`, `rsc_backoff_interval`), what it uses, a target
//!   share of the instances, and why it cannot fetch work now, in the client's terms.
//!   BOINC 7 keeps no per-resource debt (it schedules by recent credit): `debt` is 0.
//!
//! Actions: "update project" (`<project_update>`) makes the client contact the project now,
//! which clears its work-fetch backoffs; it is the clear-backoff action. Everything else
//! is refused (`refuse_action`): the client owns its tasks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::error::SourceError;
use super::guirpc::{GuiRpc, check_address};
use super::xml::{self, Element};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::ids::ClaimId;
use crate::placement::DeviceShare;
use crate::request::{ClaimRequest, GpuForm, Milli};
use crate::snapshot::{
    ClaimState, ClaimView, DeviceView, EndpointInfo, NodeView, ProjectResourceView, ProjectView,
    ResourceView, SCHEMA_VERSION, Snapshot,
};
use crate::units::{Bytes, SLOTS_PER_DEVICE, Slots, UNITS_PER_DEVICE, Units};

/// How to reach a BOINC client.
#[derive(Clone, Debug, PartialEq)]
pub struct BoincConfig {
    /// Display name of the endpoint; the client's host name when empty.
    pub name: String,
    /// The GUI RPC address, `host:port` (port 31416 when left out).
    pub address: String,
    /// A file holding the GUI RPC password (the client's `gui_rpc_auth.cfg`); first line used.
    pub password_file: Option<PathBuf>,
    /// Deadline for a whole fetch or action.
    pub timeout: Duration,
}

impl BoincConfig {
    /// A config with no password and a 5-second timeout.
    pub fn new(address: impl Into<String>) -> BoincConfig {
        BoincConfig {
            name: String::new(),
            address: address.into(),
            password_file: None,
            timeout: Duration::from_secs(5),
        }
    }
}

/// What the console shows for an action a BOINC client cannot take from gpuboard.
pub fn refuse_action(action: &str) -> String {
    format!(
        "the BOINC client owns its tasks; gpuboard cannot {action} here. The one action it \
         takes is \"update project\" (contact the project now, clearing its backoffs); suspend, \
         abort or detach through the BOINC Manager or boinccmd."
    )
}

/// The client's answers one fetch reads, as XML text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoincAnswers {
    /// `<get_state/>`.
    pub state: String,
    /// `<get_cc_status/>`.
    pub cc_status: String,
}

/// Which answer something was wrong with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `<get_state/>`.
    State,
    /// `<get_cc_status/>`.
    CcStatus,
}

impl Answer {
    fn request(self) -> &'static str {
        match self {
            Answer::State => "<get_state/>",
            Answer::CcStatus => "<get_cc_status/>",
        }
    }
}

/// What was wrong with an answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("reply to {}: {what}", answer.request())]
pub struct BoincParseError {
    /// Which answer.
    pub answer: Answer,
    /// What was wrong, naming the element.
    pub what: String,
}

fn bad(answer: Answer, what: impl Into<String>) -> BoincParseError {
    BoincParseError {
        answer,
        what: what.into(),
    }
}

/// Reads an optional number; present but not a finite number is an error naming the element.
fn num(answer: Answer, el: &Element, name: &str, at: &str) -> Result<Option<f64>, BoincParseError> {
    match el.text_of(name) {
        None => Ok(None),
        Some(t) => t
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .map(Some)
            .ok_or_else(|| bad(answer, format!("`{at}/{name}` is {t:?}, not a number"))),
    }
}

/// A flag BOINC writes as `<x/>` (or `<x>1</x>`).
fn flag(el: &Element, name: &str) -> bool {
    el.child(name)
        .is_some_and(|c| c.text.is_empty() || c.text.trim() != "0")
}

fn seconds_to_ms(s: f64) -> u64 {
    (s.max(0.0) * 1000.0).round() as u64
}

/// A coprocessor type the client reports.
#[derive(Clone, Debug, PartialEq)]
struct Coproc {
    /// The type as resource names use it: `NVIDIA`, `ATI`, `intel_gpu`, `apple_gpu`...
    kind: String,
    model: String,
    count: u32,
    peak_flops: Option<f64>,
}

fn coproc_kind(tag: &str, el: &Element) -> Option<String> {
    match tag {
        "coproc_cuda" => Some("NVIDIA".to_string()),
        "coproc_ati" => Some("ATI".to_string()),
        "coproc_intel_gpu" => Some("intel_gpu".to_string()),
        "coproc_apple_gpu" => Some("apple_gpu".to_string()),
        "coproc" => el.text_of("type").map(str::to_string),
        _ => None,
    }
}

/// One project's state, as the client reports it.
#[derive(Clone, Debug, Default, PartialEq)]
struct Project {
    url: String,
    name: String,
    share: f64,
    priority: Option<f64>,
    min_rpc_time: f64,
    /// resource -> (backoff until, interval), seconds.
    backoff: Vec<(String, f64, f64)>,
    suspended: bool,
    no_more_work: bool,
    ended: bool,
    rpc_pending: u32,
    rpc_in_progress: bool,
    master_fetch_pending: bool,
    /// Resources this project has no work for, and why.
    no_rsc: Vec<(String, &'static str)>,
    nrpc_failures: u32,
}

#[derive(Clone, Debug, PartialEq)]
struct AppVersion {
    project: String,
    app: String,
    version: i64,
    plan_class: String,
    cpus: f64,
    gpu: Option<(String, f64)>,
}

#[derive(Clone, Debug, PartialEq)]
struct Task {
    name: String,
    project: String,
    app: String,
    version: i64,
    plan_class: String,
    state: i64,
    suspended: bool,
    coproc_missing: bool,
    scheduler_wait: Option<String>,
    /// `scheduler_state` of its active task: 2 is running.
    scheduled: Option<i64>,
    resources: String,
    received_s: f64,
}

/// What `<get_state/>` holds that a snapshot needs.
#[derive(Clone, Debug, Default, PartialEq)]
struct ClientState {
    host: String,
    version: String,
    ncpus: u32,
    cpu_flops: Option<f64>,
    coprocs: Vec<Coproc>,
    projects: Vec<Project>,
    app_versions: Vec<AppVersion>,
    /// Workunit name -> app name, per project.
    workunits: BTreeMap<(String, String), String>,
    tasks: Vec<Task>,
    /// The client's clock, seconds.
    now: f64,
}

fn parse_reply(answer: Answer, text: &str) -> Result<Element, BoincParseError> {
    let root = xml::parse(text).map_err(|e| bad(answer, e.to_string()))?;
    if root.name != "boinc_gui_rpc_reply" {
        return Err(bad(
            answer,
            format!("the root is `<{}>`, not `<boinc_gui_rpc_reply>`", root.name),
        ));
    }
    Ok(root)
}

fn parse_project(a: Answer, p: &Element) -> Result<Project, BoincParseError> {
    let at = "client_state/project";
    let url = p
        .text_of("master_url")
        .filter(|u| !u.is_empty())
        .ok_or_else(|| bad(a, format!("a `{at}` has no <master_url>")))?
        .to_string();
    let mut times: BTreeMap<String, f64> = BTreeMap::new();
    let mut intervals: BTreeMap<String, f64> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for (tag, map) in [
        ("rsc_backoff_time", &mut times),
        ("rsc_backoff_interval", &mut intervals),
    ] {
        for r in p.all(tag) {
            let name = r
                .text_of("name")
                .filter(|n| !n.is_empty())
                .ok_or_else(|| bad(a, format!("a `{at}/{tag}` has no <name>")))?;
            let value = num(a, r, "value", &format!("{at}/{tag}"))?
                .ok_or_else(|| bad(a, format!("`{at}/{tag}` for {name} has no <value>")))?;
            if !order.iter().any(|o| o == name) {
                order.push(name.to_string());
            }
            map.insert(name.to_string(), value);
        }
    }
    let backoff = order
        .into_iter()
        .map(|r| {
            let t = times.get(&r).copied().unwrap_or(0.0);
            let i = intervals.get(&r).copied().unwrap_or(0.0);
            (r, t, i)
        })
        .collect();
    let mut no_rsc = Vec::new();
    for (tag, why) in [
        ("no_rsc_apps", "the project has no apps for it"),
        ("no_rsc_pref", "the project's preferences exclude it"),
        ("no_rsc_ams", "the account manager excludes it"),
        ("no_rsc_config", "the client's configuration excludes it"),
    ] {
        for r in p.all(tag) {
            no_rsc.push((r.text.clone(), why));
        }
    }
    let count = |name: &str| -> Result<u32, BoincParseError> {
        Ok(num(a, p, name, at)?.map_or(0, |v| v.clamp(0.0, f64::from(u32::MAX)) as u32))
    };
    Ok(Project {
        name: p
            .text_of("project_name")
            .filter(|n| !n.is_empty())
            .unwrap_or(&url)
            .to_string(),
        share: num(a, p, "resource_share", at)?.unwrap_or(100.0),
        priority: num(a, p, "sched_priority", at)?,
        min_rpc_time: num(a, p, "min_rpc_time", at)?.unwrap_or(0.0),
        backoff,
        suspended: flag(p, "suspended_via_gui"),
        no_more_work: flag(p, "dont_request_more_work"),
        ended: flag(p, "ended"),
        rpc_pending: count("sched_rpc_pending")?,
        rpc_in_progress: flag(p, "scheduler_rpc_in_progress"),
        master_fetch_pending: flag(p, "master_url_fetch_pending"),
        no_rsc,
        nrpc_failures: count("nrpc_failures")?,
        url,
    })
}

/// The master URL of the project named `project` (by name or by URL) in a `get_state` reply.
pub fn project_url(state: &str, project: &str) -> Result<Option<String>, BoincParseError> {
    let st = parse_state(state)?;
    Ok(st
        .projects
        .into_iter()
        .find(|p| p.name == project || p.url == project)
        .map(|p| p.url))
}

fn parse_state(text: &str) -> Result<ClientState, BoincParseError> {
    let a = Answer::State;
    let root = parse_reply(a, text)?;
    let cs = root
        .child("client_state")
        .ok_or_else(|| bad(a, "no <client_state> in the reply"))?;
    let mut st = ClientState::default();
    if let Some(h) = cs.child("host_info") {
        st.host = h.text_of("domain_name").unwrap_or_default().to_string();
        st.ncpus = num(a, h, "p_ncpus", "host_info")?.map_or(0, |v| v.clamp(0.0, 1e6) as u32);
        st.cpu_flops = num(a, h, "p_fpops", "host_info")?.filter(|f| *f > 0.0);
        if let Some(cp) = h.child("coprocs") {
            for c in &cp.children {
                let Some(kind) = coproc_kind(&c.name, c) else {
                    continue;
                };
                let at = format!("host_info/coprocs/{}", c.name);
                let count = num(a, c, "count", &at)?.unwrap_or(0.0);
                if count <= 0.0 {
                    continue;
                }
                st.coprocs.push(Coproc {
                    kind,
                    model: c.text_of("name").unwrap_or_default().to_string(),
                    count: count.min(1024.0) as u32,
                    peak_flops: num(a, c, "peak_flops", &at)?.filter(|f| *f > 0.0),
                });
            }
        }
    }
    let ver = |n: &str| cs.text_of(n).unwrap_or("?").trim().to_string();
    st.version = format!(
        "{}.{}.{}",
        ver("core_client_major_version"),
        ver("core_client_minor_version"),
        ver("core_client_release")
    );
    st.now = cs
        .child("time_stats")
        .map(|t| num(a, t, "now", "time_stats"))
        .transpose()?
        .flatten()
        .unwrap_or(0.0);
    // The client lists each project's apps, versions, workunits and tasks after it.
    let mut current = String::new();
    for el in &cs.children {
        match el.name.as_str() {
            "project" => {
                let p = parse_project(a, el)?;
                current = p.url.clone();
                st.projects.push(p);
            }
            "app_version" => {
                let at = "client_state/app_version";
                let gpu = match el.child("coproc") {
                    Some(c) => {
                        let kind = c
                            .text_of("type")
                            .ok_or_else(|| bad(a, format!("`{at}/coproc` has no <type>")))?;
                        let n = num(a, c, "count", &format!("{at}/coproc"))?.unwrap_or(0.0);
                        (n > 0.0).then(|| (kind.to_string(), n))
                    }
                    None => None,
                };
                st.app_versions.push(AppVersion {
                    project: current.clone(),
                    app: el.text_of("app_name").unwrap_or_default().to_string(),
                    version: num(a, el, "version_num", at)?.unwrap_or(0.0) as i64,
                    plan_class: el.text_of("plan_class").unwrap_or_default().to_string(),
                    cpus: num(a, el, "avg_ncpus", at)?.unwrap_or(1.0),
                    gpu,
                });
            }
            "workunit" => {
                if let (Some(n), Some(app)) = (el.text_of("name"), el.text_of("app_name")) {
                    st.workunits
                        .insert((current.clone(), n.to_string()), app.to_string());
                }
            }
            "result" => {
                let at = "client_state/result";
                let project = el
                    .text_of("project_url")
                    .filter(|u| !u.is_empty())
                    .unwrap_or(&current)
                    .to_string();
                let wu = el.text_of("wu_name").unwrap_or_default().to_string();
                let active = el.child("active_task");
                st.tasks.push(Task {
                    name: el
                        .text_of("name")
                        .filter(|n| !n.is_empty())
                        .ok_or_else(|| bad(a, format!("a `{at}` has no <name>")))?
                        .to_string(),
                    app: st
                        .workunits
                        .get(&(project.clone(), wu))
                        .cloned()
                        .unwrap_or_default(),
                    project,
                    version: num(a, el, "version_num", at)?.unwrap_or(0.0) as i64,
                    plan_class: el.text_of("plan_class").unwrap_or_default().to_string(),
                    state: num(a, el, "state", at)?.unwrap_or(0.0) as i64,
                    suspended: flag(el, "suspended_via_gui"),
                    coproc_missing: flag(el, "coproc_missing"),
                    scheduler_wait: flag(el, "scheduler_wait").then(|| {
                        el.text_of("scheduler_wait_reason")
                            .unwrap_or("waiting")
                            .to_string()
                    }),
                    scheduled: active
                        .map(|t| num(a, t, "scheduler_state", &format!("{at}/active_task")))
                        .transpose()?
                        .flatten()
                        .map(|v| v as i64),
                    resources: el.text_of("resources").unwrap_or_default().to_string(),
                    received_s: num(a, el, "received_time", at)?.unwrap_or(0.0),
                });
            }
            _ => {}
        }
    }
    Ok(st)
}

/// What `<get_cc_status/>` says about computing and the GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct CcStatus {
    task_suspend_reason: i64,
    gpu_suspend_reason: i64,
    gpu_mode: i64,
}

fn parse_cc_status(text: &str) -> Result<CcStatus, BoincParseError> {
    let a = Answer::CcStatus;
    let root = parse_reply(a, text)?;
    let cc = root
        .child("cc_status")
        .ok_or_else(|| bad(a, "no <cc_status> in the reply"))?;
    let n = |name: &str| -> Result<i64, BoincParseError> {
        Ok(num(a, cc, name, "cc_status")?.unwrap_or(0.0) as i64)
    };
    Ok(CcStatus {
        task_suspend_reason: n("task_suspend_reason")?,
        gpu_suspend_reason: n("gpu_suspend_reason")?,
        gpu_mode: n("gpu_mode")?,
    })
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

/// Why the client has a scheduler request queued (`RPC_REASON_*`).
fn rpc_reason(code: u32) -> &'static str {
    match code {
        1 => "requested by the user",
        2 => "to report completed tasks",
        3 => "to fetch work",
        4 => "to send a trickle-up message",
        5 => "requested by the account manager",
        6 => "project initialization",
        7 => "requested by the project",
        _ => "for another reason",
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

fn running(t: &Task) -> bool {
    unfinished(t) && t.scheduled == Some(2)
}

/// Turns the client's answers into a snapshot. `name` is the endpoint's display name
/// (the client's host name when empty).
pub fn snapshot(
    answers: &BoincAnswers,
    name: &str,
    taken_at: Timestamp,
) -> Result<Snapshot, BoincParseError> {
    let st = parse_state(&answers.state)?;
    let cc = parse_cc_status(&answers.cc_status)?;
    let node_name = if st.host.is_empty() {
        "localhost".to_string()
    } else {
        st.host.clone()
    };

    // Devices: each coprocessor instance, numbered across types in the client's order.
    let mut devices: Vec<DeviceView> = Vec::new();
    let mut first_index: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for c in &st.coprocs {
        let first = u32::try_from(devices.len()).unwrap_or(u32::MAX);
        first_index.insert(c.kind.as_str(), (first, c.count));
        for _ in 0..c.count {
            devices.push(DeviceView {
                index: u32::try_from(devices.len()).unwrap_or(u32::MAX),
                model: if c.model.is_empty() {
                    c.kind.clone()
                } else {
                    c.model.clone()
                },
                compute_free: Units::FULL,
                slots_free: Slots::FULL,
                // GPU mode "never": the client starts no GPU work.
                cordoned: cc.gpu_mode == 3,
                ..DeviceView::default()
            });
        }
    }

    let project_by_url: BTreeMap<&str, &Project> =
        st.projects.iter().map(|p| (p.url.as_str(), p)).collect();
    let mut claims = Vec::new();
    let mut cpus_used = 0.0;
    // (project url, resource) -> (used instances, pending tasks)
    let mut use_of: BTreeMap<(String, String), (f64, u32)> = BTreeMap::new();
    let mut tasks_of: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for t in st.tasks.iter().filter(|t| unfinished(t)) {
        let av = version_of(&st, t);
        let cpus = av.map_or(1.0, |v| v.cpus);
        let gpu = av.and_then(|v| v.gpu.clone());
        let run = running(t);
        let counts = tasks_of.entry(t.project.clone()).or_default();
        if run {
            counts.0 += 1;
            cpus_used += cpus;
        } else {
            counts.1 += 1;
        }
        let resource = gpu.as_ref().map_or("CPU".to_string(), |(k, _)| k.clone());
        let u = use_of
            .entry((t.project.clone(), resource.clone()))
            .or_default();
        if run {
            u.0 += gpu.as_ref().map_or(cpus, |(_, n)| *n);
        } else {
            u.1 += 1;
        }
        if gpu.is_some() && run {
            use_of
                .entry((t.project.clone(), "CPU".to_string()))
                .or_default()
                .0 += cpus;
        }
        let Some((kind, fraction)) = gpu else {
            continue;
        };
        let project = project_by_url.get(t.project.as_str());
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
                _ if t.scheduled == Some(1) => {
                    reasons.push("preempted by BOINC's CPU scheduler".to_string());
                }
                _ => {}
            }
            if reasons.is_empty() {
                reasons.push("ready; BOINC's scheduler has not started it".to_string());
            }
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
            ]),
            wait: !run,
        };
        let form_text = format!(
            "{} ({fraction} {kind} GPU, {cpus} CPU{})",
            request.describe(),
            if cpus == 1.0 { "" } else { "s" }
        );
        claims.push(ClaimView {
            id: claim_id(&t.project, &t.name),
            state: if run {
                ClaimState::Placed
            } else {
                ClaimState::Pending
            },
            project: project_name,
            holder: Some(t.name.clone()),
            form: form_text,
            request,
            node: run.then(|| node_name.clone()),
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
        });
    }
    for c in &claims {
        for s in &c.shares {
            if let Some(d) = devices.get_mut(s.device as usize) {
                d.compute_allocated = (d.compute_allocated + s.compute).min(Units::FULL);
                d.compute_free = Units::FULL - d.compute_allocated;
                d.slots_allocated = (d.slots_allocated + s.slots).min(Slots::FULL);
                d.slots_free = Slots::FULL - d.slots_allocated;
                d.holders.push(c.id);
            }
        }
    }

    // Resource types: CPU, then each coprocessor type, with BOINC's relative speed.
    let mut resources = vec![ResourceView {
        name: "CPU".to_string(),
        instances: f64::from(st.ncpus),
        speed: 1.0,
        idle: (f64::from(st.ncpus) - cpus_used).max(0.0),
        shortfall: 0.0,
    }];
    for c in &st.coprocs {
        let used: f64 = use_of
            .iter()
            .filter(|((_, r), _)| *r == c.kind)
            .map(|(_, (u, _))| *u)
            .sum();
        let speed = match (c.peak_flops, st.cpu_flops) {
            (Some(g), Some(cpu)) => g / cpu,
            _ => 1.0,
        };
        resources.push(ResourceView {
            name: c.kind.clone(),
            instances: f64::from(c.count),
            speed,
            idle: (f64::from(c.count) - used).max(0.0),
            shortfall: 0.0,
        });
    }
    let instances: BTreeMap<&str, f64> = resources
        .iter()
        .map(|r| (r.name.as_str(), r.instances))
        .collect();

    // Targets: each resource's instances split by share among projects that can use it.
    let can_use = |p: &Project, r: &str| !p.ended && !p.no_rsc.iter().any(|(n, _)| n == r);
    let mut share_sum: BTreeMap<&str, f64> = BTreeMap::new();
    for p in st.projects.iter().filter(|p| !p.suspended) {
        for (r, _, _) in &p.backoff {
            if can_use(p, r) {
                *share_sum.entry(r.as_str()).or_default() += p.share;
            }
        }
    }
    let at = |s: f64| format_age(s - st.now);
    let projects = st
        .projects
        .iter()
        .map(|p| {
            let mut common = Vec::new();
            if p.ended {
                common.push("the project has ended".to_string());
            }
            if p.suspended {
                common.push("suspended via the GUI".to_string());
            }
            if p.no_more_work {
                common.push("set to request no more work (dont_request_more_work)".to_string());
            }
            if p.master_fetch_pending {
                common.push("its master page is being fetched".to_string());
            }
            if p.rpc_in_progress {
                common.push("a scheduler request is in progress".to_string());
            } else if p.rpc_pending != 0 {
                common.push(format!(
                    "a scheduler request is pending ({})",
                    rpc_reason(p.rpc_pending)
                ));
            }
            if p.min_rpc_time > st.now {
                let fails = if p.nrpc_failures > 0 {
                    format!(" after {} failed requests", p.nrpc_failures)
                } else {
                    String::new()
                };
                common.push(format!(
                    "no scheduler contact for {} (min_rpc_time{fails})",
                    at(p.min_rpc_time)
                ));
            }
            let resources = p
                .backoff
                .iter()
                .map(|(r, until, interval)| {
                    let mut reasons = common.clone();
                    let no = p.no_rsc.iter().find(|(n, _)| n == r);
                    if let Some((_, why)) = no {
                        reasons.push(format!("no {r} work: {why}"));
                    }
                    let backed_off = *until > st.now;
                    if backed_off {
                        reasons.push(format!(
                            "{r} work fetch backed off for {} (interval {})",
                            at(*until),
                            format_age(*interval)
                        ));
                    }
                    let (used, pending) = use_of
                        .get(&(p.url.clone(), r.clone()))
                        .copied()
                        .unwrap_or_default();
                    let total = share_sum.get(r.as_str()).copied().unwrap_or(0.0);
                    let target = if p.suspended || !can_use(p, r) || total <= 0.0 {
                        0.0
                    } else {
                        instances.get(r.as_str()).copied().unwrap_or(0.0) * p.share / total
                    };
                    ProjectResourceView {
                        resource: r.clone(),
                        debt: 0.0,
                        target,
                        used,
                        eligible: !(p.ended || p.suspended || p.no_more_work || no.is_some()),
                        backoff_until: backed_off.then(|| Timestamp(seconds_to_ms(*until))),
                        backoff_interval_s: (*interval > 0.0)
                            .then(|| interval.round().max(0.0) as u64),
                        pending,
                        reason: (!reasons.is_empty()).then(|| reasons.join("; ")),
                    }
                })
                .collect();
            let (running, pending) = tasks_of.get(&p.url).copied().unwrap_or_default();
            ProjectView {
                name: p.name.clone(),
                share: p.share.round().clamp(0.0, f64::from(u32::MAX)) as u32,
                running,
                pending,
                overall_debt: 0.0,
                priority: p.priority,
                resources,
            }
        })
        .collect();

    claims.sort_by(|a, b| {
        (a.state == ClaimState::Pending, &a.project, &a.holder).cmp(&(
            b.state == ClaimState::Pending,
            &b.project,
            &b.holder,
        ))
    });
    Ok(Snapshot {
        schema: SCHEMA_VERSION,
        endpoint: EndpointInfo::engine(
            if name.is_empty() { &node_name } else { name },
            "boinc",
            format!("boinc {}", st.version),
        ),
        revision: 0,
        taken_at,
        nodes: vec![NodeView {
            name: node_name,
            cpus_milli: Some(u64::from(st.ncpus) * 1000),
            cpus_allocated_milli: (cpus_used * 1000.0).round() as u64,
            devices,
        }],
        claims,
        projects,
        resources,
        ..Snapshot::default()
    })
}

/// A duration in seconds as `1h02m`, `5m10s` or `42s`.
fn format_age(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// A BOINC client as a console source.
#[derive(Clone)]
pub struct BoincSource {
    config: BoincConfig,
    address: String,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for BoincSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoincSource")
            .field("address", &self.address)
            .field("password_file", &self.config.password_file)
            .finish_non_exhaustive()
    }
}

impl BoincSource {
    /// A source reading the client in `config`, on the wall clock.
    pub fn new(config: BoincConfig) -> Result<BoincSource, SourceError> {
        BoincSource::with_clock(config, Arc::new(SystemClock))
    }

    /// A source on an injected clock (tests).
    pub fn with_clock(
        config: BoincConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<BoincSource, SourceError> {
        let address = check_address(&config.address)?;
        if config.timeout.is_zero() {
            return Err(SourceError::BadUrl {
                url: address,
                why: "the timeout must be more than zero".to_string(),
            });
        }
        Ok(BoincSource {
            config,
            address,
            clock,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &BoincConfig {
        &self.config
    }

    /// The password from the configured file, read at each connection so a changed
    /// password is picked up.
    fn password(&self) -> Result<Option<String>, SourceError> {
        let Some(path) = &self.config.password_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path).map_err(|e| SourceError::LoginRefused {
            url: self.address.clone(),
            peer: "BOINC client",
            message: format!("cannot read the password file {}: {e}", path.display()),
        })?;
        // The client uses the file's first line, without its line ending.
        Ok(Some(
            text.lines()
                .next()
                .unwrap_or_default()
                .trim_end()
                .to_string(),
        ))
    }

    async fn open(&self) -> Result<GuiRpc, SourceError> {
        let password = self.password()?;
        let mut rpc = GuiRpc::connect(&self.address, self.config.timeout).await?;
        if let Some(pw) = password.filter(|p| !p.is_empty()) {
            rpc.login(&pw).await?;
        }
        Ok(rpc)
    }

    fn bounded<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, SourceError>>,
    ) -> impl std::future::Future<Output = Result<T, SourceError>> {
        let timeout = self.config.timeout;
        let url = self.address.clone();
        async move {
            tokio::time::timeout(timeout, fut)
                .await
                .map_err(|_| SourceError::Timeout { url, timeout })?
        }
    }

    /// Reads the client's raw answers within the timeout.
    pub async fn fetch_answers(&self) -> Result<BoincAnswers, SourceError> {
        self.bounded(async {
            let mut rpc = self.open().await?;
            let state = rpc.request(Answer::State.request()).await?;
            let cc_status = rpc.request(Answer::CcStatus.request()).await?;
            Ok(BoincAnswers { state, cc_status })
        })
        .await
    }

    /// Reads the client and turns its answers into a snapshot.
    pub async fn fetch(&self) -> Result<Snapshot, SourceError> {
        let answers = self.fetch_answers().await?;
        snapshot(&answers, &self.config.name, self.clock.now()).map_err(|e| SourceError::Decode {
            url: self.address.clone(),
            what: e.to_string(),
        })
    }

    /// "Update project" for a project the snapshot names (its name or its master URL):
    /// reads the client's state for the master URL, then asks for the update.
    pub async fn update_project_named(&self, project: &str) -> Result<(), SourceError> {
        let answers = self.fetch_answers().await?;
        let url = project_url(&answers.state, project).map_err(|e| SourceError::Decode {
            url: self.address.clone(),
            what: e.to_string(),
        })?;
        let Some(url) = url else {
            return Err(SourceError::Peer {
                url: self.address.clone(),
                peer: "BOINC client",
                message: format!("the client is not attached to a project named `{project}`"),
            });
        };
        self.update_project(&url).await
    }

    /// "Update project": asks the client to contact the project at `master_url` now, which
    /// clears its work-fetch backoffs. Needs the GUI RPC password.
    pub async fn update_project(&self, master_url: &str) -> Result<(), SourceError> {
        if master_url.trim().is_empty() || master_url.contains(['<', '>', '&']) {
            return Err(SourceError::BadUrl {
                url: master_url.to_string(),
                why: "a project is named by its master URL, as get_state lists it".to_string(),
            });
        }
        self.bounded(async {
            let mut rpc = self.open().await?;
            let reply = rpc
                .call(&format!(
                    "<project_update>\n<project_url>{}</project_url>\n</project_update>",
                    master_url.trim()
                ))
                .await?;
            if reply.has("success") {
                Ok(())
            } else {
                Err(SourceError::Peer {
                    url: self.address.clone(),
                    peer: "BOINC client",
                    message: format!(
                        "the client did not confirm the update of {master_url}: <{}>",
                        reply
                            .children
                            .first()
                            .map_or("nothing", |c| c.name.as_str())
                    ),
                })
            }
        })
        .await
    }
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

    #[test]
    fn ages_read_well() {
        assert_eq!(format_age(-3.0), "0s");
        assert_eq!(format_age(42.4), "42s");
        assert_eq!(format_age(656.0), "10m56s");
        assert_eq!(format_age(86_400.0), "24h00m");
    }

    #[test]
    fn refusal_names_the_one_action() {
        let m = refuse_action("release claim 7");
        assert!(m.contains("cannot release claim 7"), "{m}");
        assert!(m.contains("update project"), "{m}");
    }

    #[test]
    fn flags_accept_both_spellings() {
        let el = xml::parse("<p><a/><b>1</b><c>0</c></p>").unwrap();
        assert!(flag(&el, "a") && flag(&el, "b"));
        assert!(!flag(&el, "c") && !flag(&el, "d"));
    }
}
