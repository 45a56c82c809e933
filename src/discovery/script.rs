//! Running a discovery script as Flink's `GPUDriver` does: AMOUNT as the first argument,
//! the configured arguments after it; stdout holds comma-separated GPU indexes; a
//! non-zero exit or too few indexes is an error. A hung script is killed at the timeout.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Most bytes of script output kept: indexes never need more, garbage is cut off.
const MAX_OUTPUT: u64 = 64 * 1024;
/// How often a running script is checked for exit.
const POLL: Duration = Duration::from_millis(5);

/// Why a discovery script gave no usable indexes.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// Zero GPUs asked for.
    #[error("GPU amount must be at least 1 (got 0)")]
    ZeroAmount,
    /// The script could not be started.
    #[error("could not start discovery script {path}: {source}")]
    Spawn {
        /// The script.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It ran longer than allowed and was killed.
    #[error("discovery script {path} did not finish within {timeout:?} and was killed")]
    Timeout {
        /// The script.
        path: PathBuf,
        /// The limit.
        timeout: Duration,
    },
    /// It exited non-zero.
    #[error("discovery script {path} failed ({status}): {stderr}")]
    Failed {
        /// The script.
        path: PathBuf,
        /// Exit status in words.
        status: String,
        /// What it said, stdout and stderr, trimmed.
        stderr: String,
    },
    /// Its output was not a comma-separated list of indexes.
    #[error(
        "discovery script {path} printed `{output}`, not comma-separated GPU indexes such as `0,1`: {problem}"
    )]
    Malformed {
        /// The script.
        path: PathBuf,
        /// The output, trimmed and cut.
        output: String,
        /// What was wrong.
        problem: String,
    },
    /// Fewer indexes than asked for.
    #[error(
        "discovery script {path} returned {got} GPU indexes ({indexes:?}) but {wanted} are required"
    )]
    TooFew {
        /// The script.
        path: PathBuf,
        /// Asked for.
        wanted: u32,
        /// Returned.
        got: usize,
        /// What it returned.
        indexes: Vec<u32>,
    },
    /// Waiting on the script failed.
    #[error("waiting for discovery script {path}: {source}")]
    Wait {
        /// The script.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Reads `0,1, 3` into indexes; empty output is an empty list. Duplicates and anything
/// that is not a whole number are refused with the offending item named.
pub fn parse_indexes(output: &str) -> Result<Vec<u32>, String> {
    let trimmed = output.trim();
    if trimmed.is_empty() {
        return Ok(Vec::new());
    }
    let mut indexes = Vec::new();
    for item in trimmed.split(',') {
        let item = item.trim();
        let index: u32 = item
            .parse()
            .map_err(|_| format!("`{item}` is not a GPU index (a whole number from 0)"))?;
        if indexes.contains(&index) {
            return Err(format!("index {index} is listed twice"));
        }
        indexes.push(index);
    }
    Ok(indexes)
}

fn cut(text: &str) -> String {
    let t = text.trim();
    match t.char_indices().nth(200) {
        Some((at, _)) => format!("{}...", &t[..at]),
        None => t.to_string(),
    }
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(pipe) = pipe {
            let mut bytes = Vec::new();
            let _ = pipe.take(MAX_OUTPUT).read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    })
}

/// Runs `script AMOUNT ARGS...` and returns the indexes it printed (at least `amount`).
pub fn run_discovery_script(
    script: &Path,
    amount: u32,
    args: &[String],
    timeout: Duration,
) -> Result<Vec<u32>, ScriptError> {
    if amount == 0 {
        return Err(ScriptError::ZeroAmount);
    }
    let path = script.to_path_buf();
    let mut child = Command::new(script)
        .arg(amount.to_string())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| ScriptError::Spawn {
            path: path.clone(),
            source,
        })?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ScriptError::Timeout { path, timeout });
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(source) => {
                let _ = child.kill();
                return Err(ScriptError::Wait { path, source });
            }
        }
    };
    // The script exited; a grandchild still holding the pipes must not hold us up.
    let out = if stdout.is_finished() || wait_briefly(&stdout) {
        stdout.join().unwrap_or_default()
    } else {
        String::new()
    };
    let err = if stderr.is_finished() || wait_briefly(&stderr) {
        stderr.join().unwrap_or_default()
    } else {
        String::new()
    };
    if !status.success() {
        let said = [out.trim(), err.trim()]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" / ");
        return Err(ScriptError::Failed {
            path,
            status: status.to_string(),
            stderr: cut(&said),
        });
    }
    let indexes = parse_indexes(&out).map_err(|problem| ScriptError::Malformed {
        path: path.clone(),
        output: cut(&out),
        problem,
    })?;
    if indexes.len() < amount as usize {
        return Err(ScriptError::TooFew {
            path,
            wanted: amount,
            got: indexes.len(),
            indexes,
        });
    }
    Ok(indexes)
}

fn wait_briefly(handle: &std::thread::JoinHandle<String>) -> bool {
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        if handle.is_finished() {
            return true;
        }
        std::thread::sleep(POLL);
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("discover.sh");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    const T: Duration = Duration::from_secs(20);

    #[test]
    fn parses_indexes() {
        assert_eq!(parse_indexes("0,1, 3\n"), Ok(vec![0, 1, 3]));
        assert_eq!(parse_indexes("  \n"), Ok(vec![]));
        assert!(parse_indexes("0,,1").unwrap_err().contains("``"));
        assert!(parse_indexes("0,x").unwrap_err().contains("`x`"));
        assert!(parse_indexes("1,1").unwrap_err().contains("twice"));
        assert!(parse_indexes("-1").is_err());
    }

    #[test]
    fn amount_first_then_configured_args() {
        let dir = tempfile::tempdir().unwrap();
        let s = script(
            dir.path(),
            r#"[ "$1" = 2 ] && [ "$2" = --x ] && [ "$3" = "a b" ] && echo 3,5"#,
        );
        let got = run_discovery_script(&s, 2, &["--x".into(), "a b".into()], T).unwrap();
        assert_eq!(got, vec![3, 5]);
    }

    #[test]
    fn non_zero_exit_is_an_error_with_what_it_said() {
        let dir = tempfile::tempdir().unwrap();
        let s = script(
            dir.path(),
            "echo Could not get enough GPU resources.; exit 1",
        );
        let e = run_discovery_script(&s, 1, &[], T).unwrap_err();
        assert!(matches!(e, ScriptError::Failed { .. }));
        assert!(
            e.to_string()
                .contains("Could not get enough GPU resources."),
            "{e}"
        );
    }

    #[test]
    fn too_few_and_garbage_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let s = script(dir.path(), "echo 0");
        assert!(matches!(
            run_discovery_script(&s, 2, &[], T),
            Err(ScriptError::TooFew {
                wanted: 2,
                got: 1,
                ..
            })
        ));
        let s = script(dir.path(), "echo gpu0");
        assert!(matches!(
            run_discovery_script(&s, 1, &[], T),
            Err(ScriptError::Malformed { .. })
        ));
        assert!(matches!(
            run_discovery_script(&s, 0, &[], T),
            Err(ScriptError::ZeroAmount)
        ));
    }

    #[test]
    fn a_hung_script_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let s = script(dir.path(), "exec sleep 30");
        let e = run_discovery_script(&s, 1, &[], Duration::from_millis(50)).unwrap_err();
        assert!(matches!(e, ScriptError::Timeout { .. }), "{e}");
    }

    #[test]
    fn a_missing_script_names_the_path() {
        let e = run_discovery_script(Path::new("/nonexistent/discover"), 1, &[], T).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/discover"));
    }
}
