//! The exporter's text, checked line by line.
use super::*;

fn scrape() -> Scrape {
    let gpu_labels = |i: u32| -> Labels {
        vec![
            ("gpu", i.to_string()),
            ("UUID", format!("GPU-{i}")),
            ("pci_bus_id", format!("00000000:{:02X}:00.0", i)),
            ("device", format!("nvidia{i}")),
            ("modelName", "NVIDIA H100 80GB HBM3".into()),
            ("Hostname", "n1".into()),
        ]
    };
    let mut held = gpu_labels(0);
    held.extend([("job_id", "7".to_string()), ("user", "a\"b".to_string())]);
    Scrape {
        gpus: vec![
            GpuSeries {
                labels: held,
                sample: GpuSample {
                    gpu_util_pct: Some(93.0),
                    memory_used_mb: Some(11_125),
                    memory_total_mb: Some(81_559),
                    throttle_reasons: Some(vec!["sw_power_cap".into()]),
                    pcie_replays: Some(3),
                    remap_failed: Some(false),
                    enc_util_pct: Some(12.0),
                    pcie_tx_bytes_per_s: Some(3_166_208.0),
                    remapped_rows_correctable: Some(2),
                    ..GpuSample::default()
                },
            },
            GpuSeries {
                labels: gpu_labels(1),
                sample: GpuSample { gpu_util_pct: None, memory_used_mb: Some(0), ..GpuSample::default() },
            },
        ],
        amd: vec![GpuSeries {
            labels: vec![("gpu_id", "0".into()), ("card_model", "AMD Instinct MI300X".into())],
            sample: GpuSample {
                gpu_util_pct: Some(87.0),
                memory_used_mb: Some(150_000),
                memory_total_mb: Some(196_592),
                junction_temperature_c: Some(71.0),
                slowdown_temperature_c: None,
                power_draw_w: Some(612.0),
                ..GpuSample::default()
            },
        }],
        tpu: Vec::new(),
        migs: vec![MigSeries {
            labels: vec![("gpu", "1".into()), ("GPU_I_PROFILE", "1g.10gb".into()), ("GPU_I_ID", "9".into())],
            memory_used_mb: Some(13),
            memory_total_mb: Some(9_984),
        }],
        queues: vec![QueueStat {
            name: "research".into(),
            pending_jobs: 3,
            pending_gpus: 2.5,
            running_jobs: 1,
            used_gpus: 1.0,
        }],
        jobs_by_state: [("running".to_string(), 1)].into_iter().collect(),
        wait: {
            let mut h = Histogram::wait_seconds();
            h.observe(3.0);
            h.observe(7200.0);
            h
        },
        passes: Histogram::pass_seconds(),
        allocations_total: 2,
        preemptions_total: 0,
        resizes_total: 0,
        gpu_hours: [(("ana".to_string(), "ml".to_string()), 1.5)].into_iter().collect(),
        idle_gpu_seconds: BTreeMap::new(),
        energy_joules: [(("ana".to_string(), "ml".to_string()), 7200.0)].into_iter().collect(),
        job_energy: vec![(42, "ana".into(), 3600.0)],
        cost: [(("ml".to_string(), "ana".to_string(), "default".to_string(), "spot".to_string()), 4.125)]
            .into_iter()
            .collect(),
        idle_cost: [(("ml".to_string(), "ana".to_string(), "default".to_string(), "spot".to_string()), 1.5)]
            .into_iter()
            .collect(),
        nodes: vec![("n1".into(), "up".into(), true)],
        gpu_health: vec![("n1".into(), 0, "ok"), ("n1".into(), 1, "quarantined")],
        alerts: BTreeMap::new(),
        services: vec![ServiceSeries {
            name: "llm".into(),
            requests_total: 120,
            failed_total: 0,
            in_flight: 3.0,
            ready: 2,
            desired: 2,
            latency: {
                let mut h = Histogram::pass_seconds();
                h.observe(0.05);
                h
            },
        }],
    }
}

#[test]
fn series_use_dcgm_names_and_labels_and_skip_absent_values() {
    let text = render(&scrape());
    assert!(text.contains("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-0\",pci_bus_id=\"00000000:00:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"n1\",job_id=\"7\",user=\"a\\\"b\"} 93\n"), "{text}");
    assert!(!text.contains("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\""), "an absent value is no series");
    assert!(text.contains("DCGM_FI_DEV_FB_FREE{gpu=\"0\""), "free is derived from total and used");
    assert!(text.contains("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu=\"0\"") && text.contains("} 4\n"));
    assert!(text.contains("DCGM_FI_DEV_FB_USED{gpu=\"1\",GPU_I_PROFILE=\"1g.10gb\",GPU_I_ID=\"9\"} 13"));
    // AMD GPUs under AMD's exporter names (metrics/vendors.rs), never as DCGM series.
    assert!(!text.lines().any(|l| l.starts_with("DCGM") && l.contains("MI300X")), "{text}");
    assert!(text.contains("gpool_job_wait_seconds_bucket{le=\"5\"} 1\n"));
    assert!(text.contains("gpool_gpu_health{node=\"n1\",gpu=\"1\",state=\"quarantined\"} 1\n"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("DCGM_FI_DEV_PCIE_REPLAY_COUNTER{") && l.ends_with("} 3")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("DCGM_FI_DEV_ROW_REMAP_FAILURE{") && l.ends_with("} 0")), "{text}");
    assert!(!text.contains("DCGM_FI_DEV_RETIRED_PENDING{"), "absent readings are no series");
    // The rest of dcgm-exporter's default counters that NVML gives.
    let value_of = |name: &str| {
        text.lines().find(|l| l.starts_with(&format!("{name}{{gpu=\"0\""))).and_then(|l| l.rsplit(' ').next())
    };
    assert_eq!(value_of("DCGM_FI_DEV_ENC_UTIL"), Some("12"), "{text}");
    assert_eq!(value_of("DCGM_FI_PROF_PCIE_TX_BYTES"), Some("3166208"), "{text}");
    assert_eq!(value_of("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"), Some("2"), "{text}");
    assert!(text.contains("# TYPE DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS counter\n"), "{text}");
    assert_eq!(value_of("DCGM_FI_DEV_DEC_UTIL"), None, "not read, so no series");
    assert!(text.contains("gpool_gpu_health{node=\"n1\",gpu=\"1\",state=\"ok\"} 0\n"), "{text}");
    assert!(text.contains("gpool_gpu_health{node=\"n1\",gpu=\"0\",state=\"ok\"} 1\n"), "{text}");
    assert!(text.contains("gpool_job_wait_seconds_bucket{le=\"+Inf\"} 2\n"));
    assert!(text.contains("gpool_queue_pending_gpus{queue=\"research\"} 2.5\n"));
    assert!(text.contains("gpool_allocated_gpu_seconds_total{user=\"ana\",team=\"ml\"} 5400\n"));
    assert!(text.contains("gpool_energy_joules_total{user=\"ana\",team=\"ml\"} 7200\n"), "{text}");
    assert!(text.contains("gpool_job_energy_joules{job_id=\"42\",user=\"ana\"} 3600\n"), "{text}");
    assert!(
        text.contains("gpool_cost_dollars_total{team=\"ml\",user=\"ana\",queue=\"default\",pool=\"spot\"} 4.125\n")
    );
    assert!(text.contains(
        "gpool_idle_allocated_cost_dollars_total{team=\"ml\",user=\"ana\",queue=\"default\",pool=\"spot\"} 1.5\n"
    ));
}

#[test]
fn the_grafana_dashboard_uses_only_series_the_exporter_writes() {
    let dash = include_str!("../../../../../deploy/grafana/gpool-dashboard.json");
    let doc: serde_json::Value = serde_json::from_str(dash).expect("the dashboard is JSON");
    let mut s = scrape();
    s.gpus[0].sample = GpuSample {
        gpu_util_pct: Some(1.0),
        mem_util_pct: Some(1.0),
        memory_used_mb: Some(1),
        memory_total_mb: Some(2),
        memory_free_mb: Some(1),
        memory_reserved_mb: Some(1),
        temperature_c: Some(1.0),
        memory_temperature_c: Some(1.0),
        junction_temperature_c: None,
        slowdown_temperature_c: None,
        power_draw_w: Some(1.0),
        power_limit_w: Some(1.0),
        energy_mj: Some(1),
        sm_clock_mhz: Some(1),
        mem_clock_mhz: Some(1),
        fan_pct: Some(1.0),
        ecc_corrected_volatile: Some(0),
        ecc_uncorrected_volatile: Some(0),
        xid_last: Some(0),
        throttle_reasons: Some(vec![]),
        ..GpuSample::default()
    };
    s.tpu = vec![GpuSeries {
        labels: vec![("make", "cloud-tpu".into()), ("accelerator_id", "0".into())],
        sample: GpuSample {
            gpu_util_pct: Some(1.0),
            memory_used_mb: Some(1),
            memory_total_mb: Some(2),
            ..GpuSample::default()
        },
    }];
    s.alerts.insert(("AllocatedGpuIdle".into(), "warning".into()), 0);
    s.idle_gpu_seconds.insert(("ana".into(), "ml".into()), 1.0);
    let text = render(&s);
    let exprs: Vec<&str> = doc["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .collect();
    assert!(exprs.len() >= 15, "{exprs:?}");
    for e in exprs {
        for word in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            // DCGM's, gpool's, AMD's exporter's and GKE's TPU device plugin's names.
            let vendor = word.starts_with("gpu_") || ["duty_cycle", "memory_used", "memory_total"].contains(&word);
            if word.starts_with("DCGM_") || word.starts_with("gpool_") || vendor {
                assert!(
                    text.contains(&format!("\n{word}{{")) || text.contains(&format!("\n{word} ")),
                    "the dashboard queries {word}, which /metrics does not have"
                );
            }
        }
    }
}

#[test]
fn every_family_is_contiguous_and_declared_once() {
    let text = render(&scrape());
    let mut seen: Vec<String> = Vec::new();
    let mut current = String::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap_or("").to_string();
            assert!(!seen.contains(&name), "{name} declared twice");
            seen.push(name.clone());
            current = name;
        } else if !l.starts_with('#') {
            let name = l.split(['{', ' ']).next().unwrap_or("");
            assert!(name.starts_with(&current), "{name} outside its family {current}");
        }
    }
    assert!(seen.len() >= 15, "{seen:?}");
}
