//! Selection by identity: the list views remember *which* GPU, claim or project the
//! operator picked (source + node + index, source + claim id, source + project name), not
//! its row position, so a refresh that re-sorts or removes rows never moves an action onto
//! another item. A pick whose item is gone stays gone (nothing highlighted, actions
//! refused with a message) until the operator moves the cursor.

use crate::console::lists::Picked;

use super::{ClaimKey, DevKey, ProjKey, State, View};

/// The list views that keep a pick.
const LISTS: [View; 3] = [View::Gpus, View::Claims, View::Ledger];

impl State {
    /// The pick of a list view (none for a view without a list).
    fn picked(&self, view: View) -> Option<&Picked> {
        match view {
            View::Gpus => self.gpus.picked.as_ref(),
            View::Claims => self.claims.picked.as_ref(),
            View::Ledger => self.projects.picked.as_ref(),
            View::Overview | View::Detail | View::Events | View::ClaimDetail | View::Usage => None,
        }
    }

    /// Sets the pick of a list view (nothing for a view without a list).
    fn set_picked(&mut self, view: View, pick: Option<Picked>) {
        match view {
            View::Gpus => self.gpus.picked = pick,
            View::Claims => self.claims.picked = pick,
            View::Ledger => self.projects.picked = pick,
            View::Overview | View::Detail | View::Events | View::ClaimDetail | View::Usage => {}
        }
    }

    /// The identity of the item at `row` of a list view.
    fn identity_at(&self, view: View, row: usize) -> Option<Picked> {
        match view {
            View::Gpus => {
                let k = *self.gpus.rows.get(row)?;
                let (_, n, d) = self.device(k)?;
                Some(Picked::Device(k.source, n.name.clone(), d.index))
            }
            View::Claims => {
                let k = *self.claims.rows.get(row)?;
                let (_, c) = self.claim(k)?;
                Some(Picked::Claim(k.source, c.id))
            }
            View::Ledger => {
                let k = *self.projects.rows.get(row)?;
                let (_, p) = self.project(k)?;
                Some(Picked::Project(k.source, p.name.clone()))
            }
            _ => None,
        }
    }

    /// Where a picked item is in its view's rows now, if it is still there.
    fn row_of(&self, view: View, pick: &Picked) -> Option<usize> {
        match (view, pick) {
            (View::Gpus, Picked::Device(s, node, index)) => self.gpus.rows.iter().position(|k| {
                k.source == *s
                    && self
                        .device(*k)
                        .is_some_and(|(_, n, d)| &n.name == node && d.index == *index)
            }),
            (View::Claims, Picked::Claim(s, id)) => {
                self.claims.rows.iter().position(|k| {
                    k.source == *s && self.claim(*k).is_some_and(|(_, c)| c.id == *id)
                })
            }
            (View::Ledger, Picked::Project(s, name)) => self.projects.rows.iter().position(|k| {
                k.source == *s && self.project(*k).is_some_and(|(_, p)| &p.name == name)
            }),
            _ => None,
        }
    }

    /// Records the item under the cursor of `view` as the operator's pick (after the
    /// operator moved the cursor).
    pub fn pick_under_cursor(&mut self, view: View) {
        if LISTS.contains(&view) {
            let row = self.cursor_of(view).selected;
            self.set_picked(view, self.identity_at(view, row));
        }
    }

    /// After the rows were rebuilt: moves each list's cursor to its picked item; an item
    /// that is gone stays picked (and gone). With no pick yet, picks the row under the
    /// cursor.
    pub(super) fn follow_picks(&mut self) {
        for v in LISTS {
            match self.picked(v).cloned() {
                Some(pick) => {
                    if let Some(row) = self.row_of(v, &pick) {
                        self.cursor_mut(v).selected = row;
                    }
                }
                None => self.set_picked(v, self.identity_at(v, self.cursor_of(v).selected)),
            }
        }
    }

    /// Back to live from a rewind: the view looked at, its filter, sort and selection
    /// (by identity, so the same claim or GPU stays selected where it still is), and the
    /// detail that was open, are kept from the rewound state `then`.
    pub fn browse_as(&mut self, then: &State) {
        self.view = then.view;
        self.came_from = then.came_from;
        self.source_filter = then.source_filter;
        self.detail.clone_from(&then.detail);
        self.claim_detail = then.claim_detail;
        self.gpus.filter.clone_from(&then.gpus.filter);
        self.gpus.sort = then.gpus.sort;
        self.gpus.reverse = then.gpus.reverse;
        self.gpus.picked.clone_from(&then.gpus.picked);
        self.claims.filter.clone_from(&then.claims.filter);
        self.claims.sort = then.claims.sort;
        self.claims.reverse = then.claims.reverse;
        self.claims.picked.clone_from(&then.claims.picked);
        self.projects.filter.clone_from(&then.projects.filter);
        self.projects.sort = then.projects.sort;
        self.projects.reverse = then.projects.reverse;
        self.projects.picked.clone_from(&then.projects.picked);
        self.rebuild_rows();
        self.rebuild_usage();
        self.follow_picks();
        self.repick_if_gone();
    }

    /// Rebuilds the rows after the operator changed the filter, sort or shown sources.
    pub fn reshape_rows(&mut self) {
        self.rebuild_rows();
        self.rebuild_usage();
        self.repick_if_gone();
    }

    /// After the operator changed the filter, sort or shown sources: a pick that the
    /// change removed is replaced by the row now under the cursor.
    pub fn repick_if_gone(&mut self) {
        for v in LISTS {
            if self.pick_gone(v).is_some() {
                self.set_picked(v, None);
                self.follow_picks();
            }
        }
    }

    /// The row of `view` that is selected: the picked item's row, or none when the
    /// picked item is gone.
    pub fn selected_row(&self, view: View) -> Option<usize> {
        let row = self.cursor_of(view).selected;
        if !LISTS.contains(&view) {
            return Some(row);
        }
        match self.picked(view) {
            Some(pick) => self.row_of(view, pick).filter(|r| *r == row),
            None => None,
        }
    }

    /// The picked item of `view` when it is no longer listed, in words (`claim 131 on
    /// demo`), for refusing an action on it.
    pub fn pick_gone(&self, view: View) -> Option<String> {
        let pick = self.picked(view)?;
        if self.row_of(view, pick).is_some() {
            return None;
        }
        let source = |s: &usize| {
            self.sources
                .get(*s)
                .map_or_else(|| format!("source {s}"), |x| x.name.clone())
        };
        Some(match pick {
            Picked::Device(s, node, index) => format!("GPU {node}:{index} on {}", source(s)),
            Picked::Claim(s, id) => format!("claim {id} on {}", source(s)),
            Picked::Project(s, name) => format!("project {name} on {}", source(s)),
        })
    }

    /// The selected device row (GPUs view), if its picked GPU is still listed.
    pub fn selected_device(&self) -> Option<DevKey> {
        self.gpus.rows.get(self.selected_row(View::Gpus)?).copied()
    }

    /// The selected claim row (Claims view), if its picked claim is still listed.
    pub fn selected_claim(&self) -> Option<ClaimKey> {
        self.claims
            .rows
            .get(self.selected_row(View::Claims)?)
            .copied()
    }

    /// The selected project row, if its picked project is still listed.
    pub fn selected_project(&self) -> Option<ProjKey> {
        self.projects
            .rows
            .get(self.selected_row(View::Ledger)?)
            .copied()
    }
}
