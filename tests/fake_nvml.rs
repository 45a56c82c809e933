//! The real NVML code path (nvml-wrapper, `NvmlBackend`, the sampler, the binary) against
//! the fake NVML library built from `tests/fake-nvml`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::match_wildcard_for_single_variants
)]

use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use gpuboard::snapshot::ProcessOwner;
use gpuboard::telemetry::nvml::NvmlBackend;
use gpuboard::telemetry::{
    BackendStatus, DeviceError, DeviceState, SamplerConfig, SamplerCore, TelemetryBackend,
    Unavailable,
};
use gpuboard::units::Bytes;

/// The fake reads its fixture from the environment at `nvmlInit_v2`, and one library
/// instance serves the whole process: tests that load it in-process take turns.
static NVML: Mutex<()> = Mutex::new(());

fn open_with(fixture: &Path) -> (MutexGuard<'static, ()>, NvmlBackend) {
    let guard = NVML
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // SAFETY: every test of this binary that reads this variable holds the lock above;
    // nothing else in the process reads it.
    unsafe { std::env::set_var("GPUBOARD_FAKE_NVML_FIXTURE", fixture) };
    let backend = NvmlBackend::open(Some(common::fake_nvml_library()));
    (guard, backend)
}

fn write_fixture(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("fixture.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn every_field_through_the_real_wrapper() {
    let (_guard, mut nvml) = open_with(&common::fixture("mixed.toml"));
    match nvml.status() {
        BackendStatus::Ready {
            backend,
            library,
            driver_version,
            nvml_version,
            cuda_version,
        } => {
            assert_eq!(backend, "nvml");
            assert!(library.unwrap().ends_with("libfake_nvml.so"));
            assert_eq!(driver_version.as_deref(), Some("550.54.15"));
            assert_eq!(nvml_version.as_deref(), Some("12.550.54.15"));
            assert_eq!(cuda_version.as_deref(), Some("12.4"));
        }
        other => panic!("not ready: {other:?}"),
    }
    assert_eq!(nvml.device_count(), Ok(3));

    let info = nvml.device_info(0).unwrap();
    assert_eq!(info.name.as_deref(), Some("NVIDIA A100-SXM4-80GB"));
    assert_eq!(
        info.uuid.as_deref(),
        Some("GPU-a100a100-0000-0000-0000-000000000000")
    );
    assert_eq!(info.pci_bus_id.as_deref(), Some("00000000:07:00.0"));
    assert_eq!(info.max_sm_clock_mhz, Some(1410));
    assert_eq!(
        info.fan_count, None,
        "a board without fans has no fan count, not 0"
    );

    let m = nvml.metrics(0).unwrap();
    let mem = m.memory.unwrap();
    assert_eq!(mem.total, Bytes::gib(80));
    assert_eq!(mem.reserved, Bytes::mib(512));
    assert_eq!(mem.used, Bytes::gib(10));
    assert_eq!(mem.free, Bytes::gib(80) - Bytes::mib(512) - Bytes::gib(10));
    assert_eq!(m.utilization_gpu_percent, Some(35));
    assert_eq!(m.utilization_memory_percent, Some(20));
    assert_eq!(m.temperature_c, Some(41));
    assert_eq!(m.power_mw, Some(180_000));
    assert_eq!(m.power_limit_mw, Some(400_000));
    assert_eq!(m.clocks.graphics_mhz, Some(1410));
    assert_eq!(m.clocks.sm_mhz, Some(1410));
    assert_eq!(m.clocks.memory_mhz, Some(1593));
    assert_eq!(m.fan_percent, None);
    assert_eq!(m.throttle_reasons, Some(vec!["sw_power_cap".to_string()]));
    let ecc = m.ecc.unwrap();
    assert!(ecc.enabled);
    assert_eq!(ecc.volatile_corrected, Some(3));
    assert_eq!(ecc.volatile_uncorrected, Some(0));
    let mig = m.mig.unwrap();
    assert!(mig.enabled);
    assert_eq!(mig.devices.len(), 2);
    assert_eq!(
        mig.devices[0].uuid.as_deref(),
        Some("MIG-11111111-0000-0000-0000-000000000000")
    );
    assert_eq!(
        mig.devices[0].name.as_deref(),
        Some("NVIDIA A100-SXM4-80GB MIG 3g.40gb")
    );
    assert_eq!(mig.devices[0].memory.unwrap().total, Bytes::gib(40));
    assert_eq!(mig.devices[0].memory.unwrap().used, Bytes::gib(1));
    let procs = nvml.processes(0).unwrap();
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].pid, 4001);
    assert_eq!(procs[0].used_memory, Some(Bytes::gib(8)));
    assert_eq!(procs[0].name.as_deref(), Some("python3"));

    // The consumer card: fans, no ECC, MIG off, compute and graphics merged by pid.
    let m = nvml.metrics(1).unwrap();
    assert_eq!(nvml.device_info(1).unwrap().fan_count, Some(2));
    assert_eq!(m.fan_percent, Some(vec![55, 57]));
    assert_eq!(m.throttle_reasons, Some(vec![]));
    let ecc = m.ecc.unwrap();
    assert!(!ecc.enabled);
    assert_eq!(ecc.volatile_corrected, None);
    let mig = m.mig.unwrap();
    assert!(!mig.enabled);
    assert!(mig.devices.is_empty());
    let procs = nvml.processes(1).unwrap();
    let pids: Vec<u32> = procs.iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![5001, 5002]);
    assert_eq!(procs[1].name.as_deref(), Some("Xorg"));
}

#[test]
fn declared_cgroups_name_each_processs_owner_without_this_machines_proc() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proc");
    let fixture = write_fixture(
        dir.path(),
        &format!(
            r#"proc_root = "{}"

[[devices]]
name = "NVIDIA L4"
memory_total = 24152899584

[[devices.processes]]
pid = 1
used_memory = 1073741824
cgroup = "0::/kubepods/burstable/pod6b3e7a6f-1234-4a1b-9c2d-0e1f2a3b4c5d\n"

[[devices.processes]]
pid = 2
cgroup = "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n"

[[devices.processes]]
pid = 3
"#,
            root.display()
        ),
    );
    let (_guard, nvml) = open_with(&fixture);
    let mut nvml = nvml.with_owners_under(root);
    let owners: Vec<_> = nvml
        .processes(0)
        .unwrap()
        .into_iter()
        .map(|p| (p.pid, p.owner))
        .collect();
    assert_eq!(
        owners,
        vec![
            (
                1,
                Some(ProcessOwner::pod(
                    "6b3e7a6f-1234-4a1b-9c2d-0e1f2a3b4c5d",
                    None,
                    None
                ))
            ),
            (
                2,
                Some(ProcessOwner::SlurmJob {
                    job: 77,
                    step: Some("batch".into())
                })
            ),
            // Pid 3 declares nothing: no owner, even though pid 3 may run here.
            (3, None),
        ]
    );
    // Without an owner root, no owner is read at all (the lock above still held).
    drop(nvml);
    let mut plain = NvmlBackend::open(Some(common::fake_nvml_library()));
    assert!(
        plain
            .processes(0)
            .unwrap()
            .iter()
            .all(|p| p.owner.is_none())
    );
}

#[test]
fn not_supported_fields_are_absent_never_zero() {
    let (_guard, mut nvml) = open_with(&common::fixture("mixed.toml"));
    let info = nvml.device_info(2).unwrap();
    assert_eq!(info.name.as_deref(), Some("Tesla K80"));
    assert_eq!(info.pci_bus_id, None);
    assert_eq!(info.max_sm_clock_mhz, None);
    let m = nvml.metrics(2).unwrap();
    assert_eq!(m.memory.unwrap().total.0, 12_079_595_520);
    assert_eq!(m.utilization_gpu_percent, None);
    assert_eq!(m.utilization_memory_percent, None);
    assert_eq!(m.temperature_c, None);
    assert_eq!(m.power_mw, None);
    assert_eq!(m.power_limit_mw, None);
    assert_eq!(m.clocks.graphics_mhz, None);
    assert_eq!(m.clocks.sm_mhz, None);
    assert_eq!(m.clocks.memory_mhz, None);
    assert_eq!(m.fan_percent, None);
    assert_eq!(m.throttle_reasons, None);
    assert_eq!(m.ecc, None);
    assert_eq!(m.mig, None);
    let procs = nvml.processes(2).unwrap();
    assert_eq!(procs.len(), 1);
    assert_eq!(
        procs[0].used_memory, None,
        "unknown memory is absent, not 0"
    );
    // The JSON a client sees says null, not 0.
    let json = serde_json::to_value(&m).unwrap();
    assert!(json["temperature_c"].is_null());
    assert!(json["power_mw"].is_null());
}

fn at(secs: u64) -> gpuboard::clock::Timestamp {
    gpuboard::clock::Timestamp(0).plus_secs(1_800_000_000 + secs)
}

#[test]
fn a_gpu_that_falls_off_the_bus_is_reported_lost() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("xid79");
    let text = std::fs::read_to_string(common::fixture("lost.toml"))
        .unwrap()
        .replace("@MARKER@", marker.to_str().unwrap());
    let fixture = write_fixture(dir.path(), &text);
    let (_guard, nvml) = open_with(&fixture);
    let mut core = SamplerCore::new(Box::new(nvml), None, SamplerConfig::default());
    let snap = core.round(at(0));
    assert_eq!(snap.devices.len(), 2);
    assert!(snap.devices.iter().all(|d| d.state == DeviceState::Ok));
    assert_eq!(snap.devices[1].metrics.utilization_gpu_percent, Some(50));

    std::fs::write(&marker, "").unwrap();
    let snap = core.round(at(1));
    assert_eq!(snap.devices[0].state, DeviceState::Ok);
    assert_eq!(snap.devices[0].metrics.utilization_gpu_percent, Some(5));
    let lost = &snap.devices[1];
    assert!(lost.is_lost());
    assert_eq!(
        lost.info.uuid.as_deref(),
        Some("GPU-l4l4l4l4-0000-0000-0000-000000000002")
    );
    assert_eq!(lost.metrics.utilization_gpu_percent, None);
    assert_eq!(lost.metrics.memory, None);
}

#[test]
fn a_gpu_lost_after_some_calls() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = write_fixture(
        dir.path(),
        "[[devices]]\nname = \"NVIDIA T4\"\nmemory_total = 16106127360\nlost_after_calls = 40\n",
    );
    let (_guard, mut nvml) = open_with(&fixture);
    // One metrics read makes a dozen or so NVML calls: the first works, and some later
    // one finds the board gone for good.
    assert!(nvml.metrics(0).is_ok());
    let rounds = (0..100).position(|_| nvml.metrics(0) == Err(DeviceError::Lost));
    assert!(rounds.is_some(), "never lost");
    assert_eq!(nvml.metrics(0), Err(DeviceError::Lost));
    assert_eq!(nvml.processes(0), Err(DeviceError::Lost));
}

#[test]
fn start_up_failures_are_typed_reasons_with_zero_gpus() {
    let dir = tempfile::tempdir().unwrap();
    for (name, expected) in [
        ("driver_not_loaded", Unavailable::DriverNotLoaded),
        ("no_permission", Unavailable::NoPermission),
        ("version_mismatch", Unavailable::VersionMismatch),
    ] {
        let fixture = write_fixture(dir.path(), &format!("init_error = \"{name}\"\n"));
        let (_guard, mut nvml) = open_with(&fixture);
        match nvml.status() {
            BackendStatus::Unavailable { reason, .. } => assert_eq!(reason, expected),
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!(nvml.device_count(), Ok(0));
    }
}

fn doctor_json(ld_library_path: &Path, fixture: Option<&Path>) -> serde_json::Value {
    let mut cmd = Command::new(common::gpuboard());
    cmd.args(["doctor", "--json"])
        .env("LD_LIBRARY_PATH", ld_library_path)
        .env_remove("GPUBOARD_NVML_LIBRARY")
        .env_remove("GPUBOARD_FAKE_NVML_FIXTURE");
    if let Some(f) = fixture {
        cmd.env("GPUBOARD_FAKE_NVML_FIXTURE", f);
    }
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_binary_finds_the_fake_driver_through_ld_library_path() {
    let drivers = common::fake_driver_dir();
    let report = doctor_json(drivers.path(), Some(&common::fixture("mixed.toml")));
    assert_eq!(report["nvml"]["status"], "ready");
    assert_eq!(report["nvml"]["driver_version"], "550.54.15");
    assert!(
        report["nvml"]["library"]
            .as_str()
            .unwrap()
            .contains("libfake_nvml.so")
            || report["nvml"]["library"]
                .as_str()
                .unwrap()
                .contains("libnvidia-ml.so.1"),
        "{}",
        report["nvml"]
    );
    let devices = report["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 3);
    assert_eq!(devices[1]["name"], "NVIDIA GeForce RTX 4090");
    assert_eq!(devices[1]["memory_total_bytes"], 25_757_220_864u64);
    assert!(
        report["summary"][0]
            .as_str()
            .unwrap()
            .starts_with("3 GPU(s) usable")
    );

    // discover asks NVML for the visible GPUs when no --indexes is given.
    let out = Command::new(common::gpuboard())
        .args(["discover", "2"])
        .env("LD_LIBRARY_PATH", drivers.path())
        .env("GPUBOARD_FAKE_NVML_FIXTURE", common::fixture("mixed.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0,1");
}

#[test]
fn the_binary_explains_a_driver_that_is_not_loaded() {
    let drivers = common::fake_driver_dir();
    // The fake with no fixture behaves like a library whose kernel driver is absent.
    let report = doctor_json(drivers.path(), None);
    assert_eq!(report["nvml"]["status"], "unavailable");
    assert_eq!(report["nvml"]["reason"]["reason"], "driver_not_loaded");
    assert_eq!(report["devices"].as_array().unwrap().len(), 0);
}

#[test]
fn without_any_library_zero_gpus_the_reason_and_exit_zero() {
    let empty = tempfile::tempdir().unwrap();
    let report = doctor_json(empty.path(), None);
    assert_eq!(report["nvml"]["status"], "unavailable");
    assert_eq!(report["nvml"]["reason"]["reason"], "library_missing");
    assert_eq!(report["devices"].as_array().unwrap().len(), 0);
    assert!(
        report["summary"][0]
            .as_str()
            .unwrap()
            .starts_with("No GPU is seen")
    );
    // The people's version says the same in words.
    let out = Command::new(common::gpuboard())
        .arg("doctor")
        .env("LD_LIBRARY_PATH", empty.path())
        .env_remove("GPUBOARD_NVML_LIBRARY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("could not be loaded"), "{text}");
    assert!(text.contains("GPUs:           0"), "{text}");
}
