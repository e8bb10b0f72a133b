//! `tpu-info` on every recorded output in `data/tpu` (README there: sources
//! and licences): three table layouts, idle to loaded, v4, v5p and v6e.

use std::path::PathBuf;

use gpool_gpu::tpu::{generation, parse_tpu_info};

fn read(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/tpu").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// (file, chips, generation, HBM used/total MiB of chip 0, duty cycle of chip 0, warnings)
type Row = (&'static str, usize, Option<&'static str>, Option<(u64, u64)>, Option<f64>, usize);

#[test]
fn every_recorded_output_gives_its_chips_hbm_and_duty_cycle() {
    let rows: [Row; 9] = [
        ("v4-8.tpu-info_2024.txt", 4, Some("v4"), Some((0, 32_512)), Some(0.0), 0),
        ("v5p-8.tpu-info_idle-no-framework_libtpu-0.0.39.txt", 4, Some("v5p"), None, None, 1),
        ("v5p-8.tpu-info_warmup_libtpu-0.0.39.txt", 4, Some("v5p"), Some((0, 98_038)), Some(0.0), 0),
        ("v5p-8.tpu-info_load_libtpu-0.0.39.txt", 4, Some("v5p"), Some((1_290, 98_038)), Some(71.11), 0),
        ("v5p-8.tpu-info_idle-after-exit_libtpu-0.0.39.txt", 4, Some("v5p"), None, None, 0),
        ("v6e-1.tpu-info_load_libtpu-0.0.21.txt", 1, Some("v6e"), Some((14_008, 32_000)), Some(96.88), 3),
        ("v6e-4.tpu-info_idle-no-libtpu_gke-debug-container.txt", 4, Some("v6e"), None, None, 4),
        ("v6e-4.tpu-info_markdown-tables_0.9plus-doc.txt", 4, Some("v6e"), Some((18_893, 32_000)), Some(100.0), 0),
        // `--metric duty_cycle_percent --metric hbm_usage`: no chips table, readings per chip.
        ("v6e-8.tpu-info-metric-duty-hbm_0.8.txt", 0, None, Some((30_208, 32_000)), Some(100.0), 0),
    ];
    for (file, chips, generation_want, hbm, duty, warnings) in rows {
        let info = parse_tpu_info(&read(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(info.chips.len(), chips, "{file}: {info:?}");
        let g = info
            .accelerator_type
            .as_deref()
            .and_then(generation)
            .or_else(|| info.chips.first().and_then(|c| c.chip_type.as_deref()).and_then(generation));
        assert_eq!(g.as_deref(), generation_want, "{file}");
        let u = info.usage.iter().find(|u| u.chip == 0);
        assert_eq!(u.and_then(|u| Some((u.hbm_used_mib?, u.hbm_total_mib?))), hbm, "{file}: {info:?}");
        assert_eq!(u.and_then(|u| u.duty_cycle_pct), duty, "{file}");
        assert_eq!(info.warnings.len(), warnings, "{file}: {:?}", info.warnings);
    }
}

#[test]
fn chips_devices_pids_and_processes() {
    let load = parse_tpu_info(&read("v5p-8.tpu-info_load_libtpu-0.0.39.txt")).expect("parses");
    assert_eq!(
        load.chips.iter().map(|c| c.device.as_str()).collect::<Vec<_>>(),
        ["/dev/vfio/0", "/dev/vfio/1", "/dev/vfio/2", "/dev/vfio/3"]
    );
    assert!(load.chips.iter().all(|c| c.pid == Some(529_279) && c.chip_type.as_deref() == Some("TPU v5p chip")));
    assert_eq!(load.tensorcore_pct[0], (0, 93.48));
    let idle = parse_tpu_info(&read("v5p-8.tpu-info_idle-no-framework_libtpu-0.0.39.txt")).expect("parses");
    assert!(idle.chips.iter().all(|c| c.pid.is_none()), "`None` is no PID");
    assert!(idle.warnings[0].starts_with("WARNING: Libtpu metrics unavailable."), "{:?}", idle.warnings);
    let v4 = parse_tpu_info(&read("v4-8.tpu-info_2024.txt")).expect("parses");
    assert_eq!(v4.chips[3].device, "/dev/accel3");
    for file in ["v6e-8.tpu-info-process_0.8.txt", "v6e-8.tpu-info-process_markdown-tables_0.9plus-doc.txt"] {
        let p = parse_tpu_info(&read(file)).expect("parses");
        assert_eq!(p.processes.len(), 8, "{file}");
        assert_eq!(p.processes[7], (7, 799_657, Some("python3".to_string())), "{file}");
    }
    let version = parse_tpu_info(&read("v6e.tpu-info-version_0.8.0.txt")).expect("parses");
    assert_eq!((version.libtpu_version.as_deref(), version.accelerator_type.as_deref()), (Some("0.0.18"), Some("v6e")));
    let broken = parse_tpu_info(&read("unknown-tpu.tpu-info-version_0.8.0_incompatible-python.txt")).expect("parses");
    assert_eq!(broken.accelerator_type, None, "`N/A (incompatible environment)` is absent");
}

#[test]
fn no_cut_of_a_recorded_file_makes_the_parser_panic() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/tpu");
    let mut read = 0;
    for entry in std::fs::read_dir(&dir).expect("data/tpu") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "txt") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a recorded output reads");
        assert!(!text.is_empty(), "{} is empty", path.display());
        for cut in (0..text.len()).filter(|i| text.is_char_boundary(*i)).step_by(7) {
            let _ = parse_tpu_info(&text[..cut]);
        }
        read += 1;
    }
    // The loop must have had something to cut (issue 40, point 5): every recorded output.
    assert_eq!(read, 13, "the recorded tpu-info outputs in data/tpu");
}
