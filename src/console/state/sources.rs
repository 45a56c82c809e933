//! One source as the console holds it (last good data, errors, backoff), its health as
//! shown, and remote telemetry joined into the other sources' devices.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::clock::Timestamp;
use crate::snapshot::Snapshot;
use crate::sources::{SourceKind, kubernetes};

use super::State;

/// A source whose data is older than this many refresh intervals is stale.
pub const STALE_AFTER_INTERVALS: u64 = 3;

/// One source as the console knows it: last good data, its age, and its error.
// Independent switches (can act, in flight, wanted, rewound), not a state machine.
#[allow(clippy::struct_excessive_bools)]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceSlot {
    /// Name.
    pub name: String,
    /// What it is.
    pub kind: SourceKind,
    /// Accepts actions.
    pub can_act: bool,
    /// A note to show (why no GPUs, how to see the demo).
    pub note: Option<String>,
    /// Last good snapshot, shared with the physical-GPU join running off the update step.
    pub data: Option<Arc<Snapshot>>,
    /// When the last good snapshot arrived.
    pub fetched_at: Option<Timestamp>,
    /// The last fetch's error, if it failed.
    pub error: Option<String>,
    /// Failing since.
    pub error_since: Option<Timestamp>,
    /// A fetch is in flight.
    pub in_flight: bool,
    /// The source reported a change while a fetch was in flight: fetch again after it.
    pub wanted: bool,
    /// When to fetch next.
    pub next_fetch: Timestamp,
    /// Consecutive failures (for backoff).
    pub failures: u32,
    /// Data that arrived while the display was frozen.
    pub held: Option<(Snapshot, Timestamp)>,
    /// The snapshot as the source sent it, kept when remote telemetry is joined into
    /// `data` so each join starts from what the source said.
    pub raw: Option<Snapshot>,
    /// Its data is from history (the console is rewound), not live.
    pub rewound: bool,
    /// Its waiting claims' expected starts, where it gives them.
    pub forecast: super::SourceForecast,
}

impl State {
    /// Stores a source's snapshot and joins remote telemetry (Prometheus dcgm series)
    /// into the devices of the other sources, by UUID or by node name and index, and the
    /// pods a Kubernetes source has into the processes whose cgroups name their UIDs; then
    /// joins every source's devices into physical GPUs again.
    pub fn store_snapshot(&mut self, source: usize, snap: Snapshot) {
        self.store_joined(source, snap);
        self.rejoin_physical();
    }

    /// Stores a source's snapshot (joining remote telemetry as `store_snapshot` does) and
    /// leaves the physical join, totals, map and rows to `settle`: a thousand hosts
    /// answering at start cost one rebuild per frame, not one per host. `telemetry` says
    /// the source found it changed in telemetry alone since the snapshot it last gave
    /// (`Fetched::Telemetry`): then the two are not compared.
    pub fn store_unsettled(&mut self, source: usize, snap: Snapshot, telemetry: bool) {
        // Telemetry alone, on a source whose data is joined into no other's (a telemetry
        // source's series and a cluster's pods are): the next settle may take it into the
        // physical GPUs without joining again.
        let alone = self
            .sources
            .get(source)
            .is_some_and(|s| !s.kind.is_telemetry() && s.kind != SourceKind::Kubernetes);
        let telemetry_only = alone
            && self
                .sources
                .get(source)
                .and_then(|s| s.data.as_deref())
                .is_some_and(|old| telemetry || old.same_but_telemetry(&snap));
        if telemetry_only {
            self.settling.telemetry.insert(source);
        } else {
            self.settling.all = true;
        }
        self.store_joined(source, snap);
        self.unsettled = true;
    }

    /// Rebuilds the physical join, totals, map and rows once for the snapshots stored
    /// since the last time (`store_unsettled`); nothing when none was. Where only
    /// telemetry changed, the physical GPUs take it without a join (`refresh_physical`).
    pub fn settle(&mut self) {
        if std::mem::take(&mut self.unsettled) {
            let settling = std::mem::take(&mut self.settling);
            if settling.all || !self.refresh_physical(&settling.telemetry) {
                self.rejoin_physical();
            }
            self.rebuild_rows();
        }
    }

    fn store_joined(&mut self, source: usize, snap: Snapshot) {
        let telemetry_on = self.sources.iter().any(|s| s.kind.is_telemetry());
        let pods_on = self
            .sources
            .iter()
            .any(|s| s.kind == SourceKind::Kubernetes);
        // What others' data is joined into: with telemetry, every scheduler's devices; with
        // pods only, every source's processes but a cluster's own (it has no processes).
        let joined = |k: SourceKind| {
            !k.is_telemetry() && (telemetry_on || (pods_on && k != SourceKind::Kubernetes))
        };
        let Some(slot) = self.sources.get_mut(source) else {
            return;
        };
        // An SSH host takes actions while its serve is read and its token readable.
        if slot.kind == SourceKind::Ssh {
            slot.can_act = snap.endpoint.actions;
        }
        // What the change touches: a telemetry source's series join into every scheduler's
        // devices, a cluster's pods into every source's processes; anything else is the
        // changed source's own. What it does not touch keeps its `Arc`, so the physical
        // join does not prepare it again.
        let everyone = slot.kind.is_telemetry()
            || (slot.kind == SourceKind::Kubernetes
                && slot
                    .raw
                    .as_ref()
                    .or(slot.data.as_deref())
                    .is_none_or(|old| old.pods != snap.pods));
        if joined(slot.kind) {
            slot.raw = Some(snap);
        } else {
            slot.data = Some(Arc::new(snap));
        }
        if !telemetry_on && !pods_on {
            return;
        }
        let telemetry: Vec<Arc<Snapshot>> = self
            .sources
            .iter()
            .filter(|s| s.kind.is_telemetry())
            .filter_map(|s| s.data.clone())
            .collect();
        let pods: Vec<crate::snapshot::PodNames> = self
            .sources
            .iter()
            .filter(|s| s.kind == SourceKind::Kubernetes)
            .filter_map(|s| s.raw.as_ref().or(s.data.as_deref()))
            .map(|s| s.pods.clone())
            .collect();
        let pods: Vec<_> = pods.iter().collect();
        for (i, slot) in self.sources.iter_mut().enumerate() {
            if i != source && !everyone {
                continue;
            }
            if let Some(raw) = &slot.raw {
                let mut joined = raw.clone();
                for t in &telemetry {
                    crate::sources::prometheus::join_telemetry(&mut joined, t);
                }
                kubernetes::owners::join_owners(&mut joined, &pods);
                if slot.data.as_deref() != Some(&joined) {
                    slot.data = Some(Arc::new(joined));
                }
            }
        }
    }
}

/// What changed since the last settle (`State::settle`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settling {
    /// Sources whose new snapshot differs from the last only in telemetry.
    pub telemetry: BTreeSet<usize>,
    /// Some other change: the physical GPUs are joined again.
    pub all: bool,
}

/// A source's health, as shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceHealth {
    /// No answer yet.
    Loading,
    /// Fresh data.
    Ok,
    /// The data is older than it should be.
    Stale {
        /// Data from.
        since: Timestamp,
    },
    /// The last fetch failed (data, if any, is kept and marked stale).
    Down {
        /// The error.
        message: String,
        /// Failing since.
        since: Timestamp,
    },
}

impl SourceSlot {
    /// A slot for a source, not yet fetched.
    pub fn new(name: &str, kind: SourceKind, can_act: bool, note: Option<String>) -> SourceSlot {
        SourceSlot {
            name: name.to_string(),
            kind,
            can_act,
            note,
            ..SourceSlot::default()
        }
    }

    /// Its health now.
    pub fn health(&self, now: Timestamp, refresh_ms: u64) -> SourceHealth {
        if let (Some(message), Some(since)) = (&self.error, self.error_since) {
            return SourceHealth::Down {
                message: message.clone(),
                since,
            };
        }
        match self.fetched_at {
            None => SourceHealth::Loading,
            Some(t) if now.millis_since(t) > refresh_ms * STALE_AFTER_INTERVALS => {
                SourceHealth::Stale { since: t }
            }
            Some(_) => SourceHealth::Ok,
        }
    }

    /// A short note on the sections of the peer's answer its last snapshot left out:
    /// `2 parts unread: /api/cluster_status `data.x`: ...`; `None` when all was read.
    pub fn warning_note(&self) -> Option<String> {
        let warnings = &self.data.as_deref()?.endpoint.warnings;
        let first = warnings.first()?;
        let what = if warnings.len() == 1 {
            "1 part unread".to_string()
        } else {
            format!("{} parts unread", warnings.len())
        };
        Some(format!("{what}: {first}"))
    }

    /// Whether its data on screen is not fresh.
    pub fn is_stale(&self, now: Timestamp, refresh_ms: u64) -> bool {
        !matches!(
            self.health(now, refresh_ms),
            SourceHealth::Ok | SourceHealth::Loading
        )
    }
}
