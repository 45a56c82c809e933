//! Asking a source for the Usage view (`Effect::Usage`, its `msg::UsageAsk`), the answer
//! coming back as `Msg::Usage`: one source's report over a window. `perform` runs an ask on its own
//! task, so a slow report (a week of a large fleet) never holds up drawing.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;

use super::msg::{Msg, UsageAnswer, UsageAsk};
use super::state::SourceUsage;
use crate::client::ReportAt;
use crate::sources::Source;

/// How long a report may take: longer than a fetch, as a week of history is a lot to read;
/// the view shows "loading…" meanwhile.
pub const REPORT_TIMEOUT: Duration = Duration::from_mins(1);

/// Runs an ask on its own task; the answer comes back as `Msg::Usage`.
pub fn perform(ask: UsageAsk, sources: &[Arc<dyn Source>], tx: &UnboundedSender<Msg>) {
    let history = sources.get(ask.source).and_then(|s| s.history());
    let tx = tx.clone();
    tokio::spawn(async move {
        let _ = tx.send(Msg::Usage(answer(ask, history, REPORT_TIMEOUT).await));
    });
}

/// Asks `history` (a source's, `None` when it keeps none) under the timeout.
pub async fn answer(
    ask: UsageAsk,
    history: Option<Arc<dyn crate::sources::history::SourceHistory>>,
    timeout: Duration,
) -> UsageAnswer {
    let said = match history {
        None => SourceUsage::NoHistory,
        Some(h) => match tokio::time::timeout(timeout, h.report(ask.key.ask())).await {
            Ok(Ok(ReportAt::Shown(w))) => SourceUsage::Shown {
                from: w.from,
                usage: Box::new(w.usage),
            },
            Ok(Ok(ReportAt::BeforeHistory { history_from })) => SourceUsage::Before(history_from),
            Ok(Err(e)) => SourceUsage::Failed(e.to_string()),
            Err(_) => SourceUsage::Failed(format!("no report within {} s", timeout.as_secs())),
        },
    };
    UsageAnswer {
        source: ask.source,
        rewound: ask.rewound,
        key: ask.key,
        said,
    }
}
