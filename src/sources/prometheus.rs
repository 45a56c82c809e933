//! A Prometheus server holding NVIDIA dcgm-exporter series, read as remote GPU telemetry.
//!
//! One range query per fetch brings the recent raw samples of the dcgm fields below; the
//! newest sample of each series is the device's current value, the older ones its
//! sparkline history. The result is a telemetry-only snapshot (kind `prometheus`, no
//! claims, nothing offered); `join_telemetry` attaches it to the devices of other
//! sources, by UUID where both know it, otherwise by node name and index.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use super::adapter::{self, Adapter, Shell};
use super::error::SourceError;
use super::http::{Auth, JsonClient, PeerKind};
use super::kind::SourceKind;
use serde::Deserialize;

use super::json::{Num, ShapeError, typed, typed_each};
use super::sections::Sections;
use super::{Action, Failure, Outcome};
use crate::clock::{Clock, Timestamp};
use crate::snapshot::{
    DeviceTelemetry, DeviceView, EndpointInfo, NodeView, SCHEMA_VERSION, Snapshot, SourceWarning,
};
use crate::units::Bytes;

/// GPU utilization, percent.
pub const GPU_UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";
/// Frame buffer used, MiB.
pub const FB_USED: &str = "DCGM_FI_DEV_FB_USED";
/// Frame buffer free, MiB.
pub const FB_FREE: &str = "DCGM_FI_DEV_FB_FREE";
/// GPU temperature, degrees Celsius.
pub const GPU_TEMP: &str = "DCGM_FI_DEV_GPU_TEMP";
/// Power draw, watts.
pub const POWER_USAGE: &str = "DCGM_FI_DEV_POWER_USAGE";
/// Every series read.
pub const SERIES: [&str; 5] = [GPU_UTIL, FB_USED, FB_FREE, GPU_TEMP, POWER_USAGE];

/// DCGM's smallest "blank" value for 32-bit fields (`DCGM_INT32_BLANK`); the 64-bit and
/// floating-point blanks are larger still. dcgm-exporter passes them through as numbers
/// when a field has no data, is not supported or not permitted. No real reading of the
/// fields above comes near it (FB is in MiB), so anything from here up means "no data".
pub const DCGM_BLANK_MIN: f64 = 2_147_483_632.0;

/// The default label naming the node a series comes from (dcgm-exporter's own).
pub const DEFAULT_NODE_LABEL: &str = "Hostname";

/// How to reach a Prometheus server and read its dcgm series.
#[derive(Clone, Debug, PartialEq)]
pub struct PrometheusConfig {
    /// Display name of the endpoint; the URL's host when empty.
    pub name: String,
    /// Base address of the server, `http://host:9090` (a path prefix is kept).
    pub url: String,
    /// Credentials, when the server sits behind authentication.
    pub auth: Option<Auth>,
    /// Deadline for each fetch.
    pub timeout: Duration,
    /// The label whose value is the node name (`Hostname` by default; `instance` is the
    /// fallback, without its port).
    pub node_label: Option<String>,
    /// How far back samples are read: the newest is the current value, the rest history.
    pub window: Duration,
}

impl PrometheusConfig {
    /// A config with the defaults: 5 s timeout, `Hostname` labels, a 5-minute window.
    pub fn new(url: impl Into<String>) -> PrometheusConfig {
        PrometheusConfig {
            name: String::new(),
            url: url.into(),
            auth: None,
            timeout: Duration::from_secs(5),
            node_label: None,
            window: Duration::from_mins(5),
        }
    }
}

/// A Prometheus server as a console source.
#[derive(Clone)]
pub struct PrometheusSource {
    shell: Shell<PrometheusConfig, JsonClient>,
}

impl std::fmt::Debug for PrometheusSource {
    /// The config's `auth` hides its secrets itself.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusSource")
            .field("config", &self.shell.config)
            .finish_non_exhaustive()
    }
}

/// The `PromQL` selector for every dcgm series read.
pub fn selector() -> String {
    format!("{{__name__=~\"{}\"}}", SERIES.join("|"))
}

impl PrometheusSource {
    /// A source reading the server in `config`, on the wall clock.
    pub fn new(config: PrometheusConfig) -> Result<PrometheusSource, SourceError> {
        PrometheusSource::with_clock(config, adapter::wall_clock())
    }

    /// A source on an injected clock (tests).
    pub fn with_clock(
        config: PrometheusConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<PrometheusSource, SourceError> {
        if config.window.as_secs() == 0 {
            return Err(SourceError::BadUrl {
                url: config.url.clone(),
                why: "the sample window must be at least one second".to_string(),
            });
        }
        let client = JsonClient::new(
            &config.url,
            config.auth.clone(),
            config.timeout,
            PeerKind::Prometheus,
        )?;
        Ok(PrometheusSource {
            shell: Shell::new(config, client, clock),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PrometheusConfig {
        &self.shell.config
    }

    /// Reads the server's version and the dcgm series, and turns them into a snapshot.
    pub async fn fetch(&self) -> Result<Snapshot, SourceError> {
        let (config, client) = (&self.shell.config, &self.shell.peer);
        let info_url = client.url("api/v1/status/buildinfo", &[])?;
        let mut sections = Sections::new();
        // The version is optional: a server that answers the query but not buildinfo
        // (a proxy, another TSDB) is still read, with a warning.
        let version = match client.get_json(&info_url).await {
            Ok(info) => check_envelope(&info, info_url.as_str(), |data| {
                typed::<BuildInfo>(data, "data").map(|b| b.version)
            })
            .map(Option::flatten),
            Err(e) => Err(e),
        };
        let version = match version {
            Ok(v) => v,
            Err(
                e @ (SourceError::Refused { .. }
                | SourceError::Unreachable { .. }
                | SourceError::Timeout { .. }
                | SourceError::Unauthorized { .. }
                | SourceError::BadUrl { .. }),
            ) => return Err(e),
            Err(e) => {
                sections.warn(SourceWarning {
                    section: "/api/v1/status/buildinfo".to_string(),
                    path: "data.version".to_string(),
                    found: e.to_string(),
                    left_out: "the server's version".to_string(),
                });
                None
            }
        };
        let query = format!("{}[{}s]", selector(), config.window.as_secs());
        let query_url = client.url("api/v1/query", &[("query", &query)])?;
        let answer = client.get_json(&query_url).await?;
        let url = query_url.to_string();
        let labels = NodeLabels::new(config.node_label.as_deref());
        let mut skipped = Vec::new();
        let samples = check_envelope(&answer, &url, |data| {
            read_result(data, "data", &mut skipped)
        })?;
        sections.extend(
            skipped
                .iter()
                .map(|e| e.warning("/api/v1/query", "this series")),
        );
        let samples = samples.ok_or_else(|| SourceError::Decode {
            url: url.clone(),
            what: "`data`: expected the query result, found nothing".to_string(),
        })?;
        let name = adapter::name_or_host(&config.name, client.base());
        let endpoint = EndpointInfo {
            name,
            version: version
                .map_or_else(|| "prometheus".to_string(), |v| format!("prometheus {v}")),
            kind: "prometheus".to_string(),
            policy: String::new(),
            actions: false,
            telemetry_note: None,
            warnings: sections.into_warnings(),
            store_failed: None,
        };
        Ok(telemetry_snapshot(
            &samples,
            &labels,
            endpoint,
            self.shell.now(),
        ))
    }
}

/// Read-only telemetry: every action is refused, naming where it must be done instead.
impl Adapter for PrometheusSource {
    const KIND: SourceKind = SourceKind::Prometheus;
    fn source_name(&self) -> &str {
        &self.shell.config.name
    }
    fn read(&self) -> impl Future<Output = Result<Snapshot, SourceError>> + Send + '_ {
        PrometheusSource::fetch(self)
    }
    fn carry_out(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>> {
        adapter::act_refused(format!(
            "{} reads telemetry only; {} {} must be done where the GPUs are scheduled",
            self.source_name(),
            action.verb(),
            action.target()
        ))
    }
}

/// Checks Prometheus' `{"status": ..., "data": ...}` envelope and reads `data` with `f`.
fn check_envelope<T>(
    doc: &Value,
    url: &str,
    f: impl FnOnce(&Value) -> Result<T, ShapeError>,
) -> Result<Option<T>, SourceError> {
    let not_prom = |why: String| SourceError::NotPrometheus {
        url: url.to_string(),
        why,
    };
    let Value::Object(map) = doc else {
        return Err(not_prom(format!(
            "it answered {}, not Prometheus' {{\"status\": ...}} object",
            super::json::describe(doc)
        )));
    };
    let Some(status) = map.get("status") else {
        return Err(not_prom(
            "its JSON has no `status` field, which every Prometheus API answer carries".to_string(),
        ));
    };
    match status.as_str() {
        Some("success") => {}
        Some("error") => {
            let kind = map
                .get("errorType")
                .and_then(Value::as_str)
                .unwrap_or("error");
            let msg = map
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("(no message)");
            return Err(SourceError::Peer {
                url: url.to_string(),
                peer: "Prometheus server",
                message: format!("{kind}: {msg}"),
            });
        }
        _ => {
            return Err(SourceError::Decode {
                url: url.to_string(),
                what: ShapeError {
                    path: "status".to_string(),
                    problem: format!(
                        "expected \"success\" or \"error\", found {}",
                        super::json::describe(status)
                    ),
                }
                .to_string(),
            });
        }
    }
    match map.get("data") {
        None | Some(Value::Null) => Ok(None),
        Some(data) => f(data).map(Some).map_err(|e| SourceError::Decode {
            url: url.to_string(),
            what: e.to_string(),
        }),
    }
}

/// `/api/v1/status/buildinfo`'s `data`.
#[derive(Deserialize)]
struct BuildInfo {
    version: Option<String>,
}

/// A query answer's `data`: the kind of result and the series, kept raw.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueryData {
    result_type: String,
    result: Value,
}

/// One series as Prometheus writes it: labels, and samples (a matrix's `values`, a
/// vector's `value`) as `[seconds, "value"]`.
#[derive(Deserialize)]
struct SeriesEntry {
    metric: BTreeMap<String, String>,
    values: Option<Vec<(Num, String)>>,
    value: Option<(Num, String)>,
}

/// One series: its labels and its samples (milliseconds, value), oldest first.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Labels, `__name__` included.
    pub labels: BTreeMap<String, String>,
    /// Samples, oldest first; `None` where the value is NaN or a dcgm blank.
    pub samples: Vec<(Timestamp, Option<f64>)>,
}

impl Series {
    fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn latest(&self) -> Option<(Timestamp, Option<f64>)> {
        self.samples.last().copied()
    }
}

/// Reads a sample value: Prometheus writes them as strings; NaN, infinities, negative
/// values and dcgm's blanks mean "no data".
pub fn sample_value(text: &str) -> Option<f64> {
    let v: f64 = text.trim().parse().ok()?;
    (0.0..DCGM_BLANK_MIN).contains(&v).then_some(v)
}

/// A sample, its time checked.
fn sample((Num(secs), v): (Num, String), at: &str) -> Result<(Timestamp, Option<f64>), ShapeError> {
    if secs < 0.0 {
        return Err(ShapeError {
            path: at.to_string(),
            problem: format!("expected a time in seconds since 1970, found {secs}"),
        });
    }
    // Milliseconds since the epoch fit u64 for any time Prometheus can store.
    let ms = (secs * 1000.0).round() as u64;
    Ok((Timestamp(ms), sample_value(&v)))
}

/// Reads the `data` of a query answer: a matrix (range query) or a vector (instant query).
/// Any series that cannot be read fails the whole answer (`read_result` skips it instead).
pub fn parse_result(data: &Value) -> Result<Vec<Series>, ShapeError> {
    let mut skipped = Vec::new();
    let series = read_result(data, "", &mut skipped)?;
    match skipped.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(series),
    }
}

/// Reads the `data` of a query answer, found at `at`; a series that cannot be read is
/// skipped, its error in `skipped`.
fn read_result(
    data: &Value,
    at: &str,
    skipped: &mut Vec<ShapeError>,
) -> Result<Vec<Series>, ShapeError> {
    let q: QueryData = typed(data, at)?;
    let join = |key: &str| {
        if at.is_empty() {
            key.to_string()
        } else {
            format!("{at}.{key}")
        }
    };
    let matrix = match q.result_type.as_str() {
        "matrix" => true,
        "vector" => false,
        other => {
            return Err(ShapeError {
                path: join("resultType"),
                problem: format!("expected \"matrix\" or \"vector\", found {other:?}"),
            });
        }
    };
    let raw: Vec<Value> = typed_each(&q.result, &join("result"), &mut Vec::new())?;
    let mut out = Vec::with_capacity(raw.len());
    for (i, v) in raw.iter().enumerate() {
        let here = format!("{}[{i}]", join("result"));
        let read = typed::<SeriesEntry>(v, &here).and_then(|e| {
            let samples = if matrix {
                let values = e.values.ok_or_else(|| ShapeError {
                    path: format!("{here}.values"),
                    problem: "expected the samples, found nothing".to_string(),
                })?;
                values
                    .into_iter()
                    .enumerate()
                    .map(|(j, v)| sample(v, &format!("{here}.values[{j}]")))
                    .collect::<Result<Vec<_>, _>>()?
            } else {
                let value = e.value.ok_or_else(|| ShapeError {
                    path: format!("{here}.value"),
                    problem: "expected a sample, found nothing".to_string(),
                })?;
                vec![sample(value, &format!("{here}.value"))?]
            };
            Ok(Series {
                labels: e.metric,
                samples,
            })
        });
        match read {
            Ok(s) => out.push(s),
            Err(e) => skipped.push(e),
        }
    }
    Ok(out)
}

/// Which label names a series' node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLabels {
    primary: String,
}

impl NodeLabels {
    /// `label`, or dcgm-exporter's `Hostname` when none is configured.
    pub fn new(label: Option<&str>) -> NodeLabels {
        NodeLabels {
            primary: label
                .filter(|l| !l.is_empty())
                .unwrap_or(DEFAULT_NODE_LABEL)
                .to_string(),
        }
    }

    /// The node a series belongs to: the configured label, else `instance` without its port.
    fn node_of(&self, s: &Series) -> Option<String> {
        if let Some(v) = s.label(&self.primary) {
            return Some(v.to_string());
        }
        let instance = s.label("instance")?;
        let host = match instance.rsplit_once(':') {
            Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
            _ => instance,
        };
        Some(host.trim_matches(['[', ']']).to_string())
    }
}

/// What one device's series say, gathered before they become telemetry.
#[derive(Default)]
struct Gathered {
    model: Option<String>,
    uuid: Option<String>,
    pci_bus_id: Option<String>,
    sampled_at: Timestamp,
    mig_instances: BTreeMap<String, Instance>,
    whole: Instance,
    temperature: Option<f64>,
    power: Option<f64>,
}

/// Per-instance readings (the whole GPU is one instance when MIG is off).
#[derive(Default)]
struct Instance {
    util: Option<f64>,
    fb_used: Option<f64>,
    fb_free: Option<f64>,
    util_history: Vec<u32>,
    used_history: Vec<u64>,
}

fn mib(v: f64) -> Bytes {
    Bytes((v.round() as u64).saturating_mul(1 << 20))
}

fn percent(v: f64) -> u32 {
    v.round().clamp(0.0, 100.0) as u32
}

/// Turns dcgm series into a telemetry-only snapshot: one node per host, one device per
/// `gpu` index, MIG instances folded into their GPU (memory summed, `mig_enabled` set).
/// A series that cannot be placed (no node, no device index) is left out with a warning
/// naming it.
pub fn telemetry_snapshot(
    series: &[Series],
    labels: &NodeLabels,
    mut endpoint: EndpointInfo,
    taken_at: Timestamp,
) -> Snapshot {
    let devices = gather(series, labels, &mut endpoint.warnings);
    let mut nodes: Vec<NodeView> = Vec::new();
    for ((node, index), g) in devices {
        let mig = !g.mig_instances.is_empty();
        let (util, used, free, util_history, used_history) = if mig {
            let parts: Vec<&Instance> = g.mig_instances.values().collect();
            let all = |f: fn(&Instance) -> Option<f64>| -> Option<Vec<f64>> {
                parts.iter().map(|i| f(i)).collect()
            };
            let util = all(|i| i.util).map(|u| u.iter().sum::<f64>() / u.len() as f64);
            let used = all(|i| i.fb_used).map(|u| u.iter().sum::<f64>());
            let free = all(|i| i.fb_free).map(|u| u.iter().sum::<f64>());
            // Instances' histories need not line up in time: no sparkline for MIG GPUs.
            (util, used, free, Vec::new(), Vec::new())
        } else {
            let w = g.whole;
            (w.util, w.fb_used, w.fb_free, w.util_history, w.used_history)
        };
        let total = used.zip(free).map(|(u, f)| mib(u + f));
        let telemetry = DeviceTelemetry {
            sampled_at: g.sampled_at,
            pci_bus_id: g.pci_bus_id,
            memory_total: total,
            memory_used: used.map(mib),
            utilization_gpu: util.map(percent),
            temperature_c: g.temperature.map(|t| t.round() as u32),
            power_mw: g
                .power
                .map(|w| (w * 1000.0).round().min(f64::from(u32::MAX)) as u32),
            mig_enabled: Some(mig),
            history_utilization: util_history,
            history_memory_used: used_history,
            simulated: false,
            ..DeviceTelemetry::default()
        };
        let device = DeviceView {
            index,
            model: g.model.unwrap_or_default(),
            uuid: g.uuid,
            memory_capacity: total,
            telemetry: Some(telemetry),
            ..DeviceView::default()
        };
        match nodes.last_mut() {
            Some(n) if n.name == node => n.devices.push(device),
            _ => nodes.push(NodeView {
                name: node,
                cpus_milli: None,
                cpus_allocated_milli: 0,
                devices: vec![device],
            }),
        }
    }
    Snapshot {
        schema: SCHEMA_VERSION,
        endpoint,
        revision: 0,
        taken_at,
        nodes,
        ..Snapshot::default()
    }
}

/// The series gathered per device (node, `gpu` index), MIG instances apart; a series that
/// cannot be placed is left out with a warning.
fn gather(
    series: &[Series],
    labels: &NodeLabels,
    warnings: &mut Vec<SourceWarning>,
) -> BTreeMap<(String, u32), Gathered> {
    let mut devices: BTreeMap<(String, u32), Gathered> = BTreeMap::new();
    for s in series {
        let Some((node, index)) = place(s, labels, warnings) else {
            continue;
        };
        let name = s.label("__name__").unwrap_or("(unnamed)");
        let Some((at, latest)) = s.latest() else {
            continue;
        };
        let g = devices.entry((node, index)).or_default();
        g.model = g
            .model
            .take()
            .or_else(|| s.label("modelName").map(str::to_string));
        g.uuid = g
            .uuid
            .take()
            .or_else(|| s.label("UUID").map(str::to_string));
        g.pci_bus_id = g
            .pci_bus_id
            .take()
            .or_else(|| s.label("pci_bus_id").map(str::to_string));
        g.sampled_at = g.sampled_at.max(at);
        let instance = match s.label("GPU_I_ID") {
            Some(id) => {
                let key = match s.label("GPU_I_PROFILE") {
                    Some(p) => format!("{id} {p}"),
                    None => id.to_string(),
                };
                g.mig_instances.entry(key).or_default()
            }
            None => &mut g.whole,
        };
        let history = || s.samples.iter().filter_map(|(_, v)| *v);
        match name {
            GPU_UTIL => {
                instance.util = latest;
                instance.util_history = history().map(percent).collect();
            }
            FB_USED => {
                instance.fb_used = latest;
                instance.used_history = history().map(|v| mib(v).0).collect();
            }
            FB_FREE => instance.fb_free = latest,
            // Device-wide readings: every MIG instance repeats them.
            GPU_TEMP => g.temperature = latest.or(g.temperature),
            POWER_USAGE => g.power = latest.or(g.power),
            _ => {}
        }
    }
    devices
}

/// A series' node and device index, or a warning naming the series and what it lacks.
fn place(
    s: &Series,
    labels: &NodeLabels,
    warnings: &mut Vec<SourceWarning>,
) -> Option<(String, u32)> {
    let name = s.label("__name__").unwrap_or("(unnamed)");
    let shown: Vec<String> = s
        .labels
        .iter()
        .filter(|(k, _)| *k != "__name__")
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    let mut warn = |found: String| {
        warnings.push(SourceWarning {
            section: "/api/v1/query".to_string(),
            path: format!("{name}{{{}}}", shown.join(",")),
            found,
            left_out: "this series".to_string(),
        });
    };
    let Some(node) = labels.node_of(s) else {
        warn(format!(
            "neither a `{}` nor an `instance` label, so its node is unknown",
            labels.primary
        ));
        return None;
    };
    let Some(index) = s.label("gpu") else {
        warn("no `gpu` label (dcgm-exporter always sets it)".to_string());
        return None;
    };
    let Ok(index) = index.parse::<u32>() else {
        warn(format!(
            "`gpu` = {index:?}; expected a device index (0, 1, ...)"
        ));
        return None;
    };
    Some((node, index))
}

/// Node names match whole, case-insensitively, or on their first DNS label
/// (`gpu-7.cluster.local` is `gpu-7`).
fn same_node(a: &str, b: &str) -> bool {
    let short = |s: &str| s.split('.').next().unwrap_or(s).to_ascii_lowercase();
    a.eq_ignore_ascii_case(b) || short(a) == short(b)
}

/// Attaches the telemetry of `telemetry`'s devices to `target`'s devices that have none:
/// by UUID where both know it, otherwise by node name and device index (never joining two
/// devices whose known UUIDs differ). Returns how many devices got telemetry.
pub fn join_telemetry(target: &mut Snapshot, telemetry: &Snapshot) -> usize {
    let remote: Vec<(&str, &DeviceView)> = telemetry
        .nodes
        .iter()
        .flat_map(|n| n.devices.iter().map(move |d| (n.name.as_str(), d)))
        .filter(|(_, d)| d.telemetry.is_some())
        .collect();
    let mut joined = 0;
    for node in &mut target.nodes {
        for device in &mut node.devices {
            if device.telemetry.is_some() {
                continue;
            }
            let by_uuid = device.uuid.as_deref().and_then(|u| {
                remote.iter().find(|(_, r)| {
                    r.uuid
                        .as_deref()
                        .is_some_and(|ru| ru.eq_ignore_ascii_case(u))
                })
            });
            let found = by_uuid.or_else(|| {
                remote.iter().find(|(rn, r)| {
                    r.index == device.index
                        && same_node(rn, &node.name)
                        && match (&device.uuid, &r.uuid) {
                            (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
                            _ => true,
                        }
                })
            });
            if let Some((_, r)) = found {
                device.telemetry = r.telemetry.clone();
                joined += 1;
            }
        }
    }
    joined
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn endpoint() -> EndpointInfo {
        EndpointInfo {
            name: "prom".into(),
            kind: "prometheus".into(),
            ..EndpointInfo::default()
        }
    }

    fn series(name: &str, gpu: &str, host: &str, values: &[(f64, &str)]) -> Value {
        json!({
            "metric": {"__name__": name, "gpu": gpu, "Hostname": host, "UUID": format!("GPU-{host}-{gpu}"), "modelName": "NVIDIA A100-SXM4-40GB"},
            "values": values.iter().map(|(t, v)| json!([t, v])).collect::<Vec<_>>(),
        })
    }

    fn snapshot_of(result: Vec<Value>) -> Snapshot {
        let doc = json!({"resultType": "matrix", "result": result});
        let s = parse_result(&doc).unwrap();
        telemetry_snapshot(&s, &NodeLabels::new(None), endpoint(), Timestamp(5))
    }

    #[test]
    fn blanks_nan_and_negative_values_are_no_data() {
        assert_eq!(sample_value("37"), Some(37.0));
        assert_eq!(sample_value("NaN"), None);
        assert_eq!(sample_value("+Inf"), None);
        assert_eq!(sample_value("-1"), None);
        assert_eq!(sample_value("2147483632"), None); // DCGM_INT32_BLANK
        assert_eq!(sample_value("2147483633"), None); // not found
        assert_eq!(sample_value("9223372036854775792"), None); // DCGM_INT64_BLANK
        assert_eq!(sample_value("140737488355328"), None); // DCGM_FP64_BLANK
        assert_eq!(sample_value("junk"), None);
    }

    #[test]
    fn newest_sample_is_current_and_older_ones_are_history() {
        let s = snapshot_of(vec![
            series(
                GPU_UTIL,
                "0",
                "a",
                &[(10.0, "20"), (25.0, "2147483632"), (40.0, "60")],
            ),
            series(FB_USED, "0", "a", &[(10.0, "100"), (40.0, "1024")]),
            series(FB_FREE, "0", "a", &[(40.0, "39936")]),
            series(POWER_USAGE, "0", "a", &[(40.0, "61.5")]),
        ]);
        let d = &s.nodes[0].devices[0];
        let t = d.telemetry.as_ref().unwrap();
        assert_eq!(t.utilization_gpu, Some(60));
        assert_eq!(t.history_utilization, vec![20, 60]);
        assert_eq!(t.memory_used, Some(Bytes::gib(1)));
        assert_eq!(t.history_memory_used, vec![100 << 20, 1 << 30]);
        assert_eq!(t.memory_total, Some(Bytes::gib(40)));
        assert_eq!(d.memory_capacity, Some(Bytes::gib(40)));
        assert_eq!(t.power_mw, Some(61_500));
        assert_eq!(t.temperature_c, None);
        assert_eq!(t.sampled_at, Timestamp(40_000));
        assert_eq!(t.mig_enabled, Some(false));
    }

    #[test]
    fn capacity_is_unknown_without_both_used_and_free() {
        let s = snapshot_of(vec![series(FB_USED, "1", "a", &[(1.0, "5")])]);
        let d = &s.nodes[0].devices[0];
        assert_eq!(d.memory_capacity, None);
        assert_eq!(d.telemetry.as_ref().unwrap().memory_total, None);
    }

    #[test]
    fn series_without_a_gpu_index_are_warnings_naming_them() {
        let doc = json!({"resultType": "vector", "result": [
            {"metric": {"__name__": GPU_UTIL, "Hostname": "a", "gpu": "x"}, "value": [1.0, "3"]},
            {"metric": {"__name__": GPU_UTIL, "Hostname": "a", "gpu": "0"}, "value": [1.0, "3"]}
        ]});
        let s = parse_result(&doc).unwrap();
        let snap = telemetry_snapshot(&s, &NodeLabels::new(None), endpoint(), Timestamp(0));
        // The other series are still read.
        assert_eq!(snap.nodes[0].devices.len(), 1);
        let w = &snap.endpoint.warnings;
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].path, "DCGM_FI_DEV_GPU_UTIL{Hostname=\"a\",gpu=\"x\"}");
        assert!(w[0].found.contains("expected a device index"), "{w:?}");
    }

    #[test]
    fn wrong_shapes_name_their_path() {
        let doc = json!({"resultType": "matrix", "result": [{"metric": {"gpu": 0}, "values": []}]});
        let err = parse_result(&doc).unwrap_err();
        assert_eq!(err.path, "result[0].metric.gpu");
        let doc = json!({"resultType": "matrix", "result": [{"metric": {}, "values": [[1.0, 3]]}]});
        let err = parse_result(&doc).unwrap_err();
        assert_eq!(err.path, "result[0].values[0][1]");
        let doc = json!({"resultType": "scalar", "result": [1.0, "3"]});
        assert!(
            parse_result(&doc)
                .unwrap_err()
                .to_string()
                .contains("\"matrix\" or \"vector\"")
        );
    }

    #[test]
    fn node_label_falls_back_to_instance_without_port() {
        let s = Series {
            labels: [("instance".to_string(), "gpu-3.lab:9400".to_string())].into(),
            samples: vec![],
        };
        assert_eq!(
            NodeLabels::new(None).node_of(&s).as_deref(),
            Some("gpu-3.lab")
        );
        let s = Series {
            labels: [("node".to_string(), "k8s-7".to_string())].into(),
            samples: vec![],
        };
        assert_eq!(
            NodeLabels::new(Some("node")).node_of(&s).as_deref(),
            Some("k8s-7")
        );
        assert_eq!(NodeLabels::new(None).node_of(&s), None);
    }

    fn target(node: &str, uuids: &[Option<&str>]) -> Snapshot {
        Snapshot {
            nodes: vec![NodeView {
                name: node.into(),
                devices: uuids
                    .iter()
                    .enumerate()
                    .map(|(i, u)| DeviceView {
                        index: i as u32,
                        uuid: u.map(str::to_string),
                        ..DeviceView::default()
                    })
                    .collect(),
                ..NodeView::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn join_prefers_uuid_then_node_and_index_and_never_joins_different_uuids() {
        let remote = snapshot_of(vec![
            series(GPU_UTIL, "0", "host-a", &[(1.0, "10")]),
            series(GPU_UTIL, "1", "host-a", &[(1.0, "11")]),
            series(GPU_UTIL, "2", "host-a", &[(1.0, "12")]),
        ]);
        // Device 0 knows the UUID of remote gpu 1 (indexes differ between views), device 1
        // knows none, device 2 knows a UUID that is not remote gpu 2's.
        let mut t = target(
            "HOST-A.cluster.local",
            &[Some("gpu-host-a-1"), None, Some("GPU-other")],
        );
        assert_eq!(join_telemetry(&mut t, &remote), 2);
        let util = |i: usize| {
            t.nodes[0].devices[i]
                .telemetry
                .as_ref()
                .and_then(|x| x.utilization_gpu)
        };
        assert_eq!(util(0), Some(11));
        assert_eq!(util(1), Some(11));
        assert_eq!(util(2), None);
        // Already joined devices keep what they have.
        assert_eq!(join_telemetry(&mut t, &remote), 0);
        let mut other = target("host-b", &[None]);
        assert_eq!(join_telemetry(&mut other, &remote), 0);
    }
}
