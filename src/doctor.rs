//! `gpuboard doctor`: what this machine has for GPUs (driver, NVML library, device nodes,
//! devices, configuration) and, when no GPU is seen, why, in plain words. Always exits 0:
//! it is a diagnosis, not a check.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::discovery::{GpuResourceConfig, flatten_toml, parse_flat_config};
use crate::telemetry::nvml::{DEFAULT_LIBRARY, NvmlBackend};
use crate::telemetry::{BackendStatus, DeviceError, TelemetryBackend, Unavailable};
use crate::units::Bytes;

/// Arguments of `gpuboard doctor`.
// clap turns these doc comments into `--help` text, where backticks would show.
#[allow(clippy::doc_markdown)]
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Load NVML from this file instead of the driver's `libnvidia-ml.so.1`.
    #[arg(
        long = "nvml-lib",
        alias = "nvml-library",
        env = "GPUBOARD_NVML_LIBRARY",
        value_name = "PATH"
    )]
    pub nvml_library: Option<PathBuf>,
    /// Also check this configuration file (gpuboard TOML or flink-conf.yaml).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The endpoint's data directory, whose TLS certificate fingerprint is shown.
    #[arg(long, env = "GPUBOARD_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Endpoints to check (reachable, version, token, TLS pin, clock), as the client
    /// commands take them: URL, NAME=URL or a config entry's name; repeatable. Default: the
    /// config's gpuboard [[endpoints]].
    #[arg(long = "endpoint", value_delimiter = ',', value_name = "ENDPOINT")]
    pub endpoints: Vec<String>,
    /// File holding the bearer token for --endpoint URLs (default: GPUBOARD_TOKEN, else
    /// operator.token in the data directory for an endpoint on this host).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// SHA-256 fingerprint pinned for https --endpoint URLs.
    #[arg(long, env = "GPUBOARD_TLS_FINGERPRINT", value_name = "SHA256")]
    pub tls_fingerprint: Option<String>,
    /// PEM file of CA certificates to trust for https --endpoint URLs.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Seconds to wait for each endpoint.
    #[arg(long, default_value_t = 5)]
    pub timeout: u64,
}

/// The endpoint checks' part of the report (made by the CLI, which can reach endpoints).
#[derive(Clone, Debug, Default)]
pub struct EndpointChecks {
    /// For `--json`: the `endpoints` value.
    pub json: serde_json::Value,
    /// For people: lines printed after the machine's report.
    pub text: String,
    /// The exit code of the endpoints' worst fault (0 when they only got advice).
    pub exit: u8,
}

/// The kernel side of the driver.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct KernelDriver {
    /// `/proc/driver/nvidia/version` exists.
    pub loaded: bool,
    /// Its first line, e.g. `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15 ...`.
    pub version: Option<String>,
}

/// A `/dev/nvidia*` node.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct DeviceNode {
    /// Its path.
    pub path: PathBuf,
    /// Whether this user may open it for reading and writing.
    pub accessible: bool,
}

/// One GPU as NVML reports it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct DoctorDevice {
    /// NVML index.
    pub index: u32,
    /// Product name.
    pub name: Option<String>,
    /// UUID.
    pub uuid: Option<String>,
    /// PCI bus id.
    pub pci_bus_id: Option<String>,
    /// Total memory in bytes.
    pub memory_total_bytes: Option<u64>,
    /// Stopped answering.
    pub lost: bool,
}

/// A configuration file looked for.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ConfigCheck {
    /// Where.
    pub path: PathBuf,
    /// It exists.
    pub found: bool,
    /// The GPU settings it holds, in words, when found and readable.
    pub gpu: Option<String>,
    /// Why it could not be read.
    pub error: Option<String>,
}

/// The whole diagnosis.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DoctorReport {
    /// Report format version.
    pub schema: u32,
    /// What NVML said: ready (library, versions) or why not.
    pub nvml: BackendStatus,
    /// Directories searched for the library when it was not found (`LD_LIBRARY_PATH` and
    /// the usual places), with the copies present there.
    pub library_copies: Vec<PathBuf>,
    /// The kernel module.
    pub kernel_driver: KernelDriver,
    /// Device nodes and whether they can be opened.
    pub device_nodes: Vec<DeviceNode>,
    /// GPUs seen.
    pub devices: Vec<DoctorDevice>,
    /// Configuration files looked for.
    pub config: Vec<ConfigCheck>,
    /// The verdict in plain words, most important first.
    pub summary: Vec<String>,
}

fn kernel_driver(proc_root: &Path) -> KernelDriver {
    let text = std::fs::read_to_string(proc_root.join("driver/nvidia/version")).ok();
    KernelDriver {
        loaded: text.is_some(),
        version: text.and_then(|t| t.lines().next().map(|l| l.trim().to_string())),
    }
}

fn accessible(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access() only reads the NUL-terminated path we own.
    unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) == 0 }
}

fn device_nodes(dev: &Path) -> Vec<DeviceNode> {
    let mut nodes: Vec<PathBuf> = std::fs::read_dir(dev)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("nvidia"))
                })
                .collect()
        })
        .unwrap_or_default();
    nodes.sort();
    nodes
        .into_iter()
        .filter(|p| !p.is_dir())
        .map(|path| DeviceNode {
            accessible: accessible(&path),
            path,
        })
        .collect()
}

/// Copies of the NVML library in the directories the loader searches.
fn library_copies() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    for d in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/nvidia/lib64",
        "/usr/local/cuda/lib64/stubs",
    ] {
        dirs.push(PathBuf::from(d));
    }
    let mut found = Vec::new();
    for dir in dirs {
        for name in [DEFAULT_LIBRARY, "libnvidia-ml.so"] {
            let p = dir.join(name);
            if p.exists() && !found.contains(&p) {
                found.push(p);
            }
        }
    }
    found
}

fn check_config(path: &Path) -> ConfigCheck {
    let mut check = ConfigCheck {
        path: path.to_path_buf(),
        found: path.exists(),
        gpu: None,
        error: None,
    };
    if !check.found {
        return check;
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            check.error = Some(e.to_string());
            return check;
        }
    };
    let is_toml = path.extension().is_some_and(|e| e == "toml");
    let flat = if is_toml {
        text.parse::<toml::Table>()
            .map(|t| flatten_toml(&t))
            .map_err(|e| e.to_string())
    } else {
        parse_flat_config(&text).map_err(|e| e.to_string())
    };
    match flat.and_then(|m| GpuResourceConfig::from_flat(&m).map_err(|e| e.to_string())) {
        Ok(Some(gpu)) => {
            check.gpu = Some(match &gpu.script_path {
                Some(script) => format!(
                    "{} GPU(s) per worker, discovered by {} {}",
                    gpu.amount,
                    script.display(),
                    gpu.script_args.join(" ")
                ),
                None => format!("{} GPU(s) per worker, discovered through NVML", gpu.amount),
            });
            check.error = gpu.script_path.as_deref().and_then(script_problem);
        }
        Ok(None) => check.gpu = Some("no GPU resource configured".to_string()),
        Err(e) => check.error = Some(e),
    }
    check
}

/// Why a configured discovery script cannot run (missing, not a file, not executable);
/// a relative path is Flink's, under `$FLINK_HOME`.
fn script_problem(script: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let full = match std::env::var_os("FLINK_HOME") {
        Some(home) if script.is_relative() => PathBuf::from(home).join(script),
        _ => script.to_path_buf(),
    };
    let shown = full.display();
    match std::fs::metadata(&full) {
        Err(e) => Some(format!(
            "the discovery script {shown} cannot be used ({e}): Flink workers will fail to start with GPUs; fix external-resource.gpu.param.discovery-script.path"
        )),
        Ok(m) if !m.is_file() => Some(format!("the discovery script {shown} is not a file")),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Some(format!(
            "the discovery script {shown} is not executable (chmod +x it)"
        )),
        Ok(_) => None,
    }
}

fn config_paths(extra: Option<&Path>) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    if let Some(p) = extra {
        paths.push(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("GPUBOARD_CONFIG") {
        paths.push(PathBuf::from(p));
    }
    if let Some(dir) = dirs::config_dir() {
        paths.push(dir.join("gpuboard").join("config.toml"));
    }
    let flink_conf = std::env::var_os("FLINK_CONF_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("FLINK_HOME").map(|h| PathBuf::from(h).join("conf")));
    if let Some(dir) = flink_conf {
        paths.push(dir.join("flink-conf.yaml"));
    }
    paths.dedup();
    paths
}

fn summary(report: &DoctorReport) -> Vec<String> {
    let mut lines = Vec::new();
    match &report.nvml {
        BackendStatus::Ready {
            driver_version,
            library,
            ..
        } => {
            let driver = driver_version.as_deref().unwrap_or("unknown version");
            let lib = library.as_deref().unwrap_or(DEFAULT_LIBRARY);
            let live = report.devices.iter().filter(|d| !d.lost).count();
            if report.devices.is_empty() {
                lines.push(format!(
                    "NVML works (driver {driver}, {lib}) but reports no GPU: none is installed, or this container was started without GPUs (docker --gpus, the NVIDIA container toolkit)."
                ));
            } else {
                lines.push(format!(
                    "{live} GPU(s) usable through NVML (driver {driver}, library {lib})."
                ));
            }
            let lost = report.devices.iter().filter(|d| d.lost).count();
            if lost > 0 {
                lines.push(format!(
                    "{lost} GPU(s) are lost (fell off the bus); see `dmesg` for Xid errors; a reset or reboot is needed."
                ));
            }
        }
        BackendStatus::Unavailable { reason, .. } => {
            lines.push(format!("No GPU is seen: {reason}."));
            if matches!(reason, Unavailable::LibraryMissing(_)) {
                if report.kernel_driver.loaded {
                    lines.push("The NVIDIA kernel module is loaded, so the user-space driver package (libnvidia-ml) is missing or not on the loader path.".to_string());
                } else {
                    lines.push("No NVIDIA kernel module is loaded either: this machine has no NVIDIA driver (or no NVIDIA GPU).".to_string());
                }
                if !report.library_copies.is_empty() {
                    let copies: Vec<String> = report
                        .library_copies
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect();
                    lines.push(format!(
                        "Copies exist at {}, but loading failed: check they match this machine's architecture and driver.",
                        copies.join(", ")
                    ));
                }
            }
        }
    }
    let blocked: Vec<String> = report
        .device_nodes
        .iter()
        .filter(|n| !n.accessible)
        .map(|n| n.path.display().to_string())
        .collect();
    if !blocked.is_empty() {
        lines.push(format!(
            "This user cannot open {}: add it to the group owning them (often `video`) or fix their permissions.",
            blocked.join(", ")
        ));
    }
    for c in &report.config {
        match (&c.found, &c.gpu, &c.error) {
            (true, _, Some(e)) => lines.push(format!("Config {}: unusable: {e}", c.path.display())),
            (true, Some(gpu), None) => lines.push(format!("Config {}: {gpu}.", c.path.display())),
            _ => {}
        }
    }
    if report.config.iter().all(|c| !c.found) {
        lines.push("No configuration file found; defaults apply.".to_string());
    }
    lines
}

/// Examines this machine. `proc_root` and `dev` are `/proc` and `/dev` except in tests.
pub fn examine(
    library: Option<&Path>,
    config: Option<&Path>,
    proc_root: &Path,
    dev: &Path,
) -> DoctorReport {
    let mut backend = NvmlBackend::open(library);
    let nvml = backend.status();
    let count = backend.device_count().unwrap_or(0);
    let devices = (0..count)
        .map(|index| {
            let info = backend.device_info(index);
            let metrics = backend.metrics(index);
            let lost =
                matches!(info, Err(DeviceError::Lost)) || matches!(metrics, Err(DeviceError::Lost));
            let info = info.unwrap_or_default();
            DoctorDevice {
                index,
                name: info.name,
                uuid: info.uuid,
                pci_bus_id: info.pci_bus_id,
                memory_total_bytes: metrics.ok().and_then(|m| m.memory).map(|m| m.total.0),
                lost,
            }
        })
        .collect();
    let mut report = DoctorReport {
        schema: 1,
        library_copies: if nvml.is_ready() {
            Vec::new()
        } else {
            library_copies()
        },
        nvml,
        kernel_driver: kernel_driver(proc_root),
        device_nodes: device_nodes(dev),
        devices,
        config: config_paths(config)
            .iter()
            .map(|p| check_config(p))
            .collect(),
        summary: Vec::new(),
    };
    report.summary = summary(&report);
    report
}

fn human(report: &DoctorReport) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    for s in &report.summary {
        line(s.clone());
    }
    line(String::new());
    match &report.nvml {
        BackendStatus::Ready {
            library,
            driver_version,
            nvml_version,
            cuda_version,
            ..
        } => {
            let na = |v: &Option<String>| v.clone().unwrap_or_else(|| "n/a".to_string());
            line(format!("NVML library:   {}", na(library)));
            line(format!("driver:         {}", na(driver_version)));
            line(format!("NVML version:   {}", na(nvml_version)));
            line(format!("CUDA (driver):  {}", na(cuda_version)));
        }
        BackendStatus::Unavailable { reason, .. } => {
            line(format!("NVML:           unavailable: {reason}"));
        }
    }
    line(format!(
        "kernel module:  {}",
        report
            .kernel_driver
            .version
            .clone()
            .unwrap_or_else(|| "not loaded".to_string())
    ));
    if report.device_nodes.is_empty() {
        line("device nodes:   none (/dev/nvidia* absent)".to_string());
    }
    for n in &report.device_nodes {
        let access = if n.accessible { "ok" } else { "NO ACCESS" };
        line(format!("device node:    {} {access}", n.path.display()));
    }
    line(format!("GPUs:           {}", report.devices.len()));
    for d in &report.devices {
        let na = |v: &Option<String>| v.clone().unwrap_or_else(|| "n/a".to_string());
        let memory = d
            .memory_total_bytes
            .map_or("n/a".to_string(), |b| Bytes(b).iec());
        let lost = if d.lost { "  LOST" } else { "" };
        line(format!(
            "  {}: {}  {}  {}  {memory}{lost}",
            d.index,
            na(&d.name),
            na(&d.uuid),
            na(&d.pci_bus_id)
        ));
    }
    for c in &report.config {
        let state = if c.found { "found" } else { "not found" };
        line(format!("config:         {} ({state})", c.path.display()));
    }
    out
}

/// The line on this host's endpoint history (`history.sqlite` in `dir`): how far back it
/// goes and its size, and the same as JSON.
fn history_report(dir: &Path) -> (String, serde_json::Value) {
    use crate::store::history::{HistoryStore, Retention};
    let zone = jiff::tz::TimeZone::system();
    match HistoryStore::peek(dir, Retention::default()) {
        Ok(Some(info)) => {
            let span = match (info.from, info.to) {
                (Some(from), Some(to)) => format!(
                    "from {} to {} ({})",
                    crate::clock::date_time(from, &zone),
                    crate::clock::date_time(to, &zone),
                    crate::clock::age(to.millis_since(from))
                ),
                _ => "empty".to_string(),
            };
            let line = format!(
                "history:        {span}, {} on disk, {} versions, {} samples",
                info.bytes.iec(),
                info.versions,
                info.samples
            );
            (line, serde_json::to_value(&info).unwrap_or_default())
        }
        Ok(None) => (
            format!(
                "history:        none in {} (`gpuboard serve` records one)",
                dir.display()
            ),
            serde_json::Value::Null,
        ),
        Err(e) => (
            format!("history:        unreadable: {e}"),
            serde_json::json!({"error": e.to_string()}),
        ),
    }
}

/// Runs the command; always exit code 0 once a report could be printed.
pub fn run(args: DoctorArgs) -> anyhow::Result<i32> {
    run_with(args, None)
}

/// The same, with the configured endpoints' checks added to the report.
pub fn run_with(args: DoctorArgs, endpoints: Option<EndpointChecks>) -> anyhow::Result<i32> {
    let report = examine(
        args.nvml_library.as_deref(),
        args.config.as_deref(),
        Path::new("/proc"),
        Path::new("/dev"),
    );
    let dir = args
        .data_dir
        .clone()
        .unwrap_or_else(crate::store::claims::default_data_dir);
    let fingerprint = crate::endpoint::tls::local_fingerprint(&dir);
    let (history_line, history_json) = history_report(&dir);
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        if let Some(map) = v.as_object_mut() {
            map.insert("endpoint_tls_fingerprint".into(), fingerprint.into());
            if let Some(e) = &endpoints {
                map.insert("endpoints".into(), e.json.clone());
            }
            map.insert("history".into(), history_json);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", human(&report));
        println!("{history_line}");
        match fingerprint {
            Some(fp) => println!(
                "endpoint TLS certificate ({}): SHA-256 {fp}",
                crate::endpoint::tls::cert_path(&dir).display()
            ),
            None => println!(
                "endpoint TLS certificate: none in {} (`gpuboard serve --tls` makes one)",
                dir.display()
            ),
        }
        if let Some(e) = &endpoints {
            print!("{}", e.text);
        }
    }
    Ok(endpoints.map_or(0, |e| i32::from(e.exit)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn without_a_library_says_why_in_plain_words() {
        let proc_root = tempfile::tempdir().unwrap();
        let dev = tempfile::tempdir().unwrap();
        let conf = proc_root.path().join("flink-conf.yaml");
        std::fs::write(&conf, "external-resource.gpu.amount: 2\n").unwrap();
        let report = examine(
            Some(Path::new("/nonexistent/libnvidia-ml.so.1")),
            Some(&conf),
            proc_root.path(),
            dev.path(),
        );
        assert!(report.devices.is_empty());
        assert!(!report.kernel_driver.loaded);
        assert!(
            report.summary[0].starts_with("No GPU is seen"),
            "{:?}",
            report.summary
        );
        assert!(
            report
                .summary
                .iter()
                .any(|s| s.contains("no NVIDIA driver"))
        );
        assert!(
            report
                .summary
                .iter()
                .any(|s| s.contains("2 GPU(s) per worker"))
        );
        let text = human(&report);
        assert!(text.contains("kernel module:  not loaded"), "{text}");
    }

    #[test]
    fn a_missing_or_unrunnable_flink_discovery_script_is_noticed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let runnable = dir.path().join("ok.sh");
        std::fs::write(&runnable, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&runnable, std::fs::Permissions::from_mode(0o755)).unwrap();
        let plain = dir.path().join("plain.sh");
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let missing = dir.path().join("missing.sh");
        // (script, words in the summary, none when it is fine)
        let cases = [
            (&missing, Some("cannot be used")),
            (&plain, Some("not executable")),
            (&runnable, None),
        ];
        for (script, words) in cases {
            let conf = dir.path().join("flink-conf.yaml");
            std::fs::write(
                &conf,
                format!(
                    "external-resource.gpu.amount: 1\nexternal-resource.gpu.param.discovery-script.path: {}\n",
                    script.display()
                ),
            )
            .unwrap();
            let report = examine(
                Some(Path::new("/nonexistent/libnvidia-ml.so.1")),
                Some(&conf),
                dir.path(),
                dir.path(),
            );
            let unusable = report.summary.iter().find(|s| s.contains("unusable"));
            match words {
                Some(w) => {
                    assert!(
                        unusable.is_some_and(
                            |s| s.contains(w) && s.contains(&script.display().to_string())
                        ),
                        "{}: {:?}",
                        script.display(),
                        report.summary
                    );
                }
                None => assert!(unusable.is_none(), "{:?}", report.summary),
            }
        }
    }

    #[test]
    fn a_blocked_device_node_is_named() {
        let dev = tempfile::tempdir().unwrap();
        let node = dev.path().join("nvidia0");
        std::fs::write(&node, "").unwrap();
        let nodes = device_nodes(dev.path());
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].path, node);
    }
}
