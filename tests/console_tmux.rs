//! Drives the real binary in tmux with `--demo`: open the claim form, claim 10 GiB, see
//! it in Claims, release it with confirmation, quit, and check the terminal was restored.
//! `scripts/test` installs tmux.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use crate::common::tmux;

use tmux::Session;

#[test]
fn claim_and_release_in_the_demo_then_quit() {
    let bin = env!("CARGO_BIN_EXE_gpuboard");
    let home = tempfile::tempdir().unwrap();
    let script = format!(
        "env HOME={h} XDG_CONFIG_HOME={h}/config XDG_STATE_HOME={h}/state {bin} --demo; echo EXIT=$?; stty -a | tr ' ' '\\n' | grep -x -- '-\\?icanon'; echo CHECKED; sleep 60",
        h = home.path().display()
    );
    let s = Session::start(120, 36, "test", &script);
    let name = s.0.clone();
    s.wait_for("GPUs (28)");
    s.keys(&["3"]);
    s.wait_for("Claims (");
    s.keys(&["c"]);
    s.wait_for("Claim on demo");
    s.keys(&["Enter"]);
    s.wait_for("would place at");
    s.keys(&["Enter"]);
    let screen = s.wait_for("gpu_memory=10GiB)");
    assert!(screen.contains("placed at"), "{screen}");
    s.keys(&["/", "default", "Enter"]);
    let screen = s.wait_for("Claims (1)");
    let row = screen
        .lines()
        .find(|l| l.contains(" default "))
        .unwrap_or_else(|| panic!("{screen}"));
    assert!(row.contains("10G") && row.contains("placed"), "{row}");
    s.keys(&["r"]);
    s.wait_for("[ Cancel ]");
    s.keys(&["Tab", "Enter"]);
    s.wait_for("released");
    s.wait_for("Claims (0)");
    s.keys(&["q"]);
    // Wait for the line after the terminal check, so its output is on screen too.
    let screen = s.wait_for("CHECKED");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(
        !screen.contains("1 Overview"),
        "alternate screen left:\n{screen}"
    );
    assert!(
        screen.lines().any(|l| l.trim() == "icanon"),
        "cooked mode restored:\n{screen}"
    );
    assert_eq!(
        s.tmux(&["display", "-p", "-t", &name, "#{alternate_on}"])
            .trim(),
        "0"
    );
    assert!(
        home.path().join("state/gpuboard/console.log").exists(),
        "log file written"
    );
}

/// Starts `gpuboard --demo` in a detached tmux session of this size.
fn demo_session(w: u16, h: u16, tag: &str) -> (Session, tempfile::TempDir) {
    let home = tempfile::tempdir().unwrap();
    (Session::console(w, h, tag, home.path(), "--demo"), home)
}

/// The GPU a cordon dialog names (`Cordon GPU node:i (...)`).
fn dialog_target(screen: &str) -> String {
    let line = screen
        .lines()
        .find(|l| l.contains("ordon GPU ") && l.contains(" on demo?"))
        .unwrap_or_else(|| panic!("no cordon dialog:\n{screen}"));
    let after = line.split("ordon GPU ").nth(1).unwrap();
    after.split_whitespace().next().unwrap().to_string()
}

#[test]
fn at_80x24_the_cordon_target_survives_a_resort_and_idle_filters() {
    let (s, _home) = demo_session(80, 24, "resort");
    s.wait_for("GPUs (28)");
    // Sort by utilisation (it changes every refresh), pick the fourth row.
    s.keys(&["s", "s", "s"]);
    s.wait_for("sort:util");
    s.keys(&["j", "j", "j", "x"]);
    let first = dialog_target(&s.wait_for("[ Cancel ]"));
    // Enter on the focused Cancel sends nothing.
    s.keys(&["Enter"]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!s.screen().contains("cordoned"), "{}", s.screen());
    // Let refreshes re-sort the table, then ask again: the same GPU.
    std::thread::sleep(Duration::from_millis(4_500));
    s.keys(&["x"]);
    let again = dialog_target(&s.wait_for("[ Cancel ]"));
    assert_eq!(
        first, again,
        "the selection followed the GPU across re-sorts"
    );
    // Close it on the focused Cancel (Esc then a key would read as Alt-key in tmux).
    s.keys(&["Enter"]);
    // `/idle` in Claims lists idle claims only.
    s.keys(&["3"]);
    s.wait_for("Claims (");
    s.keys(&["/", "idle", "Enter"]);
    let rows_of = |screen: &str| -> Vec<String> {
        screen
            .lines()
            .filter(|l| {
                l.trim_start_matches('│')
                    .split_whitespace()
                    .next()
                    .is_some_and(|w| w.parse::<u64>().is_ok())
            })
            .map(str::to_string)
            .collect()
    };
    // The demo's use moves: wait for a moment it has idle claims.
    let screen = s.wait_until("the idle list, not empty", |now| {
        now.contains("filter:idle") && !rows_of(now).is_empty()
    });
    let rows = rows_of(&screen);
    for r in &rows {
        assert!(r.contains(" idle "), "not idle: {r}\n{screen}");
    }
    s.keys(&["q"]);
}

/// A hand-over in the real binary: one confirmation lists the three steps; the second
/// does not fit and stops it; the result pane shows done, FAILED with the source's words
/// and not run; the console's log has an audit line per step that ran.
#[test]
fn a_hand_over_stops_at_its_failed_step_and_shows_each_result() {
    let (s, home) = demo_session(120, 36, "handover");
    s.wait_for("GPUs (28)");
    s.keys(&[
        ":",
        "handover claim demo --memory 1Gi --project first then claim demo --gpus 99 --project second then claim demo --memory 1Gi --project third",
        "Enter",
    ]);
    let screen = s.wait_for("Hand-over: 3 steps");
    for want in [
        "1. demo: claim",
        "2. demo: claim",
        "3. demo: claim",
        "[ Cancel ]",
        "[ hand over ]",
    ] {
        assert!(screen.contains(want), "{want}:\n{screen}");
    }
    s.keys(&["Tab", "Enter"]);
    let screen = s.wait_for("STOPPED at step 2 of 3");
    assert!(
        screen.contains("1. demo: claim") && screen.contains(": done: "),
        "{screen}"
    );
    assert!(screen.contains("FAILED: "), "{screen}");
    assert!(
        screen.contains("not run (an earlier step failed)"),
        "{screen}"
    );
    // Esc closes the pane; the Events view has each step. Esc goes alone: with the next
    // key right behind it tmux may read Alt-6, and the pane would stay open.
    s.escape_from("not run (an earlier step failed)");
    s.keys(&["6"]);
    let screen = s.wait_for("hand-over step 3/3");
    assert!(
        screen.contains("hand-over step 2/3: demo: claim"),
        "{screen}"
    );
    let log = std::fs::read_to_string(home.path().join("state/gpuboard/console.log")).unwrap();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("action=\"claim\"") || l.contains("action=claim"))
            .count(),
        2,
        "an audit line per step that ran:\n{log}"
    );
    s.keys(&["q"]);
}
