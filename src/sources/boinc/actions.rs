//! BOINC's engine actions through the GUI RPC: suspend or resume a project, stop or allow
//! its new tasks, set the client's GPU mode (never / auto / always: BOINC's cordon of every
//! GPU it has), abort, suspend or resume one task. A project is named as the console shows
//! it (its name) or by master URL; a task by its name, its project found in `get_state`.
//!
//! The client answers `<success/>` or `<error>` with its words; anything else is reported
//! as it came.

use super::{BoincAnswerKind, BoincSource, project_url};
use crate::sources::actions::{EngineAction, EngineDone, EngineVerb};
use crate::sources::error::SourceError;
use crate::sources::xml;

const PEER: &str = "BOINC client";

impl BoincSource {
    /// Carries out `action` on the client and returns its answer; nothing is sent when the
    /// project or task is not the client's.
    pub async fn engine_act(&self, action: &EngineAction) -> Result<EngineDone, SourceError> {
        let work = async {
            let mut rpc = self.open().await?;
            let t = &action.target;
            let (request, answer) = match action.verb {
                EngineVerb::BoincGpuMode => {
                    let mode = action.gpu_mode().ok_or_else(|| {
                        self.refusal(format!(
                            "`{t}` is not a GPU mode; give never, auto or always"
                        ))
                    })?;
                    (
                        format!(
                            "<set_gpu_mode>\n<{}/>\n<duration>0</duration>\n</set_gpu_mode>",
                            mode.word()
                        ),
                        format!("the client's GPU mode is now {}", mode.word()),
                    )
                }
                EngineVerb::BoincSuspendProject
                | EngineVerb::BoincResumeProject
                | EngineVerb::BoincNoNewTasks
                | EngineVerb::BoincAllowNewTasks => {
                    let state = rpc.request(BoincAnswerKind::State.request()).await?;
                    let url = project_url(&state, t)
                        .map_err(|e| self.decode(e.to_string()))?
                        .ok_or_else(|| {
                            self.refusal(format!(
                                "the client is not attached to a project named `{t}`"
                            ))
                        })?;
                    let (tag, done) = match action.verb {
                        EngineVerb::BoincSuspendProject => ("project_suspend", "suspended"),
                        EngineVerb::BoincResumeProject => ("project_resume", "resumed"),
                        EngineVerb::BoincNoNewTasks => ("project_nomorework", "gets no new tasks"),
                        _ => ("project_allowmorework", "may get new tasks"),
                    };
                    (
                        format!("<{tag}>\n<project_url>{url}</project_url>\n</{tag}>"),
                        format!("project {t} {done}"),
                    )
                }
                EngineVerb::BoincAbortTask
                | EngineVerb::BoincSuspendTask
                | EngineVerb::BoincResumeTask => {
                    let state = rpc.request(BoincAnswerKind::State.request()).await?;
                    let (url, result_state) = task_project(&state, t)
                        .map_err(|e| self.decode(e))?
                        .ok_or_else(|| {
                            self.refusal(format!("the client has no task named `{t}`"))
                        })?;
                    // The client answers success on a finished task and changes nothing.
                    if let Some(done) = finished(result_state) {
                        return Err(self.refusal(format!(
                            "task `{t}` is {done}: it holds no GPU; nothing sent"
                        )));
                    }
                    let (tag, done) = match action.verb {
                        EngineVerb::BoincAbortTask => ("abort_result", "aborted"),
                        EngineVerb::BoincSuspendTask => ("suspend_result", "suspended"),
                        _ => ("resume_result", "resumed"),
                    };
                    (
                        format!(
                            "<{tag}>\n<project_url>{url}</project_url>\n<name>{t}</name>\n</{tag}>"
                        ),
                        format!("task {t} {done}"),
                    )
                }
                other => {
                    return Err(self.refusal(format!("`{other}` is not a BOINC action")));
                }
            };
            // `call` turns the client's `<error>` into an error in its words.
            let reply = rpc.call(&request).await?;
            if !reply.has("success") {
                return Err(self.refusal(format!(
                    "the client did not confirm: <{}>",
                    reply
                        .children
                        .first()
                        .map_or("nothing", |c| c.name.as_str())
                )));
            }
            Ok(EngineDone {
                action: action.clone(),
                answer,
            })
        };
        self.bounded(work).await
    }

    fn refusal(&self, message: String) -> SourceError {
        SourceError::Peer {
            url: self.shell.peer.clone(),
            peer: PEER,
            message,
        }
    }

    fn decode(&self, what: String) -> SourceError {
        SourceError::Decode {
            url: self.shell.peer.clone(),
            what,
        }
    }
}

/// The project URL and the state of the task (`<result>`) named `name` in a `get_state`
/// reply (the state 0 when the client leaves it out).
fn task_project(state: &str, name: &str) -> Result<Option<(String, i64)>, String> {
    let root = xml::parse(state).map_err(|e| format!("get_state is not XML: {e}"))?;
    let cs = root
        .child("client_state")
        .ok_or("no <client_state> in the get_state reply")?;
    let Some(r) = cs
        .all("result")
        .find(|r| r.text_of("name").map(str::trim) == Some(name))
    else {
        return Ok(None);
    };
    let Some(url) = r.text_of("project_url") else {
        return Ok(None);
    };
    let result_state = match r.text_of("state").map(str::trim) {
        None => 0,
        Some(v) => v
            .parse()
            .map_err(|_| format!("task `{name}` has state \"{v}\", not a number"))?,
    };
    Ok(Some((url.trim().to_string(), result_state)))
}

/// What a task in the client's result state `s` has come to, when it computes no more
/// (`RESULT_COMPUTE_ERROR` and on).
fn finished(s: i64) -> Option<&'static str> {
    match s {
        ..=2 => None,
        3 => Some("finished with a computation error"),
        4 | 5 => Some("finished (its output is uploading or uploaded)"),
        6 => Some("already aborted"),
        7 => Some("finished (its upload failed)"),
        _ => Some("no longer computing"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_found_with_its_project() {
        let state = "<boinc_gui_rpc_reply><client_state>\
            <result><name>wu_1_0</name><project_url>http://p/</project_url></result>\
            </client_state></boinc_gui_rpc_reply>";
        assert_eq!(
            task_project(state, "wu_1_0").unwrap(),
            Some(("http://p/".to_string(), 0))
        );
        assert_eq!(task_project(state, "wu_2_0").unwrap(), None);
        assert!(task_project("<x", "a").is_err());
        let aborted = state.replace("</name>", "</name><state>6</state>");
        let (_, s) = task_project(&aborted, "wu_1_0").unwrap().unwrap();
        assert_eq!(finished(s), Some("already aborted"));
        assert_eq!(finished(2), None);
        let bad = state.replace("</name>", "</name><state>six</state>");
        assert!(
            task_project(&bad, "wu_1_0")
                .unwrap_err()
                .contains("\"six\"")
        );
    }
}
