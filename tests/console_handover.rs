//! The console's hand-over in the pure update: `:handover` / `:act ... then ...` parse
//! into steps (or are refused with what was wrong, nothing sent), read-only refuses it,
//! the one confirmation lists every step with Cancel focused and the job id typed, OK
//! sends the first step only, each answer sends the next, and the first failure stops
//! the rest (not run), logged in Events and drawn in the result pane. The driver's
//! executor refuses every step in read-only mode even if one were sent.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use gpuboard::clock::{Clock, ManualClock, Timestamp};
use gpuboard::console::flows::FlowId;
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::keymap::Keymap;
use gpuboard::console::msg::{Asker, Effect, Msg};
use gpuboard::console::state::{Mode, SourceSlot, State, View};
use gpuboard::console::theme::Theme;
use gpuboard::console::update::{show_view, update};
use gpuboard::snapshot::ClaimState;
use gpuboard::sources::actions::{EngineAction, EngineVerb};
use gpuboard::sources::error::SourceError;
use gpuboard::sources::handover::StepResult;
use gpuboard::sources::{Action, Failure, Outcome};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

const NOW: Timestamp = Timestamp(1_795_317_400_000);

/// A Slurm cluster (read from captures) and a gpuboard endpoint `lab` that takes claims.
fn state(readonly: bool) -> State {
    let mut st = State::new(
        vec![
            SourceSlot::new("cluster", "slurm".parse().unwrap(), false, None),
            SourceSlot::new("lab", "gpuboard".parse().unwrap(), true, None),
        ],
        Keymap::builtin(),
        2_000,
        readonly,
    );
    st.operator = Some("ops".into());
    let _ = update(&mut st, Msg::Tick(NOW));
    st.sources[0].in_flight = true;
    let _ = update(
        &mut st,
        Msg::Fetched {
            source: 0,
            at: NOW,
            result: Ok(common::slurm_snapshot(false).into()),
        },
    );
    for s in &mut st.sources {
        s.in_flight = false;
    }
    show_view(&mut st, View::Claims);
    st
}

fn key(st: &mut State, code: KeyCode) -> Vec<Effect> {
    update(st, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)))
}

fn typed(st: &mut State, text: &str) -> Vec<Effect> {
    let mut out = Vec::new();
    for c in text.chars() {
        out.extend(key(st, KeyCode::Char(c)));
    }
    out
}

fn command(st: &mut State, text: &str) -> Vec<Effect> {
    let mut out = key(st, KeyCode::Char(':'));
    out.extend(typed(st, text));
    out.extend(key(st, KeyCode::Enter));
    out
}

fn flash(st: &State) -> String {
    st.flash
        .as_ref()
        .map(|f| f.text.clone())
        .unwrap_or_default()
}

fn engine(verb: EngineVerb, target: &str) -> Action {
    Action::Engine(EngineAction::new(verb, target).unwrap())
}

const FULL: &str = "handover cluster hold 12 then cluster cancel 11 then claim lab --gpus 2 \
                    --node gpunode --devices 0,1 --project deadline";

#[test]
fn the_command_line_parses_into_steps_or_says_what_is_wrong() {
    // (command, steps and their sources, or words of the refusal)
    type Want = Result<&'static [(usize, &'static str)], &'static str>;
    let table: &[(&str, Want)] = &[
        (FULL, Ok(&[(0, "hold"), (0, "cancel"), (1, "claim")])),
        (
            "act hold 12 then cancel 11",
            Ok(&[(0, "hold"), (0, "cancel")]),
        ),
        (
            "handover cancel 11 then claim --gpus 1 --project p",
            Ok(&[(0, "cancel"), (1, "claim")]),
        ),
        (
            "handover cancel 11 then claim lab --memory=10GiB --project=p --wait",
            Ok(&[(0, "cancel"), (1, "claim")]),
        ),
        (
            "handover cancel abc then claim lab --gpus 1 --project p",
            Err("step 1: "),
        ),
        ("handover cancel abc", Err("whole number")),
        ("handover cluster requeue 5", Err("requeue is not offered")),
        (
            "handover cancel 11 then claim cluster --gpus 1",
            Err("takes no claims"),
        ),
        (
            "handover cancel 11 then claim lab --bogus 1",
            Err("unknown flag `--bogus`"),
        ),
        (
            "handover cancel 11 then claim lab --devices x",
            Err("--devices is device indexes"),
        ),
        (
            "handover cancel 11 then claim lab --gpus",
            Err("--gpus needs a value"),
        ),
        (
            "handover cancel 11 then claim lab --gpus 1 --fraction 0.5 --project p",
            Err("step 2: claim: "),
        ),
        ("handover cancel 11 then", Err("step 2: give VERB TARGET")),
        ("handover cancel 11 12", Err("one target")),
        (
            "handover gpu-mode never",
            Err("no source shown has the engine action `gpu-mode`"),
        ),
    ];
    for (text, want) in table {
        let mut st = state(false);
        let out = command(&mut st, text);
        assert!(out.is_empty(), "{text}: nothing is sent before OK: {out:?}");
        match want {
            Ok(steps) => {
                let Mode::Confirm(c) = &st.mode else {
                    panic!("{text}: no confirmation: {:?} {}", st.mode, flash(&st))
                };
                let got: Vec<(usize, &str)> = c
                    .steps()
                    .iter()
                    .map(|s| (s.source, s.action.verb()))
                    .collect();
                assert_eq!(&got[..], *steps, "{text}");
                assert_eq!(c.source, c.steps()[0].source);
                assert_eq!(c.action, c.steps()[0].action);
            }
            Err(words) => {
                assert_eq!(st.mode, Mode::Normal, "{text}");
                let f = flash(&st);
                assert!(f.contains(words), "{text}: {f}");
                assert!(f.contains("nothing was sent"), "{text}: {f}");
            }
        }
    }
}

#[test]
fn one_confirmation_lists_every_step_cancel_focused_with_the_job_id_typed() {
    let mut st = state(false);
    command(&mut st, FULL);
    let Mode::Confirm(c) = &st.mode else {
        panic!("{:?}", st.mode)
    };
    assert_eq!(c.title, "Hand-over: 3 steps");
    assert!(!c.ok_focused, "Cancel is focused");
    assert_eq!(c.type_to_confirm.as_deref(), Some("11"));
    assert_eq!(c.ok_label(), "hand over");
    assert!(
        c.body[0].starts_with("1. cluster: hold job 12"),
        "{:?}",
        c.body
    );
    assert!(
        c.body[1].starts_with("2. cluster: cancel job 11"),
        "{:?}",
        c.body
    );
    assert!(c.body[2].starts_with("3. lab: claim "), "{:?}", c.body);
    assert!(c.body[3].contains("the first failure stops the rest"));
    // Drawn: every step and the button.
    let screen = buffer_text(&render(&st, &Theme::plain(), 100, 30).unwrap());
    for want in [
        "1. cluster: hold job 12",
        "2. cluster: cancel job 11",
        "3. lab: claim",
        "[ hand over ]",
        "Type 11 to confirm",
    ] {
        assert!(screen.contains(want), "{want}:\n{screen}");
    }
    // Enter on Cancel closes it; nothing is sent.
    assert!(key(&mut st, KeyCode::Enter).is_empty());
    assert_eq!(st.mode, Mode::Normal);
    assert!(st.flows.handover().is_none());

    // OK without the id: refused in the dialog; with it: the first step only is sent.
    command(&mut st, FULL);
    key(&mut st, KeyCode::Tab);
    assert!(key(&mut st, KeyCode::Enter).is_empty());
    let Mode::Confirm(c) = &st.mode else {
        panic!("{:?}", st.mode)
    };
    assert_eq!(
        c.error.as_deref(),
        Some("type `11` to run the hand-over (Esc cancels)")
    );
    typed(&mut st, "11");
    let out = key(&mut st, KeyCode::Enter);
    assert_eq!(
        out,
        vec![Effect::Act {
            source: 0,
            action: engine(EngineVerb::SlurmHold, "12"),
            asker: Asker::Flow {
                flow: FlowId(1),
                step: 0,
            },
        }]
    );
    assert_eq!(st.mode, Mode::Handover);
    assert_eq!(st.flows.handover().unwrap().1.current(), Some(0));
    // A second hand-over waits for this one: its later steps must still be sent.
    key(&mut st, KeyCode::Esc);
    assert!(command(&mut st, "act hold 12 then cancel 11").is_empty());
    assert_eq!(st.mode, Mode::Normal);
    assert!(
        flash(&st).contains("a hand-over is under way (step 1 of 3)"),
        "{}",
        flash(&st)
    );
    assert_eq!(st.flows.handover().unwrap().1.steps.len(), 3);
    command(&mut st, "handover");
    assert_eq!(st.mode, Mode::Handover, "`:handover` reopens its pane");
}

#[test]
fn read_only_refuses_the_hand_over_and_sends_nothing() {
    for text in [FULL, "act hold 12 then cancel 11"] {
        let mut st = state(true);
        let out = command(&mut st, text);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(st.mode, Mode::Normal);
        let f = flash(&st);
        assert!(
            f.contains("hand-over refused, nothing was sent: read-only"),
            "{f}"
        );
        assert!(st.flows.handover().is_none());
    }
}

/// Opens `FULL`, types the id and confirms: the first step is under way.
fn confirmed() -> State {
    let mut st = state(false);
    command(&mut st, FULL);
    typed(&mut st, "11");
    key(&mut st, KeyCode::Tab);
    let out = key(&mut st, KeyCode::Enter);
    assert_eq!(out.len(), 1, "{out:?}");
    st
}

fn done(answer: &str) -> Outcome {
    Outcome::Engine(gpuboard::sources::actions::EngineDone {
        action: EngineAction::new(EngineVerb::SlurmHold, "12").unwrap(),
        answer: answer.into(),
    })
}

#[test]
fn each_answer_sends_the_next_step_and_a_failure_stops_the_rest() {
    // (which step fails, if any; what the results must be)
    let refused = || {
        Err(Failure::Peer(SourceError::Peer {
            url: "http://127.0.0.1:1".into(),
            peer: "slurmrestd",
            message: "Job has already finished".into(),
        }))
    };
    for fails_at in [None, Some(0), Some(1), Some(2)] {
        let mut st = confirmed();
        let steps = st.flows.handover().unwrap().1.steps.clone();
        let id = st.flows.handover().unwrap().0;
        // The pane is closed while it runs: a failure opens it again.
        key(&mut st, KeyCode::Esc);
        assert_eq!(st.mode, Mode::Normal);
        for (i, step) in steps.iter().enumerate() {
            let result = if Some(i) == fails_at {
                refused()
            } else {
                Ok(done("ok"))
            };
            let out = update(
                &mut st,
                Msg::Acted {
                    source: step.source,
                    action: step.action.clone(),
                    asker: Asker::Flow { flow: id, step: i },
                    result,
                },
            );
            let sent: Vec<&Effect> = out
                .iter()
                .filter(|e| matches!(e, Effect::Act { .. }))
                .collect();
            if Some(i) == fails_at || i == 2 {
                assert!(sent.is_empty(), "{fails_at:?} step {i}: {out:?}");
                break;
            }
            assert_eq!(
                sent,
                vec![&Effect::Act {
                    source: steps[i + 1].source,
                    action: steps[i + 1].action.clone(),
                    asker: Asker::Flow {
                        flow: id,
                        step: i + 1
                    },
                }],
                "{fails_at:?} step {i}"
            );
            assert!(
                out.contains(&Effect::Fetch(step.source)) || st.sources[step.source].wanted,
                "a fetch follows each step: {out:?}"
            );
        }
        let run = st.flows.handover().unwrap().1;
        assert_eq!(run.current(), None, "{fails_at:?}: the run is over");
        let log: Vec<&String> = st.log.iter().collect();
        match fails_at {
            None => {
                assert!(
                    run.results
                        .iter()
                        .all(|r| matches!(r, Some(StepResult::Done(_))))
                );
                assert_eq!(flash(&st), "hand-over done: 3 steps");
                assert_eq!(st.mode, Mode::Normal);
            }
            Some(at) => {
                assert_eq!(run.failed_at(), Some(at));
                for (i, r) in run.results.iter().enumerate() {
                    match i.cmp(&at) {
                        std::cmp::Ordering::Less => assert!(matches!(r, Some(StepResult::Done(_)))),
                        std::cmp::Ordering::Equal => {
                            assert!(matches!(r, Some(StepResult::Failed(_))));
                        }
                        std::cmp::Ordering::Greater => assert_eq!(r, &Some(StepResult::NotRun)),
                    }
                }
                let f = flash(&st);
                assert!(
                    f.contains(&format!("hand-over STOPPED at step {}/3", at + 1))
                        && f.contains("Job has already finished"),
                    "{f}"
                );
                assert!(st.flash.as_ref().unwrap().error);
                assert_eq!(st.mode, Mode::Handover, "the failure is shown");
                assert!(
                    log.iter()
                        .any(|l| l.contains(&format!("hand-over step {}/3", at + 1))
                            && l.contains("FAILED")
                            && l.contains("Job has already finished")),
                    "{log:?}"
                );
                for later in at + 1..3 {
                    assert!(
                        log.iter().any(|l| l
                            .starts_with(&format!("hand-over step {}/3", later + 1))
                            && l.contains("not run")),
                        "{log:?}"
                    );
                }
                let screen = buffer_text(&render(&st, &Theme::plain(), 100, 30).unwrap());
                assert!(screen.contains("STOPPED at step"), "{screen}");
                assert!(screen.contains("FAILED: "), "{screen}");
                if at < 2 {
                    // Read across the dialog's wrapped lines.
                    let flat = screen
                        .replace('│', " ")
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ");
                    assert!(
                        flat.contains("not run (an earlier step failed)"),
                        "{screen}"
                    );
                }
            }
        }
        // An answer that is not the hand-over's does not touch it: the operator's, one
        // for a step already answered, one for another hand-over, even with the very
        // source and action of a step.
        let before = st.flows.clone();
        let answer = |asker| Msg::Acted {
            source: steps[0].source,
            action: steps[0].action.clone(),
            asker,
            result: Err(Failure::Refused("gone".into())),
        };
        for asker in [
            Asker::Operator,
            Asker::Flow { flow: id, step: 0 },
            Asker::Flow {
                flow: FlowId(id.0 + 1),
                step: before.handover().unwrap().1.current().unwrap_or(0),
            },
        ] {
            update(&mut st, answer(asker));
            assert_eq!(st.flows, before, "{asker:?}");
        }
    }
}

#[test]
fn h_on_a_running_job_writes_the_hand_over_for_its_gpus() {
    let mut st = state(false);
    let at = (0..st.claims.rows.len())
        .find(|i| {
            st.claim(st.claims.rows[*i])
                .is_some_and(|(_, c)| c.state == ClaimState::Placed && c.shares.len() == 2)
        })
        .unwrap();
    st.cursor_mut(View::Claims).selected = at;
    st.pick_under_cursor(View::Claims);
    let (_, c) = st.claim(st.claims.rows[at]).unwrap();
    let job = c.request.labels["slurm.job_id"].clone();
    let node = c.node.clone().unwrap();
    key(&mut st, KeyCode::Char('H'));
    let Mode::Command(line) = &st.mode else {
        panic!("{:?}", st.mode)
    };
    assert_eq!(
        line,
        &format!(
            "handover cluster cancel {job} then claim lab --gpus 2 --node {node} --devices 0,1 --project "
        )
    );
    // The operator names the project and runs it: the confirmation lists both steps.
    typed(&mut st, "deadline");
    key(&mut st, KeyCode::Enter);
    let Mode::Confirm(c) = &st.mode else {
        panic!("{:?} {}", st.mode, flash(&st))
    };
    assert_eq!(c.steps().len(), 2);
    assert_eq!(c.type_to_confirm.as_deref(), Some(job.as_str()));
    // Nothing selected: it says what to do.
    let mut st = state(false);
    show_view(&mut st, View::Gpus);
    key(&mut st, KeyCode::Char('H'));
    assert!(flash(&st).contains("select a claim of a Slurm, BOINC or Ray source"));
    // `:handover` alone reopens nothing yet and says how to write one.
    command(&mut st, "handover");
    assert!(flash(&st).starts_with("usage: :handover"), "{}", flash(&st));
}

/// The driver's executor: in read-only mode a step that reached it anyway is refused
/// without reaching the source, and the update records it as the failure that stops the
/// rest.
#[tokio::test]
async fn the_executor_refuses_every_step_in_read_only_mode() {
    use gpuboard::console::driver::perform;
    use gpuboard::sources::slurm::{SlurmConfig, SlurmSource};
    let mut st = confirmed();
    // A source that would fail differently if it were asked.
    let mut cfg = SlurmConfig::new("unix:/nonexistent/gpuboard/handover.sock");
    cfg.name = "cluster".into();
    let sources: Vec<Arc<dyn gpuboard::sources::Source>> = vec![
        Arc::new(SlurmSource::new(cfg).unwrap()),
        Arc::new(SlurmSource::new(SlurmConfig::new("unix:/nonexistent/x.sock")).unwrap()),
    ];
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(NOW));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let step = st.flows.handover().unwrap().1.steps[0].clone();
    let run = st.flows.handover().unwrap().0;
    perform(
        Effect::Act {
            source: step.source,
            action: step.action.clone(),
            asker: Asker::Flow { flow: run, step: 0 },
        },
        &sources,
        true,
        Duration::from_secs(5),
        &clock,
        &tx,
    );
    let msg = rx.recv().await.unwrap();
    let Msg::Acted { result, .. } = &msg else {
        panic!("{msg:?}")
    };
    assert!(matches!(result, Err(Failure::ReadOnly(_))), "{result:?}");
    let out = update(&mut st, msg);
    assert!(
        !out.iter().any(|e| matches!(e, Effect::Act { .. })),
        "{out:?}"
    );
    let run = st.flows.handover().unwrap().1;
    assert_eq!(run.failed_at(), Some(0));
    assert_eq!(run.results[1], Some(StepResult::NotRun));
    assert_eq!(run.results[2], Some(StepResult::NotRun));
    assert!(flash(&st).contains("read-only"), "{}", flash(&st));
}

#[test]
fn boinc_gpu_mode_never_then_a_claim_needs_no_typed_id() {
    let mut st = state(false);
    st.sources.push(SourceSlot::new(
        "cruncher",
        "boinc".parse().unwrap(),
        false,
        None,
    ));
    command(
        &mut st,
        "handover gpu-mode never then claim lab --gpus 1 --project render",
    );
    let Mode::Confirm(c) = &st.mode else {
        panic!("{:?} {}", st.mode, flash(&st))
    };
    let got: Vec<(usize, &str)> = c
        .steps()
        .iter()
        .map(|s| (s.source, s.action.verb()))
        .collect();
    assert_eq!(got, vec![(2, "gpu-mode"), (1, "claim")]);
    assert_eq!(c.type_to_confirm, None, "no Slurm cancel in it");
    assert!(
        c.body[0].starts_with("1. cruncher: gpu-mode GPU mode never"),
        "{:?}",
        c.body
    );
    // Confirmed with OK alone: the BOINC step is sent first.
    key(&mut st, KeyCode::Tab);
    let out = key(&mut st, KeyCode::Enter);
    assert_eq!(
        out,
        vec![Effect::Act {
            source: 2,
            action: engine(EngineVerb::BoincGpuMode, "never"),
            asker: Asker::Flow {
                flow: FlowId(1),
                step: 0,
            },
        }]
    );
}

#[test]
fn a_last_claim_without_flags_is_filled_in_the_claim_form() {
    use gpuboard::placement::Allocation;
    let mut st = state(false);
    command(&mut st, "handover cancel 11 then claim lab");
    let Mode::Form(f) = &st.mode else {
        panic!("{:?} {}", st.mode, flash(&st))
    };
    assert_eq!(f.source, 1);
    assert_eq!(f.handover.len(), 1);
    assert!(flash(&st).contains("step 2 of 2"), "{}", flash(&st));
    // Enter previews (the endpoint plans it), Enter again opens the one confirmation.
    let out = key(&mut st, KeyCode::Enter);
    assert!(
        matches!(out[..], [Effect::Plan { source: 1, .. }]),
        "{out:?}"
    );
    update(
        &mut st,
        Msg::Planned {
            source: 1,
            result: Ok(Allocation {
                node: "gpunode".into(),
                shares: Vec::new(),
                cpus: None,
            }),
        },
    );
    assert!(
        key(&mut st, KeyCode::Enter).is_empty(),
        "nothing sent before OK"
    );
    let Mode::Confirm(c) = &st.mode else {
        panic!("{:?} {}", st.mode, flash(&st))
    };
    assert_eq!(c.steps().len(), 2);
    assert_eq!(c.steps()[1].source, 1);
    assert!(matches!(c.steps()[1].action, Action::Claim { .. }));
    assert!(c.body[1].starts_with("2. lab: claim "), "{:?}", c.body);
    assert_eq!(c.type_to_confirm.as_deref(), Some("11"));
    // Cancel goes back to the form, its steps kept.
    key(&mut st, KeyCode::Esc);
    let Mode::Form(f) = &st.mode else {
        panic!("{:?}", st.mode)
    };
    assert_eq!(f.handover.len(), 1);

    // Refusals, nothing sent.
    for (readonly, text, words) in [
        (true, "handover cancel 11 then claim lab", "read-only"),
        (
            false,
            "handover claim lab then cancel 11",
            "must be the last step",
        ),
        (false, "handover claim lab", "give a step before the claim"),
    ] {
        let mut st = state(readonly);
        assert!(command(&mut st, text).is_empty());
        assert_eq!(st.mode, Mode::Normal, "{text}");
        assert!(flash(&st).contains(words), "{text}: {}", flash(&st));
    }
}
