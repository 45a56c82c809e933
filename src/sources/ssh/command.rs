//! The system `ssh`, run as a child process: never prompting (`BatchMode`), one connection
//! per host kept and reused (`ControlMaster`, its socket in a private directory,
//! `ControlPersist`), and new connections bounded in parallel by a shared semaphore.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::Semaphore;

use super::failure::Ended;
use super::probe::quote;

/// How many hosts may be connecting at once, by default.
pub const DEFAULT_PARALLEL_CONNECTS: usize = 32;

/// How `ssh` is run for every host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshOptions {
    /// The client (`ssh` on the PATH by default).
    pub program: PathBuf,
    /// An ssh config file (`-F`) instead of `~/.ssh/config`.
    pub config_file: Option<PathBuf>,
    /// Where the connections' control sockets live: private to this user.
    pub control_dir: PathBuf,
    /// How long an unused connection stays open.
    pub control_persist: Duration,
    /// ssh's `ConnectTimeout`.
    pub connect_timeout: Duration,
}

/// What `ssh` printed and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// Its stdout (the remote command's), as far as it got.
    pub stdout: String,
    /// Its stderr (ssh's own words and the remote command's).
    pub stderr: String,
    /// How it ended.
    pub ended: Ended,
}

/// The semaphore every SSH source of this process shares to bound its new connections.
pub fn shared_connects() -> Arc<Semaphore> {
    static CONNECTS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    Arc::clone(CONNECTS.get_or_init(|| Arc::new(Semaphore::new(DEFAULT_PARALLEL_CONNECTS))))
}

/// The default control-socket directory: `$XDG_RUNTIME_DIR/gpuboard-ssh`, else
/// `gpuboard-ssh-UID` in the temporary directory.
pub fn default_control_dir() -> PathBuf {
    dirs::runtime_dir().map_or_else(
        || {
            // SAFETY: geteuid cannot fail.
            let uid = unsafe { libc::geteuid() };
            std::env::temp_dir().join(format!("gpuboard-ssh-{uid}"))
        },
        |d| d.join("gpuboard-ssh"),
    )
}

/// A control-socket directory that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("ssh control directory {}: {why}", path.display())]
pub struct ControlDirError {
    /// The directory.
    pub path: PathBuf,
    /// What is wrong and what would do.
    pub why: String,
}

/// Makes `dir` (mode 0700) when missing, and checks that it is this user's alone: anyone
/// who can reach a control socket can run commands on that host as this user.
pub fn private_dir(dir: &Path) -> Result<(), ControlDirError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let bad = |why: String| ControlDirError {
        path: dir.to_path_buf(),
        why,
    };
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| bad(format!("cannot create it: {e}")))?;
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| bad(e.to_string()))?;
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    if !meta.is_dir() {
        return Err(bad("it is not a directory".to_string()));
    }
    if meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(bad(format!(
            "it must be a directory of this user (uid {uid}) with mode 0700; it is uid {} \
             mode {:o}",
            meta.uid(),
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

impl SshOptions {
    /// The arguments before the destination.
    pub fn args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if let Some(f) = &self.config_file {
            a.push("-F".to_string());
            a.push(f.display().to_string());
        }
        for o in [
            "BatchMode=yes".to_string(),
            "ControlMaster=auto".to_string(),
            format!("ControlPath={}/%C", self.control_dir.display()),
            format!("ControlPersist={}s", self.control_persist.as_secs().max(1)),
            format!("ConnectTimeout={}", self.connect_timeout.as_secs().max(1)),
            // A dead connection is found within a minute rather than at TCP's leisure.
            "ServerAliveInterval=15".to_string(),
            "ServerAliveCountMax=3".to_string(),
        ] {
            a.push("-o".to_string());
            a.push(o);
        }
        // No terminal: nothing can be asked, and output is the command's own.
        a.push("-T".to_string());
        a
    }

    /// Runs `remote` on `destination`, stopped past `limit`.
    pub async fn run(&self, destination: &str, remote: &str, limit: Duration) -> Run {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(self.args())
            // `--`: a destination can never be taken for an option.
            .arg("--")
            .arg(destination)
            .arg(tied(remote))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Run {
                    stdout: String::new(),
                    stderr: format!("cannot run {}: {e}", self.program.display()),
                    ended: Ended::Exited(Some(255)),
                };
            }
        };
        // Held open while the command runs: its end stops the command there (`tied`).
        let stdin = child.stdin.take();
        let mut out = Vec::new();
        let mut err = Vec::new();
        let mut so = child.stdout.take();
        let mut se = child.stderr.take();
        let finished = tokio::time::timeout(limit, async {
            let ((), (), status) = tokio::join!(
                read_all(so.as_mut(), &mut out),
                read_all(se.as_mut(), &mut err),
                child.wait()
            );
            status
        })
        .await;
        drop(stdin);
        let ended = match finished {
            Ok(Ok(status)) => Ended::Exited(status.code()),
            Ok(Err(e)) => {
                err.extend_from_slice(format!("\nwaiting for ssh: {e}").as_bytes());
                Ended::Exited(None)
            }
            Err(_) => {
                let _ = child.start_kill();
                Ended::TimedOut(limit)
            }
        };
        Run {
            stdout: String::from_utf8_lossy(&out).into_owned(),
            stderr: String::from_utf8_lossy(&err).into_owned(),
            ended,
        }
    }
}

/// How much of a streaming child's stderr is kept (its end: where ssh says why).
const STDERR_KEPT: usize = 8 * 1024;

/// A long-lived `ssh` child whose stdout is read as it comes (a reader's stream); killed
/// when dropped.
#[derive(Debug)]
pub struct Streaming {
    child: tokio::process::Child,
    /// Held open while the stream is read: its end stops the command there (`tied`).
    _stdin: Option<tokio::process::ChildStdin>,
    /// The remote command's stdout, until a reader takes it whole.
    stdout: Option<tokio::io::BufReader<tokio::process::ChildStdout>>,
    /// The end of its stderr, read by a task of its own so the child never blocks on it.
    stderr: tokio::task::JoinHandle<String>,
}

impl Streaming {
    /// The next line of stdout (without its line end, invalid UTF-8 replaced); `None` at
    /// its end.
    pub async fn line(&mut self) -> Option<String> {
        use tokio::io::AsyncBufReadExt;
        let mut buf = Vec::new();
        let stdout = self.stdout.as_mut()?;
        match stdout.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => None,
            Ok(_) => {
                while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    buf.pop();
                }
                Some(String::from_utf8_lossy(&buf).into_owned())
            }
        }
    }

    /// Its stdout, for a reader that reads it as bytes.
    pub fn take_stdout(&mut self) -> Option<tokio::io::BufReader<tokio::process::ChildStdout>> {
        self.stdout.take()
    }

    /// Stops the child if it still runs, and says how it ended and the end of its stderr.
    pub async fn finish(mut self) -> (Ended, String) {
        // A child whose stdout ended is ending: a moment to say how, then it is stopped.
        let ended = match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
            Ok(Ok(status)) => Ended::Exited(status.code()),
            Ok(Err(_)) => Ended::Exited(None),
            Err(_) => {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                Ended::Exited(None)
            }
        };
        let stderr = tokio::time::timeout(Duration::from_secs(2), &mut self.stderr)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        (ended, stderr)
    }

    /// Stops the child now (a stream gone silent), then as `finish`.
    pub async fn stop(mut self) -> (Ended, String) {
        let _ = self.child.start_kill();
        self.finish().await
    }
}

impl SshOptions {
    /// Starts `remote` on `destination` and hands its stdout over as it comes.
    ///
    /// # Errors
    /// The client cannot be started (its words).
    pub fn stream(&self, destination: &str, remote: &str) -> Result<Streaming, String> {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(self.args())
            .arg("--")
            .arg(destination)
            .arg(tied(remote))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.program.display()))?;
        let stdin = child.stdin.take();
        let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err("ssh started without its pipes".to_string());
        };
        let stderr = tokio::spawn(async move {
            let mut kept: Vec<u8> = Vec::new();
            let mut chunk = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                kept.extend_from_slice(&chunk[..n]);
                if kept.len() > STDERR_KEPT {
                    kept.drain(..kept.len() - STDERR_KEPT);
                }
            }
            String::from_utf8_lossy(&kept).into_owned()
        });
        Ok(Streaming {
            child,
            _stdin: stdin,
            stdout: Some(tokio::io::BufReader::new(stdout)),
            stderr,
        })
    }
}

/// `remote` tied to the console: without a terminal, sshd never stops a command whose
/// client went away, so a watchdog on the host reads stdin (which this side holds open
/// while it reads) and at its end stops the command's process group.
pub fn tied(remote: &str) -> String {
    format!(
        "sh -c {}",
        quote(&format!(
            "exec 3<&0; {{ cat <&3; kill 0; }} >/dev/null 2>&1 & exec 3<&-; {remote} </dev/null"
        ))
    )
}

/// Reads `from` to its end into `into` (nothing when there is no pipe).
async fn read_all<R: AsyncRead + Unpin>(from: Option<&mut R>, into: &mut Vec<u8>) {
    if let Some(r) = from {
        let _ = r.read_to_end(into).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arguments_never_prompt_and_share_one_connection() {
        let o = SshOptions {
            program: "ssh".into(),
            config_file: Some("/t/ssh_config".into()),
            control_dir: "/run/u/gpuboard-ssh".into(),
            control_persist: Duration::from_mins(1),
            connect_timeout: Duration::from_secs(10),
        };
        let a = o.args().join(" ");
        assert!(a.starts_with("-F /t/ssh_config "), "{a}");
        for want in [
            "-o BatchMode=yes",
            "-o ControlMaster=auto",
            "-o ControlPath=/run/u/gpuboard-ssh/%C",
            "-o ControlPersist=60s",
            "-o ConnectTimeout=10",
        ] {
            assert!(a.contains(want), "{want} in {a}");
        }
    }

    #[test]
    fn every_command_is_tied_to_the_console() {
        let t = tied("gpuboard watch --stdio");
        assert_eq!(
            t,
            "sh -c 'exec 3<&0; { cat <&3; kill 0; } >/dev/null 2>&1 & exec 3<&-; gpuboard \
             watch --stdio </dev/null'"
        );
    }

    #[test]
    fn a_control_dir_is_made_private_and_a_shared_one_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("ctl");
        private_dir(&d).unwrap();
        let mode = std::fs::metadata(&d).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = private_dir(&d).unwrap_err().to_string();
        assert!(e.contains("mode 0700") && e.contains("mode 755"), "{e}");
    }

    #[tokio::test]
    async fn a_missing_client_is_a_failed_run_not_a_panic() {
        let tmp = tempfile::tempdir().unwrap();
        let o = SshOptions {
            program: tmp.path().join("no-ssh-here"),
            config_file: None,
            control_dir: tmp.path().to_path_buf(),
            control_persist: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
        };
        let r = o.run("h", "true", Duration::from_secs(5)).await;
        assert_eq!(r.ended, Ended::Exited(Some(255)));
        assert!(r.stderr.contains("cannot run"), "{}", r.stderr);
    }
}
