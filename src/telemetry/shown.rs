//! A round's devices as the screens show them: each figure at the precision it is shown
//! at (percent, MiB, W, °C, MHz), so a change no screen would show makes no new version for
//! the consoles watching an endpoint (`endpoint::live::LiveFeed::publish`). Of the
//! sparklines' samples only what the idle flag reads counts; the rest ride along with the
//! next change.

use crate::snapshot::{ProcessOwner, quiet_lately};
use crate::units::Bytes;

use super::{Clocks, DeviceInfo, DeviceReading, DeviceState, Ecc, MigState};

/// Whether two rounds' devices would show the same on every screen.
pub fn same_shown(a: &[DeviceReading], b: &[DeviceReading]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| Shown::of(a) == Shown::of(b))
}

/// A process as the screens show it: pid, memory used (MiB), name and owner.
type ShownProcess<'a> = (u32, Option<u64>, Option<&'a str>, Option<&'a ProcessOwner>);

/// One device's reading at the precision the screens show it.
#[derive(PartialEq)]
struct Shown<'a> {
    index: u32,
    info: &'a DeviceInfo,
    state: DeviceState,
    /// Total, reserved, used and free, MiB.
    memory: Option<[u64; 4]>,
    utilization_gpu: Option<u32>,
    utilization_memory: Option<u32>,
    temperature_c: Option<u32>,
    /// Watts.
    power: Option<u32>,
    /// Watts.
    power_limit: Option<u32>,
    clocks: Clocks,
    fans: Option<&'a [u32]>,
    throttle: Option<&'a [String]>,
    ecc: Option<Ecc>,
    mig: Option<&'a MigState>,
    /// Pid, memory used (MiB), name and owner of each process.
    processes: Vec<ShownProcess<'a>>,
    processes_error: Option<&'a str>,
    /// The newest samples are all zero (the idle flag reads this).
    quiet: bool,
}

impl<'a> Shown<'a> {
    fn of(r: &'a DeviceReading) -> Shown<'a> {
        let m = &r.metrics;
        Shown {
            index: r.index,
            info: &r.info,
            state: r.state,
            memory: m
                .memory
                .map(|x| [mib(x.total), mib(x.reserved), mib(x.used), mib(x.free)]),
            utilization_gpu: m.utilization_gpu_percent,
            utilization_memory: m.utilization_memory_percent,
            temperature_c: m.temperature_c,
            power: m.power_mw.map(watts),
            power_limit: m.power_limit_mw.map(watts),
            clocks: m.clocks,
            fans: m.fan_percent.as_deref(),
            throttle: m.throttle_reasons.as_deref(),
            ecc: m.ecc,
            mig: m.mig.as_ref(),
            processes: r
                .processes
                .iter()
                .map(|p| {
                    (
                        p.pid,
                        p.used_memory.map(mib),
                        p.name.as_deref(),
                        p.owner.as_ref(),
                    )
                })
                .collect(),
            processes_error: r.processes_error.as_deref(),
            quiet: quiet_lately(
                r.history
                    .utilization_percent
                    .values()
                    .map(Option::unwrap_or_default),
            ),
        }
    }
}

/// Bytes to the nearest MiB.
fn mib(b: Bytes) -> u64 {
    b.0.saturating_add(1 << 19) >> 20
}

/// Milliwatts to the nearest watt.
fn watts(mw: u32) -> u32 {
    mw.saturating_add(500) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::{DeviceHistory, DeviceMetrics, MemoryInfo, ProcessSample};

    fn reading(util: u32, used: Bytes, power_mw: u32) -> DeviceReading {
        let metrics = DeviceMetrics {
            memory: Some(MemoryInfo {
                total: Bytes::gib(80),
                reserved: Bytes::mib(512),
                used,
                free: Bytes::gib(80) - Bytes::mib(512) - used,
            }),
            utilization_gpu_percent: Some(util),
            temperature_c: Some(50),
            power_mw: Some(power_mw),
            ..DeviceMetrics::default()
        };
        let mut history = DeviceHistory::new(120);
        history.record(&metrics);
        DeviceReading {
            index: 0,
            metrics,
            processes: vec![ProcessSample {
                pid: 7,
                used_memory: Some(used),
                name: Some("train".to_string()),
                owner: None,
            }],
            history,
            ..DeviceReading::default()
        }
    }

    #[test]
    fn what_no_screen_shows_is_the_same() {
        let a = reading(40, Bytes::gib(10), 250_000);
        let mut b = reading(40, Bytes::gib(10) + Bytes(300_000), 250_400);
        // Another sample in the sparkline, the same figures.
        b.history.record(&b.metrics.clone());
        b.processes_fetched_unix_ms = Some(5);
        assert!(same_shown(std::slice::from_ref(&a), &[b]));
        // Any figure as shown moves: news.
        assert!(!same_shown(
            std::slice::from_ref(&a),
            &[reading(41, Bytes::gib(10), 250_000)]
        ));
        let more = reading(40, Bytes::gib(10) + Bytes::mib(1), 250_000);
        assert!(!same_shown(std::slice::from_ref(&a), &[more]));
        assert!(!same_shown(
            std::slice::from_ref(&a),
            &[reading(40, Bytes::gib(10), 251_000)]
        ));
        assert!(!same_shown(std::slice::from_ref(&a), &[]));
    }

    #[test]
    fn the_idle_flag_s_samples_count() {
        let mut a = reading(0, Bytes::gib(10), 60_000);
        a.history = DeviceHistory::new(120);
        a.history.utilization_percent.push(Some(3));
        let mut b = a.clone();
        // Zeros that do not yet fill the idle window leave the flag as it was...
        for _ in 0..29 {
            b.history.utilization_percent.push(Some(0));
        }
        assert!(same_shown(std::slice::from_ref(&a), &[b.clone()]));
        // ...the one that fills it turns it on.
        let mut c = b.clone();
        c.history.utilization_percent.push(Some(0));
        assert!(!same_shown(&[b], &[c]));
    }
}
