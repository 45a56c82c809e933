//! The Overview's fleet map and sparklines through `update` and the views: snapshots at
//! 80x24, 120x40 and 200x60 of the demo fleet, of 8 000 GPUs with every state (in the
//! default theme and without colour) and of a rewound console; the cursor moving from the
//! totals into the map and Enter opening the GPU; the filter dimming what it excludes; the
//! sparklines' points asked of the history once each (an idle console asks nothing more)
//! and, rewound, ending at the time shown.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{console_fixtures, fleet_map_fixtures};

use console_fixtures::{NOW, code, feed, k, lab_snapshot, lab_state, run};
use fleet_map_fixtures::fleet_map_state;
use gpuboard::clock::Timestamp;
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::msg::{Effect, HistoryAnswer, HistoryAsk, Msg};
use gpuboard::console::state::{
    CellState, MINUTE_MS, State, TrendHistory, TrendPoint, TrendSpan, View,
};
use gpuboard::console::theme::{Theme, load_strict};
use gpuboard::console::update::{rewind_to, show_view, update};
use gpuboard::sources::demo::DemoWorld;
use gpuboard::sources::history::AtTime;
use gpuboard::units::Bytes;
use ratatui::crossterm::event::KeyCode;

const SIZES: [(u16, u16); 3] = [(80, 24), (120, 40), (200, 60)];

fn text(st: &State, theme: &Theme, w: u16, h: u16) -> String {
    buffer_text(&render(st, theme, w, h).unwrap())
}

/// The demo fleet (`--demo`, seed 42) at the fixtures' now, on the Overview.
fn demo_state() -> State {
    let mut world = DemoWorld::new(42).unwrap();
    world.advance(NOW);
    let mut st = State::new(
        vec![gpuboard::console::state::SourceSlot::new(
            "demo",
            "demo".parse().unwrap(),
            true,
            None,
        )],
        gpuboard::console::keymap::Keymap::builtin(),
        2_000,
        false,
    );
    st.zone = jiff::tz::TimeZone::UTC;
    let _ = update(&mut st, Msg::Tick(NOW));
    feed(&mut st, 0, world.snapshot(NOW), NOW.0);
    show_view(&mut st, View::Overview);
    st
}

/// A point whose figures grow with its minute (so each sparkline has a shape).
fn point_at(at: Timestamp) -> TrendPoint {
    let m = (at.0 / MINUTE_MS) % 60;
    TrendPoint {
        gpus: 4,
        cap: Bytes::gib(128).0,
        alloc: Bytes::gib(40 + m).0,
        used: Some(Bytes::gib(20 + m / 2).0),
        compute: 10_000 + m * 400,
        pending: m % 4,
        idle: Some(m % 3),
    }
}

/// Answers every trend ask among `effects` with `point_at`; returns how many times
/// were asked.
fn answer_trends(st: &mut State, effects: &[Effect]) -> usize {
    let mut asked = 0;
    for e in effects {
        if let Effect::History(HistoryAsk::Trend {
            source,
            rewound,
            times,
        }) = e
        {
            asked += times.len();
            let points = times.iter().map(|t| (*t, Some(point_at(*t)))).collect();
            update(
                st,
                Msg::History(HistoryAnswer::Trend {
                    source: *source,
                    rewound: *rewound,
                    result: Some(Ok(points)),
                }),
            );
        }
    }
    asked
}

fn trend_asks(effects: &[Effect]) -> usize {
    effects
        .iter()
        .filter(|e| matches!(e, Effect::History(HistoryAsk::Trend { .. })))
        .count()
}

#[test]
fn the_demo_fleet_at_three_sizes() {
    let th = load_strict("default", &[]).unwrap();
    for (w, h) in SIZES {
        let mut st = demo_state();
        st.size = (w, h);
        insta::assert_snapshot!(format!("map_demo_{w}x{h}"), text(&st, &th, w, h));
    }
}

#[test]
fn eight_thousand_gpus_with_every_state_with_and_without_colour() {
    let st = fleet_map_state(1_000).unwrap();
    // 8 000 GPUs; the one the Slurm job and a demo claim both hold is a cell in each source.
    assert_eq!(st.physical_fleet().gpus.len(), 8_000);
    assert_eq!(st.map.cells.len(), 8_001);
    // The Overview counts it once: physical GPUs, where the join merged devices.
    assert_eq!(st.totals.gpus, 8_000);
    for s in CellState::ALL {
        let n = st.map.counts[s.position()];
        assert!(n > 0, "{s:?} present: {:?}", st.map.counts);
    }
    assert_eq!(st.map.counts[CellState::DoubleBooked.position()], 2);
    for t in ["default", "mono"] {
        let th = load_strict(t, &[]).unwrap();
        for (w, h) in SIZES {
            let mut st = st.clone();
            st.size = (w, h);
            let screen = text(&st, &th, w, h);
            insta::assert_snapshot!(format!("map_8000_{w}x{h}_{t}"), screen);
        }
    }
    // Without colour every state still has its glyph on screen (200x60).
    let th = load_strict("mono", &[]).unwrap();
    let mut big = st.clone();
    big.size = (200, 60);
    let screen = text(&big, &th, 200, 60);
    let map: String = screen
        .lines()
        .skip_while(|l| !l.contains("Fleet map"))
        .take_while(|l| !l.contains("Sources"))
        .collect();
    for s in CellState::ALL {
        assert!(map.contains(s.glyph()), "{s:?} drawn as {}", s.glyph());
    }
}

#[test]
fn a_rewound_console_draws_the_map_then_and_sparklines_ending_at_the_time_shown() {
    let mut st = lab_state();
    show_view(&mut st, View::Overview);
    let then = Timestamp(NOW.0 - 3 * 3_600_000);
    let effects = rewind_to(&mut st, then);
    let mut snap = lab_snapshot();
    snap.claims.retain(|c| c.node.is_some());
    let mut more = Vec::new();
    for e in &effects {
        if let Effect::History(HistoryAsk::At { generation, .. }) = e {
            more.extend(update(
                &mut st,
                Msg::History(HistoryAnswer::At {
                    source: 0,
                    generation: *generation,
                    result: Some(Ok(AtTime::Shown {
                        snapshot: Box::new(snap.clone()),
                        at: Timestamp(then.0 - 2_000),
                    })),
                }),
            ));
        }
    }
    let shown = &st.rewind.as_ref().unwrap().shown;
    assert_eq!(shown.now, then);
    // The rewound Overview asks for the hour before the time shown, nothing after it.
    let times: Vec<Timestamp> = more
        .iter()
        .filter_map(|e| match e {
            Effect::History(HistoryAsk::Trend { rewound, times, .. }) => {
                assert!(*rewound);
                Some(times.clone())
            }
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(times.len(), 59);
    assert!(times.iter().all(|t| *t < then && then.0 - t.0 < 3_600_000));
    answer_trends(&mut st, &more);
    let shown = &st.rewind.as_ref().unwrap().shown;
    let series = shown.trends.series(then, &[0]);
    assert!(series.iter().all(Option::is_some), "every minute known");
    // The live state's sparklines are its own.
    assert!(
        st.trends.series(NOW, &[0])[..59]
            .iter()
            .all(Option::is_none)
    );
    let th = Theme::plain();
    for (w, h) in SIZES {
        let mut st = st.clone();
        let _ = update(
            &mut st,
            Msg::Resize {
                width: w,
                height: h,
            },
        );
        insta::assert_snapshot!(format!("map_rewound_{w}x{h}"), text(&st, &th, w, h));
    }
}

#[test]
fn arrows_go_from_the_totals_into_the_map_and_enter_opens_the_gpu() {
    let mut st = lab_state();
    st.size = (120, 40);
    show_view(&mut st, View::Overview);
    // Down through the totals that open a list, then into the map's first cell.
    run(&mut st, (0..4).map(|_| code(KeyCode::Down)).collect());
    assert_eq!(st.map.cursor, None);
    run(&mut st, vec![code(KeyCode::Down)]);
    assert_eq!(st.map.cursor, Some((0, "lab-a".to_string(), 0)));
    // Right, then down a row keeps the column.
    run(&mut st, vec![code(KeyCode::Right), code(KeyCode::Down)]);
    assert_eq!(st.map.cursor, Some((0, "lab-b".to_string(), 1)));
    let screen = text(&st, &Theme::plain(), 120, 40);
    assert!(screen.contains("▸ lab-b:1"), "{screen}");
    run(&mut st, vec![code(KeyCode::Enter)]);
    assert_eq!(st.view, View::Detail);
    assert_eq!(st.detail, Some((0, "lab-b".to_string(), 1)));
    // Esc returns to the Overview, the cursor where it was; up twice leaves the map.
    run(&mut st, vec![code(KeyCode::Esc)]);
    assert_eq!(st.view, View::Overview);
    run(&mut st, vec![code(KeyCode::Up)]);
    assert_eq!(st.map.cursor, Some((0, "lab-a".to_string(), 1)));
    run(&mut st, vec![code(KeyCode::Up)]);
    assert_eq!(st.map.cursor, None);
    // `l` and `h` are right and left too.
    run(&mut st, vec![k('l'), k('l'), k('l'), k('h')]);
    assert_eq!(st.map.cursor, Some((0, "lab-a".to_string(), 1)));
}

#[test]
fn the_filter_and_the_problem_list_dim_the_cells_they_exclude() {
    let mut st = lab_state();
    show_view(&mut st, View::Overview);
    assert!(st.map.cells.iter().all(|c| !c.dim));
    let mut msgs = vec![k('/')];
    msgs.extend("lab-b".chars().map(k));
    msgs.push(code(KeyCode::Enter));
    run(&mut st, msgs);
    let dim: Vec<bool> = st.map.cells.iter().map(|c| c.dim).collect();
    assert_eq!(dim, vec![true, true, false, false]);
    // `!` cycles the map's problem words: idle first.
    run(&mut st, vec![code(KeyCode::Esc), k('!')]);
    assert_eq!(st.panes.overview.filter, "idle");
    let flash = st
        .flash
        .as_ref()
        .map(|f| f.text.clone())
        .unwrap_or_default();
    assert!(flash.contains("GPUs of 4"), "{flash}");
    run(&mut st, vec![k('!')]);
    assert_eq!(st.panes.overview.filter, "over-limit");
    let over: Vec<bool> = st
        .map
        .cells
        .iter()
        .map(|c| !c.dim && c.state == CellState::OverLimit)
        .collect();
    assert!(over.iter().any(|o| *o), "the over-limit GPU stays lit");
    assert!(
        st.map
            .cells
            .iter()
            .all(|c| c.dim == (c.state != CellState::OverLimit)),
        "{:?}",
        st.map.cells
    );
}

#[test]
fn sparklines_read_the_history_once_and_an_idle_console_asks_nothing_more() {
    let mut st = lab_state();
    // Not on the Overview: nothing asked.
    let effects = run(&mut st, vec![Msg::Tick(Timestamp(NOW.0 + 1_000))]);
    assert_eq!(trend_asks(&effects), 0);
    // On it: the 59 minutes before this one, 15 a time.
    let effects = run(&mut st, vec![k('1')]);
    assert_eq!(trend_asks(&effects), 4);
    assert_eq!(answer_trends(&mut st, &effects), 59);
    assert_eq!(st.trends.sources[0].history, TrendHistory::Recorded);
    let series = st.trends.series(st.now, &[0]);
    assert!(series.iter().all(Option::is_some));
    assert_eq!(
        series[0].unwrap().alloc,
        point_at(Timestamp(NOW.0 - 59 * MINUTE_MS + MINUTE_MS - 1)).alloc,
        "the first from the history"
    );
    // The console's own point for this minute is kept over any history.
    assert_eq!(series[59].unwrap().gpus, 4);
    // An hour of ticks (and a refresh each minute): no more asks; each minute's point is
    // the console's own.
    let mut asked = 0;
    for s in 2..3_600 {
        let effects = update(&mut st, Msg::Tick(Timestamp(NOW.0 + s * 1_000)));
        asked += trend_asks(&effects);
    }
    assert_eq!(asked, 0);
    let series = st.trends.series(st.now, &[0]);
    assert!(series.iter().all(Option::is_some));
    // `d`: the last day, its missing quarters asked once.
    let effects = run(&mut st, vec![k('d')]);
    assert_eq!(st.trends.span, TrendSpan::Day);
    let n = answer_trends(&mut st, &effects);
    assert!(n > 80 && n < 96, "{n} quarters asked");
    let now = st.now;
    assert_eq!(trend_asks(&run(&mut st, vec![Msg::Tick(now)])), 0);
    // A source without history: said once, never asked again.
    let mut st = lab_state();
    let effects = run(&mut st, vec![k('1')]);
    for e in &effects {
        if let Effect::History(HistoryAsk::Trend {
            source, rewound, ..
        }) = e
        {
            update(
                &mut st,
                Msg::History(HistoryAnswer::Trend {
                    source: *source,
                    rewound: *rewound,
                    result: None,
                }),
            );
        }
    }
    assert_eq!(st.trends.sources[0].history, TrendHistory::NoHistory);
    let screen = text(&st, &Theme::plain(), 120, 40);
    assert!(screen.contains("no recorded history"), "{screen}");
}

/// Over a real `gpuboard serve` holding the accounting scenario's recorded history (two
/// hours from `t0`, three hours ago), a console started after it draws the sparklines from
/// that history at once: the last day's quarters read the scenario's claims (one pending
/// until minute 20; claim 3's 0.5 GPU released at minute 60).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sparklines_read_a_real_endpoints_recorded_history_at_start() {
    use crate::common::scenario::{MIN, write_history};
    use gpuboard::console::headless::settle;
    use gpuboard::sources::Source;
    use gpuboard::sources::endpoint::Http;
    use std::sync::Arc;
    use std::time::Duration;

    let now = jiff::Timestamp::now().as_millisecond() as u64;
    let t0 = now - now % 3_600_000 - 3 * 3_600_000;
    let dir = tempfile::tempdir().unwrap();
    write_history(dir.path(), t0);
    let server = crate::common::Server::start(dir.path(), &crate::common::demo_fleet(), &[]);
    let timeout = Duration::from_secs(20);
    let source: Arc<dyn Source> =
        Arc::new(Http::new("a", &server.url, Some(server.read_token()), timeout).unwrap());
    let mut st = State::new(
        vec![gpuboard::console::state::SourceSlot::new(
            source.name(),
            source.kind(),
            source.can_act(),
            source.note(),
        )],
        gpuboard::console::keymap::Keymap::builtin(),
        2_000,
        true,
    );
    let sources = vec![source];
    let _ = update(&mut st, Msg::Tick(Timestamp(t0 + 121 * MIN)));
    let effects = update(&mut st, k('1'));
    settle(&mut st, &sources, effects, timeout).await;
    assert_eq!(st.trends.sources[0].history, TrendHistory::Recorded);
    // The hour before: every minute read (the scenario's last state from minute 90 on).
    let hour = st.trends.series(st.now, &[0]);
    assert!(hour[..59].iter().all(Option::is_some), "{hour:?}");
    let p = hour[0].unwrap();
    assert_eq!((p.pending, p.compute), (0, 22_500), "{p:?}");
    // The last day: the quarters of the scenario read what it held then.
    let effects = update(&mut st, k('d'));
    settle(&mut st, &sources, effects, timeout).await;
    let day = st.trends.series(st.now, &[0]);
    let quarter = |m: u64| {
        let i = day.len() - 1 - usize::try_from((121 - m) / 15).unwrap();
        day[i].unwrap_or_else(|| panic!("quarter at minute {m}: {day:?}"))
    };
    assert_eq!(quarter(0).pending, 1, "claim 4 pending until minute 20");
    assert_eq!(quarter(15).pending, 0);
    assert_eq!(quarter(45).compute, 27_500, "claims 1, 2, 3 and 4");
    assert_eq!(quarter(60).compute, 22_500, "claim 3 released");
    // Before the history began: nothing drawn there.
    assert!(day[0].is_none());
    let screen = text(&st, &Theme::plain(), 120, 40);
    assert!(screen.contains("from the recorded history"), "{screen}");
}
