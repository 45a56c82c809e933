//! The embedded source: the scheduler in-process, over this machine's GPUs.
//!
//! This build has no GPU discovery yet, so it serves zero local GPUs and says so, with
//! how to see the demo. Its state lives in memory only; when the endpoint's persistent
//! engine lands, this source wraps that instead.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::Value;

use super::{Action, Failure, Outcome, Source, apply, plan_on};
use crate::clock::Clock;
use crate::placement::{Allocation, NodeSpec, Policy};
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::snapshot::Snapshot;

/// Why there are no GPUs, shown in the console.
pub const NO_GPU_NOTE: &str = "no GPUs on this machine: this build has no GPU discovery (NVML) yet, so the embedded scheduler serves none; run `gpuboard --demo` to see a demo fleet";

/// The in-process scheduler over local nodes.
pub struct Embedded {
    name: String,
    note: Option<String>,
    sched: Arc<Mutex<Scheduler>>,
    clock: Arc<dyn Clock>,
}

impl Embedded {
    /// A source over these nodes (none when no GPU was found: then `note` says why).
    pub fn new(
        name: &str,
        nodes: Vec<NodeSpec>,
        note: Option<String>,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Embedded> {
        let config = SchedulerConfig {
            name: name.to_string(),
            kind: "embedded".to_string(),
            policy: Policy::Binpack,
            ..SchedulerConfig::default()
        };
        let sched = Scheduler::new(config, nodes)?;
        Ok(Embedded {
            name: name.to_string(),
            note,
            sched: Arc::new(Mutex::new(sched)),
            clock,
        })
    }

    /// This machine: no discovery yet, so no GPUs and the note that says so.
    pub fn local(clock: Arc<dyn Clock>) -> anyhow::Result<Embedded> {
        let host = hostname();
        Embedded::new(&host, Vec::new(), Some(NO_GPU_NOTE.to_string()), clock)
    }
}

/// The host name, or `local` when it cannot be read.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "local".to_string())
}

/// Whether a local process is still running.
pub fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

impl Source for Embedded {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> &str {
        "embedded"
    }
    fn can_act(&self) -> bool {
        true
    }
    fn note(&self) -> Option<String> {
        self.note.clone()
    }
    fn fetch(&self) -> BoxFuture<'static, Result<Snapshot, Failure>> {
        let sched = Arc::clone(&self.sched);
        let now = self.clock.now();
        let note = self.note.clone();
        Box::pin(async move {
            let mut s = sched
                .lock()
                .map_err(|_| Failure::Refused("scheduler state poisoned".into()))?;
            s.tick(now, &pid_alive);
            let mut snap = s.snapshot(now);
            snap.endpoint.telemetry_note = note;
            Ok(snap)
        })
    }
    fn plan(&self, request: Value) -> BoxFuture<'static, Result<Allocation, Failure>> {
        let sched = Arc::clone(&self.sched);
        Box::pin(async move {
            let s = sched
                .lock()
                .map_err(|_| Failure::Refused("scheduler state poisoned".into()))?;
            plan_on(&s, &request)
        })
    }
    fn act(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>> {
        let sched = Arc::clone(&self.sched);
        let now = self.clock.now();
        Box::pin(async move {
            let mut s = sched
                .lock()
                .map_err(|_| Failure::Refused("scheduler state poisoned".into()))?;
            let out = apply(&mut s, &action, "console", now);
            // In memory only: nothing to persist the journal to yet.
            s.take_changes();
            out
        })
    }
}
