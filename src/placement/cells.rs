//! Every device's free memory, compute and slots in one flat array, node after node, so
//! that counting on every node of a large fleet the devices that could take a share reads
//! a few contiguous kilobytes instead of chasing each device or walking the free-memory
//! index: how a multi-device request that fits nowhere is found out without weighing
//! every node, and how its refusal is counted (`summary`).

use std::sync::Arc;

use super::explain::static_verdict;
use super::fleet::{Demand, Fleet};
use super::model::Device;
use crate::request::{GpuForm, Milli, PerDevice};
use crate::shared::SharedVec;
use crate::units::{Bytes, Slots, Units};

/// One device's free figures, and its class in the index (`OFF`: it takes no claims).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Cell {
    pub(super) memory: Bytes,
    pub(super) compute: Units,
    pub(super) slots: Slots,
    /// No slot taken: an exclusive share may land.
    pub(super) empty: bool,
    /// Position of its class in `Fleet::classes`, or `OFF`.
    pub(super) class: u32,
}

/// The class of a device that takes no claims (cordoned, unhealthy, lost, memory unknown).
pub(super) const OFF: u32 = u32::MAX;

impl Cell {
    /// A device's figures now, in class `class`.
    pub(super) fn of(dev: &Device, class: u32) -> Cell {
        Cell {
            memory: dev.memory_free(),
            compute: dev.compute_free(),
            slots: dev.slots_free(),
            empty: dev.slots_allocated.0 == 0,
            class,
        }
    }

    /// A device that takes no claims.
    pub(super) fn off() -> Cell {
        Cell {
            memory: Bytes(0),
            compute: Units(0),
            slots: Slots(0),
            empty: false,
            class: OFF,
        }
    }

    /// `Device::fits`, on the copy.
    pub(super) fn fits(&self, need: &PerDevice) -> bool {
        need.memory <= self.memory
            && need.compute <= self.compute
            && need.slots <= self.slots
            && (!need.exclusive || self.empty)
    }
}

/// Nodes whose cells share one chunk.
const NODES_PER_CHUNK: usize = 64;

/// Every device's cell, node after node, in chunks of 64 nodes each behind an `Arc`: a
/// node's cells stay contiguous (read as one slice), a copy of the fleet shares the chunks,
/// and a change copies the one chunk it touches while a copy shares it.
#[derive(Clone, Debug, Default)]
pub(super) struct Cells {
    /// Chunk k: the cells of nodes 64k to 64k + 63.
    chunks: Vec<Arc<Vec<Cell>>>,
    /// Each node's first cell in its chunk.
    first: SharedVec<u32>,
}

impl Cells {
    /// Adds a node's `devices` cells, all off.
    pub(super) fn push_node(&mut self, devices: usize) {
        let n = self.first.len();
        if n.is_multiple_of(NODES_PER_CHUNK) {
            self.chunks.push(Arc::new(Vec::new()));
        }
        let Some(chunk) = self.chunks.last_mut() else {
            return;
        };
        let chunk = Arc::make_mut(chunk);
        // Positions fit in u32: 64 nodes of 2^26 devices are never built.
        self.first.push(chunk.len() as u32);
        chunk.extend((0..devices).map(|_| Cell::off()));
    }

    /// Where node `n`'s cells are: its chunk and the range in it.
    fn place(&self, n: usize) -> (usize, usize, usize) {
        let k = n / NODES_PER_CHUNK;
        let start = self.first[n] as usize;
        let end = if !(n + 1).is_multiple_of(NODES_PER_CHUNK) && n + 1 < self.first.len() {
            self.first[n + 1] as usize
        } else {
            self.chunks[k].len()
        };
        (k, start, end)
    }

    /// Node `n`'s cells, in device order.
    pub(super) fn of(&self, n: usize) -> &[Cell] {
        let (k, start, end) = self.place(n);
        &self.chunks[k][start..end]
    }

    /// Sets device `d` of node `n`'s cell, answering the one it replaces.
    pub(super) fn set(&mut self, n: usize, d: usize, cell: Cell) -> Cell {
        let (k, start, _) = self.place(n);
        std::mem::replace(&mut Arc::make_mut(&mut self.chunks[k])[start + d], cell)
    }
}

impl Fleet {
    /// Node `n`'s devices' cells, in device order.
    pub(super) fn cells_of(&self, n: usize) -> &[Cell] {
        self.cells.of(n)
    }

    /// Per class, the share a device of it would take (`None`: it never can, or the
    /// request rules its model out).
    pub(super) fn class_needs(&self, demand: &Demand, form: &GpuForm) -> Vec<Option<PerDevice>> {
        self.classes
            .iter()
            .map(|c| static_verdict(&c.model, Some(c.capacity), demand, form).ok())
            .collect()
    }

    /// Whether any node has `count` devices that take their share now and the CPU asked
    /// for: the condition under which `node_plan` gives a node a plan.
    pub(super) fn any_node_fits(
        &self,
        needs: &[Option<PerDevice>],
        count: usize,
        cpus: Option<Milli>,
    ) -> bool {
        (0..self.nodes.len()).any(|n| {
            let cells = self.cells_of(n);
            cells.len() >= count && fitting(cells, needs) >= count && self.cpu_ok(n, cpus)
        })
    }
}

/// How many of these devices take their share now.
pub(super) fn fitting(cells: &[Cell], needs: &[Option<PerDevice>]) -> usize {
    cells
        .iter()
        .filter(|c| {
            needs
                .get(c.class as usize)
                .and_then(Option::as_ref)
                .is_some_and(|need| c.fits(need))
        })
        .count()
}
