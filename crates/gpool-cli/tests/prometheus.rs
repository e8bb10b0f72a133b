//! A real Prometheus server (Debian package `prometheus`) scrapes gpool's
//! `/metrics` on loopback, and its query API returns the GPU series with
//! their job labels. `.ci/run` installs Prometheus; without it this test
//! fails and says how to install it.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

struct Prometheus {
    child: Child,
    url: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

fn start_prometheus(dir: &std::path::Path, target: &str) -> Prometheus {
    let bin = std::env::var("PROMETHEUS").unwrap_or_else(|_| "prometheus".into());
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             scrape_configs:\n  - job_name: gpool\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .expect("config");
    let port = free_port();
    let child = Command::new(&bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {bin:?} ({e}): install it with `apt-get install -y prometheus` (or set PROMETHEUS=path)")
        });
    Prometheus { child, url: format!("http://127.0.0.1:{port}") }
}

/// Queries Prometheus until the result is non-empty; fails after `limit`.
fn query_until(p: &Prometheus, q: &str, limit: Duration) -> Vec<Value> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let deadline = Instant::now() + limit;
    loop {
        let r = agent.get(format!("{}/api/v1/query", p.url)).query("query", q).call();
        if let Ok(mut r) = r
            && let Ok(v) = r.body_mut().read_json::<Value>()
            && let Some(res) = v["data"]["result"].as_array()
            && !res.is_empty()
        {
            return res.clone();
        }
        assert!(Instant::now() < deadline, "Prometheus never returned a result for {q}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_real_prometheus_scrapes_gpu_series_with_job_labels() {
    let s = Scratch::new("prom");
    let d = Daemon::start(&s.0.join("data"), "2xH100-80GB", &["--sample-interval", "200ms"]);
    let id = d.submit(json!({
        "name": "train",
        "command": "echo 'util=87 mem=40000' > \"$GPOOL_SIM_LOAD_FILE\"; sleep 600",
        "resources": {"nvidia.com/gpu": 1}
    }));
    let target = d.url.trim_start_matches("http://").to_string();
    let p = start_prometheus(&s.0, &target);
    let q = format!("DCGM_FI_DEV_GPU_UTIL{{job_id=\"{id}\"}} == 87");
    let res = query_until(&p, &q, Duration::from_secs(90));
    assert_eq!(res.len(), 1, "{res:?}");
    let m = &res[0]["metric"];
    assert_eq!(m["job_name"], "train", "{m}");
    assert_eq!(m["user"], d.get("/api/v1/whoami")["user"], "{m}");
    assert_eq!(m["modelName"], "Simulated H100-80GB", "{m}");
    assert!(m["UUID"].as_str().is_some_and(|u| u.starts_with("GPU-")), "{m}");
    assert_eq!(m["job"], "gpool", "Prometheus' own target label is untouched: {m}");
    // The GPU nobody holds has its series without job labels.
    let free = query_until(&p, "DCGM_FI_DEV_GPU_UTIL", Duration::from_secs(30));
    assert_eq!(free.len(), 2, "{free:?}");
    assert!(free.iter().any(|r| r["metric"].get("job_id").is_none()), "{free:?}");
    // Memory and gpool's own series arrive too.
    let fb = query_until(&p, &format!("DCGM_FI_DEV_FB_USED{{job_id=\"{id}\"}}"), Duration::from_secs(30));
    // What the job declared, plus the simulated driver's small reserve.
    let used: f64 = fb[0]["value"][1].as_str().and_then(|v| v.parse().ok()).expect("a number");
    assert!((40_000.0..40_200.0).contains(&used), "{fb:?}");
    let running = query_until(&p, "gpool_queue_running_jobs{queue=\"default\"}", Duration::from_secs(30));
    assert_eq!(running[0]["value"][1], "1", "{running:?}");
}
