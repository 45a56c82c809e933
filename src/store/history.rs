//! The history store: `history.sqlite` in the data directory, apart from the claim store,
//! so that recording never holds up a claim's commit (docs/design.md, "History").
//!
//! Tables: `versions` (one row per recorded state version: a zstd keyframe or delta, and
//! its changes for people), `touches` (which GPUs, claims and projects each version's
//! changes touch, for seeking), `chunks` (an hour of one device's telemetry, columnar and
//! compressed) and `recent` (the samples of the hour not yet sealed into a chunk, one row
//! each, so a crash loses nothing already sampled). WAL with `synchronous=NORMAL`: a
//! killed process loses nothing committed; retention drops whole hours and versions up to
//! a keyframe, oldest first, then gives the pages back (`incremental_vacuum`).

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::{Connection, ErrorCode, OptionalExtension, params};

use crate::accounting::usage::HOLD_MS;
use crate::accounting::{self, Tally, rollup};
use crate::clock::Timestamp;
use crate::history::changes::{key, keys, touches};
use crate::history::sample::Tick;
use crate::history::{Body, DeviceSample, Record, chunk, record, replay};
use crate::snapshot::Snapshot;
use crate::units::Bytes;
use crate::wire::history::{Direction, GpuRef, HistoryChange, HistoryInfo, Seek, Target};

/// The history's file in the data directory.
pub const HISTORY_FILE: &str = "history.sqlite";
/// The key every version with changes is also indexed under (seeking without a target).
const ANY: &str = "*";
/// Samples are sealed into chunks of this span, aligned to it.
pub const CHUNK_MS: u64 = 3_600_000;
/// A device's latest sample older than this, before the time shown, is not shown.
pub const STALE_MS: u64 = 300_000;
const SCHEMA: i64 = 1;
/// Hours are rolled up with the default idle rule's threshold; reports asking another
/// replay the history.
pub const ROLLUP_IDLE_BELOW: u32 = accounting::usage::IDLE_BELOW_PCT;

/// Why the history could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The disk (or the file's page limit) is full: recording stops, nothing else does.
    #[error("disk full writing {0}")]
    Full(String),
    /// Any other `SQLite` failure.
    #[error("history database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored record or chunk is damaged.
    #[error("{0}")]
    Damaged(String),
    /// The file is from a newer gpuboard.
    #[error("history schema {0} is newer than this build's {SCHEMA}")]
    Newer(i64),
}

fn damaged(e: impl std::fmt::Display) -> HistoryError {
    HistoryError::Damaged(e.to_string())
}

/// Sorts `SQLite`'s "full" apart: it stops recording with its own message.
fn written(e: rusqlite::Error, what: &str) -> HistoryError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => HistoryError::Full(what.to_string()),
        _ => HistoryError::Sqlite(e),
    }
}

/// How long and how large the history may grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Days kept.
    pub days: u32,
    /// Bytes kept.
    pub bytes: Bytes,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            days: 30,
            bytes: Bytes(1 << 30),
        }
    }
}

/// The state at a time, as `GET /v1/snapshot?at=` answers it.
#[derive(Clone, Debug, PartialEq)]
pub enum StateAt {
    /// The state, and the time of what it shows.
    Shown(Box<Snapshot>, Timestamp),
    /// Before the history begins (`None`: nothing recorded).
    Before(Option<Timestamp>),
}

/// An hour rolled up, as stored.
#[derive(Clone, Debug, PartialEq)]
pub enum RolledUp {
    /// The compact form (`accounting::rollup`), uncompressed.
    Compact(Vec<u8>),
    /// JSON, as gpuboards before the compact form stored it.
    Json(Tally),
}

impl RolledUp {
    /// Adds the hour to `total` (the span just before it), as `Tally::then` does.
    pub fn add_to(self, total: &mut Tally) -> Result<(), HistoryError> {
        match self {
            RolledUp::Compact(bytes) => rollup::add_encoded(total, &bytes).map_err(damaged),
            RolledUp::Json(t) => {
                total.then(t);
                Ok(())
            }
        }
    }

    /// The hour's tally.
    pub fn tally(self) -> Result<Tally, HistoryError> {
        let mut t = Tally::default();
        self.add_to(&mut t)?;
        Ok(t)
    }
}

/// One connection to the history file: the recorder holds one, readers another.
#[derive(Debug)]
pub struct HistoryStore {
    pub(super) conn: Connection,
}

impl HistoryStore {
    /// Opens (creating) `history.sqlite` in `dir`.
    pub fn open(dir: &Path) -> Result<HistoryStore, HistoryError> {
        Self::start(Connection::open(dir.join(HISTORY_FILE))?)
    }

    /// The history in `dir` as it stands, read without writing (`gpuboard doctor`); `None`
    /// when there is none.
    pub fn peek(dir: &Path, keep: Retention) -> Result<Option<HistoryInfo>, HistoryError> {
        let path = dir.join(HISTORY_FILE);
        if !path.exists() {
            return Ok(None);
        }
        let conn = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        Ok(Some(HistoryStore { conn }.info(keep)?))
    }

    /// A reading connection to the history in `dir`, which its recorder has made.
    pub fn open_reader(dir: &Path) -> Result<HistoryStore, HistoryError> {
        let conn = Connection::open_with_flags(
            dir.join(HISTORY_FILE),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(HistoryStore { conn })
    }

    /// Another reading connection to this history's file, to read two parts of a window at
    /// once; `None` for a history in memory.
    pub fn another_reader(&self) -> Result<Option<HistoryStore>, HistoryError> {
        let Some(path) = self.conn.path().filter(|p| !p.is_empty()) else {
            return Ok(None);
        };
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(Some(HistoryStore { conn }))
    }

    /// A history in memory (tests, benches).
    pub fn in_memory() -> Result<HistoryStore, HistoryError> {
        Self::start(Connection::open_in_memory()?)
    }

    fn start(conn: Connection) -> Result<HistoryStore, HistoryError> {
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version > SCHEMA {
            return Err(HistoryError::Newer(version));
        }
        // auto_vacuum takes effect only before the first table is made.
        conn.execute_batch("PRAGMA auto_vacuum=INCREMENTAL")?;
        let _: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        conn.execute_batch(&format!(
            "PRAGMA synchronous=NORMAL;
             PRAGMA busy_timeout=5000;
             CREATE TABLE IF NOT EXISTS versions(seq INTEGER PRIMARY KEY, at INTEGER NOT NULL,
                 revision INTEGER NOT NULL, keyframe INTEGER NOT NULL, body BLOB NOT NULL,
                 changes BLOB);
             CREATE INDEX IF NOT EXISTS versions_at ON versions(at);
             CREATE TABLE IF NOT EXISTS touches(key TEXT NOT NULL, at INTEGER NOT NULL,
                 seq INTEGER NOT NULL, PRIMARY KEY(key, at, seq)) WITHOUT ROWID;
             CREATE INDEX IF NOT EXISTS versions_keyframes ON versions(seq) WHERE keyframe = 1;
             CREATE TABLE IF NOT EXISTS chunks(gpu TEXT NOT NULL, start INTEGER NOT NULL,
                 end INTEGER NOT NULL, count INTEGER NOT NULL, body BLOB NOT NULL);
             CREATE UNIQUE INDEX IF NOT EXISTS chunks_gpu ON chunks(gpu, start);
             CREATE INDEX IF NOT EXISTS chunks_end ON chunks(end, count);
             CREATE TABLE IF NOT EXISTS recent(gpu TEXT NOT NULL, at INTEGER NOT NULL,
                 body BLOB NOT NULL);
             CREATE UNIQUE INDEX IF NOT EXISTS recent_gpu ON recent(gpu, at);
             CREATE INDEX IF NOT EXISTS recent_at ON recent(at);
             CREATE TABLE IF NOT EXISTS rollups(start INTEGER PRIMARY KEY,
                 idle_below INTEGER NOT NULL, body BLOB NOT NULL);
             CREATE TABLE IF NOT EXISTS rollup_hours(start INTEGER PRIMARY KEY,
                 idle_below INTEGER NOT NULL, body BLOB NOT NULL);
             CREATE TABLE IF NOT EXISTS gaps(start INTEGER PRIMARY KEY, end INTEGER NOT NULL,
                 why TEXT NOT NULL);
             PRAGMA user_version={SCHEMA};"
        ))?;
        super::flag_episodes::create(&conn)?;
        Ok(HistoryStore { conn })
    }

    /// Caps the file at `pages` pages: writes past it fail as on a full disk (tests).
    pub fn limit_pages(&self, pages: u64) -> Result<(), HistoryError> {
        let _: i64 = self
            .conn
            .query_row(&format!("PRAGMA max_page_count={pages}"), [], |r| r.get(0))?;
        Ok(())
    }

    /// Writes one version.
    pub fn append(&mut self, rec: &Record) -> Result<(), HistoryError> {
        let tx = self
            .conn
            .transaction()
            .map_err(|e| written(e, "a version"))?;
        // Times only go forward in the file, so that `at` orders versions as `seq` does.
        let last: Option<u64> = tx
            .query_row("SELECT max(at) FROM versions", [], |r| r.get(0))
            .map_err(|e| written(e, "a version"))?;
        let at = rec.at.0.max(last.unwrap_or(0));
        let changes = (!rec.changes.is_empty()).then(|| record::encode_changes(&rec.changes));
        tx.execute(
            "INSERT INTO versions(at, revision, keyframe, body, changes) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                at,
                rec.revision,
                rec.body.is_keyframe(),
                rec.body.encode(),
                changes
            ],
        )
        .map_err(|e| written(e, "a version"))?;
        let seq = tx.last_insert_rowid();
        let mut all: Vec<String> = rec.changes.iter().flat_map(keys).collect();
        if !rec.changes.is_empty() {
            all.push(ANY.to_string());
        }
        all.sort();
        all.dedup();
        for k in all {
            tx.execute(
                "INSERT OR IGNORE INTO touches(key, at, seq) VALUES (?1, ?2, ?3)",
                params![k, at, seq],
            )
            .map_err(|e| written(e, "the change index"))?;
        }
        tx.commit().map_err(|e| written(e, "a version"))
    }

    /// Writes one sampling round; seals earlier hours into chunks first.
    pub fn add_samples(&mut self, round: &[(GpuRef, DeviceSample)]) -> Result<(), HistoryError> {
        let Some(first) = round.iter().map(|(_, s)| s.at).min() else {
            return Ok(());
        };
        self.seal_before(Timestamp(first.0 - first.0 % CHUNK_MS))?;
        let tx = self.conn.transaction().map_err(|e| written(e, "samples"))?;
        for (gpu, s) in round {
            let body = serde_json::to_vec(s).map_err(damaged)?;
            tx.execute(
                "INSERT OR REPLACE INTO recent(gpu, at, body) VALUES (?1, ?2, ?3)",
                params![gpu.to_string(), s.at.0, body],
            )
            .map_err(|e| written(e, "samples"))?;
        }
        tx.commit().map_err(|e| written(e, "samples"))
    }

    /// Seals the recent samples older than `before` into one chunk per device and hour.
    pub fn seal_before(&mut self, before: Timestamp) -> Result<(), HistoryError> {
        let oldest: Option<u64> = self
            .conn
            .query_row("SELECT min(at) FROM recent", [], |r| r.get(0))?;
        if oldest.is_none_or(|o| o >= before.0) {
            return Ok(());
        }
        let tx = self.conn.transaction().map_err(|e| written(e, "a chunk"))?;
        let mut groups: BTreeMap<(String, u64), Vec<DeviceSample>> = BTreeMap::new();
        {
            let mut q =
                tx.prepare("SELECT gpu, at, body FROM recent WHERE at < ?1 ORDER BY gpu, at")?;
            let rows = q.query_map([before.0], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, u64>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                ))
            })?;
            for row in rows {
                let (gpu, at, body) = row?;
                // A damaged staged sample is skipped; the rest of the hour is kept.
                if let Ok(s) = serde_json::from_slice::<DeviceSample>(&body) {
                    groups.entry((gpu, at - at % CHUNK_MS)).or_default().push(s);
                }
            }
        }
        for ((gpu, _), samples) in &groups {
            insert_chunk(&tx, gpu, samples)?;
        }
        tx.execute("DELETE FROM recent WHERE at < ?1", [before.0])
            .map_err(|e| written(e, "a chunk"))?;
        tx.commit().map_err(|e| written(e, "a chunk"))?;
        // Every version of a sealed hour is written (a version is written before the
        // samples of its snapshot), so its accounting can be rolled up now.
        let hours: std::collections::BTreeSet<u64> = groups.keys().map(|(_, h)| *h).collect();
        for hour in hours {
            match self.roll_up(Timestamp(hour)) {
                Ok(()) => {}
                Err(e @ HistoryError::Full(_)) => return Err(e),
                // Reports replay an hour not rolled up: a damaged hour must not stop recording.
                Err(e) => tracing::warn!("history: the hour from {} not rolled up: {e}", hour),
            }
        }
        Ok(())
    }

    /// Rolls up the accounting of the hour from `hour` (aligned to [`CHUNK_MS`]) from its
    /// versions and samples: reports over many hours add these up instead of replaying
    /// them. An hour the history does not cover from its start is not rolled up.
    pub fn roll_up(&mut self, hour: Timestamp) -> Result<(), HistoryError> {
        let end = Timestamp(hour.0 + CHUNK_MS);
        let Some((start, versions)) = self.window(hour, end)? else {
            return Ok(());
        };
        let ticks = self.all_ticks(Timestamp(hour.0.saturating_sub(HOLD_MS)), end)?;
        let story = accounting::tell(&start, &versions, hour, end);
        let tally = accounting::usage::tally(&story, &ticks, ROLLUP_IDLE_BELOW);
        self.add_rollup(hour, &tally)
    }

    /// Stores `tally` as the roll-up of the hour from `hour` (what [`Self::roll_up`] does
    /// with a recorded hour; benches give generated ones), in the compact form
    /// (`accounting::rollup`) in `rollup_hours`. gpuboards from before it read only the
    /// JSON roll-ups of `rollups`: they replay these hours instead (the same figures).
    pub fn add_rollup(&mut self, hour: Timestamp, tally: &Tally) -> Result<(), HistoryError> {
        let body = zstd::bulk::compress(&rollup::encode(tally), 3).map_err(damaged)?;
        self.conn
            .execute(
                "INSERT OR REPLACE INTO rollup_hours(start, idle_below, body) VALUES (?1, ?2, ?3)",
                params![hour.0, ROLLUP_IDLE_BELOW, body],
            )
            .map_err(|e| written(e, "a roll-up"))?;
        Ok(())
    }

    /// The hours rolled up (idle meaning below `idle_below` percent) that lie wholly from
    /// `from` to `to`, oldest first: compact ones, and JSON ones of earlier gpuboards for
    /// hours without a compact one.
    pub fn rollups(
        &self,
        from: Timestamp,
        to: Timestamp,
        idle_below: u32,
    ) -> Result<Vec<(Timestamp, RolledUp)>, HistoryError> {
        let mut hours: BTreeMap<u64, RolledUp> = BTreeMap::new();
        for table in ["rollups", "rollup_hours"] {
            let mut q = self.conn.prepare_cached(&format!(
                "SELECT start, body FROM {table} WHERE start >= ?1 AND start + ?2 <= ?3
                 AND idle_below = ?4 ORDER BY start"
            ))?;
            let mut rows = q.query(params![from.0, CHUNK_MS, to.0, idle_below])?;
            while let Some(row) = rows.next()? {
                let start: u64 = row.get(0)?;
                let body = row.get_ref(1)?.as_blob().map_err(damaged)?;
                let raw = chunk::decompress(body).map_err(damaged)?;
                let hour = if table == "rollups" {
                    RolledUp::Json(serde_json::from_slice(&raw).map_err(damaged)?)
                } else {
                    RolledUp::Compact(raw)
                };
                hours.insert(start, hour);
            }
        }
        Ok(hours
            .into_iter()
            .map(|(start, h)| (Timestamp(start), h))
            .collect())
    }

    /// Stores `samples` (one device's, oldest first, within one hour) as a sealed chunk:
    /// what sealing does with an hour of samples, for generated histories (benches).
    pub fn add_chunk(
        &mut self,
        gpu: &GpuRef,
        samples: &[DeviceSample],
    ) -> Result<(), HistoryError> {
        insert_chunk(&self.conn, &gpu.to_string(), samples)
    }

    /// Where the history begins: its first version.
    pub fn from(&self) -> Result<Option<Timestamp>, HistoryError> {
        Ok(self
            .conn
            .query_row("SELECT at FROM versions ORDER BY seq LIMIT 1", [], |r| {
                r.get(0)
            })
            .optional()?
            .map(Timestamp))
    }

    /// The latest version recorded, with its time: where a restarted recorder goes on.
    pub fn last_state(&self) -> Result<Option<(Snapshot, Timestamp)>, HistoryError> {
        let last: Option<(i64, u64)> = self
            .conn
            .query_row(
                "SELECT seq, at FROM versions ORDER BY seq DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let Some((seq, at)) = last else {
            return Ok(None);
        };
        Ok(Some((self.state_of_seq(seq)?, Timestamp(at))))
    }

    /// The state at version `seq`: its keyframe replayed up to it.
    fn state_of_seq(&self, seq: i64) -> Result<Snapshot, HistoryError> {
        let key: i64 = self.conn.query_row(
            "SELECT seq FROM versions WHERE keyframe = 1 AND seq <= ?1 ORDER BY seq DESC LIMIT 1",
            [seq],
            |r| r.get(0),
        )?;
        let mut q = self
            .conn
            .prepare_cached("SELECT body FROM versions WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq")?;
        let bodies = q
            .query_map([key, seq], |r| r.get::<_, Vec<u8>>(0))?
            .map(|b| Body::decode(&b?).map_err(damaged))
            .collect::<Result<Vec<Body>, HistoryError>>()?;
        replay(bodies).map_err(damaged)
    }

    /// The state as served at `at`: the last version at or before it, with each device's
    /// samples up to it.
    pub fn state_at(&self, at: Timestamp) -> Result<StateAt, HistoryError> {
        let found: Option<(i64, u64)> = self
            .conn
            .query_row(
                "SELECT seq, at FROM versions WHERE at <= ?1 ORDER BY at DESC, seq DESC LIMIT 1",
                [at.0],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let Some((seq, version_at)) = found else {
            return Ok(StateAt::Before(self.from()?));
        };
        let mut state = self.state_of_seq(seq)?;
        let mut samples = BTreeMap::new();
        let mut shown = Timestamp(version_at);
        for (node, device) in state.devices() {
            let gpu = GpuRef {
                node: node.name.clone(),
                index: device.index,
            };
            let recent = self.samples(
                &gpu,
                Timestamp(at.0.saturating_sub(STALE_MS)),
                at,
                crate::history::sample::SPARKLINE + 1,
                true,
            )?;
            if let Some(last) = recent.last() {
                shown = shown.max(last.at);
                samples.insert(gpu, recent);
            }
        }
        crate::history::join(&mut state, &samples);
        Ok(StateAt::Shown(Box::new(state), shown))
    }

    /// One device's samples from `from` to `to`, oldest first: at most `limit`, the last
    /// ones when `latest`, else the first.
    pub fn samples(
        &self,
        gpu: &GpuRef,
        from: Timestamp,
        to: Timestamp,
        limit: usize,
        latest: bool,
    ) -> Result<Vec<DeviceSample>, HistoryError> {
        let name = gpu.to_string();
        let mut out = Vec::new();
        let mut q = self.conn.prepare_cached(
            "SELECT body FROM chunks WHERE gpu = ?1 AND start BETWEEN ?2 AND ?3 AND end >= ?4
             ORDER BY start",
        )?;
        // A chunk spans at most an hour, so one that reaches `from` starts after `from - 1h`.
        let earliest = from.0.saturating_sub(CHUNK_MS);
        for body in q.query_map(params![name, earliest, to.0, from.0], |r| {
            r.get::<_, Vec<u8>>(0)
        })? {
            out.extend(chunk::decode_between(&body?, from, to).map_err(damaged)?);
        }
        let mut q = self.conn.prepare_cached(
            "SELECT body FROM recent WHERE gpu = ?1 AND at BETWEEN ?2 AND ?3 ORDER BY at",
        )?;
        for body in q.query_map(params![name, from.0, to.0], |r| r.get::<_, Vec<u8>>(0))? {
            out.push(serde_json::from_slice(&body?).map_err(damaged)?);
        }
        if out.len() > limit {
            if latest {
                out.drain(..out.len() - limit);
            } else {
                out.truncate(limit);
            }
        }
        Ok(out)
    }

    /// The changes from `from` to `to`, oldest first, touching `target` when given; at most
    /// `limit`, and whether there were more.
    pub fn changes(
        &self,
        from: Timestamp,
        to: Timestamp,
        target: Option<&Target>,
        limit: usize,
    ) -> Result<(Vec<HistoryChange>, bool), HistoryError> {
        let k = target.map_or_else(|| ANY.to_string(), key);
        let mut q = self.conn.prepare_cached(
            "SELECT v.changes FROM touches t JOIN versions v ON v.seq = t.seq
             WHERE t.key = ?1 AND t.at BETWEEN ?2 AND ?3 ORDER BY t.at, t.seq",
        )?;
        let mut out = Vec::new();
        for blob in q.query_map(params![k, from.0, to.0], |r| r.get::<_, Option<Vec<u8>>>(0))? {
            let Some(blob) = blob? else { continue };
            let changes = record::decode_changes(&blob).map_err(damaged)?;
            for c in changes {
                if target.is_none_or(|t| touches(&c, t)) {
                    if out.len() == limit {
                        return Ok((out, true));
                    }
                    out.push(c);
                }
            }
        }
        Ok((out, false))
    }

    /// The next change after `at` (or the last before it) touching `target`.
    pub fn seek(
        &self,
        at: Timestamp,
        dir: Direction,
        target: Option<&Target>,
    ) -> Result<Option<Seek>, HistoryError> {
        let k = target.map_or_else(|| ANY.to_string(), key);
        let sql = match dir {
            Direction::Next => {
                "SELECT t.at, v.revision FROM touches t JOIN versions v ON v.seq = t.seq
                 WHERE t.key = ?1 AND t.at > ?2 ORDER BY t.at, t.seq LIMIT 1"
            }
            Direction::Prev => {
                "SELECT t.at, v.revision FROM touches t JOIN versions v ON v.seq = t.seq
                 WHERE t.key = ?1 AND t.at < ?2 ORDER BY t.at DESC, t.seq DESC LIMIT 1"
            }
        };
        Ok(self
            .conn
            .query_row(sql, params![k, at.0], |r| {
                Ok(Seek {
                    at: Timestamp(r.get(0)?),
                    version: r.get(1)?,
                })
            })
            .optional()?)
    }

    /// The state at `from` (the last version at or before it) and the versions recorded
    /// after it up to `to`, oldest first: what accounting replays. `None` before the
    /// history begins.
    pub fn window(
        &self,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Option<(Snapshot, Vec<Record>)>, HistoryError> {
        let first: Option<i64> = self
            .conn
            .query_row(
                "SELECT seq FROM versions WHERE at <= ?1 ORDER BY at DESC, seq DESC LIMIT 1",
                [from.0],
                |r| r.get(0),
            )
            .optional()?;
        let Some(first) = first else {
            return Ok(None);
        };
        let start = self.state_of_seq(first)?;
        let mut q = self.conn.prepare_cached(
            "SELECT at, revision, body, changes FROM versions WHERE seq > ?1 AND at <= ?2
             ORDER BY seq",
        )?;
        let rows = q.query_map(params![first, to.0], |r| {
            Ok((
                r.get::<_, u64>(0)?,
                r.get::<_, u64>(1)?,
                r.get::<_, Vec<u8>>(2)?,
                r.get::<_, Option<Vec<u8>>>(3)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (at, revision, body, changes) = row?;
            out.push(Record {
                at: Timestamp(at),
                revision,
                body: Body::decode(&body).map_err(damaged)?,
                changes: match changes {
                    Some(c) => record::decode_changes(&c).map_err(damaged)?,
                    None => Vec::new(),
                },
            });
        }
        Ok(Some((start, out)))
    }

    /// What accounting needs of every device's samples from `from` to `to`, oldest first.
    pub fn all_ticks(
        &self,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<BTreeMap<GpuRef, Vec<Tick>>, HistoryError> {
        let mut out: BTreeMap<GpuRef, Vec<Tick>> = BTreeMap::new();
        // A chunk spans at most an hour, so one that reaches `from` starts after `from - 1h`.
        let mut q = self.conn.prepare_cached(
            "SELECT gpu, body FROM chunks WHERE start BETWEEN ?1 AND ?2 AND end >= ?3
             ORDER BY gpu, start",
        )?;
        let mut rows = q.query(params![from.0.saturating_sub(CHUNK_MS), to.0, from.0])?;
        let mut current: Option<(String, Vec<Tick>)> = None;
        while let Some(row) = rows.next()? {
            let name = row.get_ref(0)?.as_str().map_err(damaged)?;
            if current.as_ref().is_none_or(|(n, _)| n != name) {
                if let Some((n, ticks)) = current.take()
                    && let Ok(gpu) = n.parse::<GpuRef>()
                {
                    out.insert(gpu, ticks);
                }
                current = Some((name.to_string(), Vec::new()));
            }
            if let Some((_, ticks)) = current.as_mut() {
                // The blob is read where SQLite holds it, not copied first.
                let body = row.get_ref(1)?.as_blob().map_err(damaged)?;
                chunk::decode_ticks(body, from, to, ticks).map_err(damaged)?;
            }
        }
        if let Some((n, ticks)) = current
            && let Ok(gpu) = n.parse::<GpuRef>()
        {
            out.insert(gpu, ticks);
        }
        let mut q = self.conn.prepare_cached(
            "SELECT gpu, body FROM recent WHERE at BETWEEN ?1 AND ?2 ORDER BY gpu, at",
        )?;
        let rows = q.query_map(params![from.0, to.0], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
        })?;
        for row in rows {
            let (name, body) = row?;
            let Ok(gpu) = name.parse::<GpuRef>() else {
                continue;
            };
            let s: DeviceSample = serde_json::from_slice(&body).map_err(damaged)?;
            out.entry(gpu).or_default().push(Tick::from(&s));
        }
        Ok(out)
    }

    /// Bytes in use (pages holding data; freed pages are given back by retention).
    pub fn bytes(&self) -> Result<Bytes, HistoryError> {
        let page: u64 = self.conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let count: u64 = self.conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
        let free: u64 = self
            .conn
            .query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
        Ok(Bytes(count.saturating_sub(free) * page))
    }

    /// How far back, and how large.
    pub fn info(&self, keep: Retention) -> Result<HistoryInfo, HistoryError> {
        let (versions, keyframes): (u64, u64) = self.conn.query_row(
            "SELECT (SELECT count(*) FROM versions),
                    (SELECT count(*) FROM versions WHERE keyframe = 1)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let samples: u64 = self.conn.query_row(
            "SELECT (SELECT coalesce(sum(count), 0) FROM chunks) + (SELECT count(*) FROM recent)",
            [],
            |r| r.get(0),
        )?;
        Ok(HistoryInfo {
            from: self.from()?,
            to: self.last_recorded()?,
            bytes: self.bytes()?,
            versions,
            keyframes,
            samples,
            keep_days: keep.days,
            keep_bytes: keep.bytes,
            stopped: None,
        })
    }

    /// Drops what is older than `keep.days` before `now`, then the oldest until the history
    /// fits `keep.bytes`; always at a keyframe, so the history still begins with one. The
    /// latest keyframe is never dropped (it may be the present state).
    pub fn retain(&mut self, keep: Retention, now: Timestamp) -> Result<(), HistoryError> {
        let cutoff = now.0.saturating_sub(u64::from(keep.days) * 86_400_000);
        let first_kept: Option<(i64, u64)> = self
            .conn
            .query_row(
                "SELECT seq, at FROM versions WHERE keyframe = 1 AND at <= ?1 ORDER BY seq DESC LIMIT 1",
                [cutoff],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        if let Some((seq, at)) = first_kept {
            self.drop_before(seq, at, Timestamp(cutoff))?;
        }
        self.drop_gaps_before(Timestamp(cutoff))?;
        self.drop_flags_before(Timestamp(cutoff))?;
        while self.bytes()? > keep.bytes {
            // The keyframe after the first: everything before it goes.
            let next: Option<(i64, u64)> = self
                .conn
                .query_row(
                    "SELECT seq, at FROM versions WHERE keyframe = 1 AND seq >
                         (SELECT min(seq) FROM versions) ORDER BY seq LIMIT 1",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let Some((seq, at)) = next else { break };
            self.drop_before(seq, at, Timestamp(at))?;
        }
        Ok(())
    }

    /// Drops versions before `seq` (recorded before `at`) and samples before `samples_before`.
    fn drop_before(
        &mut self,
        seq: i64,
        at: u64,
        samples_before: Timestamp,
    ) -> Result<(), HistoryError> {
        let tx = self.conn.transaction()?;
        tx.execute("DELETE FROM versions WHERE seq < ?1", [seq])?;
        tx.execute("DELETE FROM touches WHERE at < ?1", [at])?;
        tx.execute("DELETE FROM chunks WHERE end < ?1", [samples_before.0])?;
        tx.execute("DELETE FROM recent WHERE at < ?1", [samples_before.0])?;
        tx.execute("DELETE FROM rollups WHERE start < ?1", [at])?;
        tx.execute("DELETE FROM rollup_hours WHERE start < ?1", [at])?;
        tx.commit()?;
        self.conn.execute_batch("PRAGMA incremental_vacuum")?;
        Ok(())
    }
}

fn insert_chunk(
    conn: &Connection,
    gpu: &str,
    samples: &[DeviceSample],
) -> Result<(), HistoryError> {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return Ok(());
    };
    conn.execute(
        "INSERT OR REPLACE INTO chunks(gpu, start, end, count, body) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            gpu,
            first.at.0,
            last.at.0,
            samples.len(),
            chunk::encode(samples)
        ],
    )
    .map_err(|e| written(e, "a chunk"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Recording;
    use crate::snapshot::{DeviceView, NodeView};

    /// Sealing an hour (the first sample of the next) rolls it up; an hour the history
    /// does not cover from its start is not.
    #[test]
    fn sealing_an_hour_rolls_it_up() {
        let t0 = 1_795_442_400_000;
        let mut store = HistoryStore::in_memory().unwrap();
        let state = |at: u64| Snapshot {
            schema: 1,
            revision: 1,
            taken_at: Timestamp(at),
            nodes: vec![NodeView {
                name: "a".into(),
                devices: vec![DeviceView::default()],
                ..NodeView::default()
            }],
            ..Snapshot::default()
        };
        let mut r = Recording::default();
        let first = r.observe(&state(t0 + 600_000)).unwrap();
        store.append(&first).unwrap();
        let gpu = GpuRef {
            node: "a".into(),
            index: 0,
        };
        let mut at = t0 + 600_000;
        while at <= t0 + 2 * CHUNK_MS {
            let s = DeviceSample {
                at: Timestamp(at),
                utilization_gpu: Some(50),
                ..DeviceSample::default()
            };
            store.add_samples(&[(gpu.clone(), s)]).unwrap();
            at += 60_000;
        }
        let hours = store
            .rollups(
                Timestamp(t0),
                Timestamp(t0 + 3 * CHUNK_MS),
                ROLLUP_IDLE_BELOW,
            )
            .unwrap();
        // The first hour began before the history: replayed, not rolled up.
        assert_eq!(hours.len(), 1, "{hours:?}");
        assert_eq!(hours[0].0, Timestamp(t0 + CHUNK_MS));
        let hour = hours[0].1.clone().tally().unwrap();
        assert_eq!(hour.physical, accounting::GpuSeconds(3600.0));
        assert!(matches!(hours[0].1, RolledUp::Compact(_)));
    }

    /// Roll-ups stored as JSON by gpuboards before the compact form are still read, in
    /// time order with the compact ones; an hour in both is read from the compact one.
    #[test]
    fn json_roll_ups_of_earlier_gpuboards_are_still_read() {
        let t0 = 1_795_442_400_000;
        let mut store = HistoryStore::in_memory().unwrap();
        let hour = |physical: f64| Tally {
            physical: accounting::GpuSeconds(physical),
            ..Tally::default()
        };
        let old = |store: &HistoryStore, start: u64, t: &Tally| {
            let json = serde_json::to_vec(t).unwrap();
            let body = zstd::bulk::compress(&json, 3).unwrap();
            store
                .conn
                .execute(
                    "INSERT INTO rollups(start, idle_below, body) VALUES (?1, ?2, ?3)",
                    params![start, ROLLUP_IDLE_BELOW, body],
                )
                .unwrap();
        };
        old(&store, t0, &hour(1.0));
        store
            .add_rollup(Timestamp(t0 + CHUNK_MS), &hour(2.0))
            .unwrap();
        old(&store, t0 + 2 * CHUNK_MS, &hour(3.0));
        store
            .add_rollup(Timestamp(t0 + 2 * CHUNK_MS), &hour(4.0))
            .unwrap();
        let got: Vec<(Timestamp, f64)> = store
            .rollups(
                Timestamp(t0),
                Timestamp(t0 + 3 * CHUNK_MS),
                ROLLUP_IDLE_BELOW,
            )
            .unwrap()
            .into_iter()
            .map(|(at, h)| (at, h.tally().unwrap().physical.0))
            .collect();
        assert_eq!(
            got,
            [
                (Timestamp(t0), 1.0),
                (Timestamp(t0 + CHUNK_MS), 2.0),
                (Timestamp(t0 + 2 * CHUNK_MS), 4.0)
            ]
        );
    }
}
