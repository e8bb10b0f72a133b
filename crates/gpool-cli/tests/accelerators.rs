//! Issue 22: GPUs beyond NVIDIA's, end to end with the real binary. `gpool
//! up` under the default backend choice, with a stand-in `rocm-smi` or
//! `amd-smi` that answers from a recorded output of a real AMD GPU (and no
//! other accelerator tool on the PATH): the GPUs are listed with their model
//! and memory, `gpool submit --gpus 1` jobs are pinned with
//! `ROCR_VISIBLE_DEVICES`, and `/metrics` carries the recorded readings
//! under the names of AMD's device-metrics exporter.
#![cfg(unix)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::*;

fn data(file: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/amd").join(file).canonicalize().expect("data/amd")
}

/// A stand-in `tool` in `bin` that prints a recorded file for each argument
/// list in `answers` and fails for anything else.
fn stand_in(bin: &Path, tool: &str, answers: &[(&str, &str)]) {
    std::fs::create_dir_all(bin).expect("bin dir");
    let arms: String =
        answers.iter().map(|(args, f)| format!("  \"{args}\") cat '{}' ;;\n", data(f).display())).collect::<String>()
            + "  *) echo \"stand-in: not recorded: $*\" >&2; exit 2 ;;\n";
    let script = format!("#!/bin/sh\ncase \"$*\" in\n{arms}esac\n");
    std::fs::write(bin.join(tool), script).expect("script");
    std::fs::set_permissions(bin.join(tool), std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Submits `gpool submit --gpus 1` and returns what the job printed.
fn pinned(d: &Daemon) -> String {
    let (ok, out, err) =
        d.cli(&["submit", "--gpus", "1", "--", "sh", "-c", "echo rocr=$ROCR_VISIBLE_DEVICES hip=$HIP_VISIBLE_DEVICES"]);
    assert!(ok, "{err}");
    let id: u64 = out.trim().parse().expect("a job id");
    d.wait_ended(&[id], Duration::from_secs(60));
    std::fs::read_to_string(d.data.join(format!("jobs/{id}/rank0.out"))).unwrap_or_default()
}

/// (file, GPUs, model, memory MiB, used MiB, edge °C, power W)
const RECORDED: [(&str, usize, &str, u64, u64, &str, &str); 7] = [
    ("mi100.rocm-smi-json-telegraf_rocm5.7.1.json", 6, "MI100", 32_752, 6, "31", "39"),
    ("rx6700xt.rocm-smi-json-telegraf_rocm4.3.0.json", 1, "AMD-0x73df", 12_272, 1_548, "45", "6"),
    ("rx6700xt.rocm-smi-json-telegraf_rocm5.7.1.json", 1, "RX-6700", 12_272, 1_492, "45", "6"),
    ("rx6700xt.rocm-smi-json-telegraf_rocm6.0.2.json", 1, "RX-6700", 12_272, 1_500, "45", ""),
    ("rx6700xt.rocm-smi-json-telegraf_rocm6.1.2.json", 1, "RX-6700", 12_272, 1_500, "45", "6"),
    ("vega10-xt.rocm-smi-json-telegraf.json", 1, "AMD-0x6861", 16_368, 17, "39", "15"),
    ("rx7900xt.rocm-smi-productname-use-meminfo-vram.json", 1, "RX-7900", 20_464, 27, "", ""),
];

#[test]
fn gpool_up_on_recorded_amd_gpus_through_rocm_smi() {
    for (file, n, model, mem, used, edge, power) in RECORDED {
        let s = Scratch::new("rocm-smi");
        let bin = s.0.join("bin");
        std::fs::create_dir_all(&bin).expect("bin");
        std::fs::write(bin.join("rocm-smi"), format!("#!/bin/sh\ncat '{}'\n", data(file).display())).expect("script");
        std::fs::set_permissions(bin.join("rocm-smi"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let d = Daemon::spawn(&s.0.join("data"), &["--sample-interval", "200ms"], Some(&bin));
        let nodes = d.until("/api/v1/nodes", Duration::from_secs(30), |v| !v[0]["devices"][0]["telemetry"].is_null());
        let node = &nodes[0];
        assert_eq!(node["source"], "rocm-smi", "{file}: {node}");
        let devices = node["devices"].as_array().expect("devices");
        assert_eq!(devices.len(), n, "{file}");
        assert_eq!(
            (devices[0]["model"].as_str(), devices[0]["memory_mb"].as_u64()),
            (Some(model), Some(mem)),
            "{file}"
        );
        assert_eq!(devices[0]["kind"], "amd-gpu", "{file}: {node}");
        let out = pinned(&d);
        assert!(out.trim().starts_with("rocr=") && out.contains("hip=0"), "{file}: {out}");
        let (_, metrics) = d.text("/metrics");
        let series =
            |name: &str| metrics.lines().find(|l| l.starts_with(&format!("{name}{{gpu_id=\"0\""))).map(str::to_string);
        let value =
            |name: &str| series(name).and_then(|l| l.rsplit(' ').next().map(str::to_string)).unwrap_or_default();
        assert_eq!(value("gpu_used_vram"), used.to_string(), "{file}: {metrics}");
        assert_eq!(value("gpu_gfx_activity"), "0", "{file}");
        assert_eq!(value("gpu_edge_temperature"), edge, "{file}");
        assert_eq!(value("gpu_power_usage"), power, "{file}");
        assert!(!metrics.contains("DCGM_FI_DEV_GPU_UTIL{"), "{file}: AMD GPUs are not DCGM series");
    }
}

/// `amd-smi` (ROCm 6+): the MI210's recorded `static --json` (with its
/// `gpu_data` root). Its `metric` was never recorded, so samples fail and
/// say so; the GPU is still listed and its jobs pinned.
#[test]
fn gpool_up_on_a_recorded_mi210_through_amd_smi() {
    let s = Scratch::new("amd-smi");
    let bin = s.0.join("bin");
    stand_in(&bin, "amd-smi", &[("static --json", "mi210.amd-smi-static.json")]);
    let d = Daemon::spawn(&s.0.join("data"), &[], Some(&bin));
    let nodes = d.get("/api/v1/nodes");
    let gpu = &nodes[0]["devices"][0];
    assert_eq!(nodes[0]["source"], "amd-smi", "{nodes}");
    assert_eq!(
        (gpu["model"].as_str(), gpu["memory_mb"].as_u64(), gpu["name"].as_str()),
        (Some("MI210"), Some(65_520), Some("AMD Instinct MI210"))
    );
    let out = pinned(&d);
    assert_eq!(out.trim(), "rocr=0 hip=0");
    // A spec that asks for NVIDIA's GPUs is refused, saying what it asked for.
    let (code, v) = d.req(
        "POST",
        "/api/v1/jobs",
        &d.token,
        Some(&serde_json::json!({"command": "true", "resources": {"nvidia.com/gpu": 1}})),
    );
    assert_eq!(code, 400, "{v}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("1×NVIDIA GPU") && e.contains("MI210")), "{v}");
}

/// A TPU VM: a stand-in `tpu-info` printing the recorded v5p-8 under load.
/// Its four chips are listed with their HBM; a job asking for two gets two
/// chips and libtpu's bounds; "any GPU" is never given a TPU chip.
#[test]
fn gpool_up_on_a_recorded_tpu_v5p_through_tpu_info() {
    let s = Scratch::new("tpu-info");
    let bin = s.0.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/tpu/v5p-8.tpu-info_load_libtpu-0.0.39.txt");
    std::fs::write(bin.join("tpu-info"), format!("#!/bin/sh\ncat '{}'\n", file.display())).expect("script");
    std::fs::set_permissions(bin.join("tpu-info"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let d = Daemon::spawn(&s.0.join("data"), &["--sample-interval", "200ms"], Some(&bin));
    let nodes = d.until("/api/v1/nodes", Duration::from_secs(30), |v| !v[0]["devices"][0]["telemetry"].is_null());
    let node = &nodes[0];
    assert_eq!(node["source"], "tpu", "{node}");
    let chips = node["devices"].as_array().expect("devices");
    assert_eq!(chips.len(), 4, "{node}");
    let c = &chips[0];
    assert_eq!(
        (c["kind"].as_str(), c["model"].as_str(), c["memory_mb"].as_u64()),
        (Some("tpu"), Some("TPU-v5p"), Some(98_038))
    );
    let t = &c["telemetry"];
    assert_eq!((t["gpu_util"].as_f64(), t["memory_used_mb"].as_u64()), (Some(71.11), Some(1_290)), "{t}");
    let id = d.submit(serde_json::json!({
        "command": "echo chips=$TPU_VISIBLE_CHIPS bounds=$TPU_CHIPS_PER_PROCESS_BOUNDS process=$TPU_PROCESS_BOUNDS",
        "resources": {"google.com/tpu": 2}
    }));
    d.wait_ended(&[id], Duration::from_secs(60));
    let out = std::fs::read_to_string(d.data.join(format!("jobs/{id}/rank0.out"))).unwrap_or_default();
    assert_eq!(out.trim(), "chips=0,1 bounds=1,2,1 process=1,1,1", "{}", d.job(id));
    let (_, metrics) = d.text("/metrics");
    assert!(!metrics.contains("DCGM_FI_DEV_GPU_UTIL{"), "a TPU chip is no DCGM series: {metrics}");
    // Under the names and labels of GKE's TPU device plugin, with the recorded readings.
    let chip0 = "{make=\"cloud-tpu\",model=\"TPU-v5p\",accelerator_id=\"0\",hostname=";
    let line = |name: &str| metrics.lines().find(|l| l.starts_with(&format!("{name}{chip0}"))).map(str::to_string);
    let value = |name: &str| line(name).and_then(|l| l.rsplit(' ').next().map(str::to_string)).unwrap_or_default();
    assert_eq!(value("duty_cycle"), "71.11", "{metrics}");
    assert_eq!(value("memory_used"), (1_290u64 << 20).to_string(), "HBM in bytes, as GKE's: {metrics}");
    assert!(line("memory_total").is_some(), "{metrics}");
    let (code, v) = d.req(
        "POST",
        "/api/v1/jobs",
        &d.token,
        Some(&serde_json::json!({"command": "true", "resources": {"gpool.io/gpu": 1}})),
    );
    assert_eq!(code, 400, "any GPU is not a TPU chip: {v}");
}

/// Issue 40, point 2: a job in an image on an AMD node is given its GPU's
/// own device files (`/dev/kfd`, its DRM nodes, `--group-add`), never
/// NVIDIA's flags; here the stand-in's GPUs have no DRM nodes on this
/// machine, so the job is refused with the reason, before the runtime
/// (a wrapper that logs its arguments and runs podman) is asked to run it.
/// The flags themselves are checked in `node/container.rs` and `node/devices.rs`.
#[test]
fn a_job_in_an_image_on_an_amd_node_gets_its_device_files_or_is_refused_with_the_reason() {
    let s = Scratch::new("amd-image");
    let bin = s.0.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    std::fs::write(
        bin.join("rocm-smi"),
        format!("#!/bin/sh\ncat '{}'\n", data("mi100.rocm-smi-json-telegraf_rocm5.7.1.json").display()),
    )
    .expect("script");
    std::fs::set_permissions(bin.join("rocm-smi"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let log = s.0.join("runtime.log");
    let wrapper = s.0.join("runtime-podman");
    std::fs::write(&wrapper, format!("#!/bin/sh\necho \"$*\" >> '{}'\nexec podman \"$@\"\n", log.display()))
        .expect("wrapper");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let runtime = format!("--container-runtime={}", wrapper.display());
    let args =
        [runtime.as_str(), "--container-arg=--ulimit=nofile=1024:1024", "--container-arg=--ulimit=nproc=1024:1024"];
    let d = Daemon::spawn(&s.0.join("data"), &args, Some(&bin));
    let (ok, out, err) = d.cli(&["submit", "--gpus", "1", "--image", "docker.io/library/busybox", "--", "true"]);
    assert!(ok, "{err}");
    let id: u64 = out.trim().parse().expect("a job id");
    d.wait_ended(&[id], Duration::from_secs(120));
    let job = d.job(id);
    assert_eq!(job["state"], "failed", "{job}");
    let said = job.to_string();
    assert!(said.contains("device files of") && said.contains("/sys/bus/pci/devices"), "the reason: {job}");
    let ran = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!ran.contains(&format!("gpool.job={id}")), "the runtime was never asked to run it: {ran}");
    assert!(!ran.contains("NVIDIA_VISIBLE_DEVICES"), "no NVIDIA flag on an AMD node: {ran}");
}
