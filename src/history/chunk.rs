//! A chunk: one device's samples over a span (an hour), stored as one compressed value.
//! Columnar: each metric's values one after another, each as the zigzag varint of its
//! difference from the one before (a steady metric costs a zero byte, which zstd then
//! squeezes to almost nothing); what seldom changes (processes, throttle reasons, the
//! device's fixed facts) only where it changed. Then zstd over the whole.

use serde::{Deserialize, Serialize};

use std::sync::Arc;

use super::sample::{DeviceSample, ProcessClaim, Rare, Tick};
use crate::clock::Timestamp;
use crate::units::Bytes;

/// zstd's level for chunks: written once an hour per device, read on every rewind.
const LEVEL: i32 = 15;
/// The chunk format this build writes (the first byte).
const FORMAT: u8 = 1;
/// The most samples a chunk may claim to hold (a day at one per second): a larger count is
/// a damaged chunk, not an allocation to make.
const MAX_SAMPLES: usize = 86_400;

/// Why a chunk could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ChunkError {
    /// Not zstd, or cut short.
    #[error("chunk not readable: {0}")]
    Compression(String),
    /// Decompressed, but not a chunk of this format.
    #[error("chunk damaged: {0}")]
    Damaged(&'static str),
    /// The rare column.
    #[error("chunk damaged: {0}")]
    Rare(#[from] serde_json::Error),
}

/// The most a compressed value may say it holds (a chunk or a version): larger is damage.
const MAX_RAW: u64 = 1 << 30;

thread_local! {
    /// One decompression context per thread, not one per chunk (making one was a tenth
    /// of a long report's time).
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Decompresses a zstd frame written by `zstd::bulk::compress` (which records the size),
/// reusing this thread's context; other frames are streamed.
pub fn decompress(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let size = zstd::zstd_safe::get_frame_content_size(bytes)
        .ok()
        .flatten();
    let Some(size) = size.filter(|s| *s <= MAX_RAW) else {
        return zstd::stream::decode_all(bytes).map_err(|e| e.to_string());
    };
    let capacity = usize::try_from(size).map_err(|e| e.to_string())?;
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?);
        }
        match slot.as_mut() {
            Some(d) => d.decompress(bytes, capacity).map_err(|e| e.to_string()),
            None => Err("no zstd context".to_string()),
        }
    })
}

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn varint(&mut self) -> Result<u64, ChunkError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            // A match, not `ok_or(error)`: that builds (and drops) the error for every byte.
            let Some(&b) = self.bytes.get(self.at) else {
                return Err(ChunkError::Damaged("a column is cut short"));
            };
            self.at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ChunkError::Damaged("a number is longer than 64 bits"))
    }
}

/// A metric as a column value: 0 for absent, else the value plus one.
fn present(v: Option<u64>) -> u64 {
    v.map_or(0, |x| x.saturating_add(1))
}

/// The numeric columns of a sample, in their stored order.
fn columns(s: &DeviceSample) -> [u64; 10] {
    let u = |v: Option<u32>| present(v.map(u64::from));
    [
        s.at.0,
        u(s.utilization_gpu),
        u(s.utilization_memory),
        present(s.memory_used.map(|b| b.0)),
        s.memory_reserved.0,
        // Watts, not milliwatts: the sample holds whole watts.
        u(s.power_mw.map(|mw| mw / 1000)),
        u(s.temperature_c),
        u(s.clock_sm_mhz),
        u(s.clock_memory_mhz),
        u(s.fan_pct),
    ]
}

fn from_columns(c: &[u64; 10], rare: Rare) -> DeviceSample {
    let opt = |v: u64| v.checked_sub(1);
    let u = |v: u64| opt(v).map(|x| u32::try_from(x).unwrap_or(u32::MAX));
    DeviceSample {
        at: Timestamp(c[0]),
        utilization_gpu: u(c[1]),
        utilization_memory: u(c[2]),
        memory_used: opt(c[3]).map(Bytes),
        memory_reserved: Bytes(c[4]),
        power_mw: u(c[5]).map(|w| w.saturating_mul(1000)),
        temperature_c: u(c[6]),
        clock_sm_mhz: u(c[7]),
        clock_memory_mhz: u(c[8]),
        fan_pct: u(c[9]),
        rare,
    }
}

/// Where the rare part changed: from sample `from` on, it is `rare`.
#[derive(Serialize, Deserialize)]
struct RareRun {
    from: u32,
    rare: Rare,
}

/// A rare run as [`decode_ticks`] reads it: only the processes' claims and memory.
#[derive(Deserialize)]
struct TickRun {
    from: u32,
    #[serde(default)]
    rare: TickRare,
}

#[derive(Default, Deserialize)]
struct TickRare {
    #[serde(default)]
    processes: Vec<ProcessClaim>,
}

/// Encodes samples (oldest first) as one compressed chunk.
pub fn encode(samples: &[DeviceSample]) -> Vec<u8> {
    let mut raw = vec![FORMAT];
    put(&mut raw, samples.len() as u64);
    let rows: Vec<[u64; 10]> = samples.iter().map(columns).collect();
    for col in 0..10 {
        let mut prev = 0u64;
        for row in &rows {
            put(&mut raw, zigzag(row[col].wrapping_sub(prev) as i64));
            prev = row[col];
        }
    }
    let mut runs: Vec<RareRun> = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        if runs.last().is_none_or(|r| r.rare != s.rare) {
            runs.push(RareRun {
                from: i as u32,
                rare: s.rare.clone(),
            });
        }
    }
    // Serializing plain data to a Vec cannot fail.
    raw.extend(serde_json::to_vec(&runs).unwrap_or_default());
    zstd::bulk::compress(&raw, LEVEL).unwrap_or(raw)
}

/// Decompresses a chunk and reads its sample count.
fn open(chunk: &[u8]) -> Result<(Vec<u8>, usize, usize), ChunkError> {
    let raw = decompress(chunk).map_err(ChunkError::Compression)?;
    if raw.first() != Some(&FORMAT) {
        return Err(ChunkError::Damaged("unknown chunk format"));
    }
    let mut r = Reader { bytes: &raw, at: 1 };
    let n = usize::try_from(r.varint()?).unwrap_or(usize::MAX);
    if n > MAX_SAMPLES {
        return Err(ChunkError::Damaged("more samples than a chunk holds"));
    }
    let at = r.at;
    Ok((raw, n, at))
}

/// Appends to `out` what accounting needs of the samples taken from `from` to `to`
/// (inclusive): times, GPU utilization and the processes' claims; the other columns are
/// skipped, and samples with the same processes share one list.
pub fn decode_ticks(
    chunk: &[u8],
    from: Timestamp,
    to: Timestamp,
    out: &mut Vec<Tick>,
) -> Result<(), ChunkError> {
    let (raw, n, at) = open(chunk)?;
    let mut r = Reader { bytes: &raw, at };
    let mut times = Vec::with_capacity(n);
    let mut prev = 0u64;
    for _ in 0..n {
        prev = prev.wrapping_add(unzigzag(r.varint()?) as u64);
        times.push(prev);
    }
    let mut utils = Vec::with_capacity(n);
    prev = 0;
    for _ in 0..n {
        prev = prev.wrapping_add(unzigzag(r.varint()?) as u64);
        utils.push(
            prev.checked_sub(1)
                .map(|u| u32::try_from(u).unwrap_or(u32::MAX)),
        );
    }
    // The other eight columns: only their end is needed, where the rare runs begin.
    // A varint ends at a byte below 0x80: count those.
    let mut left = n * 8;
    if left > 0 {
        let rest = r.bytes.get(r.at..).unwrap_or_default();
        let end = rest
            .iter()
            .position(|b| {
                left -= usize::from(*b < 0x80);
                left == 0
            })
            .ok_or(ChunkError::Damaged("a column is cut short"))?;
        r.at += end + 1;
    }
    let runs: Vec<TickRun> = serde_json::from_slice(&raw[r.at..])?;
    let shared: Vec<Arc<[ProcessClaim]>> = runs
        .iter()
        .map(|run| Arc::from(run.rare.processes.as_slice()))
        .collect();
    let none: Arc<[ProcessClaim]> = Arc::from(Vec::new());
    out.reserve(n);
    let mut run = 0;
    for (i, (&t, &u)) in times.iter().zip(&utils).enumerate() {
        if t > to.0 {
            break;
        }
        if t < from.0 {
            continue;
        }
        while runs
            .get(run + 1)
            .is_some_and(|next| next.from as usize <= i)
        {
            run += 1;
        }
        out.push(Tick {
            at: Timestamp(t),
            utilization_gpu: u,
            processes: shared
                .get(run)
                .map_or_else(|| Arc::clone(&none), Arc::clone),
        });
    }
    Ok(())
}

/// Decodes a chunk written by [`encode`].
pub fn decode(chunk: &[u8]) -> Result<Vec<DeviceSample>, ChunkError> {
    decode_between(chunk, Timestamp(0), Timestamp(u64::MAX))
}

/// Decodes the samples of a chunk taken from `from` to `to` (inclusive): only those are
/// built, so showing one time (a few minutes of an hour's chunk) costs little more than
/// unpacking the columns.
pub fn decode_between(
    chunk: &[u8],
    from: Timestamp,
    to: Timestamp,
) -> Result<Vec<DeviceSample>, ChunkError> {
    let (raw, n, at) = open(chunk)?;
    let mut r = Reader { bytes: &raw, at };
    let mut rows = vec![[0u64; 10]; n];
    for col in 0..10 {
        let mut prev = 0u64;
        for row in &mut rows {
            prev = prev.wrapping_add(unzigzag(r.varint()?) as u64);
            row[col] = prev;
        }
    }
    let runs: Vec<RareRun> = serde_json::from_slice(&raw[r.at..])?;
    let mut out = Vec::new();
    let mut run = 0;
    for (i, row) in rows.iter().enumerate() {
        if row[0] > to.0 {
            break;
        }
        if row[0] < from.0 {
            continue;
        }
        while runs
            .get(run + 1)
            .is_some_and(|next| next.from as usize <= i)
        {
            run += 1;
        }
        let rare = runs.get(run).map(|r| r.rare.clone()).unwrap_or_default();
        out.push(from_columns(row, rare));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::ProcessView;
    use proptest::prelude::*;

    fn sample(at: u64, util: Option<u32>, power: Option<u32>, procs: u32) -> DeviceSample {
        DeviceSample {
            at: Timestamp(at),
            utilization_gpu: util,
            memory_used: Some(Bytes(40 << 30)),
            memory_reserved: Bytes(20 << 30),
            power_mw: power.map(|w| w * 1000),
            temperature_c: Some(61),
            clock_sm_mhz: Some(1410),
            rare: Rare {
                processes: (0..procs)
                    .map(|p| ProcessView {
                        pid: 100 + p,
                        name: Some("python".into()),
                        used_memory: Some(Bytes(1 << 30)),
                        claim: (p % 2 == 1).then_some(crate::ids::ClaimId(u64::from(p))),
                        owner: None,
                    })
                    .collect(),
                ..Rare::default()
            },
            ..DeviceSample::default()
        }
    }

    proptest! {
        #[test]
        fn chunks_read_back_what_was_written(
            rows in proptest::collection::vec(
                (0u64..10_000, proptest::option::of(0u32..=100), proptest::option::of(0u32..700), 0u32..3),
                0..200,
            )
        ) {
            let mut at = 1_795_442_709_000;
            let samples: Vec<DeviceSample> = rows
                .iter()
                .map(|(gap, u, p, n)| {
                    at += gap;
                    sample(at, *u, *p, *n)
                })
                .collect();
            prop_assert_eq!(decode(&encode(&samples)).unwrap(), samples);
        }

        #[test]
        fn a_window_of_a_chunk_is_the_samples_in_it(
            rows in proptest::collection::vec((0u64..10_000, 0u32..3), 0..200),
            from in 0u64..1_000_000,
            len in 0u64..1_000_000,
        ) {
            let t0 = 1_795_442_709_000;
            let mut at = t0;
            let samples: Vec<DeviceSample> = rows
                .iter()
                .map(|(gap, n)| {
                    at += gap;
                    sample(at, Some(50), Some(300), *n)
                })
                .collect();
            let (from, to) = (Timestamp(t0 + from), Timestamp(t0 + from + len));
            let expected: Vec<DeviceSample> = samples
                .iter()
                .filter(|s| s.at >= from && s.at <= to)
                .cloned()
                .collect();
            prop_assert_eq!(decode_between(&encode(&samples), from, to).unwrap(), expected.clone());
            let ticks: Vec<Tick> = expected.iter().map(Tick::from).collect();
            let mut got = Vec::new();
            decode_ticks(&encode(&samples), from, to, &mut got).unwrap();
            prop_assert_eq!(got, ticks);
        }
    }

    #[test]
    fn an_hour_of_a_steady_gpu_is_small() {
        let mut seed = 7u64;
        let mut noise = |m: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % m
        };
        let samples: Vec<DeviceSample> = (0..720u64)
            .map(|i| {
                let util = 85 + noise(15) as u32;
                let power = 280 + noise(40) as u32;
                sample(1_795_442_700_000 + i * 5_000, Some(util), Some(power), 2)
            })
            .collect();
        let bytes = encode(&samples).len();
        assert!(bytes < 2_500, "{bytes} bytes for an hour");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode(b"not zstd").is_err());
        let bad = zstd::bulk::compress(&[FORMAT, 0xff, 0xff, 0xff, 0xff, 0x0f], 1).unwrap();
        assert!(decode(&bad).is_err());
        let short = zstd::bulk::compress(&[FORMAT, 3, 1], 1).unwrap();
        assert!(decode(&short).is_err());
        let all = (Timestamp(0), Timestamp(u64::MAX));
        assert!(decode_ticks(&short, all.0, all.1, &mut Vec::new()).is_err());
        assert!(decode_ticks(b"not zstd", all.0, all.1, &mut Vec::new()).is_err());
    }
}
