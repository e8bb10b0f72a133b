//! `promtool check metrics` (from the Debian package `prometheus`, which the
//! test command installs) on a scrape of a simulated 8-GPU node with running
//! jobs and a service behind the proxy: gpool's own series pass its lint.
//! DCGM's series keep DCGM's spelling (camelCase labels such as `modelName`,
//! counters named `…_VOL_TOTAL`), as dashboards built for dcgm-exporter
//! expect, so promtool's remarks on them are set aside, and only on them.

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::json;

#[test]
fn promtool_finds_nothing_to_say_about_gpools_own_series() {
    let s = Scratch::new("promtool");
    let d = Daemon::start(&s.0, "8xH100-80GB", &["--proxy-listen", "127.0.0.1:0"]);
    let busy = d.submit(json!({"command": ["sleep", "600"], "resources": {"nvidia.com/gpu": 2},
        "env": {"GPOOL_SIM_LOAD": "util=30 mem=70000"}}));
    d.submit(json!({"command": ["sleep", "600"], "resources": {"nvidia.com/gpu": 1}}));
    let (code, v) = d.req(
        "PUT",
        "/api/v1/services/echo",
        &d.token,
        Some(&json!({"name": "echo", "command": [devtools(), "replica-demo", "--delay", "0"],
            "resources": {"nvidia.com/gpu": 1}, "service": {"readiness": "/health"}})),
    );
    assert_eq!(code, 201, "{v}");
    d.until("/api/v1/services", Duration::from_secs(60), |all| all[0]["ready"] == 1);
    // Series of every kind: GPUs with job labels, queues, costs, the service's requests and latency.
    d.until(&format!("/api/v1/jobs/{busy}/usage"), Duration::from_secs(60), |u| {
        u["summary"]["mean_gpu_util"].as_f64().is_some_and(|x| x > 0.0)
    });
    let (_, scrape) = d.text("/metrics");
    for family in [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "gpool_queue_pending_jobs",
        "gpool_cost_dollars_total",
        "gpool_service_ready_replicas",
        "gpool_job_wait_seconds_bucket",
    ] {
        assert!(scrape.contains(family), "{family} in the scrape:\n{scrape}");
    }
    let bin = std::env::var("PROMTOOL").unwrap_or_else(|_| "promtool".into());
    let mut child = Command::new(&bin)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {bin} ({e}): apt-get install prometheus (scripts/test.sh does)"));
    child.stdin.take().expect("stdin").write_all(scrape.as_bytes()).expect("write the scrape");
    let out = child.wait_with_output().expect("promtool");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let ours: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("DCGM_FI_")).collect();
    assert!(ours.is_empty(), "promtool on gpool's own series:\n{}", ours.join("\n"));
    // Exit 0: clean; 3: lint remarks (here only DCGM's); anything else: it could not parse the scrape.
    assert!(matches!(out.status.code(), Some(0 | 3)), "promtool exited {:?}: {said}", out.status.code());
}
