//! Issue 22: `gpool sim` with a mixed fleet (a cluster YAML with node groups
//! of several kinds) and `--job-kinds`: the report has a row per kind, and
//! a bad mix is refused with what to write.

mod common;

use std::process::Command;

use common::{BIN, Scratch};
use serde_json::Value;

fn files(s: &Scratch) -> (String, String) {
    let trace = s.0.join("trace.csv");
    let rows: String =
        (0..200).map(|i| format!("{},{},{},u{}\n", i * 30, 600 + i % 7 * 300, 1 << (i % 4), i % 5)).collect();
    std::fs::write(&trace, format!("submit,duration,gpus,user\n{rows}")).expect("trace");
    let cluster = s.0.join("fleet.yaml");
    std::fs::write(
        &cluster,
        "nodes:\n  - {name: nv, count: 2, gpus: 8, model: H100-80GB}\n  - {name: mi, count: 2, gpus: 8, model: MI300X-192GB, kind: amd.com/gpu}\n",
    )
    .expect("cluster");
    (trace.display().to_string(), cluster.display().to_string())
}

#[test]
fn a_mixed_fleet_is_reported_per_kind() {
    let s = Scratch::new("sim-kinds");
    let (trace, cluster) = files(&s);
    let mix = "nvidia.com/gpu=2,amd.com/gpu=1,any=1";
    let out = Command::new(BIN)
        .args(["sim", "--trace", &trace, "--cluster", &cluster, "--job-kinds", mix, "--json"])
        .output()
        .expect("gpool sim");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let rows = v["by_kind"].as_array().expect("by_kind rows");
    let kinds: Vec<&str> = rows.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert_eq!(kinds, ["nvidia.com/gpu", "amd.com/gpu", "any GPU"], "{v}");
    let jobs: u64 = rows.iter().filter_map(|r| r["jobs"].as_u64()).sum();
    assert_eq!(jobs, 200, "every job in one row: {v}");
    for r in &rows[..2] {
        assert_eq!(r["devices"], 16, "{r}");
        assert!(r["allocated"].as_f64().is_some_and(|a| a > 0.0 && a <= 1.0), "{r}");
    }
    // The table says the same.
    let out = Command::new(BIN)
        .args(["sim", "--trace", &trace, "--cluster", &cluster, "--job-kinds", mix])
        .output()
        .expect("gpool sim");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("per accelerator kind") && text.contains("| default | amd.com/gpu |"), "{text}");
    // `-o json` as everywhere in the CLI, and `-o yaml` the same data.
    let as_format = |format: &str| {
        let out = Command::new(BIN)
            .args(["sim", "--trace", &trace, "--cluster", &cluster, "--job-kinds", mix, "-o", format])
            .output()
            .expect("gpool sim");
        assert!(out.status.success(), "-o {format}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let json: Value = serde_json::from_str(&as_format("json")).expect("-o json is JSON");
    assert_eq!(json["by_kind"], v["by_kind"], "-o json is --json");
    let yaml: Value = gpool_api::yaml::from_str(&as_format("yaml")).expect("-o yaml is YAML");
    assert_eq!(yaml["by_kind"], v["by_kind"], "-o yaml carries the same data");
}

#[test]
fn a_bad_kind_mix_is_refused_with_what_to_write() {
    let s = Scratch::new("sim-kinds-bad");
    let (trace, cluster) = files(&s);
    let out = Command::new(BIN)
        .args(["sim", "--trace", &trace, "--cluster", &cluster, "--job-kinds", "fpga=1"])
        .output()
        .expect("gpool sim");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fpga") && err.contains("amd.com/gpu"), "{err}");
}
