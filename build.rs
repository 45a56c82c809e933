//! Stamps the binary with the commit it was built from and the build date, for
//! `gpuboard --version`. Without git (a source tarball, a vendored copy) both fall back to
//! `unknown`, never a failed build. `SOURCE_DATE_EPOCH` fixes the date for reproducible builds.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_string());
    // Rebuild the stamp when HEAD moves (a commit, a checkout) or the branch it names does.
    if let Some(p) = git(&["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={p}");
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        // A packed branch has no file of its own: watch packed-refs instead.
        for name in [branch.as_str(), "packed-refs"] {
            if let Some(p) = git(&["rev-parse", "--git-path", name])
                && std::path::Path::new(&p).exists()
            {
                println!("cargo:rerun-if-changed={p}");
            }
        }
    }
    let seconds = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs())
        });
    let date = seconds.map_or_else(|| "unknown".to_string(), civil_date);
    println!("cargo:rustc-env=GPUBOARD_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=GPUBOARD_BUILD_DATE={date}");
}

/// A git command's trimmed output, or `None` when git is missing or fails (no repository).
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// `YYYY-MM-DD` (UTC) of a Unix time, by the days-to-civil conversion of the proleptic
/// Gregorian calendar (no date crate for a build script).
fn civil_date(seconds: u64) -> String {
    let z = (seconds / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
