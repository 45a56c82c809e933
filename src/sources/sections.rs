//! Reading a peer's answer section by section: a section that cannot be read becomes a
//! warning on the source and is left out of the snapshot, so one odd corner of a real
//! cluster never takes the rest of it off the console. Only the core (nodes and their
//! GPUs) failing makes the source down; each adapter decides what its core is.

use crate::snapshot::SourceWarning;

/// The warnings gathered while reading one fetch's answers.
#[derive(Debug, Default)]
pub struct Sections {
    warnings: Vec<SourceWarning>,
}

impl Sections {
    /// No warnings yet.
    pub fn new() -> Sections {
        Sections::default()
    }

    /// The value of an optional section, or its default with a warning when it could not
    /// be read.
    pub fn optional<T: Default>(&mut self, read: Result<T, SourceWarning>) -> T {
        read.unwrap_or_else(|w| {
            self.warnings.push(w);
            T::default()
        })
    }

    /// Records a warning.
    pub fn warn(&mut self, w: SourceWarning) {
        self.warnings.push(w);
    }

    /// Records many warnings.
    pub fn extend(&mut self, ws: impl IntoIterator<Item = SourceWarning>) {
        self.warnings.extend(ws);
    }

    /// The warnings, in the order they were found.
    pub fn into_warnings(self) -> Vec<SourceWarning> {
        self.warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unread_section_is_its_default_and_a_warning() {
        let mut s = Sections::new();
        let w = SourceWarning {
            section: "/x".into(),
            path: "data.y".into(),
            found: "expected a number, found null".into(),
            left_out: "y".into(),
        };
        let v: Vec<u32> = s.optional(Err(w.clone()));
        assert!(v.is_empty());
        assert_eq!(s.optional(Ok(3u32)), 3);
        assert_eq!(s.into_warnings(), vec![w]);
    }
}
