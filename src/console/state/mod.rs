//! The console's state: one owner, changed only by `update`, read by drawing.

mod by_view;
mod claim_detail;
mod command_line;
mod find;
mod fleet_map;
mod forecast;
mod form;
mod paging;
mod physical;
mod pools;
mod rewind;
mod rows;
mod selection;
mod sources;
mod totals;
mod trends;
mod usage;
mod view;

mod why;

use std::collections::VecDeque;

use crate::clock::Timestamp;
use crate::ids::ClaimId;
use crate::snapshot::{ClaimView, DeviceView, NodeView, ProjectView};
use crate::sources::Action;

use super::flows::{FlowId, Flows, Plan, StepPlan};
use super::keymap::Keymap;
use super::lists::{ClaimColumn, GpuColumn, ListState, Pane, ProjectColumn};

pub use crate::console::lists::{ClaimKey, Cursor, DevKey, Picked, ProjKey};
pub use by_view::SortRefused;
pub use command_line::{candidates, command_hint, command_word};
pub use find::GpuName;
pub use fleet_map::{
    CellState, Density, FleetMap, MapLayout, OverviewAreas, legend_entries, map_inner,
};
pub use forecast::{
    DialogPreview, FORECAST_AGAIN_MS, FORECAST_PACE, FORECAST_STALE_MS, SourceForecast,
};
pub use form::{ClaimForm, FormField, FormKind, FormStage, MoveRow};
pub use paging::{claims_info_height, events_split, why_pane_height};
pub use physical::{BackgroundJoin, FLAG_FILTERS, JoinInput, KeptJoin, PhysicalView};

pub use pools::{PoolRow, pool_of};
pub use rewind::{
    CHART_SPAN_MS, ChartKey, Charts, DEFAULT_SPEED, Rewind, SPEEDS, STEP_MS, Seeking, Shown,
    chart_window,
};
pub use sources::{STALE_AFTER_INTERVALS, Settling, SourceHealth, SourceSlot};
pub use totals::FleetTotals;
pub use trends::{MINUTE_MS, TrendHistory, TrendPoint, TrendPoints, TrendSpan, Trends};
pub use usage::{
    SourceAnswer, SourceUsage, USAGE_STEP_MS, UsageClaim, UsageKey, UsageProject, UsageView,
    UsageWindow, notes_height as usage_notes_height,
};
pub use view::{OVERVIEW_JUMPS, View};
pub use why::{WhyLine, WhyTone, reason_now, why_popup_size};

/// Console log lines kept for the Events view.
pub const LOG_KEPT: usize = 500;
/// How long a status-line message stays.
pub const FLASH_MS: u64 = 8_000;

/// The views that scroll without a list of their own, each with its filter and cursor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Panes {
    /// The Overview (its cursor picks a count to open).
    pub overview: Pane,
    /// The GPU detail (its cursor moves over the processes).
    pub detail: Pane,
    /// The Events view (its filter picks the events).
    pub events: Pane,
    /// The claim detail (its cursor scrolls).
    pub claim_detail: Pane,
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

/// The one confirmation dialog every mutating action goes through: it names the target as
/// shown, opens with Cancel focused, and may ask the operator to type a word (a claim's
/// id) before OK acts.
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
    /// What the operator must type before OK acts (none: OK alone is enough).
    pub type_to_confirm: Option<String>,
    /// What the operator typed so far.
    pub typed: String,
    /// Why the last OK did nothing (the typed text did not match).
    pub error: Option<String>,
    /// Where Cancel returns to (none: browsing).
    pub back: Option<Box<Mode>>,
    /// Where the console goes once the action is sent (none: browsing).
    pub then: Option<Box<Mode>>,
    /// The flow OK starts instead of sending `action` alone, not yet under way: a move
    /// across sources (`action` is its first claim) or a hand-over (`source`/`action`
    /// are its first step). Started, it is kept in `State::flows`.
    pub starts: Option<Box<Plan>>,
    /// What the action would do, as its source previews it.
    pub preview: DialogPreview,
}

impl Confirm {
    /// A dialog for `action` on `source`, Cancel focused, returning to browsing.
    pub fn new(
        source: usize,
        action: Action,
        title: impl Into<String>,
        body: Vec<String>,
    ) -> Confirm {
        Confirm {
            source,
            action,
            title: title.into(),
            body,
            ok_focused: false,
            type_to_confirm: None,
            typed: String::new(),
            error: None,
            back: None,
            then: None,
            starts: None,
            preview: DialogPreview::Unasked,
        }
    }

    /// The OK button's word: the action's verb, or `hand over` for a hand-over.
    pub fn ok_label(&self) -> &'static str {
        if self.steps().is_empty() {
            self.action.verb()
        } else {
            "hand over"
        }
    }

    /// A hand-over's steps, in order (empty: no hand-over).
    pub fn steps(&self) -> &[StepPlan] {
        match self.starts.as_deref() {
            Some(Plan::Handover(run)) => &run.steps,
            _ => &[],
        }
    }

    /// Asks to type `word` before OK acts, unless the operator's command already named the
    /// target by exactly that word (`:cordon dgx-a100-80:6`): it is then typed, and OK has
    /// the focus, so a target named in full is never typed a second time.
    pub fn type_unless_named(&mut self, word: String, named: Option<&str>) {
        if named.is_some_and(|n| n.trim() == word) {
            self.typed.clone_from(&word);
            self.ok_focused = true;
        }
        self.type_to_confirm = Some(word);
    }

    /// The typed text allows OK (nothing to type, or typed exactly).
    pub fn typed_ok(&self) -> bool {
        self.type_to_confirm
            .as_deref()
            .is_none_or(|want| self.typed.trim() == want)
    }
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
    /// Candidate devices, those the claim fits on first, the emptiest first.
    pub targets: Vec<MoveRow>,
    /// How many devices the claim holds: a move takes as many.
    pub holds: usize,
    /// Selected target.
    pub selected: usize,
    /// The move was sent; waiting for the answer.
    pub sent: bool,
    /// The source's refusal, in its words.
    pub error: Option<String>,
    /// The move to another source under way from this picker (kept in `State::flows`).
    pub flow: Option<FlowId>,
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
    /// The result pane of the last hand-over (`Flows::handover`).
    Handover,
    /// The selected project's reasons in Fair share, whole, scrolled this many lines.
    Why(u16),
    /// Typing the time to rewind to (`g`).
    RewindTo(String),
}

/// The console's whole state.
// Independent switches (read-only, dirty, quitting...), not a state machine.
#[allow(clippy::struct_excessive_bools)]
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
    /// The GPUs list.
    pub gpus: ListState<DevKey, GpuColumn>,
    /// The Claims list.
    pub claims: ListState<ClaimKey, ClaimColumn>,
    /// The Fair share list.
    pub projects: ListState<ProjKey, ProjectColumn>,
    /// The views that scroll without a list of their own.
    pub panes: Panes,
    /// Display frozen.
    pub frozen: bool,
    /// Status-line message.
    pub flash: Option<Flash>,
    /// Console log lines (newest last).
    pub log: VecDeque<String>,
    /// The view the detail view was opened from (Esc goes back there).
    pub came_from: Option<View>,
    /// The device shown in detail: source, node name, device index.
    pub detail: Option<(usize, String, u32)>,
    /// The claim shown in the claim detail: source, claim id.
    pub claim_detail: Option<(usize, ClaimId)>,
    /// The longest id and holder in the Claims rows, for those columns' widths.
    pub claim_widths: crate::console::lists::ClaimWidths,
    /// Totals over the shown sources, for the Overview.
    pub totals: FleetTotals,
    /// Terminal size.
    pub size: (u16, u16),
    /// Something visible changed since the last draw.
    pub dirty: bool,
    /// Snapshots were stored since the physical join, totals, map and rows were last
    /// rebuilt: `settle` rebuilds them once for all of them.
    pub unsettled: bool,
    /// What changed since the last settle: how much of the physical join it needs.
    pub settling: Settling,
    /// Leaving.
    pub quit: bool,
    /// `now` in the unit the shown ages change in (seconds or minutes) at the last tick.
    pub age_step: u64,
    /// The holder this console acts as (`$USER`): releasing another holder's claim asks
    /// for its id to be typed.
    pub operator: Option<String>,
    /// The zone dates are shown in: the operator's own (tests set UTC).
    pub zone: jiff::tz::TimeZone,
    /// The work under way over several answers (moves across sources, lost answers,
    /// hand-overs), by id, followed whatever the operator does meanwhile.
    pub flows: Flows,
    /// The fleet as it was at a time, shown instead of the live state (which keeps
    /// updating underneath) until the operator returns to live.
    pub rewind: Option<Box<Rewind>>,
    /// The charts of the device shown in detail.
    pub charts: Option<Charts>,
    /// The Usage view: its window, the sources' answers and its lists.
    pub usage: UsageView,
    /// Physical GPUs across sources: the GPUs view's "by GPU" list.
    pub physical: PhysicalView,
    /// The Overview's fleet map.
    pub map: FleetMap,
    /// The Overview's sparklines.
    pub trends: Trends,
}

impl State {
    /// A state over these sources, showing dates in the system's time zone.
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
            gpus: ListState::default(),
            claims: ListState::default(),
            projects: ListState::default(),
            panes: Panes::default(),
            frozen: false,
            flash: None,
            log: VecDeque::new(),
            came_from: None,
            detail: None,
            claim_detail: None,
            claim_widths: crate::console::lists::ClaimWidths::default(),
            totals: FleetTotals::default(),
            size: (80, 24),
            dirty: true,
            unsettled: false,
            settling: Settling::default(),
            quit: false,
            age_step: 0,
            operator: None,
            zone: jiff::tz::TimeZone::system(),
            flows: Flows::default(),
            rewind: None,
            charts: None,
            usage: UsageView::default(),
            physical: PhysicalView::default(),
            map: FleetMap::default(),
            trends: Trends::default(),
        }
    }

    /// A device by row key.
    pub fn device(&self, k: DevKey) -> Option<(&SourceSlot, &NodeView, &DeviceView)> {
        let s = self.sources.get(k.source)?;
        let n = s.data.as_deref()?.nodes.get(k.node)?;
        Some((s, n, n.devices.get(k.dev)?))
    }

    /// A claim by row key.
    pub fn claim(&self, k: ClaimKey) -> Option<(&SourceSlot, &ClaimView)> {
        let s = self.sources.get(k.source)?;
        Some((s, s.data.as_deref()?.claims.get(k.idx)?))
    }

    /// A project by row key.
    pub fn project(&self, k: ProjKey) -> Option<(&SourceSlot, &ProjectView)> {
        let s = self.sources.get(k.source)?;
        Some((s, s.data.as_deref()?.projects.get(k.idx)?))
    }

    /// The device shown in the detail view.
    pub fn detail_device(&self) -> Option<(usize, &NodeView, &DeviceView)> {
        let (src, node, index) = self.detail.as_ref()?;
        let snap = self.sources.get(*src)?.data.as_deref()?;
        let n = snap.nodes.iter().find(|n| &n.name == node)?;
        Some((*src, n, n.devices.iter().find(|d| d.index == *index)?))
    }

    /// Rows in the current view's list.
    pub fn row_count(&self) -> usize {
        match self.view {
            View::Gpus if self.physical.by_gpu => self.physical.rows.len(),
            View::Gpus => self.gpus.rows.len(),
            View::Claims => self.claims.rows.len(),
            View::Ledger => self.projects.rows.len(),
            View::Detail => self
                .detail_device()
                .and_then(|(_, _, d)| d.telemetry.as_ref())
                .map_or(0, |t| t.processes.len()),
            View::Events => self.audit_events().len(),
            View::ClaimDetail => self.claim_detail_lines(),
            View::Overview => OVERVIEW_JUMPS.len(),
            View::Usage => self.usage.active().rows.len(),
        }
    }

    /// Audit events across shown sources plus console log lines.
    pub fn event_count(&self) -> usize {
        self.shown_sources()
            .filter_map(|(_, s)| s.data.as_deref())
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

    /// Adds a line to the console log ring.
    pub fn push_log(&mut self, line: String) {
        if self.log.len() == LOG_KEPT {
            self.log.pop_front();
        }
        self.log.push_back(line);
    }
}
