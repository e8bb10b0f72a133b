//! The AMD parsers on every recorded output in `data/amd` (README there:
//! sources and licences): values read by meaning across ROCm 4.3 to 7.2,
//! both JSON roots, and no input that makes them panic.

use std::path::PathBuf;

use gpool_gpu::amd::{self, amd_model, name_and_model};

fn read(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/amd").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// (file, cards, card0's name, model, total MiB, used MiB, GPU use %, edge °C, power W)
type Row = (
    &'static str,
    usize,
    Option<&'static str>,
    &'static str,
    Option<u64>,
    Option<u64>,
    Option<f64>,
    Option<f64>,
    Option<f64>,
);

#[test]
fn rocm_smi_json_of_every_recorded_version() {
    let navi = Some("Navi 22 [Radeon RX 6700/6700 XT / 6800M]");
    let rows: [Row; 10] = [
        (
            "mi100.rocm-smi-json-telegraf_rocm5.7.1.json",
            6,
            Some("Arcturus GL-XL [Instinct MI100]"),
            "MI100",
            Some(32_752),
            Some(6),
            Some(0.0),
            Some(31.0),
            Some(39.0),
        ),
        // ROCm 4.3 prints the vendor id where the name goes: no name.
        (
            "rx6700xt.rocm-smi-json-telegraf_rocm4.3.0.json",
            1,
            None,
            "AMD-0x73df",
            Some(12_272),
            Some(1_548),
            Some(0.0),
            Some(45.0),
            Some(6.0),
        ),
        (
            "rx6700xt.rocm-smi-json-telegraf_rocm5.7.1.json",
            1,
            navi,
            "RX-6700",
            Some(12_272),
            Some(1_492),
            Some(0.0),
            Some(45.0),
            Some(6.0),
        ),
        // "N/A (Secondary die)": absent, not zero.
        (
            "rx6700xt.rocm-smi-json-telegraf_rocm6.0.2.json",
            1,
            navi,
            "RX-6700",
            Some(12_272),
            Some(1_500),
            Some(0.0),
            Some(45.0),
            None,
        ),
        (
            "rx6700xt.rocm-smi-json-telegraf_rocm6.1.2.json",
            1,
            navi,
            "RX-6700",
            Some(12_272),
            Some(1_500),
            Some(0.0),
            Some(45.0),
            Some(6.0),
        ),
        (
            "vega10-xt.rocm-smi-json-telegraf.json",
            1,
            None,
            "AMD-0x6861",
            Some(16_368),
            Some(17),
            Some(0.0),
            Some(39.0),
            Some(15.0),
        ),
        (
            "rx7900xt.rocm-smi-productname-use-meminfo-vram.json",
            1,
            Some("Radeon RX 7900 XT"),
            "RX-7900",
            Some(20_464),
            Some(27),
            Some(0.0),
            None,
            None,
        ),
        ("rx6800-x2.rocm-smi-showmemuse_1.4.1.json", 2, None, "AMD-unknown", None, None, None, None, None),
        (
            "mi250x.rocm-smi-showproductname.json",
            1,
            Some("AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2"),
            "MI200",
            None,
            None,
            None,
            None,
            None,
        ),
        (
            "mi100.rocm-smi-json-telegraf_rocm5.7.1.json",
            6,
            Some("Arcturus GL-XL [Instinct MI100]"),
            "MI100",
            Some(32_752),
            Some(6),
            Some(0.0),
            Some(31.0),
            Some(39.0),
        ),
    ];
    for (file, n, name, model, total, used, util, edge, power) in rows {
        let cards = amd::parse_rocm_smi(&read(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(cards.len(), n, "{file}");
        let c = &cards[0];
        assert_eq!(c.name.as_deref(), name, "{file}");
        let (_, got) = name_and_model(c.name.as_deref(), c.device_id.as_deref(), c.compute_partition.as_deref());
        assert_eq!(got, model, "{file}");
        assert_eq!((c.memory_total_mb, c.memory_used_mb), (total, used), "{file}");
        assert_eq!((c.gpu_util_pct, c.temperature_edge_c, c.power_w), (util, edge, power), "{file}");
    }
    // The same card seen by four rocm-smi versions: the same readings, whatever the keys were called.
    let versions = ["4.3.0", "5.7.1", "6.0.2", "6.1.2"]
        .map(|v| amd::parse_rocm_smi(&read(&format!("rx6700xt.rocm-smi-json-telegraf_rocm{v}.json"))).expect("parses"));
    for v in &versions {
        let c = &v[0];
        assert_eq!(
            (c.pci_bus.as_deref(), c.temperature_junction_c, c.power_cap_w),
            (Some("0000:07:00.0"), Some(47.0), Some(211.0))
        );
        assert_eq!(c.device_id.as_deref(), Some("0x73df"));
        assert_eq!(c.pcie_replays, Some(0), "`PCIe Replay Count` in every version");
    }
    let mi100 = amd::parse_rocm_smi(&read("mi100.rocm-smi-json-telegraf_rocm5.7.1.json")).expect("parses");
    assert_eq!(mi100.iter().map(|c| c.index).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
    assert_eq!((mi100[0].sclk_mhz, mi100[0].mclk_mhz), (Some(300), Some(1200)));
    assert!(mi100.iter().all(|c| c.pcie_replays == Some(0)));
    // Asked without `--showreplaycount`: unknown, not zero.
    let rx7900 = amd::parse_rocm_smi(&read("rx7900xt.rocm-smi-productname-use-meminfo-vram.json")).expect("parses");
    assert_eq!(rx7900[0].pcie_replays, None);
}

#[test]
fn amd_smi_static_with_the_gpu_data_root() {
    let s = amd::parse_static(&read("mi210.amd-smi-static.json")).expect("parses");
    assert_eq!(s.len(), 1);
    let g = &s[0];
    assert_eq!((g.gpu, g.name.as_deref(), g.memory_mb), (0, Some("AMD Instinct MI210"), Some(65_520)));
    assert_eq!((g.numa_node, g.power_cap_w, g.bdf.as_deref()), (Some(1), Some(300.0), None));
    assert_eq!(amd_model(g.name.as_deref().unwrap_or(""), g.compute_partition.as_deref()), "MI210");
}

#[test]
fn amd_smi_metric_fragments_and_processes() {
    // The ROCm 6.1 changelog's `metric -p --json`: a bare list, value/unit objects.
    let m = amd::parse_metric(&read("unknown-gpu.amd-smi-metric-p_rocm6.1-changelog.json")).expect("parses");
    assert_eq!((m.len(), m[0].gpu, m[0].power_w, m[0].throttled), (1, 0, Some(10.0), Some(false)));
    // `-p` prints no `ecc`, `ecc_blocks` or `pcie` section: all unknown, no fault.
    assert_eq!((m[0].ecc_uncorrected, m[0].ras_uncorrectable.len(), m[0].pcie_replays), (None, 0, None));
    // An R9700's `metric`, cut after 40 lines by the reporter: an error that names a line, not a panic.
    let e = amd::parse_metric(&read("r9700.amd-smi-metric-gpu0_26.2.1_TRUNCATED-head-n-40.txt")).expect_err("cut");
    assert!(matches!(e, gpool_gpu::GpuError::Parse { line: 30.., .. }), "{e}");
    // 26.2.1 `process --json`: a bare list, the same four processes under both GPUs.
    let p = amd::parse_process(&read("r9700-x2.amd-smi-process_26.2.1.json")).expect("parses");
    let on = |g: u32| p.iter().filter(|(x, _)| *x == g).map(|(_, p)| p.pid).collect::<Vec<_>>();
    assert_eq!(on(0).len(), 4);
    assert_eq!(on(0), on(1));
    assert_eq!(p[0].1.name.as_deref(), Some("/usr/bin/python3.12"));
}

#[test]
fn no_recorded_file_or_cut_of_one_makes_a_parser_panic() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/amd");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("data/amd") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).unwrap_or_default();
        files += 1;
        let cuts: Vec<usize> = (0..text.len()).step_by(37).filter(|i| text.is_char_boundary(*i)).collect();
        for cut in cuts.into_iter().chain([text.len()]) {
            let t = &text[..cut];
            let _ = amd::parse_rocm_smi(t);
            let _ = amd::parse_static(t);
            let _ = amd::parse_metric(t);
            let _ = amd::parse_process(t);
        }
    }
    assert!(files >= 30, "{files} files");
}
