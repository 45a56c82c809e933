//! The flags' episodes (`physical::FlagEpisode`), kept beside the history they happened
//! in: a row when one begins, its end written when it ends. Read by the report and the
//! `/v1/history/flags` route; retention drops those that ended before the history kept.

use rusqlite::{Connection, params};

use crate::clock::Timestamp;
use crate::physical::FlagEpisode;

use super::history::{HistoryError, HistoryStore};

/// Makes the table (with the history's others).
pub(super) fn create(conn: &Connection) -> Result<(), HistoryError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS flag_episodes(id INTEGER PRIMARY KEY, gpu TEXT NOT NULL,
             flag TEXT NOT NULL, started INTEGER NOT NULL, ended INTEGER, body BLOB NOT NULL);
         CREATE INDEX IF NOT EXISTS flag_episodes_started ON flag_episodes(started);
         CREATE INDEX IF NOT EXISTS flag_episodes_open ON flag_episodes(gpu) WHERE ended IS NULL;",
    )?;
    Ok(())
}

/// The stored form: the episode as it began (its end is a column of its own).
fn body(e: &FlagEpisode) -> Result<Vec<u8>, HistoryError> {
    let begun = FlagEpisode {
        ended: None,
        ..e.clone()
    };
    serde_json::to_vec(&begun).map_err(|e| HistoryError::Damaged(e.to_string()))
}

impl HistoryStore {
    /// Writes what `FlagTracker::observe` returned: a row for each episode that began, the
    /// end of each that ended.
    pub fn record_flags(&mut self, changes: &[FlagEpisode]) -> Result<(), HistoryError> {
        if changes.is_empty() {
            return Ok(());
        }
        let full = |e: rusqlite::Error| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => HistoryError::Full("flags".to_string()),
            _ => HistoryError::Sqlite(e),
        };
        let tx = self.conn.transaction().map_err(full)?;
        for e in changes {
            let body = body(e)?;
            match e.ended {
                None => tx.execute(
                    "INSERT INTO flag_episodes(gpu, flag, started, body) VALUES (?1, ?2, ?3, ?4)",
                    params![e.gpu, e.flag, e.started.0, body],
                ),
                Some(end) => tx.execute(
                    "UPDATE flag_episodes SET ended = ?1
                         WHERE gpu = ?2 AND ended IS NULL AND body = ?3",
                    params![end.0, e.gpu, body],
                ),
            }
            .map_err(full)?;
        }
        tx.commit().map_err(full)
    }

    /// Ends at `at` (or at their start, when later) the episodes still open: a recorder
    /// starting again does not know what happened while it was down.
    pub fn close_open_flags(&mut self, at: Timestamp) -> Result<(), HistoryError> {
        self.conn.execute(
            "UPDATE flag_episodes SET ended = max(started, ?1) WHERE ended IS NULL",
            [at.0],
        )?;
        Ok(())
    }

    /// Where a history of flags alone (`gpuboard record --config`) begins: its first
    /// episode's start.
    pub fn flags_from(&self) -> Result<Option<Timestamp>, HistoryError> {
        let at: Option<u64> =
            self.conn
                .query_row("SELECT min(started) FROM flag_episodes", [], |r| r.get(0))?;
        Ok(at.map(Timestamp))
    }

    /// The time of the last thing recorded (a version, a sample, a flag's start or end).
    pub fn last_recorded(&self) -> Result<Option<Timestamp>, HistoryError> {
        let at: Option<u64> = self.conn.query_row(
            "SELECT max(m) FROM (SELECT max(at) AS m FROM versions UNION ALL
                 SELECT max(at) FROM recent UNION ALL SELECT max(end) FROM chunks UNION ALL
                 SELECT max(coalesce(ended, started)) FROM flag_episodes)",
            [],
            |r| r.get(0),
        )?;
        Ok(at.map(Timestamp))
    }

    /// The episodes that overlap `from..to`, by start.
    pub fn flag_episodes(
        &self,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<FlagEpisode>, HistoryError> {
        let mut stmt = self.conn.prepare(
            "SELECT ended, body FROM flag_episodes
                 WHERE started <= ?2 AND (ended IS NULL OR ended > ?1) ORDER BY started, id",
        )?;
        let rows = stmt.query_map([from.0, to.0], |r| {
            Ok((r.get::<_, Option<u64>>(0)?, r.get::<_, Vec<u8>>(1)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (ended, body) = row?;
            let mut e: FlagEpisode = serde_json::from_slice(&body)
                .map_err(|e| HistoryError::Damaged(format!("a flag episode: {e}")))?;
            e.ended = ended.map(Timestamp);
            out.push(e);
        }
        Ok(out)
    }

    /// Forgets the episodes that ended before `cutoff` (retention).
    pub(super) fn drop_flags_before(&mut self, cutoff: Timestamp) -> Result<(), HistoryError> {
        self.conn
            .execute("DELETE FROM flag_episodes WHERE ended < ?1", [cutoff.0])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::physical::{EpisodeHolder, GpuEngine};
    use crate::units::Units;

    fn episode(flag: &str, started: u64, holder: &str) -> FlagEpisode {
        FlagEpisode {
            flag: flag.to_string(),
            gpu: "gpu-aa".to_string(),
            node: "n1".to_string(),
            index: 0,
            uuid: Some("gpu-aa".to_string()),
            holders: vec![EpisodeHolder {
                engine: GpuEngine::Slurm,
                label: holder.to_string(),
                project: "physics".to_string(),
                source: "slurm".to_string(),
                compute: Units::FULL,
            }],
            detail: format!("{flag}: {holder}"),
            started: Timestamp(started),
            ended: None,
        }
    }

    #[test]
    fn episodes_are_written_ended_read_back_by_window_closed_on_restart_and_retained() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = HistoryStore::open(dir.path()).unwrap();
        // Two idle episodes from the same moment, by different holders: each ends alone.
        let a = episode("idle", 1_000, "Slurm job 1");
        let b = episode("idle", 1_000, "Slurm job 2");
        store.record_flags(&[a.clone(), b.clone()]).unwrap();
        let ended_a = FlagEpisode {
            ended: Some(Timestamp(5_000)),
            ..a.clone()
        };
        store.record_flags(std::slice::from_ref(&ended_a)).unwrap();
        let reader = HistoryStore::open_reader(dir.path()).unwrap();
        assert_eq!(
            reader
                .flag_episodes(Timestamp(0), Timestamp(10_000))
                .unwrap(),
            [ended_a.clone(), b.clone()]
        );
        // A window after the first ended sees only the one still open.
        assert_eq!(
            reader
                .flag_episodes(Timestamp(6_000), Timestamp(7_000))
                .unwrap(),
            std::slice::from_ref(&b)
        );
        assert!(
            reader
                .flag_episodes(Timestamp(0), Timestamp(900))
                .unwrap()
                .is_empty()
        );
        store.close_open_flags(Timestamp(8_000)).unwrap();
        let all = reader
            .flag_episodes(Timestamp(0), Timestamp(10_000))
            .unwrap();
        assert_eq!(all[1].ended, Some(Timestamp(8_000)));
        store.drop_flags_before(Timestamp(6_000)).unwrap();
        let kept = reader
            .flag_episodes(Timestamp(0), Timestamp(10_000))
            .unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].holders[0].label, "Slurm job 2");
    }
}
