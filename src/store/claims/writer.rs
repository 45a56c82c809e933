//! The writer thread: it takes every batch queued, writes them in one transaction, commits
//! (waiting out another process's lock on the database), and only then answers them.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, mpsc};
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use tokio::sync::watch;

use super::{
    BUSY_BACKOFF_MAX, BUSY_TIMEOUT_MS, BUSY_WARN_EVERY, Batch, MAX_GROUP, Progress, StoreError,
    StoreStats, load,
};
use crate::scheduler::Change;
use crate::store::idempotency;

/// The writer thread's state.
pub(super) struct Writer {
    pub(super) conn: Connection,
    pub(super) committed: watch::Sender<u64>,
    pub(super) stats: Arc<StoreStats>,
    pub(super) progress: Arc<Progress>,
    pub(super) path: String,
}

impl Writer {
    pub(super) fn run(&mut self, rx: &mpsc::Receiver<Batch>) {
        let mut failed: Option<StoreError> = None;
        while let Ok(first) = rx.recv() {
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(b) => group.push(b),
                    Err(_) => break,
                }
            }
            let result = match &failed {
                Some(e) => Err(e.clone()),
                None if group
                    .iter()
                    .all(|b| b.changes.is_empty() && b.key.is_none()) =>
                {
                    Ok(None)
                }
                None => self.commit_waiting(&group),
            };
            match result {
                Ok(revision) => self.committed_group(group, revision),
                Err(e) => {
                    if failed.is_none() {
                        self.stop(&e);
                        failed = Some(e.clone());
                    }
                    for b in group {
                        let _ = b.reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// Commits `group`, trying again for as long as another process holds the database
    /// locked (with backoff, a warning every `BUSY_WARN_EVERY`); any other failure, or
    /// the store closing, ends it.
    fn commit_waiting(&mut self, group: &[Batch]) -> Result<Option<u64>, StoreError> {
        let mut pause = Duration::from_millis(50);
        let mut started: Option<Instant> = None;
        let mut warned = Instant::now();
        loop {
            match commit(&mut self.conn, group) {
                Ok(revision) => {
                    if let Some(since) = started {
                        self.set_busy(None);
                        tracing::warn!(
                            "state database {} is free again after {} s; {} waiting request(s) committed",
                            self.path,
                            since.elapsed().as_secs(),
                            group.len()
                        );
                    }
                    return Ok(revision);
                }
                Err(Failed::Busy(detail)) => {
                    let since = *started.get_or_insert_with(|| {
                        // SQLite already waited its busy timeout before answering.
                        let since = Instant::now()
                            .checked_sub(Duration::from_millis(u64::from(BUSY_TIMEOUT_MS)))
                            .unwrap_or_else(Instant::now);
                        self.set_busy(Some(since));
                        tracing::warn!(
                            "state database {} is locked by another process ({detail}); changes wait until it is released",
                            self.path
                        );
                        warned = Instant::now();
                        since
                    });
                    if warned.elapsed() >= BUSY_WARN_EVERY {
                        warned = Instant::now();
                        tracing::warn!(
                            "state database {} still locked by another process after {} s; changes wait",
                            self.path,
                            since.elapsed().as_secs()
                        );
                    }
                    if self.progress.closing.load(Ordering::SeqCst) {
                        self.set_busy(None);
                        return Err(StoreError::Commit(format!(
                            "shutting down while the database was locked by another process: {detail}"
                        )));
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(BUSY_BACKOFF_MAX);
                }
                Err(Failed::Other(e)) => {
                    if started.is_some() {
                        self.set_busy(None);
                    }
                    return Err(e);
                }
            }
        }
    }

    fn set_busy(&self, since: Option<Instant>) {
        *self
            .progress
            .busy_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = since;
    }

    fn committed_group(&self, group: Vec<Batch>, revision: Option<u64>) {
        let stats = &self.stats;
        stats
            .commits
            .fetch_add(u64::from(revision.is_some()), Ordering::Relaxed);
        stats
            .batches
            .fetch_add(group.len() as u64, Ordering::Relaxed);
        let written = group
            .iter()
            .filter(|b| !b.changes.is_empty() || b.key.is_some())
            .count() as u64;
        // Counted durable before the revision is published and the waiters answered.
        self.progress.durable.fetch_add(written, Ordering::SeqCst);
        if let Some(rev) = revision {
            tracing::debug!(revision = rev, batches = group.len(), "state committed");
            self.committed.send_if_modified(|r| {
                let newer = rev > *r;
                *r = (*r).max(rev);
                newer
            });
        }
        for b in group {
            stats
                .changes
                .fetch_add(b.changes.len() as u64, Ordering::Relaxed);
            let _ = b.reply.send(Ok(()));
        }
    }

    /// The first failure: reads back what the database holds (the failed transaction was
    /// rolled back) so the engine can return to it, and records why, before any waiter
    /// hears of the failure.
    fn stop(&mut self, e: &StoreError) {
        let recovered = load(&mut self.conn, &self.path);
        *self
            .progress
            .recovered
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(recovered);
        *self
            .progress
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(e.clone());
        tracing::error!("state commit failed: {e}");
    }
}

/// Why a commit did not happen.
enum Failed {
    /// Another connection holds the database locked: try again.
    Busy(String),
    /// Anything else: the store stops.
    Other(StoreError),
}

impl From<rusqlite::Error> for Failed {
    fn from(e: rusqlite::Error) -> Failed {
        let busy = matches!(
            e.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        );
        if busy {
            Failed::Busy(e.to_string())
        } else {
            Failed::Other(StoreError::Commit(e.to_string()))
        }
    }
}

impl From<ApplyError> for Failed {
    fn from(e: ApplyError) -> Failed {
        match e {
            ApplyError::Sql(e) => Failed::from(e),
            other => Failed::Other(StoreError::Commit(other.to_string())),
        }
    }
}

/// Applies every batch of the group in one transaction; returns the last revision written.
/// A failed try is rolled back whole (the transaction is dropped), so it can be retried.
fn commit(conn: &mut Connection, group: &[Batch]) -> Result<Option<u64>, Failed> {
    let tx = conn.transaction()?;
    let mut revision = None;
    // Counters only grow, so the group's last ones are all that need writing.
    let last_counters = group
        .iter()
        .flat_map(|b| b.changes.iter())
        .rfind(|c| matches!(c, Change::Counters { .. }));
    // So does the ledger: each copy is whole.
    let last_ledger = group
        .iter()
        .flat_map(|b| b.changes.iter())
        .rfind(|c| matches!(c, Change::Ledger(_)));
    for change in group.iter().flat_map(|b| b.changes.iter()) {
        let superseded = (matches!(change, Change::Counters { .. })
            && last_counters.is_some_and(|last| !std::ptr::eq(change, last)))
            || (matches!(change, Change::Ledger(_))
                && last_ledger.is_some_and(|last| !std::ptr::eq(change, last)));
        if superseded {
            continue;
        }
        apply(&tx, change, &mut revision)?;
    }
    for key in group.iter().filter_map(|b| b.key.as_ref()) {
        idempotency::save(&tx, key)?;
    }
    tx.commit()?;
    Ok(revision)
}

#[derive(Debug, thiserror::Error)]
enum ApplyError {
    #[error(transparent)]
    Sql(#[from] rusqlite::Error),
    #[error("cannot encode state: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("value out of range for the database: {0}")]
    Range(#[from] std::num::TryFromIntError),
}

fn apply(
    tx: &rusqlite::Transaction<'_>,
    change: &Change,
    revision: &mut Option<u64>,
) -> Result<(), ApplyError> {
    match change {
        Change::Claim(c) => {
            let body = serde_json::to_string(c)?;
            tx.prepare_cached("INSERT OR REPLACE INTO claims(id, body) VALUES (?1, ?2)")?
                .execute(params![i64::try_from(c.id.0)?, body])?;
        }
        Change::ClaimRemoved(id) => {
            tx.prepare_cached("DELETE FROM claims WHERE id = ?1")?
                .execute([i64::try_from(id.0)?])?;
        }
        Change::Cordon {
            node,
            index,
            cordoned: true,
        } => {
            tx.prepare_cached("INSERT OR IGNORE INTO cordons(node, idx) VALUES (?1, ?2)")?
                .execute(params![node, index])?;
        }
        Change::Cordon { node, index, .. } => {
            tx.prepare_cached("DELETE FROM cordons WHERE node = ?1 AND idx = ?2")?
                .execute(params![node, index])?;
        }
        Change::Share { project, share } => {
            tx.prepare_cached("INSERT OR REPLACE INTO shares(project, share) VALUES (?1, ?2)")?
                .execute(params![project, share])?;
        }
        Change::Ledger(l) => {
            let body = serde_json::to_string(l)?;
            tx.prepare_cached("INSERT OR REPLACE INTO ledger(id, body) VALUES (1, ?1)")?
                .execute([body])?;
        }
        Change::Audit(e) => {
            let body = serde_json::to_string(e)?;
            tx.prepare_cached("INSERT OR REPLACE INTO events(revision, body) VALUES (?1, ?2)")?
                .execute(params![i64::try_from(e.revision)?, body])?;
        }
        Change::Counters {
            revision: rev,
            next_id,
        } => {
            let mut q =
                tx.prepare_cached("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)")?;
            q.execute(params!["revision", i64::try_from(*rev)?])?;
            q.execute(params!["next_id", i64::try_from(next_id.0)?])?;
            *revision = Some(*rev);
        }
    }
    Ok(())
}
