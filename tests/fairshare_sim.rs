//! The fair-share scheduler on a simulated clock: the source's example and its
//! variations, bounded debts, and no starvation.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::format_push_string
)]

use gpuboard::simulate::{Scenario, SimReport, run_scenario};
use proptest::prelude::*;

fn scenario(text: &str) -> Scenario {
    toml::from_str(text).unwrap()
}

/// The source's example with a GPU `s` times as fast as the CPU and the given shares,
/// over a simulated day.
fn example(s: f64, share_a: u32, share_b: u32) -> SimReport {
    run_scenario(&scenario(&format!(
        r#"
duration_s = 86400
[speeds]
cpu = 1.0
"gpu:G" = {s}
[[hosts]]
name = "h"
cpus = 1
gpus = {{ G = 1 }}
[[projects]]
name = "A"
share = {share_a}
[[projects]]
name = "B"
share = {share_b}
[[claims]]
project = "A"
on = ["gpu"]
duration_s = 600
count = 200
[[claims]]
project = "B"
on = ["gpu"]
duration_s = 600
count = 200
[[claims]]
project = "B"
on = ["cpu"]
duration_s = 600
count = 200
"#
    )))
    .unwrap()
}

fn within(got: f64, want: f64, points: f64, what: &str) {
    assert!(
        (got - want).abs() <= points / 100.0,
        "{what}: got {:.2} %, want {:.2} %",
        got * 100.0,
        want * 100.0
    );
}

#[test]
fn the_sources_example_comes_out_75_25_and_cpu_to_b() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/assets/scenarios/boinc-example.toml"
    ))
    .unwrap();
    let report = run_scenario(&scenario(&text)).unwrap();
    assert_eq!(report.duration_s, 86_400.0);
    let cpu_b = report.total("B", "cpu").unwrap();
    assert!(cpu_b >= 0.97, "CPU used by B {:.2} %", cpu_b * 100.0);
    within(
        report.total("A", "gpu:Example GPU").unwrap(),
        0.75,
        3.0,
        "GPU A",
    );
    within(
        report.total("B", "gpu:Example GPU").unwrap(),
        0.25,
        3.0,
        "GPU B",
    );
    assert_eq!(report.total("A", "cpu"), Some(0.0));
    // The windows add up to the whole run.
    assert_eq!(report.windows.len(), 24);
}

#[test]
fn other_speeds_give_the_split_equal_processing_implies() {
    for s in [1.5, 3.0, 4.0, 8.0] {
        let report = example(s, 100, 100);
        let want = (1.0 + s) / (2.0 * s);
        within(
            report.total("A", "gpu:G").unwrap(),
            want,
            3.0,
            &format!("GPU A at s={s}"),
        );
        assert!(report.total("B", "cpu").unwrap() >= 0.97);
    }
}

#[test]
fn unequal_shares_divide_processing_in_their_ratio() {
    for (s, share_a, share_b) in [(2.0, 100, 200), (4.0, 100, 300), (2.0, 300, 100)] {
        let report = example(s, share_a, share_b);
        let a = report.total("A", "gpu:G").unwrap() * s;
        let b = report.total("B", "gpu:G").unwrap() * s + report.total("B", "cpu").unwrap();
        let want = f64::from(share_a) / f64::from(share_b);
        // With A 3x B, A can take at most the whole GPU (2 of processing vs B's 1 on the CPU).
        let want = want.min(s);
        assert!(
            (a / b - want).abs() <= 0.06 * want,
            "s={s} shares {share_a}:{share_b}: processing A {a:.3} B {b:.3}"
        );
    }
}

#[test]
fn debts_stay_bounded_when_only_one_project_has_gpu_work() {
    // A has only GPU work, B only CPU work: D(B,gpu) and D(A,cpu) stay false and their
    // debts do not move; the others track their targets.
    let report = run_scenario(&scenario(
        r#"
duration_s = 259200
[[hosts]]
name = "h"
cpus = 2
gpus = { "NVIDIA A100-SXM4-80GB" = 1 }
[[projects]]
name = "A"
[[projects]]
name = "B"
[[claims]]
project = "A"
on = ["gpu"]
duration_s = 900
count = 400
[[claims]]
project = "B"
on = ["cpu"]
duration_s = 900
count = 800
"#,
    ))
    .unwrap();
    for d in &report.debts {
        let idle_side = (d.project.as_str() == "A" && d.resource.as_str() == "cpu")
            || (d.project.as_str() == "B" && d.resource.as_str() != "cpu");
        if idle_side {
            assert!(!d.accrue, "{d:?}");
            assert_eq!(d.debt_instance_s, 0.0, "{d:?}");
        } else {
            assert!(d.debt_instance_s.abs() < 1.0, "{d:?}");
        }
    }
    for p in &report.projects {
        assert!(p.overall_debt_gflop.abs() < 1e3, "{p:?}");
    }
    assert!(report.total("A", "gpu:NVIDIA A100-SXM4-80GB").unwrap() > 0.99);
}

#[test]
fn bad_scenarios_name_the_problem() {
    let base = r#"
duration_s = 100
[[hosts]]
name = "h"
cpus = 1
[[projects]]
name = "A"
"#;
    let cases = [
        (
            "[[claims]]\nproject = \"Z\"\non = [\"cpu\"]\nduration_s = 1\n",
            "not in [[projects]]",
        ),
        (
            "[[claims]]\nproject = \"A\"\non = [\"gpu\"]\nduration_s = 1\n",
            "no host has `gpu`",
        ),
        (
            "[[claims]]\nproject = \"A\"\non = [\"cpu\"]\namount = 1.5\nduration_s = 1\n",
            "amount 1.5",
        ),
        (
            "[[claims]]\nproject = \"A\"\non = [\"cpu\"]\nduration_s = 0\n",
            "duration_s must be positive",
        ),
        (
            "[[claims]]\nproject = \"A\"\non = [\"cpu\"]\namount = 4\nduration_s = 1\n",
            "could never run",
        ),
        ("[speeds]\n\"gpu:X\" = 2.0\n", "which no host has"),
        ("[speeds]\ncpu = -1.0\n", "speed -1"),
    ];
    for (extra, want) in cases {
        let err = run_scenario(&scenario(&format!("{base}{extra}")))
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{extra}: {err}");
    }
    assert!(toml::from_str::<Scenario>(&format!("{base}bogus = 1\n")).is_err());
}

fn random_scenario() -> impl Strategy<Value = String> {
    let projects = prop::collection::vec(1u32..=300, 2..=4);
    let host = (1u32..=4, 1u32..=3, 0u32..=2);
    (projects, host).prop_flat_map(|(shares, (cpus, gpus_a, gpus_b))| {
        let n = shares.len();
        let stream = (0..n, 0usize..4, 60u32..=3_600, 1u32..=12, 0u32..=20_000, 0u32..=600);
        let streams = prop::collection::vec(stream, 1..=8);
        (Just(shares), Just((cpus, gpus_a, gpus_b)), streams)
    })
    .prop_map(|(shares, (cpus, gpus_a, gpus_b), streams)| {
        let mut text = String::from("duration_s = 3000000\nreport_every_s = 86400\n");
        text += &format!("[[hosts]]\nname = \"h1\"\ncpus = {cpus}\ngpus = {{ \"NVIDIA A100\" = {gpus_a} }}\n");
        if gpus_b > 0 {
            text += &format!("[[hosts]]\nname = \"h2\"\ncpus = 1\ngpus = {{ \"Tesla T4\" = {gpus_b} }}\n");
        }
        for (p, share) in shares.iter().enumerate() {
            text += &format!("[[projects]]\nname = \"p{p}\"\nshare = {share}\n");
        }
        for (p, kind, duration, count, at, every) in streams {
            // Every claim fits somewhere: amounts no larger than the smallest host offers.
            let (on, amount) = match kind {
                0 => ("[\"cpu\"]", "1"),
                1 => ("[\"gpu\"]", "0.25"),
                2 => ("[\"gpu:NVIDIA A100\"]", "1"),
                _ => ("[\"gpu\", \"cpu\"]", "0.5"),
            };
            text += &format!(
                "[[claims]]\nproject = \"p{p}\"\non = {on}\namount = {amount}\nduration_s = {duration}\ncount = {count}\nat_s = {at}\nevery_s = {every}\n"
            );
        }
        text
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_project_with_a_share_and_work_that_fits_is_eventually_placed(text in random_scenario()) {
        let report = run_scenario(&scenario(&text)).unwrap();
        for p in &report.projects {
            prop_assert_eq!(p.pending_at_end, 0, "{:?}\n{}", p, text);
            prop_assert_eq!(p.placed, p.submitted, "{:?}", p);
        }
    }
}
