//! The "by GPU" side of the GPUs view: every source's devices joined into physical GPUs
//! (`crate::physical`), rejoined when a source's data changes (never per frame), with its
//! own cursor, flag filter and open GPU. Views read the joined list from `physical_fleet`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use crate::physical::{Aliases, IdleClock, Joiner, PhysicalFleet, PhysicalGpu, SharedSource};

use super::{Cursor, State, View};

/// The flags `!` steps through in the by-GPU list, then none.
pub const FLAG_FILTERS: [&str; 3] = ["double-booked", "unexplained", "idle"];

/// The by-GPU list's state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PhysicalView {
    /// The last join, shared so a copy of the state does not copy 8 000 GPUs.
    pub fleet: Arc<PhysicalFleet>,
    /// When each GPU went idle, across joins.
    pub idle: IdleClock,
    /// Node names the config says are one host.
    pub aliases: Aliases,
    /// The GPUs view lists physical GPUs (true) or each source's devices (false).
    pub by_gpu: bool,
    /// The rows shown: indexes into `fleet.gpus`, after the flag filter.
    pub rows: Vec<usize>,
    /// The list's cursor.
    pub cursor: Cursor,
    /// Only GPUs with this flag, when set.
    pub flag_filter: Option<&'static str>,
    /// The GPU whose holder tree is open (its `PhysicalGpu::id`), and its scroll.
    pub open: Option<(String, u16)>,
    /// Where Esc returns once the open GPU is closed (`:gpu` from another view).
    pub back_to: Option<View>,
    /// Whether and how joins run off the update step.
    pub background: BackgroundJoin,
    /// What the joins keep between changes.
    pub kept: KeptJoin,
}

/// The join kept between changes (`physical::Joiner`: each source's snapshot prepared
/// once), shared by the state and the one join in flight. A cache: it is equal to any
/// other, so states compare by what they show.
#[derive(Clone, Default)]
pub struct KeptJoin(Arc<Mutex<Joiner>>);

impl PartialEq for KeptJoin {
    fn eq(&self, _: &KeptJoin) -> bool {
        true
    }
}

impl std::fmt::Debug for KeptJoin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeptJoin")
    }
}

/// The join off the update step (the live console: `Effect::Join`, answered by
/// `Msg::Joined`); when off, a change joins at once (tests, one-shot screens).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackgroundJoin {
    /// Joins run in the background.
    pub on: bool,
    /// A join is in flight.
    pub in_flight: bool,
    /// A source's data changed since the last join was asked for.
    pub stale: bool,
}

/// What a join reads: every source's latest data, shared with the state, not copied.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinInput {
    /// Per source that has data: its position, name, engine and snapshot.
    pub sources: Vec<SharedSource>,
    /// Node names the config says are one host.
    pub aliases: Aliases,
    /// What the last join kept.
    pub kept: KeptJoin,
}

impl JoinInput {
    /// Joins them, preparing again only the sources whose snapshot changed
    /// (`physical::Joiner`).
    pub fn join(&self) -> PhysicalFleet {
        // A join that panicked left a cache that may be half made: start it again.
        let mut joiner = self.kept.0.lock().unwrap_or_else(|poisoned| {
            let mut j = poisoned.into_inner();
            *j = Joiner::default();
            j
        });
        joiner.join(&self.sources, &self.aliases)
    }
}

impl JoinInput {
    /// Joins them as `join` does when every device stays where the last join put it (a
    /// change of readings, or of claims on the same devices: only what changed is built
    /// again), at once and for little (`physical::Joiner::refresh`).
    ///
    /// `shown`, the join on screen, is let go of first: it shares its GPUs with the kept
    /// join, which then changes the GPUs a change touches in place instead of copying
    /// them. It comes back untouched, with nothing done, when the devices would be
    /// grouped again.
    pub fn refresh(&self, shown: Arc<PhysicalFleet>) -> Result<PhysicalFleet, Arc<PhysicalFleet>> {
        let Ok(mut joiner) = self.kept.0.lock() else {
            return Err(shown);
        };
        if !joiner.stays(&self.sources, &self.aliases) {
            return Err(shown);
        }
        drop(shown);
        Ok(joiner.join(&self.sources, &self.aliases))
    }
}

impl PhysicalView {
    /// The GPU on the selected row.
    pub fn selected(&self) -> Option<&PhysicalGpu> {
        let i = *self.rows.get(self.cursor.selected)?;
        self.fleet.gpus.get(i).map(|g| &**g)
    }

    /// The GPU whose holder tree is open.
    pub fn open_gpu(&self) -> Option<&PhysicalGpu> {
        let (id, _) = self.open.as_ref()?;
        self.fleet.gpus.iter().map(|g| &**g).find(|g| g.is(id))
    }

    /// Rebuilds the rows from the flag filter and the GPUs list's text filter (matched
    /// against the GPU's place, model, sources, holders and flags), keeping the selected
    /// GPU selected.
    pub fn reshape(&mut self, text: &str) {
        let was = self.selected().map(PhysicalGpu::id);
        let needle = text.trim().to_lowercase();
        self.rows = self
            .fleet
            .gpus
            .iter()
            .enumerate()
            .filter(|(_, g)| self.flag_filter.is_none_or(|f| g.has_flag(f)))
            .filter(|(_, g)| needle.is_empty() || matches(g, &needle))
            .map(|(i, _)| i)
            .collect();
        if let Some(id) = was
            && let Some(at) = self
                .rows
                .iter()
                .position(|&i| self.fleet.gpus.get(i).is_some_and(|g| g.is(&id)))
        {
            self.cursor.selected = at;
        }
        self.cursor.selected = self.cursor.selected.min(self.rows.len().saturating_sub(1));
        self.cursor.offset = self.cursor.offset.min(self.cursor.selected);
    }
}

/// Whether a GPU's words contain `needle` (lower case).
fn matches(g: &PhysicalGpu, needle: &str) -> bool {
    g.place().contains(needle)
        || g.model.to_lowercase().contains(needle)
        || g.uuid.as_deref().is_some_and(|u| u.contains(needle))
        || g.seen_by
            .iter()
            .any(|s| s.source_name.to_lowercase().contains(needle))
        || g.holders.iter().any(|h| {
            h.label.to_lowercase().contains(needle) || h.project.to_lowercase().contains(needle)
        })
        || g.flags.iter().any(|f| f.word().contains(needle))
}

impl State {
    /// Every source's devices joined into physical GPUs, as of the last change: what a
    /// view drawing physical GPUs (the by-GPU list, a fleet map) reads.
    pub fn physical_fleet(&self) -> &PhysicalFleet {
        &self.physical.fleet
    }

    /// A source's data changed: joins every source's latest data into physical GPUs again
    /// now, or marks the join stale for the background (`BackgroundJoin`).
    pub fn rejoin_physical(&mut self) {
        if self.physical.background.on {
            self.physical.background.stale = true;
        } else {
            let fleet = self.join_input().join();
            self.take_joined(fleet);
        }
    }

    /// Takes the telemetry of `sources` (their data changed in telemetry alone) into the
    /// physical GPUs at once, shared by other sources or not, through the kept join's
    /// cheap path (`JoinInput::refresh`: those GPUs take the new readings, nothing is
    /// grouped or placed again), with the idle flags at `now`; `false` when a join is
    /// needed: one is in flight or due (its answer would not have this telemetry), or the
    /// devices would be grouped again.
    pub fn refresh_physical(&mut self, sources: &BTreeSet<usize>) -> bool {
        let b = self.physical.background;
        if b.in_flight || b.stale {
            return false;
        }
        if sources
            .iter()
            .any(|&i| self.sources.get(i).and_then(|s| s.data.as_ref()).is_none())
        {
            return false;
        }
        let shown = std::mem::take(&mut self.physical.fleet);
        match self.join_input().refresh(shown) {
            Ok(fleet) => {
                self.take_joined(fleet);
                true
            }
            Err(shown) => {
                self.physical.fleet = shown;
                false
            }
        }
    }

    /// What the next join reads.
    pub fn join_input(&self) -> JoinInput {
        JoinInput {
            sources: self
                .sources
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    Some(SharedSource {
                        source: i,
                        name: s.name.clone(),
                        engine: s.kind.gpu_engine(),
                        snapshot: Arc::clone(s.data.as_ref()?),
                    })
                })
                .collect(),
            aliases: self.physical.aliases.clone(),
            kept: self.physical.kept.clone(),
        }
    }

    /// Takes a join's result: notes which GPUs are idle at `now`, and reshapes the by-GPU
    /// rows (the caller rebuilds what else reads the join).
    pub fn take_joined(&mut self, mut fleet: PhysicalFleet) {
        self.physical.idle.observe(&mut fleet, self.now);
        self.physical.fleet = Arc::new(fleet);
        self.physical.reshape(&self.gpus.filter);
    }

    /// Opens the holder tree of the physical GPU `text` names (`NODE:INDEX`), when the
    /// join knows it; Esc goes back to the view it was opened from.
    pub fn open_physical_named(&mut self, text: &str) -> Option<()> {
        let (node, index) = text
            .trim()
            .rsplit_once(':')
            .or_else(|| text.trim().rsplit_once(char::is_whitespace))?;
        let index: u32 = index.trim().parse().ok()?;
        let id = self.physical.fleet.find(node.trim(), index)?.id();
        self.open_physical(&id);
        Some(())
    }

    /// Whether the physical GPU `text` names is seen by more than one source.
    pub fn physical_shared(&self, text: &str) -> bool {
        let Some((node, index)) = text.trim().rsplit_once(':') else {
            return false;
        };
        index
            .trim()
            .parse()
            .ok()
            .and_then(|i| self.physical.fleet.find(node.trim(), i))
            .is_some_and(|g| g.source_names().len() > 1)
    }

    /// Opens the holder tree of the GPU `id` in the by-GPU list.
    pub fn open_physical(&mut self, id: &str) {
        if self.view != View::Gpus {
            self.physical.back_to = Some(self.view);
        }
        self.view = View::Gpus;
        self.physical.by_gpu = true;
        self.physical.flag_filter = None;
        self.physical.reshape(&self.gpus.filter);
        if let Some(at) = self
            .physical
            .rows
            .iter()
            .position(|&i| self.physical.fleet.gpus.get(i).is_some_and(|g| g.is(id)))
        {
            self.physical.cursor.selected = at;
        }
        self.physical.open = Some((id.to_string(), 0));
        self.dirty = true;
    }

    /// Steps the by-GPU list's flag filter: each flag in turn, then none.
    pub fn next_physical_filter(&mut self) {
        let next = match self.physical.flag_filter {
            None => Some(FLAG_FILTERS[0]),
            Some(f) => FLAG_FILTERS
                .iter()
                .position(|x| *x == f)
                .and_then(|i| FLAG_FILTERS.get(i + 1))
                .copied(),
        };
        self.physical.flag_filter = next;
        self.physical.cursor = Cursor::default();
        self.physical.reshape(&self.gpus.filter);
        self.dirty = true;
    }
}
