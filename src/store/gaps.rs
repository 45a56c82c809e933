//! The periods when recording was stopped (a full disk, a failing write): kept beside the
//! history they interrupt, so a state asked for inside one is said to be the last one
//! recorded before it, not what was there.

use rusqlite::OptionalExtension;

use crate::clock::Timestamp;

use super::history::{HistoryError, HistoryStore};

/// A period with nothing recorded: from the first failed write until recording went on
/// (`end: None` while it is still stopped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordingGap {
    /// The time of the first snapshot that could not be written.
    pub start: Timestamp,
    /// When recording went on again.
    pub end: Option<Timestamp>,
    /// Why it stopped, as the recorder said.
    pub why: String,
}

impl RecordingGap {
    /// Whether `at` falls inside it.
    pub fn covers(&self, at: Timestamp) -> bool {
        at >= self.start && self.end.is_none_or(|end| at < end)
    }
}

impl HistoryStore {
    /// Keeps a period when recording was stopped, once it has gone on again.
    pub fn record_gap(&mut self, gap: &RecordingGap) -> Result<(), HistoryError> {
        let end = gap.end.unwrap_or(gap.start);
        self.conn.execute(
            "INSERT OR REPLACE INTO gaps(start, end, why) VALUES (?1, ?2, ?3)",
            rusqlite::params![gap.start.0, end.0, gap.why],
        )?;
        Ok(())
    }

    /// The recorded gap `at` falls in, if any.
    pub fn gap_at(&self, at: Timestamp) -> Result<Option<RecordingGap>, HistoryError> {
        let found: Option<(u64, u64, String)> = self
            .conn
            .query_row(
                "SELECT start, end, why FROM gaps WHERE start <= ?1 AND end > ?1
                     ORDER BY start DESC LIMIT 1",
                [at.0],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        Ok(found.map(|(start, end, why)| RecordingGap {
            start: Timestamp(start),
            end: Some(Timestamp(end)),
            why,
        }))
    }

    /// Forgets the gaps that ended before `cutoff` (retention).
    pub(super) fn drop_gaps_before(&mut self, cutoff: Timestamp) -> Result<(), HistoryError> {
        self.conn
            .execute("DELETE FROM gaps WHERE end < ?1", [cutoff.0])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_covers_its_period_and_retention_forgets_it() {
        let mut store = HistoryStore::in_memory().unwrap();
        assert_eq!(store.gap_at(Timestamp(5_000)).unwrap(), None);
        let gap = RecordingGap {
            start: Timestamp(1_000),
            end: Some(Timestamp(9_000)),
            why: "stopped: disk full".into(),
        };
        store.record_gap(&gap).unwrap();
        assert_eq!(store.gap_at(Timestamp(1_000)).unwrap(), Some(gap.clone()));
        assert_eq!(store.gap_at(Timestamp(8_999)).unwrap(), Some(gap.clone()));
        assert_eq!(store.gap_at(Timestamp(999)).unwrap(), None);
        assert_eq!(store.gap_at(Timestamp(9_000)).unwrap(), None);
        assert!(gap.covers(Timestamp(4_000)) && !gap.covers(Timestamp(9_000)));
        let ongoing = RecordingGap { end: None, ..gap };
        assert!(ongoing.covers(Timestamp(u64::MAX)));
        store.drop_gaps_before(Timestamp(9_001)).unwrap();
        assert_eq!(store.gap_at(Timestamp(5_000)).unwrap(), None);
    }
}
