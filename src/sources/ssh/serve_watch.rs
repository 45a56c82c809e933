//! Reader 1: a running `gpuboard serve`, watched through the SSH channel. The host runs
//! `gpuboard watch --stdio` (in the probe's session, after its `@start` line), which
//! relays its serve's delta watch (the same events as `GET /v1/watch?deltas=1`) to stdout;
//! here the bytes go through the HTTP watch's own decoder into the same `Model`, and a
//! reconnect resumes with `since`. No port is
//! opened to the console and no token crosses the network: SSH's authentication is the
//! access control. Actions go to the same serve through `gpuboard relay` (`act`), when
//! the probe found its operator token readable by the SSH user.

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::io::AsyncReadExt;

use super::act::Acting;
use super::command::Streaming;
use super::failure::{self, HostFailure};
use super::{Context, Outlet, Turn, relabel};
use crate::client::ClientError;
use crate::sources::watch::{Model, Step};
use crate::wire::{SILENT_AFTER, SnapshotVersion};

/// The remote command, resuming after `since` when the console has a version: the figures
/// form where the host's gpuboard relays it (its `watch --help` names `--figures`), else
/// the form a gpuboard from before it relays.
pub fn remote_command(since: Option<SnapshotVersion>) -> String {
    let since = since.map(|v| format!(" --since {v}")).unwrap_or_default();
    format!(
        "if gpuboard watch --help 2>/dev/null | grep -q -e --figures; then exec gpuboard \
         watch --stdio --figures{since}; else exec gpuboard watch --stdio{since}; fi"
    )
}

/// The ssh child's stdout as the chunks the watch decoder reads.
fn chunks(
    stdout: tokio::io::BufReader<tokio::process::ChildStdout>,
    endpoint: String,
) -> BoxStream<'static, Result<Vec<u8>, ClientError>> {
    futures::stream::unfold(Some(stdout), move |reader| {
        let endpoint = endpoint.clone();
        async move {
            let mut r = reader?;
            let mut buf = vec![0u8; 64 * 1024];
            match r.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(buf), Some(r)))
                }
                Err(e) => Some((
                    Err(ClientError::Unreachable {
                        endpoint,
                        detail: e.to_string(),
                        sent: true,
                    }),
                    None,
                )),
            }
        }
    })
    .boxed()
}

/// Follows the serve's watch (`first`, the probe's session after its `@start` line; a
/// reconnect runs the watch again), publishing each change, until the stream fails or the
/// source is gone; its snapshots take actions as `acting` says. A failure before the
/// first event makes the reader unavailable.
pub(super) async fn follow(
    ctx: &Context,
    outlet: &Outlet,
    pid: u32,
    model: &mut Model,
    acting: &Acting,
    first: Streaming,
) -> Turn {
    let note = format!(
        "reader: gpuboard serve over ssh (pid {pid}; its delta watch through the SSH \
         channel), {}",
        acting.note()
    );
    let name = &ctx.config.name;
    let mut delivered = false;
    let mut first = Some(first);
    loop {
        let mut child = match first.take().map_or_else(
            || {
                ctx.config
                    .options
                    .stream(&ctx.config.destination, &remote_command(model.since()))
            },
            Ok,
        ) {
            Ok(c) => c,
            Err(said) => return Turn::Failed(HostFailure::Ssh { status: 255, said }),
        };
        let Some(stdout) = child.take_stdout() else {
            return Turn::Unavailable("ssh gave no stdout".to_string());
        };
        let mut events = crate::client::watch_events(
            chunks(stdout, ctx.config.destination.clone()),
            SILENT_AFTER,
            ctx.config.destination.clone(),
        );
        // Each connection's first event shows the host again (it may be down since).
        let mut fresh = true;
        let error = loop {
            match events.next().await {
                Some(Ok(event)) => {
                    let step = model.apply(event);
                    if let Step::Reconnect(why) = step {
                        tracing::info!(host = %name, "reconnecting the watch: {why}");
                        break None;
                    }
                    if (step == Step::Changed || fresh)
                        && let Some(s) = &model.snapshot
                    {
                        let mut s = s.clone();
                        relabel(&mut s, name, &note, acting.can());
                        if !outlet.publish(Ok(s)) {
                            return Turn::Gone;
                        }
                        delivered = true;
                        fresh = false;
                    }
                }
                Some(Err(e)) => break Some(e),
                None => {
                    break Some(ClientError::Decode {
                        endpoint: ctx.config.destination.clone(),
                        detail: "the watch ended".to_string(),
                    });
                }
            }
        };
        drop(events);
        let (ended, stderr) = child.stop().await;
        let Some(error) = error else {
            continue;
        };
        if ended == failure::Ended::Exited(Some(255)) {
            let f = failure::connection_failure(&stderr);
            return if delivered {
                Turn::Stopped(f)
            } else {
                Turn::Failed(f)
            };
        }
        // The relay's own words say more than the decoder's ("no serve runs here").
        let why = if stderr.trim().is_empty() {
            error.to_string()
        } else {
            failure::telling_line(&stderr)
        };
        return if delivered {
            Turn::Stopped(HostFailure::Stopped {
                what: "the serve's watch".to_string(),
                said: why,
            })
        } else {
            Turn::Unavailable(why)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The remote command run by `sh` against a `gpuboard` that prints its arguments, with
    /// or without `--figures` in its help.
    fn ran_with(help: &str, since: Option<SnapshotVersion>) -> String {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("gpuboard");
        std::fs::write(
            &bin,
            format!(
                "#!/bin/sh\nif [ \"$2\" = --help ]; then echo '{help}'; exit 0; fi\necho \"$@\"\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("{}:/usr/bin:/bin", dir.path().display());
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(remote_command(since))
            .env("PATH", path)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    #[test]
    fn the_figures_form_is_asked_only_of_a_gpuboard_that_relays_it() {
        let v: SnapshotVersion = "5.9".parse().unwrap();
        assert_eq!(
            ran_with("  --figures  Relay the figures form", Some(v)),
            "watch --stdio --figures --since 5.9"
        );
        assert_eq!(
            ran_with("  --since <VERSION>", Some(v)),
            "watch --stdio --since 5.9"
        );
        assert_eq!(ran_with("  --figures", None), "watch --stdio --figures");
    }
}
