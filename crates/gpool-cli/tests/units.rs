//! Issue 43: the systemd units tell the truth. Each is `Type=notify`, and
//! `gpool up` does send `READY=1` once its API answers; `systemd-analyze
//! verify` finds nothing wrong in any unit, and `systemd-analyze security`
//! rates the control plane's unit (which runs no jobs) as hardened. The
//! units of processes that start jobs as other users are hardened only as
//! far as jobs can live with (the reasons are in the units).

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

const UNITS: [&str; 3] = ["gpool-up.service", "gpool-agent.service", "gpool-serve.service"];

fn unit_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/systemd")
}

/// The unit as installed, with `ExecStart` pointing at the binary under test
/// (systemd-analyze checks that the command exists).
fn installed(scratch: &Path, unit: &str) -> PathBuf {
    let text = std::fs::read_to_string(unit_dir().join(unit)).expect("the unit");
    let path = scratch.join(unit);
    std::fs::write(&path, text.replace("/usr/local/bin/gpool", BIN)).expect("write");
    path
}

fn systemd_analyze(args: &[&str], unit: &Path) -> (bool, String) {
    let out =
        Command::new("systemd-analyze").args(args).arg(unit).output().unwrap_or_else(|e| {
            panic!("cannot run systemd-analyze ({e}): apt-get install systemd (scripts/test.sh does)")
        });
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// systemd's version (`systemd 252 (252.38-1~deb12u1)`).
fn systemd_version() -> u32 {
    let out = Command::new("systemd-analyze").arg("--version").output().expect("systemd-analyze");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[test]
fn every_unit_is_of_type_notify_verifies_clean_and_the_control_planes_is_hardened() {
    let s = Scratch::new("units");
    let version = systemd_version();
    for unit in UNITS {
        let text = std::fs::read_to_string(unit_dir().join(unit)).expect("unit");
        assert!(text.contains("\nType=notify\n") && text.contains("\nNotifyAccess=main\n"), "{unit}");
        assert!(text.contains("\nProtectSystem="), "{unit} has no ProtectSystem=");
        let path = installed(&s.0, unit);
        let (ok, said) = systemd_analyze(&["verify", "--man=no"], &path);
        // DelegateSubgroup= (the jobs' control groups beside the agent's) is systemd 254's;
        // an older systemd ignores it, which is what the units want there.
        let remarks: Vec<&str> = said
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter(|l| !(version < 254 && l.contains("Unknown key 'DelegateSubgroup'")))
            .collect();
        assert!(ok && remarks.is_empty(), "systemd-analyze verify {unit}:\n{said}");
    }
    let (_, said) =
        systemd_analyze(&["security", "--offline=true", "--no-pager"], &installed(&s.0, "gpool-serve.service"));
    let exposure: f64 = said
        .lines()
        .find_map(|l| l.split("Overall exposure level for gpool-serve.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level:\n{said}"));
    assert!(exposure <= 2.0, "the control plane's unit is exposed at {exposure} (OK is at most 2.0):\n{said}");
}

/// `gpool up` under a `Type=notify` unit: `READY=1` arrives once the API
/// answers (the URL it names is served), and `STOPPING=1` when it stops.
#[test]
fn gpool_up_tells_systemd_it_is_ready_once_its_api_answers() {
    let s = Scratch::new("notify");
    let socket = s.0.join("notify.sock");
    let systemd = UnixDatagram::bind(&socket).expect("the notify socket");
    systemd.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let d = Daemon::spawn_with_env(
        &s.0.join("data"),
        &["--simulate-gpus", "1xH100-80GB"],
        &[("NOTIFY_SOCKET", socket.to_str().expect("path"))],
    );
    let mut buf = [0u8; 512];
    let n = systemd.recv(&mut buf).expect("READY=1 within a minute");
    let said = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(said.starts_with("READY=1\nSTATUS=serving "), "{said}");
    let url = said.trim_start_matches("READY=1\nSTATUS=serving ").trim();
    assert_eq!(url, d.url, "it names the address it serves");
    assert_eq!(d.text("/healthz").0, 200, "the API answers");
    drop(d);
    let n = systemd.recv(&mut buf).expect("STOPPING=1");
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("STOPPING=1"), "{:?}", &buf[..n]);
}

/// With `WatchdogSec=` (`$WATCHDOG_USEC`), the controller's loop pings
/// `WATCHDOG=1` while it turns, idle or not; a process the variable does
/// not name (`$WATCHDOG_PID`) sends none.
#[test]
fn gpool_up_pings_systemds_watchdog_from_its_controller_loop() {
    let s = Scratch::new("watchdog");
    let socket = s.0.join("notify.sock");
    let systemd = UnixDatagram::bind(&socket).expect("the notify socket");
    systemd.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let d = Daemon::spawn_with_env(
        &s.0.join("data"),
        &["--simulate-gpus", "1xH100-80GB"],
        &[("NOTIFY_SOCKET", socket.to_str().expect("path")), ("WATCHDOG_USEC", "400000")],
    );
    let mut buf = [0u8; 512];
    let (mut pings, mut ready) = (0, false);
    while pings < 5 || !ready {
        let n = systemd.recv(&mut buf).unwrap_or_else(|e| panic!("{pings} pings, ready {ready}, then: {e}"));
        match &buf[..n] {
            b"WATCHDOG=1" => pings += 1,
            said if said.starts_with(b"READY=1") => ready = true,
            _ => {}
        }
    }
    drop(d);
    // The pid systemd names is not this daemon's: no ping (on a socket of
    // its own: the first daemon's last pings may still be queued on that one).
    let socket = s.0.join("notify2.sock");
    let systemd = UnixDatagram::bind(&socket).expect("the notify socket");
    let d = Daemon::spawn_with_env(
        &s.0.join("data2"),
        &["--simulate-gpus", "1xH100-80GB"],
        &[("NOTIFY_SOCKET", socket.to_str().expect("path")), ("WATCHDOG_USEC", "400000"), ("WATCHDOG_PID", "1")],
    );
    systemd.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
    let mut said = Vec::new();
    while let Ok(n) = systemd.recv(&mut buf) {
        said.push(String::from_utf8_lossy(&buf[..n]).to_string());
        if said.iter().filter(|s| s.starts_with("READY=1")).count() > 0 && said.len() > 3 {
            break;
        }
    }
    drop(d);
    assert!(said.iter().any(|s| s.starts_with("READY=1")), "{said:?}");
    assert!(!said.iter().any(|s| s == "WATCHDOG=1"), "pinged for another process: {said:?}");
}
