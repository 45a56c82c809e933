//! `gpuboard serve` under systemd: the unit file shipped in assets/ (printed by
//! `serve --print-unit`), readiness and watchdog pings over `NOTIFY_SOCKET`, and log lines
//! shaped for the journal. Outside systemd (no `NOTIFY_SOCKET`) every call here is a no-op.

use std::path::Path;
use std::time::Duration;

use sd_notify::NotifyState;

/// The unit as shipped: `assets/gpuboard.service`.
pub const UNIT: &str = include_str!("../../assets/gpuboard.service");

/// Where the shipped unit expects the binary.
const INSTALLED_BINARY: &str = "/usr/local/bin/gpuboard";

/// The unit with `ExecStart` naming `binary` (the running executable for
/// `--print-unit`), so it works wherever gpuboard was installed.
pub fn unit_for(binary: &Path) -> String {
    UNIT.replace(
        &format!("ExecStart={INSTALLED_BINARY} "),
        &format!("ExecStart={} ", binary.display()),
    )
}

/// Whether stderr goes to the journal (systemd sets `JOURNAL_STREAM` for a unit whose
/// output it collects): then log lines carry no timestamps or colours of their own.
pub fn under_journald() -> bool {
    std::env::var_os("JOURNAL_STREAM").is_some_and(|v| !v.is_empty())
}

/// Tells systemd the endpoint is ready (it listens on `address`). A failed notification is
/// logged, never fatal: systemd then times the start out and says so itself.
pub fn notify_ready(address: &str) {
    let status = format!("listening on {address}");
    if let Err(e) = sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(&status)]) {
        tracing::warn!("cannot tell systemd the endpoint is ready: {e}");
    }
}

/// Tells systemd the endpoint is shutting down.
pub fn notify_stopping() {
    let _ = sd_notify::notify(&[NotifyState::Stopping]);
}

/// When the unit sets `WatchdogSec`, pings systemd at half that interval for as long as
/// the runtime turns; a wedged runtime stops the pings and systemd restarts the service.
pub fn spawn_watchdog() -> Option<tokio::task::JoinHandle<()>> {
    let interval = sd_notify::watchdog_enabled()?;
    let every = (interval / 2).max(Duration::from_millis(10));
    Some(tokio::spawn(async move {
        let mut ticker = tokio::time::interval(every);
        loop {
            ticker.tick().await;
            if let Err(e) = sd_notify::notify(&[NotifyState::Watchdog]) {
                tracing::warn!("cannot ping the systemd watchdog: {e}");
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_printed_unit_names_the_running_binary() {
        let unit = unit_for(Path::new("/opt/gpuboard/bin/gpuboard"));
        assert!(
            unit.contains(
                "ExecStart=/opt/gpuboard/bin/gpuboard serve --data-dir /var/lib/gpuboard"
            ),
            "{unit}"
        );
        assert!(!unit.contains(INSTALLED_BINARY), "{unit}");
        assert!(UNIT.contains(&format!("ExecStart={INSTALLED_BINARY} serve")));
    }
}
