//! One scheduler per host: whatever schedules this host's own GPUs (the GPUs NVML lists),
//! `gpuboard serve` or the console's embedded scheduler, first takes an exclusive `flock`
//! on one host-wide file, whatever its data directory. The file names the holder (pid and
//! address, as `serve.lock` does), so that the loser can say who has the GPUs and the
//! console can attach to it.
//!
//! Where the file is: `GPUBOARD_HOST_LOCK` when set (tests give each serve its own);
//! else `/run/gpuboard/scheduler.lock`, which root makes (directory 0755, file 0644) and
//! every user may open read-only, which is all `flock` needs, so that a user's console and
//! the root service exclude each other; else, for a user on a host where root never made
//! it, `$XDG_RUNTIME_DIR/gpuboard/scheduler.lock`, else `/tmp/gpuboard-<uid>/`: per user.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::os::unix::io::AsRawFd as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The variable that names the host lock file instead of the default.
pub const HOST_LOCK_ENV: &str = "GPUBOARD_HOST_LOCK";
/// The host-wide directory root makes.
pub const SYSTEM_DIR: &str = "/run/gpuboard";
/// The lock file's name in the directories gpuboard chooses.
pub const FILE_NAME: &str = "scheduler.lock";

/// Who holds the host lock, as its file says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The holder's process id.
    pub pid: u32,
    /// The URL it serves, `embedded` for a console, or empty while a serve is starting.
    pub address: String,
    /// A serve's data directory (its tokens and certificate, for a console that attaches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
}

/// Why the host lock cannot be taken.
#[derive(Debug, thiserror::Error)]
pub enum HostLockError {
    /// Another process holds it.
    #[error("{}", held_text(path, *pid, address.as_deref()))]
    Held {
        /// The lock file.
        path: PathBuf,
        /// The holder's pid, when the kernel's lock table names it.
        pid: Option<u32>,
        /// The address the holder wrote, when it wrote one.
        address: Option<String>,
    },
    /// The file or its directory could not be made or locked.
    #[error("host scheduler lock {}: {detail}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
}

/// Who has the GPUs, and what to do about it.
fn held_text(path: &Path, pid: Option<u32>, address: Option<&str>) -> String {
    let pid = pid.map_or_else(|| "unknown".to_string(), |p| p.to_string());
    let (address, advice) = match address {
        Some(a) if a == super::datadir::EMBEDDED => (
            a,
            "quit that console, or run `gpuboard serve` instead and let consoles attach to it",
        ),
        Some("") => ("starting", "use that one, or stop it first"),
        Some(a) => (
            a,
            "use that one (the console attaches to it), or stop it first",
        ),
        None => ("address unknown", "use that one, or stop it first"),
    };
    format!(
        "this host's GPUs are already scheduled by gpuboard pid {pid} ({address}), which holds {}; {advice}",
        path.display()
    )
}

/// The exclusive hold on this host's GPUs; released when dropped (or when the process
/// ends, however it ends).
#[derive(Debug)]
pub struct HostLock {
    file: File,
    path: PathBuf,
    /// Opened read-only (a user on root's file): it holds the lock but names no holder.
    writable: bool,
}

impl HostLock {
    /// Takes the lock at `path`, naming `address` as the holder's (`embedded`, or empty
    /// while a serve is not listening yet).
    pub fn acquire(path: &Path, address: &str) -> Result<HostLock, HostLockError> {
        let io = |what: &str, e: std::io::Error| HostLockError::Io {
            path: path.to_path_buf(),
            detail: format!("{what}: {e}"),
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            make_dir(parent).map_err(|e| io("cannot make its directory", e))?;
        }
        let (file, writable) = open(path).map_err(|e| io("cannot open it", e))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let pid = lock_holder(&file);
                let address = written_owner(path)
                    .filter(|o| Some(o.pid) == pid)
                    .map(|o| o.address);
                return Err(HostLockError::Held {
                    path: path.to_path_buf(),
                    pid,
                    address,
                });
            }
            return Err(io("cannot lock it", err));
        }
        let mut lock = HostLock {
            file,
            path: path.to_path_buf(),
            writable,
        };
        lock.set_holder(address, None)
            .map_err(|e| io("cannot write it", e))?;
        Ok(lock)
    }

    /// Names the address served and the data directory, once they are known.
    pub fn set_holder(&mut self, address: &str, data_dir: Option<&Path>) -> std::io::Result<()> {
        if !self.writable {
            return Ok(());
        }
        let owner = Holder {
            pid: std::process::id(),
            address: address.to_string(),
            data_dir: data_dir
                .map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf())),
        };
        let body = serde_json::to_vec(&owner).map_err(std::io::Error::other)?;
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&body)?;
        self.file.flush()
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for HostLock {
    fn drop(&mut self) {
        if self.writable {
            let _ = self.file.set_len(0);
        }
    }
}

/// The host lock file: `GPUBOARD_HOST_LOCK`, else the first usable of the host-wide file,
/// the user's runtime directory and a per-user folder in /tmp (see the module's words).
pub fn default_path() -> PathBuf {
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let system = Path::new(SYSTEM_DIR);
    choose_path(
        std::env::var_os(HOST_LOCK_ENV).map(PathBuf::from),
        uid == 0 || system.join(FILE_NAME).exists() || writable_dir(system),
        std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from),
        uid,
    )
}

/// Where the lock is, from what the host offers: the variable, whether the host-wide
/// file may be used, the user's runtime directory, and the user.
pub fn choose_path(
    env: Option<PathBuf>,
    system_usable: bool,
    runtime_dir: Option<PathBuf>,
    uid: u32,
) -> PathBuf {
    if let Some(p) = env.filter(|p| !p.as_os_str().is_empty()) {
        return p;
    }
    if system_usable {
        return Path::new(SYSTEM_DIR).join(FILE_NAME);
    }
    match runtime_dir.filter(|d| d.is_absolute()) {
        Some(dir) => dir.join("gpuboard").join(FILE_NAME),
        None => PathBuf::from(format!("/tmp/gpuboard-{uid}")).join(FILE_NAME),
    }
}

/// Who holds the lock at `path` now: the holder the file names, when the kernel's lock
/// table shows that very process holding it and the file can be trusted (written by root
/// or by this user, and by no one else). `None` when it is free or the holder is unknown.
pub fn holder(path: &Path) -> Option<Holder> {
    let file = File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if !(meta.uid() == 0 || meta.uid() == me) || meta.mode() & 0o022 != 0 {
        return None;
    }
    let pid = lock_holder(&file)?;
    written_owner(path).filter(|o| o.pid == pid)
}

/// The owner the file names (whether or not it still holds it).
fn written_owner(path: &Path) -> Option<Holder> {
    let mut text = String::new();
    File::open(path).ok()?.read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// The pid holding an flock on `file`, from the kernel's lock table (`/proc/locks`).
fn lock_holder(file: &File) -> Option<u32> {
    let meta = file.metadata().ok()?;
    let table = std::fs::read_to_string("/proc/locks").ok()?;
    holder_in_table(&table, meta.dev(), meta.ino())
}

/// The pid of the FLOCK lock on device `dev`, inode `ino` in a `/proc/locks` text
/// (`1: FLOCK  ADVISORY  WRITE 4242 00:2a:1234 0 EOF`; blocked waiters, `->`, skipped).
fn holder_in_table(table: &str, dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    table.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.get(1) != Some(&"FLOCK") {
            return None;
        }
        let mut id = f.get(5)?.split(':');
        let (ma, mi, i) = (id.next()?, id.next()?, id.next()?);
        let same = u32::from_str_radix(ma, 16).ok()? == major
            && u32::from_str_radix(mi, 16).ok()? == minor
            && i.parse::<u64>().ok()? == ino;
        if same { f.get(4)?.parse().ok() } else { None }
    })
}

/// Makes the lock's directory: 0755 (others open the file to take the lock too), and
/// refuses a directory in /tmp that another user made.
fn make_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    if dir.starts_with("/tmp") {
        let meta = std::fs::metadata(dir)?;
        // SAFETY: geteuid cannot fail.
        if meta.uid() != unsafe { libc::geteuid() } {
            return Err(std::io::Error::other(format!(
                "{} belongs to another user",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Opens (or makes, 0644) the lock file: read-write when allowed, else read-only, which
/// is enough to lock it.
fn open(path: &Path) -> std::io::Result<(File, bool)> {
    let rw = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path);
    match rw {
        Ok(f) => {
            // The mode given applies under the umask; others must be able to open it.
            let _ = f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644));
            Ok((f, true))
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Ok((File::open(path)?, false))
        }
        Err(e) => Err(e),
    }
}

fn writable_dir(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access only reads the path given.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_is_the_variable_else_the_host_file_else_per_user() {
        let env = Some(PathBuf::from("/x/lock"));
        let run = Some(PathBuf::from("/run/user/1000"));
        assert_eq!(
            choose_path(env, true, run.clone(), 0),
            PathBuf::from("/x/lock")
        );
        assert_eq!(
            choose_path(Some(PathBuf::new()), true, None, 0),
            PathBuf::from("/run/gpuboard/scheduler.lock"),
            "an empty variable is no variable"
        );
        assert_eq!(
            choose_path(None, false, run, 1000),
            PathBuf::from("/run/user/1000/gpuboard/scheduler.lock")
        );
        assert_eq!(
            choose_path(None, false, Some(PathBuf::from("relative")), 1000),
            PathBuf::from("/tmp/gpuboard-1000/scheduler.lock")
        );
    }

    #[test]
    fn the_lock_table_names_the_holder_of_this_file_only() {
        let table = "1: POSIX  ADVISORY  WRITE 11 00:2a:99 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4242 fd:01:99 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 5151 fd:01:99 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 77 fd:01:100 0 EOF\n";
        let dev = libc::makedev(0xfd, 0x01);
        assert_eq!(holder_in_table(table, dev, 99), Some(4242));
        assert_eq!(holder_in_table(table, dev, 100), Some(77));
        assert_eq!(holder_in_table(table, dev, 101), None);
        assert_eq!(holder_in_table(table, libc::makedev(0, 0x2a), 99), None);
        assert_eq!(holder_in_table("garbage\n\n", dev, 99), None);
    }

    #[test]
    fn a_second_taker_is_refused_naming_the_first() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("deeper").join("host.lock");
        let mut lock = HostLock::acquire(&path, "").unwrap();
        lock.set_holder("http://127.0.0.1:9", Some(tmp.path()))
            .unwrap();
        let me = std::process::id();
        assert_eq!(
            holder(&path),
            Some(Holder {
                pid: me,
                address: "http://127.0.0.1:9".into(),
                data_dir: Some(std::fs::canonicalize(tmp.path()).unwrap()),
            })
        );
        let err = HostLock::acquire(&path, "embedded").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!("pid {me} (http://127.0.0.1:9)")),
            "{text}"
        );
        drop(lock);
        assert_eq!(holder(&path), None, "released");
        let _again = HostLock::acquire(&path, "embedded").unwrap();
        assert_eq!(holder(&path).unwrap().address, "embedded");
    }
}
