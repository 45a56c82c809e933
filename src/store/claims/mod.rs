//! Durable state: the scheduler's journal of `Change`s applied to `SQLite` (WAL) in a data
//! directory, and the `Persisted` state read back on start.
//!
//! One writer thread owns the connection. Callers hand it batches and wait for the reply;
//! the writer takes every batch that is queued, applies them in order in one transaction,
//! commits (one fsync with `synchronous=FULL`), and only then answers each waiter. So many
//! concurrent requests share one fsync, and nothing is acknowledged before it is durable.
//! Batches are applied in the order they were handed over, which is the scheduler's order,
//! so the database always holds a prefix of the scheduler's history.
//!
//! A database another process holds locked (an operator's `sqlite3` in a write
//! transaction) is waited out: the writer retries the same group with backoff, warns, and
//! says how long it has waited (`busy_for`, shown on `/healthz`); the waiters are answered
//! once it commits. Only another failure (disk full, an I/O error) stops the store.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension};
use tokio::sync::{oneshot, watch};

use crate::ids::ClaimId;
use crate::scheduler::{Change, Claim, Persisted};
use crate::snapshot::AuditEvent;
use crate::store::idempotency::{self, KeyRecord};

mod writer;

use writer::Writer;

/// The database file inside the data directory.
pub const DB_FILE: &str = "gpuboard.sqlite";
/// The schema this build writes (`SQLite` `user_version`).
const SCHEMA: i64 = 1;
/// Audit events loaded on start (all stay in the database).
const EVENTS_LOADED: i64 = 500;
/// Most batches folded into one transaction.
const MAX_GROUP: usize = 4096;
/// How long `SQLite` itself waits on a lock before answering busy; short, so the writer
/// notices (and `/healthz` says) within a second that it is waiting.
const BUSY_TIMEOUT_MS: u32 = 1000;
/// The longest pause between two tries at a busy database.
const BUSY_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How often a wait on a busy database is logged again.
const BUSY_WARN_EVERY: Duration = Duration::from_secs(10);

/// The default data directory: `$GPUBOARD_DATA_DIR`, else `$XDG_DATA_HOME/gpuboard` (or the
/// platform's equivalent).
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("GPUBOARD_DATA_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("gpuboard")
}

/// How hard a commit waits for the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SyncMode {
    /// fsync the WAL on every commit: acknowledged claims survive `kill -9` and power loss.
    #[default]
    Full,
    /// No fsync on commit (only at checkpoints): acknowledged claims survive `kill -9`
    /// (the kernel holds the written pages) but the last commits may be lost on power loss.
    Normal,
}

/// Why the store failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The data directory or database could not be opened or read.
    #[error("cannot open state database {path}: {detail}")]
    Open {
        /// The database file.
        path: String,
        /// Why.
        detail: String,
    },
    /// The database was written by a newer gpuboard.
    #[error(
        "state database {path} has schema {found}, newer than this build's {SCHEMA}; upgrade gpuboard"
    )]
    SchemaTooNew {
        /// The database file.
        path: String,
        /// Its schema version.
        found: i64,
    },
    /// A stored row could not be decoded.
    #[error("state database {path} holds an unreadable {what}: {detail}")]
    Corrupt {
        /// The database file.
        path: String,
        /// Which row.
        what: String,
        /// The decoder's message.
        detail: String,
    },
    /// A commit failed; the store refuses further writes because memory is now ahead of disk.
    #[error(
        "writing state failed ({0}); restart the endpoint to resume from the last durable state"
    )]
    Commit(String),
    /// The writer thread is gone.
    #[error("the state writer has stopped")]
    WriterGone,
}

struct Batch {
    changes: Vec<Change>,
    /// The idempotency key of the request that made `changes`, written in the same commit.
    key: Option<KeyRecord>,
    reply: oneshot::Sender<Result<(), StoreError>>,
}

/// Counters about commits, for `/metrics`.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Transactions committed.
    pub commits: AtomicU64,
    /// Batches (requests) those transactions carried.
    pub batches: AtomicU64,
    /// Changes written.
    pub changes: AtomicU64,
}

/// What the writer tells its handle besides the replies: how far it got, and what it read
/// back from the database after a failed commit.
#[derive(Debug, Default)]
struct Progress {
    /// Non-empty batches handed over (counted under the caller's ordering).
    handed: AtomicU64,
    /// Non-empty batches made durable.
    durable: AtomicU64,
    /// After a failed commit: the state the database holds (the last durable one).
    recovered: Mutex<Option<Result<Persisted, StoreError>>>,
    /// The first commit failure; the store writes nothing after it.
    failure: Mutex<Option<StoreError>>,
    /// Since when the writer has been waiting on a database another process holds locked.
    busy_since: Mutex<Option<Instant>>,
    /// The store is being dropped: a wait on a busy database gives up.
    closing: std::sync::atomic::AtomicBool,
}

/// The durable store: a handle to the writer thread.
pub struct Store {
    tx: Option<mpsc::Sender<Batch>>,
    writer: Option<JoinHandle<()>>,
    committed: watch::Receiver<u64>,
    stats: Arc<StoreStats>,
    progress: Arc<Progress>,
    path: String,
    /// The idempotency keys read on open, until the engine takes them.
    keys: Mutex<Vec<KeyRecord>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the database in `dir` and reads the persisted state.
    pub fn open(dir: &Path, sync: SyncMode) -> Result<(Store, Persisted), StoreError> {
        let path = dir.join(DB_FILE);
        let shown = path.display().to_string();
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Open {
            path: shown.clone(),
            detail: format!("cannot create data directory {}: {e}", dir.display()),
        })?;
        let conn = Connection::open(&path).map_err(|e| open_err(&shown, &e))?;
        Self::start(conn, sync, shown)
    }

    /// A store in memory: the same code path, nothing survives the process (demo mode).
    pub fn in_memory() -> Result<(Store, Persisted), StoreError> {
        let conn = Connection::open_in_memory().map_err(|e| open_err(":memory:", &e))?;
        Self::start(conn, SyncMode::Normal, ":memory:".to_string())
    }

    fn start(
        mut conn: Connection,
        sync: SyncMode,
        path: String,
    ) -> Result<(Store, Persisted), StoreError> {
        prepare(&conn, sync, &path)?;
        let persisted = load(&mut conn, &path)?;
        let keys = load_keys(&mut conn, &path)?;
        let (tx, rx) = mpsc::channel::<Batch>();
        let (committed_tx, committed) = watch::channel(persisted.revision);
        let stats = Arc::new(StoreStats::default());
        let progress = Arc::new(Progress::default());
        let writer = {
            let stats = Arc::clone(&stats);
            let progress = Arc::clone(&progress);
            let path = path.clone();
            move || {
                let mut w = Writer {
                    conn,
                    committed: committed_tx,
                    stats,
                    progress,
                    path,
                };
                w.run(&rx);
            }
        };
        let writer = std::thread::Builder::new()
            .name("gpuboard-store".to_string())
            .spawn(writer)
            .map_err(|e| StoreError::Open {
                path: path.clone(),
                detail: format!("cannot start the writer thread: {e}"),
            })?;
        Ok((
            Store {
                tx: Some(tx),
                writer: Some(writer),
                committed,
                stats,
                progress,
                path,
                keys: Mutex::new(keys),
            },
            persisted,
        ))
    }

    /// Hands a batch to the writer; the receiver answers once it is durable. An empty batch
    /// is a barrier: it answers once everything handed over before it is durable.
    ///
    /// Callers that need `all_durable` to be exact hand batches over under one lock.
    pub fn write(&self, changes: Vec<Change>) -> oneshot::Receiver<Result<(), StoreError>> {
        self.write_keyed(changes, None).1
    }

    /// The same, with the idempotency key of the request that made `changes` written in
    /// the same commit. Also returns the batch's number: it is durable once
    /// `durable_batches` reaches it (0 for an empty batch).
    pub fn write_keyed(
        &self,
        changes: Vec<Change>,
        key: Option<KeyRecord>,
    ) -> (u64, oneshot::Receiver<Result<(), StoreError>>) {
        let (reply, rx) = oneshot::channel();
        let seq = if changes.is_empty() && key.is_none() {
            0
        } else {
            self.progress.handed.fetch_add(1, Ordering::SeqCst) + 1
        };
        let batch = Batch {
            changes,
            key,
            reply,
        };
        match &self.tx {
            Some(tx) => {
                if let Err(mpsc::SendError(batch)) = tx.send(batch) {
                    let _ = batch.reply.send(Err(StoreError::WriterGone));
                }
            }
            None => {
                let _ = batch.reply.send(Err(StoreError::WriterGone));
            }
        }
        (seq, rx)
    }

    /// How many non-empty batches are durable: batch `n` of `write_keyed` is once this
    /// reaches `n` (batches commit in the order they were handed over).
    pub fn durable_batches(&self) -> u64 {
        self.progress.durable.load(Ordering::SeqCst)
    }

    /// The idempotency keys read on open, oldest first (taken once, by the engine).
    pub fn take_keys(&self) -> Vec<KeyRecord> {
        std::mem::take(&mut *self.keys.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The highest revision known durable, as it changes.
    pub fn committed(&self) -> watch::Receiver<u64> {
        self.committed.clone()
    }

    /// Whether every batch handed over so far is durable (no commit is outstanding).
    pub fn all_durable(&self) -> bool {
        self.progress.durable.load(Ordering::SeqCst) == self.progress.handed.load(Ordering::SeqCst)
    }

    /// The commit failure that stopped the store, if one did.
    pub fn failure(&self) -> Option<StoreError> {
        self.progress
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How long the writer has been waiting on a database another process holds locked
    /// (`None` while it is not waiting).
    pub fn busy_for(&self) -> Option<Duration> {
        self.progress
            .busy_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map(|since| since.elapsed())
    }

    /// After a failed commit: the state the database still holds, read back once by the
    /// writer before it answered the failed batches (taken by the first caller).
    pub fn take_recovered(&self) -> Option<Result<Persisted, StoreError>> {
        self.progress
            .recovered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Commit counters.
    pub fn stats(&self) -> &StoreStats {
        &self.stats
    }

    /// The database file, for messages.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Closing the channel ends the writer once it has drained what was queued; a wait
        // on a busy database is given up.
        self.progress.closing.store(true, Ordering::SeqCst);
        self.tx = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

fn open_err(path: &str, e: &rusqlite::Error) -> StoreError {
    StoreError::Open {
        path: path.to_string(),
        detail: e.to_string(),
    }
}

fn prepare(conn: &Connection, sync: SyncMode, path: &str) -> Result<(), StoreError> {
    let err = |e: rusqlite::Error| open_err(path, &e);
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(err)?;
    if version > SCHEMA {
        return Err(StoreError::SchemaTooNew {
            path: path.to_string(),
            found: version,
        });
    }
    // journal_mode answers with a row, so it is read rather than executed.
    let _mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(err)?;
    let sync = match sync {
        SyncMode::Full => "FULL",
        SyncMode::Normal => "NORMAL",
    };
    conn.execute_batch(&format!(
        "PRAGMA synchronous={sync};
         PRAGMA busy_timeout={BUSY_TIMEOUT_MS};
         CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
         CREATE TABLE IF NOT EXISTS claims(id INTEGER PRIMARY KEY, body TEXT NOT NULL);
         CREATE TABLE IF NOT EXISTS cordons(node TEXT NOT NULL, idx INTEGER NOT NULL,
                                            PRIMARY KEY(node, idx));
         CREATE TABLE IF NOT EXISTS shares(project TEXT PRIMARY KEY, share INTEGER NOT NULL);
         CREATE TABLE IF NOT EXISTS events(revision INTEGER PRIMARY KEY, body TEXT NOT NULL);
         CREATE TABLE IF NOT EXISTS ledger(id INTEGER PRIMARY KEY CHECK (id = 1), body TEXT NOT NULL);
         PRAGMA user_version={SCHEMA};"
    ))
    .map_err(err)?;
    idempotency::create_table(conn).map_err(err)
}

fn load_keys(conn: &mut Connection, path: &str) -> Result<Vec<KeyRecord>, StoreError> {
    let err = |e: rusqlite::Error| open_err(path, &e);
    let tx = conn.transaction().map_err(err)?;
    let keys = idempotency::load(&tx).map_err(err)?;
    tx.commit().map_err(err)?;
    Ok(keys)
}

fn load(conn: &mut Connection, path: &str) -> Result<Persisted, StoreError> {
    let err = |e: rusqlite::Error| open_err(path, &e);
    let corrupt = |what: String, e: &dyn std::fmt::Display| StoreError::Corrupt {
        path: path.to_string(),
        what,
        detail: e.to_string(),
    };
    let tx = conn.transaction().map_err(err)?;
    let meta = |key: &str| -> Result<Option<i64>, StoreError> {
        tx.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(err)
    };
    let revision = meta("revision")?.unwrap_or(0);
    let next_id = meta("next_id")?.unwrap_or(1);
    let mut p = Persisted {
        revision: u64::try_from(revision).map_err(|e| corrupt("revision".into(), &e))?,
        next_id: ClaimId(u64::try_from(next_id).map_err(|e| corrupt("next claim id".into(), &e))?),
        ..Persisted::default()
    };
    {
        let mut q = tx
            .prepare("SELECT id, body FROM claims ORDER BY id")
            .map_err(err)?;
        let rows = q
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .map_err(err)?;
        for row in rows {
            let (id, body) = row.map_err(err)?;
            let claim: Claim =
                serde_json::from_str(&body).map_err(|e| corrupt(format!("claim {id}"), &e))?;
            p.claims.push(claim);
        }
        let mut q = tx
            .prepare("SELECT node, idx FROM cordons ORDER BY node, idx")
            .map_err(err)?;
        let rows = q
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u32>(1)?)))
            .map_err(err)?;
        for row in rows {
            p.cordoned.push(row.map_err(err)?);
        }
        let mut q = tx
            .prepare("SELECT project, share FROM shares ORDER BY project")
            .map_err(err)?;
        let rows = q
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u32>(1)?)))
            .map_err(err)?;
        for row in rows {
            p.shares.push(row.map_err(err)?);
        }
        let mut q = tx
            .prepare("SELECT revision, body FROM events ORDER BY revision DESC LIMIT ?1")
            .map_err(err)?;
        let rows = q
            .query_map([EVENTS_LOADED], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(err)?;
        for row in rows {
            let (rev, body) = row.map_err(err)?;
            let event: AuditEvent = serde_json::from_str(&body)
                .map_err(|e| corrupt(format!("audit event {rev}"), &e))?;
            p.events.push(event);
        }
        p.events.reverse();
        let ledger: Option<String> = tx
            .query_row("SELECT body FROM ledger WHERE id = 1", [], |r| r.get(0))
            .optional()
            .map_err(err)?;
        // The claims are the authority; a ledger that cannot be read is rebuilt from them.
        p.ledger = ledger.and_then(|body| match serde_json::from_str(&body) {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!("{path}: stored fair-share ledger unreadable ({e}); rebuilding it from the claims");
                None
            }
        });
    }
    tx.commit().map_err(err)?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;
    use crate::placement::NodeSpec;
    use crate::request::ClaimRequest;
    use crate::scheduler::{Scheduler, SchedulerConfig};
    use serde_json::json;

    fn nodes() -> Vec<NodeSpec> {
        vec![crate::inventory::a100_node("a", 2)]
    }

    #[tokio::test]
    async fn changes_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let t = Timestamp(1_000);
        let mut s = Scheduler::new(SchedulerConfig::default(), nodes()).unwrap();
        let before = {
            let (store, p) = Store::open(dir.path(), SyncMode::Full).unwrap();
            assert!(p.claims.is_empty() && p.revision == 0 && p.next_id == ClaimId(1));
            let req = |v| ClaimRequest::from_json(&v).unwrap();
            s.submit(req(json!({"gpu_memory": "10Gi"})), "op", t);
            s.submit(req(json!({"num_gpus": 0.5, "project": "x"})), "op", t);
            store.write(s.take_changes()).await.unwrap().unwrap();
            s.release(ClaimId(1), "op", t);
            s.set_cordon("a", 1, true, "op", t).unwrap();
            s.set_share("x", 250, "op", t).unwrap();
            let second = store.write(s.take_changes());
            // A barrier answers only after what was handed over before it.
            store.write(Vec::new()).await.unwrap().unwrap();
            second.await.unwrap().unwrap();
            assert_eq!(*store.committed().borrow(), s.revision());
            s.snapshot(t)
        };
        let (_store, p) = Store::open(dir.path(), SyncMode::Full).unwrap();
        assert_eq!(p.claims.len(), 1);
        assert_eq!(p.cordoned, vec![("a".to_string(), 1)]);
        assert_eq!(p.shares, vec![("x".to_string(), 250)]);
        assert_eq!(p.next_id, ClaimId(3));
        let (r, warnings) = Scheduler::restore(SchedulerConfig::default(), nodes(), p).unwrap();
        assert!(warnings.is_empty());
        let after = r.snapshot(t);
        assert_eq!(before.claims, after.claims);
        assert_eq!(before.nodes, after.nodes);
        assert_eq!(before.events, after.events);
        assert_eq!(before.revision, after.revision);
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch("PRAGMA user_version=99").unwrap();
        drop(conn);
        let err = Store::open(dir.path(), SyncMode::Full).unwrap_err();
        assert!(
            matches!(err, StoreError::SchemaTooNew { found: 99, .. }),
            "{err}"
        );
    }

    #[test]
    fn corrupt_rows_are_named() {
        let dir = tempfile::tempdir().unwrap();
        drop(Store::open(dir.path(), SyncMode::Normal).unwrap());
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute("INSERT INTO claims(id, body) VALUES (7, 'garbage')", [])
            .unwrap();
        drop(conn);
        let err = Store::open(dir.path(), SyncMode::Normal).unwrap_err();
        assert!(err.to_string().contains("claim 7"), "{err}");
    }
}
