//! An in-memory backend driven by plain data, for tests and demos. Clones share one
//! state, so a test keeps a handle and changes the "hardware" between sampling rounds.

use std::sync::{Arc, Mutex, MutexGuard};

use super::{
    BackendStatus, DeviceError, DeviceInfo, DeviceMetrics, ProcessSample, TelemetryBackend,
    Unavailable,
};

/// One simulated GPU.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FakeGpu {
    /// Static facts returned by `device_info`.
    pub info: DeviceInfo,
    /// Returned by `metrics` as is.
    pub metrics: DeviceMetrics,
    /// Returned by `processes` as is.
    pub processes: Vec<ProcessSample>,
    /// When true every call for this device answers `DeviceError::Lost`.
    pub lost: bool,
}

/// How many times each call was made, so tests can check what the sampler asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FakeCalls {
    /// `device_count` calls.
    pub device_count: u32,
    /// `device_info` calls.
    pub device_info: u32,
    /// `metrics` calls.
    pub metrics: u32,
    /// `processes` calls.
    pub processes: u32,
}

#[derive(Debug)]
struct FakeState {
    unavailable: Option<Unavailable>,
    gpus: Vec<FakeGpu>,
    calls: FakeCalls,
}

/// The in-memory backend.
#[derive(Clone, Debug)]
pub struct FakeBackend {
    state: Arc<Mutex<FakeState>>,
}

impl FakeBackend {
    /// A backend that sees these GPUs.
    pub fn new(gpus: Vec<FakeGpu>) -> FakeBackend {
        FakeBackend {
            state: Arc::new(Mutex::new(FakeState {
                unavailable: None,
                gpus,
                calls: FakeCalls::default(),
            })),
        }
    }

    /// A backend that sees no GPU, for this reason.
    pub fn unavailable(reason: Unavailable) -> FakeBackend {
        let backend = FakeBackend::new(Vec::new());
        backend.lock().unavailable = Some(reason);
        backend
    }

    /// Changes the simulated GPUs (plug, unplug, lose, load) between rounds.
    pub fn update(&self, change: impl FnOnce(&mut Vec<FakeGpu>)) {
        change(&mut self.lock().gpus);
    }

    /// Calls made so far.
    pub fn calls(&self) -> FakeCalls {
        self.lock().calls
    }

    fn lock(&self) -> MutexGuard<'_, FakeState> {
        // A test that panicked while holding the lock left plain data behind: still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn with_gpu<T>(
        &self,
        index: u32,
        count: impl FnOnce(&mut FakeCalls),
        read: impl FnOnce(&FakeGpu) -> T,
    ) -> Result<T, DeviceError> {
        let mut state = self.lock();
        count(&mut state.calls);
        let gpu = state
            .gpus
            .get(index as usize)
            .ok_or(DeviceError::NoSuchDevice(index))?;
        if gpu.lost {
            return Err(DeviceError::Lost);
        }
        Ok(read(gpu))
    }
}

impl TelemetryBackend for FakeBackend {
    fn status(&self) -> BackendStatus {
        match &self.lock().unavailable {
            Some(reason) => BackendStatus::Unavailable {
                backend: "fake".to_string(),
                reason: reason.clone(),
            },
            None => BackendStatus::Ready {
                backend: "fake".to_string(),
                library: None,
                driver_version: None,
                nvml_version: None,
                cuda_version: None,
            },
        }
    }

    fn device_count(&mut self) -> Result<u32, DeviceError> {
        let mut state = self.lock();
        state.calls.device_count += 1;
        if state.unavailable.is_some() {
            return Ok(0);
        }
        u32::try_from(state.gpus.len()).map_err(|_| DeviceError::Other("too many GPUs".into()))
    }

    fn device_info(&mut self, index: u32) -> Result<DeviceInfo, DeviceError> {
        self.with_gpu(index, |c| c.device_info += 1, |g| g.info.clone())
    }

    fn metrics(&mut self, index: u32) -> Result<DeviceMetrics, DeviceError> {
        self.with_gpu(index, |c| c.metrics += 1, |g| g.metrics.clone())
    }

    fn processes(&mut self, index: u32) -> Result<Vec<ProcessSample>, DeviceError> {
        self.with_gpu(index, |c| c.processes += 1, |g| g.processes.clone())
    }
}
