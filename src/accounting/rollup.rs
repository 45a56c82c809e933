//! An hour's [`Tally`] as the history stores it: compact, and added up without building
//! each hour's tally first. A month is 720 hours of some hundreds of claims each; as JSON
//! every claim carried its project's and holder's names and was parsed into a map of its
//! own before being added, which was most of the cost of a month's usage table.
//!
//! Form (little-endian, then zstd by the store): the byte [`FORM`]; physical, unallocated
//! by compute and by memory (f64 GPU-seconds, exact); the names the claims use (a count,
//! then each as its length and UTF-8); the claims in id order, each: the id's distance from
//! the previous id, its project's position among the names, its holder's position plus one
//! (0: none), reserved by compute and by memory, used and unmeasured (f64; form 1, written
//! before unmeasured time was counted, has no unmeasured and reads it as 0), its idle-run
//! count and each
//! run's start (distance from the previous run's end, or from 0), length (ms) and weight (f64).
//! Counts, ids, positions and times are LEB128 varints.

use std::collections::HashMap;

use super::gpu_time::GpuSeconds;
use super::usage::{IdleRun, Tally};
use crate::ids::ClaimId;

/// The form's first byte: a later form gets another. Form 1 is still read.
pub const FORM: u8 = 2;

/// Why a stored roll-up could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RollupError {
    /// Not this form (a later gpuboard's, or damaged).
    #[error("roll-up form {0} is not known to this gpuboard (it reads forms 1 to {FORM})")]
    Form(u8),
    /// Cut short or malformed.
    #[error("roll-up damaged: {0}")]
    Damaged(&'static str),
}

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_f64(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// `tally` in the stored form (uncompressed).
pub fn encode(tally: &Tally) -> Vec<u8> {
    let mut names: Vec<&str> = Vec::new();
    let mut index: HashMap<&str, u64> = HashMap::new();
    let mut name = |n| -> u64 {
        *index.entry(n).or_insert_with(|| {
            names.push(n);
            names.len() as u64 - 1
        })
    };
    // Positions first, so the names can be written before the claims.
    let refs: Vec<(u64, u64)> = tally
        .claims
        .values()
        .map(|c| {
            let p = name(c.project.as_str());
            let h = c.holder.as_deref().map_or(0, |h| name(h) + 1);
            (p, h)
        })
        .collect();
    let mut out = Vec::with_capacity(64 + tally.claims.len() * 48);
    out.push(FORM);
    put_f64(&mut out, tally.physical.0);
    put_f64(&mut out, tally.unallocated.compute.0);
    put_f64(&mut out, tally.unallocated.memory.0);
    put(&mut out, names.len() as u64);
    for n in &names {
        put(&mut out, n.len() as u64);
        out.extend_from_slice(n.as_bytes());
    }
    put(&mut out, tally.claims.len() as u64);
    let mut prev_id = 0;
    for ((id, c), (p, h)) in tally.claims.iter().zip(refs) {
        put(&mut out, id.0 - prev_id);
        prev_id = id.0;
        put(&mut out, p);
        put(&mut out, h);
        put_f64(&mut out, c.reserved.compute.0);
        put_f64(&mut out, c.reserved.memory.0);
        put_f64(&mut out, c.used.0);
        put_f64(&mut out, c.unmeasured.0);
        put(&mut out, c.idle.len() as u64);
        let mut prev_end = 0;
        for run in &c.idle {
            put(&mut out, run.from.wrapping_sub(prev_end));
            put(&mut out, run.to.wrapping_sub(run.from));
            put_f64(&mut out, run.weight);
            prev_end = run.to;
        }
    }
    out
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, RollupError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self
                .bytes
                .get(self.at)
                .ok_or(RollupError::Damaged("cut short"))?;
            self.at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(RollupError::Damaged("a number is too long"))
    }

    fn count(&mut self) -> Result<usize, RollupError> {
        let n = usize::try_from(self.varint()?).map_err(|_| RollupError::Damaged("a count"))?;
        // Every item takes a byte at least: a larger count is damage, not a reason to
        // reserve memory.
        if n > self.bytes.len() - self.at {
            return Err(RollupError::Damaged("a count exceeds what follows"));
        }
        Ok(n)
    }

    fn f64(&mut self) -> Result<f64, RollupError> {
        let b = self
            .bytes
            .get(self.at..self.at + 8)
            .ok_or(RollupError::Damaged("cut short"))?;
        self.at += 8;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(f64::from_le_bytes(a))
    }

    fn str(&mut self) -> Result<&'a str, RollupError> {
        let n = self.count()?;
        let bytes: &'a [u8] = self.bytes;
        let b = &bytes[self.at..self.at + n];
        self.at += n;
        std::str::from_utf8(b).map_err(|_| RollupError::Damaged("a name is not UTF-8"))
    }
}

/// Adds the stored hour `bytes` (uncompressed) to `total`, as `total.then(hour)` would:
/// figures summed, idle runs appended, project and holder as last seen. Nothing is added
/// when it is damaged.
pub fn add_encoded(total: &mut Tally, bytes: &[u8]) -> Result<(), RollupError> {
    let hour = read(bytes)?;
    total.physical += hour.physical;
    total.unallocated.compute += hour.unallocated_compute;
    total.unallocated.memory += hour.unallocated_memory;
    for c in hour.claims {
        let t = total.claims.entry(c.id).or_default();
        let project = hour.names[c.project];
        if t.project != project {
            project.clone_into(&mut t.project);
        }
        let holder = c.holder.map(|h| hour.names[h]);
        if t.holder.as_deref() != holder {
            t.holder = holder.map(str::to_string);
        }
        t.reserved.compute += GpuSeconds(c.compute);
        t.reserved.memory += GpuSeconds(c.memory);
        t.used += GpuSeconds(c.used);
        t.unmeasured += GpuSeconds(c.unmeasured);
        t.idle.extend_from_slice(&c.idle);
    }
    Ok(())
}

/// The stored hour as a [`Tally`].
pub fn decode(bytes: &[u8]) -> Result<Tally, RollupError> {
    let mut t = Tally::default();
    add_encoded(&mut t, bytes)?;
    Ok(t)
}

struct Hour<'a> {
    physical: GpuSeconds,
    unallocated_compute: GpuSeconds,
    unallocated_memory: GpuSeconds,
    names: Vec<&'a str>,
    claims: Vec<Claim>,
}

struct Claim {
    id: ClaimId,
    project: usize,
    holder: Option<usize>,
    compute: f64,
    memory: f64,
    used: f64,
    unmeasured: f64,
    idle: Vec<IdleRun>,
}

/// Read whole before anything is added, so a damaged hour adds nothing.
fn read(bytes: &[u8]) -> Result<Hour<'_>, RollupError> {
    let mut r = Reader { bytes, at: 0 };
    let form = *bytes.first().ok_or(RollupError::Damaged("empty"))?;
    if !(1..=FORM).contains(&form) {
        return Err(RollupError::Form(form));
    }
    r.at = 1;
    let physical = GpuSeconds(r.f64()?);
    let unallocated_compute = GpuSeconds(r.f64()?);
    let unallocated_memory = GpuSeconds(r.f64()?);
    let n = r.count()?;
    let mut names = Vec::with_capacity(n);
    for _ in 0..n {
        names.push(r.str()?);
    }
    let position = |p: u64| {
        usize::try_from(p)
            .ok()
            .filter(|p| *p < names.len())
            .ok_or(RollupError::Damaged("a name's position"))
    };
    let n = r.count()?;
    let mut claims = Vec::with_capacity(n);
    let mut id = 0u64;
    for _ in 0..n {
        id = id
            .checked_add(r.varint()?)
            .ok_or(RollupError::Damaged("a claim id"))?;
        let project = position(r.varint()?)?;
        let holder = match r.varint()? {
            0 => None,
            h => Some(position(h - 1)?),
        };
        let (compute, memory, used) = (r.f64()?, r.f64()?, r.f64()?);
        let unmeasured = if form >= 2 { r.f64()? } else { 0.0 };
        let runs = r.count()?;
        let mut idle = Vec::with_capacity(runs);
        let mut prev_end = 0u64;
        for _ in 0..runs {
            let from = prev_end.wrapping_add(r.varint()?);
            let to = from.wrapping_add(r.varint()?);
            idle.push(IdleRun {
                from,
                to,
                weight: r.f64()?,
            });
            prev_end = to;
        }
        claims.push(Claim {
            id: ClaimId(id),
            project,
            holder,
            compute,
            memory,
            used,
            unmeasured,
            idle,
        });
    }
    if r.at != bytes.len() {
        return Err(RollupError::Damaged("bytes left over"));
    }
    Ok(Hour {
        physical,
        unallocated_compute,
        unallocated_memory,
        names,
        claims,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::accounting::ByShare;
    use crate::accounting::usage::ClaimTally;

    /// A generated claim: id, project, holder, reserved, idle runs (gap, length, weight).
    type Gen = (u64, u8, Option<u8>, f64, Vec<(u64, u64, f64)>);

    fn tally(claims: Vec<Gen>, p: f64) -> Tally {
        let names = ["vision", "speech", "nlp", "rl", "ana", "bo"];
        Tally {
            physical: GpuSeconds(p),
            unallocated: ByShare {
                compute: GpuSeconds(p / 3.0),
                memory: GpuSeconds(p / 7.0),
            },
            claims: claims
                .into_iter()
                .map(|(id, project, holder, r, runs)| {
                    let mut at = 0;
                    let idle = runs
                        .into_iter()
                        .map(|(gap, len, weight)| {
                            let from = at + gap;
                            at = from + len;
                            IdleRun {
                                from,
                                to: at,
                                weight,
                            }
                        })
                        .collect();
                    let c = ClaimTally {
                        project: names[usize::from(project) % 4].to_string(),
                        holder: holder.map(|h| names[usize::from(h) % 6].to_string()),
                        reserved: ByShare {
                            compute: GpuSeconds(r),
                            memory: GpuSeconds(r * 0.75),
                        },
                        used: GpuSeconds(r / 9.0),
                        unmeasured: GpuSeconds(r / 7.0),
                        idle,
                    };
                    (ClaimId(id), c)
                })
                .collect(),
        }
    }

    fn claims() -> impl Strategy<Value = Vec<Gen>> {
        prop::collection::vec(
            (
                0u64..1 << 40,
                any::<u8>(),
                prop::option::of(any::<u8>()),
                0.0f64..1e7,
                prop::collection::vec((0u64..1 << 33, 1u64..3_600_000, 0.0f64..8.0), 0..4),
            ),
            0..40,
        )
    }

    proptest! {
        #[test]
        fn an_hour_reads_back_exactly(c in claims(), p in 0.0f64..1e7) {
            let t = tally(c, p);
            prop_assert_eq!(decode(&encode(&t)).unwrap(), t);
        }

        #[test]
        fn hours_added_as_stored_equal_hours_added_as_tallies(
            a in claims(), b in claims(), p in 0.0f64..1e7
        ) {
            let (a, b) = (tally(a, p), tally(b, p / 2.0));
            let mut want = a.clone();
            want.then(b.clone());
            let mut got = Tally::default();
            add_encoded(&mut got, &encode(&a)).unwrap();
            add_encoded(&mut got, &encode(&b)).unwrap();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn a_damaged_hour_is_an_error_and_adds_nothing(c in claims(), cut in 0.0f64..1.0) {
            let t = tally(c, 5.0);
            let bytes = encode(&t);
            let short = &bytes[..((bytes.len() - 1) as f64 * cut) as usize];
            let mut total = t.clone();
            prop_assert!(add_encoded(&mut total, short).is_err());
            prop_assert_eq!(total, t);
        }
    }

    #[test]
    fn an_hour_stored_in_form_1_reads_with_nothing_unmeasured() {
        let mut t = tally(vec![(7, 1, None, 3600.0, Vec::new())], 100.0);
        let mut bytes = encode(&t);
        // Form 1: no unmeasured f64 between `used` and the idle-run count (here the last byte).
        bytes[0] = 1;
        let n = bytes.len();
        bytes.drain(n - 9..n - 1);
        for c in t.claims.values_mut() {
            c.unmeasured = GpuSeconds(0.0);
        }
        assert_eq!(decode(&bytes).unwrap(), t);
    }

    #[test]
    fn another_form_is_named() {
        let mut bytes = encode(&Tally::default());
        bytes[0] = 9;
        let err = decode(&bytes).unwrap_err();
        assert_eq!(err, RollupError::Form(9));
        assert!(err.to_string().contains("form 9"), "{err}");
    }
}
