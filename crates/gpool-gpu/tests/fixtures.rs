//! Every recorded output in `data/nvidia-smi/` parses to the values it shows.
//!
//! `FILES` maps each file to its check; `every_recorded_file_has_a_check`
//! fails when a file is added to the folder without one. The values asserted
//! were read off the files by hand.

use std::collections::BTreeSet;
use std::path::PathBuf;

use gpool_gpu::smi::{self, MigCreateError, MigCreated, Query};
use gpool_gpu::{GpuProcess, GpuSample, MigInfo};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/nvidia-smi")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

type Check = fn(&str);

/// Every data file of the folder and its check (documentation files aside).
const FILES: &[(&str, Check)] = &[
    ("a100-pcie-40gb_mig-cgi_7x1g_old-driver.txt", a100_pcie_40gb_cgi_7x1g),
    ("a100-pcie-40gb_mig-lgip_old-driver.txt", a100_pcie_40gb_lgip_old),
    ("a100-pcie-40gb_mig-lgipp_old-driver.txt", a100_pcie_40gb_lgipp_old),
    ("a100-pcie-40gb_nvidia-smi-L_mig-7x1g_old-uuid-format.txt", a100_pcie_40gb_list_old_uuids),
    ("a100-pcie-80gb_mig-lci_gi1_2x1c_515.86.01.txt", a100_pcie_80gb_lci),
    ("a100-pcie-80gb_mig-lcip_gi1_515.86.01.txt", a100_pcie_80gb_lcip),
    ("a100-pcie-80gb_mig-lgi_3g-3g_515.86.01.txt", a100_pcie_80gb_lgi),
    ("a100-pcie-80gb_mig-lgip_515.86.01.txt", a100_pcie_80gb_lgip),
    ("a100-pcie-80gb_nvidia-smi_mig-2ci_515.86.01.txt", a100_pcie_80gb_table_2ci),
    ("a100-sxm4-40gb-mig_q-x.xml", a100_sxm4_40gb_xml_v11),
    ("a100-sxm4-40gb_mig-cgi-C_3g-3g.txt", a100_sxm4_40gb_cgi_c),
    ("a100-sxm4-40gb_mig-cgi_insufficient-resources.txt", a100_sxm4_40gb_cgi_insufficient),
    ("a100-sxm4-40gb_mig-lci_gi1_3x1c.txt", a100_sxm4_40gb_lci),
    ("a100-sxm4-40gb_mig-lgi_2-1-1-1-1-1.txt", a100_sxm4_40gb_lgi_211111),
    ("a100-sxm4-40gb_mig-lgi_3-2-1-1.txt", a100_sxm4_40gb_lgi_3211),
    ("a100-sxm4-40gb_mig-lgi_3g-3g.txt", a100_sxm4_40gb_lgi_3g3g),
    ("a100-sxm4-40gb_mig-lgipp.txt", a100_sxm4_40gb_lgipp),
    ("a100-sxm4-40gb_nvidia-smi-L_mig-3g-3g.txt", a100_sxm4_40gb_list),
    ("a100-sxm4-40gb_nvidia-smi_mig-devices-ampere-util-NA.txt", a100_sxm4_40gb_table_mig_only),
    ("a100-sxm4-80gb-mig_q-x.xml", a100_sxm4_80gb_xml_v12),
    ("a10_q_535.129.03.txt", a10_text),
    ("a10g_q-x.xml", a10g_xml),
    ("geforce-24gb_nvidia-smi_fan-ERR_525.125.06.txt", geforce_table_fan_err),
    ("h100-80gb-hbm3-mig_dmon_load.txt", h100_mig_dmon),
    ("h100-80gb-hbm3-mig_nvidia-smi-L.txt", h100_mig_list),
    ("h100-80gb-hbm3-mig_nvidia-smi_idle.txt", h100_mig_table_idle),
    ("h100-80gb-hbm3-mig_nvidia-smi_load.txt", h100_mig_table_load),
    ("h100-80gb-hbm3-mig_pmon_load.txt", h100_mig_pmon),
    ("h100-80gb-hbm3-mig_q_idle.txt", h100_mig_text_idle),
    ("h100-80gb-hbm3-mig_q_load.txt", h100_mig_text_load),
    ("h100-80gb-hbm3-mig_query-compute-apps_load.csv", h100_mig_apps),
    ("h100-80gb-hbm3-mig_query-gpu-common_idle.csv", h100_mig_common_idle),
    ("h100-80gb-hbm3-mig_query-gpu-common_load.csv", h100_mig_common_load),
    ("h100-80gb-hbm3-mig_query-gpu_idle.csv", h100_mig_wide_idle),
    ("h100-80gb-hbm3-mig_query-gpu_load.csv", h100_mig_wide_load),
    ("h100-80gb-hbm3-mig_version.txt", version_590),
    ("h100-80gb-hbm3-x8_nvidia-smi_550.90.07.txt", h100_x8_table),
    ("h100-80gb-hbm3-x8_q_535.161.08.txt", h100_x8_text),
    ("h100-80gb-hbm3_dmon_load.txt", h100_dmon),
    ("h100-80gb-hbm3_help-query-gpu_590.48.01.txt", h100_help_query_gpu),
    ("h100-80gb-hbm3_nvidia-smi-L.txt", h100_list),
    ("h100-80gb-hbm3_nvidia-smi_idle.txt", h100_table_idle),
    ("h100-80gb-hbm3_nvidia-smi_load.txt", h100_table_load),
    ("h100-80gb-hbm3_pmon_load.txt", h100_pmon),
    ("h100-80gb-hbm3_q_idle.txt", h100_text_idle),
    ("h100-80gb-hbm3_q_load.txt", h100_text_load),
    ("h100-80gb-hbm3_query-compute-apps_load.csv", h100_apps),
    ("h100-80gb-hbm3_query-gpu-common_idle.csv", h100_common_idle),
    ("h100-80gb-hbm3_query-gpu-common_load.csv", h100_common_load),
    ("h100-80gb-hbm3_query-gpu_idle.csv", h100_wide_idle),
    ("h100-80gb-hbm3_query-gpu_load.csv", h100_wide_load),
    ("h100-80gb-hbm3_slurmd-G_gres-autodetect-nvml-mig.txt", h100_slurmd_gres),
    ("h100-80gb-hbm3_version.txt", version_590),
    ("h100-sxm5-80gb-x4_mig-lgip_driver-unknown.txt", h100_x4_lgip),
    ("tesla-p100-pcie-16gb_q-x.xml", p100_xml),
    ("tesla-t4_q-x.xml", t4_xml),
    ("v100-32gb-dgx2_query-gpu-util-timeseries_a.csv", v100_timeseries_a),
    ("v100-32gb-dgx2_query-gpu-util-timeseries_b.csv", v100_timeseries_b),
];

#[test]
fn every_recorded_file_has_a_check() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir())
        .expect("data/nvidia-smi")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".md"))
        .collect();
    let checked: BTreeSet<String> = FILES.iter().map(|(n, _)| (*n).to_string()).collect();
    assert_eq!(FILES.len(), checked.len(), "a file is listed twice");
    let unchecked: Vec<&String> = on_disk.difference(&checked).collect();
    let missing: Vec<&String> = checked.difference(&on_disk).collect();
    assert!(unchecked.is_empty(), "files without a check: {unchecked:?}");
    assert!(missing.is_empty(), "checks for files that are gone: {missing:?}");
}

#[test]
fn every_recorded_file_parses_to_the_values_it_shows() {
    let mut failed = Vec::new();
    for (name, check) in FILES {
        let text = read(name);
        if std::panic::catch_unwind(|| check(&text)).is_err() {
            failed.push(*name);
        }
    }
    assert!(failed.is_empty(), "checks failed for {failed:?} (see the panics above)");
}

// ---- helpers ----

fn sample_of(text: &str) -> GpuSample {
    let rows = smi::parse_query_gpu(text, None).expect("parses");
    assert_eq!(rows.len(), 1);
    rows[0].sample.clone()
}

fn process(pid: u32, name: &str, mb: u64, gi: Option<u32>, ci: Option<u32>) -> GpuProcess {
    GpuProcess { pid, name: Some(name.into()), used_memory_mb: Some(mb), gi_id: gi, ci_id: ci }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_string()).collect()
}

const H100_UUID: &str = "GPU-00000000-0000-0000-0000-000000000000";

// ---- mig -cgi ----

fn a100_pcie_40gb_cgi_7x1g(text: &str) {
    let r = smi::parse_create(text).expect("parses");
    assert!(r.failures.is_empty());
    let gis: Vec<u32> = r
        .created
        .iter()
        .map(|c| match c {
            MigCreated::GpuInstance { gpu: 0, gi_id, profile, profile_id: 19 } if profile == "1g.5gb" => *gi_id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(gis, [13, 11, 12, 7, 8, 9, 10]);
}

fn a100_sxm4_40gb_cgi_c(text: &str) {
    let r = smi::parse_create(text).expect("parses");
    let gi = |gi_id| MigCreated::GpuInstance { gpu: 0, gi_id, profile: "3g.20gb".into(), profile_id: 9 };
    let ci = |gi_id| MigCreated::ComputeInstance { gpu: 0, gi_id, ci_id: 0, profile: "3g.20gb".into(), profile_id: 2 };
    assert_eq!(r.created, [gi(2), ci(2), gi(1), ci(1)]);
    assert_eq!(r.into_result().map(|c| c.len()), Ok(4));
}

fn a100_sxm4_40gb_cgi_insufficient(text: &str) {
    let r = smi::parse_create(text).expect("a refusal is a result, not a parse error");
    let gi_ids: Vec<u32> = r
        .created
        .iter()
        .filter_map(|c| match c {
            MigCreated::GpuInstance { gi_id, .. } => Some(*gi_id),
            MigCreated::ComputeInstance { .. } => None,
        })
        .collect();
    assert_eq!(gi_ids, [13, 11, 3]);
    assert_eq!(r.created[2], MigCreated::GpuInstance { gpu: 0, gi_id: 3, profile: "2g.10gb".into(), profile_id: 14 });
    assert_eq!(r.failures.len(), 2);
    let f = &r.failures[0];
    assert_eq!((f.line, f.gpu, f.profile.as_deref()), (4, Some(0), Some("9")));
    assert_eq!(f.error, MigCreateError::InsufficientResources);
    assert_eq!((r.failures[1].line, r.failures[1].gpu), (5, None));
    assert_eq!(r.failures[1].error, MigCreateError::InsufficientResources);
    let err = r.into_result().expect_err("refused");
    assert_eq!(err.line, 4);
}

// ---- mig -lgip / -lgipp / -lcip ----

fn a100_pcie_40gb_lgip_old(text: &str) {
    let p = smi::parse_gpu_instance_profiles(text).expect("parses");
    let names: Vec<&str> = p.iter().map(|p| p.profile.as_str()).collect();
    assert_eq!(names, ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]);
    assert_eq!(p.iter().map(|p| p.profile_id).collect::<Vec<_>>(), [19, 14, 9, 5, 0]);
    assert_eq!(p.iter().map(|p| (p.free, p.total)).collect::<Vec<_>>(), [(7, 7), (3, 3), (2, 2), (1, 1), (1, 1)]);
    assert_eq!(p.iter().map(|p| p.memory_mb).collect::<Vec<_>>(), [4864, 9984, 20091, 20091, 40448].map(Some));
    assert_eq!(p.iter().map(|p| p.sm).collect::<Vec<_>>(), [14, 28, 42, 56, 98].map(Some));
    let big = &p[4];
    assert_eq!(
        (big.p2p, big.dec, big.enc, big.ce, big.jpeg, big.ofa),
        (Some(false), Some(5), Some(0), Some(7), Some(1), Some(1))
    );
}

fn a100_pcie_80gb_lgip(text: &str) {
    let p = smi::parse_gpu_instance_profiles(text).expect("parses");
    let names: Vec<&str> = p.iter().map(|p| p.profile.as_str()).collect();
    assert_eq!(names, ["1g.10gb", "1g.10gb+me", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]);
    assert_eq!(p.iter().map(|p| p.profile_id).collect::<Vec<_>>(), [19, 20, 14, 9, 5, 0]);
    // 9.50 GiB and 39.25 GiB: A100's 1g.10gb is smaller than H100's 9.75 GiB.
    assert_eq!(p.iter().map(|p| p.memory_mb).collect::<Vec<_>>(), [9728, 9728, 19968, 40192, 40192, 80896].map(Some));
    assert_eq!((p[1].free, p[1].total, p[1].dec, p[1].jpeg, p[1].ofa), (1, 1, Some(1), Some(1), Some(1)));
    assert_eq!(p.iter().map(|p| p.sm).collect::<Vec<_>>(), [14, 14, 28, 42, 56, 98].map(Some));
}

fn h100_x4_lgip(text: &str) {
    let p = smi::parse_gpu_instance_profiles(text).expect("parses");
    assert_eq!(p.len(), 28);
    assert_eq!(p.iter().map(|p| p.gpu).collect::<BTreeSet<_>>(), (0..4).collect());
    for gpu in 0..4 {
        let names: Vec<&str> = p.iter().filter(|p| p.gpu == gpu).map(|p| p.profile.as_str()).collect();
        assert_eq!(names, ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]);
    }
    let full = &p[6];
    assert_eq!(
        (full.profile_id, full.sm, full.dec, full.enc, full.ce, full.jpeg, full.ofa),
        (0, Some(132), Some(7), Some(0), Some(8), Some(7), Some(1))
    );
    assert_eq!(full.memory_mb, Some(81152));
    // 9.75 and 39.50 GiB are exactly the 9984 and 40448 MiB the H100 MIG table shows.
    assert_eq!((p[0].memory_mb, p[4].memory_mb), (Some(9984), Some(40448)));
    assert_eq!((p[2].profile_id, p[2].free, p[2].total, p[2].sm), (15, 4, 4, Some(26)));
}

fn a100_pcie_40gb_lgipp_old(text: &str) {
    let p = smi::parse_placements(text).expect("parses");
    let got: Vec<(u32, u32, Vec<u32>, u32)> = p.into_iter().map(|p| (p.gpu, p.profile_id, p.starts, p.size)).collect();
    assert_eq!(
        got,
        [
            (0, 19, vec![0, 1, 2, 3, 4, 5, 6], 1),
            (0, 14, vec![0, 2, 4], 2),
            (0, 9, vec![0, 4], 4),
            (0, 5, vec![0], 4),
            (0, 0, vec![0], 8)
        ]
    );
}

fn a100_sxm4_40gb_lgipp(text: &str) {
    let p = smi::parse_placements(text).expect("parses");
    assert_eq!(p.iter().map(|p| p.profile_id).collect::<Vec<_>>(), [19, 20, 15, 14, 9, 5, 0]);
    assert_eq!((p[2].starts.as_slice(), p[2].size), (&[0, 2, 4, 6][..], 2));
    assert_eq!((p[1].starts.len(), p[1].size), (7, 1));
    assert_eq!((p[6].starts.as_slice(), p[6].size), (&[0][..], 8));
}

fn a100_pcie_80gb_lcip(text: &str) {
    let p = smi::parse_compute_instance_profiles(text).expect("parses");
    let got: Vec<(&str, u32, bool, u32, u32, Option<u32>)> =
        p.iter().map(|p| (p.profile.as_str(), p.profile_id, p.default, p.free, p.total, p.sm)).collect();
    assert_eq!(
        got,
        [
            ("1c.3g.40gb", 0, false, 3, 3, Some(14)),
            ("2c.3g.40gb", 1, false, 1, 1, Some(28)),
            ("3g.40gb", 2, true, 1, 1, Some(42))
        ]
    );
    assert!(p.iter().all(|p| p.gpu == 0 && p.gi_id == 1));
    assert_eq!((p[0].dec, p[0].enc, p[0].ofa, p[0].ce, p[0].jpeg), (Some(2), Some(0), Some(0), Some(3), Some(0)));
}

// ---- mig -lgi / -lci ----

fn lgi(text: &str) -> Vec<(String, u32, u32, Option<(u32, u32)>)> {
    let gis = smi::parse_gpu_instances(text).expect("parses");
    assert!(gis.iter().all(|g| g.gpu == 0));
    gis.into_iter().map(|g| (g.profile, g.profile_id, g.gi_id, g.placement)).collect()
}

fn a100_pcie_80gb_lgi(text: &str) {
    assert_eq!(lgi(text), [("3g.40gb".into(), 9, 1, Some((4, 4))), ("3g.40gb".into(), 9, 2, Some((0, 4)))]);
}

fn a100_sxm4_40gb_lgi_3g3g(text: &str) {
    assert_eq!(lgi(text), [("3g.20gb".into(), 9, 1, Some((4, 4))), ("3g.20gb".into(), 9, 2, Some((0, 4)))]);
}

fn a100_sxm4_40gb_lgi_3211(text: &str) {
    assert_eq!(
        lgi(text),
        [
            ("1g.5gb".into(), 19, 7, Some((0, 1))),
            ("1g.5gb".into(), 19, 8, Some((1, 1))),
            ("2g.10gb".into(), 14, 4, Some((2, 2))),
            ("3g.20gb".into(), 9, 2, Some((4, 4)))
        ]
    );
}

fn a100_sxm4_40gb_lgi_211111(text: &str) {
    let got = lgi(text);
    assert_eq!(got.iter().map(|g| g.2).collect::<Vec<_>>(), [7, 8, 9, 10, 13, 5]);
    assert_eq!(got.iter().map(|g| g.3).collect::<Vec<_>>(), [(0, 1), (1, 1), (2, 1), (3, 1), (6, 1), (4, 2)].map(Some));
    assert_eq!((got[5].0.as_str(), got[5].1), ("2g.10gb", 14));
}

fn a100_pcie_80gb_lci(text: &str) {
    let c = smi::parse_compute_instances(text).expect("parses");
    let got: Vec<(u32, u32, &str, u32, u32, Option<(u32, u32)>)> =
        c.iter().map(|c| (c.gpu, c.gi_id, c.profile.as_str(), c.profile_id, c.ci_id, c.placement)).collect();
    assert_eq!(got, [(0, 1, "1c.3g.40gb", 0, 0, Some((0, 1))), (0, 1, "1c.3g.40gb", 0, 1, Some((1, 1)))]);
}

fn a100_sxm4_40gb_lci(text: &str) {
    let c = smi::parse_compute_instances(text).expect("parses");
    assert_eq!(c.iter().map(|c| c.ci_id).collect::<Vec<_>>(), [0, 1, 2]);
    // This older table has no placement column.
    assert!(c.iter().all(|c| c.gi_id == 1 && c.profile == "1c.3g.20gb" && c.profile_id == 0 && c.placement.is_none()));
}

// ---- -L ----

fn a100_pcie_40gb_list_old_uuids(text: &str) {
    let l = smi::parse_list(text).expect("parses");
    assert_eq!(l.len(), 1);
    assert_eq!((l[0].index, l[0].name.as_str()), (0, "A100-PCIE-40GB"));
    assert_eq!(l[0].uuid, "GPU-0069414c-9f30-41f9-d5d8-87890423f0c4");
    let m = &l[0].mig;
    assert_eq!(m.len(), 7);
    assert_eq!(m[0].uuid, "MIG-GPU-0069414c-9f30-41f9-d5d8-87890423f0c4/7/0");
    assert_eq!(m.iter().map(|d| d.device).collect::<Vec<_>>(), (0..7).collect::<Vec<_>>());
    assert_eq!(m.iter().map(|d| d.gi_id).collect::<Vec<_>>(), (7..14).map(Some).collect::<Vec<_>>());
    assert!(m.iter().all(|d| d.ci_id == Some(0) && d.profile == "1g.5gb"));
    // The old UUIDs carry the GPU instance ids: no `mig -lgi` needed, and they
    // are the ids `-cgi` printed for the same layout.
    let inv = smi::mig_inventory(0, m, None, None).expect("ids from the UUIDs");
    let mut ids: Vec<u32> = inv.iter().map(|i| i.gi_id).collect();
    ids.sort_unstable();
    let mut created: Vec<u32> = smi::parse_create(&read("a100-pcie-40gb_mig-cgi_7x1g_old-driver.txt"))
        .expect("parses")
        .created
        .iter()
        .filter_map(|c| match c {
            MigCreated::GpuInstance { gi_id, .. } => Some(*gi_id),
            MigCreated::ComputeInstance { .. } => None,
        })
        .collect();
    created.sort_unstable();
    assert_eq!(ids, created);
    assert_eq!((inv[0].memory_mb, inv[0].placement, inv[0].ci_id), (4750, None, Some(0)));
}

fn a100_sxm4_40gb_list(text: &str) {
    let l = smi::parse_list(text).expect("parses");
    assert_eq!(
        (l[0].name.as_str(), l[0].uuid.as_str()),
        ("A100-SXM4-40GB", "GPU-e86cb44c-6756-fd30-cd4a-1e6da3caf9b0")
    );
    let uuids: Vec<&str> = l[0].mig.iter().map(|m| m.uuid.as_str()).collect();
    assert_eq!(uuids, ["MIG-c7384736-a75d-5afc-978f-d2f1294409fd", "MIG-a28ad590-3fda-56dd-84fc-0a0b96edc58d"]);
    assert!(l[0].mig.iter().all(|m| m.profile == "3g.20gb" && m.gi_id.is_none()));
    // With `mig -lgi` of the same layout: MIG devices are numbered by GPU
    // instance id (as the MIG devices table of this guide shows: GI 1 = device 0).
    let gis = smi::parse_gpu_instances(&read("a100-sxm4-40gb_mig-lgi_3g-3g.txt")).expect("parses");
    let inv = smi::mig_inventory(0, &l[0].mig, Some(&gis), None).expect("matched");
    let expected = [
        MigInfo {
            profile: "3g.20gb".into(),
            uuid: uuids[0].into(),
            gi_id: 1,
            ci_id: None,
            memory_mb: 19_750,
            placement: Some((4, 4)),
        },
        MigInfo {
            profile: "3g.20gb".into(),
            uuid: uuids[1].into(),
            gi_id: 2,
            ci_id: None,
            memory_mb: 19_750,
            placement: Some((0, 4)),
        },
    ];
    assert_eq!(inv, expected);
}

fn h100_mig_list(text: &str) {
    let l = smi::parse_list(text).expect("parses");
    assert_eq!((l[0].index, l[0].name.as_str(), l[0].uuid.as_str()), (0, "NVIDIA H100 80GB HBM3", H100_UUID));
    let m = &l[0].mig;
    assert_eq!(m.iter().map(|d| d.profile.as_str()).collect::<Vec<_>>(), ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]);
    assert_eq!(m.iter().map(|d| d.device).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!(m[1].uuid, "MIG-00000001-0000-0000-0000-000000000001");
    assert!(m.iter().all(|d| d.gi_id.is_none() && d.ci_id.is_none()));
    // With the `-q` report of the same machine: exact ids and memory.
    let report = smi::parse_text(&read("h100-80gb-hbm3-mig_q_load.txt")).expect("parses");
    let inv = smi::mig_inventory(0, m, None, Some(&report.gpus[0])).expect("matched");
    assert_eq!(inv.iter().map(|i| (i.gi_id, i.ci_id)).collect::<Vec<_>>(), [2, 3, 9, 10].map(|g| (g, Some(0))));
    assert_eq!(inv.iter().map(|i| i.memory_mb).collect::<Vec<_>>(), [40448, 20096, 9984, 9984]);
    assert_eq!(inv[3].uuid, "MIG-00000003-0000-0000-0000-000000000003");
    // Without anything else, the ids cannot be told.
    assert!(smi::mig_inventory(0, m, None, None).is_err());
}

fn h100_list(text: &str) {
    let l = smi::parse_list(text).expect("parses");
    assert_eq!(l.len(), 1);
    assert_eq!((l[0].index, l[0].name.as_str(), l[0].uuid.as_str()), (0, "NVIDIA H100 80GB HBM3", H100_UUID));
    assert!(l[0].mig.is_empty());
}

// ---- the default table ----

fn a100_pcie_80gb_table_2ci(text: &str) {
    let t = smi::parse_table(text).expect("parses");
    assert_eq!((t.driver_version.as_deref(), t.cuda_version.as_deref()), (Some("515.86.01"), Some("11.7")));
    assert_eq!(t.gpus.len(), 1);
    let g = &t.gpus[0];
    assert_eq!((g.name.as_str(), g.name_truncated), ("NVIDIA A100 80G", true));
    assert_eq!(
        (g.persistence_mode, g.pci_bus_id.as_deref(), g.mig_mode),
        (Some(false), Some("00000001:00:00.0"), Some(true))
    );
    let s = &g.sample;
    assert_eq!((s.fan_pct, s.temperature_c, s.pstate.as_deref()), (None, Some(40.0), Some("P0")));
    assert_eq!((s.power_draw_w, s.power_limit_w), (Some(59.0), Some(300.0)));
    assert_eq!((s.memory_used_mb, s.memory_total_mb), (Some(38), Some(81920)));
    assert_eq!((s.gpu_util_pct, s.ecc_uncorrected_volatile), (None, None), "N/A util and `On` in the ECC column");
    assert_eq!(g.compute_mode.as_deref(), Some("Default"));
    let m = &t.mig_devices;
    assert_eq!(m.len(), 2);
    assert_eq!(
        (m[0].gi_id, m[0].ci_id, m[0].device, m[0].memory_used_mb, m[0].memory_total_mb),
        (1, 0, 0, Some(19), Some(40192))
    );
    assert_eq!((m[0].bar1_used_mb, m[0].bar1_total_mb, m[0].sm_count), (Some(0), Some(65535), Some(14)));
    // The second compute instance shares GI 1's memory: the cell is empty.
    assert_eq!((m[1].gi_id, m[1].ci_id, m[1].device, m[1].memory_used_mb, m[1].memory_total_mb), (1, 1, 1, None, None));
    assert!(t.processes.is_empty());
    let samples = t.samples();
    assert_eq!(samples[0].mig.len(), 2);
    assert_eq!(samples[0].mig[1].ci_id, Some(1));
}

fn a100_sxm4_40gb_table_mig_only(text: &str) {
    let t = smi::parse_table(text).expect("parses");
    assert!(t.gpus.is_empty() && t.driver_version.is_none());
    let m: Vec<(u32, u32, u32, Option<u64>, Option<u64>, Option<u64>, Option<u32>)> = t
        .mig_devices
        .iter()
        .map(|m| (m.gi_id, m.ci_id, m.device, m.memory_used_mb, m.memory_total_mb, m.bar1_used_mb, m.sm_count))
        .collect();
    assert_eq!(
        m,
        [(1, 0, 0, Some(268), Some(20096), Some(4), Some(42)), (2, 0, 1, Some(268), Some(20096), Some(4), Some(42))]
    );
    let p: Vec<(u32, &GpuProcess, Option<&str>)> =
        t.processes.iter().map(|p| (p.gpu, &p.process, p.kind.as_deref())).collect();
    assert_eq!(p.len(), 2);
    assert_eq!(p[0], (0, &process(6217, "...inux/release/BlackScholes", 253, Some(1), Some(0)), Some("C")));
    assert_eq!(p[1], (0, &process(6223, "...inux/release/BlackScholes", 253, Some(2), Some(0)), Some("C")));
}

fn geforce_table_fan_err(text: &str) {
    let t = smi::parse_table(text).expect("parses");
    assert_eq!((t.driver_version.as_deref(), t.cuda_version.as_deref()), (Some("525.125.06"), Some("12.0")));
    let g = &t.gpus[0];
    assert_eq!((g.name.as_str(), g.name_truncated), ("NVIDIA GeForce", true));
    assert_eq!((g.pci_bus_id.as_deref(), g.display_active, g.mig_mode), (Some("00000000:01:00.0"), Some(false), None));
    assert_eq!(g.compute_mode.as_deref(), Some("E. Process"));
    let s = &g.sample;
    assert_eq!(s.fan_pct, None, "ERR! is missing, not zero");
    assert_eq!(
        (s.temperature_c, s.pstate.as_deref(), s.power_draw_w, s.power_limit_w),
        (Some(38.0), Some("P5"), Some(49.0), Some(450.0))
    );
    assert_eq!(
        (s.memory_used_mb, s.memory_total_mb, s.gpu_util_pct, s.ecc_uncorrected_volatile),
        (Some(2021), Some(23028), Some(0.0), Some(0))
    );
}

fn h100_mig_table(text: &str) -> smi::SmiTable {
    let t = smi::parse_table(text).expect("parses");
    assert_eq!(
        (t.smi_version.as_deref(), t.driver_version.as_deref(), t.cuda_version.as_deref()),
        (Some("590.48.01"), Some("590.48.01"), Some("13.1"))
    );
    let g = &t.gpus[0];
    assert_eq!((g.name.as_str(), g.name_truncated, g.persistence_mode), ("NVIDIA H100 80GB HBM3", false, Some(true)));
    assert_eq!((g.pci_bus_id.as_deref(), g.mig_mode), (Some("00000000:00:09.0"), Some(true)));
    assert_eq!((g.sample.gpu_util_pct, g.sample.fan_pct, g.sample.memory_total_mb), (None, None, Some(81559)));
    let ids: Vec<(u32, u32, u32, Option<u64>, Option<u32>)> =
        t.mig_devices.iter().map(|m| (m.gi_id, m.ci_id, m.device, m.memory_total_mb, m.sm_count)).collect();
    assert_eq!(
        ids,
        [
            (2, 0, 0, Some(40448), Some(60)),
            (3, 0, 1, Some(20096), Some(32)),
            (9, 0, 2, Some(9984), Some(16)),
            (10, 0, 3, Some(9984), Some(16))
        ]
    );
    t
}

fn h100_mig_table_idle(text: &str) {
    let t = h100_mig_table(text);
    let s = &t.gpus[0].sample;
    assert_eq!(
        (s.temperature_c, s.power_draw_w, s.power_limit_w, s.memory_used_mb),
        (Some(42.0), Some(98.0), Some(700.0), Some(59))
    );
    assert_eq!(t.mig_devices.iter().map(|m| m.memory_used_mb).collect::<Vec<_>>(), [26, 17, 9, 9].map(Some));
    assert!(t.processes.is_empty());
}

fn h100_mig_table_load(text: &str) {
    let t = h100_mig_table(text);
    let s = &t.gpus[0].sample;
    assert_eq!((s.temperature_c, s.power_draw_w, s.memory_used_mb), (Some(52.0), Some(432.0), Some(11125)));
    assert_eq!(t.mig_devices[0].memory_used_mb, Some(11091));
    let samples = t.samples();
    assert_eq!(
        samples[0].processes,
        [
            process(21180, "/root/tools/memhog", 2296, Some(2), Some(0)),
            process(21181, "/root/tools/memhog", 1272, Some(2), Some(0)),
            process(21198, "./gpu_burn", 7484, Some(2), Some(0)),
        ]
    );
    assert_eq!(samples[0].mig.len(), 4);
}

fn h100_x8_table(text: &str) {
    let t = smi::parse_table(text).expect("parses");
    assert_eq!((t.driver_version.as_deref(), t.cuda_version.as_deref()), (Some("550.90.07"), Some("12.4")));
    assert_eq!(t.gpus.len(), 8);
    let buses: Vec<&str> = t.gpus.iter().filter_map(|g| g.pci_bus_id.as_deref()).collect();
    assert_eq!(
        buses,
        ["19", "3B", "4C", "5D", "9B", "BB", "CB", "DB"]
            .map(|b| format!("00000000:{b}:00.0"))
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
    );
    let s: Vec<&GpuSample> = t.gpus.iter().map(|g| &g.sample).collect();
    assert_eq!(s.iter().map(|s| s.index).collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
    assert_eq!(
        s.iter().map(|s| s.temperature_c).collect::<Vec<_>>(),
        [27.0, 24.0, 23.0, 23.0, 27.0, 22.0, 24.0, 23.0].map(Some)
    );
    assert_eq!(
        s.iter().map(|s| s.power_draw_w).collect::<Vec<_>>(),
        [72.0, 74.0, 70.0, 72.0, 73.0, 74.0, 73.0, 72.0].map(Some)
    );
    assert!(
        s.iter()
            .all(|s| s.memory_used_mb == Some(1) && s.memory_total_mb == Some(81559) && s.gpu_util_pct == Some(0.0))
    );
    assert!(t.gpus.iter().all(|g| g.mig_mode == Some(false) && g.name == "NVIDIA H100 80GB HBM3"));
    assert!(t.processes.is_empty());
}

fn h100_table_idle(text: &str) {
    let t = smi::parse_table(text).expect("parses");
    let s = &t.gpus[0].sample;
    assert_eq!(
        (s.temperature_c, s.power_draw_w, s.memory_used_mb, s.gpu_util_pct),
        (Some(41.0), Some(69.0), Some(0), Some(0.0))
    );
    assert_eq!((s.ecc_uncorrected_volatile, t.gpus[0].mig_mode), (Some(0), Some(false)));
    assert!(t.processes.is_empty() && t.mig_devices.is_empty());
}

fn h100_table_load(text: &str) {
    let t = smi::parse_table(text).expect("parses");
    let s = &t.samples()[0];
    assert_eq!(
        (s.temperature_c, s.power_draw_w, s.memory_used_mb, s.gpu_util_pct),
        (Some(59.0), Some(629.0), Some(19818), Some(100.0))
    );
    assert_eq!(
        s.processes,
        [
            process(11327, "/root/tools/memhog", 2566, None, None),
            process(11328, "/root/tools/memhog", 1542, None, None),
            process(11345, "./gpu_burn", 15690, None, None),
        ]
    );
}

// ---- -q -x ----

fn a100_sxm4_40gb_xml_v11(text: &str) {
    let r = smi::parse_xml(text).expect("parses");
    assert_eq!(
        (r.driver_version.as_deref(), r.cuda_version.as_deref(), r.attached_gpus),
        (Some("510.47.03"), Some("11.6"), Some(1))
    );
    let g = &r.gpus[0];
    assert_eq!(
        (g.name.as_deref(), g.pci_bus_id.as_deref(), g.mig_mode),
        (Some("NVIDIA A100-SXM4-40GB"), Some("00000000:00:04.0"), Some(true))
    );
    let s = &g.sample;
    assert_eq!(s.uuid, "GPU-27b94a00-ed54-5c24-b1fd-1054085de32a");
    assert_eq!((s.gpu_util_pct, s.mem_util_pct, s.fan_pct), (None, None, None), "N/A with MIG on");
    assert_eq!(
        (s.memory_total_mb, s.memory_reserved_mb, s.memory_used_mb, s.memory_free_mb),
        (Some(40960), Some(605), Some(38), Some(40315))
    );
    assert_eq!((s.temperature_c, s.memory_temperature_c), (Some(36.0), Some(44.0)));
    assert_eq!((s.power_draw_w, s.power_limit_w), (Some(66.92), Some(400.0)), "<power_readings> of DTD v11");
    assert_eq!((s.sm_clock_mhz, s.mem_clock_mhz, s.pstate.as_deref()), (Some(1410), Some(1215), Some("P0")));
    assert_eq!((s.ecc_corrected_volatile, s.ecc_uncorrected_volatile), (None, None), "volatile counters all N/A");
    assert_eq!(s.throttle_reasons, Some(vec![]), "all Not Active, one with a line break before its end tag");
    assert!(s.processes.is_empty());
    let m: Vec<(u32, u32, Option<u32>, Option<u32>, Option<u64>, Option<u64>)> = g
        .mig_devices
        .iter()
        .map(|m| (m.index, m.gi_id, m.ci_id, m.sm_count, m.memory_total_mb, m.memory_used_mb))
        .collect();
    assert_eq!(m, [(0, 1, Some(0), Some(42), Some(19968), Some(19)), (1, 2, Some(0), Some(42), Some(19968), Some(19))]);
    assert_eq!(s.mig.iter().map(|m| m.gi_id).collect::<Vec<_>>(), [1, 2]);
}

fn a100_sxm4_80gb_xml_v12(text: &str) {
    let r = smi::parse_xml(text).expect("parses");
    assert_eq!((r.driver_version.as_deref(), r.attached_gpus, r.gpus.len()), (Some("535.54.03"), Some(4), 1));
    let g = &r.gpus[0];
    let s = &g.sample;
    assert_eq!(
        (g.name.as_deref(), s.uuid.as_str()),
        (Some("NVIDIA A100-SXM4-80GB"), "GPU-513536b6-7d19-9063-b049-1e69664bb298")
    );
    assert_eq!((s.power_draw_w, s.power_limit_w), (Some(67.03), Some(500.0)), "<gpu_power_readings> of DTD v12");
    assert_eq!(
        (s.memory_total_mb, s.memory_reserved_mb, s.memory_used_mb, s.memory_free_mb),
        (Some(81920), Some(869), Some(50), Some(80999))
    );
    assert_eq!(
        (s.temperature_c, s.memory_temperature_c, s.sm_clock_mhz, s.mem_clock_mhz),
        (Some(27.0), Some(44.0), Some(1275), Some(1593))
    );
    assert_eq!((s.ecc_corrected_volatile, s.ecc_uncorrected_volatile), (Some(0), Some(0)));
    assert_eq!((s.gpu_util_pct, s.throttle_reasons.as_deref()), (None, Some(&[][..])));
    assert_eq!(g.mig_devices.iter().map(|m| m.gi_id).collect::<Vec<_>>(), [3, 4, 5, 6]);
    assert!(
        g.mig_devices
            .iter()
            .all(|m| m.sm_count == Some(14) && m.memory_total_mb == Some(19968) && m.memory_used_mb == Some(12))
    );
    assert!(s.processes.is_empty());
}

fn a10g_xml(text: &str) {
    let r = smi::parse_xml(text).expect("parses");
    let g = &r.gpus[0];
    let s = &g.sample;
    assert_eq!(
        (g.name.as_deref(), s.uuid.as_str(), g.mig_mode),
        (Some("NVIDIA A10G"), "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94", None)
    );
    assert!(g.mig_devices.is_empty());
    assert_eq!(
        (s.fan_pct, s.pstate.as_deref(), s.throttle_reasons.clone()),
        (Some(0.0), Some("P8"), Some(strings(&["idle"])))
    );
    assert_eq!(
        (s.memory_total_mb, s.memory_reserved_mb, s.memory_used_mb, s.memory_free_mb),
        (Some(23028), Some(435), Some(22), Some(22569))
    );
    assert_eq!(
        (s.gpu_util_pct, s.mem_util_pct, s.temperature_c, s.memory_temperature_c),
        (Some(0.0), Some(0.0), Some(17.0), None)
    );
    assert_eq!(
        (s.power_draw_w, s.power_limit_w, s.sm_clock_mhz, s.mem_clock_mhz),
        (Some(25.58), Some(300.0), Some(210), Some(405))
    );
    assert_eq!(s.processes, [process(725, "/usr/lib/xorg/Xorg", 22, None, None)]);
}

fn t4_xml(text: &str) {
    let r = smi::parse_xml(text).expect("parses");
    let g = &r.gpus[0];
    let s = &g.sample;
    assert_eq!((g.name.as_deref(), s.uuid.as_str()), (Some("Tesla T4"), "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"));
    assert_eq!(
        (g.mig_mode, g.mig_devices.len(), g.pci_bus_id.as_deref()),
        (None, 0, Some("00000000:00:1E.0")),
        "<mig_devices> holds bare `None`"
    );
    assert_eq!(
        (s.memory_total_mb, s.memory_reserved_mb, s.memory_used_mb, s.memory_free_mb),
        (Some(15360), Some(388), Some(1032), Some(13939))
    );
    assert_eq!((s.temperature_c, s.power_draw_w, s.power_limit_w), (Some(40.0), Some(26.78), Some(70.0)));
    assert_eq!(
        (s.sm_clock_mhz, s.mem_clock_mhz, s.fan_pct, s.throttle_reasons.as_deref()),
        (Some(585), Some(5000), None, Some(&[][..]))
    );
    assert_eq!(
        s.processes,
        [process(675, "/usr/lib/xorg/Xorg", 22, None, None), process(5762, "python", 1005, None, None)]
    );
}

fn p100_xml(text: &str) {
    let r = smi::parse_xml(text).expect("parses");
    let g = &r.gpus[0];
    let s = &g.sample;
    assert_eq!(
        (g.name.as_deref(), s.uuid.as_str()),
        (Some("Tesla P100-PCIE-16GB"), "GPU-d3da8716-eaab-75db-efc1-60e88e1cd55e")
    );
    // Pre-Ampere layout; the 3 single-bit errors are aggregate, not volatile.
    assert_eq!((s.ecc_corrected_volatile, s.ecc_uncorrected_volatile), (Some(0), Some(0)));
    assert_eq!(
        (s.memory_total_mb, s.memory_reserved_mb, s.memory_used_mb, s.memory_free_mb),
        (Some(16384), Some(103), Some(0), Some(16280))
    );
    assert_eq!((s.temperature_c, s.power_draw_w, s.power_limit_w), (Some(38.0), Some(26.16), Some(250.0)));
    assert_eq!(
        (s.sm_clock_mhz, s.mem_clock_mhz, s.pstate.as_deref(), s.fan_pct),
        (Some(405), Some(715), Some("P0"), None)
    );
    assert_eq!(s.throttle_reasons, Some(strings(&["idle"])));
    assert!(s.processes.is_empty() && g.mig_mode.is_none());
}

// ---- -q ----

fn a10_text(text: &str) {
    let r = smi::parse_text(text).expect("parses");
    assert_eq!(
        (r.driver_version.as_deref(), r.cuda_version.as_deref(), r.attached_gpus),
        (Some("535.129.03"), Some("12.2"), Some(1))
    );
    let g = &r.gpus[0];
    let s = &g.sample;
    assert_eq!(
        (g.name.as_deref(), g.serial.as_deref(), g.pci_bus_id.as_deref()),
        (Some("NVIDIA A10"), Some("1324521052681"), Some("00000000:07:00.0"))
    );
    assert_eq!((s.uuid.as_str(), g.mig_mode), ("GPU-73d12ef7-f589-f867-4259-c7090ab44736", None));
    assert_eq!(
        (s.fan_pct, s.pstate.as_deref(), s.throttle_reasons.clone()),
        (Some(0.0), Some("P8"), Some(strings(&["idle"])))
    );
    assert_eq!(
        (s.memory_total_mb, s.memory_reserved_mb, s.memory_used_mb, s.memory_free_mb),
        (Some(23028), Some(512), Some(4), Some(22511))
    );
    assert_eq!(
        (s.gpu_util_pct, s.mem_util_pct, s.ecc_corrected_volatile, s.ecc_uncorrected_volatile),
        (Some(0.0), Some(0.0), Some(0), Some(0))
    );
    assert_eq!((s.temperature_c, s.memory_temperature_c), (Some(33.0), None));
    assert_eq!(
        (s.power_draw_w, s.power_limit_w, s.sm_clock_mhz, s.mem_clock_mhz),
        (Some(43.89), Some(150.0), Some(225), Some(405))
    );
    assert!(s.processes.is_empty());
}

fn h100_mig_text(text: &str) -> smi::ReportGpu {
    let r = smi::parse_text(text).expect("parses");
    assert_eq!(
        (r.driver_version.as_deref(), r.cuda_version.as_deref(), r.gpus.len()),
        (Some("590.48.01"), Some("13.1"), 1)
    );
    let g = r.gpus[0].clone();
    assert_eq!(
        (g.sample.uuid.as_str(), g.mig_mode, g.pci_bus_id.as_deref()),
        (H100_UUID, Some(true), Some("00000000:00:09.0"))
    );
    assert_eq!((g.sample.gpu_util_pct, g.sample.mem_util_pct, g.sample.fan_pct), (None, None, None), "N/A with MIG on");
    let m: Vec<(u32, u32, Option<u32>, Option<u32>, Option<u64>)> =
        g.mig_devices.iter().map(|m| (m.index, m.gi_id, m.ci_id, m.sm_count, m.memory_total_mb)).collect();
    assert_eq!(
        m,
        [
            (0, 2, Some(0), Some(60), Some(40448)),
            (1, 3, Some(0), Some(32), Some(20096)),
            (2, 9, Some(0), Some(16), Some(9984)),
            (3, 10, Some(0), Some(16), Some(9984))
        ]
    );
    g
}

fn h100_mig_text_idle(text: &str) {
    let g = h100_mig_text(text);
    let s = &g.sample;
    assert_eq!(
        (s.temperature_c, s.memory_temperature_c, s.power_draw_w, s.sm_clock_mhz),
        (Some(42.0), Some(48.0), Some(71.27), Some(345))
    );
    assert_eq!(
        (s.memory_used_mb, s.memory_free_mb, s.throttle_reasons.clone()),
        (Some(59), Some(81022), Some(strings(&["idle"])))
    );
    assert_eq!(g.mig_devices.iter().map(|m| m.memory_used_mb).collect::<Vec<_>>(), [26, 17, 9, 9].map(Some));
    assert!(s.processes.is_empty(), "Processes : None");
}

fn h100_mig_text_load(text: &str) {
    let g = h100_mig_text(text);
    let s = &g.sample;
    assert_eq!(
        (s.memory_total_mb, s.memory_reserved_mb, s.memory_used_mb, s.memory_free_mb),
        (Some(81559), Some(479), Some(11125), Some(69956))
    );
    assert_eq!((s.temperature_c, s.memory_temperature_c), (Some(53.0), Some(58.0)));
    assert_eq!(
        (s.power_draw_w, s.power_limit_w),
        (Some(432.21), Some(700.0)),
        "Average Power Draw of the GPU, not of its memory"
    );
    assert_eq!((s.sm_clock_mhz, s.mem_clock_mhz, s.pstate.as_deref()), (Some(1980), Some(2619), Some("P0")));
    assert_eq!(
        (s.ecc_corrected_volatile, s.ecc_uncorrected_volatile, s.throttle_reasons.as_deref()),
        (Some(0), Some(0), Some(&[][..]))
    );
    assert_eq!(g.mig_devices[0].memory_used_mb, Some(11091));
    assert_eq!(g.mig_devices[0].memory_free_mb, Some(29357));
    assert_eq!(
        s.processes,
        [
            process(21180, "/root/tools/memhog", 2296, Some(2), Some(0)),
            process(21181, "/root/tools/memhog", 1272, Some(2), Some(0)),
            process(21198, "./gpu_burn", 7484, Some(2), Some(0)),
        ]
    );
    assert_eq!(
        s.mig.iter().map(|m| (m.gi_id, m.memory_used_mb)).collect::<Vec<_>>(),
        [(2, Some(11091)), (3, Some(17)), (9, Some(9)), (10, Some(9))]
    );
}

fn h100_text(text: &str) -> GpuSample {
    let r = smi::parse_text(text).expect("parses");
    let g = &r.gpus[0];
    assert_eq!((g.mig_mode, g.mig_devices.len(), g.sample.uuid.as_str()), (Some(false), 0, H100_UUID));
    assert_eq!(
        (g.sample.memory_total_mb, g.sample.memory_reserved_mb, g.sample.fan_pct),
        (Some(81559), Some(479), None)
    );
    g.sample.clone()
}

fn h100_text_idle(text: &str) {
    let s = h100_text(text);
    assert_eq!(
        (s.gpu_util_pct, s.memory_used_mb, s.temperature_c, s.memory_temperature_c),
        (Some(0.0), Some(0), Some(41.0), Some(48.0))
    );
    assert_eq!(
        (s.power_draw_w, s.sm_clock_mhz, s.throttle_reasons),
        (Some(69.85), Some(345), Some(strings(&["idle"])))
    );
    assert!(s.processes.is_empty());
}

fn h100_text_load(text: &str) {
    let s = h100_text(text);
    assert_eq!(
        (s.gpu_util_pct, s.mem_util_pct, s.memory_used_mb, s.memory_free_mb),
        (Some(100.0), Some(11.0), Some(19818), Some(61263))
    );
    assert_eq!(
        (s.temperature_c, s.memory_temperature_c, s.power_draw_w, s.sm_clock_mhz),
        (Some(59.0), Some(55.0), Some(629.45), Some(1980))
    );
    assert_eq!(s.throttle_reasons, Some(vec![]));
    assert_eq!(
        s.processes,
        [
            process(11327, "/root/tools/memhog", 2566, None, None),
            process(11328, "/root/tools/memhog", 1542, None, None),
            process(11345, "./gpu_burn", 15690, None, None),
        ]
    );
}

fn h100_x8_text(text: &str) {
    let r = smi::parse_text(text).expect("parses");
    assert_eq!((r.driver_version.as_deref(), r.attached_gpus, r.gpus.len()), (Some("535.161.08"), Some(8), 8));
    let uuids: Vec<&str> = r.gpus.iter().map(|g| g.sample.uuid.as_str()).collect();
    assert_eq!(
        uuids,
        [
            "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa",
            "GPU-47daa2ad-a218-6286-252b-af45f0dfaf00",
            "GPU-167d8376-ee13-fca4-938a-a05167c43cdc",
            "GPU-afe9f2ed-9dd0-572c-3cd8-b42b58b3bc99",
            "GPU-2b6f61f9-8b00-3b57-d912-b62792120662",
            "GPU-980ea11b-91dc-db7b-72ac-0685abc43658",
            "GPU-4ef109e9-e925-4834-2b85-0771b4ef696c",
            "GPU-b0fe4996-1f7c-91f6-0ccd-08ae3b7e23c5",
        ]
    );
    let s: Vec<&GpuSample> = r.gpus.iter().map(|g| &g.sample).collect();
    assert_eq!(s.iter().map(|s| s.index).collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
    assert_eq!(
        s.iter().map(|s| s.temperature_c).collect::<Vec<_>>(),
        [29.0, 29.0, 30.0, 30.0, 31.0, 32.0, 32.0, 31.0].map(Some)
    );
    assert_eq!(
        s.iter().map(|s| s.power_draw_w).collect::<Vec<_>>(),
        [67.74, 69.52, 70.55, 71.37, 70.33, 70.21, 71.05, 72.27].map(Some)
    );
    assert_eq!(
        (s[0].memory_reserved_mb, s[0].sm_clock_mhz, s[0].memory_temperature_c),
        (Some(551), Some(86), Some(39.0))
    );
    // HW Power Brake Slowdown (nested under HW Slowdown) is active on all eight.
    assert!(s.iter().all(|s| s.throttle_reasons == Some(strings(&["hw_slowdown", "hw_power_brake_slowdown"]))));
    assert!(s.iter().all(|s| s.ecc_corrected_volatile == Some(0) && s.ecc_uncorrected_volatile == Some(0)));
    assert_eq!(r.gpus[1].pci_bus_id.as_deref(), Some("00000000:3B:00.0"));
    assert!(r.gpus.iter().all(|g| g.mig_mode == Some(false) && g.sample.processes.is_empty()));
}

// ---- --query-gpu ----

fn h100_mig_common_idle(text: &str) {
    let rows = smi::parse_query_gpu(text, None).expect("parses");
    let r = &rows[0];
    assert_eq!(
        (r.timestamp.as_deref(), r.name.as_deref(), r.pci_bus_id.as_deref()),
        (Some("2026/07/14 09:00:27.792"), Some("NVIDIA H100 80GB HBM3"), Some("00000000:00:09.0"))
    );
    assert_eq!((r.mig_mode, r.max_sm_clock_mhz), (Some(true), Some(1980)));
    let s = &r.sample;
    assert_eq!((s.index, s.uuid.as_str(), s.pstate.as_deref()), (0, H100_UUID, Some("P0")));
    assert_eq!((s.gpu_util_pct, s.mem_util_pct), (None, None), "[N/A] with MIG on, not zero");
    assert_eq!((s.temperature_c, s.memory_temperature_c), (Some(42.0), Some(48.0)));
    assert_eq!(
        (s.memory_total_mb, s.memory_reserved_mb, s.memory_used_mb, s.memory_free_mb),
        (Some(81559), Some(479), Some(59), Some(81022))
    );
    assert_eq!(
        (s.power_draw_w, s.power_limit_w, s.sm_clock_mhz, s.mem_clock_mhz),
        (Some(71.15), Some(700.0), Some(345), Some(2619))
    );
    assert_eq!((s.ecc_corrected_volatile, s.ecc_uncorrected_volatile), (Some(0), Some(0)));
    assert_eq!(s.throttle_reasons, Some(strings(&["idle"])));
    let info = r.to_info().expect("inventory");
    assert_eq!((info.model.as_str(), info.memory_mb, info.mig.as_deref()), ("H100-80GB", 81559, Some(&[][..])));
}

fn h100_mig_common_load(text: &str) {
    let s = sample_of(text);
    assert_eq!(
        (s.temperature_c, s.memory_temperature_c, s.memory_used_mb, s.memory_free_mb),
        (Some(53.0), Some(59.0), Some(11125), Some(69956))
    );
    assert_eq!((s.power_draw_w, s.sm_clock_mhz, s.gpu_util_pct), (Some(433.78), Some(1980), None));
    assert_eq!(s.throttle_reasons, Some(vec![]));
}

fn h100_common_idle(text: &str) {
    let rows = smi::parse_query_gpu(text, None).expect("parses");
    let s = &rows[0].sample;
    assert_eq!(
        (s.gpu_util_pct, s.mem_util_pct, s.memory_used_mb, s.memory_free_mb),
        (Some(0.0), Some(0.0), Some(0), Some(81081))
    );
    assert_eq!(
        (s.power_draw_w, s.sm_clock_mhz, s.temperature_c, s.memory_temperature_c),
        (Some(69.85), Some(345), Some(41.0), Some(48.0))
    );
    assert_eq!(s.throttle_reasons, Some(strings(&["idle"])));
    assert_eq!(rows[0].mig_mode, Some(false));
    assert_eq!(rows[0].to_info().expect("inventory").mig, None);
}

fn h100_common_load(text: &str) {
    let s = sample_of(text);
    assert_eq!(
        (s.gpu_util_pct, s.mem_util_pct, s.memory_used_mb, s.memory_free_mb),
        (Some(100.0), Some(11.0), Some(19818), Some(61263))
    );
    assert_eq!(
        (s.power_draw_w, s.sm_clock_mhz, s.temperature_c, s.memory_temperature_c),
        (Some(631.95), Some(1980), Some(59.0), Some(54.0))
    );
    assert_eq!(s.throttle_reasons, Some(vec![]));
}

/// The 212-column file: the same sample as its 28-column projection, and
/// the other columns readable by name with missing values absent.
fn wide(text: &str, common: &str) -> smi::CsvTable {
    let t = smi::CsvTable::parse(text, Query::Gpu, None).expect("parses");
    assert_eq!(t.columns.len(), 212);
    assert_eq!(t.rows.len(), 1);
    let row = &t.rows[0];
    assert_eq!(t.get(row, "vbios_version"), Some("96.00.A5.00.01"));
    assert_eq!(t.get(row, "pci.device_id"), Some("0x233010DE"));
    assert_eq!(t.get(row, "display_mode"), None, "[Requested functionality has been deprecated]");
    assert_eq!(t.raw(row, "display_mode"), Some("[Requested functionality has been deprecated]"));
    assert_eq!(t.get(row, "fan.speed"), None);
    assert_eq!(t.get(row, "gpu_uuid"), Some(H100_UUID), "aliases resolve");
    assert_eq!(t.unit("memory.used"), Some("MiB"));
    assert_eq!(t.get(row, "clocks_throttle_reasons.supported"), Some("0x00000000000001FF"), "old name, new header");
    let wide = sample_of(text);
    assert_eq!(wide, sample_of(&read(common)), "the projection has the same values");
    assert_eq!(wide.fan_pct, None);
    t
}

fn h100_mig_wide_idle(text: &str) {
    let t = wide(text, "h100-80gb-hbm3-mig_query-gpu-common_idle.csv");
    assert_eq!(t.get(&t.rows[0], "clocks_event_reasons.gpu_idle"), Some("Active"));
    assert_eq!(t.get(&t.rows[0], "remapped_rows.pending"), None);
}

fn h100_mig_wide_load(text: &str) {
    let t = wide(text, "h100-80gb-hbm3-mig_query-gpu-common_load.csv");
    assert_eq!(t.get(&t.rows[0], "utilization.encoder"), None);
}

fn h100_wide_idle(text: &str) {
    let t = wide(text, "h100-80gb-hbm3_query-gpu-common_idle.csv");
    assert_eq!(t.get(&t.rows[0], "mig.mode.current"), Some("Disabled"));
}

fn h100_wide_load(text: &str) {
    let t = wide(text, "h100-80gb-hbm3_query-gpu-common_load.csv");
    assert_eq!(t.get(&t.rows[0], "power.draw.instant"), Some("625.68 W"));
    assert_eq!(t.get(&t.rows[0], "remapped_rows.pending"), Some("No"));
}

fn timeseries(text: &str, util: &[f64], mem_util: &[f64], first: &str) {
    let rows = smi::parse_query_gpu(text, None).expect("parses");
    assert_eq!(rows.len(), util.len());
    assert_eq!(rows[0].timestamp.as_deref(), Some(first));
    assert_eq!(rows.iter().map(|r| r.sample.gpu_util_pct.unwrap_or(-1.0)).collect::<Vec<_>>(), util);
    assert_eq!(rows.iter().map(|r| r.sample.mem_util_pct.unwrap_or(-1.0)).collect::<Vec<_>>(), mem_util);
    for r in &rows {
        let s = &r.sample;
        assert_eq!(
            (s.index, s.memory_total_mb, s.memory_used_mb, s.memory_free_mb),
            (0, Some(32480), Some(30994), Some(1486))
        );
        assert_eq!(
            (s.uuid.as_str(), s.power_draw_w, s.temperature_c, s.throttle_reasons.as_ref()),
            ("", None, None, None)
        );
    }
    // Same data without a header: the field list asked for stands in for it.
    let fields =
        ["index", "timestamp", "utilization.gpu", "utilization.memory", "memory.total", "memory.used", "memory.free"];
    let body: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
    let headless = smi::parse_query_gpu(&body, Some(&fields)).expect("noheader");
    assert_eq!(
        headless.iter().map(|r| &r.sample).collect::<Vec<_>>(),
        rows.iter().map(|r| &r.sample).collect::<Vec<_>>()
    );
}

fn v100_timeseries_a(text: &str) {
    timeseries(
        text,
        &[99.0, 99.0, 99.0, 98.0, 100.0, 32.0, 98.0, 100.0, 99.0, 100.0, 99.0, 97.0, 35.0, 98.0, 100.0, 98.0, 98.0],
        &[52.0, 90.0, 51.0, 61.0, 88.0, 33.0, 70.0, 91.0, 48.0, 91.0, 38.0, 63.0, 36.0, 72.0, 88.0, 68.0, 68.0],
        "2020/11/12 13:48:11.412",
    );
}

fn v100_timeseries_b(text: &str) {
    timeseries(
        text,
        &[98.0, 0.0, 48.0, 99.0, 72.0, 100.0, 99.0, 99.0, 99.0, 11.0],
        &[66.0, 0.0, 42.0, 72.0, 57.0, 68.0, 66.0, 66.0, 68.0, 7.0],
        "2020/11/12 14:02:14.854",
    );
}

// ---- --query-compute-apps ----

fn apps(text: &str) -> Vec<smi::ComputeApp> {
    let apps = smi::parse_compute_apps(text, None).expect("parses");
    assert!(
        apps.iter()
            .all(|a| a.gpu_uuid.as_deref() == Some(H100_UUID) && a.gpu_bus_id.as_deref() == Some("00000000:00:09.0"))
    );
    apps
}

fn h100_mig_apps(text: &str) {
    let p: Vec<GpuProcess> = apps(text).into_iter().map(|a| a.process).collect();
    assert_eq!(
        p,
        [
            process(21180, "/root/tools/memhog", 2296, None, None),
            process(21181, "/root/tools/memhog", 1272, None, None),
            process(21198, "./gpu_burn", 7484, None, None),
        ]
    );
}

fn h100_apps(text: &str) {
    let p: Vec<GpuProcess> = apps(text).into_iter().map(|a| a.process).collect();
    assert_eq!(
        p,
        [
            process(11327, "/root/tools/memhog", 2566, None, None),
            process(11328, "/root/tools/memhog", 1542, None, None),
            process(11345, "./gpu_burn", 15690, None, None),
        ]
    );
}

// ---- dmon / pmon ----

fn h100_dmon(text: &str) {
    let rows = smi::parse_dmon(text).expect("parses");
    assert_eq!(rows.len(), 5);
    assert_eq!(rows.iter().map(|r| r.get("pwr")).collect::<Vec<_>>(), ["631", "634", "633", "634", "636"].map(Some));
    let s = rows[0].to_sample();
    assert_eq!(
        (s.index, s.power_draw_w, s.temperature_c, s.memory_temperature_c),
        (0, Some(631.0), Some(63.0), Some(57.0))
    );
    assert_eq!(
        (s.gpu_util_pct, s.mem_util_pct, s.mem_clock_mhz, s.sm_clock_mhz),
        (Some(100.0), Some(10.0), Some(2619), Some(1980))
    );
    assert_eq!(rows[0].get("enc"), Some("0"));
}

fn h100_mig_dmon(text: &str) {
    let rows = smi::parse_dmon(text).expect("parses");
    assert_eq!(rows.len(), 5);
    let s = rows[0].to_sample();
    assert_eq!(
        (s.power_draw_w, s.temperature_c, s.memory_temperature_c, s.mem_clock_mhz),
        (Some(438.0), Some(55.0), Some(61.0), Some(2619))
    );
    assert_eq!((s.gpu_util_pct, s.mem_util_pct), (None, None), "`-` with MIG on");
    assert_eq!(
        rows.iter().map(|r| r.to_sample().memory_temperature_c).collect::<Vec<_>>(),
        [61.0, 60.0, 60.0, 60.0, 62.0].map(Some)
    );
}

fn h100_pmon(text: &str) {
    let rows = smi::parse_pmon(text).expect("parses");
    assert_eq!(rows.len(), 15);
    let burn: Vec<&smi::PmonRow> = rows.iter().filter(|r| r.pid == 11345).collect();
    assert_eq!(burn.len(), 5);
    assert!(
        burn.iter()
            .all(|r| r.sm_pct == Some(99.0) && r.mem_pct == Some(10.0) && r.command.as_deref() == Some("gpu_burn"))
    );
    let hog = &rows[0];
    assert_eq!(
        (hog.gpu, hog.pid, hog.kind.as_deref(), hog.sm_pct, hog.command.as_deref()),
        (0, 11327, Some("C"), None, Some("memhog"))
    );
}

fn h100_mig_pmon(text: &str) {
    let rows = smi::parse_pmon(text).expect("parses");
    assert_eq!(rows.len(), 15);
    assert_eq!(rows.iter().map(|r| r.pid).collect::<BTreeSet<_>>(), [21180, 21181, 21198].into());
    assert!(rows.iter().all(|r| r.sm_pct.is_none() && r.mem_pct.is_none()), "`-` with MIG on");
    assert_eq!(rows[2].command.as_deref(), Some("gpu_burn"));
}

// ---- --version, --help-query-gpu, slurmd -G ----

fn version_590(text: &str) {
    let v = smi::parse_version(text).expect("parses");
    assert_eq!(
        v,
        smi::SmiVersion {
            smi: Some("590.48.01".into()),
            nvml: Some("590.48".into()),
            driver: Some("590.48.01".into()),
            cuda: Some("13.1".into()),
        }
    );
}

fn h100_help_query_gpu(text: &str) {
    let fields = smi::parse_help_query(text).expect("parses");
    assert_eq!(fields.len(), 212);
    assert_eq!(fields[0].name, "timestamp");
    let find = |n: &str| fields.iter().find(|f| f.name == n).unwrap_or_else(|| panic!("{n} documented"));
    assert_eq!(find("name").aliases, ["gpu_name"]);
    assert_eq!(find("clocks_event_reasons.active").aliases, ["clocks_throttle_reasons.active"]);
    assert_eq!(find("clocks.current.sm").aliases, ["clocks.sm"]);
    assert!(find("power.management").description.contains("[Not Supported]"));
    assert!(find("compute_mode").description.contains("Default"));
    // What the help documents is what the 212-column file has, in the same order.
    let header = smi::CsvTable::parse(&read("h100-80gb-hbm3_query-gpu_idle.csv"), Query::Gpu, None).expect("parses");
    let documented: Vec<String> = fields.iter().map(|f| smi::csv::canonical(&f.name, Query::Gpu)).collect();
    let columns: Vec<String> = header.columns.iter().map(|c| c.field.clone()).collect();
    assert_eq!(documented, columns);
    // Every field the backend asks for is documented, and every alias we resolve is a real one.
    let known: BTreeSet<String> = fields
        .iter()
        .flat_map(|f| std::iter::once(&f.name).chain(&f.aliases))
        .map(|n| n.to_ascii_lowercase())
        .collect();
    for f in smi::SAMPLE_FIELDS.iter().chain(smi::INVENTORY_FIELDS) {
        assert!(known.contains(*f), "{f} is not a --query-gpu field");
    }
    for (alias, name) in smi::csv::GPU_ALIASES {
        let f = find(name);
        assert!(f.aliases.iter().any(|a| a == alias), "{alias} is not documented as an alias of {name}");
    }
}

fn h100_slurmd_gres(text: &str) {
    let g = smi::parse_gres(text).expect("parses");
    assert_eq!(g.len(), 10);
    assert!(g.iter().all(|g| g.node.as_deref() == Some("slurmd-io-io-gpu-02") && g.name == "gpu" && g.count == 1));
    assert_eq!(
        (g[0].kind.as_deref(), g[0].file.as_deref(), g[0].index),
        (Some("nvidia_h100_80gb_hbm3"), Some("/dev/nvidia0"), Some(0))
    );
    assert_eq!((g[0].mig_profile(), g[0].links.as_deref()), (None, None));
    assert_eq!(
        (g[2].mig_profile(), g[2].file.as_deref(), g[2].index),
        (Some("4g.40gb"), Some("/dev/nvidia-caps/nvidia-cap291"), Some(291))
    );
    let profiles: Vec<Option<&str>> = g.iter().map(|g| g.mig_profile()).collect();
    assert_eq!(profiles.iter().filter(|p| **p == Some("1g.10gb")).count(), 6);
    assert!(g[0].flags.iter().any(|f| f == "HAS_FILE") && g[0].flags.len() == 7);
}
