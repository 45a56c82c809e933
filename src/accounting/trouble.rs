//! What went wrong in a window: GPUs that went stale, unhealthy or cordoned, claims whose
//! processes used more memory than they reserved, claims that waited long and why,
//! projects backed off and for how long.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::story::{BackoffSpan, Story};
use super::usage::HOLD_MS;
use crate::clock::Timestamp;
use crate::history::sample::Tick;
use crate::ids::ClaimId;
use crate::placement::Health;
use crate::units::Bytes;
use crate::wire::history::GpuRef;

/// What a device went through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// No telemetry for longer than a sample speaks for.
    Stale,
    /// Reported bad, or lost.
    Unhealthy,
    /// Taking no new claims.
    Cordoned,
}

/// A device in a bad condition over a span.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceTrouble {
    /// The device, `NODE:INDEX`.
    pub gpu: String,
    /// What.
    pub condition: Condition,
    /// Since when.
    pub from: Timestamp,
    /// Until when (the window's end when ongoing).
    pub to: Timestamp,
    /// Still so at the window's end.
    pub ongoing: bool,
    /// Why, when known (the health reason).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// A claim whose processes used more memory than it reserved on a device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverLimit {
    /// The claim.
    pub claim: ClaimId,
    /// Its project.
    pub project: String,
    /// The device.
    pub gpu: String,
    /// Reserved there.
    pub reserved: Bytes,
    /// The most its processes used there.
    pub peak: Bytes,
    /// First sample over.
    pub from: Timestamp,
    /// Last sample over.
    pub to: Timestamp,
}

/// A claim that waited at least the threshold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LongPending {
    /// The claim.
    pub claim: ClaimId,
    /// Its project.
    pub project: String,
    /// Since when.
    pub from: Timestamp,
    /// Until it started or ended, or the window's end.
    pub to: Timestamp,
    /// Why it waited, as the scheduler last said.
    pub reasons: Vec<String>,
}

/// What went wrong in a window.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trouble {
    /// Devices stale, unhealthy or cordoned, by start time.
    pub devices: Vec<DeviceTrouble>,
    /// Claims over their memory, by start time.
    pub over_limit: Vec<OverLimit>,
    /// Claims pending at least the threshold, by start time.
    pub long_pending: Vec<LongPending>,
    /// Projects backed off, by start time.
    pub backoffs: Vec<BackoffSpan>,
}

fn push_condition(
    out: &mut Vec<DeviceTrouble>,
    gpu: &GpuRef,
    c: Condition,
    from: Timestamp,
    to: Timestamp,
    reason: &str,
) {
    if let Some(last) = out
        .iter_mut()
        .rev()
        .find(|t| t.condition == c && t.gpu == gpu.to_string())
        && last.to == from
        && last.reason == reason
    {
        last.to = to;
        return;
    }
    out.push(DeviceTrouble {
        gpu: gpu.to_string(),
        condition: c,
        from,
        to,
        ongoing: false,
        reason: reason.to_string(),
    });
}

/// Finds what went wrong; claims pending at least `pending_ms` are listed.
pub fn find(story: &Story, samples: &BTreeMap<GpuRef, Vec<Tick>>, pending_ms: u64) -> Trouble {
    let mut devices = Vec::new();
    let mut over: BTreeMap<(ClaimId, String), OverLimit> = BTreeMap::new();
    for (gpu, spans) in &story.devices {
        for s in spans {
            match &s.health {
                Health::Healthy => {}
                Health::Unhealthy(why) => {
                    push_condition(&mut devices, gpu, Condition::Unhealthy, s.from, s.to, why);
                }
                Health::Lost => {
                    push_condition(
                        &mut devices,
                        gpu,
                        Condition::Unhealthy,
                        s.from,
                        s.to,
                        "lost",
                    );
                }
            }
            if s.cordoned {
                push_condition(&mut devices, gpu, Condition::Cordoned, s.from, s.to, "");
            }
        }
        let series = samples.get(gpu).map_or(&[][..], Vec::as_slice);
        // Stale: a device with telemetry whose samples stop for longer than one speaks for.
        let (Some(first), Some(last)) = (spans.first(), spans.last()) else {
            continue;
        };
        if !series.is_empty() {
            let mut prev = series
                .first()
                .map_or(first.from.0, |s| s.at.0.max(first.from.0));
            for at in series.iter().skip(1).map(|s| s.at).chain([last.to]) {
                if at.0.saturating_sub(prev) > HOLD_MS {
                    let from = Timestamp(prev + HOLD_MS);
                    push_condition(&mut devices, gpu, Condition::Stale, from, at, "");
                }
                prev = at.0;
            }
        }
        for span in spans.iter().filter(|x| !x.holds.is_empty()) {
            let first = series.partition_point(|s| s.at < span.from.max(story.from));
            for s in series[first..]
                .iter()
                .take_while(|s| s.at < span.to && s.at <= story.to)
            {
                for h in &span.holds {
                    // The memory of the claim's processes here (a sample has few processes).
                    let m = s
                        .processes
                        .iter()
                        .filter(|p| p.claim == Some(h.claim))
                        .filter_map(|p| p.used_memory)
                        .fold(Bytes(0), |a, b| a + b);
                    if m <= h.memory_bytes {
                        continue;
                    }
                    let e = over
                        .entry((h.claim, gpu.to_string()))
                        .or_insert_with(|| OverLimit {
                            claim: h.claim,
                            project: h.project.clone(),
                            gpu: gpu.to_string(),
                            reserved: h.memory_bytes,
                            peak: m,
                            from: s.at,
                            to: s.at,
                        });
                    e.peak = e.peak.max(m);
                    e.to = s.at;
                }
            }
        }
    }
    for d in &mut devices {
        d.ongoing = d.to >= story.to;
    }
    devices.sort_by(|a, b| (a.from, &a.gpu, a.condition).cmp(&(b.from, &b.gpu, b.condition)));
    let mut over_limit: Vec<OverLimit> = over.into_values().collect();
    over_limit.sort_by_key(|a| (a.from, a.claim));
    Trouble {
        devices,
        over_limit,
        long_pending: long_pending(story, pending_ms),
        backoffs: story.backoffs.clone(),
    }
}

/// Every time a claim waited `pending_ms` or longer, earliest first.
fn long_pending(story: &Story, pending_ms: u64) -> Vec<LongPending> {
    let mut long = Vec::new();
    for (id, c) in &story.claims {
        for p in &c.pending {
            if p.to.millis_since(p.from) >= pending_ms {
                long.push(LongPending {
                    claim: *id,
                    project: c.project.clone(),
                    from: p.from,
                    to: p.to,
                    reasons: p.pending_reasons.clone(),
                });
            }
        }
    }
    long.sort_by_key(|a| (a.from, a.claim));
    long
}
