//! Issue 24: a node's power budget with the real daemon and its simulated
//! GPUs (700 W H100s drawing 70 W idle). Eight one-GPU jobs at full load
//! under 3,000 W: three run, the measured draw stays under the budget, the
//! rest wait naming it; lowered live to 1,900 W, the lowest-priority job is
//! stopped and the draw falls under it within 15 s.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

#[test]
fn a_node_power_budget_holds_and_a_lowered_one_is_met_within_15_s() {
    let s = Scratch::new("power");
    let d = Daemon::start(&s.0.join("data"), "8xH100-80GB", &["--power-budget", "3000W", "--sample-interval", "200ms"]);
    // The node's draw is learned from its first readings.
    let v = d.until("/api/v1/power", Duration::from_secs(30), |v| v[0]["measured_watts"].is_u64());
    let node = v[0]["nodes"][0].as_str().expect("node").to_string();
    let job = |priority: &str| {
        json!({
            "command": "sleep 600",
            "resources": {"nvidia.com/gpu": 1},
            "priority": priority,
            "env": {"GPOOL_SIM_LOAD": "util=100"}
        })
    };
    let high: Vec<u64> = (0..2).map(|_| d.submit(job("high"))).collect();
    let low: Vec<u64> = (0..6).map(|_| d.submit(job("low"))).collect();
    let running = |d: &Daemon| -> Vec<u64> {
        let list = d.get("/api/v1/jobs?state=running");
        list["jobs"].as_array().into_iter().flatten().filter_map(|j| j["id"].as_u64()).collect()
    };
    let until_running = |n: usize| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while running(&d).len() != n {
            assert!(std::time::Instant::now() < deadline, "{} running, not {n}", running(&d).len());
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    until_running(3);
    let on = running(&d);
    assert!(high.iter().all(|h| on.contains(h)), "both high-priority jobs run: {on:?}");
    let waiting = d.job(low[5]);
    assert!(
        waiting["reason"].as_str().is_some_and(|r| r.starts_with(&format!("power budget of node {node}"))),
        "{waiting}"
    );
    // Under full load, every reading stays within the budget.
    d.until("/api/v1/power", Duration::from_secs(30), |v| v[0]["measured_watts"].as_u64() > Some(2000));
    for _ in 0..20 {
        let v: Value = d.get("/api/v1/power");
        let m = v[0]["measured_watts"].as_u64().expect("measured");
        assert!(m <= 3000, "measured {m} W over the 3,000 W budget: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Lowered live: room for two; the low-priority job goes.
    let (ok, out, err) = d.cli(&["power", "set", "--node", &node, "1900W"]);
    assert!(ok && out.contains("1900"), "{out}{err}");
    d.until("/api/v1/power", Duration::from_secs(15), |v| v[0]["measured_watts"].as_u64().is_some_and(|m| m <= 1900));
    until_running(2);
    let on = running(&d);
    assert!(high.iter().all(|h| on.contains(h)), "the high-priority jobs stay: {on:?}");
    let (ok, table, _) = d.cli(&["power"]);
    assert!(ok && table.contains("1900"), "{table}");
}
