//! A walk through the README's shell blocks, as a newcomer would type them after the two
//! set-up commands: every `gpuboard` line runs (the console in tmux: it must start, draw
//! and quit on `q`), and a line this walk does not know fails the test, so the README and
//! the walk stay together. The endpoint the README starts on the default address runs on a
//! free port instead (a `gpuboard serve` already on 7420 must not fail the walk), with the
//! data directory, home and state in a temporary directory.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::format_push_string
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `sh` blocks' lines, comments and blank lines dropped.
fn readme_lines() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut out = Vec::new();
    let mut in_sh = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("```") {
            in_sh = !in_sh && rest.trim() == "sh";
            continue;
        }
        if in_sh {
            let cmd = line.split(" #").next().unwrap_or("").trim();
            if !cmd.is_empty() {
                out.push(cmd.to_string());
            }
        }
    }
    out
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Walk {
    tmp: tempfile::TempDir,
    serve: Option<Child>,
    /// Where the walk's `gpuboard serve` listens, in place of the default 127.0.0.1:7420.
    url: String,
}

impl Walk {
    fn command(&self, args: &[String]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gpuboard"));
        c.args(args)
            .current_dir(root())
            .env("GPUBOARD_DATA_DIR", self.tmp.path().join("data"))
            .env("HOME", self.tmp.path())
            .env("XDG_STATE_HOME", self.tmp.path().join("state"))
            .env("XDG_CONFIG_HOME", self.tmp.path().join("config"))
            .env_remove("GPUBOARD_TOKEN");
        // The client commands find the walk's endpoint as they would the default one.
        if matches!(
            args.first().map(String::as_str),
            Some("claim" | "run" | "ls")
        ) {
            c.env("GPUBOARD_ENDPOINT", &self.url);
        } else {
            c.env_remove("GPUBOARD_ENDPOINT");
        }
        c
    }

    /// Runs to the end; returns stdout, panicking with stderr on failure.
    fn run(&self, line: &str, args: &[String]) -> String {
        let out = self.command(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "`{line}` failed: {err}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `gpuboard serve ...`: in the background until it says where it listens.
    fn serve(&mut self, line: &str, args: &[String]) {
        let mut child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        if first.contains("listening on") {
            assert!(self.serve.is_none(), "two endpoints on the default address");
            self.serve = Some(child);
            // Simulated telemetry shows, and says it is simulated.
            if args.iter().any(|a| a.starts_with("--simulate-telemetry")) {
                let status = ["status", "--once", "--json"].map(str::to_string);
                let out = self.run(line, &status);
                assert!(out.contains("SIMULATED telemetry"), "`{line}`: {out}");
                assert!(out.contains("\"simulated\""), "`{line}`: {out}");
            }
            return;
        }
        // Without a GPU, `gpuboard serve` must refuse and say what to do instead.
        let status = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(
            !status.success() && err.contains("no GPUs to serve") && err.contains("--inventory"),
            "`{line}`: neither served nor said why: {first}{err}"
        );
    }

    /// An interactive console line: in tmux it must draw its title, then quit on `q`.
    fn console(&self, line: &str, args: &[String]) {
        let session = format!("readme-walk-{}", std::process::id());
        let socket = self.tmp.path().join("tmux.sock");
        let tmux = |a: &[&str]| {
            Command::new("tmux")
                .arg("-S")
                .arg(&socket)
                .args(a)
                .output()
                .expect("tmux runs (scripts/test installs it)")
        };
        let mut shell = format!(
            "cd {} && GPUBOARD_DATA_DIR={} HOME={} XDG_STATE_HOME={} {}",
            root().display(),
            self.tmp.path().join("data").display(),
            self.tmp.path().display(),
            self.tmp.path().join("state").display(),
            Path::new(env!("CARGO_BIN_EXE_gpuboard")).display()
        );
        for a in args {
            shell.push(' ');
            shell.push_str(a);
        }
        let done = self.tmp.path().join("console.done");
        let _ = std::fs::remove_file(&done);
        shell.push_str(&format!("; echo $? > {}", done.display()));
        let out = tmux(&[
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "120",
            "-y",
            "40",
            &shell,
        ]);
        assert!(out.status.success(), "tmux: {out:?}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen =
                String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", &session]).stdout)
                    .into_owned();
            if screen.contains("gpuboard") && screen.contains("Overview") {
                break;
            }
            assert!(
                Instant::now() < deadline && !done.exists(),
                "`{line}` did not draw the console:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        tmux(&["send-keys", "-t", &session, "q"]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done.exists() {
            assert!(Instant::now() < deadline, "`{line}` did not quit on q");
            std::thread::sleep(Duration::from_millis(100));
        }
        let code = std::fs::read_to_string(&done).unwrap();
        let _ = tmux(&["kill-server"]);
        assert_eq!(code.trim(), "0", "`{line}` exited {code}");
    }
}

impl Drop for Walk {
    fn drop(&mut self) {
        if let Some(mut c) = self.serve.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn every_readme_command_works_as_written() {
    let mut walk = Walk {
        tmp: tempfile::tempdir().unwrap(),
        serve: None,
        url: format!("http://127.0.0.1:{}", crate::common::free_port()),
    };
    let mut unknown = Vec::new();
    let mut ran = 0;
    for line in readme_lines() {
        // `NAME=value` before a command only sets its environment.
        let words: Vec<String> = line
            .split_whitespace()
            .skip_while(|w| {
                w.split_once('=').is_some_and(|(k, _)| {
                    !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                })
            })
            .map(str::to_string)
            .collect();
        match words.first().map(String::as_str) {
            // The set-up commands themselves, and the tools for benchmarks.
            Some("cargo" | "./scripts/test") => continue,
            Some("scripts/measure-fleet") => {
                let help = Command::new(root().join("scripts/measure-fleet"))
                    .arg("--help")
                    .output()
                    .unwrap();
                assert!(help.status.success(), "`scripts/measure-fleet --help`");
                continue;
            }
            Some("gpuboard") => {}
            _ => {
                unknown.push(line);
                continue;
            }
        }
        let mut args: Vec<String> = words[1..].to_vec();
        // Placeholders in the README: `URL` is the endpoint started above, `...` any
        // other flags (the demo here).
        for a in &mut args {
            if a == "URL" || a == "http://127.0.0.1:7420" {
                a.clone_from(&walk.url);
            }
        }
        if args.first().is_some_and(|a| a == "serve") && !args.iter().any(|a| a == "--listen") {
            args.push("--listen".to_string());
            args.push(walk.url.trim_start_matches("http://").to_string());
        }
        if args.last().is_some_and(|a| a == "...") {
            args.pop();
            args.push("--demo".to_string());
        }
        match args.first().map(String::as_str) {
            Some("serve") => walk.serve(&line, &args),
            Some("run") => {
                // A training script stands for any command: run `true` in its place.
                let split = args.iter().position(|a| a == "--").unwrap();
                args.truncate(split + 1);
                args.push("true".to_string());
                walk.run(&line, &args);
            }
            Some("claim" | "ls" | "simulate" | "status") => {
                let out = walk.run(&line, &args);
                if args.iter().any(|a| a == "--json") {
                    serde_json::from_str::<serde_json::Value>(&out)
                        .unwrap_or_else(|e| panic!("`{line}` printed no JSON: {e}\n{out}"));
                }
            }
            None => walk.console(&line, &args),
            Some(a) if a.starts_with("--") => walk.console(&line, &args),
            Some(_) => {
                unknown.push(line);
                continue;
            }
        }
        ran += 1;
        eprintln!("readme walk: ok: {line}");
    }
    assert!(
        unknown.is_empty(),
        "README commands this walk does not know how to check: {unknown:?}"
    );
    assert!(ran >= 12, "only {ran} README commands found");
}
