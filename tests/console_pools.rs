//! The Overview over a thousand hosts: more sources than rows, so a row per pool (the
//! hosts' names less their numbers) with its counts and the first host in trouble and
//! why, and the fleet map keeps its place above; snapshots at 80x24 and 200x60 of fixed
//! data. The thousand answers are stored unsettled and rebuilt once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::console_fixtures::NOW;
use gpuboard::clock::Timestamp;
use gpuboard::console::headless::{buffer_text, render};
use gpuboard::console::keymap::Keymap;
use gpuboard::console::msg::Msg;
use gpuboard::console::state::{SourceSlot, State, View};
use gpuboard::console::theme::load_strict;
use gpuboard::console::update::{update, update_unsettled};
use gpuboard::snapshot::Snapshot;
use gpuboard::sources::demo::DemoWorld;
use gpuboard::sources::{Failure, Fetched};

const HOSTS: usize = 1_000;
/// The host that never answered in time, and the one that answered two minutes ago.
const DOWN: &str = "rack03-gpu017";
const STALE: &str = "rack05-gpu042";

fn host(k: usize) -> String {
    format!("rack{:02}-gpu{:03}", k % 10, k / 10)
}

/// One snapshot per host, each one node of 8 GPUs named as its host, from one demo world.
fn host_snapshots() -> Vec<Snapshot> {
    let mut world = DemoWorld::scaled(HOSTS, 8, HOSTS * 2, 7).unwrap();
    world.advance(NOW);
    let all = world.snapshot(NOW);
    let mut base = all.clone();
    base.nodes.clear();
    base.claims.clear();
    base.projects.clear();
    (0..HOSTS)
        .map(|k| {
            let node = &all.nodes[k];
            let mut s = base.clone();
            let mut n = node.clone();
            n.name = host(k);
            s.nodes.push(n);
            s.claims = all
                .claims
                .iter()
                .filter(|c| c.node.as_deref() == Some(node.name.as_str()))
                .cloned()
                .map(|mut c| {
                    c.node = Some(host(k));
                    c
                })
                .collect();
            s.endpoint.name = host(k);
            s
        })
        .collect()
}

fn fetched(st: &mut State, source: usize, at: u64, result: Result<Fetched, Failure>) {
    st.sources[source].in_flight = true;
    let _ = update_unsettled(
        st,
        Msg::Fetched {
            source,
            at: Timestamp(at),
            result,
        },
    );
}

/// A thousand hosts of 8 GPUs and one (`hang00`) that has not answered yet; `DOWN` timed
/// out, `STALE` last answered two minutes ago. On the Overview at `NOW`.
fn thousand_hosts() -> State {
    let mut names: Vec<String> = (0..HOSTS).map(host).collect();
    names.push("hang00".into());
    let slots = names
        .iter()
        .map(|n| SourceSlot::new(n, "gpuboard".parse().unwrap(), true, None))
        .collect();
    let mut st = State::new(slots, Keymap::builtin(), 2_000, false);
    st.zone = jiff::tz::TimeZone::UTC;
    let _ = update(&mut st, Msg::Tick(Timestamp(NOW.0 - 180_000)));
    for (k, snap) in host_snapshots().into_iter().enumerate() {
        let name = host(k);
        if name == DOWN {
            fetched(&mut st, k, NOW.0 - 1_000, Err(Failure::Timeout(2_000)));
        } else {
            let at = if name == STALE {
                NOW.0 - 120_000
            } else {
                NOW.0 - 1_000
            };
            fetched(&mut st, k, at, Ok(Fetched::Snapshot(Box::new(snap))));
        }
    }
    assert!(st.unsettled, "a burst of answers waits for one rebuild");
    let _ = update(&mut st, Msg::Tick(NOW));
    assert!(!st.unsettled);
    st.view = View::Overview;
    st
}

#[test]
fn a_thousand_hosts_on_the_overview_are_a_row_per_pool_under_the_map() {
    let st = thousand_hosts();
    assert_eq!(st.totals.gpus, (HOSTS - 1) * 8, "every answer counted once");
    let theme = load_strict("default", &[]).unwrap();
    for (w, h) in [(80u16, 24u16), (200, 60)] {
        let mut st = st.clone();
        st.size = (w, h);
        let text = buffer_text(&render(&st, &theme, w, h).unwrap());
        insta::assert_snapshot!(format!("thousand_hosts_overview_{w}x{h}"), text);
        assert!(text.contains("Sources: 1001 in 11 pools"), "{text}");
        assert!(text.contains("rack00-gpu*"), "{text}");
        // The pools in trouble come first, so even the smallest screen shows them.
        let down = text.find("rack03-gpu*").unwrap();
        let stale = text.find("rack05-gpu*").unwrap();
        assert!(
            down < stale && stale < text.find("rack00-gpu*").unwrap(),
            "{text}"
        );
        if w == 200 {
            assert!(text.contains("Fleet map: 7992 GPUs"), "{text}");
            assert!(text.contains("hang*"), "{text}");
            assert!(
                text.contains("100 sources, 1 down: rack03-gpu017: no answer within 2000 ms"),
                "{text}"
            );
            assert!(
                text.contains("100 sources, 1 stale: rack05-gpu042 stale"),
                "{text}"
            );
            assert!(text.contains("1 source, 1 loading"), "{text}");
        }
    }
}

#[test]
fn a_few_hosts_are_still_listed_one_a_row() {
    let mut st = thousand_hosts();
    st.sources.truncate(5);
    st.size = (200, 60);
    let theme = load_strict("default", &[]).unwrap();
    let text = buffer_text(&render(&st, &theme, 200, 60).unwrap());
    assert!(text.contains("rack04-gpu000"), "{text}");
    assert!(!text.contains("pools"), "{text}");
}

#[test]
fn a_tick_within_the_minute_leaves_the_rebuild_to_the_frame() {
    let mut st = thousand_hosts();
    let mut snap = (*st.sources[0].data.clone().unwrap()).clone();
    snap.revision += 1;
    fetched(
        &mut st,
        0,
        NOW.0,
        Ok(Fetched::Snapshot(Box::new(snap.clone()))),
    );
    assert!(st.unsettled);
    // NOW begins a minute: a tick a second later is within it.
    let _ = update_unsettled(&mut st, Msg::Tick(Timestamp(NOW.0 + 1_000)));
    let _ = update_unsettled(&mut st, Msg::Log("a line".into()));
    assert!(st.unsettled, "the frame rebuilds, not the tick");
    let _ = update_unsettled(
        &mut st,
        Msg::Resize {
            width: 200,
            height: 60,
        },
    );
    assert!(!st.unsettled, "any other message sees the state settled");
    // A tick that begins the next minute settles first, for the trends' point.
    snap.revision += 1;
    fetched(
        &mut st,
        0,
        NOW.0 + 2_000,
        Ok(Fetched::Snapshot(Box::new(snap))),
    );
    assert!(st.unsettled);
    let _ = update_unsettled(&mut st, Msg::Tick(Timestamp(NOW.0 + 60_000)));
    assert!(!st.unsettled);
}
