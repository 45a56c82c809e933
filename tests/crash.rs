//! Crash campaign: concurrent claim/release clients and snapshot readers against a real
//! `gpuboard serve`, `kill -9` at a random (seeded) moment, restart on the same data
//! directory, and check that every claim acknowledged before the kill is there (where it
//! was placed), every acknowledged release stayed released, no id is duplicated, no device
//! is over-committed, and everything a reader saw (revisions, audit events, claims) is on
//! disk, so no revision is handed out twice. 30 kills.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Server, demo_fleet, http};
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

const KILLS: u64 = 30;
const CLIENTS: u64 = 8;
const READERS: u64 = 2;

/// Where a claim was placed: node and device indexes.
type Place = (String, Vec<u64>);

/// What the clients were told.
#[derive(Default)]
struct Model {
    /// Acknowledged (201) and not released.
    live: BTreeMap<u64, Place>,
    /// A release was sent but not answered: either outcome is allowed.
    in_flight: BTreeSet<u64>,
    /// Acknowledged releases.
    released: BTreeSet<u64>,
}

/// What the snapshot readers were shown.
#[derive(Default)]
struct Seen {
    /// The highest revision of any snapshot read.
    revision: u64,
    /// Audit events read, by revision.
    events: BTreeMap<u64, Value>,
    /// Claims read.
    claims: BTreeSet<u64>,
}

async fn reader(url: String, token: String, seen: Arc<Mutex<Seen>>) {
    let http = http();
    loop {
        let Ok(resp) = http
            .get(format!("{url}/v1/snapshot"))
            .bearer_auth(&token)
            .send()
            .await
        else {
            return;
        };
        if resp.status() != 200 {
            return;
        }
        let Ok(v) = resp.json::<Value>().await else {
            return;
        };
        let mut s = seen.lock().unwrap();
        s.revision = s.revision.max(v["revision"].as_u64().unwrap());
        for e in v["events"].as_array().unwrap() {
            let rev = e["revision"].as_u64().unwrap();
            let before = s.events.insert(rev, e.clone());
            assert!(
                before.is_none_or(|b| &b == e),
                "revision {rev} shown as two different events"
            );
        }
        for c in v["claims"].as_array().unwrap() {
            s.claims.insert(c["id"].as_u64().unwrap());
        }
    }
}

/// With the server dead: the database holds every revision, event and claim a reader saw
/// (a claim seen may since have been released, durably).
fn check_seen_is_durable(dir: &std::path::Path, seen: &Seen) {
    let db = rusqlite::Connection::open(dir.join("gpuboard.sqlite")).unwrap();
    let revision: i64 = db
        .query_row("SELECT value FROM meta WHERE key = 'revision'", [], |r| {
            r.get(0)
        })
        .unwrap_or(0);
    let revision = u64::try_from(revision).unwrap();
    assert!(
        revision >= seen.revision,
        "a reader saw revision {} but the disk holds {revision}: it would be reused",
        seen.revision
    );
    let mut events = BTreeMap::new();
    let mut q = db.prepare("SELECT revision, body FROM events").unwrap();
    for row in q
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
        .unwrap()
    {
        let (rev, body) = row.unwrap();
        events.insert(
            u64::try_from(rev).unwrap(),
            serde_json::from_str::<Value>(&body).unwrap(),
        );
    }
    for (rev, e) in &seen.events {
        assert_eq!(events.get(rev), Some(e), "event {rev} a reader saw");
    }
    let mut held = BTreeSet::new();
    let mut q = db.prepare("SELECT id FROM claims").unwrap();
    for id in q.query_map([], |r| r.get::<_, i64>(0)).unwrap() {
        held.insert(u64::try_from(id.unwrap()).unwrap());
    }
    for id in &seen.claims {
        let target = format!("claim {id}");
        let gone = events
            .values()
            .any(|e| e["target"] == target.as_str() && e["action"] == "release");
        assert!(
            held.contains(id) || gone,
            "claim {id} a reader saw vanished without a release"
        );
    }
}

fn place_of(claim: &Value) -> Place {
    (
        claim["node"].as_str().unwrap_or_default().to_string(),
        claim["shares"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["device"].as_u64().unwrap())
            .collect(),
    )
}

async fn client(url: String, token: String, model: Arc<Mutex<Model>>, seed: u64) {
    let http = http();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    loop {
        let release = {
            let mut m = model.lock().unwrap();
            if !m.live.is_empty() && rng.random_bool(0.45) {
                let ids: Vec<u64> = m.live.keys().copied().collect();
                let id = ids[rng.random_range(0..ids.len())];
                m.live.remove(&id);
                m.in_flight.insert(id);
                Some(id)
            } else {
                None
            }
        };
        if let Some(id) = release {
            let Ok(resp) = http
                .delete(format!("{url}/v1/claims/{id}"))
                .bearer_auth(&token)
                .send()
                .await
            else {
                return;
            };
            if resp.status() != 200 || resp.bytes().await.is_err() {
                return;
            }
            let mut m = model.lock().unwrap();
            m.in_flight.remove(&id);
            m.released.insert(id);
        } else {
            let body = match rng.random_range(0..3) {
                0 => json!({"num_gpus": 0.25}),
                1 => json!({"gpu_memory": "10Gi"}),
                _ => json!({"gpu-memory-ratio": 50, "gpu.shared": 2}),
            };
            let Ok(resp) = http
                .post(format!("{url}/v1/claims"))
                .bearer_auth(&token)
                .json(&body)
                .send()
                .await
            else {
                return;
            };
            let status = resp.status().as_u16();
            let Ok(v) = resp.json::<Value>().await else {
                return;
            };
            match status {
                201 => {
                    let id = v["id"].as_u64().unwrap();
                    let mut m = model.lock().unwrap();
                    assert!(
                        !m.released.contains(&id),
                        "id {id} reused after its release"
                    );
                    assert!(
                        m.live.insert(id, place_of(&v)).is_none(),
                        "id {id} given twice"
                    );
                }
                409 => {}
                other => panic!("unexpected {other}: {v}"),
            }
        }
    }
}

fn check(snap: &Value, model: &mut Model) {
    let claims = snap["claims"].as_array().unwrap();
    let mut seen = BTreeMap::new();
    for c in claims {
        let id = c["id"].as_u64().unwrap();
        assert!(
            seen.insert(id, place_of(c)).is_none(),
            "claim {id} duplicated"
        );
        assert_eq!(c["state"], "placed", "claim {id}");
    }
    for (id, place) in &model.live {
        assert_eq!(
            seen.get(id),
            Some(place),
            "acknowledged claim {id} lost or moved"
        );
    }
    for id in &model.released {
        assert!(
            !seen.contains_key(id),
            "acknowledged release of {id} undone"
        );
    }
    // Unanswered releases went either way; unanswered claims that did commit are real now.
    let in_flight = std::mem::take(&mut model.in_flight);
    for (id, place) in seen {
        model.live.entry(id).or_insert(place);
    }
    for id in in_flight {
        if !model.live.contains_key(&id) {
            model.released.insert(id);
        }
    }
    // No device over-committed, and the devices' totals are exactly their claims' shares.
    let mut per_device: BTreeMap<(String, u64), (u64, u64, u64)> = BTreeMap::new();
    for c in claims {
        for s in c["shares"].as_array().unwrap() {
            let e = per_device
                .entry((
                    c["node"].as_str().unwrap().to_string(),
                    s["device"].as_u64().unwrap(),
                ))
                .or_default();
            e.0 += s["memory"].as_u64().unwrap();
            e.1 += s["compute"].as_u64().unwrap();
            e.2 += s["slots"].as_u64().unwrap();
        }
    }
    for n in snap["nodes"].as_array().unwrap() {
        for d in n["devices"].as_array().unwrap() {
            let key = (
                n["name"].as_str().unwrap().to_string(),
                d["index"].as_u64().unwrap(),
            );
            let (mem, compute, slots) = per_device.get(&key).copied().unwrap_or_default();
            assert!(
                mem <= d["memory_capacity"].as_u64().unwrap(),
                "{key:?} over-committed"
            );
            assert!(compute <= 10_000 && slots <= 100, "{key:?} over-committed");
            assert_eq!(d["memory_allocated"].as_u64().unwrap(), mem, "{key:?}");
            assert_eq!(d["slots_allocated"].as_u64().unwrap(), slots, "{key:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_state_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(Mutex::new(Model::default()));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut acknowledged = 0;
    for round in 0..KILLS {
        let mut server = Server::start(dir.path(), &demo_fleet(), &["--tick-ms", "60000"]);
        let token = server.operator_token();
        // After a restart, the state is what the clients were told.
        let snap: Value = http()
            .get(format!("{}/v1/snapshot", server.url))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        check(&snap, &mut model.lock().unwrap());
        let tasks: Vec<_> = (0..CLIENTS)
            .map(|c| {
                tokio::spawn(client(
                    server.url.clone(),
                    token.clone(),
                    Arc::clone(&model),
                    round * 100 + c,
                ))
            })
            .collect();
        let readers: Vec<_> = (0..READERS)
            .map(|_| tokio::spawn(reader(server.url.clone(), token.clone(), Arc::clone(&seen))))
            .collect();
        tokio::time::sleep(Duration::from_millis(rng.random_range(30..250))).await;
        server.kill9();
        for t in tasks.into_iter().chain(readers) {
            t.await.unwrap();
        }
        check_seen_is_durable(dir.path(), &seen.lock().unwrap());
        let m = model.lock().unwrap();
        acknowledged = m.live.len() + m.released.len();
    }
    let server = Server::start(dir.path(), &demo_fleet(), &[]);
    let snap: Value = http()
        .get(format!("{}/v1/snapshot", server.url))
        .bearer_auth(server.operator_token())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    check(&snap, &mut model.lock().unwrap());
    assert!(
        acknowledged > 100,
        "the clients got work done: {acknowledged}"
    );
    let seen = seen.lock().unwrap();
    assert!(
        seen.revision > 100 && !seen.claims.is_empty(),
        "the readers saw the work: revision {}",
        seen.revision
    );
}
