//! Shared by the integration tests: builds the fake NVML library once per test binary.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The gpuboard binary under test.
pub fn gpuboard() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_gpuboard"))
}

/// Builds `tests/fake-nvml` (a no-op when up to date) and returns the library's path.
pub fn fake_nvml_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let out_dir = gpuboard().parent().unwrap().to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let mut build = Command::new(cargo);
        build.args(["build", "--quiet", "-p", "fake-nvml", "--manifest-path"]);
        build.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
        if out_dir.ends_with("release") {
            build.arg("--release");
        }
        let status = build
            .status()
            .expect("run cargo to build the fake NVML library");
        assert!(status.success(), "building tests/fake-nvml failed");
        let lib = out_dir.join("libfake_nvml.so");
        assert!(lib.exists(), "{} missing after the build", lib.display());
        lib
    })
}

/// A directory holding the fake as `libnvidia-ml.so.1`, for `LD_LIBRARY_PATH`.
pub fn fake_driver_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(fake_nvml_library(), dir.path().join("libnvidia-ml.so.1")).unwrap();
    dir
}

/// The fixture file path inside `tests/fixtures`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}
