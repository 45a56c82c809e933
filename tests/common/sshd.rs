//! A real OpenSSH server on 127.0.0.1 for the SSH source's tests: Debian's `sshd` run in
//! the foreground as the current user's login, on a free port, with a host key and user
//! keys made for the test, and an ssh config (`-F`) whose aliases all reach it:
//!
//! - `gpu-fake`: a fake `nvidia-smi` on its PATH printing fixture CSV (one line garbled),
//!   every N seconds when given `-l N`, as the real one does;
//! - `gpu-ours`: the same without the garbled line, and a fake `gpuboard` binary beside it
//!   (it only prints its version);
//! - `gpu-serve`: this build's `gpuboard` on its PATH and a serve of it running (the test
//!   starts it on `Sshd::serve_dir`), no nvidia-smi;
//! - `gpu-serve-ro`: the same serve, found through a `serve.lock` in a data directory of
//!   its own (`Sshd::read_only_dir`) that holds no operator token: its SSH user cannot act
//!   (start the serve with `--open-reads`, so that user can still watch it);
//! - `gpu-late`: this build's `gpuboard` and the fake nvidia-smi, no serve until the test
//!   starts one on `Sshd::late_dir`;
//! - `gpu-nvml`: this build's `gpuboard` and no serve, NVML being the fake of
//!   `tests/fake-nvml` (fixture `mixed.toml`), and the fake nvidia-smi;
//! - `gpu-stall`: an nvidia-smi that answers once, but with `-l` prints one period and
//!   then nothing (for 20 s);
//! - `gpu-nosmi`: no nvidia-smi on its PATH;
//! - `gpu-hang`: an nvidia-smi that never finishes;
//! - `gpu-refused`: a key the server does not accept;
//! - `gpu-badkey`: a host key the client does not know;
//! - `gpu-down`: a port nothing listens on.
//!
//! Each key's PATH is set by its `authorized_keys` line (`environment=`). Stopped by pid
//! when dropped. Installed by scripts/install-peers (`openssh-server`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Stopper, free_port};

/// Where Debian puts the server.
pub const SSHD: &str = "/usr/sbin/sshd";

/// The fixture `--query-gpu` lines: two GPUs and a line that is not one.
pub const GPU_LINES: &str = "0, GPU-5f1c0a52-0000-4000-8000-000000000001, NVIDIA A100-SXM4-40GB, 40960, 1234, 37, 71.50, 45\n\
1, GPU-5f1c0a52-0000-4000-8000-000000000002, NVIDIA A100-SXM4-40GB, 40960, [N/A], [N/A], [N/A], 44\n\
this is not a GPU line\n";
/// The fixture `--query-compute-apps` line.
pub const APP_LINES: &str =
    "GPU-5f1c0a52-0000-4000-8000-000000000001, 4242, 1024, python train.py\n";

/// A running server and the client files that reach it.
pub struct Sshd {
    process: Stopper,
    /// The first port it listens on (it listens on one per alias).
    pub port: u16,
    /// Keys, scripts, configs and the control-socket directory.
    pub dir: tempfile::TempDir,
}

fn write_exec(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn keygen(path: &Path) {
    let ok = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "gpuboard-test", "-f"])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "ssh-keygen failed for {}", path.display());
}

/// A bin directory with the tools the probe script uses, and `extra` scripts.
fn bin(dir: &Path, name: &str, extra: &[(&str, String)]) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    for tool in ["sh", "hostname", "sed", "head", "sleep", "cat"] {
        let found = ["/bin", "/usr/bin"]
            .iter()
            .map(|b| Path::new(b).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("no {tool} in /bin or /usr/bin"));
        std::os::unix::fs::symlink(found, d.join(tool)).unwrap();
    }
    for (file, text) in extra {
        write_exec(&d.join(file), text);
    }
    d
}

/// A fake nvidia-smi printing the fixture lines (without the garbled one when `clean`),
/// once, or every N seconds with `-l N`; with `stall`, one period and then nothing.
fn fake_smi(clean: bool, stall: bool) -> String {
    let gpus = if clean {
        GPU_LINES.replace("this is not a GPU line\n", "")
    } else {
        GPU_LINES.to_string()
    };
    let then = if stall {
        "sleep 20; exit 0"
    } else {
        "sleep \"$loop\""
    };
    format!(
        "#!/bin/sh\nloop=\nq=\nprev=\nfor a in \"$@\"; do\n  [ \"$prev\" = -l ] && loop=$a\n  \
         case \"$a\" in --query-gpu=*) q=gpu;; --query-compute-apps=*) q=apps;; esac\n  \
         prev=$a\ndone\nwhile :; do\n  case \"$q\" in\n  gpu) cat <<'EOF'\n{gpus}EOF\n;;\n  \
         apps) cat <<'EOF'\n{APP_LINES}EOF\n;;\n  esac\n  [ -n \"$loop\" ] || exit 0\n  {then}\ndone\n"
    )
    .replace("cat <<", "/bin/cat <<")
}

/// The host key, a key per alias, a bin directory per behaviour, and `authorized_keys`
/// giving each accepted key its PATH.
fn keys_and_paths(d: &Path) {
    keygen(&d.join("host_key"));
    for k in [
        "fake", "ours", "nosmi", "hang", "refused", "serve", "servero", "late", "nvml", "stall",
    ] {
        keygen(&d.join(format!("key_{k}")));
    }
    let fake = bin(d, "bin-fake", &[("nvidia-smi", fake_smi(false, false))]);
    let ours = bin(
        d,
        "bin-ours",
        &[
            ("nvidia-smi", fake_smi(true, false)),
            (
                "gpuboard",
                "#!/bin/sh\necho 'gpuboard 0.0.0-test'\n".to_string(),
            ),
        ],
    );
    let nosmi = bin(d, "bin-nosmi", &[]);
    let hang = bin(
        d,
        "bin-hang",
        &[(
            "nvidia-smi",
            "#!/bin/sh\nwhile :; do echo waiting; sleep 1; done\n".to_string(),
        )],
    );
    let ours_binary = |name: &str, smi: bool| {
        let b = bin(
            d,
            name,
            &if smi {
                vec![("nvidia-smi", fake_smi(true, false))]
            } else {
                Vec::new()
            },
        );
        std::os::unix::fs::symlink(crate::common::gpuboard(), b.join("gpuboard")).unwrap();
        b
    };
    let serve = ours_binary("bin-serve", false);
    let nvml = ours_binary("bin-nvml", true);
    let late = ours_binary("bin-late", true);
    let late_env = format!(
        ",environment=\"GPUBOARD_DATA_DIR={}\"",
        d.join("late-data").display()
    );
    let stall = bin(d, "bin-stall", &[("nvidia-smi", fake_smi(true, true))]);
    let serve_env = format!(
        ",environment=\"GPUBOARD_DATA_DIR={}\"",
        d.join("serve-data").display()
    );
    let ro = d.join("ro-data");
    std::fs::create_dir_all(&ro).unwrap();
    std::os::unix::fs::symlink(
        d.join("serve-data").join("serve.lock"),
        ro.join("serve.lock"),
    )
    .unwrap();
    let ro_env = format!(",environment=\"GPUBOARD_DATA_DIR={}\"", ro.display());
    let nvml_env = format!(
        ",environment=\"GPUBOARD_NVML_LIBRARY={}\",environment=\"GPUBOARD_FAKE_NVML_FIXTURE={}\"",
        crate::common::fake_nvml_library().display(),
        crate::common::fixture("mixed.toml").display()
    );
    let mut authorized = String::new();
    for (k, path, env) in [
        ("fake", &fake, ""),
        ("ours", &ours, ""),
        ("nosmi", &nosmi, ""),
        ("hang", &hang, ""),
        ("serve", &serve, serve_env.as_str()),
        ("servero", &serve, ro_env.as_str()),
        ("late", &late, late_env.as_str()),
        ("nvml", &nvml, nvml_env.as_str()),
        ("stall", &stall, ""),
    ] {
        let public = std::fs::read_to_string(d.join(format!("key_{k}.pub"))).unwrap();
        let _ = write!(
            authorized,
            "environment=\"PATH={}\"{env} {public}",
            path.display()
        );
    }
    std::fs::write(d.join("authorized_keys"), authorized).unwrap();
}

/// The client's ssh config: each alias with its key and port, all reaching the server.
fn client_config(d: &Path, aliases: &[&str], ports: &[u16]) -> String {
    let user = gpuboard::identity::LocalUser::current().user;
    let port_of = |name: &str| ports[aliases.iter().position(|a| *a == name).unwrap()];
    let alias = |name: &str, key: &str, extra: &str| {
        format!(
            "Host {name}\n  IdentityFile {}/key_{key}\n  Port {}\n{extra}",
            d.display(),
            port_of(name)
        )
    };
    [
        alias("gpu-fake", "fake", ""),
        alias("gpu-ours", "ours", ""),
        alias("gpu-nosmi", "nosmi", ""),
        alias("gpu-hang", "hang", ""),
        alias("gpu-refused", "refused", ""),
        alias("gpu-serve", "serve", ""),
        alias("gpu-serve-ro", "servero", ""),
        alias("gpu-late", "late", ""),
        alias("gpu-nvml", "nvml", ""),
        alias("gpu-stall", "stall", ""),
        alias(
            "gpu-badkey",
            "fake",
            &format!("  UserKnownHostsFile {}/empty_known_hosts\n", d.display()),
        ),
        format!(
            "Host gpu-down\n  IdentityFile {}/key_fake\n  Port {}\n",
            d.display(),
            free_port()
        ),
        format!(
            "Host *\n  HostName 127.0.0.1\n  User {user}\n  IdentitiesOnly yes\n  \
             IdentityAgent none\n  HostKeyAlias gpuboard-test-sshd\n  CheckHostIP no\n  \
             UserKnownHostsFile {d}/known_hosts\n  GlobalKnownHostsFile /dev/null\n  \
             StrictHostKeyChecking yes\n",
            d = d.display()
        ),
    ]
    .join("")
}

impl Sshd {
    /// Whether the server is installed.
    pub fn installed() -> bool {
        Path::new(SSHD).is_file()
    }

    /// Makes the keys, scripts and configs and starts the server; waits for its port.
    pub fn start() -> Sshd {
        assert!(
            Sshd::installed(),
            "no {SSHD}: run scripts/install-peers (it installs openssh-server), or \
             GPUBOARD_SKIP_PEERS=ssh to skip this test"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            // Run as root, sshd needs its privilege-separation directory.
            std::fs::create_dir_all("/run/sshd").unwrap();
        }
        keys_and_paths(d);
        // One port per alias: connections are shared by host, port and user (ssh's `%C`),
        // and these aliases differ only by key.
        let aliases = [
            "gpu-fake",
            "gpu-ours",
            "gpu-nosmi",
            "gpu-hang",
            "gpu-refused",
            "gpu-badkey",
            "gpu-serve",
            "gpu-serve-ro",
            "gpu-late",
            "gpu-nvml",
            "gpu-stall",
        ];
        let ports: Vec<u16> = aliases.iter().map(|_| free_port()).collect();
        let port_lines = ports.iter().fold(String::new(), |mut all, p| {
            let _ = writeln!(all, "Port {p}");
            all
        });
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "ListenAddress 127.0.0.1\n{port_lines}HostKey {d}/host_key\n\
                 AuthorizedKeysFile {d}/authorized_keys\nPermitUserEnvironment PATH,GPUBOARD_*\n\
                 StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 UsePAM no\nPermitRootLogin prohibit-password\nPidFile none\n\
                 LogLevel ERROR\n",
                d = d.display()
            ),
        )
        .unwrap();
        // Every port's host key under one name (HostKeyAlias).
        let host_pub = std::fs::read_to_string(d.join("host_key.pub")).unwrap();
        let key_type_and_key: Vec<&str> = host_pub.split_whitespace().take(2).collect();
        std::fs::write(
            d.join("known_hosts"),
            format!("gpuboard-test-sshd {}\n", key_type_and_key.join(" ")),
        )
        .unwrap();
        std::fs::write(d.join("empty_known_hosts"), "").unwrap();
        let config = client_config(d, &aliases, &ports);
        std::fs::write(d.join("ssh_config"), config).unwrap();
        let port = ports[0];
        let child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let process = Stopper {
            child,
            name: "sshd",
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "sshd did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Sshd { process, port, dir }
    }

    /// The client's ssh config (`ssh -F`).
    pub fn ssh_config(&self) -> PathBuf {
        self.dir.path().join("ssh_config")
    }

    /// The data directory `gpu-serve`'s `gpuboard` looks for its serve in.
    pub fn serve_dir(&self) -> PathBuf {
        self.dir.path().join("serve-data")
    }

    /// The data directory of `gpu-serve-ro`: the serve's `serve.lock`, no token.
    pub fn read_only_dir(&self) -> PathBuf {
        self.dir.path().join("ro-data")
    }

    /// The data directory `gpu-late`'s `gpuboard` looks for its serve in.
    pub fn late_dir(&self) -> PathBuf {
        self.dir.path().join("late-data")
    }

    /// A private directory for control sockets (short: a socket path has a length limit).
    pub fn control_dir(&self) -> PathBuf {
        self.dir.path().join("ctl")
    }
}
