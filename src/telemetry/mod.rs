//! Live GPU and host telemetry: plain snapshot types, the backend trait that fills them
//! (NVML on a real machine, an in-memory fake in tests), and the background sampler that
//! pushes snapshots to the console and the endpoint.
//!
//! Every metric NVML may refuse is an `Option`: `None` means "not supported or not
//! readable", never zero.

pub mod cgroup_owner;
pub mod fake;
pub mod history;
pub mod host;
pub mod nvml;
pub mod procfs;
pub mod sampler;
pub mod shown;
pub mod simulated;

use serde::{Deserialize, Serialize};

use crate::units::Bytes;

pub use history::{DeviceHistory, History};
pub use host::{HostSample, HostSource, LoadAverage, SysinfoHost};
pub use sampler::{Sampler, SamplerConfig, SamplerCore, Sink};

/// Facts about a device that do not change while it is plugged in: read once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Product name, e.g. `NVIDIA A100-SXM4-80GB`.
    pub name: Option<String>,
    /// `GPU-...` identifier, stable across reboots.
    pub uuid: Option<String>,
    /// PCI bus id, e.g. `00000000:07:00.0`.
    pub pci_bus_id: Option<String>,
    /// Highest SM clock the board allows, in MHz.
    pub max_sm_clock_mhz: Option<u32>,
    /// How many fans NVML reports.
    pub fan_count: Option<u32>,
}

/// Device memory as NVML's v2 memory info reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryInfo {
    /// Physical memory on the board.
    pub total: Bytes,
    /// Memory the driver keeps for itself and never hands out.
    pub reserved: Bytes,
    /// Memory allocated by processes (and contexts).
    pub used: Bytes,
    /// Memory still free.
    pub free: Bytes,
}

impl MemoryInfo {
    /// What a scheduler can hand out: total less the driver's reservation.
    pub fn schedulable(&self) -> Bytes {
        self.total - self.reserved
    }
}

/// Current clocks in MHz.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clocks {
    /// Graphics clock.
    pub graphics_mhz: Option<u32>,
    /// Streaming-multiprocessor clock.
    pub sm_mhz: Option<u32>,
    /// Memory clock.
    pub memory_mhz: Option<u32>,
}

/// ECC mode and error counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ecc {
    /// Whether ECC is on now.
    pub enabled: bool,
    /// Whether ECC will be on after the next reboot.
    pub pending_enabled: bool,
    /// Corrected (single-bit) errors since the driver loaded.
    pub volatile_corrected: Option<u64>,
    /// Uncorrected (double-bit) errors since the driver loaded.
    pub volatile_uncorrected: Option<u64>,
}

/// Values that move: read about every second.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceMetrics {
    /// Memory total/reserved/used/free.
    pub memory: Option<MemoryInfo>,
    /// Percent of the last sample period a kernel ran.
    pub utilization_gpu_percent: Option<u32>,
    /// Percent of the last sample period device memory was read or written.
    pub utilization_memory_percent: Option<u32>,
    /// GPU die temperature in degrees Celsius.
    pub temperature_c: Option<u32>,
    /// Power draw in milliwatts.
    pub power_mw: Option<u32>,
    /// Power limit the driver enforces, in milliwatts.
    pub power_limit_mw: Option<u32>,
    /// Current clocks.
    pub clocks: Clocks,
    /// Fan speed per fan, percent of maximum; `None` when the board has no fans NVML can read.
    pub fan_percent: Option<Vec<u32>>,
    /// Names of the reasons clocks are held down now (empty: running free).
    pub throttle_reasons: Option<Vec<String>>,
    /// ECC state; `None` when the board has no ECC.
    pub ecc: Option<Ecc>,
    /// MIG mode and instances; `None` when the board cannot do MIG.
    pub mig: Option<MigState>,
}

/// MIG mode of a device and its instances.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigState {
    /// MIG is on now.
    pub enabled: bool,
    /// MIG will be on after the next reset.
    pub pending_enabled: bool,
    /// The MIG devices carved out of this GPU (empty when MIG is off).
    pub devices: Vec<MigDevice>,
}

/// One MIG instance.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigDevice {
    /// Index among the parent's MIG devices.
    pub index: u32,
    /// `MIG-...` identifier, what `CUDA_VISIBLE_DEVICES` takes.
    pub uuid: Option<String>,
    /// Profile name, e.g. `NVIDIA A100-SXM4-40GB MIG 1g.5gb`.
    pub name: Option<String>,
    /// The instance's own memory.
    pub memory: Option<MemoryInfo>,
}

/// A process holding a context on a GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSample {
    /// Process id (in NVML's view: the host pid namespace).
    pub pid: u32,
    /// GPU memory it holds; `None` when NVML cannot say (e.g. without permission, or under MIG).
    pub used_memory: Option<Bytes>,
    /// Short process name, when it could be read.
    pub name: Option<String>,
    /// Whose it is by its cgroup (a pod, a Slurm job, a container), when that was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<crate::snapshot::ProcessOwner>,
}

/// Whether a device still answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum DeviceState {
    /// Answering.
    #[default]
    Ok,
    /// Fell off the bus or stopped answering; last static data is kept so the operator
    /// can see which board it was.
    Lost {
        /// When it was first seen lost (Unix milliseconds).
        since_unix_ms: u64,
    },
}

/// Everything known about one local GPU at one sampling round.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceReading {
    /// NVML index (what `CUDA_VISIBLE_DEVICES` means without `CUDA_DEVICE_ORDER` tricks).
    pub index: u32,
    /// Static facts (read once).
    pub info: DeviceInfo,
    /// Ok or lost.
    pub state: DeviceState,
    /// Latest metrics; all absent while lost.
    pub metrics: DeviceMetrics,
    /// Latest process list (refreshed at most every process interval).
    pub processes: Vec<ProcessSample>,
    /// When `processes` was read (Unix milliseconds); `None` before the first read.
    pub processes_fetched_unix_ms: Option<u64>,
    /// Why the process list could not be read, when it could not.
    pub processes_error: Option<String>,
    /// Recent values for sparklines.
    pub history: DeviceHistory,
}

impl DeviceReading {
    /// True when the device stopped answering.
    pub fn is_lost(&self) -> bool {
        matches!(self.state, DeviceState::Lost { .. })
    }
}

/// Why no local GPU can be seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "reason", content = "detail", rename_all = "snake_case")]
pub enum Unavailable {
    /// The NVML library (`libnvidia-ml.so.1`) could not be loaded.
    #[error(
        "the NVIDIA management library could not be loaded ({0}); install the NVIDIA driver, or point LD_LIBRARY_PATH at libnvidia-ml.so.1"
    )]
    LibraryMissing(String),
    /// The library loaded but the kernel driver is not running.
    #[error(
        "the NVIDIA management library is installed but the NVIDIA kernel driver is not loaded (no GPU, or the module failed to load: see `dmesg` and `lsmod | grep nvidia`)"
    )]
    DriverNotLoaded,
    /// User-space library and kernel module are from different driver versions.
    #[error(
        "the NVIDIA library and kernel driver versions do not match (usually a driver upgrade without a reboot); reboot or reload the nvidia module"
    )]
    VersionMismatch,
    /// The driver refused us.
    #[error(
        "no permission to talk to the NVIDIA driver; check the permissions of /dev/nvidia* and that this user may access them"
    )]
    NoPermission,
    /// The library lacks a function every driver has: a broken or foreign library.
    #[error("the NVIDIA management library at hand lacks {0}: a broken or very old library")]
    IncompleteLibrary(String),
    /// Anything else NVML said at start-up.
    #[error("the NVIDIA management library failed to start: {0}")]
    Other(String),
}

/// What the backend could do at the last round.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum BackendStatus {
    /// Reading GPUs.
    Ready {
        /// Which backend (`nvml`, `fake`).
        backend: String,
        /// Where the library came from (path or soname asked for).
        library: Option<String>,
        /// Driver version, e.g. `550.54.15`.
        driver_version: Option<String>,
        /// NVML version string.
        nvml_version: Option<String>,
        /// CUDA driver API version as `12.4`.
        cuda_version: Option<String>,
    },
    /// No GPU can be read, and why.
    Unavailable {
        /// Which backend was tried.
        backend: String,
        /// Why it cannot read GPUs.
        reason: Unavailable,
    },
}

impl BackendStatus {
    /// True when the backend can read devices.
    pub fn is_ready(&self) -> bool {
        matches!(self, BackendStatus::Ready { .. })
    }
}

/// What went wrong reading one device.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// The device fell off the bus or stopped answering.
    #[error("GPU is lost (fell off the bus or stopped answering)")]
    Lost,
    /// No device at this index (any more).
    #[error("no GPU at index {0}")]
    NoSuchDevice(u32),
    /// Any other failure, with NVML's words.
    #[error("{0}")]
    Other(String),
}

/// A source of GPU readings. Calls may block on the driver, so only the sampler thread
/// calls them; nothing on a render path does.
pub trait TelemetryBackend: Send {
    /// Whether devices can be read, and from what.
    fn status(&self) -> BackendStatus;
    /// How many devices the backend sees (0 when unavailable).
    fn device_count(&mut self) -> Result<u32, DeviceError>;
    /// Static facts of one device; a field that cannot be read is `None`.
    fn device_info(&mut self, index: u32) -> Result<DeviceInfo, DeviceError>;
    /// Current metrics of one device; a field that cannot be read is `None`.
    /// Fails as a whole only when the device is lost or gone.
    fn metrics(&mut self, index: u32) -> Result<DeviceMetrics, DeviceError>;
    /// Processes with a context on the device (compute and graphics, one entry per pid).
    fn processes(&mut self, index: u32) -> Result<Vec<ProcessSample>, DeviceError>;
}

/// One complete round: every local device, the host, and how the backend fared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TelemetrySnapshot {
    /// When the round finished (Unix milliseconds).
    pub fetched_unix_ms: u64,
    /// Ready, or why no GPU is seen.
    pub backend: BackendStatus,
    /// Devices by NVML index, lost ones included.
    pub devices: Vec<DeviceReading>,
    /// Host CPU, memory and load.
    pub host: Option<HostSample>,
    /// Recent host CPU percent for a sparkline.
    pub host_cpu_history: History,
}

/// Names of NVML throttle-reason bits, in bit order.
pub(crate) const THROTTLE_REASON_NAMES: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// Turns a throttle-reason bitmask into names; unknown bits show as hex so nothing hides.
pub fn throttle_reason_names(bits: u64) -> Vec<String> {
    let mut names = Vec::new();
    let mut known = 0u64;
    for (bit, name) in THROTTLE_REASON_NAMES {
        known |= bit;
        if bits & bit != 0 {
            names.push(name.to_string());
        }
    }
    let unknown = bits & !known;
    if unknown != 0 {
        names.push(format!("unknown_0x{unknown:x}"));
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_bits_are_named_and_unknown_bits_kept() {
        assert!(throttle_reason_names(0).is_empty());
        assert_eq!(
            throttle_reason_names(0x1 | 0x4),
            vec!["gpu_idle", "sw_power_cap"]
        );
        assert_eq!(throttle_reason_names(0x1000), vec!["unknown_0x1000"]);
    }

    #[test]
    fn schedulable_memory_excludes_the_driver_reservation() {
        let m = MemoryInfo {
            total: Bytes::gib(80),
            reserved: Bytes::mib(512),
            used: Bytes::gib(1),
            free: Bytes::gib(78),
        };
        assert_eq!(m.schedulable(), Bytes::gib(80) - Bytes::mib(512));
    }
}
