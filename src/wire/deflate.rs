//! The delta watch's optional compression (`GET /v1/watch?deltas=1&deflate=1`): the event
//! stream as one raw-deflate stream, each event flushed whole (a sync flush), so that an
//! event arrives as soon as it is written and compresses against the ones before it. An
//! idle watch repeats itself (heartbeats, host figures a minute apart): each costs a
//! fraction of its plain size, and the first snapshot is compressed too. An endpoint that
//! compresses says so in [`HEADER`]; one from before ignores the word and sends plain text.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The response header an endpoint that compresses the watch sets (to `1`).
pub const HEADER: &str = "x-gpuboard-deflate";

/// The largest a compressed chunk may grow to when inflated, in bytes (a watch event is
/// at most `client::sse`'s limit; a chunk inflating past this is refused, not held).
const MAX_INFLATED: usize = 256 * 1024 * 1024;

/// The sending side: one per watcher.
#[derive(Debug)]
pub struct Deflater {
    z: Compress,
}

impl Default for Deflater {
    fn default() -> Deflater {
        Deflater {
            z: Compress::new(Compression::default(), false),
        }
    }
}

impl Deflater {
    /// `bytes` compressed and flushed: the receiver can inflate all of them from what was
    /// returned so far.
    pub fn frame(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len() / 2 + 64);
        let mut input = bytes;
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(out.capacity().max(1024));
            }
            let before = self.z.total_in();
            // Only a stream that is finished or misused fails; neither happens here.
            let status = self
                .z
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .unwrap_or(Status::StreamEnd);
            let used = usize::try_from(self.z.total_in() - before).unwrap_or(input.len());
            input = &input[used.min(input.len())..];
            // Done once all input is in and the flush left room to spare.
            if matches!(status, Status::StreamEnd)
                || (input.is_empty() && out.len() < out.capacity())
            {
                return out;
            }
        }
    }
}

/// The receiving side: one per watch.
#[derive(Debug)]
pub struct Inflater {
    z: Decompress,
}

impl Default for Inflater {
    fn default() -> Inflater {
        Inflater {
            z: Decompress::new(false),
        }
    }
}

impl Inflater {
    /// What `chunk` inflates to (possibly nothing yet), or why the stream is unreadable.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(chunk.len().saturating_mul(4).max(256));
        let mut input = chunk;
        loop {
            if out.len() == out.capacity() {
                if out.len() >= MAX_INFLATED {
                    return Err(format!(
                        "a compressed chunk inflates past {MAX_INFLATED} bytes"
                    ));
                }
                out.reserve(out.capacity());
            }
            let before = self.z.total_in();
            let status = self
                .z
                .decompress_vec(input, &mut out, FlushDecompress::Sync)
                .map_err(|e| format!("the compressed watch is corrupt: {e}"))?;
            let used = usize::try_from(self.z.total_in() - before).unwrap_or(input.len());
            input = &input[used.min(input.len())..];
            if matches!(status, Status::StreamEnd) {
                return Err("the compressed watch ended its stream".to_string());
            }
            // All in, and output left room: nothing more comes of this chunk.
            if input.is_empty() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_frame_inflates_whole_however_the_chunks_are_cut() {
        let mut d = Deflater::default();
        let events: Vec<String> = (0..50)
            .map(|i| format!("event: heartbeat\ndata: {{\"version\":\"123.{i}\"}}\n\n"))
            .collect();
        let frames: Vec<Vec<u8>> = events.iter().map(|e| d.frame(e.as_bytes())).collect();
        // Each frame alone gives its event back: nothing waits for the next one.
        let mut i = Inflater::default();
        for (e, f) in events.iter().zip(&frames) {
            assert_eq!(i.feed(f).unwrap(), e.as_bytes());
        }
        // Repeats cost a fraction of their plain size.
        let last = frames.last().unwrap().len();
        assert!(last * 3 < events[49].len(), "{last} bytes");
        // Cut anywhere (one byte at a time), the stream still inflates to the same text.
        let mut i = Inflater::default();
        let mut got = Vec::new();
        for b in frames.concat() {
            got.extend(i.feed(&[b]).unwrap());
        }
        assert_eq!(got, events.concat().into_bytes());
    }

    #[test]
    fn a_large_event_and_garbage() {
        let mut d = Deflater::default();
        let big = (0..200_000).fold(String::new(), |mut s, n| {
            s.push_str(&n.to_string());
            s.push(',');
            s
        });
        let f = d.frame(big.as_bytes());
        assert_eq!(Inflater::default().feed(&f).unwrap(), big.as_bytes());
        assert!(
            Inflater::default()
                .feed(b"\xff\xff\xff\xff garbage")
                .is_err()
        );
    }
}
