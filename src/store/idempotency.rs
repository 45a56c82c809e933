//! Idempotent claims: the keys clients send with `POST /v1/claims`
//! (`wire::IDEMPOTENCY_HEADER`) and the answer each key got.
//!
//! A key is recorded with its claim in the same commit (`Store::write_keyed`), so after a
//! crash either both are there or neither. A request whose key is known is not run again:
//! it gets the first request's answer (same status, same body) once that answer is
//! durable, or `409 in_flight` while it is still being committed; with another body (or
//! another caller) it is refused. Keys are kept `KEEP_MS` (24 h), at most `MAX_KEYS`, the
//! oldest dropped first.
//!
//! `KeyTable` is the in-memory index (plain data, clock injected); the SQL helpers below
//! it are what the store's writer runs.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;

use rusqlite::{Connection, Transaction, params};
use sha2::Digest as _;

use crate::clock::Timestamp;
use crate::ids::ClaimId;

/// How long a key is remembered after its first request, in milliseconds (24 h).
pub const KEEP_MS: u64 = 24 * 60 * 60 * 1000;

/// The most keys remembered at once; past it the oldest are forgotten first.
pub const MAX_KEYS: usize = 100_000;

/// What a request is, for telling a retry from a different request under the same key:
/// a SHA-256 of the caller and the claim in its canonical wire form, in hex.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint(pub String);

impl Fingerprint {
    /// The fingerprint of `actor` sending `canonical_body`.
    pub fn of(actor: &str, canonical_body: &str) -> Fingerprint {
        let mut h = sha2::Sha256::new();
        h.update(actor.as_bytes());
        h.update([0]);
        h.update(canonical_body.as_bytes());
        let hex = h.finalize().iter().fold(String::new(), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        });
        Fingerprint(hex)
    }
}

/// The answer a key's first request got, replayed to every later one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyAnswer {
    /// The HTTP status (201 placed, 202 queued, 409 refused).
    pub status: u16,
    /// The claim it made, if any.
    pub claim: Option<ClaimId>,
    /// The JSON body, as sent.
    pub body: String,
}

/// One key as the store writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRecord {
    /// The key.
    pub key: String,
    /// Its first request.
    pub fingerprint: Fingerprint,
    /// That request's answer.
    pub answer: KeyAnswer,
    /// When it was recorded.
    pub recorded: Timestamp,
}

/// A key remembered in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// What was recorded.
    pub record: KeyRecord,
    /// The store batch that carries it (`Store::write_keyed`); 0 when read from disk.
    pub batch: u64,
}

/// What the table knows of a key, for a request with `fingerprint`.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// Never seen (or forgotten): run the request.
    Unknown,
    /// Seen with this request: answer what it got.
    Seen(&'a Entry),
    /// Seen with another request (or caller): refuse.
    Reused,
}

/// The keys remembered, by key, with their order of arrival for pruning.
#[derive(Debug, Default)]
pub struct KeyTable {
    by_key: HashMap<String, Entry>,
    order: VecDeque<(Timestamp, String)>,
}

impl KeyTable {
    /// The table holding `records` (read back from disk, oldest first) still kept at `now`.
    pub fn restored(records: Vec<KeyRecord>, now: Timestamp) -> KeyTable {
        let mut t = KeyTable::default();
        for record in records {
            t.insert(record, 0, now);
        }
        t
    }

    /// What is known of `key` for a request with `fingerprint`.
    pub fn lookup(&self, key: &str, fingerprint: &Fingerprint) -> Lookup<'_> {
        match self.by_key.get(key) {
            None => Lookup::Unknown,
            Some(e) if &e.record.fingerprint == fingerprint => Lookup::Seen(e),
            Some(_) => Lookup::Reused,
        }
    }

    /// Remembers `record`, carried by store batch `batch`, and forgets what `now` no
    /// longer keeps.
    pub fn insert(&mut self, record: KeyRecord, batch: u64, now: Timestamp) {
        self.order.push_back((record.recorded, record.key.clone()));
        self.by_key
            .insert(record.key.clone(), Entry { record, batch });
        self.prune(now);
    }

    /// Forgets keys recorded more than `KEEP_MS` before `now`, and the oldest past
    /// `MAX_KEYS`.
    pub fn prune(&mut self, now: Timestamp) {
        let cutoff = kept_since(now);
        while let Some((at, key)) = self.order.front() {
            if *at >= cutoff && self.order.len() <= MAX_KEYS {
                break;
            }
            // Only the entry recorded at that time: a key seen again later is not dropped
            // by its older place in the queue.
            if self
                .by_key
                .get(key)
                .is_some_and(|e| e.record.recorded == *at)
            {
                self.by_key.remove(key);
            }
            self.order.pop_front();
        }
    }

    /// Keys remembered.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// The oldest time still kept at `now`.
fn kept_since(now: Timestamp) -> Timestamp {
    Timestamp(now.0.saturating_sub(KEEP_MS))
}

/// Creates the table of keys when missing (the schema stays 1: a build without it ignores it).
pub(crate) fn create_table(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS idempotency(
             key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, status INTEGER NOT NULL,
             claim INTEGER, body TEXT NOT NULL, recorded INTEGER NOT NULL);
         CREATE INDEX IF NOT EXISTS idempotency_recorded ON idempotency(recorded);",
    )
}

/// The keys stored, oldest first, at most `MAX_KEYS` (the newest).
pub(crate) fn load(tx: &Transaction<'_>) -> rusqlite::Result<Vec<KeyRecord>> {
    let mut q = tx.prepare(
        "SELECT key, fingerprint, status, claim, body, recorded FROM
           (SELECT * FROM idempotency ORDER BY recorded DESC LIMIT ?1) ORDER BY recorded",
    )?;
    let limit = i64::try_from(MAX_KEYS).unwrap_or(i64::MAX);
    let rows = q.query_map([limit], |r| {
        Ok(KeyRecord {
            key: r.get(0)?,
            fingerprint: Fingerprint(r.get(1)?),
            answer: KeyAnswer {
                status: r.get(2)?,
                claim: r
                    .get::<_, Option<i64>>(3)?
                    .map(|c| ClaimId(u64::try_from(c).unwrap_or(0))),
                body: r.get(4)?,
            },
            recorded: Timestamp(u64::try_from(r.get::<_, i64>(5)?).unwrap_or(0)),
        })
    })?;
    rows.collect()
}

/// Writes `record` in the claim's transaction, and drops the keys it makes too old.
pub(crate) fn save(tx: &Transaction<'_>, record: &KeyRecord) -> rusqlite::Result<()> {
    let recorded = i64::try_from(record.recorded.0).unwrap_or(i64::MAX);
    let claim = record
        .answer
        .claim
        .map(|c| i64::try_from(c.0).unwrap_or(i64::MAX));
    tx.prepare_cached(
        "INSERT OR REPLACE INTO idempotency(key, fingerprint, status, claim, body, recorded)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        record.key,
        record.fingerprint.0,
        record.answer.status,
        claim,
        record.answer.body,
        recorded
    ])?;
    let cutoff = i64::try_from(kept_since(record.recorded).0).unwrap_or(0);
    tx.prepare_cached("DELETE FROM idempotency WHERE recorded < ?1")?
        .execute([cutoff])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record(key: &str, fp: &str, at: u64) -> KeyRecord {
        KeyRecord {
            key: key.to_string(),
            fingerprint: Fingerprint(fp.to_string()),
            answer: KeyAnswer {
                status: 201,
                claim: Some(ClaimId(at)),
                body: format!("{{\"id\":{at}}}"),
            },
            recorded: Timestamp(at),
        }
    }

    #[test]
    fn the_same_key_and_request_finds_the_first_answer_and_another_request_is_refused() {
        let mut t = KeyTable::default();
        let fp = Fingerprint::of("op", "{\"num_gpus\":1}");
        assert_eq!(t.lookup("k1", &fp), Lookup::Unknown);
        let mut r = record("k1", "", 1_000);
        r.fingerprint = fp.clone();
        t.insert(r.clone(), 7, Timestamp(1_000));
        let Lookup::Seen(e) = t.lookup("k1", &fp) else {
            panic!("the key was recorded")
        };
        assert_eq!((e.record.clone(), e.batch), (r, 7));
        assert_eq!(
            t.lookup("k1", &Fingerprint::of("op", "{\"num_gpus\":2}")),
            Lookup::Reused
        );
        assert_eq!(
            t.lookup("k1", &Fingerprint::of("someone-else", "{\"num_gpus\":1}")),
            Lookup::Reused,
            "another caller's request under the same key"
        );
        assert_eq!(t.lookup("k2", &fp), Lookup::Unknown);
    }

    #[test]
    fn keys_are_forgotten_24_hours_after_their_first_request() {
        let mut t = KeyTable::default();
        t.insert(record("old", "a", 1_000), 1, Timestamp(1_000));
        t.insert(
            record("new", "a", 1_000 + KEEP_MS / 2),
            2,
            Timestamp(1_000 + KEEP_MS / 2),
        );
        t.prune(Timestamp(1_000 + KEEP_MS));
        assert_eq!(t.len(), 2, "exactly 24 h old is still kept");
        t.prune(Timestamp(1_001 + KEEP_MS));
        assert_eq!(t.lookup("old", &Fingerprint("a".into())), Lookup::Unknown);
        assert!(matches!(
            t.lookup("new", &Fingerprint("a".into())),
            Lookup::Seen(_)
        ));
        let restored = KeyTable::restored(
            vec![
                record("old", "a", 1_000),
                record("new", "a", 1_000 + KEEP_MS),
            ],
            Timestamp(2_000 + KEEP_MS),
        );
        assert_eq!(restored.len(), 1, "a restart forgets what is too old");
    }

    #[test]
    fn the_table_is_bounded_oldest_first() {
        let mut t = KeyTable::default();
        for i in 0..=MAX_KEYS as u64 {
            t.insert(record(&format!("k{i}"), "a", i), i, Timestamp(i));
        }
        assert_eq!(t.len(), MAX_KEYS);
        assert_eq!(t.lookup("k0", &Fingerprint("a".into())), Lookup::Unknown);
        assert!(matches!(
            t.lookup("k1", &Fingerprint("a".into())),
            Lookup::Seen(_)
        ));
    }

    #[test]
    fn keys_survive_in_the_database_and_old_ones_are_dropped_there() {
        let mut conn = Connection::open_in_memory().unwrap();
        create_table(&conn).unwrap();
        let tx = conn.transaction().unwrap();
        save(&tx, &record("a", "fa", 1_000)).unwrap();
        save(&tx, &record("b", "fb", 2_000)).unwrap();
        tx.commit().unwrap();
        let tx = conn.transaction().unwrap();
        assert_eq!(
            load(&tx).unwrap(),
            vec![record("a", "fa", 1_000), record("b", "fb", 2_000)]
        );
        save(&tx, &record("c", "fc", 1_500 + KEEP_MS)).unwrap();
        let keys: Vec<String> = load(&tx).unwrap().into_iter().map(|r| r.key).collect();
        assert_eq!(keys, ["b", "c"]);
    }

    proptest! {
        /// Whatever keys arrive in whatever order, at nondecreasing times: a key is found
        /// with its first request's answer while it is kept, refused with another
        /// request, and unknown once more than 24 h old.
        #[test]
        fn a_key_answers_its_first_request_until_it_is_forgotten(
            ops in proptest::collection::vec((0u8..6, 0u8..3, 0u64..(KEEP_MS / 4)), 1..60)
        ) {
            let mut t = KeyTable::default();
            let mut now = 0u64;
            let mut first: HashMap<String, (String, u64)> = HashMap::new();
            for (k, body, step) in ops {
                now += step;
                let key = format!("k{k}");
                let fp = Fingerprint(format!("body{body}"));
                first.retain(|_, (_, at)| *at + KEEP_MS >= now);
                t.prune(Timestamp(now));
                match (t.lookup(&key, &fp), first.get(&key)) {
                    (Lookup::Unknown, None) => {
                        let mut r = record(&key, "", now);
                        r.fingerprint = fp.clone();
                        t.insert(r, now, Timestamp(now));
                        first.insert(key, (fp.0, now));
                    }
                    (Lookup::Seen(e), Some((f, at))) => {
                        prop_assert_eq!(&e.record.fingerprint.0, f);
                        prop_assert_eq!(e.record.recorded, Timestamp(*at));
                        prop_assert_eq!(e.record.answer.claim, Some(ClaimId(*at)));
                    }
                    (Lookup::Reused, Some((f, _))) => prop_assert_ne!(f, &fp.0),
                    (got, want) => prop_assert!(false, "{key}: table {got:?}, model {want:?}"),
                }
            }
        }
    }
}
