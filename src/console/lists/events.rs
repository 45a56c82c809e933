//! The Events list's columns: audit events, newest first (their order is time; a filter
//! picks them, `Pane`).

use super::shown::{Columns, ShownColumn, Width};

/// A column the Events view shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventField {
    /// When, in the operator's zone (`2026-11-23 14:05:09`).
    Time,
    /// The source it came from.
    Source,
    /// Who acted (`alice (u@host)` shrinks to the person).
    Actor,
    /// What was done.
    Action,
    /// To what.
    Target,
    /// The event in words (the pane below has it whole).
    Detail,
}

impl ShownColumn for EventField {
    fn header(self) -> &'static str {
        match self {
            EventField::Time => "TIME",
            EventField::Source => "SOURCE",
            EventField::Actor => "ACTOR",
            EventField::Action => "ACTION",
            EventField::Target => "TARGET",
            EventField::Detail => "DETAIL",
        }
    }
}

/// The Events view's columns in `width` cells: the same at every width, DETAIL taking
/// what the others, a gap before each after the first, and the borders leave.
pub fn event_columns(width: u16) -> Columns<EventField> {
    use EventField as F;
    let mut c = Columns::new();
    c.fixed([
        (F::Time, 19),
        (F::Source, 8),
        (F::Actor, 13),
        (F::Action, 9),
        (F::Target, 10),
    ]);
    let gaps = u16::try_from(c.len()).unwrap_or(u16::MAX);
    c.fill = usize::from(width.saturating_sub(2 + c.fixed_total() + gaps));
    c.push(F::Detail, Width::Fill);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detail_takes_the_rest() {
        let c = event_columns(80);
        assert_eq!(
            c.headers().join(" "),
            "TIME SOURCE ACTOR ACTION TARGET DETAIL"
        );
        assert_eq!(c.width_of(EventField::Detail), Some(80 - 2 - 59 - 5));
        assert_eq!(event_columns(40).fill, 0, "never below nothing");
    }
}
