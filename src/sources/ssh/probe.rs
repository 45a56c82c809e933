//! What runs on an SSH host, and what its answer says: one POSIX `sh` script (the login
//! shell may be any, so the script is handed to `sh -c`) that says which of gpuboard's
//! readers the host has and then starts the best one in the same session (`@start WHICH`,
//! after which the output is that reader's), so a host costs one session after its
//! connection. Before nvidia-smi is streamed, both of its queries are printed once between
//! `@` marker lines: the first reading, and a command that hangs or fails says so within
//! the reading's limit. Reading the answer is pure.

use super::nvidia_smi::{APP_FIELDS, GPU_FIELDS};
use crate::wire::SnapshotVersion;

/// The best reader a session may start: those above it failed on this connection already.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Start {
    /// A running serve's delta watch (`gpuboard watch --stdio`).
    Serve,
    /// A gpuboard binary's NVML telemetry (`gpuboard telemetry --stdio`).
    Telemetry,
    /// nvidia-smi streamed with `-l`.
    NvidiaSmi,
}

impl Start {
    /// The word of its `@start` line.
    fn word(self) -> &'static str {
        match self {
            Start::Serve => "serve",
            Start::Telemetry => "telemetry",
            Start::NvidiaSmi => "smi",
        }
    }
}

/// Which reader a line of the script's output starts, when it is an `@start` line: the
/// lines after it are that reader's.
pub fn started(line: &str) -> Option<Start> {
    let word = line.strip_prefix("@start ")?;
    [Start::Serve, Start::Telemetry, Start::NvidiaSmi]
        .into_iter()
        .find(|s| s.word() == word.trim_end())
}

/// The script, for `sh -c`: it starts the best reader from `from` down, the serve's watch
/// resuming after `since`, the streams every `secs`. A running serve is found by the
/// `serve.lock` in the SSH user's data directory naming a live pid, and asked whether
/// actions can be relayed to it (`gpuboard relay --check`); `command -v` finds the
/// binaries. Without nvidia-smi and no reader of ours started, it exits 127.
pub fn script(from: Start, since: Option<SnapshotVersion>, secs: u64) -> String {
    let serve = if from <= Start::Serve {
        format!(
            r#"  {SERVE_PID}
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    echo "@serve $pid"
    echo "@relay $(gpuboard relay --check 2>&1 | head -n 1)"
    echo "@start serve"
    {}
  fi
"#,
            super::serve_watch::remote_command(since)
        )
    } else {
        String::new()
    };
    let ours = if from <= Start::Telemetry {
        format!(
            r#"if command -v gpuboard >/dev/null 2>&1; then
  echo "@gpuboard $(gpuboard --version 2>/dev/null | head -n 1)"
{serve}  echo "@start telemetry"
  exec {}
fi
"#,
            super::telemetry::remote_command(secs)
        )
    } else {
        String::new()
    };
    format!(
        r#"echo "@host $(hostname 2>/dev/null)"
if command -v nvidia-smi >/dev/null 2>&1; then smi=1; else smi=; echo "@no-nvidia-smi"; fi
{ours}[ -n "$smi" ] || exit 127
echo "@gpus"
nvidia-smi --query-gpu={GPU_FIELDS} --format=csv,noheader,nounits 2>&1
echo "@gpus-exit $?"
echo "@apps"
nvidia-smi --query-compute-apps={APP_FIELDS} --format=csv,noheader,nounits 2>&1
echo "@apps-exit $?"
echo "@start smi"
{}"#,
        super::smi_stream::script(secs)
    )
}

/// The lines that set `pid` to the pid the SSH user's `serve.lock` names.
const SERVE_PID: &str = r#"lock="${GPUBOARD_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/gpuboard}/serve.lock"
  pid=$(sed -n 's/.*"pid"[^0-9]*\([0-9][0-9]*\).*/\1/p' "$lock" 2>/dev/null | head -n 1)"#;

/// The remote command asking only whether a serve runs now (`@serve PID` when one does):
/// what a host read without one is asked every while.
pub fn serve_command() -> String {
    let script = format!(
        r#"command -v gpuboard >/dev/null 2>&1 || exit 0
  {SERVE_PID}
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo "@serve $pid"; fi
"#
    );
    format!("sh -c {}", quote(&script))
}

/// The remote command line: the script quoted for the remote shell.
pub fn remote_command(from: Start, since: Option<SnapshotVersion>, secs: u64) -> String {
    format!("sh -c {}", quote(&script(from, since, secs)))
}

/// `s` in single quotes for a POSIX shell (csh and fish read it the same way).
pub(super) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Which of gpuboard's readers a host has, best first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reader {
    /// A running `gpuboard serve` (its pid).
    Serve(u32),
    /// A `gpuboard` binary (its `--version` line).
    Binary(String),
    /// Nothing of ours: nvidia-smi only.
    NvidiaSmi,
}

/// What the script printed, in its parts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Probed {
    /// The script ran on the host (its first line came).
    pub reached: bool,
    /// The host's own name (`hostname`), when it said.
    pub hostname: Option<String>,
    /// `gpuboard --version` there, when the binary is on its PATH.
    pub gpuboard: Option<String>,
    /// The pid of a serve running there.
    pub serve: Option<u32>,
    /// What `gpuboard relay --check` said there (its first line), with a serve.
    pub relay: Option<String>,
    /// The script found no nvidia-smi on the PATH.
    pub no_nvidia_smi: bool,
    /// The `--query-gpu` lines, and that query's exit status.
    pub gpus: Option<(String, Option<i32>)>,
    /// The `--query-compute-apps` lines, and that query's exit status.
    pub apps: Option<(String, Option<i32>)>,
    /// The first line printed, whatever it was (for an answer that is not the script's).
    pub first_line: Option<String>,
}

impl Probed {
    /// The best reader the host has.
    pub fn reader(&self) -> Reader {
        match (&self.serve, &self.gpuboard) {
            (Some(pid), _) => Reader::Serve(*pid),
            (None, Some(v)) => Reader::Binary(v.clone()),
            (None, None) => Reader::NvidiaSmi,
        }
    }
}

/// Reads the script's output: marker lines split it into its sections.
pub fn read(stdout: &str) -> Probed {
    let mut a = Probed::default();
    // The section the lines go to: 1 gpus, 2 apps, 0 none.
    let mut section = 0;
    let mut gpus = String::new();
    let mut apps = String::new();
    let status = |rest: &str| rest.trim().parse::<i32>().ok();
    a.first_line = stdout
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string);
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("@host") {
            a.reached = true;
            a.hostname = Some(rest.trim().to_string()).filter(|h| !h.is_empty());
        } else if let Some(rest) = line.strip_prefix("@gpuboard") {
            a.gpuboard = Some(rest.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("@serve ") {
            a.serve = rest.trim().parse().ok();
        } else if let Some(rest) = line.strip_prefix("@relay") {
            a.relay = Some(rest.trim().to_string());
        } else if line == "@no-nvidia-smi" {
            a.no_nvidia_smi = true;
        } else if line == "@gpus" {
            section = 1;
        } else if line == "@apps" {
            section = 2;
        } else if let Some(rest) = line.strip_prefix("@gpus-exit") {
            a.gpus = Some((std::mem::take(&mut gpus), status(rest)));
            section = 0;
        } else if let Some(rest) = line.strip_prefix("@apps-exit") {
            a.apps = Some((std::mem::take(&mut apps), status(rest)));
            section = 0;
        } else if section == 1 {
            gpus.push_str(line);
            gpus.push('\n');
        } else if section == 2 {
            apps.push_str(line);
            apps.push('\n');
        }
    }
    // A section cut off before its exit line is still what was read of it.
    if section == 1 {
        a.gpus = Some((gpus, None));
    } else if section == 2 {
        a.apps = Some((apps, None));
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_splits_into_its_sections_and_names_the_best_reader() {
        let a = read(
            "@host gpu-01\n@gpuboard gpuboard 0.9.0\n@serve 4321\n@relay ok ann@gpu-01\n@gpus\n0, GPU-a, T4, 1, 1, 1, 1, 1\n@gpus-exit 0\n@apps\n@apps-exit 6\n",
        );
        assert_eq!(a.hostname.as_deref(), Some("gpu-01"));
        assert_eq!(a.reader(), Reader::Serve(4321));
        assert_eq!(a.relay.as_deref(), Some("ok ann@gpu-01"));
        assert_eq!(
            a.gpus,
            Some(("0, GPU-a, T4, 1, 1, 1, 1, 1\n".into(), Some(0)))
        );
        assert_eq!(a.apps, Some((String::new(), Some(6))));
        let b = read("@host\n@no-nvidia-smi\n");
        assert!(b.no_nvidia_smi && b.reached);
        assert_eq!(b.hostname, None);
        assert_eq!(b.reader(), Reader::NvidiaSmi);
        let c = read("@gpuboard gpuboard 0.9.0\n@gpus\n0, cut");
        assert_eq!(c.reader(), Reader::Binary("gpuboard 0.9.0".into()));
        assert_eq!(c.gpus, Some(("0, cut\n".into(), None)));
    }

    #[test]
    fn the_script_survives_single_quoting() {
        let q = quote("a 'b' c");
        assert_eq!(q, r"'a '\''b'\'' c'");
        assert!(remote_command(Start::Serve, None, 2).starts_with("sh -c '"));
        assert!(
            script(Start::NvidiaSmi, None, 2).contains("--query-gpu=index,uuid,name,memory.total")
        );
        let serve = serve_command();
        assert!(
            serve.starts_with("sh -c '") && serve.contains("serve.lock"),
            "{serve}"
        );
        assert!(
            !serve.contains("nvidia-smi"),
            "only the serve is asked: {serve}"
        );
    }

    #[test]
    fn a_start_line_names_its_reader() {
        assert_eq!(started("@start serve"), Some(Start::Serve));
        assert_eq!(started("@start telemetry"), Some(Start::Telemetry));
        assert_eq!(started("@start smi"), Some(Start::NvidiaSmi));
        assert_eq!(started("@start nothing"), None);
        assert_eq!(started("@serve 12"), None);
    }

    /// What the script prints under `sh` on a host whose PATH is `bin` (the system's tools
    /// after it), from `from` down: its findings, and the `@start` line with the reader's
    /// first line after it.
    fn ran(bin: &std::path::Path, data: &std::path::Path, from: Start) -> String {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(script(from, None, 1))
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("GPUBOARD_DATA_DIR", data)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    }

    fn write_exec(path: &std::path::Path, text: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn the_script_starts_the_best_reader_it_may_in_the_same_session() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        // Without gpuboard or nvidia-smi: nothing starts.
        let none = ran(&bin, &data, Start::Serve);
        assert!(
            none.starts_with("@host ") && none.contains("@no-nvidia-smi\n"),
            "{none}"
        );
        assert!(!none.contains("@start"), "{none}");
        // nvidia-smi only (one that prints its last argument and ends, as without -l):
        // the first reading between the markers, then its stream.
        write_exec(
            &bin.join("nvidia-smi"),
            "#!/bin/sh\nfor a; do :; done; echo \"$a\"\n",
        );
        let smi = ran(&bin, &data, Start::Serve);
        let a = read(&smi[..smi.find("@start").unwrap()]);
        assert_eq!(
            a.gpus,
            Some(("--format=csv,noheader,nounits\n".into(), Some(0))),
            "{smi}"
        );
        let stream = &smi[smi.find("@start smi\n").unwrap()..];
        assert!(
            stream.contains("\ng 1\n") && stream.contains("\ng @exit 0\n"),
            "{smi}"
        );
        // A gpuboard binary: its telemetry starts, exec'd in place of the script.
        write_exec(
            &bin.join("gpuboard"),
            "#!/bin/sh\ncase \"$1\" in --version) echo 'gpuboard 9.9.9';; relay) echo 'ok u@h';; \
             *) echo \"ran $*\";; esac\n",
        );
        let ours = ran(&bin, &data, Start::Serve);
        assert!(
            ours.ends_with("@start telemetry\nran telemetry --stdio --interval 1\n"),
            "{ours}"
        );
        assert_eq!(
            read(&ours).reader(),
            Reader::Binary("gpuboard 9.9.9".into())
        );
        // A serve running (this test's own pid is alive): its watch starts, after the relay
        // check; from the telemetry down, the serve is not looked for.
        std::fs::write(
            data.join("serve.lock"),
            format!("{{\"pid\": {}}}", std::process::id()),
        )
        .unwrap();
        let serve = ran(&bin, &data, Start::Serve);
        assert!(
            serve.contains("@relay ok u@h\n@start serve\nran watch --stdio"),
            "{serve}"
        );
        assert_eq!(read(&serve).reader(), Reader::Serve(std::process::id()));
        let lower = ran(&bin, &data, Start::Telemetry);
        assert!(
            !lower.contains("@serve") && lower.contains("@start telemetry"),
            "{lower}"
        );
        let lowest = ran(&bin, &data, Start::NvidiaSmi);
        assert!(
            !lowest.contains("@gpuboard") && lowest.contains("@start smi"),
            "{lowest}"
        );
    }
}
