//! One node `n1` as four real peers see it, all at once: Slurm (slurmctld and slurmd with
//! gres gpu, a job holding a GPU), `gpuboard serve` on the fake NVML library (the same
//! GPUs by UUID, a claim planted on the Slurm job's GPU, a claim whose process runs in a
//! pod's cgroup, a process nobody holds), kmock (the node with HAMi's register annotation
//! naming the UUIDs, a pod bound to it holding one GPU by HAMi's annotation) and Prometheus
//! scraping dcgm series for `n1`. `status --json` and the console's by-GPU screen then show
//! one physical GPU list, the double booking with both holders named, the pod, claim and
//! process as one chain not flagged, and the unexplained process flagged.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::{kmock, slurm_cluster};

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Reply, Stopper, free_port, skip_peer};
use serde_json::{Value, json};

const POD_UID: &str = "0e1f2a3b-0042-4000-8000-000000000042";
/// A pid no process has (above any default `pid_max` of a container), nobody's.
const NOBODYS_PID: u32 = 3_900_001;

fn uuid(i: u32) -> String {
    format!("GPU-0e1f0000-0000-4000-8000-00000000000{i}")
}

/// The fake NVML fixture: four A100s with the UUIDs; on GPU 1 `worker` (a real process
/// whose environment names claim 2) in the pod's cgroup; on GPU 2 a process in a user
/// session that no holder accounts for.
fn nvml_fixture(dir: &Path, worker: u32) -> PathBuf {
    let root = dir.join("proc");
    let mut text = format!(
        "driver_version = \"550.54.15\"\nproc_root = \"{}\"\n",
        root.display()
    );
    for i in 0..4 {
        write!(
            text,
            "[[devices]]\nname = \"NVIDIA A100-SXM4-40GB\"\nuuid = \"{}\"\n\
             pci_bus_id = \"00000000:{:02x}:00.0\"\nmemory_total = 42949672960\n\
             memory_reserved = 536870912\nmemory_used = 4294967296\nutilization_gpu = 40\n\
             utilization_memory = 10\n",
            uuid(i),
            16 * (i + 1)
        )
        .unwrap();
        let pod = POD_UID.replace('-', "_");
        match i {
            1 => write!(
                text,
                "[[devices.processes]]\npid = {worker}\nused_memory = 2147483648\nname = \"worker\"\n\
                 cgroup = \"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod}.slice/cri-containerd-{}.scope\\n\"\n",
                "ab".repeat(32)
            )
            .unwrap(),
            2 => write!(
                text,
                "[[devices.processes]]\npid = {NOBODYS_PID}\nused_memory = 1073741824\nname = \"miner\"\n\
                 cgroup = \"0::/user.slice/user-1000.slice/session-3.scope\\n\"\n"
            )
            .unwrap(),
            _ => {}
        }
    }
    let path = dir.join("fixture.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The corpus cluster's HAMi node and pod, made `n1` and `ml/infer` with these UUIDs.
fn kube_objects(dir: &Path) -> (PathBuf, PathBuf) {
    let at = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/kubernetes/cluster");
    let read = |f: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(at.join(f)).unwrap()).unwrap()
    };
    let mut nodes = read("nodes.json");
    let mut node = nodes["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["metadata"]["name"] == "hami-a")
        .unwrap()
        .clone();
    node["metadata"]["name"] = json!("n1");
    node["metadata"]["labels"]["kubernetes.io/hostname"] = json!("n1");
    let register: Vec<Value> = (0..4)
        .map(|i| {
            json!({"id": uuid(i), "index": i, "count": 10, "devmem": 40960, "devcore": 100,
                   "type": "NVIDIA-NVIDIA A100-SXM4-40GB", "numa": 0, "mode": "hami-core",
                   "health": true, "devicepairscore": {}})
        })
        .collect();
    node["metadata"]["annotations"]["hami.io/node-nvidia-register"] =
        json!(serde_json::to_string(&register).unwrap());
    node["status"]["capacity"]["nvidia.com/gpu"] = json!("40");
    node["status"]["allocatable"]["nvidia.com/gpu"] = json!("40");
    nodes["items"] = json!([node]);
    let mut pods = read("pods.json");
    let mut pod = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["metadata"]["name"] == "hami-3g")
        .unwrap()
        .clone();
    pod["metadata"]["name"] = json!("infer");
    pod["metadata"]["uid"] = json!(POD_UID);
    pod["metadata"]["annotations"]["hami.io/vgpu-node"] = json!("n1");
    pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] =
        json!(format!("{},NVIDIA,8000,50:;", uuid(1)));
    pod["spec"]["nodeName"] = json!("n1");
    pod["spec"]["containers"][0]["resources"]["limits"] =
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "50"});
    pods["items"] = json!([pod]);
    let (n, p) = (dir.join("nodes.json"), dir.join("pods.json"));
    std::fs::write(&n, nodes.to_string()).unwrap();
    std::fs::write(&p, pods.to_string()).unwrap();
    (n, p)
}

/// dcgm-exporter's series for `n1`'s four GPUs.
fn dcgm_text() -> Vec<u8> {
    let mut out = String::new();
    for (metric, value) in [
        ("DCGM_FI_DEV_GPU_UTIL", "40"),
        ("DCGM_FI_DEV_FB_USED", "4096"),
        ("DCGM_FI_DEV_FB_FREE", "36864"),
        ("DCGM_FI_DEV_GPU_TEMP", "45"),
    ] {
        writeln!(out, "# TYPE {metric} gauge").unwrap();
        for i in 0..4 {
            writeln!(
                out,
                "{metric}{{gpu=\"{i}\",UUID=\"{}\",device=\"nvidia{i}\",modelName=\"NVIDIA A100-SXM4-40GB\",Hostname=\"n1\"}} {value}",
                uuid(i)
            )
            .unwrap();
        }
    }
    out.into_bytes()
}

fn prometheus(dir: &Path, target: &str) -> (Stopper, String) {
    let binary = std::env::var("GPUBOARD_PROMETHEUS")
        .map_or_else(|_| PathBuf::from("prometheus"), PathBuf::from);
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n\
         - job_name: dcgm\n  metrics_path: /metrics\n  static_configs: [{{targets: [\"{target}\"]}}]\n"
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let port = free_port();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(&binary)
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    (
        Stopper {
            child,
            name: "prometheus",
        },
        format!("http://127.0.0.1:{port}"),
    )
}

/// The GPU index `scontrol` says job `id` holds.
fn slurm_index(cluster: &slurm_cluster::Cluster, id: u32) -> u32 {
    let text = cluster.run("scontrol", &["show", "job", "-d", &id.to_string()]);
    let at = text
        .find("IDX:")
        .unwrap_or_else(|| panic!("no IDX in {text}"))
        + 4;
    text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

fn gpuboard_status(home: &Path, config: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(common::gpuboard())
        .arg("status")
        .args(args)
        .arg("--config")
        .arg(config)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env_remove("SLURM_JWT")
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

async fn post_claim(server: &common::Server, node: &str, device: u32, project: &str) -> u64 {
    let r = common::http()
        .post(format!("{}/v1/claims", server.url))
        .bearer_auth(server.operator_token())
        .json(&json!({"gpu_memory": 8u64 << 30, "node": node, "devices": [device], "project": project}))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status.as_u16(), 201, "{body:#}");
    body["id"]
        .as_u64()
        .unwrap_or_else(|| body["claim"]["id"].as_u64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// One scenario over four real peers, read top to bottom: start them, plant, then check.
#[allow(clippy::too_many_lines)]
async fn one_node_as_four_engines_see_it() {
    for peer in ["slurm", "kmock", "prometheus"] {
        if skip_peer(peer) {
            eprintln!("skipped: GPUBOARD_SKIP_PEERS lists {peer}");
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Slurm: a job holding one of n1's GPUs.
    let slurm = tokio::task::spawn_blocking(|| slurm_cluster::Cluster::start_on("n1"))
        .await
        .unwrap();
    let job = slurm.submit("nobody", "train", "gpu:1");
    slurm.wait_for("the job to run", || slurm.job(job).starts_with("RUNNING"));
    let booked = slurm_index(&slurm, job);
    // A real process whose environment names claim 2 (the second claim serve gives).
    let mut worker = Command::new("sleep")
        .arg("600")
        .env("GPUBOARD_CLAIM_ID", "2")
        .spawn()
        .unwrap();
    let worker_pid = worker.id();
    // gpuboard serve on the fake NVML library.
    let driver = common::fake_driver_dir();
    let fixture = nvml_fixture(d, worker_pid);
    let mut cmd = Command::new(common::gpuboard());
    cmd.env("LD_LIBRARY_PATH", driver.path())
        .env("GPUBOARD_FAKE_NVML_FIXTURE", &fixture)
        .env("GPUBOARD_HOST_LOCK", d.join("host.lock"))
        .env("GPUBOARD_HOST_PROC", d.join("proc"))
        .arg("serve");
    let none = d.join("no-coordination-file");
    let server = common::Server::spawn(
        cmd,
        &d.join("data"),
        &[
            "--open-reads",
            "--coordination-file",
            none.to_str().unwrap(),
        ],
    );
    let snap: Value = common::http()
        .get(format!("{}/v1/snapshot", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let host = snap["nodes"][0]["name"].as_str().unwrap().to_string();
    // Claim 1 on the Slurm job's GPU (the planted double booking); claim 2 on GPU 1,
    // whose process runs in the pod's cgroup.
    assert_eq!(post_claim(&server, &host, booked, "planted").await, 1);
    assert_eq!(post_claim(&server, &host, 1, "in-pod").await, 2);
    // kmock: n1 with HAMi's register annotation, pod ml/infer on GPU 1 by UUID.
    let (nodes, pods) = kube_objects(d);
    let cluster = kmock::Cluster::start(&[
        "--load",
        nodes.to_str().unwrap(),
        "--load",
        pods.to_str().unwrap(),
    ]);
    // Prometheus scraping dcgm series for n1.
    let ctype = "text/plain; version=0.0.4; charset=utf-8";
    let exporter = common::serve(vec![("/metrics", Reply::Full(200, ctype, dcgm_text()))]).await;
    let (mut prom, prom_url) = prometheus(d, exporter.trim_start_matches("http://"));
    // One config naming the four, and that serve's host is n1.
    let config = d.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[endpoints]]\nname = \"serve\"\nurl = \"{}\"\ntoken_file = \"{}\"\n\
             [[endpoints]]\nname = \"slurm\"\nurl = \"{}\"\nkind = \"slurm\"\n\
             [[endpoints]]\nname = \"k8s\"\nkind = \"kubernetes\"\nkubeconfig = \"{}\"\n\
             [[endpoints]]\nname = \"dcgm\"\nurl = \"{prom_url}\"\nkind = \"prometheus\"\n\
             [aliases]\n\"{host}\" = \"n1\"\n",
            server.url,
            server.dir.join("operator.token").display(),
            slurm.url(),
            cluster.kubeconfig().display(),
        ),
    )
    .unwrap();
    let home = d.join("home");
    std::fs::create_dir_all(&home).unwrap();
    // Until every peer has answered with its part (Prometheus scrapes, serve samples).
    let deadline = Instant::now() + Duration::from_secs(90);
    let doc: Value = loop {
        let (ok, out) = tokio::task::spawn_blocking({
            let (home, config) = (home.clone(), config.clone());
            move || gpuboard_status(&home, &config, &["--once", "--json"])
        })
        .await
        .unwrap();
        let doc: Option<Value> = ok.then(|| serde_json::from_str(&out).ok()).flatten();
        let ready = doc.as_ref().is_some_and(|doc| {
            let gpus = doc["physical"]["gpus"].as_array();
            gpus.is_some_and(|g| {
                g.len() == 4
                    && g.iter()
                        .all(|g| g["seen_by"].as_array().is_some_and(|s| s.len() == 4))
                    && g.iter().any(|g| {
                        g["processes"].as_array().is_some_and(|p| {
                            p.iter()
                                .any(|p| p["pid"] == worker_pid && !p["holder"].is_null())
                        })
                    })
            })
        });
        if ready {
            break doc.unwrap();
        }
        if let Ok(Some(s)) = prom.child.try_wait() {
            panic!(
                "prometheus exited ({s}): {}",
                std::fs::read_to_string(d.join("prometheus.log")).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "not every peer's part within 90 s:\n{out}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let gpus = doc["physical"]["gpus"].as_array().unwrap();
    assert!(
        doc["physical"]["warnings"].as_array().unwrap().is_empty(),
        "{doc:#}"
    );
    // One list: n1's four GPUs, each seen by the four sources.
    let places: Vec<String> = gpus
        .iter()
        .map(|g| format!("{}:{}", g["node"].as_str().unwrap(), g["index"]))
        .collect();
    assert_eq!(places, ["n1:0", "n1:1", "n1:2", "n1:3"], "{doc:#}");
    for g in gpus {
        let seen: Vec<&str> = g["seen_by"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["source_name"].as_str().unwrap())
            .collect();
        assert_eq!(seen, ["serve", "slurm", "k8s", "dcgm"], "{g:#}");
    }
    let flags = |i: usize| -> Vec<String> {
        gpus[i]["flags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["flag"].as_str().unwrap().to_string())
            .collect()
    };
    let labels = |i: usize, of: &Value| -> Vec<String> {
        of.as_array()
            .unwrap()
            .iter()
            .map(|h| {
                gpus[i]["holders"][h.as_u64().unwrap() as usize]["label"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    // The planted double booking, both holders named.
    let b = booked as usize;
    assert_eq!(flags(b), ["double-booked"], "{:#}", gpus[b]);
    let mut named = labels(b, &gpus[b]["flags"][0]["holders"]);
    named.sort();
    assert_eq!(named.len(), 2, "{:#}", gpus[b]);
    assert_eq!(named[0], format!("Slurm job {job}"), "{:#}", gpus[b]);
    assert!(named[1].starts_with("claim 1"), "{:#}", gpus[b]);
    // Pod, claim and process: one chain, not flagged.
    if b != 1 {
        assert!(flags(1).is_empty(), "{:#}", gpus[1]);
    }
    let holders = gpus[1]["holders"].as_array().unwrap();
    let pod = holders
        .iter()
        .position(|h| h["label"] == "pod ml/infer")
        .unwrap();
    let claim = holders
        .iter()
        .position(|h| h["label"].as_str().unwrap().starts_with("claim 2"))
        .unwrap();
    assert_eq!(holders[claim]["parent"], pod, "{:#}", gpus[1]);
    let p = gpus[1]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == worker_pid)
        .unwrap();
    assert_eq!(p["holder"], claim);
    // The process nobody holds.
    assert!(
        flags(2).contains(&"unexplained".to_string()),
        "{:#}",
        gpus[2]
    );
    assert_eq!(
        gpus[2]["flags"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["flag"] == "unexplained")
            .unwrap()["pids"],
        json!([NOBODYS_PID])
    );
    // The console: `:gpu n1:N` shows the same, drawn.
    let screen = |what: String| {
        let (home, config) = (home.clone(), config.clone());
        tokio::task::spawn_blocking(move || {
            gpuboard_status(
                &home,
                &config,
                &["--dump-screen", &what, "--size", "120x40"],
            )
        })
    };
    let (ok, text) = screen(format!("gpu:n1:{booked}")).await.unwrap();
    assert!(ok, "{text}");
    assert!(text.contains("! double-booked:"), "{text}");
    assert!(text.contains(&format!("Slurm job {job} [slurm]")), "{text}");
    assert!(text.contains("claim 1"), "{text}");
    let (ok, text) = screen("gpu:n1:1".to_string()).await.unwrap();
    assert!(ok, "{text}");
    assert!(text.contains("pod ml/infer"), "{text}");
    assert!(text.contains("└─ claim 2"), "{text}");
    assert!(text.contains(&format!("pid {worker_pid} worker")), "{text}");
    let (ok, text) = screen("gpu:n1:2".to_string()).await.unwrap();
    assert!(ok, "{text}");
    assert!(text.contains("! unexplained:"), "{text}");
    assert!(text.contains(&format!("pid {NOBODYS_PID} miner")), "{text}");
    prom.stop();
    let _ = worker.kill();
    let _ = worker.wait();
    drop(cluster);
    drop(server);
    drop(slurm);
}
