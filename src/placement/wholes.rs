//! Whole free devices, counted as the cells change: how many nodes have exactly k devices
//! that are wholly free (nothing on them, schedulable), per class and over all classes.
//! Whether a request for k whole devices fits anywhere is then a lookup, not a walk of
//! the free-memory index and a count over every node's cells: work fetch asks it of every
//! waiting form at every change of the fleet, and on a full fleet the walk found nothing
//! after weighing dozens of nodes.

use super::cells::{Cell, OFF};
use super::fleet::{Demand, Fleet};
use crate::request::GpuForm;
use crate::units::{Slots, Units};

/// Nodes by how many wholly free devices they have.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Wholes {
    /// `per_class[c][k]`: nodes with exactly k wholly free devices of class c.
    per_class: Vec<Vec<u32>>,
    /// `any[k]`: nodes with exactly k wholly free devices of any classes.
    any: Vec<u32>,
}

impl Wholes {
    /// Counts a node's cells in (the recount the invariant check compares with).
    fn count(&mut self, classes: &[super::index::Class], cells: &[Cell]) {
        let whole = |c: &Cell| is_whole(classes, c);
        let mut total = 0;
        for (i, cell) in cells.iter().enumerate() {
            if !whole(cell) {
                continue;
            }
            total += 1;
            // Each class once, at its first wholly free cell.
            if cells[..i].iter().any(|o| o.class == cell.class && whole(o)) {
                continue;
            }
            let k = cells
                .iter()
                .filter(|o| o.class == cell.class && whole(o))
                .count();
            self.moved(Some(cell.class as usize), 0, k);
        }
        self.moved(None, 0, total);
    }

    /// A node's count of wholly free devices of class `c` (`None`: of any) went from
    /// `from` to `to`.
    fn moved(&mut self, c: Option<usize>, from: usize, to: usize) {
        if from == to {
            return;
        }
        let counts = match c {
            Some(c) => {
                if self.per_class.len() <= c {
                    self.per_class.resize(c + 1, Vec::new());
                }
                &mut self.per_class[c]
            }
            None => &mut self.any,
        };
        bump(counts, from, false);
        bump(counts, to, true);
    }

    /// The same counts without the trailing zeros a count that went up and down leaves.
    pub(super) fn trimmed(&self) -> Wholes {
        let trim = |v: &Vec<u32>| {
            let end = v.iter().rposition(|&x| x > 0).map_or(0, |i| i + 1);
            v[..end].to_vec()
        };
        let mut per_class: Vec<Vec<u32>> = self.per_class.iter().map(trim).collect();
        while per_class.last().is_some_and(Vec::is_empty) {
            per_class.pop();
        }
        Wholes {
            per_class,
            any: trim(&self.any),
        }
    }

    /// Whether some node has at least `k` wholly free devices of class `c` (`None`: of
    /// any classes).
    fn some_node_has(&self, c: Option<usize>, k: usize) -> bool {
        let counts = match c {
            Some(c) => self.per_class.get(c).map_or(&[][..], Vec::as_slice),
            None => self.any.as_slice(),
        };
        counts.iter().skip(k.max(1)).any(|&nodes| nodes > 0)
    }
}

/// Whether a cell is wholly free: schedulable, nothing on it.
fn is_whole(classes: &[super::index::Class], cell: &Cell) -> bool {
    cell.class != OFF
        && cell.empty
        && cell.slots == Slots::FULL
        && cell.compute == Units::FULL
        && classes
            .get(cell.class as usize)
            .is_some_and(|c| cell.memory >= c.capacity)
}

/// Moves one node in or out of the count of nodes with `k` (nothing for 0).
fn bump(counts: &mut Vec<u32>, k: usize, add: bool) {
    if k == 0 {
        return;
    }
    if counts.len() <= k {
        counts.resize(k + 1, 0);
    }
    if add {
        counts[k] += 1;
    } else {
        counts[k] = counts[k].saturating_sub(1);
    }
}

impl Fleet {
    /// Sets a device's cell, keeping the counts of wholly free devices: one pass over its
    /// node's cells, and only when the device becomes or stops being wholly free (a
    /// placement changes a device's cell twice, out of the index and back).
    pub(super) fn set_cell(&mut self, n: usize, d: usize, cell: Cell) {
        let old = self.cells.set(n, d, cell);
        let (was, is) = (
            is_whole(&self.classes, &old),
            is_whole(&self.classes, &cell),
        );
        if !was && !is {
            return;
        }
        // The node's counts after the change; before it, the one device differs.
        let (mut total, mut of_old, mut of_new) = (0, 0, 0);
        for c in self.cells_of(n) {
            if is_whole(&self.classes, c) {
                total += 1;
                of_old += usize::from(c.class == old.class);
                of_new += usize::from(c.class == cell.class);
            }
        }
        let w = &mut self.wholes;
        w.moved(None, total + usize::from(was) - usize::from(is), total);
        if was && is && old.class == cell.class {
            return;
        }
        if was {
            w.moved(Some(old.class as usize), of_old + 1, of_old);
        }
        if is {
            w.moved(Some(cell.class as usize), of_new - 1, of_new);
        }
    }

    /// Whether a request for whole devices (anywhere: no node, no pins) fits now, from
    /// the counts: `None` where they cannot say (not whole devices, CPU asked for, or a
    /// request that may use some classes and not others), and the search must.
    pub(super) fn wholes_fit(&self, demand: &Demand, form: &GpuForm) -> Option<bool> {
        if !form.is_exclusive() || demand.cpus.is_some() {
            return None;
        }
        let count = form.device_count() as usize;
        if count == 0 {
            return None;
        }
        let allowed = |c: &super::index::Class| {
            demand
                .accelerator
                .as_ref()
                .is_none_or(|a| a.matches(&c.model, Some(c.capacity)))
                && demand.model.as_deref().is_none_or(|m| m == c.model)
        };
        let mut matching = self
            .classes
            .iter()
            .enumerate()
            .filter(|(_, c)| allowed(c))
            .map(|(i, _)| i);
        let first = matching.next();
        let more = matching.next().is_some();
        let all = self.classes.iter().all(allowed);
        match (first, more, all) {
            (None, ..) => Some(false),
            (Some(_), _, true) => Some(self.wholes.some_node_has(None, count)),
            (Some(c), false, false) => Some(self.wholes.some_node_has(Some(c), count)),
            (Some(_), true, false) => None,
        }
    }

    /// The counts worked out afresh from the cells (the invariant check compares).
    pub(super) fn wholes_recounted(&self) -> Wholes {
        let mut w = Wholes::default();
        for n in 0..self.nodes.len() {
            w.count(&self.classes, self.cells_of(n));
        }
        w
    }
}
