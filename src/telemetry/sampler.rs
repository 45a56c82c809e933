//! The background sampler: one std thread owns the backend, reads static facts once,
//! metrics every `metrics_interval`, process lists at most every `process_interval`,
//! the host at an adaptive pace (see `SamplerConfig::host_interval_max`), and hands each
//! complete snapshot to a sink. Nothing else ever waits on NVML. Without any device the
//! thread sleeps until the host is due, so an idle GPU-less endpoint wakes a few times a
//! minute, not every second.

use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::clock::{Clock, SystemClock, Timestamp};

use super::history::{DEFAULT_HISTORY_LEN, DeviceHistory, History};
use super::host::{HostSample, HostSource, SysinfoHost};
use super::{
    DeviceError, DeviceMetrics, DeviceReading, DeviceState, TelemetryBackend, TelemetrySnapshot,
};

/// Where snapshots go. A channel sender fits: `Box::new(move |s| { let _ = tx.send(s); })`.
pub type Sink = Box<dyn FnMut(TelemetrySnapshot) + Send>;

/// Sampling rates and sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SamplerConfig {
    /// Between metric rounds (default 1 s).
    pub metrics_interval: Duration,
    /// Least time between process listings, NVML's costly call (default 2 s).
    pub process_interval: Duration,
    /// Points kept per metric for sparklines (default 120).
    pub history_len: usize,
    /// The longest time between two host readings (default 15 s). The host is read every
    /// `metrics_interval` while its figures move; each reading that did not move them
    /// (`HostSample::moved_from`) doubles the wait, up to this. Why 15 s: the endpoint
    /// shows new host figures to consoles at most once a minute (`live::HOST_REFRESH_MS`)
    /// and only once they moved, so a reading up to 15 s old costs the console nothing
    /// it would see, and the CPU percent is then the average since the last reading. A
    /// host that starts moving is followed every `metrics_interval` again from the next
    /// reading. Stale detection does not depend on it (that is the watch's heartbeats).
    pub host_interval_max: Duration,
    /// How long `Sampler::stop` waits for a round stuck in the driver before leaving the
    /// thread behind (default 2 s).
    pub stop_timeout: Duration,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            metrics_interval: Duration::from_secs(1),
            process_interval: Duration::from_secs(2),
            history_len: DEFAULT_HISTORY_LEN,
            host_interval_max: Duration::from_secs(15),
            stop_timeout: Duration::from_secs(2),
        }
    }
}

#[derive(Debug)]
struct Slot {
    telemetry: DeviceReading,
    info_read: bool,
}

/// One sampling round at a time, with the time given: the thread runs this, tests drive
/// it directly.
pub struct SamplerCore {
    backend: Box<dyn TelemetryBackend>,
    host: Option<Box<dyn HostSource>>,
    config: SamplerConfig,
    slots: Vec<Slot>,
    last_processes: Option<Timestamp>,
    host_cpu_history: History,
    host_pace: HostPace,
}

/// When the host is read next, and the last reading (kept between readings).
#[derive(Debug, Default)]
struct HostPace {
    last: Option<HostSample>,
    read_at: Option<Timestamp>,
    every: Duration,
}

impl HostPace {
    fn due(&self, now: Timestamp) -> bool {
        // A reading without a CPU percent (the first has nothing to compare with) is
        // followed at once, as the next round comes.
        if self.last.as_ref().is_some_and(|h| h.cpu_percent.is_none()) {
            return true;
        }
        match self.read_at {
            None => true,
            // A clock that went backwards makes the reading due rather than stuck.
            Some(at) if now < at => true,
            Some(at) => Duration::from_millis(now.millis_since(at)) >= self.every,
        }
    }

    /// Notes a reading taken at `now`: the wait resets to `min` when the figures moved
    /// (or on the first), else doubles up to `max`.
    fn read(&mut self, now: Timestamp, sample: Option<HostSample>, min: Duration, max: Duration) {
        let moved = match (&self.last, &sample) {
            (Some(a), Some(b)) => b.moved_from(a),
            _ => true,
        };
        self.every = if moved {
            min
        } else {
            (self.every * 2).clamp(min, max.max(min))
        };
        self.read_at = Some(now);
        self.last = sample;
    }

    /// Time from `now` until the next reading is due.
    fn wait(&self, now: Timestamp) -> Duration {
        match self.read_at {
            Some(at) if now >= at => self
                .every
                .saturating_sub(Duration::from_millis(now.millis_since(at))),
            _ => Duration::ZERO,
        }
    }
}

impl SamplerCore {
    /// A sampler over `backend`, with `host` read beside it when given.
    pub fn new(
        backend: Box<dyn TelemetryBackend>,
        host: Option<Box<dyn HostSource>>,
        config: SamplerConfig,
    ) -> SamplerCore {
        let host_cpu_history = History::new(config.history_len);
        SamplerCore {
            backend,
            host,
            config,
            slots: Vec::new(),
            last_processes: None,
            host_cpu_history,
            host_pace: HostPace::default(),
        }
    }

    /// How long the thread may wait after a round taken at `now`: `metrics_interval` while
    /// there are devices (lost ones included), else until the host is due (NVML's status
    /// is asked again then too, so a driver loaded later is noticed within
    /// `host_interval_max`).
    pub fn next_round_in(&self, now: Timestamp) -> Duration {
        let every = self.config.metrics_interval;
        if !self.slots.is_empty() || self.host.is_none() {
            return every;
        }
        self.host_pace.wait(now).max(every)
    }

    fn processes_due(&self, now: Timestamp) -> bool {
        match self.last_processes {
            None => true,
            // A clock that went backwards makes the listing due rather than stuck.
            Some(last) if now < last => true,
            Some(last) => {
                Duration::from_millis(now.millis_since(last)) >= self.config.process_interval
            }
        }
    }

    /// Reads everything that is due at `now` and returns the complete picture.
    pub fn round(&mut self, now: Timestamp) -> TelemetrySnapshot {
        let status = self.backend.status();
        let known = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
        // If the count itself cannot be read, keep asking the devices we know.
        let count = if status.is_ready() {
            self.backend.device_count().unwrap_or(known)
        } else {
            0
        };
        let processes_due = self.processes_due(now);
        let now_ms = now.0;
        for index in 0..count.max(known) {
            if index >= known {
                self.slots.push(Slot {
                    telemetry: DeviceReading {
                        index,
                        history: DeviceHistory::new(self.config.history_len),
                        ..DeviceReading::default()
                    },
                    info_read: false,
                });
            }
            let backend = &mut self.backend;
            let Some(slot) = self.slots.get_mut(index as usize) else {
                continue;
            };
            if index >= count {
                mark_lost(slot, now_ms);
                continue;
            }
            sample_device(backend.as_mut(), slot, index, processes_due, now_ms);
        }
        if processes_due {
            self.last_processes = Some(now);
        }
        let host = match self.host.as_mut() {
            Some(source) if self.host_pace.due(now) => {
                let sample = source.sample();
                self.host_cpu_history.push(
                    sample
                        .as_ref()
                        .and_then(|h| h.cpu_percent)
                        .map(|p| p.round().clamp(0.0, 100.0) as u64),
                );
                let (min, max) = (self.config.metrics_interval, self.config.host_interval_max);
                self.host_pace.read(now, sample.clone(), min, max);
                sample
            }
            Some(_) => self.host_pace.last.clone(),
            None => None,
        };
        TelemetrySnapshot {
            fetched_unix_ms: now_ms,
            backend: status,
            devices: self.slots.iter().map(|s| s.telemetry.clone()).collect(),
            host,
            host_cpu_history: self.host_cpu_history.clone(),
        }
    }
}

fn mark_lost(slot: &mut Slot, now_ms: u64) {
    let t = &mut slot.telemetry;
    if !t.is_lost() {
        t.state = DeviceState::Lost {
            since_unix_ms: now_ms,
        };
    }
    // Nothing stale that could pass for a live reading; static info stays to name the board.
    t.metrics = DeviceMetrics::default();
    t.processes.clear();
    t.history.record(&t.metrics);
    slot.info_read = false;
}

fn sample_device(
    backend: &mut dyn TelemetryBackend,
    slot: &mut Slot,
    index: u32,
    processes_due: bool,
    now_ms: u64,
) {
    if !slot.info_read {
        match backend.device_info(index) {
            Ok(info) => {
                slot.telemetry.info = info;
                slot.info_read = true;
            }
            Err(DeviceError::Lost | DeviceError::NoSuchDevice(_)) => {
                return mark_lost(slot, now_ms);
            }
            // Try again next round; metrics may still come.
            Err(DeviceError::Other(_)) => {}
        }
    }
    match backend.metrics(index) {
        Ok(metrics) => {
            slot.telemetry.state = DeviceState::Ok;
            slot.telemetry.metrics = metrics;
        }
        Err(DeviceError::Lost | DeviceError::NoSuchDevice(_)) => return mark_lost(slot, now_ms),
        Err(DeviceError::Other(_)) => slot.telemetry.metrics = DeviceMetrics::default(),
    }
    slot.telemetry.history.record(&slot.telemetry.metrics);
    if processes_due {
        match backend.processes(index) {
            Ok(processes) => {
                slot.telemetry.processes = processes;
                slot.telemetry.processes_fetched_unix_ms = Some(now_ms);
                slot.telemetry.processes_error = None;
            }
            Err(DeviceError::Lost | DeviceError::NoSuchDevice(_)) => mark_lost(slot, now_ms),
            Err(DeviceError::Other(e)) => slot.telemetry.processes_error = Some(e),
        }
    }
}

/// The running sampler thread. Dropping it stops the thread too.
pub struct Sampler {
    stop: Option<mpsc::Sender<()>>,
    done: mpsc::Receiver<()>,
    thread: Option<JoinHandle<()>>,
    stop_timeout: Duration,
}

impl Sampler {
    /// Starts sampling `backend` and this host at the configured rates with the system
    /// clock, pushing every snapshot into `sink`.
    pub fn start(
        backend: Box<dyn TelemetryBackend>,
        config: SamplerConfig,
        sink: Sink,
    ) -> std::io::Result<Sampler> {
        let core = SamplerCore::new(backend, Some(Box::new(SysinfoHost::new())), config);
        Sampler::spawn(core, Arc::new(SystemClock), sink)
    }

    /// Runs `core` on its own thread with `clock` giving the round times.
    pub fn spawn(
        mut core: SamplerCore,
        clock: Arc<dyn Clock>,
        mut sink: Sink,
    ) -> std::io::Result<Sampler> {
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let stop_timeout = core.config.stop_timeout;
        let thread = std::thread::Builder::new()
            .name("gpuboard-telemetry".to_string())
            .spawn(move || {
                loop {
                    let started = Instant::now();
                    let now = clock.now();
                    sink(core.round(now));
                    let wait = core.next_round_in(now).saturating_sub(started.elapsed());
                    match stop_rx.recv_timeout(wait) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                let _ = done_tx.send(());
            })?;
        Ok(Sampler {
            stop: Some(stop_tx),
            done: done_rx,
            thread: Some(thread),
            stop_timeout,
        })
    }

    /// Stops the thread. Returns false when a round stuck in the driver did not finish
    /// within the stop timeout: the thread is then left to end on its own.
    pub fn stop(mut self) -> bool {
        self.shutdown()
    }

    fn shutdown(&mut self) -> bool {
        let Some(stop) = self.stop.take() else {
            return true;
        };
        let _ = stop.send(());
        match self.done.recv_timeout(self.stop_timeout) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                if let Some(thread) = self.thread.take() {
                    let _ = thread.join();
                }
                true
            }
            Err(RecvTimeoutError::Timeout) => false,
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::telemetry::fake::{FakeBackend, FakeGpu};
    use crate::telemetry::{
        BackendStatus, DeviceInfo, HostSample, MemoryInfo, ProcessSample, Unavailable,
    };
    use crate::units::Bytes;

    fn gpu(name: &str, util: u32) -> FakeGpu {
        FakeGpu {
            info: DeviceInfo {
                name: Some(name.to_string()),
                uuid: Some(format!("GPU-{name}")),
                ..DeviceInfo::default()
            },
            metrics: DeviceMetrics {
                utilization_gpu_percent: Some(util),
                memory: Some(MemoryInfo {
                    total: Bytes::gib(40),
                    reserved: Bytes::mib(300),
                    used: Bytes::gib(1),
                    free: Bytes::gib(39) - Bytes::mib(300),
                }),
                ..DeviceMetrics::default()
            },
            processes: vec![ProcessSample {
                pid: 100,
                used_memory: Some(Bytes::gib(1)),
                name: Some("python".into()),
                owner: None,
            }],
            lost: false,
        }
    }

    fn at(secs: u64) -> Timestamp {
        Timestamp(0).plus_secs(1_700_000_000 + secs)
    }

    struct FixedHost(u32);
    impl HostSource for FixedHost {
        fn sample(&mut self) -> Option<HostSample> {
            self.0 += 10;
            Some(HostSample {
                cpu_percent: Some(self.0 as f32),
                cpu_count: 2,
                memory_total: Bytes::gib(8),
                memory_used: Bytes::gib(2),
                memory_available: Bytes::gib(6),
                load: None,
            })
        }
    }

    fn core(fake: &FakeBackend) -> SamplerCore {
        SamplerCore::new(
            Box::new(fake.clone()),
            Some(Box::new(FixedHost(0))),
            SamplerConfig {
                history_len: 3,
                ..SamplerConfig::default()
            },
        )
    }

    #[test]
    fn static_once_metrics_every_round_processes_every_two_seconds() {
        let fake = FakeBackend::new(vec![gpu("a", 10), gpu("b", 20)]);
        let mut core = core(&fake);
        for s in 0..5 {
            core.round(at(s));
        }
        let calls = fake.calls();
        assert_eq!(calls.device_info, 2, "static info read once per device");
        assert_eq!(calls.metrics, 10);
        // t = 0, 2, 4
        assert_eq!(calls.processes, 6);
    }

    #[test]
    fn snapshot_carries_devices_host_and_bounded_history() {
        let fake = FakeBackend::new(vec![gpu("a", 10)]);
        let mut core = core(&fake);
        let mut last = None;
        for s in 0..5 {
            fake.update(|g| g[0].metrics.utilization_gpu_percent = Some(s as u32));
            last = Some(core.round(at(s)));
        }
        let snap = last.unwrap();
        assert_eq!(snap.fetched_unix_ms, (1_700_000_000 + 4) * 1000);
        assert!(snap.backend.is_ready());
        let dev = &snap.devices[0];
        assert_eq!(dev.info.name.as_deref(), Some("a"));
        assert_eq!(
            dev.history.utilization_percent.for_sparkline(),
            vec![2, 3, 4]
        );
        assert_eq!(dev.processes[0].pid, 100);
        assert_eq!(
            dev.processes_fetched_unix_ms,
            Some((1_700_000_000 + 4) * 1000)
        );
        assert_eq!(snap.host.unwrap().cpu_percent, Some(50.0));
        assert_eq!(snap.host_cpu_history.for_sparkline(), vec![30, 40, 50]);
    }

    #[test]
    fn a_lost_gpu_is_reported_lost_with_its_name_and_no_stale_numbers() {
        let fake = FakeBackend::new(vec![gpu("a", 10), gpu("b", 20)]);
        let mut core = core(&fake);
        core.round(at(0));
        fake.update(|g| g[1].lost = true);
        let snap = core.round(at(1));
        let b = &snap.devices[1];
        assert_eq!(
            b.state,
            DeviceState::Lost {
                since_unix_ms: (1_700_000_000 + 1) * 1000
            }
        );
        assert_eq!(b.info.name.as_deref(), Some("b"));
        assert_eq!(b.metrics, DeviceMetrics::default());
        assert!(b.processes.is_empty());
        assert_eq!(b.history.utilization_percent.latest(), None);
        assert!(!snap.devices[0].is_lost());
        // Still lost later: the first time it was seen lost is kept.
        let snap = core.round(at(2));
        assert!(matches!(
            snap.devices[1].state,
            DeviceState::Lost { since_unix_ms } if since_unix_ms == (1_700_000_000 + 1) * 1000
        ));
    }

    #[test]
    fn a_gpu_that_vanishes_from_the_count_is_lost_and_one_that_returns_is_ok() {
        let fake = FakeBackend::new(vec![gpu("a", 10), gpu("b", 20)]);
        let mut core = core(&fake);
        core.round(at(0));
        let mut removed = None;
        fake.update(|g| removed = g.pop());
        let snap = core.round(at(1));
        assert_eq!(snap.devices.len(), 2);
        assert!(snap.devices[1].is_lost());
        fake.update(|g| g.push(removed.take().unwrap()));
        let snap = core.round(at(2));
        assert_eq!(snap.devices[1].state, DeviceState::Ok);
        assert_eq!(snap.devices[1].metrics.utilization_gpu_percent, Some(20));
    }

    #[test]
    fn unavailable_backend_gives_zero_gpus_and_the_reason() {
        let fake = FakeBackend::unavailable(Unavailable::DriverNotLoaded);
        let mut core = core(&fake);
        let snap = core.round(at(0));
        assert!(snap.devices.is_empty());
        assert!(matches!(
            snap.backend,
            BackendStatus::Unavailable {
                reason: Unavailable::DriverNotLoaded,
                ..
            }
        ));
        assert!(snap.host.is_some());
    }

    #[test]
    fn a_clock_going_backwards_does_not_stall_process_listing() {
        let fake = FakeBackend::new(vec![gpu("a", 10)]);
        let mut core = core(&fake);
        core.round(at(10));
        core.round(at(5));
        assert_eq!(fake.calls().processes, 2);
    }

    /// A host whose CPU percent the test sets, counting its readings.
    #[derive(Clone, Default)]
    struct SteadyHost(Arc<std::sync::Mutex<(f32, u32)>>);
    impl HostSource for SteadyHost {
        fn sample(&mut self) -> Option<HostSample> {
            let mut s = self.0.lock().unwrap();
            s.1 += 1;
            Some(HostSample {
                cpu_percent: Some(s.0),
                cpu_count: 2,
                memory_total: Bytes::gib(8),
                memory_used: Bytes::gib(2),
                memory_available: Bytes::gib(6),
                load: None,
            })
        }
    }

    #[test]
    fn a_steady_host_is_read_less_often_and_a_moving_one_every_round_again() {
        let fake = FakeBackend::unavailable(Unavailable::DriverNotLoaded);
        let host = SteadyHost::default();
        let mut core = SamplerCore::new(
            Box::new(fake.clone()),
            Some(Box::new(host.clone())),
            SamplerConfig::default(),
        );
        let mut read_at = Vec::new();
        for t in 0..60 {
            let before = host.0.lock().unwrap().1;
            let snap = core.round(at(t));
            assert!(
                snap.host.is_some(),
                "the last reading is kept between readings"
            );
            if host.0.lock().unwrap().1 > before {
                read_at.push(t);
            }
        }
        // 1 s, then doubling while nothing moves, up to 15 s.
        assert_eq!(read_at, vec![0, 1, 3, 7, 15, 30, 45]);
        assert_eq!(core.next_round_in(at(45)), Duration::from_secs(15));
        assert_eq!(core.next_round_in(at(50)), Duration::from_secs(10));
        // The CPU moves: read again at the next due time, then every second.
        host.0.lock().unwrap().0 = 50.0;
        core.round(at(60));
        assert_eq!(core.next_round_in(at(60)), Duration::from_secs(1));
        let before = host.0.lock().unwrap().1;
        core.round(at(61));
        assert_eq!(host.0.lock().unwrap().1, before + 1);
    }

    #[test]
    fn devices_keep_the_metrics_pace_while_the_host_slows() {
        let fake = FakeBackend::new(vec![gpu("a", 10)]);
        let host = SteadyHost::default();
        let mut core = SamplerCore::new(
            Box::new(fake.clone()),
            Some(Box::new(host.clone())),
            SamplerConfig::default(),
        );
        for t in 0..20 {
            core.round(at(t));
            assert_eq!(core.next_round_in(at(t)), Duration::from_secs(1));
        }
        assert_eq!(fake.calls().metrics, 20, "a metric round every second");
        assert_eq!(host.0.lock().unwrap().1, 5, "the host at 0, 1, 3, 7, 15");
    }

    #[test]
    fn thread_delivers_snapshots_and_stops() {
        let fake = FakeBackend::new(vec![gpu("a", 10)]);
        let (tx, rx) = mpsc::channel();
        let core = SamplerCore::new(
            Box::new(fake.clone()),
            None,
            SamplerConfig {
                metrics_interval: Duration::from_millis(1),
                ..SamplerConfig::default()
            },
        );
        let sampler = Sampler::spawn(
            core,
            Arc::new(SystemClock),
            Box::new(move |s| {
                let _ = tx.send(s);
            }),
        )
        .unwrap();
        let first = rx.recv().unwrap();
        let second = rx.recv().unwrap();
        assert_eq!(first.devices.len(), 1);
        assert!(second.fetched_unix_ms >= first.fetched_unix_ms);
        assert!(sampler.stop());
        // The thread is gone: the channel closes once buffered snapshots are drained.
        while rx.recv().is_ok() {}
    }
}
