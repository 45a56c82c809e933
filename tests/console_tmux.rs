//! Drives the real binary in tmux with `--demo`: open the claim form, claim 10 GiB, see
//! it in Claims, release it with confirmation, quit, and check the terminal was restored.
//! `scripts/test` installs tmux.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unused_self
)]

use std::process::Command;
use std::time::{Duration, Instant};

struct Session(String);

impl Session {
    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(args)
            .output()
            .expect("tmux runs (scripts/test installs it)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.tmux(&["send-keys", "-t", &self.0, k]);
        }
    }
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", &self.0])
    }
    /// Waits (bounded) until the screen shows `what`.
    fn wait_for(&self, what: &str) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if s.contains(what) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "never saw `{what}`; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .output();
    }
}

#[test]
fn claim_and_release_in_the_demo_then_quit() {
    let bin = env!("CARGO_BIN_EXE_gpuboard");
    let home = tempfile::tempdir().unwrap();
    let name = format!("gpuboard-test-{}", std::process::id());
    let script = format!(
        "env HOME={h} XDG_CONFIG_HOME={h}/config XDG_STATE_HOME={h}/state {bin} --demo; echo EXIT=$?; stty -a | tr ' ' '\\n' | grep -x -- '-\\?icanon'; echo CHECKED; sleep 60",
        h = home.path().display()
    );
    let s = Session(name.clone());
    let out = Command::new("tmux")
        .args([
            "new-session",
            "-d",
            "-s",
            &name,
            "-x",
            "120",
            "-y",
            "36",
            &script,
        ])
        .output()
        .expect("tmux is installed (scripts/test installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
