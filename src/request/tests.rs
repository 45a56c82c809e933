//! Request tests: the forms, the examples of the Ray REP and Koordinator, the ten rules, both naming styles.

use super::*;
use crate::units::{Slots, Units};
use serde_json::{Value, json};

fn parse(v: Value) -> Result<ClaimRequest, RequestError> {
    ClaimRequest::from_json(&v)
}

fn rule_of(v: Value) -> (Rule, String) {
    let e = parse(v).unwrap_err();
    (e.rule, e.to_string())
}

#[test]
fn ray_memory_examples_from_the_rep() {
    let gb40 = Bytes(40_000_000_000);
    let gb80 = Bytes(80_000_000_000);
    let form = parse(json!({"gpu_memory": "10MB"})).unwrap().gpu.unwrap();
    let d = form.per_device(gb40).unwrap();
    assert_eq!((d.compute, d.memory), (Units(3), Bytes(12_000_000)));
    let d = form.per_device(gb80).unwrap();
    assert_eq!((d.compute, d.memory), (Units(2), Bytes(16_000_000)));
    let form = parse(json!({"_gpu_memory": 10u64 << 30}))
        .unwrap()
        .gpu
        .unwrap();
    assert_eq!(
        form.per_device(Bytes::gib(40)).unwrap().compute,
        Units(2500)
    );
    assert_eq!(
        form.per_device(Bytes::gib(80)).unwrap().compute,
        Units(1250)
    );
    let form = parse(json!({"gpu_memory": "30Gi"})).unwrap().gpu.unwrap();
    assert_eq!(
        form.per_device(Bytes::gib(24)),
        Err(TooLarge {
            needs: Bytes::gib(30)
        })
    );
}

#[test]
fn ray_fraction_and_whole() {
    let r = parse(json!({"num_gpus": 0.25})).unwrap();
    assert_eq!(
        r.gpu,
        Some(GpuForm::RayFraction {
            fraction: Units(2500)
        })
    );
    let d = r.gpu.unwrap().per_device(Bytes::gib(40)).unwrap();
    assert_eq!(
        (d.memory, d.compute, d.slots),
        (Bytes::gib(10), Units(2500), Slots(1))
    );
    assert_eq!(
        parse(json!({"num_gpus": 2})).unwrap().gpu,
        Some(GpuForm::RayWhole { count: 2 })
    );
    assert_eq!(
        parse(json!({"num_gpus": "1"})).unwrap().gpu,
        Some(GpuForm::RayWhole { count: 1 })
    );
    let d = GpuForm::RayWhole { count: 1 }
        .per_device(Bytes::gib(80))
        .unwrap();
    assert!(d.exclusive);
    assert_eq!(d.slots, Slots::FULL);
}

#[test]
fn koordinator_examples() {
    let r = parse(json!({"koordinator.sh/gpu-memory": "4Gi", "koordinator.sh/gpu-core": 100, "koordinator.sh/gpu.shared": 2})).unwrap();
    let form = r.gpu.unwrap();
    assert_eq!(form.device_count(), 2);
    let d = form.per_device(Bytes::gib(16)).unwrap();
    assert_eq!((d.memory, d.compute), (Bytes::gib(2), Units(5000)));
    let r = parse(json!({"gpu-memory-ratio": 50})).unwrap();
    let form = r.gpu.unwrap();
    assert_eq!(form.device_count(), 1, "ratio 50 mutates gpu.shared to 1");
    assert_eq!(
        form.per_device(Bytes::gib(8)).unwrap().memory,
        Bytes::gib(4)
    );
    assert_eq!(
        form.per_device(Bytes::gib(8)).unwrap().compute,
        Units(0),
        "no core asked: best effort"
    );
    let form = parse(json!({"gpu-memory-ratio": 200}))
        .unwrap()
        .gpu
        .unwrap();
    assert_eq!(form.device_count(), 2, "ratio 200 mutates gpu.shared to 2");
    assert_eq!(
        form.per_device(Bytes::gib(8)).unwrap().memory,
        Bytes::gib(8)
    );
}

#[test]
fn legacy_koordinator_gpu_is_mutated() {
    let form = parse(json!({"koordinator.sh/gpu": 50}))
        .unwrap()
        .gpu
        .unwrap();
    assert_eq!(
        form,
        GpuForm::KoordinatorShare {
            memory: ShareMemory::Ratio(50),
            core: Some(50),
            shared: 1,
            legacy: true
        }
    );
    let form = parse(json!({"koordinator.sh/gpu": 200}))
        .unwrap()
        .gpu
        .unwrap();
    assert_eq!(form.device_count(), 2);
    assert_eq!(form.to_string(), "koordinator.sh/gpu=200 (gpu.shared=2)");
    let (rule, msg) = rule_of(json!({"koordinator.sh/gpu": 50, "gpu-core": 10}));
    assert_eq!(rule, Rule::MemoryAndRatio);
    assert!(msg.contains("legacy"), "{msg}");
}

#[test]
// One case per rule, each a few lines, read as the table of rules it checks.
#[allow(clippy::too_many_lines)]
fn the_ten_rules_each_name_themselves() {
    let cases: Vec<(Value, Rule, &str)> = vec![
        (
            json!({"nvidia.com/gpu": 1, "gpu-memory": "1Gi", "gpu.shared": 1}),
            Rule::OneForm,
            "cannot be combined",
        ),
        (
            json!({"num_gpus": 0.5, "gpu-memory-ratio": 50}),
            Rule::OneForm,
            "one request form",
        ),
        (
            json!({"gpu-memory": "1Gi", "gpu-memory-ratio": 50, "gpu.shared": 1}),
            Rule::MemoryAndRatio,
            "not both",
        ),
        (
            json!({"gpu-core": 50}),
            Rule::CoreWithoutMemory,
            "needs a memory form",
        ),
        (
            json!({"gpu-memory": "4Gi"}),
            Rule::MemoryWithoutShared,
            "needs `gpu.shared`",
        ),
        (
            json!({"gpu.shared": 2}),
            Rule::MemoryWithoutShared,
            "asks for nothing",
        ),
        (
            json!({"num_gpus": 0.5, "gpu_memory": "1Gi"}),
            Rule::NumGpusWithGpuMemory,
            "not both",
        ),
        (
            json!({"num_gpus": 1.5}),
            Rule::FractionAboveOne,
            "fraction above 1",
        ),
        (json!({"num_gpus": 0}), Rule::OutOfRange, "out of range"),
        (json!({"num_gpus": -0.5}), Rule::OutOfRange, "out of range"),
        (
            json!({"num_gpus": 0.00001}),
            Rule::OutOfRange,
            "grain 0.0001",
        ),
        (json!({"num_gpus": 2000}), Rule::OutOfRange, "up to 1024"),
        (json!({"gpu_memory": "2Ei"}), Rule::OutOfRange, "absurd"),
        (json!({"gpu_memory": 0}), Rule::OutOfRange, "more than 0"),
        (json!({"gpu_memory": "-1Gi"}), Rule::OutOfRange, "negative"),
        (
            json!({"gpu_memory": "12 parsecs"}),
            Rule::OutOfRange,
            "unknown unit",
        ),
        (
            json!({"nvidia.com/gpu": 1025}),
            Rule::OutOfRange,
            "1 to 1024",
        ),
        (
            json!({"num_gpus": 0.5, "colour": "red"}),
            Rule::UnknownField,
            "unknown field `colour`",
        ),
        (
            json!({"gpu-memory-ratio": 150}),
            Rule::UnevenSplit,
            "multiple of 100",
        ),
        (
            json!({"gpu-memory-ratio": 300, "gpu.shared": 2}),
            Rule::UnevenSplit,
            "more than 100 x gpu.shared",
        ),
        (
            json!({"gpu-memory-ratio": 50, "gpu.shared": 3}),
            Rule::UnevenSplit,
            "divide evenly",
        ),
        (
            json!({"gpu-memory-ratio": 50, "gpu-core": 300, "gpu.shared": 2}),
            Rule::UnevenSplit,
            "more than 100 x",
        ),
        (
            json!({"gpu-memory-ratio": 50, "gpu-core": 25, "gpu.shared": 2}),
            Rule::UnevenSplit,
            "divide evenly",
        ),
        (
            json!({"gpu-memory": 1001, "gpu.shared": 2}),
            Rule::UnevenSplit,
            "divide evenly",
        ),
        (
            json!({"num_gpus": 0.5, "labels": {"team\u{0}": "cv"}}),
            Rule::Labels,
            "label keys are 1 to 128 characters",
        ),
        (
            json!({"num_gpus": 0.5, "labels": {"team": "x".repeat(64 * 1024)}}),
            Rule::Labels,
            "at most 1024 characters",
        ),
        (
            json!({"num_gpus": "lots"}),
            Rule::WrongType,
            "must be a fraction",
        ),
        (
            json!({"gpu.shared": 1.5, "gpu-memory": "1Gi"}),
            Rule::WrongType,
            "not whole",
        ),
        (
            json!({"project": 7, "num_gpus": 0.5}),
            Rule::WrongType,
            "must be text",
        ),
        (
            json!({"ttl": "soon", "num_gpus": 0.5}),
            Rule::WrongType,
            "duration",
        ),
        (
            json!({"devices": [0, 0], "num_gpus": 0.5}),
            Rule::OutOfRange,
            "distinct",
        ),
        (
            json!({"num_gpus": 0.5, "gpu_memory": 1, "_gpu_memory": 2}),
            Rule::UnknownField,
            "given twice",
        ),
        (json!({}), Rule::OutOfRange, "asks for nothing"),
        (json!([1, 2]), Rule::WrongType, "JSON object"),
    ];
    for (input, rule, words) in cases {
        let (got, msg) = rule_of(input.clone());
        assert_eq!(got, rule, "{input}: {msg}");
        assert!(msg.contains(words), "{input}: `{msg}` lacks `{words}`");
        assert!(msg.contains(&format!("rule {}", rule.number())), "{msg}");
    }
}

#[test]
fn both_naming_styles_and_toml() {
    let a = parse(json!({"koordinator.sh/gpu-memory-ratio": 50, "koordinator.sh/gpu.shared": 1}))
        .unwrap();
    let b = ClaimRequest::from_toml("\"gpu-memory-ratio\" = 50\n\"gpu.shared\" = 1\n").unwrap();
    assert_eq!(a, b);
    let r = ClaimRequest::from_toml(
            "gpu_memory = \"20GiB\"\naccelerator_type = \"NVIDIA_A100\"\nproject = \"vision\"\nttl = \"10m\"\ncpus = \"500m\"\ndevices = [1]\nwait = true\n[labels]\nteam = \"cv\"\n",
        )
        .unwrap();
    assert_eq!(
        r.gpu,
        Some(GpuForm::RayMemory {
            memory: Bytes::gib(20)
        })
    );
    assert_eq!(r.ttl, Some(600));
    assert_eq!(r.cpus, Some(Milli(500)));
    assert_eq!(r.project, "vision");
    assert_eq!(r.devices, Some(vec![1]));
    assert!(r.wait);
    assert_eq!(r.labels.get("team").map(String::as_str), Some("cv"));
    let err = ClaimRequest::from_toml("gpu_memory = ").unwrap_err();
    assert!(err.message.contains("not valid TOML"), "{err}");
}

#[test]
fn stored_form_round_trips() {
    let r = parse(
        json!({"gpu-memory": "4Gi", "gpu-core": 100, "gpu.shared": 2, "project": "p", "pid": 42}),
    )
    .unwrap();
    let text = serde_json::to_string(&r).unwrap();
    let back: ClaimRequest = serde_json::from_str(&text).unwrap();
    assert_eq!(r, back);
    assert_eq!(r.describe(), "gpu-memory=4GiB gpu-core=100 gpu.shared=2");
}

#[test]
fn the_form_is_shown_as_written() {
    // (written, shown): decimal units stay decimal, binary stay binary, no conversion.
    let cases = [
        (json!({"gpu_memory": "10MB"}), "gpu_memory=10MB"),
        (json!({"gpu_memory": "49.8GiB"}), "gpu_memory=49.8GiB"),
        (json!({"gpu_memory": "8.2G"}), "gpu_memory=8.2GB"),
        (
            json!({"gpu-memory": "20G", "gpu.shared": 2}),
            "gpu-memory=20GB gpu.shared=2",
        ),
        // Where it may go is part of what it asked for.
        (
            json!({"num_gpus": 0.5, "accelerator_type": "A10G", "node": "n1", "devices": [0, 1]}),
            "num_gpus=0.5 accelerator_type=A10G node=n1 devices=0,1",
        ),
    ];
    for (mut v, shown) in cases {
        v["project"] = json!("p");
        let r = parse(v).unwrap();
        assert_eq!(r.describe(), shown);
    }
}

#[test]
fn accelerator_keys() {
    assert_eq!(accelerator_key("NVIDIA_TESLA_A10G"), "A10G");
    assert_eq!(accelerator_key("NVIDIA A10G"), "A10G");
    assert_eq!(accelerator_key("NVIDIA_A100"), "A100");
    assert_eq!(accelerator_key("NVIDIA A100-SXM4-80GB"), "A100");
    assert_eq!(accelerator_key("NVIDIA H100 80GB HBM3"), "H100");
    assert_eq!(accelerator_key("h100"), "H100");
}
