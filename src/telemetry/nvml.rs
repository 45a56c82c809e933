//! The real backend: NVML through nvml-wrapper, loaded at run time. Without the library
//! or the driver it still starts, sees zero GPUs and says why.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};

use super::cgroup_owner::OwnerReader;
use super::{
    BackendStatus, Clocks, DeviceError, DeviceInfo, DeviceMetrics, Ecc, MemoryInfo, MigDevice,
    MigState, ProcessSample, TelemetryBackend, Unavailable, throttle_reason_names,
};
use crate::units::Bytes;

/// The soname the driver installs; what `Nvml::init` loads.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";
/// Process names longer than this are cut by NVML; 64 is what `nvidia-smi` shows.
const PROCESS_NAME_LEN: usize = 64;

/// NVML-backed telemetry. Holds the loaded library for its whole life.
pub struct NvmlBackend {
    nvml: Option<Nvml>,
    status: BackendStatus,
    /// Where processes' cgroups are read (`None`: owners are not read).
    owner_root: Option<PathBuf>,
    /// Owners read, per device: each device's listing forgets the pids it no longer has.
    owners: HashMap<u32, OwnerReader>,
}

impl NvmlBackend {
    /// Loads NVML from `library` (a path, or by default the driver's soname through the
    /// dynamic loader) and initialises it. Never fails: when NVML cannot start, the backend
    /// sees zero GPUs and its status carries the reason.
    pub fn open(library: Option<&Path>) -> NvmlBackend {
        let mut builder = Nvml::builder();
        if let Some(path) = library {
            builder.lib_path(path.as_os_str());
        }
        match builder.init() {
            Ok(nvml) => {
                let found = library
                    .map(Path::to_path_buf)
                    .or_else(|| loaded_library_path("libnvidia-ml"));
                let status = BackendStatus::Ready {
                    backend: "nvml".to_string(),
                    library: Some(
                        found.map_or(DEFAULT_LIBRARY.to_string(), |p| p.display().to_string()),
                    ),
                    driver_version: nvml.sys_driver_version().ok(),
                    nvml_version: nvml.sys_nvml_version().ok(),
                    cuda_version: nvml
                        .sys_cuda_driver_version()
                        .ok()
                        .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10)),
                };
                NvmlBackend {
                    nvml: Some(nvml),
                    status,
                    owner_root: None,
                    owners: HashMap::new(),
                }
            }
            Err(error) => NvmlBackend {
                nvml: None,
                status: BackendStatus::Unavailable {
                    backend: "nvml".to_string(),
                    reason: classify_init_error(error, library.map(Path::as_os_str)),
                },
                owner_root: None,
                owners: HashMap::new(),
            },
        }
    }

    /// Names each listed process's owner from `ROOT/PID/cgroup` (`/proc` on a host; a
    /// fixture directory in tests, whose pids are this machine's real ones).
    #[must_use]
    pub fn with_owners_under(mut self, root: PathBuf) -> NvmlBackend {
        self.owner_root = Some(root);
        self
    }

    fn device(&self, index: u32) -> Result<Device<'_>, DeviceError> {
        let nvml = self.nvml.as_ref().ok_or(DeviceError::NoSuchDevice(index))?;
        nvml.device_by_index(index).map_err(|e| match e {
            NvmlError::GpuLost => DeviceError::Lost,
            NvmlError::InvalidArg | NvmlError::NotFound => DeviceError::NoSuchDevice(index),
            other => DeviceError::Other(other.to_string()),
        })
    }
}

/// Maps NVML's start-up failure to the reason an operator can act on.
pub fn classify_init_error(error: NvmlError, library: Option<&OsStr>) -> Unavailable {
    let asked = library.map_or(DEFAULT_LIBRARY.into(), OsStr::to_string_lossy);
    match error {
        NvmlError::LibloadingError(e) => {
            let said = e.to_string();
            // The loader's message usually names the file already.
            Unavailable::LibraryMissing(if said.contains(asked.as_ref()) {
                said
            } else {
                format!("{asked}: {said}")
            })
        }
        NvmlError::LibraryNotFound => Unavailable::LibraryMissing(asked.into_owned()),
        NvmlError::FailedToLoadSymbol(symbol) => Unavailable::IncompleteLibrary(symbol),
        NvmlError::DriverNotLoaded => Unavailable::DriverNotLoaded,
        NvmlError::LibRmVersionMismatch => Unavailable::VersionMismatch,
        NvmlError::NoPermission => Unavailable::NoPermission,
        other => Unavailable::Other(other.to_string()),
    }
}

/// Where the dynamic loader found a library whose file name starts with `prefix`, read
/// from this process's memory map (Linux only; `None` elsewhere or when not mapped).
pub fn loaded_library_path(prefix: &str) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .map(Path::new)
        .find(|p| {
            p.file_name()
                .and_then(OsStr::to_str)
                .is_some_and(|n| n.starts_with(prefix))
        })
        .map(Path::to_path_buf)
}

/// A field read: lost ends the device's round, any other failure (`NotSupported`,
/// `NoPermission`, ...) makes just this field absent.
fn field<T>(result: Result<T, NvmlError>) -> Result<Option<T>, DeviceError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(NvmlError::GpuLost) => Err(DeviceError::Lost),
        Err(_) => Ok(None),
    }
}

fn memory(device: &Device<'_>) -> Result<Option<MemoryInfo>, DeviceError> {
    Ok(field(device.memory_info())?.map(|m| MemoryInfo {
        total: Bytes(m.total),
        reserved: Bytes(m.reserved),
        used: Bytes(m.used),
        free: Bytes(m.free),
    }))
}

fn fans(device: &Device<'_>) -> Result<Option<Vec<u32>>, DeviceError> {
    let Some(count) = field(device.num_fans())? else {
        return Ok(None);
    };
    let mut speeds = Vec::new();
    for fan in 0..count {
        if let Some(speed) = field(device.fan_speed(fan))? {
            speeds.push(speed);
        }
    }
    Ok((!speeds.is_empty()).then_some(speeds))
}

fn ecc(device: &Device<'_>) -> Result<Option<Ecc>, DeviceError> {
    let Some(mode) = field(device.is_ecc_enabled())? else {
        return Ok(None);
    };
    let (corrected, uncorrected) = if mode.currently_enabled {
        (
            field(device.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile))?,
            field(device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile))?,
        )
    } else {
        (None, None)
    };
    Ok(Some(Ecc {
        enabled: mode.currently_enabled,
        pending_enabled: mode.pending_enabled,
        volatile_corrected: corrected,
        volatile_uncorrected: uncorrected,
    }))
}

fn mig(device: &Device<'_>) -> Result<Option<MigState>, DeviceError> {
    let Some(mode) = field(device.mig_mode())? else {
        return Ok(None);
    };
    let enabled = mode.current == 1;
    let mut devices = Vec::new();
    if enabled {
        let slots = field(device.mig_device_count())?.unwrap_or(0);
        for index in 0..slots {
            // Unpopulated slots answer NotFound: skip them.
            let Some(mig) = field(device.mig_device_by_index(index))? else {
                continue;
            };
            devices.push(MigDevice {
                index,
                uuid: field(mig.uuid())?,
                name: field(mig.name())?,
                memory: memory(&mig)?,
            });
        }
    }
    Ok(Some(MigState {
        enabled,
        pending_enabled: mode.pending == 1,
        devices,
    }))
}

fn merge_processes(into: &mut Vec<ProcessSample>, list: Vec<ProcessInfo>) {
    for p in list {
        let used = match p.used_gpu_memory {
            UsedGpuMemory::Used(bytes) => Some(Bytes(bytes)),
            UsedGpuMemory::Unavailable => None,
        };
        // A process with both a compute and a graphics context is listed twice with the
        // same memory: keep one entry, the larger reading.
        if let Some(existing) = into.iter_mut().find(|e| e.pid == p.pid) {
            existing.used_memory = existing.used_memory.max(used);
        } else {
            into.push(ProcessSample {
                pid: p.pid,
                used_memory: used,
                name: None,
                owner: None,
            });
        }
    }
}

impl TelemetryBackend for NvmlBackend {
    fn status(&self) -> BackendStatus {
        self.status.clone()
    }

    fn device_count(&mut self) -> Result<u32, DeviceError> {
        match &self.nvml {
            None => Ok(0),
            Some(nvml) => nvml
                .device_count()
                .map_err(|e| DeviceError::Other(e.to_string())),
        }
    }

    fn device_info(&mut self, index: u32) -> Result<DeviceInfo, DeviceError> {
        let device = self.device(index)?;
        Ok(DeviceInfo {
            name: field(device.name())?,
            uuid: field(device.uuid())?,
            pci_bus_id: field(device.pci_info())?.map(|p| p.bus_id),
            max_sm_clock_mhz: field(device.max_clock_info(Clock::SM))?,
            fan_count: field(device.num_fans())?,
        })
    }

    fn metrics(&mut self, index: u32) -> Result<DeviceMetrics, DeviceError> {
        let device = self.device(index)?;
        let utilization = field(device.utilization_rates())?;
        Ok(DeviceMetrics {
            memory: memory(&device)?,
            utilization_gpu_percent: utilization.as_ref().map(|u| u.gpu),
            utilization_memory_percent: utilization.as_ref().map(|u| u.memory),
            temperature_c: field(device.temperature(TemperatureSensor::Gpu))?,
            power_mw: field(device.power_usage())?,
            power_limit_mw: field(device.enforced_power_limit())?,
            clocks: Clocks {
                graphics_mhz: field(device.clock_info(Clock::Graphics))?,
                sm_mhz: field(device.clock_info(Clock::SM))?,
                memory_mhz: field(device.clock_info(Clock::Memory))?,
            },
            fan_percent: fans(&device)?,
            throttle_reasons: field(device.current_throttle_reasons())?
                .map(|r| throttle_reason_names(r.bits())),
            ecc: ecc(&device)?,
            mig: mig(&device)?,
        })
    }

    fn processes(&mut self, index: u32) -> Result<Vec<ProcessSample>, DeviceError> {
        let device = self.device(index)?;
        let mut processes = Vec::new();
        let compute = device.running_compute_processes();
        let graphics = device.running_graphics_processes();
        if matches!(compute, Err(NvmlError::GpuLost)) || matches!(graphics, Err(NvmlError::GpuLost))
        {
            return Err(DeviceError::Lost);
        }
        match (compute, graphics) {
            (Err(c), Err(_)) => return Err(DeviceError::Other(c.to_string())),
            (c, g) => {
                merge_processes(&mut processes, c.unwrap_or_default());
                merge_processes(&mut processes, g.unwrap_or_default());
            }
        }
        if let Some(nvml) = &self.nvml {
            for p in &mut processes {
                p.name = nvml.sys_process_name(p.pid, PROCESS_NAME_LEN).ok();
            }
        }
        if let Some(root) = &self.owner_root {
            let reader = self
                .owners
                .entry(index)
                .or_insert_with(|| OwnerReader::new(root.clone()));
            reader.keep_only(&processes.iter().map(|p| p.pid).collect::<BTreeSet<_>>());
            for p in &mut processes {
                p.owner = reader.owner(p.pid);
            }
        }
        processes.sort_by_key(|p| p.pid);
        Ok(processes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_a_typed_reason_not_a_failure() {
        let mut backend = NvmlBackend::open(Some(Path::new("/nonexistent/libnvidia-ml.so.1")));
        match backend.status() {
            BackendStatus::Unavailable {
                reason: Unavailable::LibraryMissing(detail),
                ..
            } => assert!(
                detail.contains("/nonexistent/libnvidia-ml.so.1"),
                "{detail}"
            ),
            other => panic!("expected library missing, got {other:?}"),
        }
        assert_eq!(backend.device_count(), Ok(0));
        assert_eq!(backend.metrics(0), Err(DeviceError::NoSuchDevice(0)));
    }

    #[test]
    fn init_errors_map_to_reasons() {
        assert_eq!(
            classify_init_error(NvmlError::DriverNotLoaded, None),
            Unavailable::DriverNotLoaded
        );
        assert_eq!(
            classify_init_error(NvmlError::LibRmVersionMismatch, None),
            Unavailable::VersionMismatch
        );
        assert_eq!(
            classify_init_error(NvmlError::NoPermission, None),
            Unavailable::NoPermission
        );
        assert_eq!(
            classify_init_error(NvmlError::FailedToLoadSymbol("nvmlInit_v2".into()), None),
            Unavailable::IncompleteLibrary("nvmlInit_v2".into())
        );
    }
}
