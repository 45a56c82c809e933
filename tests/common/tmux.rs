//! The real console binary in a detached tmux session of a given size: send keys, read
//! the screen, wait (bounded) for text. Shared by `console_tmux.rs` and
//! `console_incident.rs`; `scripts/test` installs tmux.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unused_self
)]

use std::path::Path;
use std::process::Command;

/// `tmux` on this test process's own server (`-L gpuboard-it-PID`): a server another
/// process started (another checkout's suite, a person's tmux) would run the console in
/// its environment, possibly another build's binary; this one starts here and ends with
/// its last session.
fn tmux_command() -> Command {
    let mut cmd = Command::new("tmux");
    cmd.args(["-L", &format!("gpuboard-it-{}", std::process::id())]);
    cmd
}
use std::time::{Duration, Instant};

/// How long a wait for screen text may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(30);

/// A tmux session, killed when dropped.
pub struct Session(pub String);

impl Session {
    /// Starts `script` (a shell line) in a detached session `w` x `h` named after `tag`
    /// and this process.
    pub fn start(w: u16, h: u16, tag: &str, script: &str) -> Session {
        let name = format!("gpuboard-{tag}-{}", std::process::id());
        let (w, h) = (w.to_string(), h.to_string());
        let out = tmux_command()
            .args(["new-session", "-d", "-s", &name, "-x", &w, "-y", &h, script])
            .output()
            .expect("tmux is installed (scripts/test installs it)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Session(name)
    }

    /// The console with `args`, its HOME and XDG folders in `home`; the pane stays open
    /// after it exits so the last screen can be read.
    pub fn console(w: u16, h: u16, tag: &str, home: &Path, args: &str) -> Session {
        Session::console_as(w, h, tag, home, None, args)
    }

    /// As [`Session::console`], run as `user` (`USER`, which the console takes for the
    /// operator) where given.
    pub fn console_as(
        w: u16,
        h: u16,
        tag: &str,
        home: &Path,
        user: Option<&str>,
        args: &str,
    ) -> Session {
        let bin = env!("CARGO_BIN_EXE_gpuboard");
        let user = user.map_or_else(String::new, |u| format!("USER={u} "));
        let script = format!(
            "env {user}HOME={h} XDG_CONFIG_HOME={h}/config XDG_STATE_HOME={h}/state {bin} {args}; sleep 60",
            h = home.display()
        );
        Session::start(w, h, tag, &script)
    }

    /// Runs tmux with `args`; its stdout.
    pub fn tmux(&self, args: &[&str]) -> String {
        let out = tmux_command()
            .args(args)
            .output()
            .expect("tmux runs (scripts/test installs it)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Sends each key (a tmux key name such as `Enter`, `PageDown`, or literal text).
    pub fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.tmux(&["send-keys", "-t", &self.0, k]);
        }
    }

    /// The visible screen as text.
    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", &self.0])
    }

    /// The visible screen with its styles as SGR escape sequences (`capture-pane -e`).
    pub fn styled_screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-e", "-t", &self.0])
    }

    /// Resizes the window (the console redraws at the new size).
    pub fn resize(&self, w: u16, h: u16) {
        self.tmux(&[
            "resize-window",
            "-t",
            &self.0,
            "-x",
            &w.to_string(),
            "-y",
            &h.to_string(),
        ]);
    }

    /// Waits (bounded) until the screen shows `what`.
    pub fn wait_for(&self, what: &str) -> String {
        self.wait_until(&format!("`{what}`"), |s| s.contains(what))
    }

    /// Waits (bounded) until `ok` holds for the screen; `what` names it in the failure.
    /// The screen returned was the same in two captures 50 ms apart (or the last of a few
    /// tries, on a screen that keeps changing): a capture taken while the console is still
    /// drawing a frame can show its first lines and not the rest, which callers then read.
    pub fn wait_until(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let mut s = self.screen();
            if ok(&s) {
                for _ in 0..5 {
                    std::thread::sleep(Duration::from_millis(50));
                    let again = self.screen();
                    if !ok(&again) {
                        break;
                    }
                    if again == s {
                        return s;
                    }
                    s = again;
                }
                if ok(&s) {
                    return s;
                }
            }
            assert!(start.elapsed() < DEADLINE, "never saw {what}; screen:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends Esc and waits until the screen no longer shows `gone`: Esc followed at once
    /// by another key would read as Alt-key in tmux.
    pub fn escape_from(&self, gone: &str) -> String {
        self.keys(&["Escape"]);
        self.wait_until(&format!("`{gone}` gone after Esc"), |s| !s.contains(gone))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = tmux_command()
            .args(["kill-session", "-t", &self.0])
            .output();
    }
}
