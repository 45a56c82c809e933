//! The data directory as one process holds it: private (no access for group or others to
//! the directory or any file in it: 0700 and 0600 for what gpuboard makes; corrected at
//! each start), and locked: `serve` and the embedded console take an
//! exclusive `flock` on `serve.lock`, which names the holder (pid and address) so that a
//! second one can say who has it, and the console can find the endpoint to attach to.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The lock file inside the data directory.
pub const LOCK_FILE: &str = "serve.lock";
/// The address an embedded console writes: it serves no HTTP.
pub const EMBEDDED: &str = "embedded";
/// The mode of files this module creates.
const FILE_MODE: u32 = 0o600;
/// Access by the group and by others: what the data directory and its files may not give.
const OTHERS: u32 = 0o077;

/// Who holds a data directory: what `serve.lock` says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The holder's process id.
    pub pid: u32,
    /// The URL it serves (`http://127.0.0.1:7420`), `embedded` for a console, or empty
    /// while it is still starting.
    pub address: String,
}

/// Why the data directory cannot be taken.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    /// Another process holds the lock.
    #[error(
        "data directory {dir} is in use by gpuboard pid {pid} ({address}); stop that one or give another --data-dir",
        dir = dir.display(),
        pid = owner.pid,
        address = if owner.address.is_empty() { "starting" } else { owner.address.as_str() }
    )]
    Held {
        /// The directory.
        dir: PathBuf,
        /// Who holds it, as its lock file says.
        owner: Owner,
    },
    /// Another process holds the lock and its file could not be read.
    #[error("data directory {} is in use by another gpuboard process", dir.display())]
    HeldByUnknown {
        /// The directory.
        dir: PathBuf,
    },
    /// The directory or a file in it could not be made, locked or made private.
    #[error("data directory {}: {detail}", dir.display())]
    Io {
        /// The directory.
        dir: PathBuf,
        /// What failed.
        detail: String,
    },
}

/// The exclusive hold on a data directory; released when dropped (or when the process
/// ends, however it ends).
#[derive(Debug)]
pub struct DataDirLock {
    file: File,
    dir: PathBuf,
}

impl DataDirLock {
    /// Creates `dir` if needed, makes it and everything in it private (returning a warning
    /// per corrected path), keeps files created later private (umask 077), and takes the
    /// lock, naming `address` as the holder's.
    pub fn acquire(dir: &Path, address: &str) -> Result<(DataDirLock, Vec<String>), DataDirError> {
        let io = |what: &str, e: std::io::Error| DataDirError::Io {
            dir: dir.to_path_buf(),
            detail: format!("{what}: {e}"),
        };
        // SAFETY: umask only sets the process's file creation mask.
        unsafe { libc::umask(0o077) };
        std::fs::create_dir_all(dir).map_err(|e| io("cannot create it", e))?;
        let warnings = make_private(dir).map_err(|e| io("cannot make it private", e))?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(FILE_MODE)
            .open(dir.join(LOCK_FILE))
            .map_err(|e| io("cannot open serve.lock", e))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(match read_owner(&mut file) {
                    Some(owner) => DataDirError::Held {
                        dir: dir.to_path_buf(),
                        owner,
                    },
                    None => DataDirError::HeldByUnknown {
                        dir: dir.to_path_buf(),
                    },
                });
            }
            return Err(io("cannot lock serve.lock", err));
        }
        let mut lock = DataDirLock {
            file,
            dir: dir.to_path_buf(),
        };
        lock.set_address(address)
            .map_err(|e| io("cannot write serve.lock", e))?;
        Ok((lock, warnings))
    }

    /// Names the address served, once it is known (after the listener is bound).
    pub fn set_address(&mut self, address: &str) -> std::io::Result<()> {
        let owner = Owner {
            pid: std::process::id(),
            address: address.to_string(),
        };
        let body = serde_json::to_vec(&owner).map_err(std::io::Error::other)?;
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&body)?;
        self.file.flush()
    }

    /// The directory held.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for DataDirLock {
    fn drop(&mut self) {
        // A clean exit leaves no owner behind; the lock itself goes with the descriptor.
        let _ = self.file.set_len(0);
    }
}

fn read_owner(file: &mut File) -> Option<Owner> {
    use std::io::Read;
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// Who serves `dir` now: the lock file's holder while that process runs; `None` when no
/// one does, or the file is missing or unreadable.
pub fn running_owner(dir: &Path) -> Option<Owner> {
    let mut file = File::open(dir.join(LOCK_FILE)).ok()?;
    let owner = read_owner(&mut file)?;
    process_runs(owner.pid).then_some(owner)
}

fn process_runs(pid: u32) -> bool {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(raw, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Takes group and other access away from `dir` and from every entry directly in it
/// (0755 becomes 0700, 0644 becomes 0600; the owner's bits stay, so a directory pointed at
/// by mistake loses no execute bit). Symbolic links are left alone, and what lies deeper
/// is not walked: gpuboard writes only at the top. Returns one warning per path changed.
fn make_private(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut warnings = Vec::new();
    tighten(dir, &mut warnings)?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_symlink() {
            tighten(&entry.path(), &mut warnings)?;
        }
    }
    Ok(warnings)
}

fn tighten(path: &Path, warnings: &mut Vec<String>) -> std::io::Result<()> {
    let now = std::fs::symlink_metadata(path)?.permissions().mode() & 0o7777;
    let private = now & !OTHERS;
    if private != now {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(private))?;
        warnings.push(format!(
            "{} was mode {now:04o}, open to other users; made it {private:04o}",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_modes_are_corrected_with_a_warning() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = dir.join("operator.token");
        std::fs::write(&file, "x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let script = dir.join("notes.sh");
        std::fs::write(&script, "x").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (lock, warnings) = DataDirLock::acquire(&dir, "http://127.0.0.1:1").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&script), 0o700, "the owner keeps its execute bit");
        assert_eq!(mode(&dir.join(LOCK_FILE)), 0o600);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("operator.token was mode 0644") && w.ends_with("0600")),
            "{warnings:?}"
        );
        // The holder is this process; a second taker in this process is refused too
        // (flock locks belong to the open file, not the process).
        let owner = running_owner(&dir).unwrap();
        assert_eq!(owner.pid, std::process::id());
        assert_eq!(owner.address, "http://127.0.0.1:1");
        let err = DataDirLock::acquire(&dir, "").unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(lock);
        assert_eq!(running_owner(&dir), None, "a clean exit leaves no owner");
        // A child another test forks in this process holds a copy of every descriptor (the
        // lock's too) until it execs: the lock is free once that copy is closed.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let (_again, warnings) = loop {
            match DataDirLock::acquire(&dir, "") {
                Ok(taken) => break taken,
                Err(e) if std::time::Instant::now() < deadline => {
                    assert!(
                        matches!(e, DataDirError::HeldByUnknown { .. }),
                        "only a child's copy may hold it: {e}"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn unreadable_lock_files_mean_no_owner() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(running_owner(tmp.path()), None);
        std::fs::write(tmp.path().join(LOCK_FILE), "{garbage").unwrap();
        assert_eq!(running_owner(tmp.path()), None);
        // A holder that is gone (pid of a reaped child) is no owner.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        std::fs::write(
            tmp.path().join(LOCK_FILE),
            format!(r#"{{"pid":{pid},"address":"http://127.0.0.1:9"}}"#),
        )
        .unwrap();
        assert_eq!(running_owner(tmp.path()), None);
    }
}
