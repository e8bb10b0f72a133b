//! Issue 11: the chaos suite, short. A real cluster (PostgreSQL, a leader
//! and a standby, three agents) runs a stream of jobs through 20 seeded
//! faults of every kind; every acknowledged job must end, succeeded, none
//! running twice at once, no GPU held by two runs, nothing left running;
//! and (issue 39) no job killed by the long outages, held 15 s here (two
//! and a half leases; tests/outages.rs holds ten).
//! `gpool-devtools bench chaos --faults 200` is the long run (BENCHMARKS.md).
//! The suite is gpool-devtools' (`common::devtools` builds it); what it
//! disturbs, and what this test holds to its promises, is this package's
//! `gpool`, which it is given with `--gpool`.

mod common;

use std::process::Command;

use common::{BIN, devtools};
use serde_json::Value;

#[test]
fn twenty_faults_of_every_kind_break_no_promise() {
    let out = Command::new(devtools())
        .args(["--gpool", BIN, "bench", "chaos", "--faults", "20", "--seed", "11", "--outage", "15s", "--json"])
        .output()
        .expect("run gpool-devtools bench chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("no report ({e}): {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    });
    let kinds = report["faults_by_kind"].as_object().map_or(0, |k| k.len());
    assert_eq!(kinds, 14, "every fault kind was injected: {report}");
    assert!(report["outage_jobs"].as_u64().is_some_and(|n| n >= 6), "jobs ran through every outage: {report}");
    assert!(report["acknowledged"].as_u64().is_some_and(|n| n >= 100), "a steady stream of jobs: {report}");
    for promise in ["lost", "failed", "runs_overlapping", "gpu_double_bookings", "left_running", "killed_by_outage"] {
        assert_eq!(report[promise], 0, "{promise}: {report}");
    }
    assert_eq!(report["ok"], true, "{report}");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
