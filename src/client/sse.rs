//! Reading the delta watch: a tolerant server-sent-events parser (chunks split anywhere,
//! `\n`, `\r\n` or `\r` line ends, comments and unknown fields skipped) and the stream
//! that turns its events into `WatchEvent`s, ending with an error when the endpoint goes
//! silent, drops the connection or sends something unreadable.

use std::collections::VecDeque;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};

use super::ClientError;
use crate::snapshot::{SCHEMA_VERSION, Snapshot};
use crate::wire::{
    DeltaBody, HeartbeatBody, ResyncBody, SnapshotVersion, WatchEvent, watch_events,
};

/// The largest event read, in bytes.
const MAX_EVENT: usize = 256 * 1024 * 1024;

/// One event as the stream framed it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` name (`message` when none was given).
    pub event: String,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
    /// The `id:`, when given.
    pub id: Option<String>,
}

/// Frames bytes into events.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    buf: Vec<u8>,
    /// Bytes of `buf` known to hold no line end.
    scanned: usize,
    event: String,
    data: String,
    has_data: bool,
    id: Option<String>,
}

impl SseParser {
    /// Feeds a chunk; returns the events it completed, or why the stream is unreadable.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, String> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        let mut start = 0;
        let mut at = self.scanned;
        let mut scanned_to = self.buf.len();
        while let Some(pos) = self.buf[at..]
            .iter()
            .position(|b| *b == b'\n' || *b == b'\r')
        {
            let end = at + pos;
            let next = match self.buf[end] {
                b'\r' if end + 1 == self.buf.len() => {
                    // A `\n` may follow in the next chunk.
                    scanned_to = end;
                    break;
                }
                b'\r' if self.buf[end + 1] == b'\n' => end + 2,
                _ => end + 1,
            };
            let line = std::str::from_utf8(&self.buf[start..end])
                .map_err(|_| "an event line is not UTF-8".to_string())?
                .to_string();
            if let Some(ev) = self.line(&line) {
                out.push(ev);
            }
            start = next;
            at = next;
        }
        self.buf.drain(..start);
        self.scanned = scanned_to - start;
        if self.buf.len() + self.data.len() > MAX_EVENT {
            return Err(format!("an event larger than {MAX_EVENT} bytes"));
        }
        Ok(out)
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            let data = std::mem::take(&mut self.data);
            if !std::mem::take(&mut self.has_data) {
                return None;
            }
            return Some(SseEvent {
                event: if event.is_empty() {
                    "message".to_string()
                } else {
                    event
                },
                data,
                id: self.id.clone(),
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = value.to_string(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            _ => {}
        }
        None
    }
}

/// What the stream of one watch keeps between items.
struct Reader {
    bytes: BoxStream<'static, Result<Vec<u8>, ClientError>>,
    parser: SseParser,
    ready: VecDeque<SseEvent>,
    idle: Duration,
    endpoint: String,
    /// An event of the delta watch was seen (the endpoint speaks it).
    spoken: bool,
    done: bool,
}

/// Turns the bytes of a watch answer into events. Ends with an error item when no byte
/// arrives for `idle`, when the bytes end, or on an event it cannot read.
pub(crate) fn watch_events(
    bytes: BoxStream<'static, Result<Vec<u8>, ClientError>>,
    idle: Duration,
    endpoint: String,
) -> BoxStream<'static, Result<WatchEvent, ClientError>> {
    let reader = Reader {
        bytes,
        parser: SseParser::default(),
        ready: VecDeque::new(),
        idle,
        endpoint,
        spoken: false,
        done: false,
    };
    futures::stream::unfold(reader, |mut r| async move {
        let item = r.next().await?;
        Some((item, r))
    })
    .boxed()
}

impl Reader {
    async fn next(&mut self) -> Option<Result<WatchEvent, ClientError>> {
        if self.done {
            return None;
        }
        let item = self.read().await;
        if item.is_err() {
            self.done = true;
        }
        Some(item)
    }

    async fn read(&mut self) -> Result<WatchEvent, ClientError> {
        loop {
            while let Some(ev) = self.ready.pop_front() {
                if let Some(we) = self.convert(ev)? {
                    return Ok(we);
                }
            }
            let chunk = match tokio::time::timeout(self.idle, self.bytes.next()).await {
                Err(_) => {
                    return Err(ClientError::Timeout {
                        endpoint: self.endpoint.clone(),
                        secs: self.idle.as_secs().max(1),
                    });
                }
                Ok(None) => {
                    return Err(ClientError::Unreachable {
                        endpoint: self.endpoint.clone(),
                        detail: "the watch stream ended".to_string(),
                        sent: true,
                    });
                }
                Ok(Some(chunk)) => chunk?,
            };
            let events = self.parser.push(&chunk).map_err(|e| self.decode(e))?;
            self.ready.extend(events);
        }
    }

    fn decode(&self, detail: String) -> ClientError {
        ClientError::Decode {
            endpoint: self.endpoint.clone(),
            detail,
        }
    }

    /// The event as a `WatchEvent`; `None` for events this client does not know.
    fn convert(&mut self, ev: SseEvent) -> Result<Option<WatchEvent>, ClientError> {
        let bad = |what: &str, e: &dyn std::fmt::Display| self.decode(format!("{what}: {e}"));
        let out = match ev.event.as_str() {
            watch_events::SNAPSHOT => {
                let version: SnapshotVersion = ev
                    .id
                    .as_deref()
                    .unwrap_or_default()
                    .parse()
                    .map_err(|e| bad("snapshot event id", &e))?;
                let snapshot: Snapshot =
                    serde_json::from_str(&ev.data).map_err(|e| bad("snapshot event", &e))?;
                if snapshot.schema != SCHEMA_VERSION {
                    return Err(self.decode(format!(
                        "snapshot schema {} is not the {SCHEMA_VERSION} this build reads",
                        snapshot.schema
                    )));
                }
                WatchEvent::Snapshot {
                    version,
                    snapshot: Box::new(snapshot),
                }
            }
            watch_events::DELTA => WatchEvent::Delta(
                serde_json::from_str::<DeltaBody>(&ev.data).map_err(|e| bad("delta event", &e))?,
            ),
            watch_events::RESYNC => WatchEvent::Resync {
                reason: serde_json::from_str::<ResyncBody>(&ev.data)
                    .map_err(|e| bad("resync event", &e))?
                    .reason,
            },
            watch_events::HEARTBEAT => WatchEvent::Heartbeat {
                version: serde_json::from_str::<HeartbeatBody>(&ev.data)
                    .map_err(|e| bad("heartbeat event", &e))?
                    .version,
            },
            // The original watch answers `deltas=1` from an endpoint that predates it.
            "revision" | "audit" if !self.spoken => {
                return Err(ClientError::NotFound {
                    detail: "this endpoint has no delta watch (GET /v1/watch?deltas=1)".to_string(),
                });
            }
            _ => return Ok(None),
        };
        self.spoken = true;
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(text: &str, sizes: &[usize]) -> Vec<SseEvent> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        let mut rest = text.as_bytes();
        let mut i = 0;
        while !rest.is_empty() {
            let n = sizes[i % sizes.len()].min(rest.len());
            out.extend(p.push(&rest[..n]).unwrap());
            rest = &rest[n..];
            i += 1;
        }
        out
    }

    fn ev(event: &str, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: id.map(str::to_string),
        }
    }

    #[test]
    fn events_survive_any_split_and_any_line_end() {
        let lf = ": hello\nevent: delta\nid: 1.2\ndata: {\"a\":1}\n\nevent:heartbeat\ndata:x\ndata: y\nretry: 5\nweird\n\n";
        let want = vec![
            ev("delta", "{\"a\":1}", Some("1.2")),
            ev("heartbeat", "x\ny", Some("1.2")),
        ];
        let crlf = lf.replace('\n', "\r\n");
        let cr = lf.replace('\n', "\r");
        for text in [lf.to_string(), crlf, cr] {
            for sizes in [&[1usize][..], &[2, 3], &[7], &[1000]] {
                let got = parse_in_pieces(&text, sizes);
                // A lone `\r` at the very end waits for a possible `\n`.
                if text.ends_with('\r') && !text.ends_with("\r\n") {
                    assert_eq!(got.len(), want.len() - 1, "{text:?} {sizes:?}");
                } else {
                    assert_eq!(got, want, "{text:?} {sizes:?}");
                }
            }
        }
    }

    #[test]
    fn comments_blank_lines_and_unknown_fields_make_no_event() {
        let got = parse_in_pieces(": keep-alive\n\n\n:x\n\nfoo: bar\n\ndata\n\n", &[4]);
        assert_eq!(got, vec![ev("message", "", None)]);
    }

    #[test]
    fn a_large_event_in_small_chunks_is_read_once() {
        let big = "x".repeat(200_000);
        let text = format!("event: snapshot\nid: 3.4\ndata: {big}\n\n");
        let got = parse_in_pieces(&text, &[1024]);
        assert_eq!(got, vec![ev("snapshot", &big, Some("3.4"))]);
    }

    #[test]
    fn bytes_that_are_not_text_are_an_error() {
        let mut p = SseParser::default();
        assert!(p.push(b"data: \xff\xfe\n\n").is_err());
    }

    fn chunks(
        parts: Vec<&'static str>,
        then_hang: bool,
    ) -> BoxStream<'static, Result<Vec<u8>, ClientError>> {
        let head = futures::stream::iter(parts.into_iter().map(|p| Ok(p.as_bytes().to_vec())));
        if then_hang {
            head.chain(futures::stream::pending()).boxed()
        } else {
            head.boxed()
        }
    }

    #[tokio::test]
    async fn the_stream_reads_events_then_ends_on_silence_or_close() {
        let hb = "event: heartbeat\nid: 1.1\ndata: {\"version\":\"1.1\"}\n\n";
        let mut s = watch_events(
            chunks(vec![": hi\n\nevent: other\ndata: 1\n\n", hb], true),
            Duration::from_millis(50),
            "e".into(),
        );
        let v = SnapshotVersion { epoch: 1, seq: 1 };
        assert_eq!(
            s.next().await.unwrap().unwrap(),
            WatchEvent::Heartbeat { version: v }
        );
        assert!(matches!(
            s.next().await.unwrap(),
            Err(ClientError::Timeout { .. })
        ));
        assert!(s.next().await.is_none(), "nothing after the error");

        let mut s = watch_events(chunks(vec![hb], false), Duration::from_secs(5), "e".into());
        assert!(s.next().await.unwrap().is_ok());
        assert!(matches!(
            s.next().await.unwrap(),
            Err(ClientError::Unreachable { .. })
        ));

        let mut s = watch_events(
            chunks(vec!["event: delta\ndata: {nope\n\n"], true),
            Duration::from_secs(5),
            "e".into(),
        );
        assert!(matches!(
            s.next().await.unwrap(),
            Err(ClientError::Decode { .. })
        ));

        let old = "event: revision\nid: 4\ndata: {\"revision\":4}\n\n";
        let mut s = watch_events(chunks(vec![old], true), Duration::from_secs(5), "e".into());
        assert!(matches!(
            s.next().await.unwrap(),
            Err(ClientError::NotFound { .. })
        ));
    }
}
