//! The console's claims across real `gpuboard serve` endpoints on 127.0.0.1 whose answer
//! is late: a relay delays `POST /v1/claims` to the best endpoint past the console's
//! timeout, so the first answer is lost and the claim lands after the console gave up.
//! Driven through the pure `update` and the driver's `perform` (the terminal console's
//! path): the claim is sent with an idempotency key, sent again with the same key to the
//! same endpoint, and held once, never on two endpoints.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::relay::forward;
use crate::common::relay::read_request;

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::Server;
use gpuboard::client::Client;
use gpuboard::clock::{Clock, SystemClock};
use gpuboard::console::driver::perform;
use gpuboard::console::keymap::Keymap;
use gpuboard::console::msg::{Effect, Msg};
use gpuboard::console::state::{Mode, SourceSlot, State, View};
use gpuboard::console::update::{show_view, update};
use gpuboard::request::ClaimRequest;
use gpuboard::snapshot::ClaimView;
use gpuboard::sources::Source;
use gpuboard::sources::endpoint::Http;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde_json::json;
use tokio::sync::mpsc::unbounded_channel;

/// The console's timeout for one call (the driver's; a refresh's at least 1 s).
const TIMEOUT: Duration = Duration::from_secs(2);
/// How long the relay holds each claim: past `TIMEOUT`, by enough that a loaded machine
/// keeps the order.
const DELAY: Duration = Duration::from_secs(4);
/// A generous deadline for any one answer (a re-send may be asked for 15 s).
const WAIT: Duration = Duration::from_secs(90);

/// `serve` over one node `host-NAME` with one 40 GiB GPU, and an operator client.
fn endpoint(name: &str) -> (Server, Client, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("inventory.toml");
    std::fs::write(
        &inv,
        format!(
            "[[nodes]]\nname = \"host-{name}\"\n[[nodes.gpus]]\nmodel = \"NVIDIA A100-SXM4-40GB\"\nmemory = \"40GiB\"\ncount = 1\n"
        ),
    )
    .unwrap();
    let server = Server::start(&dir.path().join("data"), &inv, &[]);
    let client = Client::new(&server.url, Some(server.operator_token()), WAIT).unwrap();
    (server, client, dir)
}

/// The claims carrying an attempt label on one endpoint, read from it directly.
async fn attempts(client: &Client) -> Vec<ClaimView> {
    client
        .snapshot()
        .await
        .unwrap()
        .claims
        .into_iter()
        .filter(|c| c.request.labels.contains_key("gpuboard.attempt"))
        .collect()
}

/// A relay that holds each `POST /v1/claims` for `delay` before forwarding it (the claim
/// lands late, after the console gave up) and forwards everything else at once.
struct DelayingRelay {
    url: String,
    /// Claims read and not yet answered by the upstream.
    busy: Arc<AtomicUsize>,
    /// Claims forwarded so far.
    claims: Arc<AtomicUsize>,
}

impl DelayingRelay {
    fn start(upstream: &str, delay: Duration) -> DelayingRelay {
        let upstream = upstream.trim_start_matches("http://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (busy, claims) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (b, c) = (busy.clone(), claims.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (upstream, b, c) = (upstream.clone(), b.clone(), c.clone());
                std::thread::spawn(move || {
                    let mut conn = conn;
                    let Some((head, body)) = read_request(&mut conn) else {
                        return;
                    };
                    // Only claims count: a watch the source keeps open never ends.
                    let claim = head.starts_with("POST /v1/claims ");
                    if claim {
                        b.fetch_add(1, Ordering::SeqCst);
                        c.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(delay);
                    }
                    forward(&mut conn, &upstream, &head, &body);
                    if claim {
                        b.fetch_sub(1, Ordering::SeqCst);
                    }
                });
            }
        });
        DelayingRelay { url, busy, claims }
    }

    /// Waits until no claim is held or being forwarded (a late copy has landed).
    fn drain(&self) {
        let deadline = Instant::now() + Duration::from_mins(2);
        while self.busy.load(Ordering::SeqCst) > 0 {
            assert!(Instant::now() < deadline, "the relay never drained");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The console over `sources`, each read once.
async fn console(sources: &[Arc<dyn Source>], clock: &Arc<dyn Clock>) -> State {
    let mut st = State::new(
        sources
            .iter()
            .map(|s| SourceSlot::new(s.name(), s.kind(), s.can_act(), None))
            .collect(),
        Keymap::builtin(),
        2_000,
        false,
    );
    let _ = update(&mut st, Msg::Tick(clock.now()));
    for (i, s) in sources.iter().enumerate() {
        st.sources[i].in_flight = true;
        let result = s.fetch().await;
        let _ = update(
            &mut st,
            Msg::Fetched {
                source: i,
                at: clock.now(),
                result,
            },
        );
    }
    st
}

fn keys(st: &mut State, keys: &[KeyCode]) -> Vec<Effect> {
    keys.iter()
        .flat_map(|k| update(st, Msg::Key(KeyEvent::new(*k, KeyModifiers::NONE))))
        .collect()
}

/// Performs `todo` and feeds the answers back, with the effects those ask for, until
/// nothing is in flight. Returns every effect performed.
async fn pump(
    st: &mut State,
    sources: &[Arc<dyn Source>],
    clock: &Arc<dyn Clock>,
    mut todo: Vec<Effect>,
) -> Vec<Effect> {
    let (tx, mut rx) = unbounded_channel();
    let mut performed = Vec::new();
    let mut in_flight = 0usize;
    loop {
        for e in todo.drain(..) {
            performed.push(e.clone());
            in_flight += 1;
            perform(e, sources, false, TIMEOUT, clock, &tx);
        }
        if in_flight == 0 {
            return performed;
        }
        let msg = tokio::time::timeout(WAIT, rx.recv())
            .await
            .expect("an answer from a source")
            .unwrap();
        in_flight -= 1;
        todo = update(st, msg);
    }
}

/// The console over `sources`, the claim form filled in for 20 GiB, previewed and sent,
/// every answer fed back. Returns the state and the effects performed.
async fn claim_from_the_form(sources: &[Arc<dyn Source>]) -> (State, Vec<Effect>) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let mut st = console(sources, &clock).await;
    let mut typed = vec![KeyCode::Char('c')];
    typed.extend([KeyCode::Backspace; 4]);
    typed.extend("20Gi".chars().map(KeyCode::Char));
    typed.extend([KeyCode::Enter, KeyCode::Enter]);
    let todo = keys(&mut st, &typed);
    let performed = pump(&mut st, sources, &clock, todo).await;
    (st, performed)
}

/// The keyed claim sent first, with its key: the attempt's id and the source's position.
fn first_claim(performed: &[Effect]) -> (usize, ClaimRequest, String, Option<String>) {
    let Some(Effect::Claim {
        source,
        request,
        key,
        move_id,
        ..
    }) = performed.iter().find(|e| matches!(e, Effect::Claim { .. }))
    else {
        panic!("no keyed claim: {performed:?}")
    };
    let label = request.labels["gpuboard.attempt"].clone();
    assert_eq!(key, &format!("{label}.{source}"));
    (*source, request.clone(), key.clone(), move_id.clone())
}

/// b ranks first (binpack: it holds 10 GiB already) and its claims come through a relay
/// that holds them 4 s, past the console's 2 s: the form's claim gets no answer from b.
/// b is sent the same claim with the same key, answers with the claim its first send
/// placed, and a is never tried: held once, on b. Before keys, the console read b's
/// snapshot, found nothing yet, and placed it on a too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_form_whose_best_source_times_out_holds_the_claim_once() {
    let (a, a_client, _a_dir) = endpoint("a");
    let (b, b_client, _b_dir) = endpoint("b");
    let ten = ClaimRequest::from_json(&json!({"gpu_memory": "10Gi"})).unwrap();
    b_client.claim(&ten).await.unwrap();
    let relay = DelayingRelay::start(&b.url, DELAY);
    let sources: Vec<Arc<dyn Source>> = vec![
        Arc::new(Http::new("a", &a.url, Some(a.operator_token()), TIMEOUT).unwrap()),
        Arc::new(Http::new("b", &relay.url, Some(b.operator_token()), TIMEOUT).unwrap()),
    ];
    let (st, performed) = claim_from_the_form(&sources).await;
    relay.drain();

    // The claim went to b with a key, and was sent again to b with the same key.
    let (source, request, key, move_id) = first_claim(&performed);
    assert_eq!((source, move_id), (1, None), "b first");
    let label = request.labels["gpuboard.attempt"].clone();
    assert!(
        performed.iter().any(|e| matches!(e,
            Effect::Recheck { source: 1, key: k, request: r, .. } if *k == key && *r == request)),
        "b sent the same claim with the same key again: {performed:?}"
    );
    assert!(
        !performed
            .iter()
            .any(|e| matches!(e, Effect::Claim { source: 0, .. })),
        "a never tried: {performed:?}"
    );
    let text = st
        .flash
        .as_ref()
        .map(|f| f.text.clone())
        .unwrap_or_default();
    assert!(
        text.starts_with("b placed it; its answer was lost (")
            && text.contains(&format!("(label gpuboard.attempt={label})")),
        "{text}"
    );
    assert_eq!(st.mode, Mode::Normal);
    assert!(
        st.flows.lost().is_empty(),
        "no suspect left: {:?}",
        st.flows.lost()
    );

    // Held once: b holds one claim with the label, a none; b ran the key's request once
    // though it was sent it at least twice.
    let on_b = attempts(&b_client).await;
    assert_eq!(on_b.len(), 1, "{on_b:?}");
    assert_eq!(on_b[0].request.labels["gpuboard.attempt"], label);
    assert!(attempts(&a_client).await.is_empty());
    assert!(relay.claims.load(Ordering::SeqCst) >= 2);
}

/// A move of a's claim to any other source: b ranks first and its claims come through the
/// delaying relay, so the move's claim on b gets no answer. b is sent it again with the
/// same key (and the move's id), answers with the claim, and the move goes on: a's claim
/// released, c never tried, the claim held once, on b.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_whose_target_times_out_holds_the_claim_once() {
    let (a, a_client, _a_dir) = endpoint("a");
    let (b, b_client, _b_dir) = endpoint("b");
    let (c, c_client, _c_dir) = endpoint("c");
    let twenty = ClaimRequest::from_json(&json!({"gpu_memory": "20Gi", "project": "p"})).unwrap();
    a_client.claim(&twenty).await.unwrap();
    let ten = ClaimRequest::from_json(&json!({"gpu_memory": "10Gi"})).unwrap();
    b_client.claim(&ten).await.unwrap();
    let relay = DelayingRelay::start(&b.url, DELAY);
    let sources: Vec<Arc<dyn Source>> = vec![
        Arc::new(Http::new("a", &a.url, Some(a.operator_token()), TIMEOUT).unwrap()),
        Arc::new(Http::new("b", &relay.url, Some(b.operator_token()), TIMEOUT).unwrap()),
        Arc::new(Http::new("c", &c.url, Some(c.operator_token()), TIMEOUT).unwrap()),
    ];
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let mut st = console(&sources, &clock).await;
    show_view(&mut st, View::Claims);
    keys(&mut st, &[KeyCode::Char('m')]);
    let Mode::Move(m) = &st.mode else {
        panic!("no picker: {:?}", st.mode)
    };
    let any = m.targets.iter().position(|r| r.any).expect("an `any` row");
    keys(&mut st, &vec![KeyCode::Char('j'); any]);
    let todo = keys(&mut st, &[KeyCode::Enter, KeyCode::Tab, KeyCode::Enter]);
    let performed = pump(&mut st, &sources, &clock, todo).await;
    relay.drain();

    let (source, request, key, move_id) = first_claim(&performed);
    assert_eq!(source, 1, "b first (binpack)");
    let move_id = move_id.expect("the move's claim carries its id");
    assert!(
        performed.iter().any(|e| matches!(e,
            Effect::Recheck { source: 1, key: k, request: r, move_id: Some(m), .. }
                if *k == key && *r == request && *m == move_id)),
        "b sent the same claim with the same key again: {performed:?}"
    );
    assert!(
        !performed
            .iter()
            .any(|e| matches!(e, Effect::Claim { source: 2, .. })),
        "c never tried: {performed:?}"
    );
    let text = st
        .flash
        .as_ref()
        .map(|f| f.text.clone())
        .unwrap_or_default();
    assert!(
        text.starts_with("claim a/1 moved to b/") && text.contains(&move_id),
        "{text}"
    );
    let label = request.labels["gpuboard.attempt"].clone();
    let on_b = attempts(&b_client).await;
    assert_eq!(on_b.len(), 1, "{on_b:?}");
    assert_eq!(on_b[0].request.labels["gpuboard.attempt"], label);
    assert!(attempts(&c_client).await.is_empty());
    assert!(a_client.snapshot().await.unwrap().claims.is_empty());
    assert!(st.flows.lost().is_empty() && st.flows.moves().is_empty());
}
