//! Logs go to a file (never the screen), and each line is also sent to the console's
//! Events view.

use std::fmt::Write as _;
use std::path::Path;

use tokio::sync::mpsc::UnboundedSender;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use super::msg::Msg;

/// Sends each log event, formatted on one line, to the console.
struct ToConsole {
    tx: UnboundedSender<Msg>,
}

#[derive(Default)]
struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?} ");
        } else {
            let _ = write!(self.0, "{}={value:?} ", field.name());
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value} ");
        } else {
            let _ = write!(self.0, "{}={value} ", field.name());
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for ToConsole {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut line = Line(format!("{} ", event.metadata().level()));
        event.record(&mut line);
        // The console may be gone already; then the line is only in the file.
        let _ = self.tx.send(Msg::Log(line.0.trim_end().to_string()));
    }
}

/// Starts logging to `dir/console.log` and to the console; keep the guard alive.
pub fn start(
    dir: &Path,
    tx: UnboundedSender<Msg>,
) -> anyhow::Result<tracing_appender::non_blocking::WorkerGuard> {
    std::fs::create_dir_all(dir)?;
    let appender = tracing_appender::rolling::never(dir, "console.log");
    let (writer, guard) = tracing_appender::non_blocking(appender);
    let filter = EnvFilter::try_from_env("GPUBOARD_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(false),
        )
        .with(ToConsole { tx })
        .try_init()?;
    Ok(guard)
}
