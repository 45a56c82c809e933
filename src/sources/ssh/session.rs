//! A host's one session: the probe's script runs over the host's connection (made then,
//! within the shared bound on connects, or a kept one reused), its findings are read up to
//! its `@start` line, and the same ssh child then carries the reader it started. A host
//! thus costs one session after its connection, not a probe's and then a reader's.

use std::sync::Arc;

use super::Context;
use super::command::Streaming;
use super::failure::Ended;
use super::probe::{self, Probed, Start};
use super::since;
use crate::wire::SnapshotVersion;

/// What a session came to.
pub(super) enum Opened {
    /// The script started a reader: what it found, which reader, and the stream at the
    /// reader's first byte.
    Reader {
        /// What the script found before it.
        answer: Probed,
        /// Which reader it started.
        started: Start,
        /// The ssh child, its stdout after the `@start` line.
        child: Box<Streaming>,
    },
    /// The script ended, or was stopped at the reading's limit, without starting one.
    Ended {
        /// What it printed.
        answer: Probed,
        /// How it ended.
        ended: Ended,
        /// ssh's stderr (its own words and the script's).
        stderr: String,
    },
}

/// Runs the probe's script on the host, starting the best reader from `from` down (the
/// serve's watch resuming after `since`), and reads its findings within the reading's
/// limit; the connect slot is held until they are read.
pub(super) async fn open(
    ctx: &Context,
    from: Start,
    since_version: Option<SnapshotVersion>,
) -> Opened {
    let asked = std::time::Instant::now();
    let permit = Arc::clone(&ctx.connects).acquire_owned().await.ok();
    tracing::debug!(host = %ctx.config.name, waited_ms = since(asked), "ssh: probing");
    let probing = std::time::Instant::now();
    let remote = probe::remote_command(from, since_version, ctx.period_secs());
    let mut child = match ctx.config.options.stream(&ctx.config.destination, &remote) {
        Ok(c) => c,
        Err(said) => {
            return Opened::Ended {
                answer: Probed::default(),
                ended: Ended::Exited(Some(255)),
                stderr: said,
            };
        }
    };
    let limit = ctx.config.timeout;
    let mut text = String::new();
    let found = tokio::time::timeout(limit, async {
        while let Some(line) = child.line().await {
            if let Some(started) = probe::started(&line) {
                return Some(started);
            }
            text.push_str(&line);
            text.push('\n');
        }
        None
    })
    .await;
    drop(permit);
    let answer = probe::read(&text);
    tracing::debug!(host = %ctx.config.name, ms = since(probing), reader = ?answer.reader(), "ssh: probe answered");
    match found {
        Ok(Some(started)) => Opened::Reader {
            answer,
            started,
            child: Box::new(child),
        },
        Ok(None) => {
            let (ended, stderr) = child.finish().await;
            Opened::Ended {
                answer,
                ended,
                stderr,
            }
        }
        Err(_) => {
            let (_, stderr) = child.stop().await;
            Opened::Ended {
                answer,
                ended: Ended::TimedOut(limit),
                stderr,
            }
        }
    }
}
