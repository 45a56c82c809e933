//! The Claims list: the columns it sorts by and what a filter matches in a claim row.

use std::cmp::{Ordering, Reverse};

use crate::snapshot::{ClaimState, ClaimView};

use super::Column;
use super::shown::{Columns, ShownColumn, Width};

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

/// A column the Claims view shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimField {
    /// The source's name (with several sources).
    Source,
    /// The claim's id, shortened in the middle when it must be.
    Id,
    /// placed, idle, pending, never.
    State,
    /// Its project.
    Project,
    /// Who holds it.
    Holder,
    /// Where it is, or why it waits.
    Place,
    /// Memory reserved.
    Reserved,
    /// Memory used (`!` past the reservation).
    Used,
    /// Compute reserved, in GPUs.
    Fraction,
    /// The request as written.
    Form,
    /// Time left on its lease.
    Lease,
    /// How long it has existed.
    Age,
}

impl ShownColumn for ClaimField {
    fn header(self) -> &'static str {
        match self {
            ClaimField::Source => "SRC",
            ClaimField::Id => "ID",
            ClaimField::State => "STATE",
            ClaimField::Project => "PROJECT",
            ClaimField::Holder => "HOLDER",
            ClaimField::Place => "PLACE",
            ClaimField::Reserved => "RESERVED",
            ClaimField::Used => "USED",
            ClaimField::Fraction => "FRACTION",
            ClaimField::Form => "FORM",
            ClaimField::Lease => "LEASE",
            ClaimField::Age => "AGE",
        }
    }
}

/// The Claims view's columns in `width` cells: SRC with several sources, HOLDER,
/// FRACTION and FORM from 110 columns; under 80 LEASE and AGE drop (and USED too beside
/// SRC), AGE before 110 beside SRC, so the identity columns (ID, PLACE) are never cut.
/// From 110 the ID takes the longest id shown (`longest_id` digits, up to a u64's 20)
/// keeping 16 for FORM, which fills the rest; narrower, PLACE (which says why for a
/// pending claim) takes up to 8 more.
pub fn claim_columns(width: u16, multi: bool, longest_id: usize) -> Columns<ClaimField> {
    use ClaimField as F;
    let wide = width >= 110;
    let narrow = width < 80;
    let mut c = Columns::new();
    if multi {
        c.fixed([(F::Source, if wide { 8 } else { 6 })]);
    }
    c.fixed([
        (F::Id, 6),
        (F::State, 7),
        (F::Project, if narrow { 8 } else { 10 }),
    ]);
    if wide {
        c.fixed([(F::Holder, 10)]);
    }
    let place: u16 = match width {
        170.. => 26,
        110.. => 20,
        _ => 16,
    };
    c.fixed([(F::Place, place), (F::Reserved, 8)]);
    if !(narrow && multi) {
        c.fixed([(F::Used, 7)]);
    }
    if wide {
        c.fixed([(F::Fraction, 10)]);
        c.push(F::Form, Width::Fill);
    }
    // Lease and age, in two units: `59m59s`.
    if !narrow {
        c.fixed([(F::Lease, 7)]);
        if wide || !multi {
            c.fixed([(F::Age, 6)]);
        }
    }
    // What the columns leave: borders, and one gap fewer than columns.
    let taken = c.fixed_total() + u16::try_from(c.len()).unwrap_or(u16::MAX);
    let spare = width.saturating_sub(1 + taken);
    if wide {
        let longest = u16::try_from(longest_id).unwrap_or(u16::MAX);
        let id = longest.clamp(6, (6 + spare.saturating_sub(16)).min(20));
        c.set(F::Id, Width::Fixed(id));
    } else {
        c.set(F::Place, Width::Fixed(place + spare.min(8)));
    }
    let gaps = u16::try_from(c.len().saturating_sub(1)).unwrap_or(u16::MAX);
    c.fill = usize::from(width.saturating_sub(2 + c.fixed_total() + gaps));
    c
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claim_columns_keep_id_and_place_and_fill_with_form() {
        let headers = |w, multi| claim_columns(w, multi, 6).headers().join(" ");
        assert_eq!(headers(79, true), "SRC ID STATE PROJECT PLACE RESERVED");
        assert_eq!(
            headers(100, true),
            "SRC ID STATE PROJECT PLACE RESERVED USED LEASE"
        );
        assert_eq!(
            headers(120, false),
            "ID STATE PROJECT HOLDER PLACE RESERVED USED FRACTION FORM LEASE AGE"
        );
        // Narrow: PLACE takes up to 8 of what is spare.
        let c = claim_columns(100, false, 6);
        assert_eq!(c.width_of(ClaimField::Place), Some(24));
        // Wide: the ID grows to the longest id, at most 20, and FORM keeps the rest.
        let c = claim_columns(200, false, 20);
        assert_eq!(c.width_of(ClaimField::Id), Some(20));
        let gaps = c.len() - 1;
        assert_eq!(2 + gaps + usize::from(c.fixed_total()) + c.fill, 200);
        assert_eq!(c.width_of(ClaimField::Form), Some(c.fill));
    }
}
