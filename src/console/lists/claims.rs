//! The Claims list: the columns it sorts by and what a filter matches in a claim row.

use std::cmp::{Ordering, Reverse};

use crate::snapshot::{ClaimState, ClaimView};

use super::Column;
use super::shown::{Columns, ShownColumn, Width};

/// What the Claims list sorts by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimColumn {
    /// Source, then id (an engine's claims by name).
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
            // gpuboard's claims by number, an engine's by its name.
            ClaimColumn::Id => (sa, &a.name, a.id).cmp(&(sb, &b.name, b.id)),
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

/// The longest ID and HOLDER among the Claims rows, in characters (kept with the rows so
/// a draw does not walk 20 000 claims).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClaimWidths {
    /// The longest id as shown (an engine's name, or gpuboard's number).
    pub id: usize,
    /// The longest holder.
    pub holder: usize,
}

/// The ID column at its widest: a `NAMESPACE/POD` longer than this is cut in the middle.
const ID_MAX: u16 = 32;
/// The HOLDER column at its widest.
const HOLDER_MAX: u16 = 24;
/// What PLACE lends the ID from 110 columns when what is spare is not enough.
const PLACE_LENT: u16 = 4;

/// The Claims view's columns in `width` cells: SRC with several sources, HOLDER,
/// FRACTION and FORM from 110 columns; under 80 LEASE and AGE drop (and USED too beside
/// SRC), AGE before 110 beside SRC, so the identity columns (ID, PLACE) are never cut.
/// What is spare goes first to the ID, up to the longest shown (`longest.id`, at most
/// `ID_MAX`), so an engine's name can be read and typed whole (from 110, PLACE lends it up
/// to `PLACE_LENT` more); then from 110 to HOLDER
/// up to the longest holder, keeping 8 for FORM, which fills the rest; narrower, PLACE
/// (which says why for a pending claim) takes up to 8 more.
pub fn claim_columns(width: u16, multi: bool, longest: ClaimWidths) -> Columns<ClaimField> {
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
    let mut spare = width.saturating_sub(1 + taken);
    // FORM keeps 8 of what is spare (the panel below shows it whole).
    let kept = if wide { 8 } else { 0 };
    // A column grown from `from` towards `want` (at most `most`) out of what is spare.
    let mut grow = |c: &mut Columns<ClaimField>, field, from: u16, want: usize, most: u16| {
        let want = u16::try_from(want).unwrap_or(u16::MAX);
        let to = want.clamp(from, (from + spare.saturating_sub(kept)).min(most));
        spare = spare.saturating_sub(to - from);
        c.set(field, Width::Fixed(to));
    };
    grow(&mut c, F::Id, 6, longest.id, ID_MAX);
    if wide {
        // An id still cut takes up to `PLACE_LENT` of PLACE: a name is typed, a place read.
        let id = c
            .width_of(F::Id)
            .and_then(|w| u16::try_from(w).ok())
            .unwrap_or(6);
        let want = u16::try_from(longest.id).unwrap_or(u16::MAX).min(ID_MAX);
        let lent = want.saturating_sub(id).min(PLACE_LENT);
        c.set(F::Id, Width::Fixed(id + lent));
        c.set(F::Place, Width::Fixed(place - lent));
        grow(&mut c, F::Holder, 10, longest.holder, HOLDER_MAX);
    } else {
        c.set(F::Place, Width::Fixed(place + spare.min(8)));
    }
    let gaps = u16::try_from(c.len().saturating_sub(1)).unwrap_or(u16::MAX);
    c.fill = usize::from(width.saturating_sub(2 + c.fixed_total() + gaps));
    c
}

/// The words a filter matches in a claim row: id (the engine's name where it has one),
/// project, holder, node, place and form,
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
        c.shown_id(),
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
        let six = ClaimWidths { id: 6, holder: 6 };
        let headers = |w, multi| claim_columns(w, multi, six).headers().join(" ");
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
        let c = claim_columns(100, false, six);
        assert_eq!(c.width_of(ClaimField::Place), Some(24));
        // A pod's `NAMESPACE/NAME` takes what it needs first.
        let pod = ClaimWidths { id: 20, holder: 6 };
        let c = claim_columns(100, false, pod);
        assert_eq!(c.width_of(ClaimField::Id), Some(20));
        assert_eq!(c.width_of(ClaimField::Place), Some(24));
        // Beside SRC at 120 nothing is spare: PLACE lends a Ray id's 8 characters 2.
        let ray = ClaimWidths { id: 8, holder: 6 };
        let c = claim_columns(120, true, ray);
        assert_eq!(c.width_of(ClaimField::Id), Some(8));
        assert_eq!(c.width_of(ClaimField::Place), Some(18));
        // Wide: the ID grows to the longest id, at most 32, HOLDER to the longest holder,
        // at most 24, and FORM keeps the rest.
        let long = ClaimWidths { id: 40, holder: 14 };
        let c = claim_columns(200, false, long);
        assert_eq!(c.width_of(ClaimField::Id), Some(32));
        assert_eq!(c.width_of(ClaimField::Holder), Some(14));
        let gaps = c.len() - 1;
        assert_eq!(2 + gaps + usize::from(c.fixed_total()) + c.fill, 200);
        assert_eq!(c.width_of(ClaimField::Form), Some(c.fill));
    }
}
