//! `gpuboard discover` as Flink runs it: many workers at once on one coordination file.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::items_after_statements,
    clippy::panic
)]

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use gpuboard::discovery::read_records;

const MESSAGE: &str = "Could not get enough GPU resources.";

fn discover(file: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(common::gpuboard());
    cmd.args(["discover", "1", "--coordination-file"])
        .arg(file)
        .args(["--indexes", "0,1,2,3"])
        .args(extra);
    cmd
}

/// Runs `gpuboard discover` under an `sh` that stays alive (and so keeps the recorded
/// owner alive) until its stdin is closed, after reporting the exit status.
fn under_parent_that_waits(file: &Path) -> std::process::Child {
    Command::new("sh")
        .arg("-c")
        .arg(r#""$0" "$@" 2>&1; echo "exit=$?"; read _"#)
        .arg(common::gpuboard())
        .args([
            "discover",
            "1",
            "--enable-coordination-mode",
            "--coordination-file",
        ])
        .arg(file)
        .args(["--indexes", "0,1,2,3"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads a waiting parent's report: (succeeded, what gpuboard printed).
fn report(child: &mut std::process::Child) -> (bool, String) {
    use std::io::BufRead;
    let mut said = String::new();
    let mut lines = std::io::BufReader::new(child.stdout.as_mut().unwrap()).lines();
    loop {
        let line = lines
            .next()
            .expect("the parent reports before waiting")
            .unwrap();
        if let Some(code) = line.strip_prefix("exit=") {
            return (code == "0", said);
        }
        said.push_str(&line);
        said.push('\n');
    }
}

fn split(outputs: Vec<Output>) -> (Vec<u32>, Vec<String>) {
    let mut won = Vec::new();
    let mut lost = Vec::new();
    for out in outputs {
        if out.status.success() {
            won.push(String::from_utf8_lossy(&out.stdout).trim().parse().unwrap());
        } else {
            assert_eq!(out.status.code(), Some(1));
            assert!(out.stdout.is_empty(), "nothing on stdout when failing");
            lost.push(String::from_utf8_lossy(&out.stderr).into_owned());
        }
    }
    (won, lost)
}

#[test]
fn eight_workers_four_gpus_then_dead_owners_are_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("flink-gpu-coordination");
    let mut parents: Vec<_> = (0..8).map(|_| under_parent_that_waits(&file)).collect();
    let mut won = Vec::new();
    let mut lost = Vec::new();
    for parent in &mut parents {
        match report(parent) {
            (true, said) => won.push(said.trim().parse::<u32>().unwrap()),
            (false, said) => lost.push(said),
        }
    }
    assert_eq!(won.len(), 4, "exactly four succeed; failures: {lost:?}");
    assert_eq!(
        won.iter().copied().collect::<BTreeSet<_>>(),
        BTreeSet::from([0, 1, 2, 3])
    );
    assert_eq!(lost.len(), 4);
    assert!(lost.iter().all(|m| m.starts_with(MESSAGE)), "{lost:?}");
    let records = read_records(&file).unwrap();
    assert!(records.iter().all(|r| r.owner_alive), "{records:?}");

    // The parents exit: their records now belong to dead processes.
    for mut parent in parents {
        drop(parent.stdin.take());
        parent.wait().unwrap();
    }
    let records = read_records(&file).unwrap();
    assert_eq!(records.len(), 4);
    assert!(
        records.iter().all(|r| !r.owner_alive),
        "their sh parents have exited: {records:?}"
    );

    // New workers (this test process is their parent, and alive) take the GPUs over.
    let outputs: Vec<Output> = (0..4)
        .map(|_| {
            discover(&file, &["--enable-coordination-mode"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let (won, lost) = split(outputs);
    assert!(lost.is_empty(), "{lost:?}");
    assert_eq!(
        won.iter().copied().collect::<BTreeSet<_>>(),
        BTreeSet::from([0, 1, 2, 3])
    );
    let records = read_records(&file).unwrap();
    let me = std::process::id();
    assert_eq!(
        records.len(),
        4,
        "dead owners' lines were replaced, not duplicated"
    );
    assert!(
        records.iter().all(|r| r.pid == me && r.owner_alive),
        "{records:?}"
    );
    assert_eq!(
        records
            .iter()
            .map(|r| r.index)
            .collect::<BTreeSet<_>>()
            .len(),
        4
    );
    let out = discover(&file, &["--enable-coordination-mode"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with(MESSAGE));
}

fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn a_file_in_flinks_format_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("coord");
    let me = std::process::id();
    let dead = dead_pid();
    // As Flink's own script leaves it: `INDEX PID` lines.
    std::fs::write(&file, format!("0 {me}\n1 {dead}\n2 {me}\n")).unwrap();
    let out = Command::new(common::gpuboard())
        .args([
            "discover",
            "2",
            "--enable-coordination-mode",
            "--coordination-file",
        ])
        .arg(&file)
        .args(["--indexes", "0,1,2,3", "--pid", "4242"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Free index 3 first, then index 1 whose owner is dead.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "3,1\n");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text, format!("0 {me}\n2 {me}\n3 4242\n1 4242\n"));
}

#[test]
fn the_flip_spellings_take_over_only_with_check_dead() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("assign");
    std::fs::write(&file, format!("0 {}\n", dead_pid())).unwrap();
    let run = |extra: &[&str]| {
        Command::new(common::gpuboard())
            .args(["discover", "1", "--privilege", "--assign-file"])
            .arg(&file)
            .args(["--indexes", "0"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("(dead)"));
    let out = run(&["--check-dead"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0\n");
}

#[test]
fn without_coordination_the_first_indexes_and_bad_input_is_named() {
    let out = Command::new(common::gpuboard())
        .args(["discover", "2", "--indexes", "5,6,7"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "5,6\n");
    let out = Command::new(common::gpuboard())
        .args(["discover", "4", "--indexes", "5,6,7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with(MESSAGE));
    let out = Command::new(common::gpuboard())
        .args(["discover", "1", "--indexes", "0,a"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`a`"));
    let out = Command::new(common::gpuboard())
        .args(["discover", "0"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
}

#[test]
fn waits_for_flocks_lock_like_flinks_script() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("coord");
    std::fs::write(&file, "").unwrap();
    // flock(1) is what Flink's script locks with; hold it and see discover give up.
    let Ok(mut holder) = Command::new("flock")
        .arg(&file)
        .args(["sleep", "30"])
        .spawn()
    else {
        return; // util-linux flock(1) not installed here
    };
    use std::os::unix::fs::MetadataExt;
    let inode = format!(":{} ", std::fs::metadata(&file).unwrap().ino());
    // Wait until flock(1) holds it: /proc/locks names the file by `MAJ:MIN:INODE`.
    while !std::fs::read_to_string("/proc/locks")
        .unwrap()
        .contains(&inode)
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let out = discover(
        &file,
        &["--enable-coordination-mode", "--lock-timeout", "0"],
    )
    .output()
    .unwrap();
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stayed locked"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
