//! The CLI's snapshot cache: the last snapshot read from each endpoint (what `ls` reads of
//! it: nodes, claims, the endpoint) and its version, one file per endpoint URL, and the
//! last capacity read from each (`GET /v1/capacity`, what a fleet claim places on) and its
//! tag, all in one file (`capacities.json`), under the user's cache directory (`GPUBOARD_CACHE_DIR`, else
//! `~/.cache/gpuboard/snapshots`). Both are read with `If-None-Match`, so an endpoint
//! that has not changed since the last command answers 304 and sends nothing. The cache
//! is only a saving: a missing, unreadable or foreign file is read again from the
//! endpoint, and a file that cannot be written is skipped.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::client::{CapacityRead, Client, ClientError, Conditional};
use crate::snapshot::Snapshot;
use crate::wire::SnapshotVersion;
use crate::wire::capacity::{CAPACITY_SCHEMA, CapacitySummary};

/// One cached read.
#[derive(Serialize, Deserialize)]
struct Entry {
    url: String,
    version: SnapshotVersion,
    snapshot: Snapshot,
}

/// One cached capacity read. The capacity is kept as the JSON the endpoint sent and parsed
/// only when the endpoint answers 304 for it: a 1 000-node endpoint's is over a megabyte,
/// and writing it anew whenever another endpoint changed, or parsing it when the endpoint
/// sent a new one anyway, was most of a warm fleet claim's time.
#[derive(Debug)]
struct CapacityEntry {
    url: String,
    etag: String,
    capacity: Box<str>,
}

/// A `CapacityEntry` as the file holds it (its capacity checked to be JSON, not read).
#[derive(Deserialize)]
struct StoredCapacity {
    url: String,
    etag: String,
    capacity: Box<serde_json::value::RawValue>,
}

/// The file (under the cache directory, `.json`) that holds every endpoint's capacity.
const CAPACITY_FILE: &str = "capacities";

/// How one capacity was read.
enum Read {
    /// 304: the cached one holds.
    Cached(Box<CapacitySummary>),
    /// Read whole, with its tag and JSON when it came with a tag.
    Fresh(Box<CapacitySummary>, Option<(String, String)>),
}

/// Where the cached snapshots live; `None` turns caching off.
#[derive(Clone, Debug)]
pub(super) struct SnapshotCache {
    dir: Option<PathBuf>,
    saving: Arc<Saving>,
}

/// The capacity file's writes of one command, each on a blocking thread so that a claim
/// is sent while the file is written (a 100-endpoint file took a millisecond to write,
/// a twentieth of a warm claim). Only the last asked-for content is kept (`pending`); a
/// thread writes it if nothing later is on disk, so the file ends as the last read left
/// it. A blocking task still queued when the runtime is dropped never runs, so what is
/// pending is also written by the next load and when the last handle goes (`Drop`).
#[derive(Debug, Default)]
struct Saving {
    issued: AtomicU64,
    /// The number of the write on disk.
    on_disk: Mutex<u64>,
    /// The last write asked for and not yet done: its number, file and entries.
    pending: Mutex<Option<PendingWrite>>,
}

/// A capacity-file write asked for: its number, the file and the entries.
type PendingWrite = (u64, PathBuf, HashMap<String, CapacityEntry>);

impl Saving {
    /// Writes what is pending, unless a later write is on disk already.
    fn flush(&self) {
        let mut on_disk = self.on_disk.lock().unwrap_or_else(PoisonError::into_inner);
        let taken = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some((number, path, cached)) = taken.filter(|(n, _, _)| *n > *on_disk) else {
            return;
        };
        let mut entries: Vec<&CapacityEntry> = cached.values().collect();
        entries.sort_by(|a, b| a.url.cmp(&b.url));
        // Best effort: a read-only or full cache directory only costs the next full read.
        let _ = write_private_bytes(&path, &capacity_file(&entries));
        *on_disk = number;
    }
}

impl Drop for Saving {
    fn drop(&mut self) {
        self.flush();
    }
}

impl SnapshotCache {
    /// The user's cache: `GPUBOARD_CACHE_DIR`, else the platform cache directory.
    pub(super) fn user() -> SnapshotCache {
        let dir = std::env::var_os("GPUBOARD_CACHE_DIR")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| dirs::cache_dir().map(|d| d.join("gpuboard").join("snapshots")));
        SnapshotCache {
            dir,
            saving: Arc::default(),
        }
    }

    /// No cache: every read is a full one.
    #[cfg(test)]
    pub(super) fn off() -> SnapshotCache {
        SnapshotCache {
            dir: None,
            saving: Arc::default(),
        }
    }

    /// A cache in `dir`.
    #[cfg(test)]
    pub(super) fn at(dir: &Path) -> SnapshotCache {
        SnapshotCache {
            dir: Some(dir.to_path_buf()),
            saving: Arc::default(),
        }
    }

    fn file(&self, url: &str) -> Option<PathBuf> {
        self.file_for(url, "json")
    }

    fn file_for(&self, url: &str, extension: &str) -> Option<PathBuf> {
        let name: String = url
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(200)
            .collect();
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{name}.{extension}")))
    }

    fn load(&self, url: &str) -> Option<Entry> {
        let bytes = std::fs::read(self.file(url)?).ok()?;
        let e: Entry = serde_json::from_slice(&bytes).ok()?;
        // Two URLs may sanitise to one name: only the one written for this URL counts.
        (e.url == url).then_some(e)
    }

    fn store(&self, entry: &Entry) {
        let Some(path) = self.file(&entry.url) else {
            return;
        };
        // Best effort: a read-only or full cache directory only costs the next full read.
        let _ = write_private(&path, entry);
    }

    /// Every cached capacity, by URL (one file for all endpoints: one read and at most one
    /// write per command, where a file per endpoint cost 100 creations and renames on a
    /// cold 100-endpoint claim, most of its time).
    fn load_capacities(&self) -> HashMap<String, CapacityEntry> {
        // A write asked for but cut off with its runtime lands first.
        self.saving.flush();
        let Some(bytes) = self
            .file_for(CAPACITY_FILE, "json")
            .and_then(|p| std::fs::read(p).ok())
        else {
            return HashMap::new();
        };
        serde_json::from_slice::<Vec<StoredCapacity>>(&bytes)
            .map(|v| {
                v.into_iter()
                    .map(|e| {
                        let entry = CapacityEntry {
                            url: e.url,
                            etag: e.etag,
                            capacity: e.capacity.into(),
                        };
                        (entry.url.clone(), entry)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every member's capacity, read concurrently: the cached one where the endpoint answers
    /// 304, else the fresh one (cached for the next command when it came with a tag). An
    /// endpoint from before `GET /v1/capacity` gives the capacity of its snapshot (read
    /// through the snapshot cache).
    pub(super) async fn capacities(
        &self,
        clients: &[&Client],
    ) -> Vec<Result<CapacitySummary, ClientError>> {
        let mut cached = if self.dir.is_some() {
            self.load_capacities()
        } else {
            HashMap::new()
        };
        let reads = futures::future::join_all(
            clients
                .iter()
                .map(|c| self.capacity_read(c, cached.get(c.endpoint()))),
        )
        .await;
        let mut fresh = false;
        let out = reads
            .into_iter()
            .zip(clients)
            .map(|(read, client)| match read? {
                Read::Cached(capacity) | Read::Fresh(capacity, None) => Ok(*capacity),
                Read::Fresh(capacity, Some((etag, json))) => {
                    fresh = true;
                    let url = client.endpoint().to_string();
                    let entry = CapacityEntry {
                        url: url.clone(),
                        etag,
                        capacity: json.into_boxed_str(),
                    };
                    cached.insert(url, entry);
                    Ok(*capacity)
                }
            })
            .collect();
        if fresh {
            self.save_capacities(cached);
        }
        out
    }

    /// Writes `cached` as the capacity file on a blocking thread (`Saving`).
    fn save_capacities(&self, cached: HashMap<String, CapacityEntry>) {
        let Some(path) = self.file_for(CAPACITY_FILE, "json") else {
            return;
        };
        let number = self.saving.issued.fetch_add(1, Ordering::Relaxed) + 1;
        {
            let mut pending = self
                .saving
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if pending.as_ref().is_none_or(|(n, _, _)| *n < number) {
                *pending = Some((number, path, cached));
            }
        }
        let saving = Arc::clone(&self.saving);
        tokio::task::spawn_blocking(move || saving.flush());
    }

    /// One endpoint's capacity, conditionally on the tag of `cached` (the cached one).
    async fn capacity_read(
        &self,
        client: &Client,
        cached: Option<&CapacityEntry>,
    ) -> Result<Read, ClientError> {
        let tag = cached.map(|e| e.etag.as_str());
        let held = match client.capacity_if_changed(tag).await? {
            CapacityRead::NotModified => cached.and_then(|e| {
                serde_json::from_str::<CapacitySummary>(&e.capacity)
                    .ok()
                    .filter(|c| c.schema == CAPACITY_SCHEMA)
            }),
            CapacityRead::Fresh {
                capacity,
                etag,
                json,
            } => return Ok(Read::Fresh(capacity, etag.map(|t| (t, json)))),
            CapacityRead::NoRoute => {
                return Ok(Read::Fresh(
                    Box::new(CapacitySummary::of(&self.read(client).await?)),
                    None,
                ));
            }
        };
        if let Some(capacity) = held {
            return Ok(Read::Cached(Box::new(capacity)));
        }
        // 304 to a request that named no tag, or for a cached capacity this build cannot
        // read: read it whole.
        match client.capacity_if_changed(None).await? {
            CapacityRead::Fresh {
                capacity,
                etag,
                json,
            } => Ok(Read::Fresh(capacity, etag.map(|t| (t, json)))),
            _ => Ok(Read::Fresh(
                Box::new(CapacitySummary::of(&self.read(client).await?)),
                None,
            )),
        }
    }

    /// The endpoint's snapshot: the cached one when the endpoint answers 304, else the
    /// fresh one (cached for the next command when it came with a version).
    pub(super) async fn read(&self, client: &Client) -> Result<Snapshot, ClientError> {
        let url = client.endpoint().to_string();
        let cached = self.load(&url);
        match client
            .snapshot_if_changed(cached.as_ref().map(|e| e.version))
            .await?
        {
            Conditional::NotModified => match cached {
                Some(e) => Ok(e.snapshot),
                // 304 to a request that named no version: read it whole.
                None => client.snapshot().await,
            },
            Conditional::Fresh { snapshot, version } => {
                let snapshot = *snapshot;
                match version {
                    Some(version) if self.dir.is_some() => {
                        // Kept: what placement and `ls` read (nodes, claims, the endpoint);
                        // the audit log, accounts and host figures only slow the next read.
                        let entry = Entry {
                            url,
                            version,
                            snapshot: Snapshot {
                                schema: snapshot.schema,
                                endpoint: snapshot.endpoint.clone(),
                                revision: snapshot.revision,
                                taken_at: snapshot.taken_at,
                                nodes: snapshot.nodes.clone(),
                                claims: snapshot.claims.clone(),
                                ..Snapshot::default()
                            },
                        };
                        self.store(&entry);
                        Ok(snapshot)
                    }
                    _ => Ok(snapshot),
                }
            }
        }
    }
}

/// The capacity file's text: `[{"url": .., "etag": .., "capacity": ..}, ..]`, each
/// capacity the JSON it was read as (checked when it was read or loaded).
fn capacity_file(entries: &[&CapacityEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.iter().map(|e| e.capacity.len() + 128).sum());
    out.push(b'[');
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"url":"#);
        push_json_string(&mut out, &e.url);
        out.extend_from_slice(br#","etag":"#);
        push_json_string(&mut out, &e.etag);
        out.extend_from_slice(br#","capacity":"#);
        out.extend_from_slice(e.capacity.as_bytes());
        out.push(b'}');
    }
    out.push(b']');
    out
}

/// `text` as a JSON string.
fn push_json_string(out: &mut Vec<u8>, text: &str) {
    // Serialising a `str` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

/// Writes `entry` to `path` through a temporary file, readable by the user only (a
/// snapshot names holders and projects).
fn write_private(path: &Path, entry: &impl Serialize) -> std::io::Result<()> {
    // Serialised first, then written in one go (not one syscall per token).
    write_private_bytes(path, &serde_json::to_vec(entry)?)
}

/// Writes `bytes` to `path` as `write_private` does.
fn write_private_bytes(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_foreign_files_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let cache = SnapshotCache::at(dir.path());
        let url = "http://127.0.0.1:1/";
        assert!(cache.load(url).is_none());
        let entry = Entry {
            url: url.to_string(),
            version: "7.3".parse().unwrap(),
            snapshot: Snapshot {
                revision: 9,
                ..Snapshot::default()
            },
        };
        cache.store(&entry);
        let back = cache.load(url).unwrap();
        assert_eq!(back.version, entry.version);
        assert_eq!(back.snapshot.revision, 9);
        // Another URL that sanitises to the same file name is not served this entry.
        assert!(cache.load("http://127.0.0.1_1/").is_none());
        // Garbage in the file is a miss, not an error.
        std::fs::write(cache.file(url).unwrap(), b"{not json").unwrap();
        assert!(cache.load(url).is_none());
        let off = SnapshotCache::off();
        off.store(&entry);
        assert!(off.load(url).is_none());
    }

    #[test]
    fn the_capacity_file_ends_as_the_last_read_left_it() {
        let dir = tempfile::tempdir().unwrap();
        let cache = SnapshotCache::at(dir.path());
        let url = "http://127.0.0.1:1/";
        let read = |etag: &str| {
            let capacity = serde_json::to_string(&CapacitySummary::of(&Snapshot::default()));
            let entry = CapacityEntry {
                url: url.to_string(),
                etag: etag.to_string(),
                capacity: capacity.unwrap().into_boxed_str(),
            };
            HashMap::from([(url.to_string(), entry)])
        };
        for round in 0..20 {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            rt.block_on(async {
                for k in 0..5 {
                    cache.save_capacities(read(&format!("\"{round}-{k}\"")));
                }
            });
            // Dropping the runtime waits for its blocking threads: every write is done.
            drop(rt);
            let on_disk = cache.load_capacities();
            assert_eq!(on_disk[url].etag, format!("\"{round}-4\""));
        }
    }

    #[test]
    fn the_capacity_file_keeps_each_capacity_as_read_and_is_json() {
        let dir = tempfile::tempdir().unwrap();
        let cache = SnapshotCache::at(dir.path());
        let entry = |url: &str, etag: &str, capacity: &str| CapacityEntry {
            url: url.to_string(),
            etag: etag.to_string(),
            capacity: capacity.into(),
        };
        // Names that need escaping, and capacities written with and without spaces.
        let written = [
            entry("http://a/\"x\"\\", "\"c1\"", r#"{"schema":1, "nodes": []}"#),
            entry("http://b/", "W/\"c2\"", r#"{"schema":1,"policy":"spread"}"#),
        ];
        let file = capacity_file(&written.iter().collect::<Vec<_>>());
        let parsed: serde_json::Value = serde_json::from_slice(&file).unwrap();
        assert_eq!(parsed[0]["url"], "http://a/\"x\"\\");
        assert_eq!(parsed[1]["capacity"]["policy"], "spread");
        std::fs::write(cache.file_for(CAPACITY_FILE, "json").unwrap(), &file).unwrap();
        let back = cache.load_capacities();
        for w in &written {
            let b = &back[&w.url];
            assert_eq!((&b.etag, &b.capacity), (&w.etag, &w.capacity));
        }
        // A capacity that is not JSON makes the whole file a miss, as any foreign file is.
        let bad = [entry("http://c/", "\"c3\"", "{not json")];
        let file = capacity_file(&bad.iter().collect::<Vec<_>>());
        std::fs::write(cache.file_for(CAPACITY_FILE, "json").unwrap(), &file).unwrap();
        assert!(cache.load_capacities().is_empty());
    }
}
