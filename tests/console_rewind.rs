//! The console rewound, through `update` and the views: `g` and a time ask each source
//! for its state then; the rewound fleet is a second state under a banner, read-only;
//! `}`/`{`, `]`/`[` and space move the time shown; G returns to the live state as the watch
//! kept it, in the view looked at; a source whose history begins later says so. Snapshots of the
//! banner and the GPU detail's charts at 80x24 and 120x40.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::console_fixtures;

use console_fixtures::{NOW, code, feed, k, lab_snapshot, lab_state, run};
use gpuboard::clock::Timestamp;
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::keymap::KeyAction;
use gpuboard::console::msg::{Effect, Msg};
use gpuboard::console::msg::{HistoryAnswer, HistoryAsk};
use gpuboard::console::state::{ChartKey, Mode, SourceSlot, State, View};
use gpuboard::console::theme::Theme;
use gpuboard::console::update::{show_view, update};
use gpuboard::ids::ClaimId;
use gpuboard::snapshot::Snapshot;
use gpuboard::sources::history::{AtTime, Sample};
use gpuboard::units::Bytes;
use gpuboard::wire::history::{Direction, GpuRef, Target};
use ratatui::crossterm::event::KeyCode;

/// The time rewound to: 11:47:00, 13 minutes before the fixtures' now.
const THEN: Timestamp = Timestamp(NOW.0 - 13 * 60_000);

fn text(st: &State, w: u16, h: u16) -> String {
    buffer_text(&render(st, &Theme::plain(), w, h).unwrap())
}

/// Types `g`, the time and Enter.
fn rewind(st: &mut State, time: &str) -> Vec<Effect> {
    let mut msgs = vec![k('g')];
    msgs.extend(time.chars().map(k));
    msgs.push(code(KeyCode::Enter));
    run(st, msgs)
}

/// The fleet then: the lab without its pending claim (it came later).
fn then_snapshot() -> Snapshot {
    let mut s = lab_snapshot();
    s.claims.retain(|c| c.node.is_some());
    s
}

/// The fleet now: the lab with every claim released.
fn live_snapshot() -> Snapshot {
    let mut s = lab_snapshot();
    s.claims.clear();
    for d in s.nodes.iter_mut().flat_map(|n| n.devices.iter_mut()) {
        d.holders.clear();
    }
    s
}

/// Answers every `At` ask among `effects` with `answer(source)`.
fn answer_at(st: &mut State, effects: &[Effect], answer: impl Fn(usize) -> Option<AtTime>) {
    for e in effects {
        if let Effect::History(HistoryAsk::At {
            source, generation, ..
        }) = e
        {
            update(
                st,
                Msg::History(HistoryAnswer::At {
                    source: *source,
                    generation: *generation,
                    result: answer(*source).map(Ok),
                }),
            );
        }
    }
}

fn shown_then() -> AtTime {
    AtTime::Shown {
        snapshot: Box::new(then_snapshot()),
        at: Timestamp(THEN.0 - 2_000),
    }
}

fn rewound_lab() -> State {
    let mut st = lab_state();
    let effects = rewind(&mut st, "11:47");
    answer_at(&mut st, &effects, |_| Some(shown_then()));
    st
}

fn shown(st: &State) -> &State {
    &st.rewind.as_ref().expect("rewound").shown
}

fn shown_flash(st: &State) -> String {
    shown(st)
        .flash
        .as_ref()
        .map(|f| f.text.clone())
        .unwrap_or_default()
}

fn asks(effects: &[Effect]) -> Vec<HistoryAsk> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::History(a) => Some(a.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn g_and_a_time_ask_every_source_for_its_state_then() {
    let mut st = lab_state();
    let effects = rewind(&mut st, "11:47");
    assert_eq!(
        asks(&effects),
        vec![HistoryAsk::At {
            source: 0,
            generation: 1,
            at: THEN
        }]
    );
    assert_eq!(st.rewind.as_ref().unwrap().at, THEN);
    assert_eq!(st.mode, Mode::Normal);
    // Until the answer: loading, never the live data under the banner.
    let screen = text(&st, 80, 24);
    assert!(
        screen.contains("REWIND") && screen.contains("1 loading"),
        "{screen}"
    );
    assert!(!screen.contains("lab-a"), "{screen}");
    answer_at(&mut st, &effects, |_| Some(shown_then()));
    let screen = text(&st, 120, 40);
    assert!(screen.contains("2024-03-01 11:47:00 UTC"), "{screen}");
    assert!(screen.contains("13m behind live"), "{screen}");
    assert!(screen.contains("lab as of 11:46:58"), "{screen}");
}

#[test]
fn a_time_that_is_not_one_keeps_the_prompt_and_says_what_is_allowed() {
    let mut st = lab_state();
    let effects = rewind(&mut st, "quarter past");
    assert!(asks(&effects).is_empty());
    assert!(st.rewind.is_none());
    assert_eq!(st.mode, Mode::RewindTo("quarter past".into()));
    let screen = text(&st, 120, 40);
    assert!(
        screen.contains("rewind to: quarter past") && screen.contains("-10m"),
        "{screen}"
    );
    // In the future: refused the same way; Esc closes the prompt.
    run(&mut st, vec![code(KeyCode::Esc)]);
    let effects = rewind(&mut st, "-0m");
    assert_eq!(asks(&effects).len(), 1, "now itself is allowed");
    let mut st = lab_state();
    rewind(&mut st, "2024-03-02 00:00");
    assert!(st.rewind.is_none());
    assert!(
        st.flash.as_ref().unwrap().text.contains("in the future"),
        "{:?}",
        st.flash
    );
}

#[test]
fn the_banner_over_the_rewound_views() {
    let mut st = rewound_lab();
    for (w, h) in [(80, 24), (120, 40)] {
        insta::assert_snapshot!(format!("rewound_gpus_{w}x{h}"), text(&st, w, h));
    }
    run(&mut st, vec![k('3')]);
    insta::assert_snapshot!("rewound_claims_80x24", text(&st, 80, 24));
    // Too small for the banner: never the live state without it.
    let small = text(&st, 40, 9);
    assert!(
        small.contains("REWIND") && small.contains("too small"),
        "{small}"
    );
}

/// Keys of every action that changes a source (a new one must be added here).
fn action_keys(a: KeyAction) -> Vec<Msg> {
    match a {
        KeyAction::Claim => vec![k('c')],
        KeyAction::Release => vec![k('r')],
        KeyAction::Move => vec![k('m')],
        KeyAction::Cordon => vec![k('x')],
        KeyAction::ClearBackoff => vec![k('b')],
        KeyAction::EngineAct => vec![k('E')],
        KeyAction::HandOver => vec![k('H')],
        other => panic!("no keys for {other:?}: add them to this test"),
    }
}

#[test]
fn every_action_is_refused_while_rewound() {
    let want = "rewound to 11:47:00: actions act on the present; G returns to live";
    for view in [View::Gpus, View::Claims, View::Ledger, View::Detail] {
        for a in KeyAction::ALL.iter().filter(|a| a.mutates()) {
            let mut st = rewound_lab();
            run(&mut st, vec![k('2'), code(KeyCode::Enter)]);
            if view != View::Detail {
                show_view(&mut st.rewind.as_mut().unwrap().shown, view);
            }
            let effects = run(&mut st, action_keys(*a));
            assert!(
                effects
                    .iter()
                    .all(|e| !matches!(e, Effect::Act { .. } | Effect::Plan { .. })),
                "{a:?} in {view:?}: {effects:?}"
            );
            assert_eq!(shown_flash(&st), want, "{a:?} in {view:?}");
            assert_eq!(shown(&st).mode, Mode::Normal, "{a:?}: nothing opened");
        }
    }
    // The command line too.
    for cmd in ["release 1", "cordon", "reset vision", "claim"] {
        let mut st = rewound_lab();
        let mut msgs = vec![k(':')];
        msgs.extend(cmd.chars().map(k));
        msgs.push(code(KeyCode::Enter));
        let effects = run(&mut st, msgs);
        assert!(
            effects
                .iter()
                .all(|e| !matches!(e, Effect::Act { .. } | Effect::Plan { .. })),
            "{cmd}: {effects:?}"
        );
        assert!(
            matches!(shown(&st).mode, Mode::Normal | Mode::Command(_)),
            "{cmd}: {:?}",
            shown(&st).mode
        );
    }
}

#[test]
fn live_resumes_where_the_watch_left_off_in_the_view_looked_at() {
    // Two consoles watching the same source; one rewinds and browses meanwhile.
    let mut watched = lab_state();
    let mut rewound = lab_state();
    for st in [&mut watched, &mut rewound] {
        run(st, vec![k('3'), k('j'), k('j')]);
    }
    let effects = rewind(&mut rewound, "11:47");
    answer_at(&mut rewound, &effects, |_| Some(shown_then()));
    run(
        &mut rewound,
        vec![k('2'), k('j'), code(KeyCode::Enter), k('/'), k('x')],
    );
    // The watch goes on underneath: a change arrives, time passes.
    for st in [&mut watched, &mut rewound] {
        feed(st, 0, live_snapshot(), NOW.0 + 1_000);
        update(st, Msg::Tick(Timestamp(NOW.0 + 2_000)));
    }
    // The rewound views showed the fleet then, not the change.
    assert_eq!(
        shown(&rewound).sources[0].data.as_deref(),
        Some(&then_snapshot())
    );
    run(&mut rewound, vec![code(KeyCode::Esc)]);
    let browsed = shown(&rewound).clone();
    assert_eq!(browsed.view, View::Detail);
    run(&mut rewound, vec![k('G')]);
    assert!(rewound.rewind.is_none());
    // Live data, as the watch kept it; the view, filter and selection looked at.
    assert_eq!(rewound.view, View::Detail);
    watched.browse_as(&browsed);
    assert_eq!(rewound.sources, watched.sources);
    assert_eq!(
        (
            &rewound.gpus,
            &rewound.claims,
            &rewound.projects,
            &rewound.detail
        ),
        (
            &watched.gpus,
            &watched.claims,
            &watched.projects,
            &watched.detail
        )
    );
    assert_eq!(rewound.totals, watched.totals);
    assert_eq!(rewound.sources[0].data.as_deref(), Some(&live_snapshot()));
}

#[test]
fn esc_backs_out_of_the_rewound_views_then_returns_to_live() {
    let mut st = rewound_lab();
    run(&mut st, vec![k('2'), code(KeyCode::Enter)]);
    assert_eq!(shown(&st).view, View::Detail);
    run(&mut st, vec![code(KeyCode::Esc)]);
    assert_eq!(shown(&st).view, View::Gpus);
    assert!(st.rewind.is_some());
    run(&mut st, vec![code(KeyCode::Esc)]);
    assert!(st.rewind.is_none());
    assert!(!text(&st, 80, 24).contains("REWIND"));
}

#[test]
fn a_time_before_a_sources_history_says_where_it_begins() {
    let mut st = State::new(
        vec![
            SourceSlot::new("lab", gpuboard::sources::SourceKind::Embedded, true, None),
            SourceSlot::new("late", gpuboard::sources::SourceKind::Gpuboard, true, None),
            SourceSlot::new("ray1", gpuboard::sources::SourceKind::Ray, false, None),
        ],
        gpuboard::console::keymap::Keymap::builtin(),
        2_000,
        false,
    );
    st.zone = jiff::tz::TimeZone::UTC;
    update(&mut st, Msg::Tick(NOW));
    for i in 0..3 {
        feed(&mut st, i, lab_snapshot(), NOW.0 - 1_000);
    }
    let effects = rewind(&mut st, "11:47");
    assert_eq!(asks(&effects).len(), 3);
    let begins = Timestamp(NOW.0 - 5 * 60_000);
    answer_at(&mut st, &effects, |s| match s {
        0 => Some(shown_then()),
        1 => Some(AtTime::Before { from: begins }),
        _ => None,
    });
    let screen = text(&st, 120, 40);
    assert!(
        screen.contains("late: history begins 2024-03-01 11:55:00"),
        "{screen}"
    );
    assert!(
        screen.contains("ray1: no history for this source"),
        "{screen}"
    );
    insta::assert_snapshot!("rewound_before_history_120x40", screen);
    // Alone, the late source is no blank screen either: it says where its history begins.
    run(&mut st, vec![k('o'), k('o')]);
    let screen = text(&st, 80, 24);
    assert!(
        screen.contains("its history begins at 2024-03-01 11:55:00"),
        "{screen}"
    );
    insta::assert_snapshot!("rewound_before_history_alone_80x24", screen);
}

fn sought(st: &mut State, effects: &[Effect], found: Option<Timestamp>) -> Vec<Effect> {
    let mut out = Vec::new();
    for e in effects {
        if let Effect::History(HistoryAsk::Seek {
            source, generation, ..
        }) = e
        {
            out.extend(update(
                st,
                Msg::History(HistoryAnswer::Sought {
                    source: *source,
                    generation: *generation,
                    result: Some(Ok(found)),
                }),
            ));
        }
    }
    out
}

#[test]
fn next_and_previous_change_follow_the_gpu_in_detail() {
    let mut st = rewound_lab();
    run(&mut st, vec![k('2'), code(KeyCode::Enter)]);
    let effects = run(&mut st, vec![k('}')]);
    let gpu = Some(Target::Gpu(GpuRef {
        node: "lab-a".into(),
        index: 0,
    }));
    assert_eq!(
        asks(&effects),
        vec![HistoryAsk::Seek {
            source: 0,
            generation: 2,
            at: THEN.plus_millis(1),
            dir: Direction::Next,
            what: gpu.clone(),
        }]
    );
    let next = THEN.plus_millis(125_000);
    let effects = sought(&mut st, &effects, Some(next));
    assert!(
        asks(&effects).contains(&HistoryAsk::At {
            source: 0,
            generation: 3,
            at: next
        }),
        "{effects:?}"
    );
    assert_eq!(st.rewind.as_ref().unwrap().at, next);
    assert_eq!(shown_flash(&st), "next change of GPU lab-a:0: 11:49:05");
    // The detail stays on the GPU; `{` looks before the time shown.
    assert_eq!(shown(&st).view, View::Detail);
    let effects = run(&mut st, vec![k('{')]);
    assert!(
        asks(&effects).contains(&HistoryAsk::Seek {
            source: 0,
            generation: 4,
            at: Timestamp(next.0 - 1),
            dir: Direction::Prev,
            what: gpu,
        }),
        "{effects:?}"
    );
    sought(&mut st, &effects, None);
    assert_eq!(
        shown_flash(&st),
        "no earlier change of GPU lab-a:0 in the history"
    );
    assert_eq!(st.rewind.as_ref().unwrap().at, next);
    // A claim selected in Claims: its changes.
    run(&mut st, vec![code(KeyCode::Esc), k('3')]);
    let effects = run(&mut st, vec![k('}')]);
    assert!(
        matches!(
            &asks(&effects)[..],
            [HistoryAsk::Seek {
                what: Some(Target::Claim(ClaimId(_))),
                ..
            }]
        ),
        "{effects:?}"
    );
}

/// A change recorded in the last second, past the console's clock (it moves a second at a
/// time): `}` shows it at its time, not the state just before it.
#[test]
fn a_change_found_past_the_consoles_clock_is_shown_at_its_time() {
    let mut st = rewound_lab();
    run(&mut st, vec![k('2'), code(KeyCode::Enter)]);
    let effects = run(&mut st, vec![k('}')]);
    let found = st.now.plus_millis(400);
    let effects = sought(&mut st, &effects, Some(found));
    assert_eq!(st.rewind.as_ref().unwrap().at, found);
    assert!(
        asks(&effects)
            .iter()
            .any(|a| matches!(a, HistoryAsk::At { at, .. } if *at == found)),
        "{effects:?}"
    );
    // A step past now is still now.
    run(&mut st, vec![k(']')]);
    assert_eq!(st.rewind.as_ref().unwrap().at, st.now);
}

#[test]
fn steps_and_play_move_the_time_shown() {
    let mut st = rewound_lab();
    let at = |st: &State| st.rewind.as_ref().unwrap().at;
    run(&mut st, vec![k(']')]);
    assert_eq!(at(&st), THEN.plus_millis(5_000));
    run(&mut st, vec![k('['), k('[')]);
    assert_eq!(at(&st), Timestamp(THEN.0 - 5_000));
    // Play: ten seconds of history a second, faster with `+`.
    run(&mut st, vec![k(' ')]);
    let effects = update(&mut st, Msg::Tick(NOW.plus_millis(1_000)));
    assert_eq!(at(&st), THEN.plus_millis(5_000));
    assert_eq!(asks(&effects).len(), 1);
    run(&mut st, vec![k('+')]);
    update(&mut st, Msg::Tick(NOW.plus_millis(2_000)));
    assert_eq!(at(&st), THEN.plus_millis(35_000));
    assert!(text(&st, 120, 40).contains("▶ 30x"));
    // Playing up to live stops there.
    run(&mut st, vec![k('+'), k('+'), k('+'), k('+')]);
    for s in 3..10 {
        update(&mut st, Msg::Tick(NOW.plus_millis(s * 1_000)));
    }
    let r = st.rewind.as_ref().unwrap();
    assert!(!r.playing);
    assert!(r.at <= NOW.plus_millis(9_000));
    // A step never passes live.
    run(&mut st, vec![k(']'), k(']'), k(']')]);
    assert!(at(&st) <= st.now);
}

#[test]
fn an_answer_older_than_the_one_shown_is_dropped() {
    let mut st = lab_state();
    let first = rewind(&mut st, "11:47");
    let second = run(&mut st, vec![k(']')]);
    answer_at(&mut st, &second, |_| Some(shown_then()));
    answer_at(&mut st, &first, |_| {
        Some(AtTime::Shown {
            snapshot: Box::new(live_snapshot()),
            at: THEN,
        })
    });
    assert_eq!(
        shown(&st).sources[0].data.as_deref(),
        Some(&then_snapshot())
    );
}

#[test]
fn the_rewind_keys_while_live() {
    let mut st = lab_state();
    run(&mut st, vec![k('G')]);
    assert!(st.flash.as_ref().unwrap().text.contains("live already"));
    assert!(st.rewind.is_none());
    // `[` rewinds one sample from now; `{` to the previous change.
    let effects = run(&mut st, vec![k('[')]);
    assert_eq!(st.rewind.as_ref().unwrap().at, Timestamp(NOW.0 - 5_000));
    assert_eq!(asks(&effects).len(), 1);
    let mut st = lab_state();
    let effects = run(&mut st, vec![k('{')]);
    assert!(
        asks(&effects).iter().any(|a| matches!(
            a,
            HistoryAsk::Seek {
                dir: Direction::Prev,
                ..
            }
        )),
        "{effects:?}"
    );
}

/// An hour of 5 s samples: a claim of 10 GiB from 11:20 to 11:45, load while it held.
fn hour_of_samples(from: Timestamp) -> Vec<Sample> {
    (0..720u64)
        .map(|i| {
            let at = from.plus_millis(i * 5_000);
            let held = (240..540).contains(&i);
            Sample {
                at,
                utilization_gpu: Some(if held {
                    60 + u32::try_from(i % 30).unwrap()
                } else {
                    2
                }),
                memory_used: Some(Bytes::gib(if held { 8 } else { 1 })),
                memory_reserved: Bytes::gib(if held { 10 } else { 0 }),
                power_mw: Some(if held { 250_000 } else { 60_000 }),
                temperature_c: Some(50),
                ..Sample::default()
            }
        })
        .collect()
}

fn answer_charts(st: &mut State, effects: &[Effect]) -> ChartKey {
    let mut key = None;
    for a in asks(effects) {
        if let HistoryAsk::Telemetry { rewound, key: k } = a {
            update(
                st,
                Msg::History(HistoryAnswer::Telemetry {
                    rewound,
                    key: k.clone(),
                    result: Some(Ok(hour_of_samples(k.from))),
                }),
            );
            key = Some(k);
        }
    }
    key.expect("the charts were asked for")
}

#[test]
fn gpu_detail_charts_the_last_hour_live_and_the_hour_around_the_time_shown() {
    let mut st = lab_state();
    let effects = run(&mut st, vec![k('2'), code(KeyCode::Enter)]);
    let key = answer_charts(&mut st, &effects);
    assert_eq!(key.to.0 - key.from.0, 3_600_000);
    assert_eq!((key.node.as_str(), key.index), ("lab-a", 0));
    for (w, h) in [(80, 24), (120, 40)] {
        insta::assert_snapshot!(format!("detail_charts_live_{w}x{h}"), text(&st, w, h));
    }
    // A new minute moves the window once; within the minute nothing is asked again.
    let effects = update(&mut st, Msg::Tick(NOW.plus_millis(10)));
    let key = answer_charts(&mut st, &effects);
    assert_eq!(key.to, NOW.plus_millis(60_000));
    assert!(asks(&update(&mut st, Msg::Tick(NOW.plus_millis(20_000)))).is_empty());
    // Rewound: its own charts, the hour around 10:30, the live ones kept.
    let effects = rewind(&mut st, "10:30");
    answer_at(&mut st, &effects, |_| Some(shown_then()));
    let rk = answer_charts(&mut st, &effects);
    let ten = Timestamp(NOW.0 - 2 * 3_600_000);
    assert_eq!((rk.from, rk.to), (ten, ten.plus_millis(3_600_000)));
    assert!(asks(&update(&mut st, Msg::Tick(NOW.plus_millis(30_000)))).is_empty());
    assert_eq!(st.charts.as_ref().unwrap().key, key);
    for (w, h) in [(80, 24), (120, 40)] {
        insta::assert_snapshot!(format!("detail_charts_rewound_{w}x{h}"), text(&st, w, h));
    }
}

#[test]
fn a_time_then_a_gpu_rewinds_to_that_gpus_detail_in_one_line() {
    let mut st = lab_state();
    // `g`, the time and the GPU, Enter: three keys beside what is named.
    let effects = rewind(&mut st, "11:47 lab-b:0");
    assert!(st.rewind.is_some(), "{:?}", st.flash);
    answer_at(&mut st, &effects, |_| Some(shown_then()));
    assert_eq!(shown(&st).view, View::Detail);
    assert_eq!(shown(&st).detail, Some((0, "lab-b".to_string(), 0)));
    // A GPU that is not there: said, and nothing rewound.
    let mut st = lab_state();
    let _ = rewind(&mut st, "11:47 lab-z:0");
    assert!(st.rewind.is_none());
    assert!(matches!(st.mode, Mode::RewindTo(_)));
}

#[test]
fn the_rewound_gpus_carry_the_flags_they_had_then_not_the_live_ones() {
    use gpuboard::snapshot::{DeviceTelemetry, ProcessView};
    let unexplained = |st: &State| -> Vec<String> {
        st.physical_fleet()
            .gpus
            .iter()
            .filter(|g| g.has_flag("unexplained"))
            .map(|g| g.place())
            .collect()
    };
    let mut st = lab_state();
    assert_eq!(unexplained(&st), ["lab-b:0"], "now: the stray notebook");
    let effects = rewind(&mut st, "11:47");
    // Then, the stray notebook was not there yet, and another process no claim accounts
    // for ran on lab-a:0.
    let mut then = then_snapshot();
    for d in then.nodes.iter_mut().flat_map(|n| n.devices.iter_mut()) {
        if let Some(t) = d.telemetry.as_mut() {
            t.processes.retain(|p| p.claim.is_some());
        }
    }
    then.nodes[0].devices[0].telemetry = Some(DeviceTelemetry {
        utilization_gpu: Some(60),
        processes: vec![ProcessView {
            pid: 4343,
            name: Some("rogue".into()),
            used_memory: Some(Bytes(1 << 30)),
            claim: None,
            owner: None,
        }],
        ..DeviceTelemetry::default()
    });
    answer_at(&mut st, &effects, |_| {
        Some(AtTime::Shown {
            snapshot: Box::new(then.clone()),
            at: THEN,
        })
    });
    assert_eq!(unexplained(shown(&st)), ["lab-a:0"]);
    assert_eq!(unexplained(&st), ["lab-b:0"], "live is untouched");
}
