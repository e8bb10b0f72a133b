//! End-to-end tests of GPU telemetry with the real binary: the simulated
//! backend following what jobs declare, advice, alerts and their webhook.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// A job that declares what it does on its simulated GPU, line by line, forever.
fn declaring(pattern: &[&str], resources: Value) -> Value {
    let lines: Vec<String> =
        pattern.iter().map(|l| format!("echo '{l}' >> \"$GPOOL_SIM_LOAD_FILE\"; sleep 0.2")).collect();
    json!({"command": format!("while true; do {}; done", lines.join("; ")), "resources": resources})
}

fn kinds(advice: &Value) -> Vec<String> {
    advice["findings"]
        .as_array()
        .map_or_else(Vec::new, |f| f.iter().filter_map(|x| x["kind"].as_str().map(String::from)).collect())
}

#[test]
fn advice_tells_a_starved_an_idle_and_an_oversized_job_apart() {
    let s = Scratch::new("advice");
    // Whole H100s, and a MIG-enabled GPU so that the cluster offers 1g.10gb.
    let d = Daemon::start(
        &s.0.join("data"),
        "3xH100-80GB,1xH100-80GB:mig=3g.40gb+2g.20gb+1g.10gb*2",
        &["--sample-interval", "100ms"],
    );
    // Model loaded (70 GiB), kernels in bursts: the input pipeline starves the GPU.
    let starved = d.submit(declaring(
        &["util=100 mem=71680", "util=0 mem=71680", "util=5 mem=71680", "util=0 mem=71680"],
        json!({"nvidia.com/gpu": 1, "cpu": 4}),
    ));
    // Holds a GPU and does nothing.
    let idle = d.submit(declaring(&["util=0 mem=0"], json!({"nvidia.com/gpu": 1})));
    // 7 GiB and 10% of a whole H100: a 1g.10gb instance would do.
    let small = d.submit(declaring(&["util=10 mem=7000"], json!({"nvidia.com/gpu": 1})));
    let cases = [(starved, "input_bound"), (idle, "idle_gpu"), (small, "over_provisioned")];
    for (id, want) in cases {
        let a = d.until(&format!("/api/v1/jobs/{id}/advice?minSpan=2s"), Duration::from_secs(60), |a| {
            !kinds(a).iter().any(|k| k == "not_enough_data")
        });
        assert_eq!(kinds(&a), vec![want.to_string()], "job {id}: {a:#}");
        let f = &a["findings"][0];
        assert!(!f["evidence"].as_array().expect("evidence").is_empty(), "{f}");
        assert!(f["wasted_usd"].as_f64().is_some_and(|u| u > 0.0), "an H100 has a price, so waste has one: {f}");
    }
    let small_advice = d.get(&format!("/api/v1/jobs/{small}/advice?minSpan=2s"));
    assert!(small_advice["findings"][0]["summary"].as_str().is_some_and(|t| t.contains("1g.10gb")), "{small_advice}");
    // The CLI says the same in words.
    let (ok, out, err) = d.cli(&["advise", &starved.to_string(), "--min-span", "2s"]);
    assert!(ok, "{err}");
    assert!(out.contains("input-pipeline bound") && out.contains("evidence:") && out.contains("try:"), "{out}");
    // Bad input is refused with the field named.
    let (status, body) = d.req("GET", &format!("/api/v1/jobs/{idle}/advice?minSpan=soon"), &d.token, None);
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("minSpan")), "{body}");
    for id in [starved, idle, small] {
        d.req("POST", &format!("/api/v1/jobs/{id}/cancel"), &d.token, None);
    }
    d.wait_ended(&[starved, idle, small], Duration::from_secs(60));
    // A finished job keeps its usage and its curve.
    let job = d.job(idle);
    assert!(job["usage"]["gpu_hours"].as_f64().is_some_and(|h| h > 0.0), "{job}");
    // It declared no memory: what is left is the simulated driver's reserve.
    assert!(job["usage"]["peak_memory_mb"].as_u64().is_some_and(|m| m < 200), "{job}");
    let usage = d.get(&format!("/api/v1/jobs/{starved}/usage"));
    assert!(usage["summary"]["peak_memory_mb"].as_u64().is_some_and(|m| m >= 71_680), "{usage}");
    // Advice after the end, with the default span (five minutes) for runs of
    // seconds: judged on each run's last series, not "not enough telemetry".
    for (id, want) in cases {
        let a = d.get(&format!("/api/v1/jobs/{id}/advice"));
        assert_eq!(kinds(&a), vec![want.to_string()], "job {id}, ended: {a:#}");
    }
}

/// A one-shot HTTP server on loopback that hands every request body to `tx`.
fn webhook_sink() -> (String, mpsc::Receiver<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(16) {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            let mut len = 0usize;
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                if line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0u8; len];
            let _ = reader.read_exact(&mut body);
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                let _ = tx.send(v);
            }
        }
    });
    (url, rx)
}

#[test]
fn an_idle_allocated_gpu_fires_an_alert_on_the_api_the_events_and_the_webhook() {
    let s = Scratch::new("alerts");
    let rules = s.0.join("rules.yaml");
    std::fs::write(
        &rules,
        "- {name: AllocatedGpuIdle, scope: allocated_gpu, metric: gpu_util, below: 5, for: 300ms, severity: warning}\n\
         - {name: Hot, scope: gpu, metric: temperature, above: 200, severity: critical}\n",
    )
    .expect("rules");
    let (hook, notices) = webhook_sink();
    let d = Daemon::start(
        &s.0.join("data"),
        "2xH100-80GB",
        &["--sample-interval", "100ms", "--alert-rules", rules.to_str().expect("path"), "--alert-webhook", &hook],
    );
    let id = d.submit(json!({"command": "sleep 600", "resources": {"nvidia.com/gpu": 1}}));
    let firing = notices.recv_timeout(Duration::from_secs(30)).expect("a firing notification");
    assert_eq!(firing["version"], "4", "Alertmanager webhook format: {firing}");
    assert_eq!(firing["status"], "firing");
    let alert = &firing["alerts"][0];
    assert_eq!(alert["labels"]["alertname"], "AllocatedGpuIdle", "{firing}");
    assert_eq!(alert["labels"]["job_id"], id.to_string(), "{firing}");
    assert_eq!(alert["endsAt"], "0001-01-01T00:00:00Z");
    let active = d.get("/api/v1/alerts");
    assert_eq!(active.as_array().map(Vec::len), Some(1), "only the allocated GPU is idle-alerted: {active}");
    let (ok, out, _) = d.cli(&["alerts"]);
    assert!(ok && out.contains("AllocatedGpuIdle"), "{out}");
    let (_, metrics) = d.text("/metrics");
    assert!(
        metrics.contains("gpool_alerts_firing{alertname=\"AllocatedGpuIdle\",severity=\"warning\"} 1"),
        "{metrics}"
    );
    // Ending the job resolves the alert.
    d.req("POST", &format!("/api/v1/jobs/{id}/cancel"), &d.token, None);
    let resolved = notices.recv_timeout(Duration::from_secs(30)).expect("a resolved notification");
    assert_eq!(resolved["status"], "resolved", "{resolved}");
    let kinds: Vec<String> =
        d.history(id, Duration::from_secs(60)).iter().filter_map(|e| e["kind"].as_str().map(String::from)).collect();
    let fired = kinds.iter().position(|k| k == "alert_firing").expect("an alert_firing event");
    let resolved = kinds.iter().position(|k| k == "alert_resolved").expect("an alert_resolved event");
    assert!(fired < resolved, "{kinds:?}");
    let (ok, out, err) = d.cli(&["alerts", "-o", "json"]);
    assert!(ok, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).ok(), Some(json!([])), "{out}");
}

#[test]
fn bad_alert_rules_stop_the_daemon_with_the_rule_named() {
    let s = Scratch::new("badrules");
    let rules = s.0.join("rules.yaml");
    for (text, want) in [
        ("- {name: X, scope: gpu, metric: gpu_util, below: 5, above: 9}\n", "exactly one of"),
        ("- {name: X, scope: rack, metric: gpu_util, below: 5}\n", "scope"),
        ("- {name: X, scope: gpu, metric: fan, below: 5}\n", "metric"),
        ("- {name: X, scope: gpu, metric: gpu_util, below: 5, for: soon}\n", "for"),
        ("- {name: X, scope: gpu, metric: gpu_util, below: 5, colour: red}\n", "colour"),
    ] {
        std::fs::write(&rules, text).expect("rules");
        let out = std::process::Command::new(BIN)
            .args(["up", "--simulate-gpus", "1xH100-80GB", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(s.0.join(format!("data-{}", want.len())))
            .args(["--alert-rules", rules.to_str().expect("path")])
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(err.contains(want), "{text}: {err}");
    }
}

/// A stand-in `nvidia-smi` that prints recorded outputs of a real H100 under load.
fn stand_in_nvidia_smi(bin: &std::path::Path) {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/nvidia-smi");
    let data = data.canonicalize().expect("data/nvidia-smi");
    let script = format!(
        "#!/bin/sh\n\
         d={}\n\
         case \"$1\" in\n\
           --query-gpu=*) cat \"$d/h100-80gb-hbm3_query-gpu_load.csv\" ;;\n\
           --query-compute-apps=*) cat \"$d/h100-80gb-hbm3_query-compute-apps_load.csv\" ;;\n\
           -L) cat \"$d/h100-80gb-hbm3_nvidia-smi-L.txt\" ;;\n\
           *) echo \"stand-in nvidia-smi: no recording for $*\" >&2; exit 2 ;;\n\
         esac\n",
        data.display()
    );
    std::fs::create_dir_all(bin).expect("bin dir");
    let path = bin.join("nvidia-smi");
    std::fs::write(&path, script).expect("script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn gpool_up_reads_recorded_gpus_through_nvidia_smi_into_inventory_metrics_and_top() {
    let s = Scratch::new("smi");
    let bin = s.0.join("bin");
    stand_in_nvidia_smi(&bin);
    let d =
        Daemon::spawn(&s.0.join("data"), &["--gpu-backend", "nvidia-smi", "--sample-interval", "200ms"], Some(&bin));
    let nodes = d.until("/api/v1/nodes", Duration::from_secs(30), |n| !n[0]["devices"][0]["telemetry"].is_null());
    let node = &nodes[0];
    assert_eq!(node["source"], "nvidia-smi", "{node}");
    let gpu = &node["devices"][0];
    assert_eq!(node["devices"].as_array().map(Vec::len), Some(1), "{node}");
    // Values as recorded in h100-80gb-hbm3_query-gpu_load.csv.
    assert_eq!(gpu["uuid"], "GPU-00000000-0000-0000-0000-000000000000");
    assert_eq!(gpu["model"], "H100-80GB");
    assert_eq!(gpu["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(gpu["memory_mb"], 81_559);
    assert_eq!(gpu["pci_bus_id"], "00000000:00:09.0");
    let t = &gpu["telemetry"];
    assert_eq!(t["gpu_util"], 100.0, "{t}");
    assert_eq!(t["memory_used_mb"], 19_818, "{t}");
    assert_eq!(t["temperature_c"], 59.0, "{t}");
    assert_eq!(t["power_w"], 631.95, "{t}");
    // The recorded processes are nobody's jobs: listed, without a job.
    let procs = t["processes"].as_array().expect("processes");
    assert_eq!(procs.iter().filter_map(|p| p["pid"].as_u64()).collect::<Vec<_>>(), vec![11327, 11328, 11345]);
    assert!(procs.iter().all(|p| p["job"].is_null()), "{procs:?}");
    // A job on it: its labels on the DCGM series.
    let id = d.submit(json!({"command": "sleep 600", "resources": {"nvidia.com/gpu": 1}, "gpuModel": "H100-80GB"}));
    let (status, metrics) = d.text("/metrics");
    assert_eq!(status, 200);
    let want = "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-00000000-0000-0000-0000-000000000000\",pci_bus_id=\"00000000:00:09.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\"";
    let line = metrics.lines().find(|l| l.starts_with(want)).unwrap_or_else(|| panic!("{metrics}"));
    assert!(line.contains(&format!("job_id=\"{id}\"")) && line.ends_with(" 100"), "{line}");
    assert!(metrics.contains("DCGM_FI_DEV_POWER_USAGE{") && metrics.contains("} 631.95\n"), "{metrics}");
    // `gpool top` shows the GPU and its job.
    let (ok, frame, err) = d.cli(&["top", "--once", "--width", "140", "--height", "20"]);
    assert!(ok, "{err}");
    assert!(frame.contains("H100-80GB") && frame.contains("100%") && frame.contains(&format!("job {id}")), "{frame}");
    assert!(frame.contains("59C") && frame.contains("632W"), "{frame}");
}

/// Issue 22: the recorded H100 with MIG on, where `mig -lgi` needs root
/// (exit 4, "Insufficient Permissions") and everything else answers, under
/// the default backend choice (no NVML here, so nvidia-smi). Before, this
/// machine started with 0 GPUs and blamed a missing libnvidia-ml.
#[test]
fn a_mig_gpu_whose_instances_need_root_to_list_keeps_every_device_and_pins_by_uuid() {
    let s = Scratch::new("smi-mig-nonroot");
    let bin = s.0.join("bin");
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/nvidia-smi");
    let data = data.canonicalize().expect("data/nvidia-smi");
    let script = format!(
        "#!/bin/sh\n\
         d={}\n\
         case \"$*\" in\n\
           --query-gpu=*) cat \"$d/h100-80gb-hbm3-mig_query-gpu_load.csv\" ;;\n\
           --query-compute-apps=*) cat \"$d/h100-80gb-hbm3-mig_query-compute-apps_load.csv\" ;;\n\
           -L) cat \"$d/h100-80gb-hbm3-mig_nvidia-smi-L.txt\" ;;\n\
           '-q') cat \"$d/h100-80gb-hbm3-mig_q_load.txt\" ;;\n\
           'mig -lgi') echo 'Failed to display GPU instances: Insufficient Permissions'; exit 4 ;;\n\
           *) echo \"stand-in nvidia-smi: no recording for $*\" >&2; exit 2 ;;\n\
         esac\n",
        data.display()
    );
    std::fs::create_dir_all(&bin).expect("bin dir");
    std::fs::write(bin.join("nvidia-smi"), script).expect("script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("nvidia-smi"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let log = s.0.join("daemon.log");
    let d = Daemon::spawn_logged_with_path(&s.0.join("data"), &[], Some(&bin), &log);
    let nodes = d.get("/api/v1/nodes");
    let gpu = &nodes[0]["devices"][0];
    assert_eq!(nodes[0]["devices"].as_array().map(Vec::len), Some(1), "{nodes}");
    let mig: Vec<(String, String)> = gpu["mig"]
        .as_array()
        .unwrap_or_else(|| panic!("MIG devices: {gpu}"))
        .iter()
        .map(|m| (m["profile"].as_str().unwrap_or("").into(), m["uuid"].as_str().unwrap_or("").into()))
        .collect();
    let want: Vec<(String, String)> = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
        .iter()
        .enumerate()
        .map(|(i, p)| (p.to_string(), format!("MIG-0000000{i}-0000-0000-0000-00000000000{i}")))
        .collect();
    assert_eq!(mig, want);
    // The start-up lines say what was refused and what was used instead.
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("1 GPU(s), 4 MIG device(s), from nvidia-smi"), "{text}");
    let line = text.lines().find(|l| l.contains("MIG placement unknown")).unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains(
            "`nvidia-smi mig -lgi` failed (exited with 4: Failed to display GPU instances: Insufficient Permissions)"
        ) && line.contains("GPU instance ids from `nvidia-smi -q`"),
        "{line}"
    );
    assert!(!text.contains("libnvidia-ml"), "an nvidia-smi that answers is not a missing NVML: {text}");
    // A job on a MIG device is pinned by its MIG UUID.
    let id =
        d.submit(json!({"command": "echo visible=$CUDA_VISIBLE_DEVICES", "resources": {"nvidia.com/mig-2g.20gb": 1}}));
    d.wait_ended(&[id], Duration::from_secs(60));
    let out = std::fs::read_to_string(s.0.join(format!("data/jobs/{id}/rank0.out"))).unwrap_or_default();
    assert_eq!(out.trim(), "visible=MIG-00000001-0000-0000-0000-000000000001", "{}", d.job(id));
}

/// Issue 22: under the default backend choice, an nvidia-smi that is there
/// and refuses everything is reported as itself, not as a missing NVML, and
/// the daemon does not start with no GPUs as if the machine had none.
#[test]
fn an_nvidia_smi_that_refuses_everything_is_named_not_a_missing_nvml() {
    let s = Scratch::new("smi-refuses");
    let bin = s.0.join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let script = "#!/bin/sh\necho 'Unable to query: Insufficient Permissions'; exit 4\n";
    std::fs::write(bin.join("nvidia-smi"), script).expect("script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("nvidia-smi"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = std::process::Command::new(BIN)
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(s.0.join("data"))
        .env("PATH", path)
        .output()
        .expect("gpool up");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("nothing lists the GPUs") && err.contains("Insufficient Permissions"), "{err}");
    assert!(err.contains("NVML:") && !err.starts_with("no GPU driver found"), "{err}");
}

/// Issue 18: GPU-hours are charged from allocation to release, not from
/// samples. With a sampler slower than the job, samples see none of it.
#[test]
fn gpu_hours_run_from_allocation_to_release_whatever_the_samples_saw() {
    let s = Scratch::new("gpu-hours");
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &["--sample-interval", "30s"]);
    let id = d.submit(json!({"command": "sleep 1.2", "resources": {"nvidia.com/gpu": 2}}));
    d.wait_ended(&[id], Duration::from_secs(60));
    let job = d.job(id);
    let usage = d.get(&format!("/api/v1/jobs/{id}/usage"));
    let hours = usage["summary"]["gpu_hours"].as_f64().unwrap_or(0.0);
    let ran = |k: &str| job[k].as_str().map(String::from).unwrap_or_default();
    // Two GPUs for at least 1.2 s: at least 2.4 GPU-seconds.
    assert!(
        hours * 3600.0 >= 2.4 && hours * 3600.0 < 60.0,
        "{hours} GPU-hours for {} to {}: {usage}",
        ran("started_at"),
        ran("ended_at")
    );
}
