//! What `gpuboard --version` says: the crate version, the commit and the build date that
//! build.rs stamps (`unknown` when built without git).

/// `0.1.0 (commit 1a2b3c4d5e6f, built 2026-11-25)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("GPUBOARD_GIT_COMMIT"),
    ", built ",
    env!("GPUBOARD_BUILD_DATE"),
    ")"
);
