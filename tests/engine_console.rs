//! Engine actions in the console's pure update: `E` and `:act` on a claim of a Slurm
//! source open the confirmation of an `Action::Engine` with the claim's job id; confirming
//! asks the driver to act; read-only sends nothing; verbs the engine's API lacks are
//! refused with why; a failed engine action shows the engine's words in the Events log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use gpuboard::clock::Timestamp;
use gpuboard::console::keymap::Keymap;
use gpuboard::console::msg::{Asker, Effect, Msg};
use gpuboard::console::state::{Mode, SourceSlot, State, View};
use gpuboard::console::update::{show_view, update};
use gpuboard::snapshot::ClaimState;
use gpuboard::sources::actions::{EngineAction, EngineVerb};
use gpuboard::sources::error::SourceError;
use gpuboard::sources::{Action, Failure};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

const NOW: Timestamp = Timestamp(1_795_317_400_000);

fn slurm_state(readonly: bool) -> State {
    state_on("cluster", "slurm", common::slurm_snapshot(false), readonly)
}

/// A console on one source of `kind` that has fetched `snap`, in the Claims view.
fn state_on(name: &str, kind: &str, snap: gpuboard::snapshot::Snapshot, readonly: bool) -> State {
    let mut st = State::new(
        vec![SourceSlot::new(name, kind.parse().unwrap(), false, None)],
        Keymap::builtin(),
        2_000,
        readonly,
    );
    let _ = update(&mut st, Msg::Tick(NOW));
    st.sources[0].in_flight = true;
    let _ = update(
        &mut st,
        Msg::Fetched {
            source: 0,
            at: NOW,
            result: Ok(snap.into()),
        },
    );
    show_view(&mut st, View::Claims);
    st
}

fn key(st: &mut State, code: KeyCode) -> Vec<Effect> {
    update(st, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)))
}

fn command(st: &mut State, text: &str) -> Vec<Effect> {
    let mut out = key(st, KeyCode::Char(':'));
    for c in text.chars() {
        out.extend(key(st, KeyCode::Char(c)));
    }
    out.extend(key(st, KeyCode::Enter));
    out
}

/// Selects the first claim in `state` and returns its Slurm job id.
fn select(st: &mut State, state: ClaimState) -> String {
    let at = (0..st.claims.rows.len())
        .find(|i| {
            st.claim(st.claims.rows[*i])
                .is_some_and(|(_, c)| c.state == state)
        })
        .unwrap();
    st.cursor_mut(View::Claims).selected = at;
    st.pick_under_cursor(View::Claims);
    let (_, c) = st.claim(st.claims.rows[at]).unwrap();
    c.request.labels["slurm.job_id"].clone()
}

fn confirm_action(st: &State) -> Action {
    match &st.mode {
        Mode::Confirm(c) => c.action.clone(),
        other => panic!("no confirmation: {other:?}"),
    }
}

#[test]
fn e_cancels_a_running_job_and_holds_a_pending_one_after_confirming() {
    let mut st = slurm_state(false);
    let job = select(&mut st, ClaimState::Placed);
    assert!(key(&mut st, KeyCode::Char('E')).is_empty());
    let want = Action::Engine(EngineAction::new(EngineVerb::SlurmCancel, &job).unwrap());
    assert_eq!(confirm_action(&st), want);
    // Cancel is focused first: Enter alone sends nothing.
    assert!(key(&mut st, KeyCode::Enter).is_empty());
    assert_eq!(st.mode, Mode::Normal);
    key(&mut st, KeyCode::Char('E'));
    key(&mut st, KeyCode::Tab);
    // A cancel asks for the job id to be typed first.
    assert!(key(&mut st, KeyCode::Enter).is_empty());
    for c in job.chars() {
        key(&mut st, KeyCode::Char(c));
    }
    let fx = key(&mut st, KeyCode::Enter);
    assert_eq!(
        fx,
        vec![Effect::Act {
            source: 0,
            action: want,
            asker: Asker::Operator,
        }]
    );

    let pending = select(&mut st, ClaimState::Pending);
    key(&mut st, KeyCode::Char('E'));
    assert_eq!(
        confirm_action(&st),
        Action::Engine(EngineAction::new(EngineVerb::SlurmHold, &pending).unwrap())
    );
}

#[test]
fn act_command_takes_any_offered_verb_and_says_why_not_the_rest() {
    let mut st = slurm_state(false);
    let job = select(&mut st, ClaimState::Pending);
    command(&mut st, "act release");
    assert_eq!(
        confirm_action(&st),
        Action::Engine(EngineAction::new(EngineVerb::SlurmRelease, &job).unwrap())
    );
    key(&mut st, KeyCode::Esc);
    command(&mut st, "act cancel 77");
    assert_eq!(
        confirm_action(&st),
        Action::Engine(EngineAction::new(EngineVerb::SlurmCancel, "77").unwrap())
    );
    key(&mut st, KeyCode::Esc);
    let fx = command(&mut st, "act drain");
    assert!(fx.is_empty());
    assert_eq!(st.mode, Mode::Normal);
    let flash = st.flash.as_ref().unwrap();
    assert!(flash.text.contains("cannot update nodes"), "{}", flash.text);
    command(&mut st, "act gpu-mode never");
    assert!(
        st.flash
            .as_ref()
            .unwrap()
            .text
            .contains("slurm has no action `gpu-mode`")
    );
}

#[test]
fn read_only_sends_no_engine_action() {
    let mut st = slurm_state(true);
    select(&mut st, ClaimState::Placed);
    let mut fx = key(&mut st, KeyCode::Char('E'));
    fx.extend(key(&mut st, KeyCode::Tab));
    fx.extend(key(&mut st, KeyCode::Enter));
    fx.extend(command(&mut st, "act cancel 77"));
    fx.extend(key(&mut st, KeyCode::Tab));
    fx.extend(key(&mut st, KeyCode::Enter));
    assert!(
        !fx.iter().any(|e| matches!(e, Effect::Act { .. })),
        "{fx:?}"
    );
}

#[test]
fn a_failed_engine_action_shows_the_engines_words() {
    let mut st = slurm_state(false);
    let action = Action::Engine(EngineAction::new(EngineVerb::SlurmCancel, "5").unwrap());
    let words = "unable to kill JobId=5 with signal 9: Access/permission denied";
    update(
        &mut st,
        Msg::Acted {
            source: 0,
            action,
            asker: Asker::Operator,
            result: Err(Failure::Peer(SourceError::Peer {
                url: "unix:/run/slurmrestd.sock".into(),
                peer: "slurmrestd",
                message: words.into(),
            })),
        },
    );
    assert!(st.flash.as_ref().unwrap().text.contains(words));
    assert!(st.log.iter().any(|l| l.contains(words)), "{:?}", st.log);
}

#[test]
fn act_with_a_target_needs_no_claim() {
    let mut st = State::new(
        vec![
            SourceSlot::new("lab", "embedded".parse().unwrap(), true, None),
            SourceSlot::new("cruncher", "boinc".parse().unwrap(), true, None),
        ],
        Keymap::builtin(),
        2_000,
        false,
    );
    let _ = update(&mut st, Msg::Tick(NOW));
    command(&mut st, "act gpu-mode never");
    match &st.mode {
        Mode::Confirm(c) => {
            assert_eq!(c.source, 1);
            assert_eq!(
                c.action,
                Action::Engine(EngineAction::new(EngineVerb::BoincGpuMode, "never").unwrap())
            );
        }
        other => panic!("{other:?}"),
    }
    key(&mut st, KeyCode::Esc);
    command(&mut st, "act gpu-mode sometimes");
    assert!(
        st.flash
            .as_ref()
            .unwrap()
            .text
            .contains("never, auto or always")
    );
    command(&mut st, "act cancel 4");
    assert!(
        st.flash
            .as_ref()
            .unwrap()
            .text
            .contains("no source shown has")
    );
}

/// An engine source (read-only for gpuboard's own actions) that counts what reaches it.
struct CountingEngine(std::sync::atomic::AtomicUsize);

impl gpuboard::sources::Source for CountingEngine {
    fn name(&self) -> &'static str {
        "engine"
    }
    fn kind(&self) -> gpuboard::sources::SourceKind {
        gpuboard::sources::SourceKind::Slurm
    }
    fn can_act(&self) -> bool {
        false
    }
    fn fetch(
        &self,
    ) -> futures::future::BoxFuture<'static, Result<gpuboard::sources::Fetched, Failure>> {
        Box::pin(async { Ok(gpuboard::snapshot::Snapshot::default().into()) })
    }
    fn plan(
        &self,
        _: gpuboard::request::ClaimRequest,
    ) -> futures::future::BoxFuture<'static, Result<gpuboard::placement::Allocation, Failure>> {
        Box::pin(async { Err(Failure::Refused("no".into())) })
    }
    fn act(
        &self,
        action: Action,
    ) -> futures::future::BoxFuture<'static, Result<gpuboard::sources::Outcome, Failure>> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            let Action::Engine(a) = action else {
                return Err(Failure::Refused("not an engine action".into()));
            };
            Ok(gpuboard::sources::Outcome::Engine(
                gpuboard::sources::actions::EngineDone {
                    action: a,
                    answer: "done".into(),
                },
            ))
        })
    }
}

#[tokio::test]
async fn the_executor_refuses_every_engine_action_in_read_only_mode() {
    use gpuboard::clock::{Clock, ManualClock};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    let src = Arc::new(CountingEngine(AtomicUsize::new(0)));
    let sources: Vec<Arc<dyn gpuboard::sources::Source>> = vec![src.clone()];
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp(1)));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let all: Vec<Action> = EngineVerb::ALL
        .iter()
        .map(|v| {
            let target = match v.target_kind() {
                "JOB_ID" => "42",
                "never|auto|always" => "never",
                "NAMESPACE/POD" => "ml/x1",
                _ => "x1",
            };
            Action::Engine(EngineAction::new(*v, target).unwrap())
        })
        .collect();
    for readonly in [true, false] {
        for action in &all {
            gpuboard::console::driver::perform(
                Effect::Act {
                    source: 0,
                    action: action.clone(),
                    asker: Asker::Operator,
                },
                &sources,
                readonly,
                Duration::from_secs(1),
                &clock,
                &tx,
            );
            let Some(Msg::Acted { result, .. }) = rx.recv().await else {
                panic!()
            };
            if readonly {
                assert!(
                    matches!(result, Err(Failure::ReadOnly(_))),
                    "{action:?}: {result:?}"
                );
            } else {
                assert!(result.is_ok(), "{action:?}: {result:?}");
            }
        }
        let want = if readonly { 0 } else { all.len() };
        // Read-only: nothing reached the engine. Otherwise every action did, although the
        // source takes none of gpuboard's own actions.
        assert_eq!(src.0.load(Ordering::SeqCst), want);
    }
}

/// A console on the recorded BOINC client with one task the GUI suspended.
fn boinc_state() -> State {
    let read = |f: &str| {
        std::fs::read_to_string(format!(
            "{}/tests/corpus/boinc/task-suspended/{f}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    };
    let answers = gpuboard::sources::boinc::BoincAnswers {
        state: read("state.xml"),
        cc_status: read("cc_status.xml"),
    };
    let snap = gpuboard::sources::boinc::snapshot(&answers, "cruncher", NOW).unwrap();
    state_on("cruncher", "boinc", snap, false)
}

#[test]
fn e_resumes_a_boinc_task_the_gui_suspended_and_suspends_a_running_one() {
    let mut st = boinc_state();
    let suspended = |c: &gpuboard::snapshot::ClaimView| {
        c.pending_reasons
            .iter()
            .any(|r| r == "task suspended via the GUI")
    };
    for (want_suspended, verb) in [
        (true, EngineVerb::BoincResumeTask),
        (false, EngineVerb::BoincSuspendTask),
    ] {
        let at = (0..st.claims.rows.len())
            .find(|i| {
                st.claim(st.claims.rows[*i]).is_some_and(|(_, c)| {
                    suspended(c) == want_suspended
                        && (want_suspended || c.state == ClaimState::Placed)
                })
            })
            .unwrap_or_else(|| panic!("no task with suspended={want_suspended}"));
        st.cursor_mut(View::Claims).selected = at;
        st.pick_under_cursor(View::Claims);
        let task = st
            .claim(st.claims.rows[at])
            .unwrap()
            .1
            .holder
            .clone()
            .unwrap();
        key(&mut st, KeyCode::Char('E'));
        assert_eq!(
            confirm_action(&st),
            Action::Engine(EngineAction::new(verb, &task).unwrap()),
            "suspended={want_suspended}"
        );
        key(&mut st, KeyCode::Esc);
    }
}
