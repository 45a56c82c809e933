//! The Overview's fleet map: every GPU of the shown sources as one cell, grouped by source
//! and node, its state read from the snapshot when the data or the Overview's filter
//! change (never per frame), and how the cells are laid out in a given area: one GPU per
//! cell with node names when they fit, else packed, else two GPUs per cell, else one cell
//! per node. Drawing and the arrow keys both read the same layout, so the cursor moves
//! over what is drawn.

use std::collections::HashSet;
use std::ops::Range;

use ratatui::layout::Rect;

use crate::console::lists::{GpuFilter, device_words, words_match};
use crate::ids::ClaimId;
use crate::physical::GpuFlag;
use crate::placement::Health;
use crate::snapshot::DeviceView;

use super::{GpuName, State};

/// What a GPU's cell says, the most urgent first (a cell standing for several GPUs shows
/// the first of theirs in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CellState {
    /// Its source's data is stale: nothing it says can be trusted now.
    Stale,
    /// Lost, or reported unhealthy.
    Lost,
    /// Held by holders (of one engine or several) that are not nested in each other and
    /// together hold more than the GPU has: from the join of the sources by physical GPU
    /// (`physical`), which no source alone can tell.
    DoubleBooked,
    /// A claim on it uses more memory than it reserved.
    OverLimit,
    /// Cordoned: taking no new claims.
    Cordoned,
    /// Memory reserved, the GPU doing nothing lately.
    Idle,
    /// Allocated, with no memory, compute or slot left to claim.
    Full,
    /// Shared: allocated, with room for more.
    Shared,
    /// Nothing allocated.
    Free,
}

impl CellState {
    /// Every state, in legend order (the most urgent first).
    pub const ALL: [CellState; 9] = [
        CellState::Stale,
        CellState::Lost,
        CellState::DoubleBooked,
        CellState::OverLimit,
        CellState::Cordoned,
        CellState::Idle,
        CellState::Full,
        CellState::Shared,
        CellState::Free,
    ];

    /// The glyph: every state its own, so no theme (mono, 16 colours) needs colour to
    /// tell them apart.
    pub fn glyph(self) -> char {
        match self {
            CellState::Stale => '~',
            CellState::Lost => '?',
            CellState::DoubleBooked => '&',
            CellState::OverLimit => '!',
            CellState::Cordoned => '×',
            CellState::Idle => 'z',
            CellState::Full => '●',
            CellState::Shared => '◐',
            CellState::Free => '○',
        }
    }

    /// The legend's word, also matched by the Overview's filter.
    pub fn word(self) -> &'static str {
        match self {
            CellState::Stale => "stale",
            CellState::Lost => "lost",
            CellState::DoubleBooked => "double-booked",
            CellState::OverLimit => "over-limit",
            CellState::Cordoned => "cordoned",
            CellState::Idle => "idle",
            CellState::Full => "full",
            CellState::Shared => "shared",
            CellState::Free => "free",
        }
    }

    /// Position in `ALL`.
    pub fn position(self) -> usize {
        self as usize
    }

    /// A device's state, given whether its source is stale and which claims are over
    /// their limit.
    pub fn of(d: &DeviceView, stale: bool, over: &HashSet<ClaimId>) -> CellState {
        let lost = d.health != Health::Healthy || d.telemetry.as_ref().is_some_and(|t| t.lost);
        let allocated =
            d.memory_allocated.0 > 0 || d.compute_allocated.0 > 0 || !d.holders.is_empty();
        if stale {
            CellState::Stale
        } else if lost {
            CellState::Lost
        } else if d.holders.iter().any(|h| over.contains(h)) {
            CellState::OverLimit
        } else if d.cordoned {
            CellState::Cordoned
        } else if d.allocated_but_idle() {
            CellState::Idle
        } else if allocated
            && (d.memory_free.0 == 0 || d.compute_free.0 == 0 || d.slots_free.0 == 0)
        {
            CellState::Full
        } else if allocated {
            CellState::Shared
        } else {
            CellState::Free
        }
    }
}

/// One GPU's cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapCell {
    /// Its device index.
    pub index: u32,
    /// Its state.
    pub state: CellState,
    /// The Overview's filter excludes it (drawn dim).
    pub dim: bool,
}

/// One node's cells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapNode {
    /// Source position.
    pub source: usize,
    /// The name shown: the node's, after its source's when several sources are shown.
    pub label: String,
    /// The node's own name.
    pub name: String,
    /// Its cells in `FleetMap::cells`.
    pub cells: Range<usize>,
}

/// The fleet map's data, rebuilt with the rows; the cursor survives rebuilds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetMap {
    /// Every GPU's cell, node after node.
    pub cells: Vec<MapCell>,
    /// The nodes, source after source.
    pub nodes: Vec<MapNode>,
    /// GPUs per state (`CellState::position`).
    pub counts: [usize; 9],
    /// The GPU under the cursor (none: the cursor is on the totals above the map).
    pub cursor: Option<GpuName>,
}

impl State {
    /// Rebuilds the fleet map from the shown sources' data and the Overview's filter.
    pub fn rebuild_map(&mut self) {
        let needle = self.panes.overview.filter.to_lowercase();
        let named = GpuFilter::parse(&needle);
        let multi = self.shown_sources().count() > 1;
        // Each source's own name for a GPU the join flags as double-booked.
        let booked: HashSet<(usize, &str, u32)> = self
            .physical_fleet()
            .gpus
            .iter()
            .filter(|g| {
                g.flags
                    .iter()
                    .any(|f| matches!(f, GpuFlag::DoubleBooked { .. }))
            })
            .flat_map(|g| g.seen_by.iter())
            .map(|s| (s.source, &*s.node, s.index))
            .collect();
        let mut map = FleetMap {
            cursor: self.map.cursor.clone(),
            ..FleetMap::default()
        };

        for (si, s) in self.shown_sources() {
            let Some(d) = &s.data else { continue };
            let stale = s.is_stale(self.now, self.refresh_ms);
            let over: HashSet<ClaimId> = d
                .claims
                .iter()
                .filter(|c| c.over_limit)
                .map(|c| c.id)
                .collect();
            for n in &d.nodes {
                let start = map.cells.len();
                for dev in &n.devices {
                    let own = CellState::of(dev, stale, &over);
                    let state = if own > CellState::Lost
                        && booked.contains(&(si, n.name.as_str(), dev.index))
                    {
                        CellState::DoubleBooked
                    } else {
                        own
                    };
                    map.counts[state.position()] += 1;
                    let hit = match &named {
                        Some(g) => g.names(&s.name, &n.name, dev.index),
                        None => words_match(&needle, || {
                            let mut w = device_words(&s.name, &n.name, dev, stale);
                            w.push(state.word().to_string());
                            w
                        }),
                    };
                    map.cells.push(MapCell {
                        index: dev.index,
                        state,
                        dim: !hit,
                    });
                }
                map.nodes.push(MapNode {
                    source: si,
                    label: if multi {
                        format!("{}/{}", s.name, n.name)
                    } else {
                        n.name.clone()
                    },
                    name: n.name.clone(),
                    cells: start..map.cells.len(),
                });
            }
        }
        self.map = map;
    }

    /// Where the Overview puts its parts in the body: the totals (with the sparklines
    /// beside them), the fleet map, and the sources table.
    pub fn overview_areas(&self, body: Rect) -> OverviewAreas {
        let top = TOTALS_ROWS.min(body.height);
        let rest = body.height - top;
        // More sources than rows: a row per pool, without the notes under the table.
        let pooled = self.sources_pooled(rest, MAP_MIN_ROWS);
        let rows = if pooled {
            self.pool_count()
        } else {
            self.sources.len() + self.note_rows(body.width)
        };
        let want = u16::try_from(rows + 3).unwrap_or(u16::MAX);
        // The map takes what the sources leave, when that is enough to read.
        let (mut map_h, src_h) = if rest >= want + MAP_MIN_ROWS {
            (rest - want, want)
        } else {
            (0, rest)
        };
        // No taller than its cells need: the sources follow right under it.
        if map_h > 0 {
            let full = Rect::new(body.x, body.y, body.width, map_h);
            let inner = map_inner(full, &self.map);
            let rows = MapLayout::new(&self.map, inner).rows;
            let need = u16::try_from(rows)
                .unwrap_or(u16::MAX)
                .saturating_add(map_h - inner.height);
            map_h = map_h.min(need.max(MAP_MIN_ROWS));
        }
        let at = |y: u16, h: u16| Rect::new(body.x, body.y + y, body.width, h);
        OverviewAreas {
            top: at(0, top),
            map: at(top, map_h),
            sources: at(top + map_h, src_h.max(rest - map_h)),
            pooled,
        }
    }

    /// Rows the sources' notes may take under their table at `width` (their error, note,
    /// warning or telemetry note, wrapped; more rather than fewer): the map leaves them.
    fn note_rows(&self, width: u16) -> usize {
        let w = usize::from(width.saturating_sub(2)).max(1);
        self.sources
            .iter()
            .map(|s| {
                let texts = [
                    s.error.clone(),
                    s.note.clone(),
                    s.warning_note(),
                    s.data
                        .as_ref()
                        .and_then(|d| d.endpoint.telemetry_note.clone()),
                ];
                texts
                    .iter()
                    .flatten()
                    .map(|t| (s.name.len() + 2 + t.chars().count()).div_ceil(w))
                    .max()
                    .unwrap_or(0)
            })
            .sum()
    }

    /// The fleet map's layout in the area the Overview gives it (by the terminal's size).
    pub fn map_layout(&self) -> MapLayout {
        let body = Rect::new(0, 1, self.size.0, self.body_height());
        let area = self.overview_areas(body).map;
        MapLayout::new(&self.map, map_inner(area, &self.map))
    }
}

/// Rows the totals take at the top of the Overview.
pub const TOTALS_ROWS: u16 = 9;
/// The fewest rows the map is drawn in (its border, the legend, two rows of cells).
pub const MAP_MIN_ROWS: u16 = 5;

/// The Overview's parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverviewAreas {
    /// Totals and sparklines.
    pub top: Rect,
    /// The fleet map with its border and legend (height 0: no room).
    pub map: Rect,
    /// The sources table and its notes.
    pub sources: Rect,
    /// The table lists pools, not sources (`State::sources_pooled`).
    pub pooled: bool,
}

/// The legend's entries: each state with its count (double-booked only where known).
fn legend(map: &FleetMap) -> Vec<(CellState, usize)> {
    CellState::ALL
        .iter()
        .map(|s| (*s, map.counts[s.position()]))
        .filter(|(s, n)| *s != CellState::DoubleBooked || *n > 0)
        .collect()
}

/// The legend's entries as shown at `width`, on one row where it can: `○ free 12` each,
/// else the states with no GPU as `z0`, else all as `○12`.
pub fn legend_entries(map: &FleetMap, width: u16) -> Vec<(CellState, String)> {
    let items = legend(map);
    let entries = |words: &dyn Fn(usize) -> bool| -> Vec<(CellState, String)> {
        items
            .iter()
            .map(|(s, n)| {
                let text = if words(*n) {
                    format!("{} {} {n}", s.glyph(), s.word())
                } else {
                    format!("{}{n}", s.glyph())
                };
                (*s, text)
            })
            .collect()
    };
    let fits = |e: &[(CellState, String)]| {
        e.iter().map(|(_, t)| t.chars().count() + 2).sum::<usize>() <= usize::from(width) + 2
    };
    let all = entries(&|_| true);
    if fits(&all) {
        return all;
    }
    let some = entries(&|n| n > 0);
    if fits(&some) {
        return some;
    }
    entries(&|_| false)
}

/// How many rows the legend takes at `width`, its entries two spaces apart.
pub fn legend_rows(map: &FleetMap, width: u16) -> u16 {
    let mut rows = 1u16;
    let mut x = 0usize;
    for (_, text) in legend_entries(map, width) {
        let w = text.chars().count();
        if x > 0 && x + 2 + w > usize::from(width) {
            rows += 1;
            x = 0;
        }
        x += if x == 0 { w } else { 2 + w };
    }
    rows
}

/// The cells' area inside the map's border, above its legend.
pub fn map_inner(area: Rect, map: &FleetMap) -> Rect {
    if area.height < 3 || area.width < 3 {
        return Rect::new(area.x, area.y, 0, 0);
    }
    let inner = Rect::new(area.x + 1, area.y + 1, area.width - 2, area.height - 2);
    let legend = legend_rows(map, inner.width).min(inner.height);
    Rect::new(inner.x, inner.y, inner.width, inner.height - legend)
}

/// How densely the cells are packed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Density {
    /// A row per node: its name, then one cell per GPU, a space apart.
    Named,
    /// One cell per GPU, nodes a space apart, a source starting a row.
    Packed,
    /// One cell per two GPUs of a node (the more urgent state of the two).
    Pairs,
    /// One cell per node (its most urgent state).
    Nodes,
}

impl Density {
    /// What the map's title says of it.
    pub fn describe(self) -> &'static str {
        match self {
            Density::Named | Density::Packed => "a cell per GPU",
            Density::Pairs => "a cell per 2 GPUs",
            Density::Nodes => "a cell per node",
        }
    }
}

/// A cell as drawn: the GPUs it stands for, the one shown, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    /// Its GPUs in `FleetMap::cells`.
    pub cells: Range<usize>,
    /// The GPU whose state it shows (the most urgent; Enter opens it).
    pub shown: usize,
    /// Column in the area.
    pub x: u16,
    /// Row, counted from the map's first (before scrolling).
    pub row: usize,
}

/// The map laid out in an area.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapLayout {
    /// The cells' area.
    pub area: Rect,
    /// The density chosen.
    pub density: Density,
    /// Width of the node names (`Named`), else 0.
    pub label_w: u16,
    /// Columns between cells (`Named` with room: 1).
    pub gap: u16,
    /// The cells as drawn, in order.
    pub units: Vec<Unit>,
    /// Rows of cells in all (more than the area's height: the map scrolls).
    pub rows: usize,
}

impl MapLayout {
    /// The densest-needed layout of `map` in `area`: the first that fits, else one cell
    /// per node, scrolled.
    pub fn new(map: &FleetMap, area: Rect) -> MapLayout {
        let h = usize::from(area.height);
        for density in [
            Density::Named,
            Density::Packed,
            Density::Pairs,
            Density::Nodes,
        ] {
            if let Some(l) = MapLayout::with(map, area, density)
                && (l.rows <= h || density == Density::Nodes)
            {
                return l;
            }
        }
        MapLayout {
            area,
            density: Density::Nodes,
            label_w: 0,
            gap: 0,
            units: Vec::new(),
            rows: 0,
        }
    }

    fn with(map: &FleetMap, area: Rect, density: Density) -> Option<MapLayout> {
        let w = usize::from(area.width);
        if w == 0 {
            return None;
        }
        let mut units = Vec::with_capacity(map.cells.len());
        let mut label_w = 0u16;
        let mut gap = 0u16;
        let mut row = 0usize;
        let mut x = 0usize;
        match density {
            Density::Named => {
                let widest = map.nodes.iter().map(|n| n.cells.len()).max().unwrap_or(0);
                let label = map
                    .nodes
                    .iter()
                    .map(|n| n.label.chars().count())
                    .max()
                    .unwrap_or(0)
                    .min(28)
                    + 1;
                if map.nodes.len() > usize::from(area.height) || label + widest > w {
                    return None;
                }
                gap = u16::from(label + widest * 2 <= w);
                label_w = u16::try_from(label).unwrap_or(0);
                for (r, n) in map.nodes.iter().enumerate() {
                    for (i, c) in n.cells.clone().enumerate() {
                        let x = label + i * usize::from(1 + gap);
                        units.push(unit(map, c..c + 1, x, r));
                    }
                }
                row = map.nodes.len();
            }
            Density::Packed | Density::Pairs | Density::Nodes => {
                let per = match density {
                    Density::Packed => 1,
                    _ => 2,
                };
                let mut source = None;
                for n in &map.nodes {
                    let len = match density {
                        Density::Nodes => 1,
                        _ => n.cells.len().div_ceil(per),
                    };
                    let sep = usize::from(density != Density::Nodes);
                    // A source starts a row; a node goes whole to the next row when it
                    // would be cut and fits on one.
                    let new_source = source.is_some_and(|s| s != n.source);
                    if x > 0 && (new_source || (x + sep + len > w && len <= w)) {
                        row += 1;
                        x = 0;
                    } else if x > 0 {
                        x += sep;
                    }
                    source = Some(n.source);
                    if density == Density::Nodes {
                        units.push(unit(map, n.cells.clone(), x, row));
                        x += 1;
                        continue;
                    }
                    let mut c = n.cells.start;
                    while c < n.cells.end {
                        if x >= w {
                            row += 1;
                            x = 0;
                        }
                        let end = (c + per).min(n.cells.end);
                        units.push(unit(map, c..end, x, row));
                        x += 1;
                        c = end;
                    }
                }
                if !map.nodes.is_empty() {
                    row += 1;
                }
            }
        }
        Some(MapLayout {
            area,
            density,
            label_w,
            gap,
            units,
            rows: row,
        })
    }

    /// The unit showing the GPU `cursor` (by source, node and index).
    pub fn unit_of(&self, map: &FleetMap, cursor: &GpuName) -> Option<usize> {
        let (source, node, index) = cursor;
        let n = map
            .nodes
            .iter()
            .find(|n| n.source == *source && &n.name == node)?;
        let cell = n.cells.clone().find(|c| map.cells[*c].index == *index)?;
        self.units.iter().position(|u| u.cells.contains(&cell))
    }

    /// The first row shown: the cursor's row kept in view, the rest filled from the top.
    pub fn first_row(&self, cursor: Option<usize>) -> usize {
        let h = usize::from(self.area.height).max(1);
        let row = cursor.and_then(|u| self.units.get(u)).map_or(0, |u| u.row);
        row.saturating_sub(h - 1).min(self.rows.saturating_sub(h))
    }

    /// The unit a row up (`-1`) or down (`1`) from `from`, at the nearest column; `None`
    /// past the first or last row.
    pub fn vertical(&self, from: usize, delta: isize) -> Option<usize> {
        let u = self.units.get(from)?;
        let row = u.row.checked_add_signed(delta)?;
        self.units
            .iter()
            .enumerate()
            .filter(|(_, v)| v.row == row)
            .min_by_key(|(_, v)| v.x.abs_diff(u.x))
            .map(|(i, _)| i)
    }
}

fn unit(map: &FleetMap, cells: Range<usize>, x: usize, row: usize) -> Unit {
    let shown = cells
        .clone()
        .min_by_key(|c| map.cells[*c].state)
        .unwrap_or(cells.start);
    Unit {
        cells,
        shown,
        x: u16::try_from(x).unwrap_or(u16::MAX),
        row,
    }
}

impl FleetMap {
    /// The GPU a cell stands for: its source, node and index.
    pub fn gpu(&self, cell: usize) -> Option<GpuName> {
        let n = self.nodes.iter().find(|n| n.cells.contains(&cell))?;
        Some((n.source, n.name.clone(), self.cells.get(cell)?.index))
    }

    /// A unit's state: its shown GPU's; dim only when all its GPUs are.
    pub fn unit_state(&self, u: &Unit) -> (CellState, bool) {
        let state = self.cells.get(u.shown).map_or(CellState::Free, |c| c.state);
        let dim = self.cells[u.cells.clone()].iter().all(|c| c.dim);
        (state, dim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(nodes: &[(usize, &str, usize)]) -> FleetMap {
        let mut m = FleetMap::default();
        for (source, name, gpus) in nodes {
            let start = m.cells.len();
            for i in 0..*gpus {
                m.cells.push(MapCell {
                    index: i as u32,
                    state: if i == 1 {
                        CellState::Idle
                    } else {
                        CellState::Free
                    },
                    dim: false,
                });
            }
            m.nodes.push(MapNode {
                source: *source,
                label: (*name).to_string(),
                name: (*name).to_string(),
                cells: start..m.cells.len(),
            });
        }
        m
    }

    #[test]
    fn every_state_has_its_own_glyph_and_word() {
        let glyphs: HashSet<char> = CellState::ALL.iter().map(|s| s.glyph()).collect();
        let words: HashSet<&str> = CellState::ALL.iter().map(|s| s.word()).collect();
        assert_eq!(glyphs.len(), CellState::ALL.len());
        assert_eq!(words.len(), CellState::ALL.len());
        for (i, s) in CellState::ALL.iter().enumerate() {
            assert_eq!(s.position(), i);
        }
    }

    #[test]
    fn density_grows_only_as_the_area_needs() {
        let small = map(&[(0, "node-a", 4), (0, "node-b", 2)]);
        let l = MapLayout::new(&small, Rect::new(0, 0, 40, 5));
        assert_eq!((l.density, l.gap, l.label_w), (Density::Named, 1, 7));
        assert_eq!((l.units[4].x, l.units[4].row), (7, 1));
        // 1 000 nodes of 8: one cell per GPU needs 9 columns a node.
        let nodes: Vec<(usize, String, usize)> =
            (0..1000).map(|i| (0, format!("n{i}"), 8)).collect();
        let refs: Vec<(usize, &str, usize)> =
            nodes.iter().map(|(s, n, g)| (*s, n.as_str(), *g)).collect();
        let big = map(&refs);
        let l = MapLayout::new(&big, Rect::new(0, 0, 198, 200));
        assert_eq!(l.density, Density::Packed);
        let l = MapLayout::new(&big, Rect::new(0, 0, 198, 30));
        assert_eq!(l.density, Density::Pairs);
        assert!(l.rows <= 30, "{} rows", l.rows);
        // A pair shows its more urgent GPU (index 1 is idle).
        assert_eq!(l.units[0].shown, 1);
        assert_eq!(big.unit_state(&l.units[0]).0, CellState::Idle);
        let l = MapLayout::new(&big, Rect::new(0, 0, 78, 5));
        assert_eq!(l.density, Density::Nodes);
        assert!(l.rows > 5, "scrolls");
        let cursor = l.units.len() - 1;
        assert_eq!(l.first_row(Some(cursor)), l.rows - 5);
    }

    #[test]
    fn sources_start_rows_and_arrows_keep_the_column() {
        let m = map(&[(0, "a", 3), (1, "b", 3)]);
        let l = MapLayout::with(&m, Rect::new(0, 0, 20, 4), Density::Packed).unwrap();
        assert_eq!(l.rows, 2);
        assert_eq!((l.units[3].x, l.units[3].row), (0, 1));
        assert_eq!(l.vertical(2, 1), Some(5));
        assert_eq!(l.vertical(5, -1), Some(2));
        assert_eq!(l.vertical(0, -1), None);
        assert_eq!(
            l.unit_of(&m, &(1, "b".to_string(), 1)),
            Some(4),
            "found by source, node and index"
        );
    }
}
