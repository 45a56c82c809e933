//! One sampling round through the real nvml-wrapper path against the fake NVML library:
//! 8 GPUs and 200 processes. CPU per second of sampling at the default rates is
//! `metrics_only` + (`with_processes` - `metrics_only`) / 2 + host, per second.
#![allow(clippy::unwrap_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::fmt::Write;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use gpuboard::clock::Timestamp;
use gpuboard::telemetry::nvml::NvmlBackend;
use gpuboard::telemetry::{HostSource, SamplerConfig, SamplerCore, SysinfoHost};

fn fixture() -> String {
    let mut text = String::from("driver_version = \"550.54.15\"\n");
    let mut pid = 10_000;
    for gpu in 0..8 {
        write!(
            text,
            "[[devices]]\nname = \"NVIDIA H100 80GB HBM3\"\nuuid = \"GPU-bench-{gpu}\"\n\
             pci_bus_id = \"00000000:{gpu:02x}:00.0\"\nmemory_total = 85899345920\n\
             memory_reserved = 536870912\nmemory_used = 21474836480\nutilization_gpu = 80\n\
             utilization_memory = 40\ntemperature = 60\npower_mw = 500000\npower_limit_mw = 700000\n\
             clock_graphics_mhz = 1980\nclock_sm_mhz = 1980\nclock_memory_mhz = 2619\n\
             max_clock_sm_mhz = 1980\nthrottle_reasons = 0\necc_enabled = true\n\
             ecc_corrected = 0\necc_uncorrected = 0\nmig_enabled = false\n"
        )
        .unwrap();
        for _ in 0..25 {
            write!(
                text,
                "[[devices.processes]]\npid = {pid}\nused_memory = 858993459\nname = \"worker-{pid}\"\n"
            )
            .unwrap();
            pid += 1;
        }
    }
    text
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.toml");
    std::fs::write(&path, fixture()).unwrap();
    // SAFETY: set before any thread of this benchmark reads the environment.
    unsafe { std::env::set_var("GPUBOARD_FAKE_NVML_FIXTURE", &path) };
    let backend = NvmlBackend::open(Some(common::fake_nvml_library()));
    assert!(gpuboard::telemetry::TelemetryBackend::status(&backend).is_ready());
    let config = SamplerConfig {
        process_interval: Duration::from_secs(2),
        ..SamplerConfig::default()
    };
    let mut core = SamplerCore::new(Box::new(backend), None, config);
    let mut t = 0u64;
    let snap = core.round(Timestamp(0));
    assert_eq!(snap.devices.len(), 8);
    assert_eq!(
        snap.devices
            .iter()
            .map(|d| d.processes.len())
            .sum::<usize>(),
        200
    );

    let mut group = c.benchmark_group("sampling_round_8gpu_200proc");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(4));
    group.bench_function("with_processes", |b| {
        b.iter(|| {
            t += 2;
            core.round(Timestamp(0).plus_secs(t))
        });
    });
    group.bench_function("metrics_only", |b| {
        b.iter(|| {
            // 1 ms steps never reach the 2 s process interval within one sample.
            t += 1;
            core.round(Timestamp(0).plus_secs(1_000_000).plus_millis(t))
        });
    });
    group.finish();

    let mut host = SysinfoHost::new();
    c.bench_function("host_sample", |b| b.iter(|| host.sample()));
}

criterion_group!(benches, bench);
criterion_main!(benches);
