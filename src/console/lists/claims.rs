//! The Claims list: the columns it sorts by and what a filter matches in a claim row.

use std::cmp::{Ordering, Reverse};

use crate::snapshot::{ClaimState, ClaimView};

use super::Column;

/// What the Claims list sorts by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimColumn {
    /// Source, then id.
    Id,
    /// Project, then id.
    Project,
    /// Most memory reserved first.
    Memory,
    /// Most memory used (measured) first.
    Used,
    /// Oldest first.
    Age,
    /// Pending first, then by id.
    State,
    /// Over their limit first, the furthest past their reservation first.
    Over,
}

impl Column for ClaimColumn {
    const ALL: &'static [Self] = &[
        ClaimColumn::Id,
        ClaimColumn::Project,
        ClaimColumn::Memory,
        ClaimColumn::Used,
        ClaimColumn::Age,
        ClaimColumn::State,
        ClaimColumn::Over,
    ];

    fn name(self) -> &'static str {
        match self {
            ClaimColumn::Id => "id",
            ClaimColumn::Project => "project",
            ClaimColumn::Memory => "memory",
            ClaimColumn::Used => "used",
            ClaimColumn::Age => "age",
            ClaimColumn::State => "state",
            ClaimColumn::Over => "over",
        }
    }
}

impl ClaimColumn {
    /// How two claims compare under this column, each with its source's position.
    pub fn order(self, (sa, a): (usize, &ClaimView), (sb, b): (usize, &ClaimView)) -> Ordering {
        let used = |c: &ClaimView| c.memory_used.map_or(0, |b| b.0);
        let past = |c: &ClaimView| {
            (
                !c.over_limit,
                Reverse(used(c).saturating_sub(c.memory_reserved.0)),
                c.id,
            )
        };
        match self {
            ClaimColumn::Id => (sa, a.id).cmp(&(sb, b.id)),
            ClaimColumn::Project => (&a.project, a.id).cmp(&(&b.project, b.id)),
            ClaimColumn::Memory => Reverse(a.memory_reserved).cmp(&Reverse(b.memory_reserved)),
            ClaimColumn::Used => Reverse(used(a)).cmp(&Reverse(used(b))),
            ClaimColumn::Age => a.created_at.cmp(&b.created_at),
            ClaimColumn::State => {
                (a.state != ClaimState::Pending, a.id).cmp(&(b.state != ClaimState::Pending, b.id))
            }
            ClaimColumn::Over => past(a).cmp(&past(b)),
        }
    }
}

/// The words a filter matches in a claim row: id, project, holder, node, place and form,
/// the STATE column's words (`placed idle`, `pending never infeasible`), `over-limit`,
/// and `stale` while its source is.
pub fn claim_words(c: &ClaimView, stale: bool) -> Vec<String> {
    let state = match c.state {
        ClaimState::Placed if c.idle => "placed idle",
        ClaimState::Placed => "placed",
        ClaimState::Pending if c.infeasible => "pending never infeasible",
        ClaimState::Pending => "pending",
    };
    let over = if c.over_limit { "over-limit" } else { "" };
    let stale = if stale { "stale" } else { "" };
    [
        c.id.to_string(),
        c.project.clone(),
        c.holder.clone().unwrap_or_default(),
        c.node.clone().unwrap_or_default(),
        c.place().unwrap_or_else(|| "pending".to_string()),
        c.form.clone(),
    ]
    .into_iter()
    .chain([state, over, stale].map(str::to_string))
    .collect()
}
