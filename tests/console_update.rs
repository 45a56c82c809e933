//! Table-driven tests of the pure `update`: every action, every source result (including
//! errors and stale data), read-only refusals; and the driver's executor refusing actions
//! in read-only mode whatever it is asked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::console_fixtures;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use console_fixtures::{NOW, acts, code, flash, k, lab_snapshot, lab_state, run};
use futures::future::BoxFuture;
use gpuboard::clock::{Clock, ManualClock, Timestamp};
use gpuboard::console::msg::{Asker, Effect, Msg};
use gpuboard::console::state::{FormStage, Mode, SourceHealth, View};
use gpuboard::console::update::{complete, show_view};
use gpuboard::ids::ClaimId;
use gpuboard::placement::{Allocation, DeviceShare, MoveTarget};
use gpuboard::request::{ClaimRequest, GpuForm};
use gpuboard::snapshot::Snapshot;
use gpuboard::sources::{Action, Failure, Fetched, Outcome, Source};
use gpuboard::units::{Bytes, Slots, Units};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

#[test]
fn actions_produce_the_right_effects() {
    // (name, view, keys, expected action)
    let cases: Vec<(&str, View, Vec<Msg>, Option<Action>)> = vec![
        (
            "release needs OK focused",
            View::Claims,
            vec![k('r'), code(KeyCode::Tab), code(KeyCode::Enter)],
            Some(Action::Release { id: ClaimId(1) }),
        ),
        (
            "release: Enter on the focused Cancel does nothing",
            View::Claims,
            vec![k('r'), code(KeyCode::Enter)],
            None,
        ),
        (
            "release: Esc cancels",
            View::Claims,
            vec![
                k('r'),
                code(KeyCode::Right),
                code(KeyCode::Esc),
                code(KeyCode::Enter),
            ],
            None,
        ),
        (
            "move to the first other GPU, confirmed",
            View::Claims,
            // Neither other GPU can take its 10 GiB: the emptiest comes first, not
            // lab-a:1, which a whole-GPU claim fills.
            vec![
                k('m'),
                code(KeyCode::Enter),
                code(KeyCode::Tab),
                code(KeyCode::Enter),
            ],
            Some(Action::Move {
                id: ClaimId(1),
                target: MoveTarget {
                    node: Some("lab-b".into()),
                    devices: Some(vec![0]),
                },
            }),
        ),
        (
            "cordon the selected GPU, confirmed",
            View::Gpus,
            vec![k('x'), code(KeyCode::Tab), code(KeyCode::Enter)],
            Some(Action::Cordon {
                node: "lab-a".into(),
                index: 0,
                cordoned: true,
            }),
        ),
        (
            "uncordon a cordoned GPU, confirmed",
            View::Gpus,
            vec![
                code(KeyCode::End),
                k('x'),
                code(KeyCode::Tab),
                code(KeyCode::Enter),
            ],
            Some(Action::Cordon {
                node: "lab-b".into(),
                index: 1,
                cordoned: false,
            }),
        ),
        (
            "cordon by command",
            View::Gpus,
            vec![
                k(':'),
                k('c'),
                k('o'),
                k('r'),
                k('d'),
                k('o'),
                k('n'),
                code(KeyCode::Enter),
                code(KeyCode::Tab),
                code(KeyCode::Enter),
            ],
            Some(Action::Cordon {
                node: "lab-a".into(),
                index: 0,
                cordoned: true,
            }),
        ),
        (
            "clear a project's backoff, confirmed",
            View::Ledger,
            vec![
                k('j'),
                k('j'),
                k('b'),
                code(KeyCode::Tab),
                code(KeyCode::Enter),
            ],
            Some(Action::ResetProject {
                project: "robotics".into(),
            }),
        ),
        (
            "key releases are ignored",
            View::Gpus,
            vec![Msg::Key(KeyEvent::new_with_kind(
                KeyCode::Char('x'),
                KeyModifiers::NONE,
                KeyEventKind::Release,
            ))],
            None,
        ),
    ];
    for (name, view, keys, want) in cases {
        let mut st = lab_state();
        show_view(&mut st, view);
        let got = acts(&run(&mut st, keys));
        assert_eq!(got, want.clone().into_iter().collect::<Vec<_>>(), "{name}");
        // The same keys in read-only mode never produce an action, and say why.
        let mut ro = lab_state();
        ro.readonly = true;
        show_view(&mut ro, view);
        let again: Vec<Msg> = match name {
            "release needs OK focused" => vec![k('r'), code(KeyCode::Tab), code(KeyCode::Enter)],
            "move to the first other GPU, confirmed" => vec![k('m'), code(KeyCode::Enter)],
            "cordon the selected GPU, confirmed" => vec![k('x')],
            "clear a project's backoff, confirmed" => vec![k('j'), k('j'), k('b')],
            _ => continue,
        };
        assert!(acts(&run(&mut ro, again)).is_empty(), "{name} in read-only");
        assert!(flash(&ro).contains("read-only"), "{name}: {}", flash(&ro));
    }
}

#[test]
fn claim_form_round_trip() {
    let mut st = lab_state();
    let eff = run(&mut st, vec![k('c')]);
    assert!(eff.is_empty());
    assert!(matches!(st.mode, Mode::Form(_)));
    // Enter asks for a preview, not a claim.
    let eff = run(&mut st, vec![code(KeyCode::Enter)]);
    let [Effect::Plan { source: 0, request }] = eff.as_slice() else {
        panic!("{eff:?}")
    };
    assert_eq!(
        request.gpu,
        Some(GpuForm::RayMemory {
            memory: Bytes::gib(10)
        })
    );
    // A refusal from the planner is shown in the form in its words.
    run(
        &mut st,
        vec![Msg::Planned {
            source: 0,
            result: Err(Failure::Refused(
                "does not fit now: node lab-a: 2/2 GPUs insufficient memory".into(),
            )),
        }],
    );
    let Mode::Form(f) = &st.mode else { panic!() };
    assert_eq!(f.stage, FormStage::Editing);
    assert!(
        f.error
            .as_deref()
            .unwrap()
            .contains("2/2 GPUs insufficient memory")
    );
    // Preview, then confirm.
    run(&mut st, vec![code(KeyCode::Enter)]);
    run(
        &mut st,
        vec![Msg::Planned {
            source: 0,
            result: Ok(Allocation {
                node: "lab-a".into(),
                shares: vec![DeviceShare {
                    device: 0,
                    memory: Bytes::gib(10),
                    compute: Units(2500),
                    slots: Slots(1),
                }],
                cpus: None,
            }),
        }],
    );
    let Mode::Form(f) = &st.mode else { panic!() };
    assert!(
        matches!(&f.stage, FormStage::Preview(p) if p.starts_with("lab-a:0")),
        "{:?}",
        f.stage
    );
    // Editing a field drops the preview.
    run(&mut st, vec![k('0'), code(KeyCode::Backspace)]);
    let Mode::Form(f) = &st.mode else { panic!() };
    assert_eq!(f.stage, FormStage::Editing);
    run(&mut st, vec![code(KeyCode::Enter)]);
    run(
        &mut st,
        vec![Msg::Planned {
            source: 0,
            result: Ok(Allocation {
                node: "lab-a".into(),
                shares: vec![],
                cpus: None,
            }),
        }],
    );
    let eff = run(&mut st, vec![code(KeyCode::Enter)]);
    let got = acts(&eff);
    assert!(
        matches!(&got[..], [Action::Claim { request }] if request.gpu == Some(GpuForm::RayMemory { memory: Bytes::gib(10) })),
        "{got:?}"
    );
    // The source's refusal goes back into the form, in its words.
    let refused = Msg::Acted {
        source: 0,
        action: got[0].clone(),
        asker: Asker::Form,
        result: Err(Failure::Invalid(
            "rule 7 (out of range): gpu_memory must be positive".into(),
        )),
    };
    run(&mut st, vec![refused]);
    let Mode::Form(f) = &st.mode else { panic!() };
    assert!(
        f.error.as_deref().unwrap().contains("rule 7"),
        "{:?}",
        f.error
    );
    // Success closes the form, says where it went, and refetches.
    let mut view = lab_snapshot().claims[0].clone();
    view.id = ClaimId(9);
    let eff = run(
        &mut st,
        vec![Msg::Acted {
            source: 0,
            action: got[0].clone(),
            asker: Asker::Form,
            result: Ok(Outcome::Claimed(Box::new(view))),
        }],
    );
    assert_eq!(st.mode, Mode::Normal);
    assert!(
        flash(&st).contains("claim 9 placed at lab-a:0"),
        "{}",
        flash(&st)
    );
    assert_eq!(eff, vec![Effect::Fetch(0)]);
}

#[test]
fn move_and_release_results() {
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    let eff = run(
        &mut st,
        vec![
            k('m'),
            code(KeyCode::Enter),
            code(KeyCode::Tab),
            code(KeyCode::Enter),
        ],
    );
    let action = acts(&eff).remove(0);
    run(
        &mut st,
        vec![Msg::Acted {
            source: 0,
            action: action.clone(),
            asker: Asker::Operator,
            result: Err(Failure::Refused(
                "the target does not fit: node lab-a: 1/1 GPUs exclusive".into(),
            )),
        }],
    );
    let Mode::Move(m) = &st.mode else {
        panic!("{:?}", st.mode)
    };
    assert!(m.error.as_deref().unwrap().contains("exclusive"));
    run(
        &mut st,
        vec![Msg::Acted {
            source: 0,
            action,
            asker: Asker::Operator,
            result: Ok(Outcome::Moved {
                id: ClaimId(1),
                from: "lab-a:0".into(),
                to: "lab-b:0".into(),
            }),
        }],
    );
    assert_eq!(st.mode, Mode::Normal);
    assert!(flash(&st).contains("moved from lab-a:0 to lab-b:0"));
    run(
        &mut st,
        vec![Msg::Acted {
            source: 0,
            action: Action::Release { id: ClaimId(4) },
            asker: Asker::Operator,
            result: Err(Failure::Timeout(2000)),
        }],
    );
    let f = st.flash.clone().unwrap();
    assert!(
        f.error
            && f.text
                .contains("release claim 4 refused: no answer within 2000 ms"),
        "{}",
        f.text
    );
}

#[test]
fn source_results_errors_and_staleness() {
    let refresh = 2_000;
    let mut st = lab_state();
    assert_eq!(st.sources[0].health(st.now, refresh), SourceHealth::Ok);
    // Due sources are fetched, one request in flight each.
    let eff = run(&mut st, vec![Msg::Tick(NOW.plus_secs(2))]);
    assert_eq!(eff, vec![Effect::Fetch(0)]);
    let eff = run(&mut st, vec![Msg::Tick(NOW.plus_secs(3))]);
    assert!(eff.is_empty(), "still in flight: {eff:?}");
    // An error keeps the last data, marks it down, and backs off.
    run(
        &mut st,
        vec![Msg::Fetched {
            source: 0,
            at: NOW.plus_secs(3),
            result: Err(Failure::Decode("expected value at line 1".into())),
        }],
    );
    assert!(st.sources[0].data.is_some());
    assert!(
        matches!(st.sources[0].health(st.now, refresh), SourceHealth::Down { ref message, .. } if message.contains("line 1"))
    );
    assert_eq!(st.gpus.rows.len(), 4, "rows stay");
    assert!(st.log.iter().any(|l| l.contains("unreadable answer")));
    let eff = run(&mut st, vec![Msg::Tick(NOW.plus_secs(5))]);
    assert!(eff.is_empty(), "backing off after a failure");
    let eff = run(&mut st, vec![Msg::Tick(NOW.plus_secs(8))]);
    assert_eq!(eff, vec![Effect::Fetch(0)]);
    // Recovery.
    run(
        &mut st,
        vec![Msg::Fetched {
            source: 0,
            at: NOW.plus_secs(8),
            result: Ok(lab_snapshot().into()),
        }],
    );
    assert_eq!(
        st.sources[0].health(NOW.plus_secs(8), refresh),
        SourceHealth::Ok
    );
    // No answer for three intervals: stale, and the screen is redrawn to say so.
    st.dirty = false;
    st.sources[0].in_flight = true;
    run(&mut st, vec![Msg::Tick(NOW.plus_secs(15))]);
    assert!(matches!(
        st.sources[0].health(st.now, refresh),
        SourceHealth::Stale { .. }
    ));
    assert!(st.dirty);
    // Unchanged data does not redraw.
    st.sources[0].in_flight = true;
    run(
        &mut st,
        vec![Msg::Fetched {
            source: 0,
            at: NOW.plus_secs(15),
            result: Ok(lab_snapshot().into()),
        }],
    );
    st.dirty = false;
    st.sources[0].in_flight = true;
    run(
        &mut st,
        vec![Msg::Fetched {
            source: 0,
            at: NOW.plus_secs(16),
            result: Ok(lab_snapshot().into()),
        }],
    );
    assert!(!st.dirty, "same content, fresh source: nothing to draw");
    // Freeze holds new data until unfrozen.
    run(&mut st, vec![k('f')]);
    let mut changed = lab_snapshot();
    changed.claims.truncate(2);
    st.sources[0].in_flight = true;
    run(
        &mut st,
        vec![Msg::Fetched {
            source: 0,
            at: NOW.plus_secs(17),
            result: Ok(changed.into()),
        }],
    );
    assert_eq!(st.claims.rows.len(), 6, "frozen");
    run(&mut st, vec![k('f')]);
    assert_eq!(st.claims.rows.len(), 2, "unfrozen");
    // A result for a source that does not exist is ignored.
    run(
        &mut st,
        vec![Msg::Fetched {
            source: 9,
            at: NOW,
            result: Err(Failure::Timeout(1)),
        }],
    );
}

#[test]
fn unchanged_marks_fresh_and_rebuilds_nothing() {
    let refresh = 2_000;
    let mut st = lab_state();
    run(&mut st, vec![Msg::Tick(NOW.plus_secs(8))]);
    assert!(matches!(
        st.sources[0].health(st.now, refresh),
        SourceHealth::Stale { .. }
    ));
    // Rows are only rebuilt from data: tampered rows stay as they are after `Unchanged`.
    let rows = st.gpus.rows.len();
    st.gpus.rows.truncate(1);
    st.sources[0].in_flight = true;
    st.dirty = false;
    let eff = run(
        &mut st,
        vec![Msg::Fetched {
            source: 0,
            at: NOW.plus_secs(8),
            result: Ok(Fetched::Unchanged),
        }],
    );
    assert!(eff.is_empty(), "{eff:?}");
    assert_eq!(st.sources[0].health(st.now, refresh), SourceHealth::Ok);
    assert_eq!(st.sources[0].fetched_at, Some(NOW.plus_secs(8)));
    assert!(!st.sources[0].in_flight);
    assert!(st.dirty, "stale to fresh is redrawn");
    assert_eq!(st.gpus.rows.len(), 1, "no rebuild on Unchanged");
    // A fresh source answering Unchanged again: nothing to draw.
    st.dirty = false;
    st.sources[0].in_flight = true;
    run(
        &mut st,
        vec![Msg::Fetched {
            source: 0,
            at: NOW.plus_secs(9),
            result: Ok(Fetched::Unchanged),
        }],
    );
    assert!(!st.dirty);
    // Unchanged after a failure clears it.
    st.sources[0].in_flight = true;
    run(
        &mut st,
        vec![Msg::Fetched {
            source: 0,
            at: NOW.plus_secs(10),
            result: Err(Failure::Unreachable {
                detail: "watch stream closed".into(),
                sent: true,
            }),
        }],
    );
    assert!(st.sources[0].is_stale(st.now, refresh));
    st.sources[0].in_flight = true;
    run(
        &mut st,
        vec![Msg::Fetched {
            source: 0,
            at: NOW.plus_secs(10),
            result: Ok(Fetched::Unchanged),
        }],
    );
    assert!(!st.sources[0].is_stale(NOW.plus_secs(10), refresh));
    assert!(st.log.iter().any(|l| l.contains("answering again")));
    // Changed data rebuilds.
    st.sources[0].in_flight = true;
    let mut fewer = lab_snapshot();
    fewer.nodes.truncate(1);
    run(
        &mut st,
        vec![Msg::Fetched {
            source: 0,
            at: NOW.plus_secs(11),
            result: Ok(fewer.into()),
        }],
    );
    assert_ne!(st.gpus.rows.len(), 1);
    assert!(st.gpus.rows.len() < rows);
}

#[test]
fn a_reported_change_is_fetched_at_once_one_at_a_time() {
    let mut st = lab_state();
    st.sources[0].in_flight = false;
    let eff = run(&mut st, vec![Msg::Changed(0)]);
    assert_eq!(eff, vec![Effect::Fetch(0)]);
    // Another change while that fetch is in flight: fetched right after it.
    let eff = run(&mut st, vec![Msg::Changed(0), Msg::Changed(0)]);
    assert!(eff.is_empty(), "single flight: {eff:?}");
    let eff = run(
        &mut st,
        vec![Msg::Fetched {
            source: 0,
            at: NOW,
            result: Ok(Fetched::Unchanged),
        }],
    );
    assert_eq!(eff, vec![Effect::Fetch(0)]);
    assert!(st.sources[0].in_flight);
    let eff = run(
        &mut st,
        vec![Msg::Fetched {
            source: 0,
            at: NOW,
            result: Ok(Fetched::Unchanged),
        }],
    );
    assert!(eff.is_empty(), "{eff:?}");
    assert!(run(&mut st, vec![Msg::Changed(9)]).is_empty());
}

#[test]
fn quitting_filtering_commands_and_sources() {
    for msg in [
        k('q'),
        Msg::Signal("SIGTERM".into()),
        Msg::Signal("SIGHUP".into()),
        Msg::InputClosed("Input/output error (os error 5)".into()),
    ] {
        let mut st = lab_state();
        let eff = run(&mut st, vec![msg.clone()]);
        assert_eq!(eff, vec![Effect::Quit], "{msg:?}");
        assert!(st.quit);
    }
    let mut st = lab_state();
    show_view(&mut st, View::Claims);
    run(&mut st, vec![k('/'), k('v'), k('i'), k('s')]);
    assert_eq!(st.claims.rows.len(), 2, "vision claims");
    run(&mut st, vec![code(KeyCode::Esc)]);
    assert_eq!(st.claims.rows.len(), 6);
    run(
        &mut st,
        vec![k(':'), k('f'), k('a'), k('i'), code(KeyCode::Tab)],
    );
    assert_eq!(st.mode, Mode::Command("fairshare ".into()));
    run(&mut st, vec![code(KeyCode::Enter)]);
    assert_eq!(st.view, View::Ledger);
    assert_eq!(
        complete(&st, "cl"),
        "cl",
        "claim, claims, clear_backoff share `cl`"
    );
    assert_eq!(complete(&st, "sort d"), "sort debt");
    run(&mut st, vec![k(':'), k('z'), code(KeyCode::Enter)]);
    assert!(flash(&st).contains("unknown command `z`"));
    run(&mut st, vec![k(':')]);
    for c in "sort nope".chars() {
        run(&mut st, vec![k(c)]);
    }
    run(&mut st, vec![code(KeyCode::Enter)]);
    assert!(
        flash(&st).contains("sort by: project, debt, pending, share"),
        "{}",
        flash(&st)
    );
    // Sorting claims by memory puts the 40G claim first.
    show_view(&mut st, View::Claims);
    run(&mut st, vec![k('s'), k('s')]);
    let first = st.claim(st.claims.rows[0]).unwrap().1.id;
    assert_eq!(first, ClaimId(4));
    // A read-only source refuses with a message, without a round trip.
    let mut st = lab_state();
    st.sources[0].can_act = false;
    let eff = run(&mut st, vec![k('x')]);
    assert!(acts(&eff).is_empty());
    assert!(flash(&st).contains("read-only"), "{}", flash(&st));
}

/// A source that counts the actions that reach it.
struct Counting(AtomicUsize);

impl Source for Counting {
    fn name(&self) -> &'static str {
        "counting"
    }
    fn kind(&self) -> gpuboard::sources::SourceKind {
        gpuboard::sources::SourceKind::Embedded
    }
    fn can_act(&self) -> bool {
        true
    }
    fn fetch(&self) -> BoxFuture<'static, Result<Fetched, Failure>> {
        Box::pin(async { Ok(Snapshot::default().into()) })
    }
    fn plan(&self, _: ClaimRequest) -> BoxFuture<'static, Result<Allocation, Failure>> {
        Box::pin(async { Err(Failure::Refused("no".into())) })
    }
    fn act(&self, action: Action) -> BoxFuture<'static, Result<Outcome, Failure>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            Ok(Outcome::Reset {
                project: action.target(),
            })
        })
    }
}

#[tokio::test]
async fn the_executor_refuses_every_action_in_read_only_mode() {
    let src = Arc::new(Counting(AtomicUsize::new(0)));
    let sources: Vec<Arc<dyn Source>> = vec![src.clone()];
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp(1)));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let all = [
        Action::Claim {
            request: ClaimRequest::memory(Bytes::gib(1), "default"),
        },
        Action::Release { id: ClaimId(1) },
        Action::Move {
            id: ClaimId(1),
            target: MoveTarget::default(),
        },
        Action::Cordon {
            node: "a".into(),
            index: 0,
            cordoned: true,
        },
        Action::Cordon {
            node: "a".into(),
            index: 0,
            cordoned: false,
        },
        Action::ResetProject {
            project: "p".into(),
        },
    ];
    for action in &all {
        gpuboard::console::driver::perform(
            Effect::Act {
                source: 0,
                action: action.clone(),
                asker: Asker::Operator,
            },
            &sources,
            true,
            Duration::from_secs(1),
            &clock,
            &tx,
        );
        let Some(Msg::Acted { result, .. }) = rx.recv().await else {
            panic!()
        };
        assert!(
            matches!(result, Err(Failure::ReadOnly(_))),
            "{action:?}: {result:?}"
        );
    }
    assert_eq!(
        src.0.load(Ordering::SeqCst),
        0,
        "nothing reached the source"
    );
    gpuboard::console::driver::perform(
        Effect::Act {
            source: 0,
            action: all[1].clone(),
            asker: Asker::Operator,
        },
        &sources,
        false,
        Duration::from_secs(1),
        &clock,
        &tx,
    );
    let Some(Msg::Acted { result, .. }) = rx.recv().await else {
        panic!()
    };
    assert!(result.is_ok());
    assert_eq!(src.0.load(Ordering::SeqCst), 1);
}

/// Types `text` on the `:` line and presses Enter.
fn command_line(st: &mut gpuboard::console::state::State, text: &str) -> Vec<Effect> {
    let mut keys = vec![k(':')];
    keys.extend(text.chars().map(k));
    keys.push(code(KeyCode::Enter));
    run(st, keys)
}

#[test]
fn setting_a_projects_share_asks_what_part_it_would_hold_then_sends_it() {
    let mut st = lab_state();
    let shares: Vec<(String, u32)> = st.sources[0]
        .data
        .as_ref()
        .unwrap()
        .projects
        .iter()
        .map(|p| (p.name.clone(), p.share))
        .collect();
    let total: u32 = shares.iter().map(|(_, s)| s).sum();
    let mine = shares.iter().find(|(n, _)| n == "robotics").unwrap().1;
    assert!(command_line(&mut st, "share robotics 300").is_empty());
    let Mode::Confirm(c) = &st.mode else {
        panic!("a confirmation, not {:?} ({})", st.mode, flash(&st));
    };
    assert!(!c.ok_focused, "Cancel first");
    assert_eq!(
        c.action,
        Action::SetShare {
            project: "robotics".into(),
            share: 300
        }
    );
    let now = f64::from(mine) * 100.0 / f64::from(total);
    let after = 30_000.0 / f64::from(total - mine + 300);
    let said = c.body.join(" | ");
    assert!(
        said.contains(&format!("from {mine} to 300"))
            && said.contains(&format!("holds {now:.0}% of the shares now"))
            && said.contains(&format!("would hold {after:.0}% of the shares")),
        "{said}"
    );
    let sent = acts(&run(
        &mut st,
        vec![code(KeyCode::Tab), code(KeyCode::Enter)],
    ));
    assert_eq!(
        sent,
        vec![Action::SetShare {
            project: "robotics".into(),
            share: 300
        }]
    );
    // Bad input names what was wrong and what is allowed, and asks nothing.
    for (typed, says) in [
        ("share robotics", "usage: share PROJECT N"),
        ("share robotics lots", "share `lots` is not allowed"),
        ("share robotics 1000001", "from 0 to 1000000"),
        ("share nobody 3", "no project `nobody` in view"),
    ] {
        let mut st = lab_state();
        assert!(command_line(&mut st, typed).is_empty(), "{typed}");
        assert!(!matches!(st.mode, Mode::Confirm(_)), "{typed}");
        assert!(flash(&st).contains(says), "{typed}: {}", flash(&st));
    }
    let mut ro = lab_state();
    ro.readonly = true;
    command_line(&mut ro, "share robotics 300");
    assert!(flash(&ro).contains("read-only"), "{}", flash(&ro));
}
