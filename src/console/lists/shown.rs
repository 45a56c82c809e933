//! The columns a list shows, as data. Each list names its columns as an enum (`ShownColumn`:
//! the header) and lays them out for a screen width into `Columns`: which of them, in
//! order, each with its width policy, and what the one filling column gets. The views
//! draw one cell per column in that order, so a header cannot drift from its cells, and
//! the width rules live here, where a test reads them without drawing.

/// How a shown column takes its part of the row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    /// Exactly this many cells.
    Fixed(u16),
    /// What the fixed columns and the gaps leave (one column per list).
    Fill,
}

/// A column a list can show.
pub trait ShownColumn: Copy + Eq + std::fmt::Debug {
    /// Its header.
    fn header(self) -> &'static str;
}

/// The columns shown at one width, in order, each with its width.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Columns<F> {
    shown: Vec<(F, Width)>,
    /// The cells the `Fill` column gets once drawn (0 with none).
    pub fill: usize,
}

impl<F: ShownColumn> Columns<F> {
    /// No columns yet.
    pub fn new() -> Columns<F> {
        Columns {
            shown: Vec::new(),
            fill: 0,
        }
    }

    /// Shows `field` next, `width` wide.
    pub fn push(&mut self, field: F, width: Width) {
        self.shown.push((field, width));
    }

    /// Shows each of `fields` next, each fixed at its width.
    pub fn fixed(&mut self, fields: impl IntoIterator<Item = (F, u16)>) {
        self.shown
            .extend(fields.into_iter().map(|(f, w)| (f, Width::Fixed(w))));
    }

    /// The columns shown and their widths, in order.
    pub fn iter(&self) -> impl Iterator<Item = (F, Width)> + '_ {
        self.shown.iter().copied()
    }

    /// The columns shown, in order.
    pub fn fields(&self) -> impl Iterator<Item = F> + '_ {
        self.shown.iter().map(|(f, _)| *f)
    }

    /// Their headers, in order.
    pub fn headers(&self) -> Vec<&'static str> {
        self.fields().map(ShownColumn::header).collect()
    }

    /// How many columns are shown.
    pub fn len(&self) -> usize {
        self.shown.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.shown.is_empty()
    }

    /// Whether `field` is shown.
    pub fn has(&self, field: F) -> bool {
        self.fields().any(|f| f == field)
    }

    /// The cells `field` gets: its fixed width, or the fill; `None` when not shown.
    pub fn width_of(&self, field: F) -> Option<usize> {
        self.iter()
            .find(|(f, _)| *f == field)
            .map(|(_, w)| match w {
                Width::Fixed(n) => usize::from(n),
                Width::Fill => self.fill,
            })
    }

    /// Sets the width of `field` (when shown).
    pub fn set(&mut self, field: F, width: Width) {
        if let Some(slot) = self.shown.iter_mut().find(|(f, _)| *f == field) {
            slot.1 = width;
        }
    }

    /// The fixed columns' widths, summed.
    pub fn fixed_total(&self) -> u16 {
        self.iter()
            .map(|(_, w)| match w {
                Width::Fixed(n) => n,
                Width::Fill => 0,
            })
            .sum()
    }
}

impl<F: ShownColumn> Default for Columns<F> {
    fn default() -> Self {
        Columns::new()
    }
}
