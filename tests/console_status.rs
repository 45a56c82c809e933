//! `gpuboard status` reads the console flags written before the subcommand too (issue
//! 16: `gpuboard --demo status --dump-screen gpus` used to ignore `--demo`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

fn dump(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn demo_before_status_is_honoured() {
    // (flags) -> the demo fleet's node names are on screen either way.
    for args in [
        &[
            "--demo",
            "status",
            "--dump-screen",
            "gpus",
            "--size",
            "80x24",
        ][..],
        &[
            "status",
            "--demo",
            "--dump-screen",
            "gpus",
            "--size",
            "80x24",
        ][..],
    ] {
        let screen = dump(args);
        assert!(screen.contains("dgx-a100"), "{args:?}:\n{screen}");
        assert!(!screen.contains("GPUs (0)"), "{args:?}:\n{screen}");
    }
}
