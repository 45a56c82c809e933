//! BOINC's resource types and projects: each resource (CPU, then each coprocessor type)
//! with its instances, speed and idle ones; each project with its share, priority, and per
//! resource the work-fetch backoff, use, target share and why it cannot fetch work now.

use std::collections::BTreeMap;

use super::answers::seconds_to_ms;
use super::state::{ClientState, Project};
use super::tasks::TaskUse;
use crate::clock::{Timestamp, age};
use crate::snapshot::{ProjectResourceView, ProjectView, ResourceView};

/// Resource types: CPU, then each coprocessor type, with BOINC's relative speed.
pub(super) fn resources_of(st: &ClientState, usage: &TaskUse) -> Vec<ResourceView> {
    let mut resources = vec![ResourceView {
        name: "CPU".to_string(),
        instances: f64::from(st.ncpus),
        speed: 1.0,
        idle: (f64::from(st.ncpus) - usage.cpus_used).max(0.0),
        shortfall: 0.0,
    }];
    for c in &st.coprocs {
        let used: f64 = usage
            .use_of
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
    resources
}

/// Each project with its resources, targets and reasons.
pub(super) fn projects_of(
    st: &ClientState,
    usage: &TaskUse,
    resources: &[ResourceView],
) -> Vec<ProjectView> {
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
    let at = |s: f64| age_of(s - st.now);
    st.projects
        .iter()
        .map(|p| {
            let common = project_reasons(p, st.now);
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
                            age_of(*interval)
                        ));
                    }
                    let (used, pending) = usage
                        .use_of
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
            let (running, pending) = usage.tasks_of.get(&p.url).copied().unwrap_or_default();
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
        .collect()
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

/// Why a project cannot fetch work now, whatever the resource, in the client's terms;
/// `now` is the client's clock, seconds.
fn project_reasons(p: &Project, now: f64) -> Vec<String> {
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
    if p.min_rpc_time > now {
        let fails = if p.nrpc_failures > 0 {
            format!(" after {} failed requests", p.nrpc_failures)
        } else {
            String::new()
        };
        common.push(format!(
            "no scheduler contact for {} (min_rpc_time{fails})",
            age_of(p.min_rpc_time - now)
        ));
    }
    common
}

/// A span in seconds, as people read it (`10m56s`), to the nearest second as the client
/// counts; negative spans read `0s`.
fn age_of(secs: f64) -> String {
    age(seconds_to_ms(secs.round()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_well() {
        assert_eq!(age_of(-3.0), "0s");
        assert_eq!(age_of(42.4), "42s");
        assert_eq!(age_of(656.0), "10m56s");
        assert_eq!(age_of(1199.6), "20m");
        assert_eq!(age_of(600.0), "10m");
        assert_eq!(age_of(86_400.0), "1d");
    }
}
