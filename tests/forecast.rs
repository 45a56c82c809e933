//! Expected starts and previews on a real `gpuboard serve`: `GET /v1/forecast`, the `ls`
//! START column and `ls --pending`, `POST /v1/preview` and `--dry-run`, which changes
//! nothing (the snapshot's revision and audit stay as they were); and the console on it in
//! tmux: the Claims list and the claim detail say when the waiting claim starts, the
//! release dialog which waiting claim the release would start.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::tmux::Session;
use crate::common::{Server, http, text};

use serde_json::{Value, json};

/// One node of two GPUs: claim 1 holds one for a declared 10 minutes, claim 2 the other
/// with no end known, claim 3 waits for one GPU.
fn busy_server(dir: &std::path::Path) -> Server {
    let inventory = dir.join("one.toml");
    std::fs::write(
        &inventory,
        "[[nodes]]\nname = \"node-a\"\n[[nodes.gpus]]\nmodel = \"NVIDIA A100-SXM4-80GB\"\n\
         memory = \"80GiB\"\ncount = 2\n",
    )
    .unwrap();
    let server = Server::start(dir, &inventory, &[]);
    for (request, wait) in [
        (
            json!({"nvidia.com/gpu": 1, "project": "vision", "expected_duration": 600}),
            false,
        ),
        (json!({"nvidia.com/gpu": 1, "project": "vision"}), false),
        (json!({"nvidia.com/gpu": 1, "project": "nlp"}), true),
    ] {
        let mut args = vec!["claim".to_string(), "--request".into(), request.to_string()];
        if wait {
            args.push("--wait".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = server.cli(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    server
}

async fn get(server: &Server, path: &str) -> Value {
    let resp = http()
        .get(format!("{}{path}", server.url))
        .bearer_auth(server.read_token())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
    resp.json().await.unwrap()
}

async fn preview(server: &Server, body: &Value) -> (u16, Value) {
    let resp = http()
        .post(format!("{}/v1/preview", server.url))
        .bearer_auth(server.operator_token())
        .json(body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test]
async fn the_forecast_route_and_ls_say_when_a_waiting_claim_starts() {
    let dir = tempfile::tempdir().unwrap();
    let server = busy_server(dir.path());
    let f = get(&server, "/v1/forecast").await;
    let starts = f["starts"].as_array().unwrap();
    assert_eq!(starts.len(), 1, "{f}");
    let e = &starts[0];
    assert_eq!(e["claim"], 3);
    assert_eq!(e["node"], "node-a");
    assert_eq!(e["freed_by"]["claim"], 1, "{e}");
    assert_eq!(e["freed_by"]["basis"], "declared");
    let p50 = e["start"]["p50"].as_u64().unwrap();
    let at = f["at"].as_u64().unwrap();
    // Claim 1 declared 600 s a moment ago.
    assert!((590_000..=600_000).contains(&(p50 - at)), "{e}");

    let out = server.cli(&["ls"]);
    let table = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let header = table.lines().next().unwrap();
    assert!(header.contains("START"), "{table}");
    let row = table.lines().find(|l| l.starts_with('3')).unwrap();
    assert!(row.contains("~10m") || row.contains("~9m"), "{table}");

    let out = server.cli(&["ls", "--pending"]);
    let listed = text(&out.stdout);
    assert!(!listed.lines().any(|l| l.starts_with("1 ")), "{listed}");
    assert!(
        listed.contains("claim 3: expected to start ~") && listed.contains("when claim 1 ends"),
        "{listed}"
    );

    let out = server.cli(&["ls", "--json"]);
    let all: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let pending = all.iter().find(|c| c["id"] == 3).unwrap();
    assert_eq!(pending["expected_start"]["freed_by"]["claim"], 1);

    // The claim detail as `--dump-screen` draws it says when it starts, as the console's.
    let out = server.cli(&["status", "--dump-screen", "claim:3", "--size", "160x40"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let screen = text(&out.stdout);
    assert!(
        screen.contains("expected to start ~") && screen.contains("when claim 1 ends"),
        "{screen}"
    );

    // `status --json` carries the endpoint's forecast beside its snapshot.
    let out = server.cli(&["status", "--once", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    let starts = &status["sources"][0]["forecast"]["starts"];
    assert_eq!(starts[0]["claim"], 3, "{status:#}");
    assert_eq!(starts[0]["freed_by"]["claim"], 1, "{status:#}");
}

#[tokio::test]
async fn a_preview_and_a_dry_run_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = busy_server(dir.path());
    let before = get(&server, "/v1/snapshot").await;

    let (status, p) = preview(&server, &json!({"action": "release", "claim": 2})).await;
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["placed"][0]["claim"], 3, "{p}");
    assert_eq!(p["placed"][0]["at"], "node-a:1", "{p}");

    let (status, p) = preview(
        &server,
        &json!({"action": "cordon", "node": "node-a", "index": 0}),
    )
    .await;
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["on_cordoned"], json!([1]), "{p}");

    let (status, p) = preview(&server, &json!({"action": "release", "claim": 99})).await;
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["refused"], "no claim 99", "{p}");

    let (status, p) = preview(&server, &json!({"action": "drain", "node": "node-a"})).await;
    assert_eq!(status, 400, "{p}");
    assert_eq!(p["error"], "bad_preview");
    assert!(p["detail"].as_str().unwrap().contains("release"), "{p}");

    let out = server.cli(&["release", "2", "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("dry run: release claim 2 (nothing was changed)"),
        "{said}"
    );
    assert!(
        said.contains("claim 3 (nlp) would be placed on node-a:1"),
        "{said}"
    );
    for args in [
        vec!["cordon", "node-a", "0", "--dry-run"],
        vec!["project", "set", "nlp", "--share", "300", "--dry-run"],
        vec!["project", "reset", "nlp", "--dry-run"],
        vec![
            "claim",
            "--gpus",
            "1",
            "--project",
            "nlp",
            "--wait",
            "--dry-run",
        ],
    ] {
        let out = server.cli(&args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stdout).starts_with("dry run: "), "{args:?}");
    }

    // Device 1 is taken: the move would be refused, and the dry run says so.
    let out = server.cli(&["move", "1", "--devices", "1", "--dry-run"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stdout).contains("the endpoint would refuse it"),
        "{}",
        text(&out.stdout)
    );

    let after = get(&server, "/v1/snapshot").await;
    assert_eq!(after["revision"], before["revision"]);
    assert_eq!(after["events"], before["events"]);
    assert_eq!(after["claims"], before["claims"]);
    assert_eq!(after["nodes"], before["nodes"]);
}

/// The console at 80x24 on `server` as its operator, once it shows both GPUs.
fn console_on(server: &Server, name: &str, home: &std::path::Path) -> Session {
    let args = format!(
        "--endpoint {} --token-file {}",
        server.url,
        server.dir.join("operator.token").display()
    );
    let s = Session::console(80, 24, name, home, &args);
    s.wait_for("GPUs (2)");
    s
}

/// The console at 80x24 on the busy serve: the waiting claim's expected start in Claims
/// and in its detail, and the release of claim 2 previewed as starting claim 3 there.
#[test]
fn the_console_says_when_a_claim_starts_and_what_a_release_would_start() {
    let dir = tempfile::tempdir().unwrap();
    let server = busy_server(dir.path());
    let home = tempfile::tempdir().unwrap();
    let s = console_on(&server, "forecast", home.path());
    s.keys(&["3"]);
    // The waiting claim's row starts its PLACE with the expected start: claim 1 declared
    // ten minutes a moment ago.
    let screen = s.wait_until("claim 3's expected start in its row", |sc| {
        sc.lines()
            .any(|l| l.contains("pending") && (l.contains("~10m") || l.contains("~9m")))
    });
    assert!(screen.contains("Claims (3)"), "{screen}");
    s.keys(&[":", "claim 3", "Enter"]);
    let screen = s.wait_for("when claim 1 ends");
    assert!(
        screen.contains("expected to start ~") && screen.contains("on node-a:0"),
        "{screen}"
    );
    assert!(screen.contains("(its declared"), "{screen}");
    s.escape_from("claim 3 pending on");
    s.keys(&[":", "release 2", "Enter"]);
    let screen = s.wait_for("would be placed on");
    assert!(screen.contains("Release claim 2"), "{screen}");
    assert!(
        screen.contains("claim 3 (nlp) would be placed on node-a:1"),
        "{screen}"
    );
    assert!(
        screen.contains("[ Cancel ]"),
        "the buttons still show: {screen}"
    );
    s.escape_from("would be placed on");
    // Cancelled: nothing was released.
    let out = server.cli(&["ls", "--json"]);
    let all: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(all.len(), 3, "{all:?}");
}

/// The console at 80x24 on the busy serve: `:share nlp 300` previews the next hour's
/// debts before asking, and once confirmed the serve holds the new share and audits it.
#[test]
fn the_console_sets_a_share_after_previewing_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = busy_server(dir.path());
    let home = tempfile::tempdir().unwrap();
    let s = console_on(&server, "share", home.path());
    s.keys(&[":", "share nlp 300", "Enter"]);
    let screen = s.wait_for("What follows");
    assert!(screen.contains("Set project nlp's share"), "{screen}");
    assert!(screen.contains("from 100 to 300"), "{screen}");
    assert!(screen.contains("[ Cancel ]"), "{screen}");
    s.keys(&["Tab", "Enter"]);
    s.wait_for("share set to 300");
    let out = server.cli(&["events", "--json"]);
    let said = text(&out.stdout);
    assert!(
        said.contains("share set to 300") && said.contains("project nlp"),
        "the serve audits it: {said}"
    );
}

/// The console's side, headless on the lab fixtures: what it asks in the background and
/// how it shows the answers.
mod console {
    use crate::common::console_fixtures::{NOW, code, k, lab_state, run};

    use gpuboard::clock::Timestamp;
    use gpuboard::console::headless::{buffer_text, render};
    use gpuboard::console::msg::{Effect, Msg};
    use gpuboard::console::state::{DialogPreview, FormStage, Mode, State, View};
    use gpuboard::console::theme::Theme;
    use gpuboard::console::update::{asks_due, show_view, update};
    use gpuboard::ids::ClaimId;
    use gpuboard::sources::Failure;
    use gpuboard::wire::forecast::{
        Band, DebtChange, EndBasis, ExpectedStart, Forecast, FreedBy, PlacedClaim, Preview,
        PreviewAction, StartMoved,
    };
    use ratatui::crossterm::event::KeyCode;

    fn text(st: &State, w: u16, h: u16) -> String {
        buffer_text(&render(st, &Theme::plain(), w, h).unwrap())
    }

    fn mins(m: u64) -> Timestamp {
        NOW.plus_secs(m * 60)
    }

    /// Claim 6 (two whole GPUs, waiting) starts on lab-a:0,1 when claim 1's lease ends.
    fn lab_forecast() -> Forecast {
        Forecast {
            revision: 0,
            at: NOW,
            starts: vec![ExpectedStart {
                claim: ClaimId(6),
                project: "vision".into(),
                start: Some(Band {
                    p10: mins(30),
                    p50: mins(35),
                    p90: mins(50),
                }),
                node: Some("lab-a".into()),
                devices: vec![0, 1],
                freed_by: Some(FreedBy {
                    claim: ClaimId(1),
                    basis: EndBasis::Lease,
                    lease_expires_at: Some(mins(35)),
                }),
                ahead: 2,
                unknown: None,
            }],
            engine: None,
        }
    }

    /// A preview of `action` that places claim 6, strands claim 5, moves claim 7's start
    /// and changes two projects' debts (a third's does not move: no line for it).
    fn preview(action: PreviewAction) -> Preview {
        Preview {
            action,
            revision: 0,
            at: NOW,
            refused: None,
            placed: vec![PlacedClaim {
                claim: ClaimId(6),
                project: "vision".into(),
                at: "lab-a:0,1".into(),
            }],
            on_cordoned: vec![ClaimId(4)],
            stranded: vec![ClaimId(5)],
            new_claim: None,
            debts: vec![
                DebtChange {
                    project: "nlp".into(),
                    before: 120.0,
                    after_step: 120.0,
                    in_an_hour: 40.0,
                    in_an_hour_without: 380.0,
                },
                DebtChange {
                    project: "speech".into(),
                    before: 10.0,
                    after_step: 10.0,
                    in_an_hour: 12.0,
                    in_an_hour_without: 12.0,
                },
            ],
            starts_moved: vec![StartMoved {
                claim: ClaimId(7),
                before: Some(mins(58)),
                after: Some(mins(40)),
            }],
        }
    }

    /// Runs the `:` command `line`.
    fn command(st: &mut State, line: &str) -> Vec<Effect> {
        let mut msgs = vec![k(':')];
        msgs.extend(line.chars().map(k));
        msgs.push(code(KeyCode::Enter));
        run(st, msgs)
    }

    fn answered(st: &mut State, action: PreviewAction, p: Option<Preview>) {
        let result = p.map(|p| Box::new(Ok(p)));
        let _ = update(
            st,
            Msg::Previewed {
                source: 0,
                action,
                result,
            },
        );
    }

    #[test]
    fn the_forecast_is_asked_in_the_background_and_shown_where_claims_wait() {
        let mut st = lab_state();
        assert_eq!(asks_due(&mut st), vec![Effect::Forecast(0)]);
        assert!(asks_due(&mut st).is_empty(), "one ask in flight");
        let _ = update(
            &mut st,
            Msg::Forecast {
                source: 0,
                result: Some(Ok(lab_forecast())),
            },
        );
        assert!(
            asks_due(&mut st).is_empty(),
            "asked a moment ago, nothing changed"
        );
        let _ = update(&mut st, Msg::Tick(NOW.plus_secs(30)));
        assert!(asks_due(&mut st).is_empty(), "nothing changed in 30 s");
        let _ = update(&mut st, Msg::Tick(NOW.plus_secs(60)));
        assert_eq!(
            asks_due(&mut st),
            vec![Effect::Forecast(0)],
            "again after a minute"
        );
        // A changed state is asked after 10 s, and never sooner than five times what the
        // last answer took (here 20 s).
        let _ = update(&mut st, Msg::Tick(NOW.plus_secs(80)));
        let _ = update(
            &mut st,
            Msg::Forecast {
                source: 0,
                result: Some(Ok(lab_forecast())),
            },
        );
        std::sync::Arc::make_mut(st.sources[0].data.as_mut().unwrap()).revision += 1;
        let _ = update(&mut st, Msg::Tick(NOW.plus_secs(150)));
        assert!(
            asks_due(&mut st).is_empty(),
            "changed, but 5 x 20 s not over"
        );
        let _ = update(&mut st, Msg::Tick(NOW.plus_secs(160)));
        assert_eq!(asks_due(&mut st), vec![Effect::Forecast(0)], "changed");
        let _ = update(
            &mut st,
            Msg::Forecast {
                source: 0,
                result: Some(Ok(lab_forecast())),
            },
        );
        let _ = update(&mut st, Msg::Tick(NOW));

        // The Pending problem list: the start first, then the reasons.
        show_view(&mut st, View::Claims);
        run(&mut st, vec![k('!'), k('!')]);
        assert_eq!(st.filter(), "pending");
        let screen = text(&st, 80, 24);
        let row = screen
            .lines()
            .find(|l| l.contains("pending") && l.contains("vision"))
            .unwrap_or_else(|| panic!("{screen}"));
        assert!(row.contains("~35m (30-50m)"), "{row}");
        insta::assert_snapshot!("pending_list_with_starts_80x24", screen);

        command(&mut st, "claim 6");
        assert_eq!(st.view, View::ClaimDetail);
        let wide = text(&st, 200, 60);
        assert!(
            wide.contains(
                "expected to start ~12:35 (12:30-12:50) on lab-a:0,1 when claim 1 ends; its \
                 lease runs to 12:35; 2 claims ahead of it in fair share"
            ),
            "{wide}"
        );
        insta::assert_snapshot!("claim_detail_expected_start_80x24", text(&st, 80, 24));
    }

    #[test]
    fn a_rewound_claim_shows_no_expected_start_of_the_present() {
        use gpuboard::console::msg::HistoryAnswer;
        use gpuboard::console::msg::HistoryAsk;
        use gpuboard::console::update::rewind_to;
        use gpuboard::sources::history::AtTime;
        let mut st = lab_state();
        let _ = asks_due(&mut st);
        let _ = update(
            &mut st,
            Msg::Forecast {
                source: 0,
                result: Some(Ok(lab_forecast())),
            },
        );
        let then = Timestamp(NOW.0 - 60_000);
        for e in rewind_to(&mut st, then) {
            if let Effect::History(HistoryAsk::At {
                source, generation, ..
            }) = e
            {
                let shown = AtTime::Shown {
                    snapshot: Box::new(crate::common::console_fixtures::lab_snapshot()),
                    at: then,
                };
                let _ = update(
                    &mut st,
                    Msg::History(HistoryAnswer::At {
                        source,
                        generation,
                        result: Some(Ok(shown)),
                    }),
                );
            }
        }
        let shown = &mut st.rewind.as_mut().expect("rewound").shown;
        shown.open_claim_named("6").unwrap();
        let screen = text(shown, 200, 60);
        assert!(screen.contains("claim 6 pending"), "{screen}");
        assert!(!screen.contains("expected to start"), "{screen}");
    }

    #[test]
    fn a_source_without_a_forecast_is_not_asked_again_and_shows_none() {
        let mut st = lab_state();
        assert_eq!(asks_due(&mut st), vec![Effect::Forecast(0)]);
        let _ = update(
            &mut st,
            Msg::Forecast {
                source: 0,
                result: None,
            },
        );
        let _ = update(&mut st, Msg::Tick(NOW.plus_secs(600)));
        assert!(asks_due(&mut st).is_empty());
        command(&mut st, "claim 6");
        assert!(!text(&st, 200, 60).contains("expected to start"));
    }

    #[test]
    fn an_engine_estimate_is_labelled_as_the_engine_s() {
        let mut st = lab_state();
        let _ = asks_due(&mut st);
        let mut f = lab_forecast();
        f.engine = Some("Slurm".into());
        let _ = update(
            &mut st,
            Msg::Forecast {
                source: 0,
                result: Some(Ok(f)),
            },
        );
        command(&mut st, "claim 6");
        let wide = text(&st, 200, 60);
        assert!(
            wide.contains("Slurm expects 12:35 (Slurm's own estimate"),
            "{wide}"
        );
        assert!(!wide.contains("expected to start"), "{wide}");
        show_view(&mut st, View::Claims);
        assert!(text(&st, 120, 40).contains("Slurm ~35m"));
    }

    #[test]
    fn the_release_dialog_previews_what_follows() {
        let mut st = lab_state();
        let _ = asks_due(&mut st);
        command(&mut st, "release 2");
        assert!(matches!(st.mode, Mode::Confirm(_)), "{:?}", st.mode);
        let release = PreviewAction::Release { claim: ClaimId(2) };
        assert_eq!(
            asks_due(&mut st),
            vec![Effect::Preview {
                source: 0,
                action: release.clone()
            }]
        );
        assert!(asks_due(&mut st).is_empty(), "asked once");
        assert!(text(&st, 80, 24).contains("previewing…"));
        // An answer for another action is not this dialog's.
        answered(
            &mut st,
            PreviewAction::Release { claim: ClaimId(3) },
            Some(preview(release.clone())),
        );
        assert!(text(&st, 80, 24).contains("previewing…"));
        answered(&mut st, release.clone(), Some(preview(release)));
        let screen = text(&st, 80, 24);
        assert!(
            screen.contains("claim 6 (vision) would be placed on lab-a:0,1"),
            "{screen}"
        );
        assert!(
            !screen.contains("project speech"),
            "unchanged debt: {screen}"
        );
        assert!(screen.contains("[ Cancel ]"), "{screen}");
        insta::assert_snapshot!("release_confirm_with_preview_80x24", screen);
        insta::assert_snapshot!("release_confirm_with_preview_120x40", text(&st, 120, 40));
    }

    #[test]
    fn the_cordon_and_reset_dialogs_preview_too_and_say_when_they_cannot() {
        let mut st = lab_state();
        let _ = asks_due(&mut st);
        command(&mut st, "cordon lab-a 1");
        let cordon = PreviewAction::Cordon {
            node: "lab-a".into(),
            index: 1,
        };
        assert_eq!(
            asks_due(&mut st),
            vec![Effect::Preview {
                source: 0,
                action: cordon.clone()
            }]
        );
        let mut p = preview(cordon.clone());
        p.placed.clear();
        answered(&mut st, cordon, Some(p));
        let screen = text(&st, 80, 24);
        assert!(
            screen.contains("claim 4 stays on the cordoned device"),
            "{screen}"
        );
        insta::assert_snapshot!("cordon_confirm_with_preview_80x24", screen);
        run(&mut st, vec![code(KeyCode::Esc)]);

        show_view(&mut st, View::Ledger);
        command(&mut st, "reset vision");
        let reset = PreviewAction::Reset {
            project: Some("vision".into()),
        };
        assert_eq!(
            asks_due(&mut st),
            vec![Effect::Preview {
                source: 0,
                action: reset.clone()
            }]
        );
        // A source that cannot preview says so in a plain line.
        answered(&mut st, reset, None);
        let screen = text(&st, 80, 24);
        assert!(
            screen.contains("no preview: this source cannot say what the action would do"),
            "{screen}"
        );
        insta::assert_snapshot!("reset_confirm_without_preview_80x24", screen);
    }

    #[test]
    fn the_move_dialog_previews_the_move_to_the_target_picked() {
        let mut st = lab_state();
        let _ = asks_due(&mut st);
        command(&mut st, "move 1");
        let Mode::Move(m) = &st.mode else {
            panic!("{:?}", st.mode)
        };
        let row = m.targets[m.selected].clone();
        run(&mut st, vec![code(KeyCode::Enter)]);
        assert!(matches!(st.mode, Mode::Confirm(_)), "{:?}", st.mode);
        let asks = asks_due(&mut st);
        let [
            Effect::Preview {
                source: 0,
                action:
                    PreviewAction::Move {
                        claim: ClaimId(1),
                        node,
                        devices,
                    },
            },
        ] = &asks[..]
        else {
            panic!("{asks:?}")
        };
        assert_eq!(node.as_deref(), Some(row.node.as_str()));
        assert_eq!(devices.as_deref(), Some(&[row.index][..]));
    }

    #[test]
    fn the_claim_form_previews_the_claim_and_an_edit_asks_again() {
        let mut st = lab_state();
        let _ = asks_due(&mut st);
        run(&mut st, vec![k('c')]);
        assert!(asks_due(&mut st).is_empty(), "nothing asked while editing");
        let eff = run(&mut st, vec![code(KeyCode::Enter)]);
        assert!(matches!(eff[..], [Effect::Plan { .. }]), "{eff:?}");
        let asks = asks_due(&mut st);
        let [
            Effect::Preview {
                source: 0,
                action: claim @ PreviewAction::Claim { .. },
            },
        ] = &asks[..]
        else {
            panic!("{asks:?}")
        };
        let mut p = preview(claim.clone());
        p.placed = vec![PlacedClaim {
            claim: ClaimId(7),
            project: "default".into(),
            at: "lab-b:1".into(),
        }];
        answered(&mut st, claim.clone(), Some(p));
        let Mode::Form(f) = &st.mode else {
            panic!("{:?}", st.mode)
        };
        assert!(matches!(f.what_if, DialogPreview::Shown(_)));
        assert_eq!(f.stage, FormStage::Planning);
        // Back to editing (the placement refused) drops it; the next Enter asks again.
        let _ = update(
            &mut st,
            Msg::Planned {
                source: 0,
                result: Err(Failure::Refused("does not fit now".into())),
            },
        );
        assert!(asks_due(&mut st).is_empty());
        let Mode::Form(f) = &st.mode else {
            panic!("{:?}", st.mode)
        };
        assert_eq!(f.what_if, DialogPreview::Unasked);
    }
}
