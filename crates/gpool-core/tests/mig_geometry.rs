//! The MIG tables (`mig_geometry.rs`) against what real GPUs report:
//! `nvidia-smi mig -lgipp` of an A100-SXM4-40GB and `-lgip` of an
//! H100-SXM5-80GB, as recorded in `data/nvidia-smi` (sources in its README).

use gpool_core::mig_geometry::geometry;

/// `nvidia-smi mig -lgipp` as recorded: `GPU 0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1`.
fn placements(text: &str) -> Vec<(u8, Vec<u8>, u8)> {
    text.lines()
        .filter_map(|l| {
            let id = l.split("Profile ID").nth(1)?.split_whitespace().next()?.parse().ok()?;
            let (set, size) = l.split('{').nth(1)?.split_once("}:")?;
            let starts = set.split(',').filter_map(|s| s.trim().parse().ok()).collect();
            Some((id, starts, size.trim().parse().ok()?))
        })
        .collect()
}

#[test]
fn the_a100_tables_are_what_a_real_a100_reports() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/nvidia-smi");
    let text = std::fs::read_to_string(dir.join("a100-sxm4-40gb_mig-lgipp.txt")).expect("recording");
    let real = placements(&text);
    assert_eq!(real.len(), 7, "{text}");
    let g = geometry("A100-40GB").expect("known");
    for (id, starts, size) in real {
        let s = g.shapes.iter().find(|s| s.id == id).unwrap_or_else(|| panic!("profile id {id}"));
        assert_eq!((s.starts, s.slices), (starts.as_slice(), size), "{}", s.name);
    }
}

#[test]
fn the_h100_profiles_are_what_a_real_h100_lists() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/nvidia-smi");
    let text = std::fs::read_to_string(dir.join("h100-sxm5-80gb-x4_mig-lgip_driver-unknown.txt")).expect("rec");
    let g = geometry("h100-80gb").expect("case-insensitive");
    for line in text.lines().filter(|l| l.contains(" MIG ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (name, id, total) = (f[3], f[4].parse::<u8>().expect("id"), f[5].split('/').nth(1).expect("total"));
        let s = g.shapes.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(s.id, id, "{name}");
        let max_instances = if name.ends_with("+me") { 1 } else { s.starts.len() };
        assert_eq!(max_instances.to_string(), total, "{name}: instances per GPU");
    }
}
