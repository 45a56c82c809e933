//! The processes that own a claim on this host: the process named by the claim's `pid`
//! and every process it started, found by two marks `gpuboard run` leaves on them. A
//! process belongs to the group of `pid` when it sits in a cgroup named
//! `gpuboard-run-<pid>` (which no process of an unprivileged user can leave, and which
//! `/proc` shows for every user's processes), or when its environment holds
//! `GPUBOARD_RUN_PID=<pid>` (kept by whatever does not clear its environment; readable
//! only for the endpoint's own user's processes unless it runs as root).

use std::path::Path;

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

/// Whether a process other than `pid` itself runs under `/proc` (`proc_root`) in the
/// group of `pid`: in its run cgroup or with its run variable.
pub fn group_runs(proc_root: &Path, pid: u32) -> bool {
    let Ok(procs) = std::fs::read_dir(proc_root) else {
        return false;
    };
    let marker = format!("{RUN_PID_ENV}={pid}");
    let cgroup = cgroup_name(pid);
    procs
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| *p != pid)
        .any(|p| {
            let dir = proc_root.join(p.to_string());
            (in_cgroup(&dir, &cgroup) || has_marker(&dir, &marker)) && runs_at(&dir)
        })
}

/// Whether `/proc/<p>/cgroup` places the process in a (v2) cgroup named `name`, or below it.
fn in_cgroup(dir: &Path, name: &str) -> bool {
    std::fs::read_to_string(dir.join("cgroup")).is_ok_and(|text| {
        text.lines()
            .filter_map(|l| l.strip_prefix("0::"))
            .any(|path| path.split('/').any(|part| part == name))
    })
}

fn has_marker(dir: &Path, marker: &str) -> bool {
    std::fs::read(dir.join("environ"))
        .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == marker.as_bytes()))
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
        std::fs::create_dir_all(r.join("self")).unwrap();
        assert!(group_runs(r, 7), "by cgroup, environment cleared");
        assert!(group_runs(r, 8), "by environment, outside any run cgroup");
        assert!(!group_runs(r, 9), "a zombie runs no more");
        assert!(!group_runs(r, 71), "no such group");
        assert!(!group_runs(r, 10), "a process is not its own group");
        assert!(!group_runs(&r.join("missing"), 7));
        assert_eq!(cgroup_pid(&cgroup_name(4242)), Some(4242));
        assert_eq!(cgroup_pid("gpuboard-run-x"), None);
        assert_eq!(cgroup_pid("other"), None);
    }
}
