//! Issue 24, heat and stragglers with the real daemon and simulated GPUs:
//! GPU 2 of `4xH100-80GB:hot=2` reaches its slowdown temperature under a
//! 4-replica gang. Within 60 s `gpool advise` names the replica on GPU 2 as
//! the straggler with the thermal reason and `gpool nodes` shows GPU 2
//! degraded; with `onStraggler: requeue` and a fifth GPU free, the gang is
//! stopped and starts again without GPU 2.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

fn gang(on_straggler: Option<&str>) -> Value {
    let mut spec = json!({
        "command": "sleep 600",
        "replicas": 4,
        "resources": {"nvidia.com/gpu": 1},
        "gracePeriod": "5s",
        "env": {"GPOOL_SIM_LOAD": "util=100"}
    });
    if let Some(o) = on_straggler {
        spec["onStraggler"] = json!(o);
    }
    spec
}

/// The GPU index of each rank of a job's current run, in rank order.
fn gpus_of(d: &Daemon, id: u64) -> Vec<u32> {
    let j = d.job(id);
    let mut by_rank: Vec<(u64, u64)> = j["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| Some((r["rank"].as_u64()?, r["gpus"][0].as_u64()?)))
        .collect();
    by_rank.sort_unstable();
    by_rank.into_iter().map(|(_, g)| g as u32).collect()
}

/// Waits until `check` holds, saying what it saw last if it never does.
fn within(limit: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + limit;
    loop {
        match check() {
            Ok(()) => return,
            Err(seen) if Instant::now() > deadline => panic!("not within {limit:?}: {seen}"),
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}

#[test]
fn a_hot_gpu_is_named_as_the_straggler_shown_degraded_and_a_requeued_gang_avoids_it() {
    let s = Scratch::new("heat");
    let d = Daemon::start(&s.0.join("data"), "4xH100-80GB:hot=2", &["--sample-interval", "500ms"]);
    let id = d.submit(gang(None));
    within(Duration::from_secs(30), || {
        let g = gpus_of(&d, id);
        if g.len() == 4 { Ok(()) } else { Err(format!("{}", d.job(id))) }
    });
    let on_gpu2 = gpus_of(&d, id).iter().position(|g| *g == 2).expect("a replica on GPU 2");
    let started = Instant::now();
    within(Duration::from_secs(60), || {
        let (ok, out, err) = d.cli(&["advise", &id.to_string()]);
        let named = format!("replica {on_gpu2} on ");
        if ok
            && out.contains(&named)
            && out.contains("/gpu2 holds the gang back: its GPU slows down for heat (hw_thermal_slowdown)")
        {
            Ok(())
        } else {
            Err(format!("{out}{err}"))
        }
    });
    within(Duration::from_secs(60).saturating_sub(started.elapsed()), || {
        let (ok, out, err) = d.cli(&["nodes"]);
        if ok && out.contains("degraded: hw_thermal_slowdown") { Ok(()) } else { Err(format!("{out}{err}")) }
    });
    let nodes = d.get("/api/v1/nodes");
    let degraded: Vec<u64> = nodes[0]["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["degraded"].is_string())
        .filter_map(|g| g["index"].as_u64())
        .collect();
    assert_eq!(degraded, [2], "{nodes}");
    let (_, alerts, _) = d.cli(&["alerts"]);
    assert!(alerts.contains("GangStraggler") && alerts.contains("GpuThermalSlowdown"), "{alerts}");

    // With a fifth GPU free and onStraggler: requeue, the gang moves off GPU 2.
    let s = Scratch::new("heat-requeue");
    let d = Daemon::start(&s.0.join("data"), "5xH100-80GB:hot=2", &["--sample-interval", "500ms"]);
    let id = d.submit(gang(Some("requeue")));
    within(Duration::from_secs(30), || {
        let g = gpus_of(&d, id);
        if g.contains(&2) { Ok(()) } else { Err(format!("{}", d.job(id))) }
    });
    within(Duration::from_secs(60), || {
        let j = d.job(id);
        let g = gpus_of(&d, id);
        if j["state"] == "running" && j["restarts"] == 1 && g.len() == 4 && !g.contains(&2) {
            Ok(())
        } else {
            Err(format!("{j}"))
        }
    });
    let mut g = gpus_of(&d, id);
    g.sort_unstable();
    assert_eq!(g, [0, 1, 3, 4]);
    let mut said = String::new();
    d.read_events(&format!("/api/v1/events?after=0&job={id}"), Duration::from_secs(10), |e| {
        if e["kind"] == "straggler_requeue" {
            said = e["message"].as_str().unwrap_or_default().to_string();
        }
        !said.is_empty()
    });
    assert!(said.contains("/gpu2 holds the gang back: its GPU slows down for heat"), "{said}");
}
