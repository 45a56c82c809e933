//! Asking the sources' history (`Effect::History`, its `msg::HistoryAsk`), the answer
//! coming back as `Msg::History`: `perform` runs an ask on its own task, so a slow or
//! broken history never blocks the console.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;

use super::msg::{HistoryAnswer, HistoryAsk, Msg};
use super::state::{TrendPoint, TrendPoints};
use crate::clock::Timestamp;
use crate::sources::history::{AtTime, SourceHistory};
use crate::sources::{Failure, Source};

/// Runs an ask under the timeout on its own task; the answer comes back as `Msg::History`.
pub fn perform(
    ask: HistoryAsk,
    sources: &[Arc<dyn Source>],
    timeout: Duration,
    tx: &UnboundedSender<Msg>,
) {
    let history = history_of(&ask, sources);
    let tx = tx.clone();
    tokio::spawn(async move {
        let _ = tx.send(Msg::History(answer(ask, history, timeout).await));
    });
}

/// The history the ask is for (`None`: its source keeps none).
pub fn history_of(ask: &HistoryAsk, sources: &[Arc<dyn Source>]) -> Option<Arc<dyn SourceHistory>> {
    let source = match ask {
        HistoryAsk::At { source, .. }
        | HistoryAsk::Seek { source, .. }
        | HistoryAsk::Trend { source, .. } => *source,
        HistoryAsk::Telemetry { key, .. } => key.source,
    };
    sources.get(source).and_then(|s| s.history())
}

/// Asks `history` (under the timeout) and wraps what it says.
pub async fn answer(
    ask: HistoryAsk,
    history: Option<Arc<dyn SourceHistory>>,
    timeout: Duration,
) -> HistoryAnswer {
    let limit = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let Some(h) = history else {
        return no_history(ask);
    };
    match ask {
        HistoryAsk::At {
            source,
            generation,
            at,
        } => HistoryAnswer::At {
            source,
            generation,
            result: Some(
                tokio::time::timeout(timeout, h.snapshot_at(at))
                    .await
                    .unwrap_or(Err(Failure::Timeout(limit))),
            ),
        },
        HistoryAsk::Seek {
            source,
            generation,
            at,
            dir,
            what,
        } => HistoryAnswer::Sought {
            source,
            generation,
            result: Some(
                tokio::time::timeout(timeout, h.seek(at, dir, what))
                    .await
                    .unwrap_or(Err(Failure::Timeout(limit))),
            ),
        },
        HistoryAsk::Telemetry { rewound, key } => {
            let fut = h.telemetry(key.node.clone(), key.index, key.from, key.to);
            HistoryAnswer::Telemetry {
                rewound,
                key,
                result: Some(
                    tokio::time::timeout(timeout, fut)
                        .await
                        .unwrap_or(Err(Failure::Timeout(limit))),
                ),
            }
        }
        HistoryAsk::Trend {
            source,
            rewound,
            times,
        } => HistoryAnswer::Trend {
            source,
            rewound,
            result: Some(trend(h.as_ref(), times, timeout).await),
        },
    }
}

/// The source's figures at each time, one state at a time (so a large fleet's endpoint
/// is never asked for many states at once); the first failure ends the ask.
async fn trend(
    h: &dyn SourceHistory,
    times: Vec<Timestamp>,
    timeout: Duration,
) -> Result<TrendPoints, Failure> {
    let limit = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let mut out = Vec::with_capacity(times.len());
    for at in times {
        let point = match tokio::time::timeout(timeout, h.snapshot_at(at))
            .await
            .unwrap_or(Err(Failure::Timeout(limit)))?
        {
            AtTime::Shown { snapshot, .. } => Some(TrendPoint::of(&snapshot)),
            AtTime::Before { .. } => None,
        };
        out.push((at, point));
    }
    Ok(out)
}

/// The answer of a source that keeps no history.
pub fn no_history(ask: HistoryAsk) -> HistoryAnswer {
    match ask {
        HistoryAsk::At {
            source, generation, ..
        } => HistoryAnswer::At {
            source,
            generation,
            result: None,
        },
        HistoryAsk::Seek {
            source, generation, ..
        } => HistoryAnswer::Sought {
            source,
            generation,
            result: None,
        },
        HistoryAsk::Telemetry { rewound, key } => HistoryAnswer::Telemetry {
            rewound,
            key,
            result: None,
        },
        HistoryAsk::Trend {
            source, rewound, ..
        } => HistoryAnswer::Trend {
            source,
            rewound,
            result: None,
        },
    }
}
