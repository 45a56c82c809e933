//! The fleet map on a real `gpuboard serve`, in the real console in tmux: a claim made
//! from the CLI turns its GPU's cell from free to shared at the next refresh, the arrows
//! reach that cell and Enter opens its GPU detail; the sparklines say they read the
//! endpoint's recorded history. Waits poll the screen with a deadline; nothing asserts a
//! timing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::tmux;

use common::Server;
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

/// The map's row of node `name` (`│x ○ ○ ◐ ○`), without the border.
fn map_row(screen: &str, name: &str) -> Option<String> {
    screen
        .lines()
        .find_map(|l| l.strip_prefix(&format!("│{name} ")))
        .map(|rest| rest.trim_end_matches(['│', ' ']).trim().to_string())
}

#[test]
fn a_claim_from_the_cli_turns_its_cell_shared_and_enter_opens_its_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let inventory = dir.path().join("fleet.toml");
    std::fs::write(&inventory, INVENTORY).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let server = Server::start(&data, &inventory, &[]);
    let home = tempfile::tempdir().unwrap();
    let args = format!(
        "--endpoint {} --token-file {}",
        server.url,
        data.join("operator.token").display()
    );
    let s = Session::console(120, 40, "fleetmap", home.path(), &args);
    s.wait_for("GPUs (6)");
    s.keys(&["1"]);
    let screen = s.wait_until("x all free", |t| {
        map_row(t, "x").as_deref() == Some("○ ○ ○ ○")
    });
    assert_eq!(map_row(&screen, "y").as_deref(), Some("○ ○"), "{screen}");
    s.wait_for("from the recorded history");
    let out = server.cli(&[
        "claim",
        "--json",
        "--memory",
        "10GiB",
        "--node",
        "x",
        "--devices",
        "2",
        "--project",
        "vision",
        "--holder",
        "alice",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The next refresh shows x:2 shared, the others still free.
    let screen = s.wait_until("x:2 shared", |t| {
        map_row(t, "x").as_deref() == Some("○ ○ ◐ ○")
    });
    assert!(screen.contains("◐ shared 1"), "{screen}");
    // Right enters the map at x:0; two more reach x:2; Enter opens its detail.
    s.keys(&["Right", "Right", "Right"]);
    s.wait_for("▸ x:2 shared");
    s.keys(&["Enter"]);
    let screen = s.wait_for(" x:2 NVIDIA A100-SXM4-40GB ");
    assert!(screen.contains("vision"), "{screen}");
    s.keys(&["q"]);
}
