//! Slurm's engine actions through slurmrestd v0.0.38: cancel a job (`DELETE /job/{id}`),
//! hold and release a pending job (`POST /job/{id}` with `{"hold": true|false}`). The
//! v0.0.38 API has no requeue and no node update, so those verbs are refused with
//! `EngineVerb::unavailable`'s reason before anything is sent.
//!
//! slurmrestd reports a failed operation as HTTP 500 with an `errors` list; its
//! `description` (or `error`) is shown as the engine's words.

use reqwest::Method;
use serde_json::{Value, json};

use super::{API, SlurmSource};
use crate::sources::actions::{EngineAction, EngineDone, EngineVerb};
use crate::sources::error::SourceError;

const PEER: &str = "slurmrestd";

impl SlurmSource {
    /// Carries out `action` on slurmrestd and returns its answer; nothing is sent when the
    /// verb is not Slurm's, the API lacks it, or (hold, release) the job is not pending.
    pub async fn engine_act(&self, action: &EngineAction) -> Result<EngineDone, SourceError> {
        let work = async {
            if let Some(why) = action.verb.unavailable() {
                return Err(self.refusal(why.to_string()));
            }
            let id = &action.target;
            let answer = match action.verb {
                EngineVerb::SlurmCancel => {
                    let state = self.job_state(id).await?;
                    self.send(Method::DELETE, id, None).await?;
                    format!("slurmrestd cancelled job {id} (it was {state})")
                }
                EngineVerb::SlurmHold | EngineVerb::SlurmRelease => {
                    let hold = action.verb == EngineVerb::SlurmHold;
                    let state = self.job_state(id).await?;
                    // Slurm accepts a hold on a running job and does nothing with it: say so.
                    if state != "PENDING" {
                        return Err(self.refusal(format!(
                            "job {id} is {state}; only a pending job can be {}",
                            if hold { "held" } else { "released" }
                        )));
                    }
                    self.send(Method::POST, id, Some(&json!({ "hold": hold })))
                        .await?;
                    format!(
                        "slurmrestd {} job {id}",
                        if hold { "held" } else { "released" }
                    )
                }
                other => {
                    return Err(self.refusal(format!("`{other}` is not a Slurm action")));
                }
            };
            Ok(EngineDone {
                action: action.clone(),
                answer,
            })
        };
        crate::sources::adapter::within(self.shell.config.timeout, self.shown(), work).await
    }

    /// The job's state (`PENDING`, `RUNNING`...), from `GET /job/{id}`.
    async fn job_state(&self, id: &str) -> Result<String, SourceError> {
        let answer = self.send(Method::GET, id, None).await?;
        answer
            .get("jobs")
            .and_then(Value::as_array)
            .and_then(|jobs| jobs.first())
            .and_then(|j| j.get("job_state"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| SourceError::Decode {
                url: self.job_url_text(id),
                what: "the answer has no jobs[0].job_state".to_string(),
            })
    }

    /// One request on `/job/{id}`; slurmrestd's `errors` become the error, in its words.
    async fn send(
        &self,
        method: Method,
        id: &str,
        body: Option<&Value>,
    ) -> Result<Value, SourceError> {
        let path = format!("slurm/{API}/job/{id}");
        let url = self.shell.peer.url(&path, &[])?;
        let (status, answer) = self
            .shell
            .peer
            .send_json(method, &url, body)
            .await
            .map_err(|e| match &self.socket {
                Some(_) => self.relabel_path(e, &path),
                None => e,
            })?;
        if let Some(words) = errors_of(&answer) {
            return Err(SourceError::Peer {
                url: self.job_url_text(id),
                peer: PEER,
                message: words,
            });
        }
        if !status.is_success() {
            return Err(SourceError::Http {
                url: self.job_url_text(id),
                status: status.as_u16(),
                message: crate::sources::http::excerpt(answer.to_string().as_bytes()),
            });
        }
        Ok(answer)
    }

    fn job_url_text(&self, id: &str) -> String {
        format!(
            "{}/slurm/{API}/job/{id}",
            self.shown().trim_end_matches('/')
        )
    }

    fn refusal(&self, message: String) -> SourceError {
        SourceError::Peer {
            url: self.shown(),
            peer: PEER,
            message,
        }
    }
}

/// slurmrestd's `errors` as one line, when there are any.
fn errors_of(answer: &Value) -> Option<String> {
    let errors = answer.get("errors")?.as_array()?;
    let words: Vec<String> = errors
        .iter()
        .filter_map(|e| {
            let description = e.get("description").and_then(Value::as_str);
            let error = e.get("error").and_then(Value::as_str);
            match (description, error) {
                (Some(d), _) if !d.is_empty() => Some(d.to_string()),
                (_, Some(e)) if !e.is_empty() => Some(e.to_string()),
                _ => None,
            }
        })
        .collect();
    (!words.is_empty()).then(|| words.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_errors_keep_their_words() {
        let a = json!({"errors": [{"description": "unable to kill JobId=9 with signal 9: Invalid job id specified", "error": "Invalid job id specified"}]});
        assert_eq!(
            errors_of(&a).unwrap(),
            "unable to kill JobId=9 with signal 9: Invalid job id specified"
        );
        assert_eq!(errors_of(&json!({"errors": []})), None);
        assert_eq!(
            errors_of(&json!({"errors": [{"error": "x"}]})).unwrap(),
            "x"
        );
    }
}
