//! Asking a source for its waiting claims' expected starts (`Effect::Forecast`, answered
//! by `Msg::Forecast`) and for what an action would do (`Effect::Preview`, answered by
//! `Msg::Previewed`), each on its own task so that drawing never waits for them. A source
//! that gives neither (an engine without an estimate, the demo) answers `None` at once.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;

use super::msg::Msg;
use crate::sources::{Failure, Source};
use crate::wire::forecast::PreviewAction;

/// How long a forecast or a preview may take: longer than a fetch, as a large endpoint
/// runs its scheduler forward over every waiting claim; the console shows "previewing…"
/// (or the reasons alone) meanwhile.
pub const FORECAST_TIMEOUT: Duration = Duration::from_secs(30);

/// Asks source `source` for its forecast; the answer comes back as `Msg::Forecast`.
pub fn ask_forecast(source: usize, sources: &[Arc<dyn Source>], tx: &UnboundedSender<Msg>) {
    let asked = sources.get(source).and_then(|s| s.forecast());
    let tx = tx.clone();
    tokio::spawn(async move {
        let result = match asked {
            Some(fut) => Some(within(fut).await),
            None => None,
        };
        let _ = tx.send(Msg::Forecast { source, result });
    });
}

/// Asks source `source` what `action` would do; the answer comes back as
/// `Msg::Previewed`.
pub fn ask_preview(
    source: usize,
    action: PreviewAction,
    sources: &[Arc<dyn Source>],
    tx: &UnboundedSender<Msg>,
) {
    let asked = sources.get(source).and_then(|s| s.preview(action.clone()));
    let tx = tx.clone();
    tokio::spawn(async move {
        let result = match asked {
            Some(fut) => Some(Box::new(within(fut).await)),
            None => None,
        };
        let _ = tx.send(Msg::Previewed {
            source,
            action,
            result,
        });
    });
}

/// The answer, or `Failure::Timeout` after `FORECAST_TIMEOUT`.
async fn within<T>(
    fut: impl std::future::Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    let ms = u64::try_from(FORECAST_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
    tokio::time::timeout(FORECAST_TIMEOUT, fut)
        .await
        .unwrap_or(Err(Failure::Timeout(ms)))
}
