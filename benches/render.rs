//! Drawing cost at scale: a demo fleet of 1 000 nodes x 8 GPUs with about 20 000 claims,
//! GPUs and Claims views at 160x48 into ratatui's `TestBackend` (the same code path as the
//! terminal, minus the write). Also the cost of rebuilding the sorted rows after a fetch, and
//! of a key that re-sorts the Claims view until its next frame; and the Overview at 200x50
//! with its fleet map of 8 000 GPUs (every state present) and an hour of sparklines.
#![allow(clippy::unwrap_used)]

#[path = "../tests/common/console_fixtures.rs"]
mod console_fixtures;
#[path = "../tests/common/fleet_map_fixtures.rs"]
mod fleet_map_fixtures;

use std::hint::black_box;

use console_fixtures::scaled_state;
use criterion::{Criterion, criterion_group, criterion_main};
use gpuboard::console::lists::GpuColumn;
use gpuboard::console::msg::Msg;
use gpuboard::console::state::View;
use gpuboard::console::theme::load_strict;
use gpuboard::console::update::{show_view, update};
use gpuboard::console::views::draw;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

fn render(c: &mut Criterion) {
    // `cargo bench` passes `--bench`: the full fleet. `cargo test` runs this once as a smoke
    // test, on a small fleet, so the test suite stays quick.
    let full = std::env::args().any(|a| a == "--bench");
    let (nodes, claims) = if full { (1_000, 20_000) } else { (20, 400) };
    let mut st = scaled_state(nodes, 8, claims).unwrap();
    let claims = st.sources[0].data.as_ref().map_or(0, |d| d.claims.len());
    let devices = st.gpus.rows.len();
    eprintln!("fleet: {devices} GPUs, {claims} claims");
    let theme = load_strict("default", &[]).unwrap();
    let mut term = Terminal::new(TestBackend::new(160, 48)).unwrap();
    for view in [View::Gpus, View::Claims] {
        show_view(&mut st, view);
        // Put the selection in the middle of the list, as an operator scrolling would.
        let mid = st.row_count() / 2;
        st.cursor_mut(view).selected = mid;
        c.bench_function(
            &format!(
                "draw {} 160x48 ({devices} GPUs, {claims} claims)",
                view.name()
            ),
            |b| {
                b.iter(|| {
                    term.draw(|f| draw(f, black_box(&st), &theme)).unwrap();
                });
            },
        );
    }
    // What an operator waits for: a key that re-sorts 20 000 claims, then the next frame.
    show_view(&mut st, View::Claims);
    let sort = KeyEvent::new(KeyCode::Char('s'), KeyModifiers::NONE);
    c.bench_function("key to frame: sort Claims (s), then draw", |b| {
        b.iter(|| {
            let _ = update(&mut st, Msg::Key(sort));
            term.draw(|f| draw(f, black_box(&st), &theme)).unwrap();
        });
    });
    c.bench_function("rebuild rows (filter + sort by free memory)", |b| {
        st.gpus.sort = GpuColumn::Free;
        b.iter(|| {
            st.rebuild_rows();
            black_box(st.gpus.rows.len())
        });
    });
}

/// The Overview at 200x50 over 1 000 nodes x 8 GPUs: the totals, the fleet map (two GPUs
/// a cell at that size) and the sparklines with an hour of points per source, as the
/// history fills them. Also rebuilding the map after a fetch.
fn overview(c: &mut Criterion) {
    use gpuboard::console::state::{MINUTE_MS, TrendPoint};
    let full = std::env::args().any(|a| a == "--bench");
    let nodes = if full { 1_000 } else { 20 };
    let mut st = fleet_map_fixtures::fleet_map_state(nodes).unwrap();
    st.size = (200, 50);
    let now = st.now.0 / MINUTE_MS * MINUTE_MS;
    for source in 0..st.sources.len() {
        for m in 0..60 {
            let point = TrendPoint {
                gpus: 4_000,
                cap: 320 << 40,
                alloc: (100 + m) << 40,
                used: Some((50 + m) << 40),
                compute: 1_000 * 10_000 + m * 10_000,
                pending: m % 7,
                idle: Some(m % 11),
            };
            st.trends
                .source_mut(source)
                .points
                .insert(now - m * MINUTE_MS, point);
        }
    }
    let gpus = st.map.cells.len();
    let theme = load_strict("default", &[]).unwrap();
    let mut term = Terminal::new(TestBackend::new(200, 50)).unwrap();
    c.bench_function(
        &format!("draw Overview 200x50: fleet map + sparklines ({gpus} GPUs)"),
        |b| {
            b.iter(|| {
                term.draw(|f| draw(f, black_box(&st), &theme)).unwrap();
            });
        },
    );
    c.bench_function(&format!("rebuild fleet map ({gpus} GPUs)"), |b| {
        b.iter(|| {
            st.rebuild_map();
            black_box(st.map.counts)
        });
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = render, overview
}
criterion_main!(benches);
