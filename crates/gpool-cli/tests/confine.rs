//! Issue 12: control groups enforce what a job was allocated (the test
//! needs root, as confinement does): a job over its memory request is
//! killed by the kernel and reported as out of memory, and a job cannot
//! open the device file of a GPU it was not given (device nodes made by the
//! test with NVIDIA's major number: its own GPU's opens as far as the
//! kernel's device check goes, ENXIO with no driver, another's fails with
//! EPERM).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Daemon, Scratch};
use serde_json::json;

#[test]
fn a_job_over_its_memory_is_reported_out_of_memory_and_cannot_open_another_gpu() {
    let scratch = Scratch::new("confine");
    let d = Daemon::start(&scratch.0.join("data"), "2xH100-80GB", &["--cgroups", "auto"]);
    // Over its memory: `tail` holds one 300 MiB line in a 64 MiB allocation.
    let hog = d.submit(json!({
        "command": "head -c 300M /dev/zero | tail -n 1 > /dev/null",
        "resources": {"nvidia.com/gpu": 1, "memory": "64Mi"},
    }));
    d.wait_ended(&[hog], Duration::from_secs(60));
    let j = d.job(hog);
    assert_eq!(j["state"], "failed", "{j}");
    assert!(
        j["reason"].as_str().is_some_and(|r| r.contains("out of memory") && r.contains("64 MiB")),
        "the reason says out of memory: {j}"
    );

    no_other_gpu_and_nothing_left_behind(&d, &scratch);
}

/// The same on the host's cgroup v2 hierarchy (beside v1 on these
/// machines, with no memory or CPU controller of its own): device files
/// are denied by a BPF program attached to the job's group, and what the
/// job leaves behind is killed through the group.
#[test]
fn on_cgroup_v2_a_job_cannot_open_another_gpu_nor_leave_a_process_behind() {
    let scratch = Scratch::new("confine-v2");
    let d = Daemon::start(&scratch.0.join("data"), "2xH100-80GB", &["--cgroups", "v2"]);
    no_other_gpu_and_nothing_left_behind(&d, &scratch);
}

/// A job given one of two GPUs opens its own GPU's device file but not the
/// other's; a process it started in a session of its own (out of its
/// process group) does not outlive it.
fn no_other_gpu_and_nothing_left_behind(d: &Daemon, scratch: &Scratch) {
    // Device files of both GPUs (minor = index); the job gets one.
    let devs = scratch.0.join("dev");
    std::fs::create_dir_all(&devs).expect("dir");
    for i in 0..2 {
        let ok = Command::new("mknod").arg(devs.join(format!("nvidia{i}"))).args(["c", "195", &i.to_string()]).status();
        assert!(ok.is_ok_and(|s| s.success()), "mknod needs root");
    }
    let probe = format!(
        "for i in 0 1; do if (exec 3<{0}/nvidia$i) 2>/tmp/gpool-confine-$$; then echo nvidia$i opened; \
         else echo nvidia$i $(cat /tmp/gpool-confine-$$); fi; done; rm -f /tmp/gpool-confine-$$; \
         echo visible=$CUDA_VISIBLE_DEVICES; setsid sleep 600 >/dev/null 2>&1 & echo escaped=$!",
        devs.display()
    );
    let id = d.submit(json!({"command": probe, "resources": {"nvidia.com/gpu": 1}}));
    d.wait_ended(&[id], Duration::from_secs(60));
    let out = std::fs::read_to_string(scratch.0.join(format!("data/jobs/{id}/rank0.out"))).expect("log");
    let mine: u32 = out
        .lines()
        .find_map(|l| l.strip_prefix("visible="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("one GPU index in CUDA_VISIBLE_DEVICES: {out}"));
    let other = 1 - mine;
    let line = |i: u32| out.lines().find(|l| l.starts_with(&format!("nvidia{i} "))).unwrap_or("").to_string();
    assert!(line(other).contains("Operation not permitted"), "another GPU's file is denied: {out}");
    assert!(!line(mine).contains("Operation not permitted"), "its own GPU's file is not: {out}");
    let escaped: i32 = out
        .lines()
        .find_map(|l| l.strip_prefix("escaped="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("the pid of the escaped process: {out}"));
    // Killed before the job was reported ended; at most a zombie until reaped.
    let state = std::fs::read_to_string(format!("/proc/{escaped}/stat")).unwrap_or_default();
    let alive = state.rsplit(')').next().and_then(|r| r.split_whitespace().next()).is_some_and(|s| s != "Z");
    if alive {
        let _ = Command::new("kill").args(["-KILL", &escaped.to_string()]).status();
    }
    assert!(!alive, "a process the job left behind outlived it: {state}");
}
