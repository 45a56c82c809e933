//! `GET /metrics`: the current snapshot version, the store's commit counters and failure,
//! the flags its GPUs carry, and the HTTP answers by status, as `OpenMetrics` text.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::accounting::{Ask, IdleRule, PENDING_MS, Parts, ProjectGpuTime};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::endpoint::api_error::{ApiError, serialize_failed};
use crate::endpoint::api_state::ApiState;
use crate::endpoint::report_api::window_report;
use crate::snapshot::{ClaimState, Snapshot};

type Labels = Vec<(String, String)>;

/// GPU time per project so far today (UTC), per recorded history, and when it was computed.
#[derive(Default)]
struct Today {
    at: Timestamp,
    projects: Vec<ProjectGpuTime>,
}

/// Per history (by address): accounting is recomputed at most once a minute, whatever the
/// scrape rate.
static GPU_TIME: Mutex<BTreeMap<usize, Today>> = Mutex::new(BTreeMap::new());
const GPU_TIME_EVERY_MS: u64 = 60_000;
const DAY_MS: u64 = 86_400_000;

/// `gpuboard_project_gpu_seconds_total{project, state}`: reserved (by compute fraction),
/// used and idle-allocated GPU-seconds since 00:00 UTC, from the history (the counters
/// restart each day, which Prometheus reads as a counter reset). Nothing without a history.
async fn gpu_time(reg: &mut Registry, st: &ApiState) {
    let Some(history) = st.history.clone() else {
        return;
    };
    let key = Arc::as_ptr(&history) as usize;
    let now = SystemClock.now();
    let fresh =
        |g: &Today| now.millis_since(g.at) < GPU_TIME_EVERY_MS && g.at.0 / DAY_MS == now.0 / DAY_MS;
    let cached = lock(&GPU_TIME)
        .get(&key)
        .filter(|g| fresh(g))
        .map(|g| g.projects.clone());
    let projects = if let Some(p) = cached {
        p
    } else {
        let ask = Ask {
            from: Timestamp(now.0 - now.0 % DAY_MS),
            to: now,
            idle: IdleRule::default(),
            pending_ms: PENDING_MS,
        };
        let answer = history
            .read_apart(move |s| window_report(s, ask, Parts::Usage))
            .await;
        let projects = match answer {
            Ok(Ok(r)) => r.usage.projects,
            _ => Vec::new(),
        };
        lock(&GPU_TIME).insert(
            key,
            Today {
                at: now,
                projects: projects.clone(),
            },
        );
        projects
    };
    let family = Family::<Labels, Counter<f64, AtomicU64>>::default();
    reg.register(
        "project_gpu_seconds",
        "GPU-seconds per project since 00:00 UTC: reserved (compute fraction x time), used \
         (utilization of its processes x its share), idle_allocated (held below 5 % for 15 min+)",
        family.clone(),
    );
    for p in &projects {
        let f = &p.figures;
        for (state, v) in [
            ("reserved", f.reserved.compute),
            ("used", f.used),
            ("idle_allocated", f.idle_allocated),
        ] {
            family
                .get_or_create(&vec![
                    ("project".to_string(), p.project.clone()),
                    ("state".to_string(), state.to_string()),
                ])
                .inc_by(v.0);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An integer gauge family registered under `name`.
fn gauge(reg: &mut Registry, name: &str, help: &str) -> Family<Labels, Gauge> {
    let f = Family::<Labels, Gauge>::default();
    reg.register(name, help, f.clone());
    f
}

/// A float gauge family registered under `name`.
fn float_gauge(
    reg: &mut Registry,
    name: &str,
    help: &str,
) -> Family<Labels, Gauge<f64, AtomicU64>> {
    let f = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    reg.register(name, help, f.clone());
    f
}

/// Per device: memory (schedulable, reserved, used, unclaimed), compute, slots, cordon.
fn device_metrics(reg: &mut Registry, snap: &Snapshot) {
    let mem_cap = gauge(reg, "device_memory_capacity_bytes", "Schedulable memory M");
    let mem_alloc = gauge(
        reg,
        "device_memory_allocated_bytes",
        "Memory reserved by claims",
    );
    let mem_used = gauge(reg, "device_memory_used_bytes", "Memory in use (telemetry)");
    let mem_unclaimed = gauge(
        reg,
        "device_memory_unclaimed_bytes",
        "Memory used by processes of no claim (telemetry)",
    );
    let compute = gauge(
        reg,
        "device_compute_allocated_units",
        "Compute reserved, 10000 units per device",
    );
    let slots = gauge(reg, "device_slots_allocated", "Sharing slots taken, of 100");
    let cordoned = gauge(
        reg,
        "device_cordoned",
        "1 when the device takes no new claims",
    );
    let simulated = gauge(
        reg,
        "device_telemetry_simulated",
        "1 when the device's telemetry is made up (serve --simulate-telemetry), not read",
    );
    for (n, d) in snap.devices() {
        let l = vec![
            ("node".to_string(), n.name.clone()),
            ("index".to_string(), d.index.to_string()),
            ("model".to_string(), d.model.clone()),
        ];
        let set = |f: &Family<Labels, Gauge>, v: u64| {
            f.get_or_create(&l)
                .set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        if let Some(c) = d.memory_capacity {
            set(&mem_cap, c.0);
        }
        set(&mem_alloc, d.memory_allocated.0);
        if let Some(u) = d.telemetry.as_ref().and_then(|t| t.memory_used) {
            set(&mem_used, u.0);
        }
        if let Some(t) = &d.telemetry {
            set(&simulated, u64::from(t.simulated));
        }
        if let Some(u) = d.unclaimed_memory {
            set(&mem_unclaimed, u.0);
        }
        set(&compute, u64::from(d.compute_allocated.0));
        set(&slots, u64::from(d.slots_allocated.0));
        set(&cordoned, u64::from(d.cordoned));
    }
}

/// Claims counted by state.
fn claim_metrics(reg: &mut Registry, snap: &Snapshot) {
    let claims = gauge(reg, "claims", "Claims by state");
    for state in [ClaimState::Placed, ClaimState::Pending] {
        let n = snap.claims.iter().filter(|c| c.state == state).count();
        let name = serde_json::to_value(state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        claims
            .get_or_create(&vec![("state".to_string(), name)])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// Fair share: per project and resource type its debt, backoff and eligibility, per project
/// its pending claims, per resource type its idle instances and shortfall.
fn fair_share_metrics(reg: &mut Registry, snap: &Snapshot) {
    let debt = float_gauge(
        reg,
        "project_debt",
        "Long-term debt per project and resource, instance-seconds",
    );
    let backoff = gauge(
        reg,
        "project_backed_off",
        "1 while the project is backed off for the resource",
    );
    let backoff_left = float_gauge(
        reg,
        "project_backoff_remaining_seconds",
        "Seconds until the project's backoff for the resource ends (0 when not backed off)",
    );
    let eligible = gauge(
        reg,
        "project_eligible",
        "1 while the project has work the resource could run (it accrues debt)",
    );
    let pending = gauge(reg, "project_claims_pending", "Pending claims per project");
    let idle = float_gauge(
        reg,
        "resource_idle_instances",
        "Idle instances per resource type",
    );
    let shortfall = float_gauge(
        reg,
        "resource_shortfall_seconds",
        "Shortfall over the buffer horizon per resource type, instance-seconds",
    );
    for p in &snap.projects {
        for r in &p.resources {
            let l = vec![
                ("project".to_string(), p.name.clone()),
                ("resource".to_string(), r.resource.clone()),
            ];
            debt.get_or_create(&l).set(r.debt);
            backoff
                .get_or_create(&l)
                .set(i64::from(r.backoff_until.is_some()));
            let left_ms = r
                .backoff_until
                .map_or(0, |until| until.0.saturating_sub(snap.taken_at.0));
            backoff_left.get_or_create(&l).set(left_ms as f64 / 1000.0);
            eligible.get_or_create(&l).set(i64::from(r.eligible));
        }
        pending
            .get_or_create(&vec![("project".to_string(), p.name.clone())])
            .set(i64::from(p.pending));
    }
    for r in &snap.resources {
        let l = vec![("resource".to_string(), r.name.clone())];
        idle.get_or_create(&l).set(r.idle);
        shortfall.get_or_create(&l).set(r.shortfall);
    }
}

/// This endpoint's GPUs' flags now: the recorder's open episodes, idle ones included;
/// without a history, this snapshot's join alone (no idle: that takes 30 minutes of
/// watching).
fn flag_metrics(reg: &mut Registry, st: &ApiState, snap: &Snapshot) {
    let open = if let Some(h) = &st.history {
        h.open_flags()
    } else {
        let view = crate::physical::SourceView {
            source: 0,
            name: &snap.endpoint.name,
            engine: crate::physical::GpuEngine::Gpuboard,
            snapshot: snap,
        };
        let mut fleet = crate::physical::join(&[view], &crate::physical::Aliases::default());
        let mut once = crate::physical::FlagTracker::default();
        once.observe(&mut fleet, snap.taken_at);
        once.open().to_vec()
    };
    flagged(reg, &open);
}

/// `gpuboard_gpu_flagged{node, index, uuid, flag, holder, engine, project}`: 1 per open
/// episode and holder it names (one series without a holder for unexplained memory).
pub(crate) fn flagged(reg: &mut Registry, open: &[crate::physical::FlagEpisode]) {
    let flagged = gauge(
        reg,
        "gpu_flagged",
        "1 per flag a GPU carries and holder it names: double-booked, unexplained (memory of \
         processes no holder accounts for), idle (held, below 5 % for 30 min+)",
    );
    for e in open {
        let l = |holder: &str, engine: &str, project: &str| {
            vec![
                ("node".to_string(), e.node.clone()),
                ("index".to_string(), e.index.to_string()),
                ("uuid".to_string(), e.uuid.clone().unwrap_or_default()),
                ("flag".to_string(), e.flag.clone()),
                ("holder".to_string(), holder.to_string()),
                ("engine".to_string(), engine.to_string()),
                ("project".to_string(), project.to_string()),
            ]
        };
        if e.holders.is_empty() {
            flagged.get_or_create(&l("", "", "")).set(1);
        }
        for h in &e.holders {
            flagged
                .get_or_create(&l(&h.label, h.engine.word(), &h.project))
                .set(1);
        }
    }
}

/// `reg` as `OpenMetrics` text.
pub(crate) fn exposition(reg: &Registry) -> Result<axum::response::Response, ApiError> {
    let mut text = String::new();
    encode(&mut text, reg)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "metrics", e.to_string()))?;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    Ok((headers, text).into_response())
}

/// The metrics of the durable state (the cached snapshot version) and of the store.
pub(crate) async fn metrics(
    State(st): State<ApiState>,
) -> Result<axum::response::Response, ApiError> {
    let built = st.versions.current().await.map_err(serialize_failed)?;
    let snap = &built.snapshot;
    let mut reg = Registry::with_prefix("gpuboard");
    device_metrics(&mut reg, snap);
    claim_metrics(&mut reg, snap);
    fair_share_metrics(&mut reg, snap);
    flag_metrics(&mut reg, &st, snap);
    let revision = Gauge::<i64>::default();
    revision.set(i64::try_from(snap.revision).unwrap_or(i64::MAX));
    reg.register("revision", "Revision of the endpoint's state", revision);
    let failed = Gauge::<i64>::default();
    failed.set(i64::from(st.engine.failure().is_some()));
    reg.register(
        "store_failed",
        "1 once a commit has failed: the endpoint refuses changes until restarted (see /healthz)",
        failed,
    );
    let stats = st.engine.store_stats();
    let counter = |reg: &mut Registry, name: &str, help: &str, v: u64| {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        reg.register(name, help, c);
    };
    counter(
        &mut reg,
        "store_commits",
        "Transactions committed (fsyncs)",
        stats.commits.load(Ordering::Relaxed),
    );
    counter(
        &mut reg,
        "store_batches",
        "Requests those commits carried",
        stats.batches.load(Ordering::Relaxed),
    );
    counter(
        &mut reg,
        "store_changes",
        "State changes written",
        stats.changes.load(Ordering::Relaxed),
    );
    gpu_time(&mut reg, &st).await;
    reg.register(
        "http_responses",
        "HTTP responses by status code",
        st.responses.clone(),
    );
    exposition(&reg)
}
