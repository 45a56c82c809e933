//! A fake `libnvidia-ml.so` for tests. It exports the NVML functions gpuboard's
//! telemetry calls through nvml-wrapper and answers them from a TOML fixture named by
//! `GPUBOARD_FAKE_NVML_FIXTURE` (read at `nvmlInit_v2`). A field left out of a device
//! answers `NVML_ERROR_NOT_SUPPORTED`; a device can be lost after some calls or once a
//! marker file exists; MIG devices, processes and start-up failures are described there too.
//! A process may declare its `/proc/PID/cgroup` (`cgroup = "0::/kubepods/..."`): with
//! `proc_root` set, each listing writes it to `PROC_ROOT/PID/cgroup`, so a test points
//! gpuboard's owner reading (`GPUBOARD_HOST_PROC`) there instead of this machine's /proc,
//! where the fixture's pids belong to whatever runs here.

// Every export is called by C code through a pointer table; its safety contract is
// NVML's documented one, so per-function safety docs would only repeat nvml.h.
#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::path::PathBuf;
use std::sync::Mutex;

use serde::Deserialize;

type NvmlReturn = c_int;
type Handle = *mut c_void;

const SUCCESS: NvmlReturn = 0;
const INVALID_ARGUMENT: NvmlReturn = 2;
const NOT_SUPPORTED: NvmlReturn = 3;
const NO_PERMISSION: NvmlReturn = 4;
const NOT_FOUND: NvmlReturn = 6;
const INSUFFICIENT_SIZE: NvmlReturn = 7;
const DRIVER_NOT_LOADED: NvmlReturn = 9;
const GPU_IS_LOST: NvmlReturn = 15;
const LIB_RM_VERSION_MISMATCH: NvmlReturn = 18;
const ARGUMENT_VERSION_MISMATCH: NvmlReturn = 25;
const UNINITIALIZED: NvmlReturn = 1;
const UNKNOWN: NvmlReturn = 999;

/// `usedGpuMemory` when NVML cannot tell.
const VALUE_NOT_AVAILABLE: c_ulonglong = c_ulonglong::MAX;
/// `gpuInstanceId` / `computeInstanceId` outside MIG.
const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

/// The environment variable naming the fixture.
pub const FIXTURE_ENV: &str = "GPUBOARD_FAKE_NVML_FIXTURE";

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Fixture {
    driver_version: Option<String>,
    nvml_version: Option<String>,
    cuda_driver_version: Option<c_int>,
    /// `driver_not_loaded`, `no_permission`, `version_mismatch` or `unknown`.
    init_error: Option<String>,
    /// Where the processes' declared `cgroup` files are written (`PID/cgroup`).
    proc_root: Option<PathBuf>,
    #[serde(default)]
    devices: Vec<Device>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Device {
    name: Option<String>,
    uuid: Option<String>,
    pci_bus_id: Option<String>,
    memory_total: Option<u64>,
    #[serde(default)]
    memory_reserved: u64,
    #[serde(default)]
    memory_used: u64,
    utilization_gpu: Option<c_uint>,
    utilization_memory: Option<c_uint>,
    temperature: Option<c_uint>,
    power_mw: Option<c_uint>,
    power_limit_mw: Option<c_uint>,
    clock_graphics_mhz: Option<c_uint>,
    clock_sm_mhz: Option<c_uint>,
    clock_memory_mhz: Option<c_uint>,
    max_clock_sm_mhz: Option<c_uint>,
    fans: Option<Vec<c_uint>>,
    throttle_reasons: Option<u64>,
    ecc_enabled: Option<bool>,
    ecc_corrected: Option<u64>,
    ecc_uncorrected: Option<u64>,
    mig_enabled: Option<bool>,
    #[serde(default)]
    mig_devices: Vec<MigDevice>,
    #[serde(default)]
    processes: Vec<Process>,
    /// A TOML file of `[[processes]]` read at every listing instead of `processes`, so a
    /// test can put processes it started on the GPU while the library runs (absent file:
    /// no processes).
    processes_file: Option<PathBuf>,
    /// The device answers GPU_IS_LOST once this file exists.
    lost_when_exists: Option<PathBuf>,
    /// The device answers GPU_IS_LOST after this many calls on it.
    lost_after_calls: Option<u64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct MigDevice {
    uuid: Option<String>,
    name: Option<String>,
    memory_total: Option<u64>,
    #[serde(default)]
    memory_used: u64,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ProcessFile {
    #[serde(default)]
    processes: Vec<Process>,
}

#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Process {
    pid: c_uint,
    /// Absent: NVML cannot tell (NVML_VALUE_NOT_AVAILABLE).
    used_memory: Option<u64>,
    name: Option<String>,
    #[serde(default)]
    graphics: bool,
    gpu_instance_id: Option<c_uint>,
    /// Its `/proc/PID/cgroup` content, written under the fixture's `proc_root`.
    cgroup: Option<String>,
}

/// The processes on a device now: from its processes file when it names one.
fn device_processes(device: &Device) -> Vec<Process> {
    let Some(path) = &device.processes_file else {
        return device.processes.clone();
    };
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    match toml::from_str::<ProcessFile>(&text) {
        Ok(file) => file.processes,
        Err(e) => {
            eprintln!("fake-nvml: bad processes file {}: {e}", path.display());
            Vec::new()
        }
    }
}

struct State {
    fixture: Fixture,
    calls: Vec<u64>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

#[repr(C)]
pub struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

#[repr(C)]
pub struct MemoryV2 {
    version: c_uint,
    total: c_ulonglong,
    reserved: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

#[repr(C)]
pub struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

fn load() -> Result<Fixture, NvmlReturn> {
    let Some(path) = std::env::var_os(FIXTURE_ENV) else {
        // A library with nothing behind it: like an installed driver package without a GPU driver.
        return Err(DRIVER_NOT_LOADED);
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        eprintln!(
            "fake-nvml: cannot read fixture {}: {e}",
            PathBuf::from(&path).display()
        );
        UNKNOWN
    })?;
    let fixture: Fixture = toml::from_str(&text).map_err(|e| {
        eprintln!(
            "fake-nvml: bad fixture {}: {e}",
            PathBuf::from(&path).display()
        );
        UNKNOWN
    })?;
    match fixture.init_error.as_deref() {
        None => Ok(fixture),
        Some("driver_not_loaded") => Err(DRIVER_NOT_LOADED),
        Some("no_permission") => Err(NO_PERMISSION),
        Some("version_mismatch") => Err(LIB_RM_VERSION_MISMATCH),
        Some(_) => Err(UNKNOWN),
    }
}

fn with_state<T>(f: impl FnOnce(&mut State) -> Result<T, NvmlReturn>) -> Result<T, NvmlReturn> {
    let mut guard = STATE.lock().unwrap_or_else(|p| p.into_inner());
    match guard.as_mut() {
        Some(state) => f(state),
        None => Err(UNINITIALIZED),
    }
}

fn code(result: Result<(), NvmlReturn>) -> NvmlReturn {
    match result {
        Ok(()) => SUCCESS,
        Err(c) => c,
    }
}

/// Handles encode `(device + 1) << 8 | (mig + 1)`: never null, never dereferenced.
fn handle(device: usize, mig: Option<usize>) -> Handle {
    (((device + 1) << 8) | mig.map_or(0, |m| m + 1)) as Handle
}

fn decode(h: Handle) -> Option<(usize, Option<usize>)> {
    let raw = h as usize;
    let device = (raw >> 8).checked_sub(1)?;
    let mig = (raw & 0xff).checked_sub(1);
    Some((device, mig))
}

enum Target<'a> {
    Gpu(&'a Device),
    Mig(&'a MigDevice),
}

/// Resolves a handle, counts the call and applies the lost rules.
fn target<T>(
    h: Handle,
    f: impl FnOnce(Target<'_>) -> Result<T, NvmlReturn>,
) -> Result<T, NvmlReturn> {
    with_state(|state| {
        let (index, mig) = decode(h).ok_or(INVALID_ARGUMENT)?;
        let calls = state.calls.get_mut(index).ok_or(INVALID_ARGUMENT)?;
        *calls += 1;
        let calls = *calls;
        let device = state.fixture.devices.get(index).ok_or(INVALID_ARGUMENT)?;
        if is_lost(device, calls) {
            return Err(GPU_IS_LOST);
        }
        match mig {
            None => f(Target::Gpu(device)),
            Some(m) => f(Target::Mig(
                device.mig_devices.get(m).ok_or(INVALID_ARGUMENT)?,
            )),
        }
    })
}

fn is_lost(device: &Device, calls: u64) -> bool {
    device.lost_when_exists.as_ref().is_some_and(|p| p.exists())
        || device.lost_after_calls.is_some_and(|n| calls > n)
}

fn gpu<T>(h: Handle, f: impl FnOnce(&Device) -> Option<T>) -> Result<T, NvmlReturn> {
    target(h, |t| match t {
        Target::Gpu(d) => f(d).ok_or(NOT_SUPPORTED),
        Target::Mig(_) => Err(NOT_SUPPORTED),
    })
}

/// Writes `value` NUL-terminated into a caller buffer of `length` bytes.
unsafe fn write_str(out: *mut c_char, length: c_uint, value: &str) -> Result<(), NvmlReturn> {
    if out.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let bytes = value.as_bytes();
    if bytes.len() + 1 > length as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: the caller gave `length` writable bytes and we write at most that many.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), out, bytes.len());
        *out.add(bytes.len()) = 0;
    }
    Ok(())
}

/// Stores `value` through an out pointer.
unsafe fn put<T>(out: *mut T, value: Result<T, NvmlReturn>) -> NvmlReturn {
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    match value {
        Ok(v) => {
            // SAFETY: non-null and, per NVML's contract, pointing at a T.
            unsafe { out.write(v) };
            SUCCESS
        }
        Err(c) => c,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    match load() {
        Ok(fixture) => {
            let calls = vec![0; fixture.devices.len()];
            *STATE.lock().unwrap_or_else(|p| p.into_inner()) = Some(State { fixture, calls });
            SUCCESS
        }
        Err(c) => c,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    *STATE.lock().unwrap_or_else(|p| p.into_inner()) = None;
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    out: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    code(with_state(|s| {
        let v = s.fixture.driver_version.clone().ok_or(NOT_SUPPORTED)?;
        // SAFETY: forwarded caller buffer.
        unsafe { write_str(out, length, &v) }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(out: *mut c_char, length: c_uint) -> NvmlReturn {
    code(with_state(|s| {
        let v = s.fixture.nvml_version.clone().ok_or(NOT_SUPPORTED)?;
        // SAFETY: forwarded caller buffer.
        unsafe { write_str(out, length, &v) }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(out: *mut c_int) -> NvmlReturn {
    let v = with_state(|s| s.fixture.cuda_driver_version.ok_or(NOT_SUPPORTED));
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    out: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    code(with_state(|s| {
        let name = s
            .fixture
            .devices
            .iter()
            .flat_map(device_processes)
            .find(|p| p.pid == pid)
            .and_then(|p| p.name.clone())
            .ok_or(NOT_FOUND)?;
        // NVML cuts long names to the buffer rather than failing.
        let cut: String = name
            .chars()
            .take((length as usize).saturating_sub(1))
            .collect();
        // SAFETY: forwarded caller buffer.
        unsafe { write_str(out, length, &cut) }
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(out: *mut c_uint) -> NvmlReturn {
    let v = with_state(|s| c_uint::try_from(s.fixture.devices.len()).map_err(|_| UNKNOWN));
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    out: *mut Handle,
) -> NvmlReturn {
    let v = with_state(|s| {
        let i = index as usize;
        if i >= s.fixture.devices.len() {
            return Err(INVALID_ARGUMENT);
        }
        Ok(handle(i, None))
    })
    .and_then(|h| target(h, |_| Ok(h)));
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(
    h: Handle,
    out: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    let name = target(h, |t| {
        match t {
            Target::Gpu(d) => d.name.clone(),
            Target::Mig(m) => m.name.clone(),
        }
        .ok_or(NOT_SUPPORTED)
    });
    // SAFETY: forwarded caller buffer.
    code(name.and_then(|n| unsafe { write_str(out, length, &n) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    h: Handle,
    out: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    let uuid = target(h, |t| {
        match t {
            Target::Gpu(d) => d.uuid.clone(),
            Target::Mig(m) => m.uuid.clone(),
        }
        .ok_or(NOT_SUPPORTED)
    });
    // SAFETY: forwarded caller buffer.
    code(uuid.and_then(|u| unsafe { write_str(out, length, &u) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(h: Handle, out: *mut PciInfo) -> NvmlReturn {
    let v = gpu(h, |d| d.pci_bus_id.clone()).and_then(|bus_id| {
        let mut info = PciInfo {
            bus_id_legacy: [0; 16],
            domain: 0,
            bus: 0,
            device: 0,
            pci_device_id: 0x20b2_10de,
            pci_sub_system_id: 0x1463_10de,
            bus_id: [0; 32],
        };
        // SAFETY: a local 32-byte buffer.
        unsafe { write_str(info.bus_id.as_mut_ptr(), 32, &bus_id)? };
        let mut parts = bus_id.split([':', '.']);
        info.domain = parts
            .next()
            .and_then(|p| u32::from_str_radix(p, 16).ok())
            .unwrap_or(0);
        info.bus = parts
            .next()
            .and_then(|p| u32::from_str_radix(p, 16).ok())
            .unwrap_or(0);
        info.device = parts
            .next()
            .and_then(|p| u32::from_str_radix(p, 16).ok())
            .unwrap_or(0);
        Ok(info)
    });
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(h: Handle, out: *mut MemoryV2) -> NvmlReturn {
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    let expected = (std::mem::size_of::<MemoryV2>() | (2 << 24)) as c_uint;
    // SAFETY: non-null caller struct; the version field is set by the caller.
    if unsafe { (*out).version } != expected {
        return ARGUMENT_VERSION_MISMATCH;
    }
    let v = target(h, |t| {
        let (total, reserved, used) = match t {
            Target::Gpu(d) => (
                d.memory_total.ok_or(NOT_SUPPORTED)?,
                d.memory_reserved,
                d.memory_used,
            ),
            Target::Mig(m) => (m.memory_total.ok_or(NOT_SUPPORTED)?, 0, m.memory_used),
        };
        Ok(MemoryV2 {
            version: expected,
            total,
            reserved,
            used,
            free: total.saturating_sub(reserved).saturating_sub(used),
        })
    });
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    h: Handle,
    out: *mut Utilization,
) -> NvmlReturn {
    let v = gpu(h, |d| {
        Some(Utilization {
            gpu: d.utilization_gpu?,
            memory: d.utilization_memory?,
        })
    });
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    h: Handle,
    sensor: c_uint,
    out: *mut c_uint,
) -> NvmlReturn {
    let v = if sensor == 0 {
        gpu(h, |d| d.temperature)
    } else {
        Err(INVALID_ARGUMENT)
    };
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(h: Handle, out: *mut c_uint) -> NvmlReturn {
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, gpu(h, |d| d.power_mw)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    h: Handle,
    out: *mut c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, gpu(h, |d| d.power_limit_mw)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    h: Handle,
    clock: c_uint,
    out: *mut c_uint,
) -> NvmlReturn {
    let v = match clock {
        0 => gpu(h, |d| d.clock_graphics_mhz),
        1 => gpu(h, |d| d.clock_sm_mhz),
        2 => gpu(h, |d| d.clock_memory_mhz),
        _ => Err(INVALID_ARGUMENT),
    };
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    h: Handle,
    clock: c_uint,
    out: *mut c_uint,
) -> NvmlReturn {
    let v = if clock == 1 {
        gpu(h, |d| d.max_clock_sm_mhz)
    } else {
        gpu(h, |_| None)
    };
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNumFans(h: Handle, out: *mut c_uint) -> NvmlReturn {
    let v = gpu(h, |d| {
        d.fans.as_ref().and_then(|f| c_uint::try_from(f.len()).ok())
    });
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed_v2(
    h: Handle,
    fan: c_uint,
    out: *mut c_uint,
) -> NvmlReturn {
    let v = gpu(h, |d| d.fans.as_ref().map(|f| f.get(fan as usize).copied()))
        .and_then(|speed| speed.ok_or(INVALID_ARGUMENT));
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    h: Handle,
    out: *mut c_ulonglong,
) -> NvmlReturn {
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, gpu(h, |d| d.throttle_reasons)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    h: Handle,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    let v = gpu(h, |d| d.ecc_enabled.map(c_uint::from));
    // SAFETY: forwarded caller pointers.
    match unsafe { put(current, v) } {
        SUCCESS => unsafe { put(pending, gpu(h, |d| d.ecc_enabled.map(c_uint::from))) },
        other => other,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    h: Handle,
    error_type: c_uint,
    counter: c_uint,
    out: *mut c_ulonglong,
) -> NvmlReturn {
    let v = match (error_type, counter) {
        (0, 0 | 1) => gpu(h, |d| d.ecc_enabled.filter(|on| *on).and(d.ecc_corrected)),
        (1, 0 | 1) => gpu(h, |d| d.ecc_enabled.filter(|on| *on).and(d.ecc_uncorrected)),
        _ => Err(INVALID_ARGUMENT),
    };
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    h: Handle,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    let v = gpu(h, |d| d.mig_enabled.map(c_uint::from));
    // SAFETY: forwarded caller pointers.
    match unsafe { put(current, v) } {
        SUCCESS => unsafe { put(pending, gpu(h, |d| d.mig_enabled.map(c_uint::from))) },
        other => other,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(h: Handle, out: *mut c_uint) -> NvmlReturn {
    // An A100 has 7 MIG slots; the fixture fills the first ones.
    let v = gpu(h, |d| d.mig_enabled.map(|_| 7));
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    h: Handle,
    index: c_uint,
    out: *mut Handle,
) -> NvmlReturn {
    let v = target(h, |t| match t {
        Target::Gpu(d) if d.mig_enabled == Some(true) => {
            if (index as usize) < d.mig_devices.len() {
                let (device, _) = decode(h).ok_or(INVALID_ARGUMENT)?;
                Ok(handle(device, Some(index as usize)))
            } else if index < 7 {
                Err(NOT_FOUND)
            } else {
                Err(INVALID_ARGUMENT)
            }
        }
        _ => Err(NOT_SUPPORTED),
    });
    // SAFETY: forwarded caller pointer.
    unsafe { put(out, v) }
}

/// Writes every listed process's declared cgroup under the fixture's `proc_root`, before
/// the listing that names the process answers.
fn publish_cgroups(state: &State) {
    let Some(root) = &state.fixture.proc_root else {
        return;
    };
    for p in state.fixture.devices.iter().flat_map(device_processes) {
        let Some(text) = &p.cgroup else {
            continue;
        };
        let dir = root.join(p.pid.to_string());
        if let Err(e) =
            std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join("cgroup"), text))
        {
            eprintln!("fake-nvml: cannot write {}/cgroup: {e}", dir.display());
        }
    }
}

unsafe fn processes(
    h: Handle,
    graphics: bool,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    if count.is_null() {
        return INVALID_ARGUMENT;
    }
    let _ = with_state(|s| {
        publish_cgroups(s);
        Ok(())
    });
    let list = gpu(h, |d| {
        Some(
            device_processes(d)
                .iter()
                .filter(|p| p.graphics == graphics)
                .map(|p| ProcessInfo {
                    pid: p.pid,
                    used_gpu_memory: p.used_memory.unwrap_or(VALUE_NOT_AVAILABLE),
                    gpu_instance_id: p.gpu_instance_id.unwrap_or(NO_INSTANCE),
                    compute_instance_id: p.gpu_instance_id.map_or(NO_INSTANCE, |_| 0),
                })
                .collect::<Vec<_>>(),
        )
    });
    let list = match list {
        Ok(l) => l,
        Err(c) => return c,
    };
    let Ok(n) = c_uint::try_from(list.len()) else {
        return UNKNOWN;
    };
    // SAFETY: count is non-null; infos holds *count entries when non-null (NVML contract).
    unsafe {
        if infos.is_null() || *count < n {
            let empty_query = *count == 0 && n == 0;
            *count = n;
            return if empty_query {
                SUCCESS
            } else {
                INSUFFICIENT_SIZE
            };
        }
        std::ptr::copy_nonoverlapping(list.as_ptr(), infos, list.len());
        *count = n;
    }
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    h: Handle,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    // SAFETY: forwarded caller pointers.
    unsafe { processes(h, false, count, infos) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    h: Handle,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    // SAFETY: forwarded caller pointers.
    unsafe { processes(h, true, count, infos) }
}
