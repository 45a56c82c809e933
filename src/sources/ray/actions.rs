//! Ray's engine action through the dashboard's Jobs API: stop a submitted job
//! (`POST /api/jobs/{id}/stop`, by submission id or Ray job id), which ends its driver,
//! tasks and actors, so their GPUs come free. Ray answers `{"stopped": true}`, or
//! `false` when the job had already ended; a job started by a driver script (not `ray job
//! submit`) is refused by Ray in its words ("Can only stop submission type jobs"). Other
//! holders stay read-only (`actions::RAY_READ_ONLY`).

use reqwest::Method;
use serde_json::Value;

use super::RaySource;
use crate::sources::actions::{EngineAction, EngineDone, EngineVerb};
use crate::sources::error::SourceError;

impl RaySource {
    /// Stops the job in `action` through the Jobs API and returns Ray's answer.
    pub async fn engine_act(&self, action: &EngineAction) -> Result<EngineDone, SourceError> {
        let peer = &self.shell.peer;
        if action.verb != EngineVerb::RayStopJob {
            return Err(SourceError::Peer {
                url: peer.base().to_string(),
                peer: "Ray dashboard",
                message: format!("`{}` is not a Ray action", action.verb),
            });
        }
        // A project shown as `ray-job-02000000` names Ray job 02000000.
        let id = action
            .target
            .strip_prefix("ray-job-")
            .unwrap_or(&action.target);
        let url = peer.url(&format!("api/jobs/{id}/stop"), &[])?;
        let (status, answer) = peer.send_json(Method::POST, &url, None).await?;
        if !status.is_success() {
            return Err(SourceError::Http {
                url: url.to_string(),
                status: status.as_u16(),
                message: crate::sources::http::excerpt(answer.to_string().as_bytes()),
            });
        }
        let answer = match answer.get("stopped").and_then(Value::as_bool) {
            Some(true) => format!("Ray stopped job {id}"),
            Some(false) => format!("Ray job {id} had already ended; nothing was stopped"),
            None => {
                return Err(SourceError::Decode {
                    url: url.to_string(),
                    what: format!("the answer has no `stopped`: {answer}"),
                });
            }
        };
        Ok(EngineDone {
            action: action.clone(),
            answer,
        })
    }
}
