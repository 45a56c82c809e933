//! `GET /metrics`: the current snapshot version, the store's commit counters and failure,
//! and the HTTP answers by status, as `OpenMetrics` text.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::endpoint::api_error::{ApiError, serialize_failed};
use crate::endpoint::api_state::ApiState;
use crate::snapshot::ClaimState;

type Labels = Vec<(String, String)>;

/// The metrics of the durable state (the cached snapshot version) and of the store.
pub(crate) async fn metrics(
    State(st): State<ApiState>,
) -> Result<axum::response::Response, ApiError> {
    let built = st.versions.current().await.map_err(serialize_failed)?;
    let snap = &built.snapshot;
    let mut reg = Registry::with_prefix("gpuboard");
    let gauge = |reg: &mut Registry, name: &str, help: &str| {
        let f = Family::<Labels, Gauge>::default();
        reg.register(name, help, f.clone());
        f
    };
    let mem_cap = gauge(
        &mut reg,
        "device_memory_capacity_bytes",
        "Schedulable memory M",
    );
    let mem_alloc = gauge(
        &mut reg,
        "device_memory_allocated_bytes",
        "Memory reserved by claims",
    );
    let mem_used = gauge(
        &mut reg,
        "device_memory_used_bytes",
        "Memory in use (telemetry)",
    );
    let mem_unclaimed = gauge(
        &mut reg,
        "device_memory_unclaimed_bytes",
        "Memory used by processes of no claim (telemetry)",
    );
    let compute = gauge(
        &mut reg,
        "device_compute_allocated_units",
        "Compute reserved, 10000 units per device",
    );
    let slots = gauge(
        &mut reg,
        "device_slots_allocated",
        "Sharing slots taken, of 100",
    );
    let cordoned = gauge(
        &mut reg,
        "device_cordoned",
        "1 when the device takes no new claims",
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
        if let Some(u) = d.unclaimed_memory {
            set(&mem_unclaimed, u.0);
        }
        set(&compute, u64::from(d.compute_allocated.0));
        set(&slots, u64::from(d.slots_allocated.0));
        set(&cordoned, u64::from(d.cordoned));
    }
    let claims = gauge(&mut reg, "claims", "Claims by state");
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
    let debt = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    reg.register(
        "project_debt",
        "Long-term debt per project and resource, instance-seconds",
        debt.clone(),
    );
    let backoff = gauge(
        &mut reg,
        "project_backed_off",
        "1 while the project is backed off for the resource",
    );
    let float = |reg: &mut Registry, name: &str, help: &str| {
        let f = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        reg.register(name, help, f.clone());
        f
    };
    let backoff_left = float(
        &mut reg,
        "project_backoff_remaining_seconds",
        "Seconds until the project's backoff for the resource ends (0 when not backed off)",
    );
    let eligible = gauge(
        &mut reg,
        "project_eligible",
        "1 while the project has work the resource could run (it accrues debt)",
    );
    let pending = gauge(
        &mut reg,
        "project_claims_pending",
        "Pending claims per project",
    );
    let idle = float(
        &mut reg,
        "resource_idle_instances",
        "Idle instances per resource type",
    );
    let shortfall = float(
        &mut reg,
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
    reg.register(
        "http_responses",
        "HTTP responses by status code",
        st.responses.clone(),
    );
    let mut text = String::new();
    encode(&mut text, &reg)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "metrics", e.to_string()))?;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    Ok((headers, text).into_response())
}
