//! The `nvidia-smi` backend against stand-in scripts that print recorded
//! outputs for the exact argument lists the backend promises to run.
#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use gpool_gpu::smi::{self, NvidiaSmi};
use gpool_gpu::{Backend, GpuError};

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/nvidia-smi")
}

/// A synthetic `mig -lgi` for the H100 whose MIG layout the recorded files
/// show (GI 2: 3g.40gb, 3: 2g.20gb, 9 and 10: 1g.10gb); the placements are made up.
const H100_LGI: &str = "\
+---------------------------------------------------------+
| GPU instances:                                          |
| GPU   Name             Profile  Instance   Placement    |
|                          ID       ID       Start:Size   |
|=========================================================|
|   0  MIG 1g.10gb         19        9          2:1       |
+---------------------------------------------------------+
|   0  MIG 1g.10gb         19       10          3:1       |
+---------------------------------------------------------+
|   0  MIG 2g.20gb         14        3          0:2       |
+---------------------------------------------------------+
|   0  MIG 3g.40gb          9        2          4:4       |
+---------------------------------------------------------+
";

struct Scripts {
    dir: PathBuf,
}

impl Scripts {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    fn log(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.join(format!("{name}.log")))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// One `case` arm of a stand-in: the exact arguments and what to do.
fn arm(args: &[&str], body: &str) -> String {
    format!("  \"{}\") {body} ;;\n", args.join(" "))
}

fn cat(file: &str) -> String {
    format!("cat '{}'", data().join(file).display())
}

/// Writes every script before any test runs one: executing a file another
/// thread still has open for writing fails with ETXTBSY.
fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("smi-standins");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("h100.lgi"), H100_LGI).expect("write");
        let write = |name: &str, arms: &str| {
            let p = dir.join(name);
            let log = dir.join(format!("{name}.log"));
            let text = format!(
                "#!/bin/sh\necho \"$*\" >> '{}'\ncase \"$*\" in\n{arms}  *) echo \"stand-in: unexpected arguments: $*\" >&2; exit 2 ;;\nesac\n",
                log.display()
            );
            std::fs::write(&p, text).expect("write script");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        };
        // An H100 with MIG on that prints the recorded 212-column file whatever fields are asked.
        write(
            "h100-mig",
            &[
                format!("  --query-gpu=*) {} ;;\n", cat("h100-80gb-hbm3-mig_query-gpu_load.csv")),
                arm(smi::LIST_ARGS, &cat("h100-80gb-hbm3-mig_nvidia-smi-L.txt")),
                arm(smi::MIG_LGI_ARGS, &format!("cat '{}'", dir.join("h100.lgi").display())),
                arm(smi::COMPUTE_APPS_ARGS, &cat("h100-80gb-hbm3-mig_query-compute-apps_load.csv")),
                arm(smi::XML_ARGS, "echo 'stand-in: no XML here' >&2; exit 3"),
            ]
            .concat(),
        );
        // The same H100 whose `-q -x` fails and whose `-q` answers (recorded under load).
        write(
            "h100-mig-q",
            &[
                format!("  --query-gpu=*) {} ;;\n", cat("h100-80gb-hbm3-mig_query-gpu_load.csv")),
                arm(smi::COMPUTE_APPS_ARGS, &cat("h100-80gb-hbm3-mig_query-compute-apps_load.csv")),
                arm(smi::XML_ARGS, "echo 'stand-in: no XML here' >&2; exit 3"),
                arm(smi::TEXT_ARGS, &cat("h100-80gb-hbm3-mig_q_load.txt")),
            ]
            .concat(),
        );
        // An H100 with MIG off that answers only the exact argument lists of the contract.
        write(
            "h100",
            &[
                arm(smi::INVENTORY_ARGS, &cat("h100-80gb-hbm3_query-gpu-common_idle.csv")),
                arm(smi::SAMPLE_ARGS, &cat("h100-80gb-hbm3_query-gpu-common_load.csv")),
                arm(smi::COMPUTE_APPS_ARGS, &cat("h100-80gb-hbm3_query-compute-apps_load.csv")),
            ]
            .concat(),
        );
        // An older driver that does not know a field: `--query-gpu` fails, `-q -x` works.
        write(
            "t4-old",
            &[
                arm(smi::SAMPLE_ARGS, "echo 'Field \"memory.reserved\" is not a valid field to query.'; exit 2"),
                arm(smi::XML_ARGS, &cat("tesla-t4_q-x.xml")),
            ]
            .concat(),
        );
        write("hung", "  *) exec sleep 30 ;;\n");
        write(
            "no-driver",
            "  *) echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\"; exit 9 ;;\n",
        );
        Scripts { dir }
    })
}

fn smi_at(name: &str) -> NvidiaSmi {
    NvidiaSmi::at(scripts().path(name))
}

#[test]
fn mig_inventory_from_list_and_lgi_with_extra_columns() {
    let inv = smi_at("h100-mig").inventory().expect("inventory");
    assert_eq!(inv.len(), 1);
    let g = &inv[0];
    assert_eq!(
        (g.index, g.uuid.as_str(), g.name.as_str()),
        (0, "GPU-00000000-0000-0000-0000-000000000000", "NVIDIA H100 80GB HBM3")
    );
    assert_eq!(
        (g.model.as_str(), g.memory_mb, g.pci_bus_id.as_deref()),
        ("H100-80GB", 81559, Some("00000000:00:09.0"))
    );
    let mig = g.mig.as_ref().expect("MIG on");
    let got: Vec<(&str, Option<u32>, Option<(u32, u32)>, &str, u64)> =
        mig.iter().map(|m| (m.profile.as_str(), m.gi_id, m.placement, m.uuid.as_str(), m.memory_mb)).collect();
    assert_eq!(
        got,
        [
            ("3g.40gb", Some(2), Some((4, 4)), "MIG-00000000-0000-0000-0000-000000000000", 39_750),
            ("2g.20gb", Some(3), Some((0, 2)), "MIG-00000001-0000-0000-0000-000000000001", 19_750),
            ("1g.10gb", Some(9), Some((2, 1)), "MIG-00000002-0000-0000-0000-000000000002", 9_750),
            ("1g.10gb", Some(10), Some((3, 1)), "MIG-00000003-0000-0000-0000-000000000003", 9_750),
        ]
    );
    let log = scripts().log("h100-mig");
    assert!(log.contains(&smi::INVENTORY_ARGS.join(" ")), "{log:?}");
    assert!(log.contains(&"-L".to_string()) && log.contains(&"mig -lgi".to_string()), "{log:?}");
}

#[test]
fn mig_sample_keeps_going_without_the_xml_report() {
    let s = smi_at("h100-mig").sample().expect("sample");
    assert_eq!(s.len(), 1);
    let s = &s[0];
    assert_eq!((s.index, s.uuid.as_str()), (0, "GPU-00000000-0000-0000-0000-000000000000"));
    assert_eq!(
        (s.gpu_util_pct, s.memory_used_mb, s.power_draw_w, s.power_limit_w),
        (None, Some(11125), Some(433.78), Some(700.0))
    );
    assert_eq!(s.processes.iter().map(|p| p.pid).collect::<Vec<_>>(), [21180, 21181, 21198]);
    assert!(s.mig.is_empty(), "no -q -x: no per-instance memory, and no error");
}

#[test]
fn a_mig_sample_takes_the_fault_readings_of_the_report_it_reads() {
    let s = smi_at("h100-mig-q").sample().expect("sample");
    let s = &s[0];
    assert_eq!(s.mig.iter().map(|m| m.gi_id).collect::<Vec<_>>(), [2, 3, 9, 10], "the report was read");
    // `Replays Since Reset : 9` comes from the report (`--query-gpu` has no such
    // field); `Remapped Rows : N/A` and `[N/A]` in the CSV leave the rest unknown.
    assert_eq!((s.pcie_replays, s.remap_pending, s.remap_failed, s.retired_pages), (Some(9), None, None, None));
}

#[test]
fn sample_and_inventory_run_exactly_the_promised_arguments() {
    let mut smi = smi_at("h100");
    let inv = smi.inventory().expect("inventory");
    assert_eq!((inv[0].mig.clone(), inv[0].memory_mb), (None, 81559));
    let s = smi.sample().expect("sample");
    assert_eq!((s[0].gpu_util_pct, s[0].mem_util_pct, s[0].memory_used_mb), (Some(100.0), Some(11.0), Some(19818)));
    assert_eq!(
        (s[0].sm_clock_mhz, s[0].temperature_c, s[0].throttle_reasons.as_deref()),
        (Some(1980), Some(59.0), Some(&[][..]))
    );
    let mem: Vec<(u32, Option<u64>)> = s[0].processes.iter().map(|p| (p.pid, p.used_memory_mb)).collect();
    assert_eq!(mem, [(11327, Some(2566)), (11328, Some(1542)), (11345, Some(15690))]);
    // The first sample reads the report once, for the slowdown temperatures
    // `--query-gpu` has no field for (this stand-in answers neither form).
    let once = [smi::XML_ARGS.join(" "), smi::TEXT_ARGS.join(" ")];
    assert_eq!(
        scripts().log("h100"),
        [
            [smi::INVENTORY_ARGS.join(" "), smi::SAMPLE_ARGS.join(" "), smi::COMPUTE_APPS_ARGS.join(" ")].as_slice(),
            &once
        ]
        .concat()
    );
    smi.sample().expect("a second sample");
    let log = scripts().log("h100");
    assert_eq!(
        log[5..],
        [smi::SAMPLE_ARGS.join(" "), smi::COMPUTE_APPS_ARGS.join(" ")],
        "the report is not read again"
    );
}

#[test]
fn an_older_driver_falls_back_to_the_xml_report_and_stays_there() {
    let mut smi = smi_at("t4-old");
    for _ in 0..2 {
        let s = smi.sample().expect("sample from -q -x");
        assert_eq!(s[0].uuid, "GPU-d37e67a5-91dd-3774-a5cb-99096249601a");
        assert_eq!((s[0].memory_used_mb, s[0].power_draw_w, s[0].gpu_util_pct), (Some(1032), Some(26.78), Some(0.0)));
        assert_eq!(s[0].processes.iter().map(|p| p.pid).collect::<Vec<_>>(), [675, 5762]);
    }
    let log = scripts().log("t4-old");
    assert_eq!(log.iter().filter(|l| l.starts_with("--query-gpu")).count(), 1, "{log:?}");
    assert_eq!(log.iter().filter(|l| *l == "-q -x").count(), 2, "{log:?}");
}

#[test]
fn a_hung_nvidia_smi_is_killed_after_the_timeout() {
    let start = Instant::now();
    let e = smi_at("hung").with_timeout(Duration::from_millis(300)).sample().expect_err("times out");
    assert!(matches!(e, GpuError::Timeout { .. }), "{e}");
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
    assert!(e.to_string().contains("killed"), "{e}");
}

#[test]
fn no_driver_and_no_binary_say_how_to_fix_it() {
    let e = NvidiaSmi::at(Path::new("/nonexistent/nvidia-smi")).inventory().expect_err("no binary");
    assert!(matches!(e, GpuError::NoDriver(_)), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("not found") && msg.contains("--simulate-gpus"), "{msg}");
    let e = smi_at("no-driver").inventory().expect_err("driver not loaded");
    assert!(matches!(e, GpuError::NoDriver(_)), "{e}");
    assert!(e.to_string().contains("couldn't communicate"), "{e}");
    // A failure that is not about the driver names the command and what it said.
    let e = smi_at("t4-old").run(&["--bogus"]).expect_err("fails");
    let msg = e.to_string();
    assert!(msg.contains("--bogus") && msg.contains("unexpected arguments") && msg.contains("by hand"), "{msg}");
}
