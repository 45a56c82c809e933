//! What runs on an SSH host, and what its answer says: one POSIX `sh` script (the login
//! shell may be any, so the script is handed to `sh -c`) that says which of gpuboard's
//! readers the host has, then prints both nvidia-smi queries between `@` marker lines.
//! Reading the answer is pure.

use super::nvidia_smi::{APP_FIELDS, GPU_FIELDS};

/// The script, for `sh -c`. A running serve is found by the `serve.lock` in the SSH
/// user's data directory naming a live pid, and asked whether actions can be relayed to
/// it (`gpuboard relay --check`); `command -v` finds the binaries.
pub fn script() -> String {
    format!(
        r#"echo "@host $(hostname 2>/dev/null)"
if command -v gpuboard >/dev/null 2>&1; then
  echo "@gpuboard $(gpuboard --version 2>/dev/null | head -n 1)"
  {SERVE_PID}
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    echo "@serve $pid"
    echo "@relay $(gpuboard relay --check 2>&1 | head -n 1)"
  fi
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then echo "@no-nvidia-smi"; exit 127; fi
echo "@gpus"
nvidia-smi --query-gpu={GPU_FIELDS} --format=csv,noheader,nounits 2>&1
echo "@gpus-exit $?"
echo "@apps"
nvidia-smi --query-compute-apps={APP_FIELDS} --format=csv,noheader,nounits 2>&1
echo "@apps-exit $?"
"#
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
pub fn remote_command() -> String {
    format!("sh -c {}", quote(&script()))
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
        assert!(remote_command().starts_with("sh -c '"));
        assert!(script().contains("--query-gpu=index,uuid,name,memory.total"));
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
}
