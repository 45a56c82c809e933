//! "What held GPU 3 on node x at that minute, and what happened to it next", answered by
//! the real console in tmux from a real `gpuboard serve`'s recorded history: claims and
//! releases made at known times, then `g`, the time, Enter, the GPU detail, and `}`
//! walking its next changes. While rewound an action is refused (the claim stays), and
//! `G` returns to the live view the watch kept. A time before the history begins says
//! where it begins; `status --dump-screen --at` prints the same. Waits poll the screen with a deadline; nothing asserts a timing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::tmux;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::Server;
use serde_json::Value;
use tmux::Session;

const INVENTORY: &str = r#"
[[nodes]]
name = "x"
[[nodes.gpus]]
model = "NVIDIA A100-SXM4-40GB"
memory = "40GiB"
count = 4

[[nodes]]
name = "y"
[[nodes.gpus]]
model = "NVIDIA A10G"
memory = "24GiB"
count = 2
"#;

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Sleeps until the wall clock passes `ms`.
fn sleep_past(ms: u64) {
    let now = now_ms();
    if now <= ms {
        std::thread::sleep(Duration::from_millis(ms - now + 50));
    }
}

fn claim(server: &Server, args: &[&str]) -> u64 {
    let mut all = vec!["claim", "--json"];
    all.extend_from_slice(args);
    let out = server.cli(&all);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["id"].as_u64().unwrap()
}

fn release(server: &Server, id: u64) {
    let out = server.cli(&["release", &id.to_string()]);
    assert!(
        out.status.success(),
        "release {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn claim_ids(server: &Server) -> Vec<u64> {
    let out = server.cli(&["ls", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    v.iter().filter_map(|c| c["id"].as_u64()).collect()
}

/// RFC 3339 of a time in ms.
fn rfc3339(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(i64::try_from(ms).unwrap())
        .unwrap()
        .to_string()
}

#[test]
fn what_held_gpu_3_on_node_x_then_and_what_happened_to_it_next() {
    let dir = tempfile::tempdir().unwrap();
    let inventory = dir.path().join("fleet.toml");
    std::fs::write(&inventory, INVENTORY).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let server = Server::start(&data, &inventory, &[]);
    // The recording: alice holds x:3, then releases it; speech takes x:0 meanwhile;
    // then bob takes x:3.
    let first = claim(
        &server,
        &[
            "--memory",
            "10GiB",
            "--node",
            "x",
            "--devices",
            "3",
            "--project",
            "vision",
            "--holder",
            "alice",
        ],
    );
    // A whole second while alice holds it: the time the operator types.
    let held = (now_ms() + 300).div_ceil(1_000) * 1_000;
    sleep_past(held + 1_000);
    release(&server, first);
    let noise = claim(
        &server,
        &[
            "--memory",
            "5GiB",
            "--node",
            "x",
            "--devices",
            "0",
            "--project",
            "speech",
            "--holder",
            "carol",
        ],
    );
    std::thread::sleep(Duration::from_millis(1_200));
    let second = claim(
        &server,
        &[
            "--memory",
            "20GiB",
            "--node",
            "x",
            "--devices",
            "3",
            "--project",
            "nlp",
            "--holder",
            "bob",
        ],
    );

    let home = tempfile::tempdir().unwrap();
    let args = format!(
        "--endpoint {} --token-file {}",
        server.url,
        data.join("operator.token").display()
    );
    let s = Session::console(120, 40, "rewind", home.path(), &args);
    s.wait_for("GPUs (6)");
    // The first screen: g, the time, Enter.
    s.keys(&["g"]);
    s.wait_for("rewind to:");
    s.keys(&[&rfc3339(held), "Enter"]);
    let screen = s.wait_for("ep1 as of");
    assert!(screen.contains("REWIND"), "{screen}");
    // GPU x:3 is the fourth row; its detail says who held it then.
    s.keys(&["j", "j", "j", "Enter"]);
    let screen = s.wait_for(" x:3 NVIDIA A100-SXM4-40GB ep1 ");
    assert!(
        screen.contains(&format!("claim {first} (vision, alice")),
        "{screen}"
    );
    assert!(!screen.contains(&format!("claim {second} ")), "{screen}");
    // `}`: its next change is alice's release (speech's claim on x:0 is no change of x:3).
    s.keys(&["}"]);
    let screen = s.wait_until("the release of x:3", |t| {
        t.contains("next change of GPU x:3") && !t.contains(&format!("claim {first} ("))
    });
    assert!(!screen.contains(&format!("claim {second} ")), "{screen}");
    // And the next: bob's claim.
    s.keys(&["}"]);
    let screen = s.wait_for(&format!("claim {second} (nlp, bob"));
    assert!(screen.contains("x:3"), "{screen}");
    // Rewound, an action is refused, and the claim stays.
    s.keys(&["3"]);
    s.wait_for("Claims (");
    s.keys(&["r"]);
    s.wait_for("actions act on the present; G returns to live");
    assert!(claim_ids(&server).contains(&second));
    assert!(claim_ids(&server).contains(&noise));
    // G: live again in the view looked at while rewound (the Claims list, no banner).
    s.keys(&["G"]);
    let screen = s.wait_until("live again", |t| {
        !t.contains("REWIND") && t.contains("Claims (")
    });
    assert!(screen.contains("● live"), "{screen}");
    // To a GPU at a minute in one go: `g`, the time and the GPU, Enter (two keys besides
    // them) opens that GPU's detail as it was then.
    s.keys(&["g"]);
    s.wait_for("rewind to:");
    s.keys(&[&format!("{} x:3", rfc3339(held)), "Enter"]);
    let screen = s.wait_for(" x:3 NVIDIA A100-SXM4-40GB ep1 ");
    assert!(
        screen.contains("REWIND") && screen.contains(&format!("claim {first} (vision, alice")),
        "{screen}"
    );
    s.keys(&["G"]);
    s.wait_until("live again", |t| !t.contains("REWIND"));
    s.keys(&["2"]);
    s.wait_for("GPUs (6)");
    // A time before the history begins says where it begins.
    s.keys(&["g"]);
    s.wait_for("rewind to:");
    s.keys(&["2020-01-01", "Enter"]);
    let screen = s.wait_for("ep1: history begins");
    assert!(screen.contains("REWIND"), "{screen}");
    assert!(
        screen.contains("ep1: its history begins at"),
        "the GPUs list says it too:\n{screen}"
    );
    s.keys(&["q"]);
    // The same for a ticket: `status --dump-screen claims --at`.
    let out = server.cli(&[
        "status",
        "--dump-screen",
        "claims",
        "--size",
        "120x30",
        "--at",
        &rfc3339(held),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("REWIND") && text.contains("local as of"),
        "{text}"
    );
    assert!(text.contains("alice") && !text.contains("bob"), "{text}");
}
