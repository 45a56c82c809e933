//! The console's Usage view (7) over real `gpuboard serve`s: one holds the hand-made
//! accounting scenario's recorded history (`common::scenario`), one records no history,
//! and the demo keeps none. Rewound to the scenario's end, the view shows the report's own
//! figures, names the two that cannot answer, cycles its window (`w`), lists a project's
//! claims (Enter) and goes back (Esc); snapshots at 80x24 and 120x40. The real binary in
//! tmux does the same from the keyboard.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::console_fixtures::{code, k};
use crate::common::scenario::{MIN, expected, write_history};
use crate::common::tmux::Session;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gpuboard::clock::{Clock, SystemClock, Timestamp};
use gpuboard::console::headless::{buffer_text, render, settle};
use gpuboard::console::keymap::Keymap;
use gpuboard::console::msg::{Effect, Msg};
use gpuboard::console::state::{SourceSlot, SourceUsage, State, UsageWindow, View};
use gpuboard::console::theme::Theme;
use gpuboard::console::update::{rewind_to, update};
use gpuboard::ids::ClaimId;
use gpuboard::sources::Source;
use gpuboard::sources::demo::{Demo, DemoWorld};
use gpuboard::sources::endpoint::Http;
use ratatui::crossterm::event::KeyCode;

/// Two serves (the scenario's history at `t0`, and one that records none) and the demo.
struct Fleet {
    t0: u64,
    a: common::Server,
    bare: common::Server,
    sources: Vec<Arc<dyn Source>>,
    _dirs: [tempfile::TempDir; 2],
}

/// `t0` three hours ago, on the hour: inside the serve's 30 days of history, and over.
fn fleet() -> Fleet {
    let now = jiff::Timestamp::now().as_millisecond() as u64;
    let t0 = now - now % 3_600_000 - 3 * 3_600_000;
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_history(da.path(), t0);
    let a = common::Server::start(da.path(), &common::demo_fleet(), &[]);
    let bare = common::Server::start(db.path(), &common::demo_fleet(), &["--history-days", "0"]);
    let timeout = Duration::from_secs(20);
    let http = |name: &str, s: &common::Server| -> Arc<dyn Source> {
        Arc::new(Http::new(name, &s.url, Some(s.read_token()), timeout).unwrap())
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let demo = Demo::new(DemoWorld::new(42).unwrap(), clock);
    let sources = vec![http("a", &a), http("bare", &bare), Arc::new(demo) as _];
    Fleet {
        t0,
        a,
        bare,
        sources,
        _dirs: [da, db],
    }
}

/// The console over the fleet, a minute after the scenario's end, dates in a zone where
/// `t0` reads 01:00 (so the screens are the same whenever the test runs).
fn console(f: &Fleet, size: (u16, u16)) -> State {
    let slots = f
        .sources
        .iter()
        .map(|s| SourceSlot::new(s.name(), s.kind(), s.can_act(), s.note()))
        .collect();
    let mut st = State::new(slots, Keymap::builtin(), 2_000, true);
    let day = 86_400;
    let local = (3_600 - (f.t0 / 1000 % day) as i64).rem_euclid(day as i64);
    let offset = if local > day as i64 / 2 {
        local - day as i64
    } else {
        local
    };
    // Never offset 0: a zero offset is named `UTC` on the rewind banner, any other `local`,
    // so the screens would change with the hour the test runs at; +24:00 reads the same
    // times as 0.
    let offset = if offset == 0 { day as i64 } else { offset };
    let offset = jiff::tz::Offset::from_seconds(i32::try_from(offset).unwrap()).unwrap();
    st.zone = jiff::tz::TimeZone::fixed(offset);
    st.size = size;
    let _ = update(&mut st, Msg::Tick(Timestamp(f.t0 + 121 * MIN)));
    st
}

async fn drive(st: &mut State, f: &Fleet, effects: Vec<Effect>) {
    settle(st, &f.sources, effects, Duration::from_secs(20)).await;
}

/// Rewinds to the scenario's end and opens the Usage view.
async fn rewound_usage(f: &Fleet, size: (u16, u16)) -> State {
    let mut st = console(f, size);
    let effects = rewind_to(&mut st, Timestamp(f.t0 + 120 * MIN));
    drive(&mut st, f, effects).await;
    let effects = update(&mut st, k('7'));
    drive(&mut st, f, effects).await;
    st
}

fn shown(st: &State) -> &State {
    &st.rewind.as_ref().expect("rewound").shown
}

/// A project's claims, reserved, used and idle-allocated GPU-hours.
type Shown = (u32, f64, f64, f64);

/// The projects shown, in order.
fn figures(st: &State) -> Vec<(String, Shown)> {
    let u = &shown(st).usage;
    u.list
        .rows
        .iter()
        .map(|i| {
            let p = &u.projects[*i];
            let f = &p.figures;
            assert!(
                (f.reserved.compute.hours() - f.reserved.memory.hours()).abs() < 1e-3,
                "the scenario's shares are as much memory as compute: {p:?}"
            );
            (
                p.project.clone(),
                (
                    p.claims,
                    f.reserved.compute.hours(),
                    f.used.hours(),
                    f.idle_allocated.hours(),
                ),
            )
        })
        .collect()
}

fn same(got: &[(String, Shown)], want: &BTreeMap<&str, Shown>) {
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (p, (c, r, u, i)) in got {
        let (wc, wr, wu, wi) = want[p.as_str()];
        assert_eq!(*c, wc, "{p}");
        for (a, b) in [(r, wr), (u, wu), (i, wi)] {
            assert!((a - b).abs() < 1e-3, "{p}: {got:?}");
        }
    }
}

/// The screen with the date of the time shown (the only part that moves from one run to
/// the next) written as DATE.
fn screen(st: &State, f: &Fleet, w: u16, h: u16) -> String {
    let mut st = st.clone();
    let _ = update(
        &mut st,
        Msg::Resize {
            width: w,
            height: h,
        },
    );
    let text = buffer_text(&render(&st, &Theme::plain(), w, h).unwrap());
    let date = gpuboard::clock::date_time(Timestamp(f.t0 + 120 * MIN), &st.zone);
    text.replace(&date[..10], "DATE")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_view_shows_the_reports_figures_and_names_the_sources_without_history() {
    let f = fleet();
    let mut st = rewound_usage(&f, (120, 40)).await;
    assert_eq!(shown(&st).view, View::Usage);
    // The window ends at the time shown: the last 24 h hold the whole scenario (cut where
    // the history begins), and the figures are the report's, the biggest idle first.
    let got = figures(&st);
    same(&got, &expected());
    let order: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(order, ["vision", "speech", "nlp"]);
    let u = &shown(&st).usage;
    assert!((u.physical.hours() - 8.0).abs() < 1e-3);
    assert!(matches!(u.sources[1].said, SourceUsage::Before(None)));
    assert!(matches!(u.sources[2].said, SourceUsage::NoHistory));
    let text = screen(&st, &f, 120, 40);
    for words in [
        "Usage (GPU-h) · 24 h to 03:00",
        "bare: records no history",
        "demo: keeps no history (demo source)",
        "a: history begins 01:00",
    ] {
        assert!(text.contains(words), "{words}:\n{text}");
    }
    insta::assert_snapshot!("usage_rewound_120x40", text);
    insta::assert_snapshot!("usage_rewound_80x24", screen(&st, &f, 80, 24));

    // Enter: vision's claims with their own figures (claim 1 idle 40 minutes).
    let effects = update(&mut st, code(KeyCode::Enter));
    drive(&mut st, &f, effects).await;
    let u = &shown(&st).usage;
    assert_eq!(u.open.as_deref(), Some("vision"));
    let claims: Vec<(String, f64, f64)> = u
        .claim_list
        .rows
        .iter()
        .map(|i| {
            let c = &u.claims[*i];
            (
                c.label.clone(),
                c.claim.figures.reserved.compute.hours(),
                c.claim.figures.idle_allocated.hours(),
            )
        })
        .collect();
    assert_eq!(claims.len(), 2, "{claims:?}");
    assert_eq!(claims[0].0, "a/1");
    assert!((claims[0].1 - 2.0).abs() < 1e-3 && (claims[0].2 - 40.0 / 60.0).abs() < 1e-3);
    assert!((claims[1].1 - 1.0 / 3.0).abs() < 1e-3, "{claims:?}");
    insta::assert_snapshot!("usage_claims_120x40", screen(&st, &f, 120, 40));
    // Enter on claim 1 (held at the time shown): its detail as it was then.
    let effects = update(&mut st, code(KeyCode::Enter));
    drive(&mut st, &f, effects).await;
    assert_eq!(shown(&st).view, View::ClaimDetail);
    assert_eq!(shown(&st).claim_detail, Some((0, ClaimId(1))));
    insta::assert_snapshot!("usage_claim_detail_120x40", screen(&st, &f, 120, 40));
    // Esc: vision's claims again; claim 3 (gone an hour before the time shown) has no
    // detail to show, which a flash says.
    let effects = update(&mut st, code(KeyCode::Esc));
    drive(&mut st, &f, effects).await;
    assert_eq!(shown(&st).view, View::Usage);
    assert_eq!(shown(&st).usage.open.as_deref(), Some("vision"));
    let effects = update(&mut st, code(KeyCode::Down));
    drive(&mut st, &f, effects).await;
    let effects = update(&mut st, code(KeyCode::Enter));
    drive(&mut st, &f, effects).await;
    assert_eq!(shown(&st).view, View::Usage);
    let said = shown(&st).flash.as_ref().map(|f| f.text.clone());
    let gone = &shown(&st).usage.claims[shown(&st).usage.claim_list.rows[1]].label;
    assert_eq!(
        said.as_deref(),
        Some(format!("claim {} on a was not held at 03:00:00 (the time shown): only its figures are known", &gone[2..]).as_str())
    );
    let effects = update(&mut st, code(KeyCode::Esc));
    drive(&mut st, &f, effects).await;
    let effects = update(&mut st, code(KeyCode::Up));
    drive(&mut st, &f, effects).await;
    // Esc: the projects again (and still rewound).
    let effects = update(&mut st, code(KeyCode::Esc));
    drive(&mut st, &f, effects).await;
    assert_eq!(shown(&st).usage.open, None);
    assert!(st.rewind.is_some());

    // w: 7 d (the same figures: the history begins inside both windows), then 1 h.
    let effects = update(&mut st, k('w'));
    assert_eq!(shown(&st).usage.window, UsageWindow::Week);
    assert!(
        screen(&st, &f, 120, 40).contains("7 d to 03:00"),
        "the title says the window at once"
    );
    let asked = effects
        .iter()
        .filter(|e| matches!(e, Effect::Usage(a) if a.rewound && a.key.window == UsageWindow::Week))
        .count();
    assert_eq!(asked, 3, "every source is asked: {effects:?}");
    drive(&mut st, &f, effects).await;
    same(&figures(&st), &expected());
    let effects = update(&mut st, k('w'));
    drive(&mut st, &f, effects).await;
    assert_eq!(shown(&st).usage.window, UsageWindow::Hour);
    // The last hour: claim 1 (1 GPU, idle 40 of its minutes), claims 2 and 4 (0.25 and 1
    // GPU) and claim 3 (0.5 GPU) gone at its start.
    let hour: BTreeMap<String, Shown> = figures(&st).into_iter().collect();
    assert!((hour["vision"].1 - 1.0).abs() < 1e-3, "{hour:?}");
    assert!((hour["vision"].3 - 40.0 / 60.0).abs() < 1e-3, "{hour:?}");
    assert!((hour["nlp"].1 - 0.25).abs() < 1e-3, "{hour:?}");
    assert!((hour["speech"].1 - 1.0).abs() < 1e-3, "{hour:?}");
    drop((f.a, f.bare));
}

#[test]
fn the_real_console_in_tmux_opens_usage_cycles_the_window_and_lists_a_projects_claims() {
    let f = fleet();
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("console.toml");
    let entry = |name: &str, s: &common::Server| {
        format!(
            "[[endpoints]]\nname = \"{name}\"\nurl = \"{}\"\ntoken_file = \"{}\"\nkind = \"gpuboard\"\n",
            s.url,
            s.dir.join("operator.token").display()
        )
    };
    std::fs::write(&config, entry("a", &f.a) + &entry("bare", &f.bare)).unwrap();
    let at = jiff::Timestamp::from_millisecond((f.t0 + 120 * MIN) as i64)
        .unwrap()
        .to_string();
    let args = format!("--config {} --at {at}", config.display());
    let s = Session::console(120, 40, "usage", home.path(), &args);
    s.wait_for("REWIND");
    s.keys(&["7"]);
    // The serve with no history is named; the other's figures show (vision: 2.33 GPU-h
    // reserved, 0.67 idle).
    let screen = s.wait_until("the figures", |t| {
        t.contains("Usage (GPU-h) · 24 h") && t.contains("vision") && t.contains("2.33")
    });
    // The notes under the table wrap: read them as one text.
    let flat = screen.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    assert!(flat.contains("bare: records no history"), "{screen}");
    assert!(screen.contains("0.67"), "{screen}");
    s.keys(&["w"]);
    s.wait_for("7 d to");
    s.keys(&["w"]);
    s.wait_until("the last hour", |t| {
        t.contains("1 h to") && t.contains("vision")
    });
    s.keys(&["Enter"]);
    let screen = s.wait_for("vision's claims");
    assert!(screen.contains("CLAIM"), "{screen}");
    // Enter on claim 1 (held at the time shown): its detail; Esc back to the claims.
    s.keys(&["Enter"]);
    s.wait_for("claim 1 placed on a");
    s.keys(&["Escape"]);
    s.wait_for("vision's claims");
    let screen = s.escape_from("vision's claims");
    assert!(screen.contains("PROJECT"), "{screen}");
    assert!(
        screen.contains("REWIND"),
        "Esc closes the claims, not the rewind: {screen}"
    );
    // Live: its own Usage view, over the last 24 h to now (the scenario, and its claims
    // held until this serve started).
    s.keys(&["G"]);
    s.wait_until("live", |t| !t.contains("REWIND"));
    s.keys(&["7"]);
    let screen = s.wait_until("the live figures", |t| {
        t.contains("Usage (GPU-h) · 24 h to") && t.contains("vision")
    });
    let flat = screen.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    assert!(flat.contains("bare: records no history"), "{screen}");

    // `status --dump-screen usage` draws the same view headless.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuboard"))
        .args([
            "status",
            "--dump-screen",
            "usage",
            "--size",
            "120x40",
            "--config",
        ])
        .arg(&config)
        .args(["--at", &at])
        .env("HOME", home.path())
        .output()
        .unwrap();
    let text = common::ok(&out);
    for words in ["vision", "2.33", "0.67", "records no history"] {
        assert!(text.contains(words), "{words}:\n{text}");
    }
}

/// The Usage asks among `effects`.
fn usage_asks(effects: &[Effect]) -> Vec<gpuboard::console::msg::UsageAsk> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Usage(a) => Some(*a),
            _ => None,
        })
        .collect()
}

#[test]
fn a_live_usage_view_asks_once_a_minute_one_ask_at_a_time_and_draws_meanwhile() {
    use crate::common::console_fixtures::{NOW, lab_state};
    use gpuboard::console::msg::UsageAnswer;
    use gpuboard::console::state::UsageKey;
    let mut st = lab_state();
    // Nothing is asked for a view that is not on screen.
    assert!(usage_asks(&update(&mut st, Msg::Tick(Timestamp(NOW.0 + 1_000)))).is_empty());
    let asks = usage_asks(&update(&mut st, k('7')));
    let key = UsageKey::live(UsageWindow::Day, Timestamp(NOW.0 + 1_000));
    assert_eq!(asks.len(), 1);
    assert_eq!((asks[0].key, asks[0].rewound), (key, false));
    assert!(key.to.0.is_multiple_of(60_000) && key.to.0 >= NOW.0 + 1_000);
    // While it is under way: drawn, loading, and not asked again, even for a new window.
    let text = buffer_text(&render(&st, &Theme::plain(), 80, 24).unwrap());
    assert!(text.contains("loading…"), "{text}");
    assert!(usage_asks(&update(&mut st, k('w'))).is_empty());
    // Its answer (for the old window) is kept aside; the new window is asked at once.
    let answer = |key| {
        Msg::Usage(UsageAnswer {
            source: 0,
            rewound: false,
            key,
            said: SourceUsage::NoHistory,
        })
    };
    let asks = usage_asks(&update(&mut st, answer(key)));
    assert_eq!(asks.len(), 1);
    assert_eq!(asks[0].key.window, UsageWindow::Week);
    let week = asks[0].key;
    assert!(usage_asks(&update(&mut st, answer(week))).is_empty());
    // The next ask comes when the window's end moves to the next minute.
    let mut asked_at = Vec::new();
    for s in 1..=150 {
        let now = Timestamp(NOW.0 + 1_000 + s * 1_000);
        for a in usage_asks(&update(&mut st, Msg::Tick(now))) {
            asked_at.push(a.key.to);
            let _ = update(&mut st, answer(a.key));
        }
    }
    assert!(
        (2..=3).contains(&asked_at.len()),
        "once a minute over 150 s: {asked_at:?}"
    );
    let text = buffer_text(&render(&st, &Theme::plain(), 80, 24).unwrap());
    assert!(text.contains("lab: keeps no history"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_serve_a_garbled_report_and_a_silent_one_are_each_named_in_words() {
    use common::Reply;
    use gpuboard::console::msg::UsageAsk;
    use gpuboard::console::state::UsageKey;
    use gpuboard::console::usage::answer;
    // What a gpuboard from before the report route answers: its router's 404.
    let old = br#"{"error":"not_found","detail":"no such route; the API is under /v1 (see README, API section)"}"#;
    let routes = |reply: Reply| vec![("/v1/history/report", reply)];
    let old = common::serve(routes(Reply::Full(404, "application/json", old.to_vec()))).await;
    let garbled = common::serve(routes(Reply::Full(
        200,
        "application/json",
        b"[1,".to_vec(),
    )))
    .await;
    let silent = common::serve(routes(Reply::Silent)).await;
    let key = UsageKey::live(UsageWindow::Day, Timestamp(1_795_568_400_000));
    let said = |url: String, limit: Duration| async move {
        let source = Http::new("x", &url, None, Duration::from_secs(20)).unwrap();
        let ask = UsageAsk {
            source: 0,
            rewound: false,
            key,
        };
        answer(ask, source.history(), limit).await.said
    };
    let words = |s: SourceUsage| match s {
        SourceUsage::Failed(e) => e,
        other => panic!("not a failure: {other:?}"),
    };
    let e = words(said(old, Duration::from_secs(20)).await);
    assert!(e.contains("older than the report route"), "{e}");
    let e = words(said(garbled, Duration::from_secs(20)).await);
    assert!(e.contains("unreadable") || e.contains("decode"), "{e}");
    let e = words(said(silent, Duration::from_secs(1)).await);
    assert_eq!(e, "no report within 1 s");
}

/// Enter on a claim in a live Usage view's claims list opens the claim detail (Esc comes
/// back to the list); on a claim its source no longer holds, or whose source's state is not
/// loaded, it says so in one line and stays.
#[test]
fn enter_on_a_usage_claim_opens_its_detail_or_says_it_is_no_longer_held() {
    use crate::common::console_fixtures::{NOW, flash, lab_state};
    use gpuboard::accounting::usage::ClaimGpuTime;
    use gpuboard::accounting::{Figures, GpuSeconds, GpuTime, ProjectGpuTime};
    use gpuboard::console::msg::UsageAnswer;
    use gpuboard::console::state::UsageKey;
    let mut st = lab_state();
    let now = Timestamp(NOW.0 + 1_000);
    let _ = update(&mut st, Msg::Tick(now));
    let _ = update(&mut st, k('7'));
    // Claim 1 (vision, alice) is held now; claim 99 ended before.
    let claim = |id: u64, idle: f64| ClaimGpuTime {
        claim: ClaimId(id),
        project: "vision".into(),
        holder: None,
        longest_idle_ms: 0,
        figures: Figures {
            idle_allocated: GpuSeconds(idle),
            ..Figures::default()
        },
    };
    let usage = GpuTime {
        physical: GpuSeconds(4.0 * 86_400.0),
        projects: vec![ProjectGpuTime {
            project: "vision".into(),
            claims: 2,
            figures: Figures::default(),
        }],
        claims: vec![claim(99, 7.0), claim(1, 3.0)],
        ..GpuTime::default()
    };
    let _ = update(
        &mut st,
        Msg::Usage(UsageAnswer {
            source: 0,
            rewound: false,
            key: UsageKey::live(UsageWindow::Day, now),
            said: SourceUsage::Shown {
                from: Timestamp(NOW.0 - 86_400_000),
                usage: Box::new(usage),
            },
        }),
    );
    let _ = update(&mut st, code(KeyCode::Enter));
    assert_eq!(st.usage.open.as_deref(), Some("vision"));
    let listed: Vec<&str> = st
        .usage
        .claim_list
        .rows
        .iter()
        .map(|i| st.usage.claims[*i].label.as_str())
        .collect();
    assert_eq!(listed, ["lab/99", "lab/1"], "the biggest idle first");
    // Claim 99: said in a flash, the list stays.
    let _ = update(&mut st, code(KeyCode::Enter));
    assert_eq!(st.view, View::Usage);
    assert_eq!(
        flash(&st),
        "claim 99 on lab is no longer held: only its figures are known"
    );
    assert_eq!(st.claim_detail, None);
    // Claim 1: its detail, as the Claims view opens it; Esc comes back to the claims.
    let _ = update(&mut st, code(KeyCode::Esc));
    let _ = update(&mut st, code(KeyCode::Down));
    let _ = update(&mut st, code(KeyCode::Enter));
    assert_eq!(st.view, View::ClaimDetail);
    assert_eq!(st.claim_detail, Some((0, ClaimId(1))));
    let text = buffer_text(&render(&st, &Theme::plain(), 100, 30).unwrap());
    assert!(text.contains("alice"), "claim 1's detail:\n{text}");
    let _ = update(&mut st, code(KeyCode::Esc));
    assert_eq!(st.view, View::Usage);
    assert_eq!(st.usage.open.as_deref(), Some("vision"));
    // A source whose state is not loaded (lost, or not fetched yet) cannot show it.
    st.sources[0].data = None;
    let _ = update(&mut st, code(KeyCode::Enter));
    assert_eq!(st.view, View::Usage);
    assert_eq!(
        flash(&st),
        "claim 1: lab's state is not loaded, so its detail cannot be shown"
    );
}
