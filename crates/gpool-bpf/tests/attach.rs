//! The filter on a real kernel (needs root and a cgroup v2 hierarchy, as
//! CI has): a process in a group whose filter denies /dev/null's numbers
//! (1:3) cannot open it; one outside the group can.

use std::process::Command;

use gpool_bpf::{DeviceFilter, DeviceKind};

fn cgroup2_mount() -> std::path::PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && f[2] == "cgroup2").then(|| std::path::PathBuf::from(f[1]))
        })
        .expect("this test needs a cgroup v2 hierarchy mounted")
}

fn open_null_in(group: Option<&std::path::Path>) -> String {
    let join = group.map_or(String::new(), |g| format!("echo $$ > {}/cgroup.procs && ", g.display()));
    let out = Command::new("sh")
        .args(["-c", &format!("{join}if (exec 3</dev/null) 2>/dev/null; then echo opened; else echo denied; fi")])
        .output()
        .expect("sh");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_task_of_the_group_cannot_open_a_denied_device() {
    let group = cgroup2_mount().join(format!("gpool-bpf-test-{}", std::process::id()));
    std::fs::create_dir(&group).expect("creating a control group needs root");
    let filter = DeviceFilter { deny: vec![(DeviceKind::Char, 1, 3)] };
    let attached = filter.attach(&group);
    let inside = open_null_in(Some(&group));
    let outside = open_null_in(None);
    let _ = std::fs::remove_dir(&group);
    attached.expect("attached");
    assert_eq!(inside, "denied");
    assert_eq!(outside, "opened");
}

#[test]
fn a_missing_group_is_named() {
    let e = DeviceFilter::default().attach(std::path::Path::new("/no/such/group")).expect_err("no group");
    assert!(e.to_string().contains("/no/such/group"), "{e}");
}
