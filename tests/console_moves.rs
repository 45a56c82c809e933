//! The console's claims and moves across real `gpuboard serve` endpoints on 127.0.0.1,
//! driven through the pure `update` and the driver's `perform` (the same path as the
//! terminal console): a move across endpoints carries one move id that both endpoints
//! audit; a move to "any source" and the claim form go on to the next endpoint when one
//! answers 409 (it filled up after the console read it); a release that fails after the
//! new claim names both claims, and both are still there to see and fix. A move from the
//! embedded scheduler to an endpoint is audited on both sides too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::Server;
use gpuboard::client::Client;
use gpuboard::clock::{Clock, SystemClock};
use gpuboard::console::driver::perform;
use gpuboard::console::keymap::Keymap;
use gpuboard::console::msg::{Effect, Msg};
use gpuboard::console::state::{Mode, SourceSlot, State, View};
use gpuboard::console::update::{show_view, update};
use gpuboard::request::ClaimRequest;
use gpuboard::snapshot::{ClaimView, Snapshot};
use gpuboard::sources::Source;
use gpuboard::sources::endpoint::Http;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

const WAIT: Duration = Duration::from_secs(20);

/// One endpoint: its server and a client with its operator token.
struct Endpoint {
    name: &'static str,
    server: Server,
    client: Client,
    _dir: tempfile::TempDir,
}

impl Endpoint {
    /// `serve` over one node `host-NAME` with `gpus` 40 GiB GPUs.
    fn start(name: &'static str, gpus: u32) -> Endpoint {
        let dir = tempfile::tempdir().unwrap();
        let inv = dir.path().join("inventory.toml");
        std::fs::write(
            &inv,
            format!(
                "[[nodes]]\nname = \"host-{name}\"\n[[nodes.gpus]]\nmodel = \"NVIDIA A100-SXM4-40GB\"\nmemory = \"40GiB\"\ncount = {gpus}\n"
            ),
        )
        .unwrap();
        let data = dir.path().join("data");
        let server = Server::start(&data, &inv, &[]);
        let client = Client::new(&server.url, Some(server.operator_token()), WAIT).unwrap();
        Endpoint {
            name,
            server,
            client,
            _dir: dir,
        }
    }

    async fn claim(&self, req: &Value) -> ClaimView {
        let request = ClaimRequest::from_json(req).unwrap();
        self.client.claim(&request).await.unwrap().claim().clone()
    }

    async fn snapshot(&self) -> Snapshot {
        self.client.snapshot().await.unwrap()
    }

    /// The audit events naming a move: (actor, action).
    async fn move_events(&self) -> Vec<(String, String)> {
        let url = format!("{}/v1/snapshot", self.server.url);
        let v: Value = common::http()
            .get(url)
            .bearer_auth(self.server.operator_token())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["actor"].as_str().unwrap_or("").contains("(move "))
            .map(|e| {
                (
                    e["actor"].as_str().unwrap().to_string(),
                    e["action"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }
}

/// The console over these endpoints: its state (each source fetched once), its sources
/// and the channel their answers come back on.
struct Console {
    st: State,
    sources: Vec<Arc<dyn Source>>,
    rx: UnboundedReceiver<Msg>,
    tx: tokio::sync::mpsc::UnboundedSender<Msg>,
    clock: Arc<dyn Clock>,
}

impl Console {
    async fn over(endpoints: &[&Endpoint]) -> Console {
        let sources = endpoints
            .iter()
            .map(|e| {
                let http = Http::new(e.name, &e.server.url, Some(e.server.operator_token()), WAIT)
                    .unwrap();
                Arc::new(http) as Arc<dyn Source>
            })
            .collect();
        Console::with(sources).await
    }

    /// The console over these sources, each read once.
    async fn with(sources: Vec<Arc<dyn Source>>) -> Console {
        let st = State::new(
            sources
                .iter()
                .map(|s| SourceSlot::new(s.name(), s.kind(), s.can_act(), None))
                .collect(),
            Keymap::builtin(),
            2_000,
            false,
        );
        let (tx, rx) = unbounded_channel();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let n = sources.len();
        let mut c = Console {
            st,
            sources,
            rx,
            tx,
            clock,
        };
        let now = c.clock.now();
        let _ = update(&mut c.st, Msg::Tick(now));
        for i in 0..n {
            c.fetch(i).await;
        }
        c
    }

    /// Reads source `i` now, as a refresh would.
    async fn fetch(&mut self, i: usize) {
        self.st.sources[i].in_flight = true;
        let result = self.sources[i].fetch().await;
        let at = self.clock.now();
        let _ = update(
            &mut self.st,
            Msg::Fetched {
                source: i,
                at,
                result,
            },
        );
    }

    fn keys(&mut self, keys: &[KeyCode]) -> Vec<Effect> {
        keys.iter()
            .flat_map(|k| {
                update(
                    &mut self.st,
                    Msg::Key(KeyEvent::new(*k, KeyModifiers::NONE)),
                )
            })
            .collect()
    }

    /// Performs `effects` and feeds their answers back, with the effects those ask for,
    /// until nothing is left in flight. `before` sees each effect before it is performed.
    async fn pump(&mut self, effects: Vec<Effect>, mut before: impl FnMut(&Effect)) {
        let mut in_flight = 0usize;
        let mut todo = effects;
        loop {
            for e in todo.drain(..) {
                before(&e);
                if !matches!(e, Effect::Quit) {
                    in_flight += 1;
                }
                perform(e, &self.sources, false, WAIT, &self.clock, &self.tx);
            }
            if in_flight == 0 {
                return;
            }
            let msg = tokio::time::timeout(WAIT, self.rx.recv())
                .await
                .expect("an answer from a source")
                .unwrap();
            in_flight -= 1;
            todo = update(&mut self.st, msg);
        }
    }

    fn flash(&self) -> String {
        self.st
            .flash
            .as_ref()
            .map(|f| f.text.clone())
            .unwrap_or_default()
    }

    /// Opens the move picker on the only claim of source 0 and selects the row `pick`
    /// names (`any`, or `SOURCE/NODE:INDEX`).
    fn pick(&mut self, pick: &str) {
        show_view(&mut self.st, View::Claims);
        self.keys(&[KeyCode::Char('m')]);
        let Mode::Move(m) = &self.st.mode else {
            panic!("no picker: {:?} {}", self.st.mode, self.flash())
        };
        let names: Vec<String> = m
            .targets
            .iter()
            .map(|r| {
                if r.any {
                    "any".to_string()
                } else {
                    format!("{}/{}:{}", self.st.sources[r.source].name, r.node, r.index)
                }
            })
            .collect();
        let at = names
            .iter()
            .position(|n| n == pick)
            .unwrap_or_else(|| panic!("{pick} not in {names:?}"));
        for _ in 0..at {
            self.keys(&[KeyCode::Char('j')]);
        }
    }
}

/// Enter on the picked row, then Tab and Enter in the confirmation.
const CONFIRM: [KeyCode; 3] = [KeyCode::Enter, KeyCode::Tab, KeyCode::Enter];

fn move_id_of(text: &str) -> String {
    let at = text.find("(move mv-").expect(text) + "(move ".len();
    text[at..].split(')').next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_move_across_endpoints_is_audited_on_both_with_one_move_id() {
    let a = Endpoint::start("a", 2);
    let b = Endpoint::start("b", 2);
    let old = a
        .claim(&json!({"gpu_memory": "20Gi", "project": "p", "holder": "h", "ttl": 600}))
        .await;
    let mut con = Console::over(&[&a, &b]).await;
    con.pick("b/host-b:0");
    let eff = con.keys(&CONFIRM);
    con.pump(eff, |_| {}).await;
    let text = con.flash();
    assert!(
        text.starts_with(&format!("claim a/{} moved to b/1 (move mv-", old.id)),
        "{text}"
    );
    let move_id = move_id_of(&text);
    // What the endpoints hold now: the claim on b, with its form, project, holder, lease.
    assert!(a.snapshot().await.claims.is_empty());
    let on_b = b.snapshot().await.claims;
    assert_eq!(on_b.len(), 1);
    let new = &on_b[0];
    assert_eq!(
        (&new.request.gpu, &new.project, &new.holder, new.request.ttl),
        (&old.request.gpu, &old.project, &old.holder, Some(600))
    );
    // The form names where it was placed on b: the node and device it was moved to.
    assert_eq!(new.form, format!("{} node=host-b devices=0", old.form));
    assert_eq!(new.node.as_deref(), Some("host-b"));
    // Both endpoints audit the move under one actor ending with the move id.
    let (on_a, on_b) = (a.move_events().await, b.move_events().await);
    let suffix = format!(" (move {move_id})");
    assert_eq!(on_a.len(), 1, "{on_a:?}");
    assert_eq!(on_b.len(), 1, "{on_b:?}");
    assert_eq!(
        (on_a[0].1.as_str(), on_b[0].1.as_str()),
        ("release", "claim")
    );
    assert!(on_a[0].0.ends_with(&suffix), "{on_a:?}");
    assert_eq!(on_a[0].0, on_b[0].0, "one actor and one move id on both");
    // The console shows where the claim is now (once its mirrors caught up).
    assert_eq!(con.st.mode, Mode::Normal);
    assert!(con.st.flows.moves().is_empty());
    let counts = |con: &Console| {
        [0, 1].map(|i| {
            con.st.sources[i]
                .data
                .as_ref()
                .map_or(usize::MAX, |d| d.claims.len())
        })
    };
    for _ in 0..100 {
        if counts(&con) == [0, 1] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        con.fetch(0).await;
        con.fetch(1).await;
    }
    assert_eq!(counts(&con), [0, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_move_to_any_endpoint_goes_on_when_the_best_answers_409() {
    let a = Endpoint::start("a", 2);
    // b holds 10 GiB already: binpack ranks it before the empty c.
    let b = Endpoint::start("b", 1);
    let c = Endpoint::start("c", 1);
    a.claim(&json!({"gpu_memory": "20Gi", "project": "p"}))
        .await;
    b.claim(&json!({"gpu_memory": "10Gi"})).await;
    let mut con = Console::over(&[&a, &b, &c]).await;
    // b fills up after the console read it.
    b.claim(&json!({"gpu_memory": "25Gi"})).await;
    con.pick("any");
    let eff = con.keys(&[KeyCode::Enter]);
    let Mode::Confirm(d) = &con.st.mode else {
        panic!("{:?}", con.st.mode)
    };
    assert!(
        d.body[0].ends_with("to b (the best other source by placement; if it refuses: c)?"),
        "{:?}",
        d.body
    );
    let mut eff = eff;
    eff.extend(con.keys(&[KeyCode::Tab, KeyCode::Enter]));
    con.pump(eff, |_| {}).await;
    let text = con.flash();
    assert!(
        text.starts_with("claim a/1 moved to c/1 (move mv-"),
        "{text}"
    );
    // ...after b's refusal, in b's words.
    assert!(text.contains(" after b: "), "{text}");
    assert!(text.contains("does not fit"), "{text}");
    // Every attempt is in the console's log (Events).
    let move_id = move_id_of(&text);
    assert!(
        con.st
            .log
            .iter()
            .any(|l| l.starts_with(&format!("move {move_id}: b refused"))
                && l.ends_with("; trying c")),
        "{:?}",
        con.st.log
    );
    assert_eq!(b.snapshot().await.claims.len(), 2, "b took nothing more");
    assert_eq!(c.snapshot().await.claims.len(), 1);
    assert!(a.snapshot().await.claims.is_empty());
    let (on_a, on_c) = (a.move_events().await, c.move_events().await);
    assert_eq!(on_a.len(), 1, "{on_a:?}");
    assert_eq!(on_a[0].0, on_c[0].0, "{on_a:?} {on_c:?}");
    assert!(on_c[0].0.ends_with(&format!(" (move {move_id})")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_move_whose_release_fails_names_both_claims_and_keeps_both() {
    let mut a = Endpoint::start("a", 1);
    let b = Endpoint::start("b", 1);
    a.claim(&json!({"gpu_memory": "20Gi"})).await;
    let mut con = Console::over(&[&a, &b]).await;
    con.pick("b/host-b:0");
    let eff = con.keys(&CONFIRM);
    // a stops answering once b took the claim, before the release reaches it.
    let mut killed = false;
    let server = &mut a.server;
    con.pump(eff, |e| {
        if let Effect::ActInMove { source: 0, .. } = e {
            server.kill9();
            killed = true;
        }
    })
    .await;
    assert!(killed);
    let f = con.st.flash.clone().unwrap();
    assert!(f.error);
    assert!(
        f.text
            .starts_with("claimed b/1 but releasing a/1 failed: unreachable: "),
        "{}",
        f.text
    );
    assert!(
        f.text
            .contains("both claims hold GPUs now: a/1 (old, host-a:0) and b/1 (new, host-b:0): release one (move mv-"),
        "{}",
        f.text
    );
    assert_eq!(con.st.mode, Mode::Normal);
    assert!(con.st.flows.moves().is_empty());
    // Both are really held: b's new claim, and a's old one once a is back.
    assert_eq!(b.snapshot().await.claims.len(), 1);
    let data = a.server.dir.clone();
    let inv = data.parent().unwrap().join("inventory.toml");
    a.server = Server::start(&data, &inv, &[]);
    a.client = Client::new(&a.server.url, Some(a.server.operator_token()), WAIT).unwrap();
    assert_eq!(
        a.snapshot().await.claims.len(),
        1,
        "the old claim is still there"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_claim_form_goes_to_the_next_endpoint_on_409() {
    let a = Endpoint::start("a", 1);
    let b = Endpoint::start("b", 1);
    b.claim(&json!({"gpu_memory": "10Gi"})).await;
    let mut con = Console::over(&[&a, &b]).await;
    // b fills up after the console read it.
    b.claim(&json!({"gpu_memory": "25Gi"})).await;
    let mut keys = vec![KeyCode::Char('c')];
    keys.extend([KeyCode::Backspace; 4]);
    keys.extend("20Gi".chars().map(KeyCode::Char));
    keys.push(KeyCode::Enter);
    assert!(con.keys(&keys).is_empty());
    let Mode::Form(f) = &con.st.mode else {
        panic!("{:?}", con.st.mode)
    };
    assert_eq!(f.source, 1, "b ranks first (binpack)");
    let eff = con.keys(&[KeyCode::Enter]);
    con.pump(eff, |_| {}).await;
    let text = con.flash();
    assert!(
        text.starts_with("a: claim 1 placed at host-a:0 (gpu_memory=20GiB) (after b: "),
        "{text}"
    );
    assert!(text.contains("does not fit"), "{text}");
    assert!(
        con.st
            .log
            .iter()
            .any(|l| l.starts_with("b refused the claim (") && l.ends_with("); trying a")),
        "{:?}",
        con.st.log
    );
    assert_eq!(con.st.mode, Mode::Normal);
    assert_eq!(a.snapshot().await.claims.len(), 1);
    assert_eq!(b.snapshot().await.claims.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_from_the_embedded_scheduler_to_an_endpoint_is_audited_on_both() {
    use gpuboard::endpoint::engine::{Engine, EngineConfig, LocalProcesses};
    use gpuboard::sources::embedded::Embedded;
    let nodes = gpuboard::inventory::load(&common::demo_fleet()).unwrap();
    let engine = Engine::in_memory(
        EngineConfig::default(),
        nodes,
        Arc::new(SystemClock),
        Arc::new(LocalProcesses),
    )
    .unwrap();
    let request = ClaimRequest::from_json(&json!({"gpu_memory": "10Gi"})).unwrap();
    engine.submit(request, "test").await.unwrap();
    let here = Arc::new(Embedded::new("here", engine.clone(), None)) as Arc<dyn Source>;
    let b = Endpoint::start("b", 1);
    let there =
        Arc::new(Http::new("b", &b.server.url, Some(b.server.operator_token()), WAIT).unwrap())
            as Arc<dyn Source>;
    let mut con = Console::with(vec![here, there]).await;
    con.pick("b/host-b:0");
    let eff = con.keys(&CONFIRM);
    con.pump(eff, |_| {}).await;
    let text = con.flash();
    assert!(
        text.starts_with("claim here/1 moved to b/1 (move mv-"),
        "{text}"
    );
    let suffix = format!(" (move {})", move_id_of(&text));
    // The embedded scheduler audits its release as the console's, with the move id.
    let snap = engine.durable_snapshot().await;
    let released: Vec<_> = snap
        .events
        .iter()
        .filter(|e| e.actor.ends_with(&suffix))
        .map(|e| (e.actor.as_str(), e.action.as_str()))
        .collect();
    assert_eq!(
        released,
        vec![(format!("console{suffix}").as_str(), "release")]
    );
    let on_b = b.move_events().await;
    assert_eq!(on_b.len(), 1, "{on_b:?}");
    assert!(
        on_b[0].0.ends_with(&suffix) && on_b[0].1 == "claim",
        "{on_b:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_form_passes_a_dead_endpoint_and_a_full_one_and_says_both() {
    // Binpack ranks b (10 GiB used), then c (5 GiB), then the empty a.
    let a = Endpoint::start("a", 1);
    let mut b = Endpoint::start("b", 1);
    let c = Endpoint::start("c", 1);
    b.claim(&json!({"gpu_memory": "10Gi"})).await;
    c.claim(&json!({"gpu_memory": "5Gi"})).await;
    let mut con = Console::over(&[&a, &b, &c]).await;
    // After the console read them: b stops answering, c fills up.
    b.server.kill9();
    c.claim(&json!({"gpu_memory": "30Gi"})).await;
    let mut keys = vec![KeyCode::Char('c')];
    keys.extend([KeyCode::Backspace; 4]);
    keys.extend("20Gi".chars().map(KeyCode::Char));
    keys.push(KeyCode::Enter);
    con.keys(&keys);
    let Mode::Form(f) = &con.st.mode else {
        panic!("{:?}", con.st.mode)
    };
    assert_eq!(
        (f.source, f.next.clone()),
        (1, vec![2, 0]),
        "b, then c, then a"
    );
    let eff = con.keys(&[KeyCode::Enter]);
    con.pump(eff, |_| {}).await;
    let text = con.flash();
    assert!(
        text.starts_with(
            "a: claim 1 placed at host-a:0 (gpu_memory=20GiB) (after b: unreachable: "
        ),
        "{text}"
    );
    assert!(text.contains(" · c: does not fit"), "{text}");
    assert_eq!(a.snapshot().await.claims.len(), 1);
    assert_eq!(c.snapshot().await.claims.len(), 2, "c took nothing more");
}
