//! Flink's GPU coordination file: `INDEX PID` lines under an exclusive `flock` on the file
//! itself, exactly as Flink's `gpu-discovery-common.sh` keeps it, so gpuboard and Flink's
//! own script can share one host.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Flink's default coordination file.
pub const DEFAULT_COORDINATION_FILE: &str = "/var/tmp/flink-gpu-coordination";
/// What Flink's script prints when it cannot satisfy the amount.
pub const NOT_ENOUGH_MESSAGE: &str = "Could not get enough GPU resources.";

/// One line of the coordination file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssignmentRecord {
    /// GPU index.
    pub index: u32,
    /// The process that holds it.
    pub pid: u32,
    /// Whether that process still exists.
    pub owner_alive: bool,
}

/// Why an assignment could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CoordinationError {
    /// The file could not be opened, read or written.
    #[error("coordination file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Another process held the lock for too long.
    #[error("coordination file {path} stayed locked by another process for {waited:?}; giving up")]
    LockTimeout {
        /// The file.
        path: PathBuf,
        /// How long we waited.
        waited: Duration,
    },
    /// Not enough free GPUs.
    #[error(
        "Could not get enough GPU resources. Asked for {wanted}, found {free} free among visible GPUs {visible:?}; held: {held}"
    )]
    NotEnough {
        /// Asked for.
        wanted: u32,
        /// Free that could be taken.
        free: usize,
        /// Visible indexes.
        visible: Vec<u32>,
        /// `index by pid` of live holders, in words.
        held: String,
    },
    /// Zero GPUs asked for.
    #[error("GPU amount must be at least 1 (got 0)")]
    ZeroAmount,
}

/// How to assign.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordinationOptions {
    /// The shared file.
    pub file: PathBuf,
    /// Take over indexes whose recorded owner is dead.
    pub take_over_dead: bool,
    /// The pid recorded as owner.
    pub owner_pid: u32,
    /// Longest wait for the lock.
    pub lock_timeout: Duration,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CoordinationError + '_ {
    move |source| CoordinationError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Holds an exclusive flock until dropped (closing the file releases it).
struct Locked(File);

fn lock(path: &Path, timeout: Duration) -> Result<Locked, CoordinationError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io_err(path))?;
    let started = Instant::now();
    loop {
        // SAFETY: flock on a descriptor we own; no memory is touched.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(Locked(file));
        }
        let error = std::io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EWOULDBLOCK | libc::EINTR) => {}
            _ => return Err(io_err(path)(error)),
        }
        if started.elapsed() >= timeout {
            return Err(CoordinationError::LockTimeout {
                path: path.to_path_buf(),
                waited: started.elapsed(),
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A line is `INDEX PID`; anything else is kept in the file untouched but ignored.
fn parse_line(line: &str) -> Option<(u32, u32)> {
    let mut parts = line.split_whitespace();
    let index = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((index, pid))
}

/// Picks `amount` of `visible` given the file's lines, with `alive` telling whether a
/// pid lives. Returns the chosen indexes and the lines to keep (dead owners' lines of
/// taken-over indexes removed). Pure, so the rules are tested without processes.
pub fn choose(
    visible: &[u32],
    amount: u32,
    lines: &[String],
    take_over_dead: bool,
    alive: impl Fn(u32) -> bool,
) -> Result<(Vec<u32>, Vec<String>), CoordinationError> {
    if amount == 0 {
        return Err(CoordinationError::ZeroAmount);
    }
    let owners = |index: u32| -> Vec<u32> {
        lines
            .iter()
            .filter_map(|l| parse_line(l))
            .filter(|(i, _)| *i == index)
            .map(|(_, pid)| pid)
            .collect()
    };
    let mut chosen = Vec::new();
    let mut recorded = Vec::new();
    for &index in visible {
        if chosen.len() == amount as usize {
            break;
        }
        if owners(index).is_empty() {
            chosen.push(index);
        } else {
            recorded.push(index);
        }
    }
    let mut freed = Vec::new();
    if take_over_dead {
        for &index in &recorded {
            if chosen.len() == amount as usize {
                break;
            }
            if owners(index).into_iter().all(|pid| !alive(pid)) {
                chosen.push(index);
                freed.push(index);
            }
        }
    }
    if chosen.len() < amount as usize {
        let held = recorded
            .iter()
            .filter(|i| !freed.contains(i))
            .map(|i| {
                let pids: Vec<String> = owners(*i)
                    .into_iter()
                    .map(|p| {
                        if alive(p) {
                            p.to_string()
                        } else {
                            format!("{p} (dead)")
                        }
                    })
                    .collect();
                format!("{i} by {}", pids.join("+"))
            })
            .collect::<Vec<_>>();
        return Err(CoordinationError::NotEnough {
            wanted: amount,
            free: chosen.len(),
            visible: visible.to_vec(),
            held: if held.is_empty() {
                "none".to_string()
            } else {
                held.join(", ")
            },
        });
    }
    let kept = lines
        .iter()
        .filter(|l| !parse_line(l).is_some_and(|(i, _)| freed.contains(&i)))
        .cloned()
        .collect();
    Ok((chosen, kept))
}

/// Assigns `amount` of the `visible` GPUs under the file lock and records them, as
/// Flink's script does in coordination mode. The file is rewritten in place (same inode)
/// so the lock other waiters hold stays meaningful.
pub fn assign(
    visible: &[u32],
    amount: u32,
    options: &CoordinationOptions,
) -> Result<Vec<u32>, CoordinationError> {
    let path = options.file.as_path();
    let Locked(mut file) = lock(path, options.lock_timeout)?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io_err(path))?;
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let (chosen, mut kept) = choose(
        visible,
        amount,
        &lines,
        options.take_over_dead,
        crate::telemetry::procfs::pid_alive,
    )?;
    for index in &chosen {
        kept.push(format!("{index} {}", options.owner_pid));
    }
    let mut out = kept.join("\n");
    out.push('\n');
    file.set_len(0).map_err(io_err(path))?;
    file.seek(SeekFrom::Start(0)).map_err(io_err(path))?;
    file.write_all(out.as_bytes()).map_err(io_err(path))?;
    file.sync_data().map_err(io_err(path))?;
    Ok(chosen)
}

/// Lists the records of a coordination file with whether each owner lives. A missing
/// file is an empty list; lines that are not `INDEX PID` are skipped.
pub fn read_records(path: &Path) -> Result<Vec<AssignmentRecord>, CoordinationError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(path)(e)),
    };
    Ok(text
        .lines()
        .filter_map(parse_line)
        .map(|(index, pid)| AssignmentRecord {
            index,
            pid,
            owner_alive: crate::telemetry::procfs::pid_alive(pid),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn skips_recorded_and_takes_free_in_order() {
        let (chosen, kept) =
            choose(&[0, 1, 2, 3], 2, &lines("0 100\n2 101"), true, |_| true).unwrap();
        assert_eq!(chosen, vec![1, 3]);
        assert_eq!(kept, lines("0 100\n2 101"));
    }

    #[test]
    fn takes_over_dead_owners_only_when_needed_and_allowed() {
        let file = lines("0 100\n1 200\n# note\n");
        let alive = |pid| pid == 100;
        let (chosen, kept) = choose(&[0, 1, 2], 2, &file, true, alive).unwrap();
        assert_eq!(chosen, vec![2, 1]);
        assert_eq!(kept, lines("0 100\n# note"));
        let e = choose(&[0, 1, 2], 2, &file, false, alive).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with(NOT_ENOUGH_MESSAGE), "{msg}");
        assert!(msg.contains("1 by 200 (dead)"), "{msg}");
    }

    #[test]
    fn not_enough_says_who_holds_what() {
        let e = choose(&[0, 1], 2, &lines("0 100\n1 7"), true, |_| true).unwrap_err();
        assert!(e.to_string().contains("0 by 100, 1 by 7"), "{e}");
        assert!(matches!(
            choose(&[0], 0, &[], true, |_| true),
            Err(CoordinationError::ZeroAmount)
        ));
    }

    #[test]
    fn assigns_and_records_under_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("coord");
        std::fs::write(&file, "1 999999999\n").unwrap();
        let options = CoordinationOptions {
            file: file.clone(),
            take_over_dead: true,
            owner_pid: std::process::id(),
            lock_timeout: Duration::from_secs(10),
        };
        assert_eq!(assign(&[0, 1], 1, &options).unwrap(), vec![0]);
        // Index 1's owner does not exist: taken over.
        assert_eq!(assign(&[0, 1], 1, &options).unwrap(), vec![1]);
        assert!(assign(&[0, 1], 1, &options).is_err());
        let records = read_records(&file).unwrap();
        let me = std::process::id();
        assert_eq!(
            records,
            vec![
                AssignmentRecord {
                    index: 0,
                    pid: me,
                    owner_alive: true
                },
                AssignmentRecord {
                    index: 1,
                    pid: me,
                    owner_alive: true
                },
            ]
        );
    }

    #[test]
    fn a_held_lock_times_out_instead_of_hanging() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("coord");
        let _held = lock(&file, Duration::from_secs(1)).unwrap();
        // flock locks belong to the open file description: a second open conflicts.
        let e = lock(&file, Duration::from_millis(20)).err().unwrap();
        assert!(matches!(e, CoordinationError::LockTimeout { .. }), "{e}");
    }
}
