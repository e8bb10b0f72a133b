//! End-to-end tests of GPU sharing with the real binary on simulated GPUs:
//! quarters of one GPU beside a whole-GPU job, and a share's memory limit
//! enforced from telemetry.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// The first line a job wrote, once it has written one.
fn first_log_line(d: &Daemon, id: u64) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, out, _) = d.cli(&["logs", &id.to_string(), "--stdout"]);
        if let Some(line) = out.lines().next() {
            return line.to_string();
        }
        assert!(std::time::Instant::now() < deadline, "job {id} wrote nothing");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn replica(job: &Value) -> Value {
    job["replicas"][0].clone()
}

#[test]
fn four_quarters_share_one_gpu_and_a_job_over_its_memory_share_is_stopped() {
    let s = Scratch::new("sharing");
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &["--sample-interval", "100ms"]);
    let whole = d.submit(json!({"command": "sleep 600", "resources": {"nvidia.com/gpu": 1}}));
    d.until(&format!("/api/v1/jobs/{whole}"), Duration::from_secs(30), |j| j["state"] == "running");
    // Each quarter declares 10 GiB on its simulated GPU and says what it was given.
    let quarter = json!({
        "command": "echo \"$CUDA_VISIBLE_DEVICES $GPOOL_GPU_FRACTION $GPOOL_GPU_MEMORY_MB $GPOOL_GPU_SHARING\"; \
                    echo 'util=20 mem=10240' > \"$GPOOL_SIM_LOAD_FILE\"; sleep 600",
        "resources": {"gpool.io/gpu-fraction": 0.25},
    });
    let quarters: Vec<u64> = (0..4).map(|_| d.submit(quarter.clone())).collect();
    for id in &quarters {
        d.until(&format!("/api/v1/jobs/{id}"), Duration::from_secs(30), |j| j["state"] == "running");
    }
    let whole_gpu = replica(&d.job(whole))["gpus"].clone();
    for id in &quarters {
        let r = replica(&d.job(*id));
        assert_ne!(r["gpus"], whole_gpu, "job {id} shares the whole-GPU job's GPU: {r}");
        assert_eq!(r["gpus"], replica(&d.job(quarters[0]))["gpus"], "all quarters on one GPU");
        assert_eq!(r["gpu_share"]["milli"], 250, "{r}");
        let gpu = r["gpus"][0].as_u64().expect("gpu index");
        let first = first_log_line(&d, *id);
        assert!(first.starts_with(&format!("{gpu} 0.25 ")) && first.ends_with(" time-slicing"), "{first}");
    }
    // Telemetry is per job: a quarter's readings are its own process's (10 GiB, 20%), not the GPU's.
    // Samples taken before the job wrote its load read 0 MiB: wait for the first one after.
    let usage = d.until(&format!("/api/v1/jobs/{}/usage", quarters[0]), Duration::from_secs(30), |u| {
        u["summary"]["peak_memory_mb"].as_u64().is_some_and(|mb| mb > 0)
    });
    assert_eq!(usage["summary"]["peak_memory_mb"], 10240, "{usage}");
    // (The GPU itself is at 80%: four quarters at 20%. A first sample may predate the declaration.)
    let util = usage["summary"]["mean_gpu_util"].as_f64().unwrap_or(-1.0);
    assert!(util > 0.0 && util <= 20.0 + 1e-6, "{usage}");
    // A fifth quarter waits, and so does another whole GPU: the shared GPU is full.
    let fifth = d.submit(json!({"command": "true", "resources": {"gpool.io/gpu-fraction": "25%"}}));
    let blocked = d.submit(json!({"command": "true", "resources": {"nvidia.com/gpu": 1}}));
    let (ok, out, err) = d.cli(&["nodes"]);
    assert!(ok, "{err}");
    assert!(out.contains("GPU sharing time-slicing") && out.contains("shared 1.00: jobs"), "{out}");
    assert_eq!(d.job(fifth)["state"], "pending");
    assert_eq!(d.job(blocked)["state"], "pending");
    // A job whose processes use 30 GiB, over a quarter of 80 GB, is stopped with the figures.
    for id in [fifth, quarters[0]] {
        let (ok, _, err) = d.cli(&["cancel", &id.to_string()]);
        assert!(ok, "{err}");
    }
    let over = d.submit(json!({
        "command": "echo 'util=20 mem=30720' > \"$GPOOL_SIM_LOAD_FILE\"; sleep 600",
        "resources": {"gpool.io/gpu-fraction": 0.25},
    }));
    let ended = d.until(&format!("/api/v1/jobs/{over}"), Duration::from_secs(60), |j| j["state"] == "failed");
    let reason = ended["reason"].as_str().unwrap_or("");
    assert!(reason.contains("30720 MiB") && reason.contains("over its share of"), "{ended}");
    let mut seen = false;
    d.read_events(&format!("/api/v1/events?job={over}&after=0"), Duration::from_secs(30), |e| {
        seen = e["kind"] == "gpu_memory_exceeded";
        seen
    });
    assert!(seen, "an event says why");
    assert_eq!(d.job(blocked)["state"], "pending", "the GPU is still shared");
    for id in &quarters[1..] {
        assert_eq!(d.job(*id)["state"], "running", "job {id} kept to its share");
    }
}

/// Dynamic MIG on the simulated backend: a queue of `1g.10gb` requests on a
/// GPU laid out `7g.80gb` (busy) drains it, gets it repartitioned once idle,
/// and the jobs run on the new instances.
#[test]
fn a_managed_mig_gpu_is_laid_out_for_the_queue_once_idle() {
    let s = Scratch::new("dynamic-mig");
    let d = Daemon::start(
        &s.0.join("data"),
        "1xH100-80GB:mig=7g.80gb",
        &["--mig-managed", "all", "--sample-interval", "100ms"],
    );
    let big = d.submit(json!({"command": "sleep 600", "resources": {"nvidia.com/mig-7g.80gb": 1}}));
    d.until(&format!("/api/v1/jobs/{big}"), Duration::from_secs(30), |j| j["state"] == "running");
    let small: Vec<u64> = (0..3)
        .map(|_| {
            d.submit(json!({
                "command": "echo \"$CUDA_VISIBLE_DEVICES\"; sleep 600",
                "resources": {"nvidia.com/mig-1g.10gb": 1},
            }))
        })
        .collect();
    // The GPU is busy: it is drained, not changed under the running job.
    let mut drained = false;
    d.read_events("/api/v1/events?after=0", Duration::from_secs(30), |e| {
        drained = e["kind"] == "mig_drain";
        drained
    });
    assert!(drained, "the busy GPU is drained");
    assert_eq!(d.job(big)["state"], "running", "never repartitioned under a running job");
    let (ok, _, err) = d.cli(&["cancel", &big.to_string()]);
    assert!(ok, "{err}");
    for id in &small {
        d.until(&format!("/api/v1/jobs/{id}"), Duration::from_secs(60), |j| j["state"] == "running");
    }
    let node = d.get("/api/v1/nodes");
    let instances: Vec<(String, String)> = node[0]["devices"][0]["mig"]
        .as_array()
        .expect("MIG instances")
        .iter()
        .map(|m| (m["profile"].as_str().unwrap_or("").to_string(), m["uuid"].as_str().unwrap_or("").to_string()))
        .collect();
    assert!(instances.iter().filter(|(p, _)| p == "1g.10gb").count() >= 3, "{instances:?}");
    for id in &small {
        let r = replica(&d.job(*id));
        let uuid = r["mig"][0].as_str().expect("a MIG instance").to_string();
        assert!(instances.iter().any(|(p, u)| *u == uuid && p == "1g.10gb"), "{uuid} in {instances:?}");
        assert_eq!(r["cuda_visible_devices"], uuid.as_str());
        assert_eq!(first_log_line(&d, *id), uuid, "the job sees its MIG UUID");
    }
    let mut kinds = Vec::new();
    d.read_events("/api/v1/events?after=0", Duration::from_secs(30), |e| {
        kinds.push(e["kind"].as_str().unwrap_or("").to_string());
        e["kind"] == "mig_repartitioned"
    });
    assert!(kinds.contains(&"mig_repartition".to_string()), "{kinds:?}");
}

/// `gpool bench sharing --placements` runs only the placements named, and
/// a name it does not know is refused with the ones it does.
#[test]
fn bench_sharing_runs_the_placements_named() {
    let s = Scratch::new("bench-sharing");
    let nodes = s.0.join("nodes.csv");
    let pods = s.0.join("openb_pod_list_tiny.csv");
    std::fs::write(&nodes, "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,2,T4\nn1,32000,262144,2,G2\n")
        .expect("nodes");
    let rows: String = (0..12)
        .map(|i| format!("p{i},4000,1024,1,{},{},LS,Running,0,0,0\n", [250, 500, 1000][i % 3], ["", "T4"][i % 2]))
        .collect();
    std::fs::write(
        &pods,
        format!("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n{rows}"),
    )
    .expect("pods");
    let (nodes, pods) = (nodes.display().to_string(), pods.display().to_string());
    let base = ["bench", "sharing", "--nodes", &nodes, "--pods", &pods];
    let (code, out, err) = gpool(&[&base[..], &["--placements", "best-fit,fragmentation", "--json"]].concat(), &[]);
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    let names: Vec<&str> = v.as_array().expect("rows").iter().filter_map(|r| r["placement"].as_str()).collect();
    assert_eq!(names, ["best-fit", "fragmentation"], "{v}");
    assert!(v[1]["unallocated_gpus_at_100"].as_f64().is_some(), "{v}");
    // `-o json|yaml` as everywhere in the CLI: the same rows.
    for format in ["json", "yaml"] {
        let (code, out, err) =
            gpool(&[&base[..], &["--placements", "best-fit,fragmentation", "-o", format]].concat(), &[]);
        assert_eq!(code, Some(0), "{err}");
        let w: Value = gpool_api::yaml::from_str(&out).expect("JSON and YAML both read as YAML");
        for row in [0, 1] {
            for field in ["placement", "unallocated_gpus_at_100", "unallocated_gpus_at_130"] {
                assert_eq!(w[row][field], v[row][field], "-o {format}, row {row}, {field}: {out}");
            }
        }
    }
    let (code, _, err) = gpool(&[&base[..], &["--placements", "best-fit,tetris"]].concat(), &[]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("no placement \"tetris\"") && err.contains("whole-gpu, best-fit, spread, fragmentation"),
        "{err}"
    );
}
