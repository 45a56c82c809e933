//! `GET /v1/history/report`: one endpoint's accounting, audited actions and trouble over a
//! window (`accounting` has the contract).

use reqwest::StatusCode;

use super::{Client, ClientError};
use crate::accounting::{Ask, Parts, REPORT_PATH, WindowReport};
use crate::clock::Timestamp;
use crate::wire::history::{self as hw, BeforeHistory};

/// The answer to a report call.
#[derive(Clone, Debug, PartialEq)]
pub enum ReportAt {
    /// The window's report.
    Shown(Box<WindowReport>),
    /// The window is wholly before the history begins (`history_from`), or nothing is
    /// recorded (`None`: not yet, or the endpoint records no history).
    BeforeHistory {
        /// Where the history begins.
        history_from: Option<Timestamp>,
    },
}

impl Client {
    /// `GET /v1/history/report`: the endpoint's report over `ask`'s window.
    pub async fn history_report(&self, ask: &Ask) -> Result<ReportAt, ClientError> {
        self.history_report_parts(ask, Parts::All).await
    }

    /// The same, for `parts` of it (`Parts::Usage`: the usage table alone, what a usage
    /// view needs, fast over weeks).
    pub async fn history_report_parts(
        &self,
        ask: &Ask,
        parts: Parts,
    ) -> Result<ReportAt, ClientError> {
        let resp = self
            .history_get(REPORT_PATH, &ask.query_for(parts))
            .send()
            .await
            .map_err(|e| self.transport(&e))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = self.body(resp).await?;
        if status == StatusCode::NOT_FOUND
            && let Ok(body) = serde_json::from_slice::<BeforeHistory>(&bytes)
            && body.error == hw::BEFORE_HISTORY
        {
            return Ok(ReportAt::BeforeHistory {
                history_from: body.history_from,
            });
        }
        // An endpoint that records no history (`--history-days 0`) has none for any window.
        if status == StatusCode::NOT_FOUND
            && serde_json::from_slice::<serde_json::Value>(&bytes)
                .is_ok_and(|v| v["error"] == "no_history")
        {
            return Ok(ReportAt::BeforeHistory { history_from: None });
        }
        if !status.is_success() {
            return Err(self.refused(status, &headers, &bytes));
        }
        let report: WindowReport =
            serde_json::from_slice(&bytes).map_err(|e| self.decode(e.to_string()))?;
        Ok(ReportAt::Shown(Box::new(report)))
    }
}
