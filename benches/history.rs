//! The time machine's figures (docs/performance.md, "History"): a recording generated on a
//! simulated clock through the real engine, recorder and store, then random seeks into it.
//!
//! Two recordings: the demo fleet (28 GPUs) for one day, and a 100-GPU endpoint for 90
//! days. Workload: each GPU is free or held by one claim lasting 1 to 8 hours (four
//! projects), decided every 5 minutes; a held GPU samples as a steadily loaded one
//! (utilization 85-100 %, 250-310 W, 63-67 C, its memory used moving every few minutes),
//! a free one as idle. Every state change goes through `Recording` into `history.sqlite`;
//! telemetry is written as the sealed hourly chunks a `serve` leaves behind.
//!
//! `cargo bench --bench history` (release); `-- --days N` shortens the 100-GPU run;
//! `-- --serve` then starts the real `gpuboard serve` over the 100-GPU recording and times
//! `GET /v1/snapshot?at=` at random times over HTTP (the endpoint's answer, body read).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Instant;

use gpuboard::clock::{ManualClock, Timestamp};
use gpuboard::endpoint::engine::{Engine, EngineConfig, LocalProcesses};
use gpuboard::history::sample::Rare;
use gpuboard::history::{DeviceSample, Recording};
use gpuboard::ids::ClaimId;
use gpuboard::request::ClaimRequest;
use gpuboard::scheduler::Submitted;
use gpuboard::snapshot::ProcessView;
use gpuboard::store::history::{HistoryStore, Retention, StateAt};
use gpuboard::units::Bytes;
use gpuboard::wire::history::GpuRef;

const T0: u64 = 1_795_442_400_000;
const STEP_MS: u64 = 300_000;
const HOUR_MS: u64 = 3_600_000;
const PROJECTS: [&str; 4] = ["vision", "speech", "nlp", "rl"];

/// A small deterministic generator (no dependency on rand's algorithms between versions).
struct Noise(u64);

impl Noise {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}

struct Held {
    id: ClaimId,
    ends: u64,
    reserved: Bytes,
}

fn inventory_100() -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for n in 0..25 {
        let _ = write!(
            s,
            "[[nodes]]\nname = \"node-{n:02}\"\n[[nodes.gpus]]\nmodel = \"NVIDIA A100-SXM4-80GB\"\nmemory = \"80GiB\"\ncount = 4\n\n"
        );
    }
    s
}

fn hour_of_samples(noise: &mut Noise, start: u64, held: Option<&Held>) -> Vec<DeviceSample> {
    let mut used = held.map_or(0, |h| h.reserved.0 * 3 / 4);
    (0..720u64)
        .map(|i| {
            let busy = held.is_some();
            if busy && noise.below(60) == 0 {
                used = held.map_or(0, |h| h.reserved.0 / 2 + noise.below(h.reserved.0 / 2));
            }
            let rare = match held {
                Some(h) => Rare {
                    processes: vec![ProcessView {
                        pid: 4242,
                        name: Some("python".to_string()),
                        used_memory: Some(Bytes(used)),
                        claim: Some(h.id),
                        owner: None,
                    }],
                    memory_total: Some(Bytes::gib(80)),
                    power_limit_mw: Some(400_000),
                    ..Rare::default()
                },
                None => Rare {
                    memory_total: Some(Bytes::gib(80)),
                    power_limit_mw: Some(400_000),
                    ..Rare::default()
                },
            };
            DeviceSample {
                at: Timestamp(start + i * 5_000),
                utilization_gpu: Some(if busy { 85 + noise.below(16) as u32 } else { 0 }),
                utilization_memory: Some(if busy { 30 + noise.below(10) as u32 } else { 0 }),
                memory_used: Some(Bytes(used)),
                memory_reserved: held.map_or(Bytes(0), |h| h.reserved),
                power_mw: Some(
                    if busy {
                        250 + noise.below(61) as u32
                    } else {
                        60 + noise.below(3) as u32
                    } * 1000,
                ),
                temperature_c: Some(if busy {
                    63 + noise.below(5) as u32
                } else {
                    34 + noise.below(2) as u32
                }),
                clock_sm_mhz: Some(if busy { 1410 } else { 210 }),
                clock_memory_mhz: Some(1593),
                fan_pct: None,
                rare,
            }
        })
        .collect()
}

struct Figures {
    gpus: usize,
    hours: u64,
    bytes: u64,
    versions: u64,
    seek_ms: Vec<f64>,
    generate_s: f64,
    /// The data directory holding the recording (`history.sqlite`).
    dir: tempfile::TempDir,
}

// The recording's script in the order it happens: an in-memory engine, then hour by hour on
// the simulated clock each GPU's samples, claims placed and released, each version recorded;
// then the seeks timed.
#[allow(clippy::too_many_lines)]
fn record(inventory: &str, hours: u64, seed: u64) -> Figures {
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let clock = ManualClock::new(Timestamp(T0));
    let engine = Engine::in_memory(
        EngineConfig::default(),
        gpuboard::inventory::parse(inventory, "bench").unwrap(),
        Arc::new(clock.clone()),
        Arc::new(LocalProcesses),
    )
    .unwrap();
    let gpus: Vec<GpuRef> = engine
        .snapshot()
        .devices()
        .map(|(n, d)| GpuRef {
            node: n.name.clone(),
            index: d.index,
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let mut store = HistoryStore::open(dir.path()).unwrap();
    let mut recording = Recording::default();
    let mut noise = Noise(seed);
    let mut held: Vec<Option<Held>> = (0..gpus.len()).map(|_| None).collect();
    let observe = |store: &mut HistoryStore, recording: &mut Recording| {
        if let Some(rec) = recording.observe(&engine.snapshot()) {
            store.append(&rec).unwrap();
        }
    };
    for hour in 0..hours {
        let hour_start = T0 + hour * HOUR_MS;
        // Telemetry of the hour follows the claim each GPU holds as it starts.
        for (g, gpu) in gpus.iter().enumerate() {
            store
                .add_chunk(
                    gpu,
                    &hour_of_samples(&mut noise, hour_start, held[g].as_ref()),
                )
                .unwrap();
        }
        for step in 0..(HOUR_MS / STEP_MS) {
            let now = hour_start + step * STEP_MS;
            clock.set(Timestamp(now));
            for g in 0..gpus.len() {
                if held[g].as_ref().is_some_and(|h| h.ends <= now) {
                    let h = held[g].take().unwrap();
                    rt.block_on(engine.release(h.id, "op")).unwrap();
                    observe(&mut store, &mut recording);
                }
                // A free GPU is taken within the hour on average.
                if held[g].is_none() && noise.below(12) == 0 {
                    let v = serde_json::json!({
                        "num_gpus": 1,
                        "node": gpus[g].node,
                        "project": PROJECTS[noise.below(4) as usize],
                        "holder": format!("job-{}", noise.below(1_000_000)),
                    });
                    let req = ClaimRequest::from_json(&v).unwrap();
                    if let Submitted::Placed(c) = rt.block_on(engine.submit(req, "op")).unwrap() {
                        let alloc = c.allocation.as_ref().unwrap();
                        let device = alloc.shares[0].device;
                        let at = gpus
                            .iter()
                            .position(|x| x.node == alloc.node && x.index == device)
                            .unwrap();
                        held[at] = Some(Held {
                            id: c.id,
                            ends: now + HOUR_MS + noise.below(7 * HOUR_MS),
                            reserved: Bytes::gib(80),
                        });
                    }
                    observe(&mut store, &mut recording);
                }
            }
            // What a serve's 5 s feed sees between commits: drift, recorded every 15 min.
            observe(&mut store, &mut recording);
        }
    }
    let generate_s = started.elapsed().as_secs_f64();
    let bytes = store.bytes().unwrap().0;
    let versions = store.info(Retention::default()).unwrap().versions;
    drop(store);
    // Seeks on a fresh connection, as the endpoint's reader would do them.
    let reader = HistoryStore::open(dir.path()).unwrap();
    let span = hours * HOUR_MS;
    let mut seek_ms: Vec<f64> = (0..400)
        .map(|_| {
            let at = Timestamp(T0 + noise.below(span));
            let t = Instant::now();
            let shown = reader.state_at(at).unwrap();
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            assert!(matches!(shown, StateAt::Shown(..)));
            ms
        })
        .collect();
    seek_ms.sort_by(f64::total_cmp);
    Figures {
        gpus: gpus.len(),
        hours,
        bytes,
        versions,
        seek_ms,
        generate_s,
        dir,
    }
}

/// Starts `gpuboard serve` (the binary cargo built beside this bench) over the recording
/// in `f.dir` and times `GET /v1/snapshot?at=` at `count` random times of it, each answer
/// read whole; milliseconds, sorted.
fn http_seeks(inventory: &str, f: &Figures, seed: u64, count: usize) -> Vec<f64> {
    use std::io::BufRead as _;
    let data = f.dir.path();
    let fleet = data.join("fleet.toml");
    std::fs::write(&fleet, inventory).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .arg("serve")
        .arg("--inventory")
        .arg(&fleet)
        .arg("--data-dir")
        .arg(data)
        .args(["--listen", "127.0.0.1:0"])
        // The recording is on a simulated clock: keep all of it, whatever today is.
        .args(["--history-days", "3650", "--history-size", "8GiB"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("serve did not start: {line}"))
        .to_string();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let token = std::fs::read_to_string(data.join("read.token")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut noise = Noise(seed);
    let span = f.hours * HOUR_MS;
    let mut ms: Vec<f64> = rt.block_on(async {
        gpuboard::client::install_crypto_provider();
        let http = reqwest::Client::new();
        let get = |at: u64| {
            http.get(format!("{url}/v1/snapshot?at={at}"))
                .bearer_auth(token.trim())
                .send()
        };
        // One to open the connection (kept alive for the rest).
        let warm = get(T0).await.unwrap();
        assert_eq!(warm.status(), 200);
        warm.bytes().await.unwrap();
        let mut ms = Vec::new();
        let mut healthz = Vec::new();
        for _ in 0..count {
            let at = T0 + noise.below(span);
            let t = Instant::now();
            let answer = get(at).await.unwrap();
            assert_eq!(answer.status(), 200, "at {at}");
            answer.bytes().await.unwrap();
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            // What any answer costs on this machine (the round trip, the scheduling of
            // both processes), to tell it from what the history adds.
            let t = Instant::now();
            let answer = http.get(format!("{url}/healthz")).send().await.unwrap();
            answer.bytes().await.unwrap();
            healthz.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        healthz.sort_by(f64::total_cmp);
        let pct = |p: f64| healthz[((healthz.len() as f64 - 1.0) * p) as usize];
        println!(
            "  GET /healthz between them: p50 {:.2} ms, p99 {:.2} ms",
            pct(0.5),
            pct(0.99)
        );
        ms
    });
    let _ = child.kill();
    let _ = child.wait();
    ms.sort_by(f64::total_cmp);
    ms
}

fn report(name: &str, f: &Figures) {
    let gpu_hours = (f.gpus as u64 * f.hours) as f64;
    let pct = |p: f64| f.seek_ms[((f.seek_ms.len() as f64 - 1.0) * p) as usize];
    println!(
        "{name}: {} GPUs x {} h: {:.1} MiB ({} versions), {:.0} bytes per GPU-hour; \
         state at a random time p50 {:.2} ms, p99 {:.2} ms; generated in {:.0} s",
        f.gpus,
        f.hours,
        f.bytes as f64 / (1 << 20) as f64,
        f.versions,
        f.bytes as f64 / gpu_hours,
        pct(0.5),
        pct(0.99),
        f.generate_s
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this briefly (two
    // hours of each, debug build) as a smoke test of the whole path.
    let quick = !args.iter().any(|a| a == "--bench");
    let days = args
        .iter()
        .position(|a| a == "--days")
        .and_then(|i| args.get(i + 1))
        .and_then(|d| d.parse().ok())
        .unwrap_or(90);
    let demo = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/demo-fleet.toml"),
    )
    .unwrap();
    if quick {
        report("demo fleet, 2 hours (smoke test)", &record(&demo, 2, 7));
        let big = record(&inventory_100(), 2, 11);
        report("100 GPUs, 2 hours (smoke test)", &big);
        let ms = http_seeks(&inventory_100(), &big, 13, 20);
        println!("over HTTP (smoke test): {} answers", ms.len());
        return;
    }
    let serve = args.iter().any(|a| a == "--serve");
    if !serve {
        report("demo fleet, 1 day", &record(&demo, 24, 7));
    }
    let big = record(&inventory_100(), days * 24, 11);
    report(&format!("100 GPUs, {days} days"), &big);
    if serve {
        let ms = http_seeks(&inventory_100(), &big, 13, 400);
        let pct = |p: f64| ms[((ms.len() as f64 - 1.0) * p) as usize];
        println!(
            "100 GPUs, {days} days, over HTTP from `gpuboard serve`: GET /v1/snapshot?at= \
             p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} requests)",
            pct(0.5),
            pct(0.99),
            pct(1.0),
            ms.len()
        );
    }
}
