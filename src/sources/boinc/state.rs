//! What the client reports: `<get_state/>` (host, coprocessors, projects, app versions,
//! workunits, tasks, the client's clock) and `<get_cc_status/>` (suspend reasons, GPU mode),
//! read into plain structs, one reader per part.

use std::collections::BTreeMap;

use super::answers::{BoincAnswerKind, BoincParseError, bad, flag, num, parse_reply};
use crate::sources::xml::Element;

/// A coprocessor type the client reports.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Coproc {
    /// The type as resource names use it: `NVIDIA`, `ATI`, `intel_gpu`, `apple_gpu`...
    pub(super) kind: String,
    pub(super) model: String,
    pub(super) count: u32,
    pub(super) peak_flops: Option<f64>,
}

/// The resource name of a coprocessor element, when it is one.
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
// Mirrors the client's own flags, one bool each.
#[allow(clippy::struct_excessive_bools)]
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Project {
    pub(super) url: String,
    pub(super) name: String,
    pub(super) share: f64,
    pub(super) priority: Option<f64>,
    pub(super) min_rpc_time: f64,
    /// resource -> (backoff until, interval), seconds.
    pub(super) backoff: Vec<(String, f64, f64)>,
    pub(super) suspended: bool,
    pub(super) no_more_work: bool,
    pub(super) ended: bool,
    pub(super) rpc_pending: u32,
    pub(super) rpc_in_progress: bool,
    pub(super) master_fetch_pending: bool,
    /// Resources this project has no work for, and why.
    pub(super) no_rsc: Vec<(String, &'static str)>,
    pub(super) nrpc_failures: u32,
}

/// An app version: what a task of it uses (CPUs, a GPU type and fraction).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct AppVersion {
    pub(super) project: String,
    pub(super) app: String,
    pub(super) version: i64,
    pub(super) plan_class: String,
    pub(super) cpus: f64,
    pub(super) gpu: Option<(String, f64)>,
}

/// A task (`<result>`) as the client reports it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Task {
    pub(super) name: String,
    pub(super) project: String,
    pub(super) app: String,
    pub(super) version: i64,
    pub(super) plan_class: String,
    pub(super) state: i64,
    pub(super) suspended: bool,
    pub(super) coproc_missing: bool,
    pub(super) scheduler_wait: Option<String>,
    /// `scheduler_state` of its active task: 2 is running.
    pub(super) scheduled: Option<i64>,
    pub(super) resources: String,
    pub(super) received_s: f64,
}

/// What `<get_state/>` holds that a snapshot needs.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct ClientState {
    pub(super) host: String,
    pub(super) version: String,
    pub(super) ncpus: u32,
    pub(super) cpu_flops: Option<f64>,
    pub(super) coprocs: Vec<Coproc>,
    pub(super) projects: Vec<Project>,
    pub(super) app_versions: Vec<AppVersion>,
    /// Workunit name -> app name, per project.
    pub(super) workunits: BTreeMap<(String, String), String>,
    pub(super) tasks: Vec<Task>,
    /// The client's clock, seconds.
    pub(super) now: f64,
}

/// A `<project>`: share, priority, backoffs per resource, flags, excluded resources.
fn parse_project(a: BoincAnswerKind, p: &Element) -> Result<Project, BoincParseError> {
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
    let st = parse_state(state, &mut Vec::new())?;
    Ok(st
        .projects
        .into_iter()
        .find(|p| p.name == project || p.url == project)
        .map(|p| p.url))
}

/// Reads `<get_state/>`. The core is the reply itself and its `<host_info>`; a project,
/// app version or task that cannot be read is skipped, with where it was, in `skipped`
/// (a skipped project takes its apps and tasks with it).
pub(super) fn parse_state(
    text: &str,
    skipped: &mut Vec<(String, BoincParseError)>,
) -> Result<ClientState, BoincParseError> {
    let a = BoincAnswerKind::State;
    let root = parse_reply(a, text)?;
    let cs = root
        .child("client_state")
        .ok_or_else(|| bad(a, "no <client_state> in the reply"))?;
    let mut st = ClientState::default();
    if let Some(h) = cs.child("host_info") {
        parse_host(h, &mut st)?;
    }
    let ver = |n: &str| cs.text_of(n).unwrap_or("?").trim().to_string();
    st.version = format!(
        "{}.{}.{}",
        ver("core_client_major_version"),
        ver("core_client_minor_version"),
        ver("core_client_release")
    );
    st.now = match cs
        .child("time_stats")
        .map(|t| num(a, t, "now", "time_stats"))
        .transpose()
    {
        Ok(now) => now.flatten().unwrap_or(0.0),
        Err(e) => {
            skipped.push(("client_state/time_stats".to_string(), e));
            0.0
        }
    };
    // The client lists each project's apps, versions, workunits and tasks after it.
    let mut current = String::new();
    // After a project that could not be read, its apps and tasks are left out with it.
    let mut orphan = false;
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for el in &cs.children {
        let i = seen.entry(el.name.as_str()).or_default();
        let at = format!("client_state/{}[{i}]", el.name);
        *i += 1;
        match el.name.as_str() {
            "project" => match parse_project(a, el) {
                Ok(p) => {
                    current.clone_from(&p.url);
                    orphan = false;
                    st.projects.push(p);
                }
                Err(e) => {
                    skipped.push((at, e));
                    orphan = true;
                }
            },
            "app_version" if !orphan => match parse_app_version(el, &current) {
                Ok(v) => st.app_versions.push(v),
                Err(e) => skipped.push((at, e)),
            },
            "workunit" if !orphan => {
                if let (Some(n), Some(app)) = (el.text_of("name"), el.text_of("app_name")) {
                    st.workunits
                        .insert((current.clone(), n.to_string()), app.to_string());
                }
            }
            "result" if !orphan => match parse_task(el, &current, &st.workunits) {
                Ok(t) => st.tasks.push(t),
                Err(e) => skipped.push((at, e)),
            },
            _ => {}
        }
    }
    Ok(st)
}

/// `<host_info>`: the host's name, CPUs and coprocessors.
fn parse_host(h: &Element, st: &mut ClientState) -> Result<(), BoincParseError> {
    let a = BoincAnswerKind::State;
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
    Ok(())
}

/// An `<app_version>` of the project `current`.
fn parse_app_version(el: &Element, current: &str) -> Result<AppVersion, BoincParseError> {
    let a = BoincAnswerKind::State;
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
    Ok(AppVersion {
        project: current.to_string(),
        app: el.text_of("app_name").unwrap_or_default().to_string(),
        version: num(a, el, "version_num", at)?.unwrap_or(0.0) as i64,
        plan_class: el.text_of("plan_class").unwrap_or_default().to_string(),
        cpus: num(a, el, "avg_ncpus", at)?.unwrap_or(1.0),
        gpu,
    })
}

/// A `<result>` (a task) of the project `current`, its app found through its workunit.
fn parse_task(
    el: &Element,
    current: &str,
    workunits: &BTreeMap<(String, String), String>,
) -> Result<Task, BoincParseError> {
    let a = BoincAnswerKind::State;
    let at = "client_state/result";
    let project = el
        .text_of("project_url")
        .filter(|u| !u.is_empty())
        .unwrap_or(current)
        .to_string();
    let wu = el.text_of("wu_name").unwrap_or_default().to_string();
    let active = el.child("active_task");
    Ok(Task {
        name: el
            .text_of("name")
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad(a, format!("a `{at}` has no <name>")))?
            .to_string(),
        app: workunits
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
    })
}

/// What `<get_cc_status/>` says about computing and the GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct CcStatus {
    pub(super) task_suspend_reason: i64,
    pub(super) gpu_suspend_reason: i64,
    pub(super) gpu_mode: i64,
}

/// Reads `<get_cc_status/>`.
pub(super) fn parse_cc_status(text: &str) -> Result<CcStatus, BoincParseError> {
    let a = BoincAnswerKind::CcStatus;
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
