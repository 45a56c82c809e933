//! The processes that own a claim on this host: the process named by the claim's `pid`
//! and every process it started, found by two marks `gpuboard run` leaves on them. A
//! process belongs to the group of `pid` when it sits in a cgroup named
//! `gpuboard-run-<pid>` (which no process of an unprivileged user can leave, and which
//! `/proc` shows for every user's processes), or when its environment holds
//! `GPUBOARD_RUN_PID=<pid>` (kept by whatever does not clear its environment; readable
//! only for the endpoint's own user's processes unless it runs as root).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The variable `gpuboard run` sets in its command's environment to its own pid.
pub const RUN_PID_ENV: &str = "GPUBOARD_RUN_PID";

/// The name of the cgroup `gpuboard run` with pid `pid` puts its command in.
pub fn cgroup_name(pid: u32) -> String {
    format!("gpuboard-run-{pid}")
}

/// The pid a `gpuboard run` cgroup was named after, if `name` is one.
pub fn cgroup_pid(name: &str) -> Option<u32> {
    name.strip_prefix("gpuboard-run-")?.parse().ok()
}

/// How old a scan of `/proc` may be to answer "yes" again: one pass serves every claim of a
/// tick whose group lives, however many there are.
const SCAN_EVERY: Duration = Duration::from_millis(250);

/// Whether a process of the group of `pid` (other than a zombie) runs on this host. A "yes"
/// may come from a scan of `/proc` up to `SCAN_EVERY` old (it only delays a release); a "no"
/// always comes from a fresh scan, since an older one may predate the group.
pub fn group_runs(pid: u32) -> bool {
    static LAST: Mutex<Option<(Instant, Arc<BTreeSet<u32>>)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((at, groups)) = &*last
        && at.elapsed() < SCAN_EVERY
        && groups.contains(&pid)
    {
        return true;
    }
    let groups = Arc::new(live_groups(Path::new("/proc")));
    *last = Some((Instant::now(), Arc::clone(&groups)));
    drop(last);
    groups.contains(&pid)
}

/// The pids whose group has a live process under `proc_root` (a `/proc`), in one pass:
/// for each process that is not a zombie, the pid its run cgroup is named after and the
/// pid its run variable names.
pub fn live_groups(proc_root: &Path) -> BTreeSet<u32> {
    let Ok(procs) = std::fs::read_dir(proc_root) else {
        return BTreeSet::new();
    };
    let mut groups = BTreeSet::new();
    for p in procs.filter_map(Result::ok) {
        if p.file_name()
            .to_str()
            .is_none_or(|n| n.parse::<u32>().is_err())
        {
            continue;
        }
        let dir = p.path();
        let found: Vec<u32> = run_cgroup(&dir)
            .into_iter()
            .chain(run_variable(&dir))
            .collect();
        if !found.is_empty() && runs_at(&dir) {
            groups.extend(found);
        }
    }
    groups
}

/// The pid of the run cgroup (v2) the process of `dir` is in, or below.
fn run_cgroup(dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(dir.join("cgroup")).ok()?;
    text.lines()
        .filter_map(|l| l.strip_prefix("0::"))
        .find_map(|path| path.split('/').find_map(cgroup_pid))
}

/// The pid the run variable in the environment of the process of `dir` names.
fn run_variable(dir: &Path) -> Option<u32> {
    let env = std::fs::read(dir.join("environ")).ok()?;
    let prefix = format!("{RUN_PID_ENV}=");
    env.split(|b| *b == 0).find_map(|var| {
        std::str::from_utf8(var.strip_prefix(prefix.as_bytes())?)
            .ok()?
            .parse()
            .ok()
    })
}

/// Whether the process of `dir` is not a zombie (an exited process not reaped yet runs no
/// more). A process whose stat cannot be read (gone meanwhile) does not run.
fn runs_at(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(root: &Path, pid: u32, cgroup: &str, env: &[&str], state: &str) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cgroup"), cgroup).unwrap();
        std::fs::write(dir.join("environ"), env.join("\0")).unwrap();
        std::fs::write(dir.join("stat"), format!("{pid} (sleep) {state} 1 1")).unwrap();
    }

    #[test]
    fn a_group_is_found_by_its_cgroup_or_its_variable() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        process(
            r,
            10,
            "0::/user.slice/gpuboard-run-7\n",
            &["PATH=/bin"],
            "S",
        );
        process(r, 11, "0::/\n", &["A=1", "GPUBOARD_RUN_PID=8"], "R");
        process(r, 12, "0::/gpuboard-run-9\n", &[], "Z");
        process(
            r,
            13,
            "0::/gpuboard-run-77\n",
            &["GPUBOARD_RUN_PID=70"],
            "S",
        );
        process(
            r,
            14,
            "0::/gpuboard-run-5/sub\n",
            &["GPUBOARD_RUN_PID=6"],
            "S",
        );
        std::fs::create_dir_all(r.join("self")).unwrap();
        let groups = live_groups(r);
        assert!(groups.contains(&7), "by cgroup, environment cleared");
        assert!(
            groups.contains(&8),
            "by environment, outside any run cgroup"
        );
        assert!(!groups.contains(&9), "a zombie runs no more");
        assert!(
            groups.contains(&5) && groups.contains(&6),
            "below a run cgroup; both marks"
        );
        assert_eq!(groups.into_iter().collect::<Vec<_>>(), [5, 6, 7, 8, 70, 77]);
        assert!(live_groups(&r.join("missing")).is_empty());
        assert_eq!(cgroup_pid(&cgroup_name(4242)), Some(4242));
        assert_eq!(cgroup_pid("gpuboard-run-x"), None);
        assert_eq!(cgroup_pid("other"), None);
    }

    #[test]
    fn a_group_started_after_a_scan_is_seen_at_once() {
        // No real process has this pid (above any pid_max): only the variable can name it.
        let group = 4_000_000_000;
        assert!(!group_runs(group));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(RUN_PID_ENV, group.to_string())
            .spawn()
            .unwrap();
        // The child carries the variable once it has exec'd (before, /proc shows the
        // parent's environment): wait for that, not for any scan.
        let environ = format!("/proc/{}/environ", child.id());
        let mark = format!("{RUN_PID_ENV}={group}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !std::fs::read(&environ)
            .is_ok_and(|e| e.split(|b| *b == 0).any(|v| v == mark.as_bytes()))
        {
            assert!(std::time::Instant::now() < deadline, "sleep never started");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Within the same `SCAN_EVERY`: an earlier scan may not answer "no".
        assert!(group_runs(group));
        child.kill().unwrap();
        child.wait().unwrap();
        // A "yes" may be up to `SCAN_EVERY` old; a fresh scan no longer sees it.
        assert!(
            !live_groups(Path::new("/proc")).contains(&group),
            "gone once reaped"
        );
    }
}
