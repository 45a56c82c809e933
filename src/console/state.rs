//! The console's state: one owner, changed only by `update`, read by drawing.

use std::collections::VecDeque;

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::request::{ClaimRequest, RequestError};
use crate::snapshot::{ClaimState, ClaimView, DeviceView, NodeView, ProjectView, Snapshot};
use crate::sources::Action;
use crate::wire::ClaimDraft;

use super::keymap::Keymap;

/// Console log lines kept for the Events view.
pub const LOG_KEPT: usize = 500;
/// How long a status-line message stays.
pub const FLASH_MS: u64 = 8_000;
/// A source whose data is older than this many refresh intervals is stale.
pub const STALE_AFTER_INTERVALS: u64 = 3;

/// The views, in tab order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum View {
    /// Cluster totals and sources.
    Overview,
    /// One row per device.
    Gpus,
    /// Claims.
    Claims,
    /// Projects' fair-share accounts.
    Ledger,
    /// One device in depth.
    Detail,
    /// Audit events and the console log.
    Events,
}

impl View {
    /// All views in tab order.
    pub const ALL: [View; 6] = [
        View::Overview,
        View::Gpus,
        View::Claims,
        View::Ledger,
        View::Detail,
        View::Events,
    ];
    /// Tab title.
    pub fn title(self) -> &'static str {
        match self {
            View::Overview => "Overview",
            View::Gpus => "GPUs",
            View::Claims => "Claims",
            View::Ledger => "Fair share",
            View::Detail => "GPU detail",
            View::Events => "Events",
        }
    }
    /// Name on the command line and for `--dump-screen`.
    pub fn name(self) -> &'static str {
        match self {
            View::Overview => "overview",
            View::Gpus => "gpus",
            View::Claims => "claims",
            View::Ledger => "fairshare",
            View::Detail => "detail",
            View::Events => "events",
        }
    }
    /// Position in `ALL`.
    pub fn position(self) -> usize {
        View::ALL.iter().position(|v| *v == self).unwrap_or(0)
    }
    /// Parses a view name.
    pub fn parse(s: &str) -> Option<View> {
        View::ALL.into_iter().find(|v| v.name() == s)
    }
    /// The columns it can be sorted by.
    pub fn sort_columns(self) -> &'static [&'static str] {
        match self {
            View::Gpus => &["node", "free", "used", "util", "allocated", "sharers"],
            View::Claims => &["id", "project", "memory", "used", "age", "state"],
            View::Ledger => &["project", "debt", "pending", "share"],
            _ => &[],
        }
    }
}

/// One source as the console knows it: last good data, its age, and its error.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceSlot {
    /// Name.
    pub name: String,
    /// Kind (`embedded`, `demo`, `gpuboard`...).
    pub kind: String,
    /// Accepts actions.
    pub can_act: bool,
    /// A note to show (why no GPUs, how to see the demo).
    pub note: Option<String>,
    /// Last good snapshot.
    pub data: Option<Snapshot>,
    /// When the last good snapshot arrived.
    pub fetched_at: Option<Timestamp>,
    /// The last fetch's error, if it failed.
    pub error: Option<String>,
    /// Failing since.
    pub error_since: Option<Timestamp>,
    /// A fetch is in flight.
    pub in_flight: bool,
    /// When to fetch next.
    pub next_fetch: Timestamp,
    /// Consecutive failures (for backoff).
    pub failures: u32,
    /// Data that arrived while the display was frozen.
    pub held: Option<(Snapshot, Timestamp)>,
    /// The snapshot as the source sent it, kept when remote telemetry is joined into
    /// `data` so each join starts from what the source said.
    pub raw: Option<Snapshot>,
}

/// Kinds whose snapshots are telemetry for other sources' devices.
pub const TELEMETRY_KINDS: &[&str] = &["prometheus"];

impl State {
    /// Stores a source's snapshot and joins remote telemetry (Prometheus dcgm series)
    /// into the devices of the other sources, by UUID or by node name and index.
    pub fn store_snapshot(&mut self, source: usize, snap: Snapshot) {
        let joining = self
            .sources
            .iter()
            .any(|s| TELEMETRY_KINDS.contains(&s.kind.as_str()));
        let Some(slot) = self.sources.get_mut(source) else {
            return;
        };
        if !joining {
            slot.data = Some(snap);
            return;
        }
        if !TELEMETRY_KINDS.contains(&slot.kind.as_str()) {
            slot.raw = Some(snap.clone());
        }
        slot.data = Some(snap);
        let telemetry: Vec<Snapshot> = self
            .sources
            .iter()
            .filter(|s| TELEMETRY_KINDS.contains(&s.kind.as_str()))
            .filter_map(|s| s.data.clone())
            .collect();
        for slot in &mut self.sources {
            if let Some(raw) = &slot.raw {
                let mut joined = raw.clone();
                for t in &telemetry {
                    crate::sources::prometheus::join_telemetry(&mut joined, t);
                }
                slot.data = Some(joined);
            }
        }
    }
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
    pub fn new(name: &str, kind: &str, can_act: bool, note: Option<String>) -> SourceSlot {
        SourceSlot {
            name: name.to_string(),
            kind: kind.to_string(),
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

    /// Whether its data on screen is not fresh.
    pub fn is_stale(&self, now: Timestamp, refresh_ms: u64) -> bool {
        !matches!(
            self.health(now, refresh_ms),
            SourceHealth::Ok | SourceHealth::Loading
        )
    }
}

/// A device row: source, node position, device position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DevKey {
    /// Source.
    pub source: usize,
    /// Node position in the snapshot.
    pub node: usize,
    /// Device position on the node.
    pub dev: usize,
}

/// A claim row: source and position in its snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClaimKey {
    /// Source.
    pub source: usize,
    /// Position in the snapshot's claims.
    pub idx: usize,
}

/// A project row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProjKey {
    /// Source.
    pub source: usize,
    /// Position in the snapshot's projects.
    pub idx: usize,
}

/// Selection and scroll in a list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    /// Selected row.
    pub selected: usize,
    /// First row shown.
    pub offset: usize,
}

/// A message on the status line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flash {
    /// The text.
    pub text: String,
    /// An error (styled as such).
    pub error: bool,
    /// When it appeared.
    pub at: Timestamp,
}

/// The claim form's request forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormKind {
    /// Ray `gpu_memory`.
    Memory,
    /// Ray `num_gpus` fraction.
    Fraction,
    /// Koordinator share: `gpu-memory` or `gpu-memory-ratio` (amount ending in %), core, shared.
    Share,
    /// `nvidia.com/gpu`: whole devices.
    Whole,
}

impl FormKind {
    /// In cycle order.
    pub const ALL: [FormKind; 4] = [
        FormKind::Memory,
        FormKind::Fraction,
        FormKind::Share,
        FormKind::Whole,
    ];
    /// Label.
    pub fn label(self) -> &'static str {
        match self {
            FormKind::Memory => "memory (gpu_memory)",
            FormKind::Fraction => "fraction (num_gpus)",
            FormKind::Share => "share (gpu-memory / ratio %, gpu-core, gpu.shared)",
            FormKind::Whole => "whole GPUs (nvidia.com/gpu)",
        }
    }
}

/// The claim form's fields, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormField {
    /// Request form (a choice).
    Kind,
    /// Memory (`10Gi`), fraction (`0.25`), ratio (`50%`) or count.
    Amount,
    /// `gpu-core` percent (share form).
    Core,
    /// `gpu.shared` devices (share form).
    Shared,
    /// Project.
    Project,
    /// Holder.
    Holder,
    /// Lease seconds.
    Ttl,
    /// Node to pin (optional).
    Node,
    /// Wait as pending when it does not fit (a choice).
    Wait,
}

impl FormField {
    /// In order.
    pub const ALL: [FormField; 9] = [
        FormField::Kind,
        FormField::Amount,
        FormField::Core,
        FormField::Shared,
        FormField::Project,
        FormField::Holder,
        FormField::Ttl,
        FormField::Node,
        FormField::Wait,
    ];
    /// Label.
    pub fn label(self) -> &'static str {
        match self {
            FormField::Kind => "Request form",
            FormField::Amount => "Amount",
            FormField::Core => "Core %",
            FormField::Shared => "Shared on",
            FormField::Project => "Project",
            FormField::Holder => "Holder",
            FormField::Ttl => "TTL (s)",
            FormField::Node => "Node",
            FormField::Wait => "Wait if full",
        }
    }
}

/// Where the claim form is in its round trip.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FormStage {
    /// Being filled in.
    Editing,
    /// Waiting for the placement preview.
    Planning,
    /// The preview is shown; confirm to submit.
    Preview(String),
    /// Submitted, waiting for the answer.
    Submitting,
}

/// The claim form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimForm {
    /// The source it goes to.
    pub source: usize,
    /// Request form.
    pub kind: FormKind,
    /// Text of each text field, indexed like `FormField::ALL`.
    pub text: [String; 9],
    /// Wait as pending.
    pub wait: bool,
    /// Focused field.
    pub focus: usize,
    /// Round-trip stage.
    pub stage: FormStage,
    /// The source's or the validator's error, in its words.
    pub error: Option<String>,
}

impl ClaimForm {
    /// A fresh form for `source`.
    pub fn new(source: usize) -> ClaimForm {
        let mut text: [String; 9] = Default::default();
        text[1] = "10Gi".to_string();
        text[4] = "default".to_string();
        ClaimForm {
            source,
            kind: FormKind::Memory,
            text,
            wait: false,
            focus: 1,
            stage: FormStage::Editing,
            error: None,
        }
    }

    /// The text of a field.
    pub fn field(&self, f: FormField) -> &str {
        let i = FormField::ALL.iter().position(|x| *x == f).unwrap_or(0);
        self.text.get(i).map_or("", String::as_str)
    }

    /// The fields that apply to the chosen form.
    pub fn visible(&self) -> Vec<FormField> {
        FormField::ALL
            .into_iter()
            .filter(|f| {
                !matches!(f, FormField::Core | FormField::Shared) || self.kind == FormKind::Share
            })
            .collect()
    }

    /// The operator's entries as a draft: the form picks the request form, the draft
    /// decides the wire fields.
    pub fn draft(&self) -> ClaimDraft {
        let text = |f: FormField| {
            let v = self.field(f).trim();
            (!v.is_empty()).then(|| v.to_string())
        };
        let amount = text(FormField::Amount);
        let mut d = ClaimDraft {
            project: text(FormField::Project),
            holder: text(FormField::Holder),
            node: text(FormField::Node),
            ttl: text(FormField::Ttl),
            wait: self.wait,
            ..ClaimDraft::default()
        };
        match self.kind {
            FormKind::Memory => d.memory = Some(amount.unwrap_or_default()),
            FormKind::Fraction => d.fraction = Some(amount.unwrap_or_default()),
            FormKind::Whole => d.gpus = Some(amount.unwrap_or_default()),
            FormKind::Share => {
                let amount = amount.unwrap_or_default();
                match amount.strip_suffix('%') {
                    Some(r) => d.ratio = Some(r.to_string()),
                    None => d.memory = Some(amount),
                }
                d.core = text(FormField::Core);
                d.shared = text(FormField::Shared);
                d.koordinator = true;
            }
        }
        d
    }

    /// The validated request, or the validator's words on what is wrong.
    pub fn request(&self) -> Result<ClaimRequest, RequestError> {
        self.draft().to_request(serde_json::Map::new())
    }
}

/// A confirmation dialog for a destructive action; Cancel is focused when it opens.
#[derive(Clone, Debug, PartialEq)]
pub struct Confirm {
    /// The source that will act.
    pub source: usize,
    /// The action waiting for confirmation.
    pub action: Action,
    /// Title.
    pub title: String,
    /// What will happen, in lines.
    pub body: Vec<String>,
    /// The OK button is focused (false: Cancel is).
    pub ok_focused: bool,
}

/// Picking where to move a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MovePick {
    /// The source owning the claim.
    pub source: usize,
    /// The claim.
    pub id: ClaimId,
    /// Where it is now.
    pub from: String,
    /// Candidate devices: node, index, model, free memory text.
    pub targets: Vec<(String, u32, String, String)>,
    /// Selected target.
    pub selected: usize,
    /// The move was sent; waiting for the answer.
    pub sent: bool,
    /// The source's refusal, in its words.
    pub error: Option<String>,
}

/// What has the keyboard.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    /// Browsing.
    Normal,
    /// Typing a filter.
    Filter(String),
    /// Typing a command.
    Command(String),
    /// The help overlay.
    Help,
    /// The claim form.
    Form(Box<ClaimForm>),
    /// A confirmation dialog.
    Confirm(Box<Confirm>),
    /// Picking a move target.
    Move(Box<MovePick>),
}

/// The console's whole state.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    /// Now, from ticks: drawing reads this, never the clock.
    pub now: Timestamp,
    /// Refresh interval, ms.
    pub refresh_ms: u64,
    /// Refuse every action.
    pub readonly: bool,
    /// The keymap (help and hints are generated from it).
    pub keymap: Keymap,
    /// Sources in order.
    pub sources: Vec<SourceSlot>,
    /// The source shown alone, or all of them.
    pub source_filter: Option<usize>,
    /// Current view.
    pub view: View,
    /// Keyboard mode.
    pub mode: Mode,
    /// First help line shown (the help scrolls on small terminals).
    pub help_scroll: u16,
    /// Filter text (applies to every list).
    pub filter: String,
    /// Sort column per view (index into `View::sort_columns`).
    pub sort: [usize; 6],
    /// Reverse sort per view.
    pub sort_reverse: [bool; 6],
    /// Cursor per view.
    pub cursor: [Cursor; 6],
    /// Display frozen.
    pub frozen: bool,
    /// Status-line message.
    pub flash: Option<Flash>,
    /// Console log lines (newest last).
    pub log: VecDeque<String>,
    /// The device shown in detail: source, node name, device index.
    pub detail: Option<(usize, String, u32)>,
    /// Device rows, filtered and sorted.
    pub rows_devices: Vec<DevKey>,
    /// Claim rows, filtered and sorted.
    pub rows_claims: Vec<ClaimKey>,
    /// Project rows, filtered and sorted.
    pub rows_projects: Vec<ProjKey>,
    /// Terminal size.
    pub size: (u16, u16),
    /// Something visible changed since the last draw.
    pub dirty: bool,
    /// Leaving.
    pub quit: bool,
    /// The minute of `now` at the last tick: ages on screen change at most once a minute.
    pub minute: u64,
}

impl State {
    /// A state over these sources.
    pub fn new(sources: Vec<SourceSlot>, keymap: Keymap, refresh_ms: u64, readonly: bool) -> State {
        State {
            now: Timestamp(0),
            refresh_ms: refresh_ms.max(100),
            readonly,
            keymap,
            sources,
            source_filter: None,
            view: View::Gpus,
            mode: Mode::Normal,
            help_scroll: 0,
            filter: String::new(),
            sort: [0; 6],
            sort_reverse: [false; 6],
            cursor: [Cursor::default(); 6],
            frozen: false,
            flash: None,
            log: VecDeque::new(),
            detail: None,
            rows_devices: Vec::new(),
            rows_claims: Vec::new(),
            rows_projects: Vec::new(),
            size: (80, 24),
            dirty: true,
            quit: false,
            minute: 0,
        }
    }

    /// A device by row key.
    pub fn device(&self, k: DevKey) -> Option<(&SourceSlot, &NodeView, &DeviceView)> {
        let s = self.sources.get(k.source)?;
        let n = s.data.as_ref()?.nodes.get(k.node)?;
        Some((s, n, n.devices.get(k.dev)?))
    }

    /// A claim by row key.
    pub fn claim(&self, k: ClaimKey) -> Option<(&SourceSlot, &ClaimView)> {
        let s = self.sources.get(k.source)?;
        Some((s, s.data.as_ref()?.claims.get(k.idx)?))
    }

    /// A project by row key.
    pub fn project(&self, k: ProjKey) -> Option<(&SourceSlot, &ProjectView)> {
        let s = self.sources.get(k.source)?;
        Some((s, s.data.as_ref()?.projects.get(k.idx)?))
    }

    /// The device shown in the detail view.
    pub fn detail_device(&self) -> Option<(usize, &NodeView, &DeviceView)> {
        let (src, node, index) = self.detail.as_ref()?;
        let snap = self.sources.get(*src)?.data.as_ref()?;
        let n = snap.nodes.iter().find(|n| &n.name == node)?;
        Some((*src, n, n.devices.iter().find(|d| d.index == *index)?))
    }

    /// Cursor of the current view.
    pub fn cur(&self) -> Cursor {
        self.cursor[self.view.position()]
    }

    /// Rows in the current view's list.
    pub fn row_count(&self) -> usize {
        match self.view {
            View::Gpus => self.rows_devices.len(),
            View::Claims => self.rows_claims.len(),
            View::Ledger => self.rows_projects.len(),
            View::Detail => self
                .detail_device()
                .and_then(|(_, _, d)| d.telemetry.as_ref())
                .map_or(0, |t| t.processes.len()),
            View::Events => self.event_count(),
            View::Overview => self.sources.len(),
        }
    }

    /// Audit events across shown sources plus console log lines.
    pub fn event_count(&self) -> usize {
        self.shown_sources()
            .filter_map(|(_, s)| s.data.as_ref())
            .map(|d| d.events.len())
            .sum::<usize>()
            + self.log.len()
    }

    /// Sources in view (all, or the selected one), with positions.
    pub fn shown_sources(&self) -> impl Iterator<Item = (usize, &SourceSlot)> {
        self.sources
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.source_filter.is_none_or(|f| f == *i))
    }

    /// The selected device row (GPUs view), if any.
    pub fn selected_device(&self) -> Option<DevKey> {
        self.rows_devices
            .get(self.cursor[View::Gpus.position()].selected)
            .copied()
    }

    /// The selected claim row (Claims view), if any.
    pub fn selected_claim(&self) -> Option<ClaimKey> {
        self.rows_claims
            .get(self.cursor[View::Claims.position()].selected)
            .copied()
    }

    /// The selected project row, if any.
    pub fn selected_project(&self) -> Option<ProjKey> {
        self.rows_projects
            .get(self.cursor[View::Ledger.position()].selected)
            .copied()
    }

    /// Recomputes the filtered and sorted rows from the sources' data.
    pub fn rebuild_rows(&mut self) {
        let needle = self.filter.to_lowercase();
        let matches = |hay: &[&str]| {
            needle.is_empty() || hay.iter().any(|h| h.to_lowercase().contains(&needle))
        };
        let mut devs = Vec::new();
        let mut claims = Vec::new();
        let mut projects = Vec::new();
        for (si, s) in self.shown_sources() {
            let Some(d) = &s.data else { continue };
            for (ni, n) in d.nodes.iter().enumerate() {
                for (di, dev) in n.devices.iter().enumerate() {
                    let idx = dev.index.to_string();
                    if matches(&[&n.name, &dev.model, &idx, &s.name]) {
                        devs.push(DevKey {
                            source: si,
                            node: ni,
                            dev: di,
                        });
                    }
                }
            }
            for (ci, c) in d.claims.iter().enumerate() {
                let id = c.id.to_string();
                let state = match c.state {
                    ClaimState::Placed => "placed",
                    ClaimState::Pending => "pending",
                };
                if matches(&[
                    &id,
                    &c.project,
                    c.holder.as_deref().unwrap_or(""),
                    c.node.as_deref().unwrap_or(""),
                    &c.form,
                    state,
                ]) {
                    claims.push(ClaimKey {
                        source: si,
                        idx: ci,
                    });
                }
            }
            for (pi, p) in d.projects.iter().enumerate() {
                if matches(&[&p.name]) {
                    projects.push(ProjKey {
                        source: si,
                        idx: pi,
                    });
                }
            }
        }
        self.sort_rows(&mut devs, &mut claims, &mut projects);
        self.rows_devices = devs;
        self.rows_claims = claims;
        self.rows_projects = projects;
        for v in [View::Gpus, View::Claims, View::Ledger] {
            let n = match v {
                View::Gpus => self.rows_devices.len(),
                View::Claims => self.rows_claims.len(),
                _ => self.rows_projects.len(),
            };
            let c = &mut self.cursor[v.position()];
            c.selected = c.selected.min(n.saturating_sub(1));
            c.offset = c.offset.min(c.selected);
        }
    }

    fn sort_rows(&self, devs: &mut [DevKey], claims: &mut [ClaimKey], projects: &mut [ProjKey]) {
        let col = |v: View| v.sort_columns().get(self.sort[v.position()]).copied();
        let dev = |k: &DevKey| self.device(*k);
        match col(View::Gpus) {
            Some("free") => devs
                .sort_by_key(|k| std::cmp::Reverse(dev(k).map_or(0, |(_, _, d)| d.memory_free.0))),
            Some("used") => devs.sort_by_key(|k| {
                std::cmp::Reverse(dev(k).map_or(0, |(_, _, d)| {
                    d.telemetry
                        .as_ref()
                        .and_then(|t| t.memory_used)
                        .map_or(0, |b| b.0)
                }))
            }),
            Some("util") => devs.sort_by_key(|k| {
                std::cmp::Reverse(dev(k).map_or(0, |(_, _, d)| {
                    d.telemetry
                        .as_ref()
                        .and_then(|t| t.utilization_gpu)
                        .unwrap_or(0)
                }))
            }),
            Some("allocated") => devs.sort_by_key(|k| {
                std::cmp::Reverse(dev(k).map_or(0, |(_, _, d)| d.memory_allocated.0))
            }),
            Some("sharers") => devs
                .sort_by_key(|k| std::cmp::Reverse(dev(k).map_or(0, |(_, _, d)| d.holders.len()))),
            _ => {}
        }
        if self.sort_reverse[View::Gpus.position()] {
            devs.reverse();
        }
        let claim = |k: &ClaimKey| self.claim(*k).map(|(_, c)| c);
        match col(View::Claims) {
            Some("project") => claims.sort_by(|a, b| {
                let (x, y) = (claim(a), claim(b));
                x.map(|c| (&c.project, c.id))
                    .cmp(&y.map(|c| (&c.project, c.id)))
            }),
            Some("memory") => claims
                .sort_by_key(|k| std::cmp::Reverse(claim(k).map_or(0, |c| c.memory_reserved.0))),
            Some("used") => claims.sort_by_key(|k| {
                std::cmp::Reverse(claim(k).and_then(|c| c.memory_used).map_or(0, |b| b.0))
            }),
            Some("age") => claims.sort_by_key(|k| claim(k).map_or(0, |c| c.created_at.0)),
            Some("state") => {
                claims.sort_by_key(|k| claim(k).map(|c| (c.state != ClaimState::Pending, c.id)))
            }
            _ => claims.sort_by_key(|k| (k.source, claim(k).map(|c| c.id))),
        }
        if self.sort_reverse[View::Claims.position()] {
            claims.reverse();
        }
        let proj = |k: &ProjKey| self.project(*k).map(|(_, p)| p);
        match col(View::Ledger) {
            Some("debt") => projects.sort_by(|a, b| {
                let x = proj(a).map_or(0.0, |p| p.overall_debt);
                let y = proj(b).map_or(0.0, |p| p.overall_debt);
                y.total_cmp(&x)
            }),
            Some("pending") => {
                projects.sort_by_key(|k| std::cmp::Reverse(proj(k).map_or(0, |p| p.pending)));
            }
            Some("share") => {
                projects.sort_by_key(|k| std::cmp::Reverse(proj(k).map_or(0, |p| p.share)));
            }
            _ => {}
        }
        if self.sort_reverse[View::Ledger.position()] {
            projects.reverse();
        }
    }

    /// Adds a line to the console log ring.
    pub fn push_log(&mut self, line: String) {
        if self.log.len() == LOG_KEPT {
            self.log.pop_front();
        }
        self.log.push_back(line);
    }
}
