//! The watch's figures form on a real `gpuboard serve --simulate-telemetry` over a real
//! socket: a reader of `format=2` still gets its nodes whole, sparklines and all, and
//! rebuilds the endpoint's snapshot exactly; a reader of `format=3` gets the same versions
//! as `figures` changes, a fraction of the bytes, and rebuilds the same snapshot but for
//! the memory sparkline, which it keeps from the figures it received. An unknown form is
//! refused, naming the three there are.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use gpuboard::snapshot::{Snapshot, apply};
use gpuboard::wire::{DeltaBody, SnapshotVersion};

use crate::common::{self, Server};

/// One raw watch: its events read as they come, applied to its own copy.
struct Reader {
    resp: reqwest::Response,
    buf: String,
    snapshot: Option<Snapshot>,
    version: Option<SnapshotVersion>,
    /// Bytes of the deltas' data, and how many were read.
    delta_bytes: usize,
    deltas: usize,
}

impl Reader {
    async fn open(server: &Server, format: &str) -> Reader {
        let resp = http()
            .get(format!("{}/v1/watch?deltas=1&format={format}", server.url))
            .bearer_auth(server.read_token())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        Reader {
            resp,
            buf: String::new(),
            snapshot: None,
            version: None,
            delta_bytes: 0,
            deltas: 0,
        }
    }

    /// Reads events until the copy is at `seq` or past it; `check` sees each delta's data.
    async fn read_to(&mut self, seq: u64, mut check: impl FnMut(&str)) {
        while self.version.is_none_or(|v| v.seq < seq) {
            while let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let field = |name: &str| {
                    block
                        .lines()
                        .find_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim_start().to_string())
                        .unwrap_or_default()
                };
                let data = field("data:");
                match field("event:").as_str() {
                    "snapshot" => {
                        self.snapshot = Some(serde_json::from_str(&data).unwrap());
                        self.version = Some(field("id:").parse().unwrap());
                    }
                    "delta" => {
                        check(&data);
                        let body: DeltaBody = serde_json::from_str(&data).unwrap();
                        assert_eq!(Some(body.from), self.version, "one delta per version");
                        apply(self.snapshot.as_mut().unwrap(), &body.changes);
                        self.version = Some(body.to);
                        self.delta_bytes += data.len();
                        self.deltas += 1;
                    }
                    other => assert_eq!(other, "heartbeat", "{block}"),
                }
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.resp.chunk())
                .await
                .expect("an event within 30 s")
                .unwrap()
                .expect("the stream goes on");
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

fn http() -> reqwest::Client {
    gpuboard::client::install_crypto_provider();
    reqwest::Client::builder()
        .no_gzip()
        .timeout(Duration::from_mins(1))
        .build()
        .unwrap()
}

/// Without the memory sparkline, which a reader of figures keeps at its own pace.
fn but_memory_sparkline(mut s: Snapshot) -> Snapshot {
    for n in &mut s.nodes {
        for d in &mut n.devices {
            if let Some(t) = &mut d.telemetry {
                t.history_memory_used.clear();
            }
        }
    }
    s
}

#[test]
fn a_reader_of_figures_gets_the_same_versions_in_a_fraction_of_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &common::demo_fleet(),
        &["--simulate-telemetry=3"],
    );
    for _ in 0..3 {
        let placed = server.cli(&["claim", "--gpus", "1", "--project", "vision"]);
        assert!(placed.status.success(), "{placed:?}");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut old = Reader::open(&server, "2").await;
        let mut new = Reader::open(&server, "3").await;
        old.read_to(0, |_| {}).await;
        new.read_to(0, |_| {}).await;
        // Both from one version (the later of their snapshots), then three telemetry
        // versions on (one every 2 s).
        let start = old.version.unwrap().seq.max(new.version.unwrap().seq);
        old.read_to(start, |_| {}).await;
        new.read_to(start, |_| {}).await;
        assert_eq!(old.version, new.version);
        let (old_from, new_from) = (old.delta_bytes, new.delta_bytes);
        let (old_n, new_n) = (old.deltas, new.deltas);
        let target = start + 3;
        old.read_to(target, |data| {
            assert!(!data.contains(r#""op":"figures""#), "{data:.300}");
        })
        .await;
        let mut figures = 0;
        new.read_to(target, |data| {
            figures += usize::from(data.contains(r#""op":"figures""#));
            assert!(!data.contains("history_utilization"), "{data:.300}");
        })
        .await;
        assert_eq!(old.version, new.version);
        assert_eq!(old.deltas - old_n, new.deltas - new_n);
        assert_eq!(
            figures,
            new.deltas - new_n,
            "every telemetry version as figures"
        );
        let (old_bytes, new_bytes) = (old.delta_bytes - old_from, new.delta_bytes - new_from);
        assert!(
            new_bytes * 3 < old_bytes,
            "figures {new_bytes} bytes, whole nodes {old_bytes}"
        );

        // The per-project reader is the endpoint's exactly; the figures reader too, but for
        // the memory sparkline (whole MiB and watts: nothing rounded away).
        let (o, n) = (old.snapshot.unwrap(), new.snapshot.unwrap());
        assert_eq!(but_memory_sparkline(n), but_memory_sparkline(o));
    });
    // A form this build does not know is refused, naming those there are.
    let refused = rt.block_on(async {
        http()
            .get(format!("{}/v1/watch?deltas=1&format=4", server.url))
            .bearer_auth(server.read_token())
            .send()
            .await
            .unwrap()
    });
    assert_eq!(refused.status(), 400);
    let body = rt.block_on(refused.text()).unwrap();
    assert!(body.contains("1, 2 or 3"), "{body}");
}
