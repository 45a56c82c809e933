//! Reader 2: a `gpuboard` binary on the host without a serve. The probe's script runs
//! `gpuboard telemetry --stdio` in its session, which samples the host's GPUs through NVML
//! every period and prints each round as one snapshot of JSON a line; here each line is
//! read, its schema checked and shown. A binary that cannot (no NVML there, an older gpuboard) says why on its
//! first line or its stderr, and the next reader is tried.

use super::command::Streaming;
use super::failure::{self, HostFailure};
use super::{Context, Outlet, Turn, relabel};
use crate::snapshot::{SCHEMA_VERSION, Snapshot};

/// The remote command, sampling every `secs`.
pub fn remote_command(secs: u64) -> String {
    format!("gpuboard telemetry --stdio --interval {secs}")
}

/// One line of the stream as a snapshot, or why it is not one.
pub fn read_line(line: &str) -> Result<Snapshot, String> {
    let shown: String = line.chars().take(80).collect();
    let snap: Snapshot = serde_json::from_str(line)
        .map_err(|e| format!("a line that is not a snapshot ({e}): `{shown}`"))?;
    if snap.schema != SCHEMA_VERSION {
        return Err(format!(
            "snapshot schema {} is not the {SCHEMA_VERSION} this console reads",
            snap.schema
        ));
    }
    Ok(snap)
}

/// Reads the host's telemetry stream (`child`, the probe's session after its `@start`
/// line), publishing each round, until it ends, goes silent for three periods, or the
/// source is gone.
pub(super) async fn follow(
    ctx: &Context,
    outlet: &Outlet,
    version: &str,
    mut child: Streaming,
) -> Turn {
    let secs = ctx.period_secs();
    let what = format!("gpuboard telemetry every {secs} s");
    let note = format!("reader: gpuboard's NVML telemetry over ssh ({version}, every {secs} s)");
    let mut delivered = false;
    loop {
        // Opening NVML may take a while: the first line gets the whole reading's limit.
        let wait = if delivered {
            ctx.silent_after()
        } else {
            ctx.config.timeout
        };
        match tokio::time::timeout(wait, child.line()).await {
            Ok(Some(line)) if line.trim().is_empty() => {}
            Ok(Some(line)) => match read_line(&line) {
                Ok(mut snap) => {
                    relabel(&mut snap, &ctx.config.name, &note, false);
                    if !outlet.publish(Ok(snap)) {
                        return Turn::Gone;
                    }
                    delivered = true;
                }
                Err(why) => {
                    let _ = child.stop().await;
                    return if delivered {
                        Turn::Stopped(HostFailure::Unreadable(why))
                    } else {
                        Turn::Unavailable(why)
                    };
                }
            },
            Ok(None) => {
                let (ended, stderr) = child.finish().await;
                if delivered {
                    return Turn::Stopped(failure::stopped(&what, &ended, &stderr));
                }
                if ended == failure::Ended::Exited(Some(255)) {
                    return Turn::Failed(failure::connection_failure(&stderr));
                }
                return Turn::Unavailable(failure::telling_line(&stderr));
            }
            Err(_) => {
                let _ = child.stop().await;
                let f = HostFailure::Silent {
                    what,
                    secs: wait.as_secs(),
                };
                return if delivered {
                    Turn::Stopped(f)
                } else {
                    Turn::Unavailable(f.to_string())
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_a_snapshot_of_this_schema_or_says_what_it_is() {
        let good = serde_json::to_string(&Snapshot {
            schema: SCHEMA_VERSION,
            ..Snapshot::default()
        })
        .unwrap();
        assert!(read_line(&good).is_ok(), "{good}");
        let e = read_line("gpuboard 0.0.0-test").unwrap_err();
        assert!(
            e.contains("not a snapshot") && e.contains("`gpuboard 0.0.0-test`"),
            "{e}"
        );
    }
}
