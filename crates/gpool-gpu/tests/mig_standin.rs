//! `NvidiaSmi::apply_mig_layout` against a stand-in `nvidia-smi` that keeps
//! an A100-40GB's MIG state between calls and refuses what the driver
//! refuses: placements its profile may not take, overlapping instances,
//! destroying instances in use. Placement rules come from
//! `gpool_core::mig_geometry`, itself checked against recorded `nvidia-smi`
//! output.
//!
//! The test binary is its own stand-in (`harness = false`): run through a
//! link named `nvidia-smi`, it answers as one, with its state in a file next
//! to the link.
#![cfg(unix)]

use std::path::{Path, PathBuf};

use gpool_gpu::smi::NvidiaSmi;
use gpool_gpu::{Backend, MigSlot};

const MODEL: &str = "A100-40GB";
const GPU_UUID: &str = "GPU-e86cb44c-6756-fd30-cd4a-1e6da3caf9b0";

/// One GPU instance: (gi id, profile, start); each has a compute instance unless `ci` is false.
#[derive(Clone, Debug, PartialEq)]
struct Gi {
    id: u32,
    profile: String,
    start: u32,
    ci: bool,
}

fn state_path(dir: &Path) -> PathBuf {
    dir.join("state")
}

fn load(dir: &Path) -> Vec<Gi> {
    std::fs::read_to_string(state_path(dir))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(Gi {
                id: f.first()?.parse().ok()?,
                profile: f.get(1)?.to_string(),
                start: f.get(2)?.parse().ok()?,
                ci: *f.get(3)? == "ci",
            })
        })
        .collect()
}

fn save(dir: &Path, gis: &[Gi]) {
    let text: String =
        gis.iter().map(|g| format!("{} {} {} {}\n", g.id, g.profile, g.start, if g.ci { "ci" } else { "-" })).collect();
    std::fs::write(state_path(dir), text).expect("state");
}

/// The stand-in: prints what nvidia-smi would and returns its exit code.
fn standin(dir: &Path, args: &[String]) -> i32 {
    let mut log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    log.push_str(&args.join(" "));
    log.push('\n');
    std::fs::write(dir.join("log"), log).expect("log");
    let geo = gpool_core::mig_geometry::geometry(MODEL).expect("geometry");
    let size = |p: &str| geo.shapes.iter().find(|s| s.name == p).map_or(0, |s| u32::from(s.slices));
    let mut gis = load(dir);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let busy = dir.join("busy").exists();
    match a.as_slice() {
        ["--query-gpu=index,uuid,name,memory.total,pci.bus_id,mig.mode.current", "--format=csv"] => {
            println!("index, uuid, name, memory.total [MiB], pci.bus_id, mig.mode.current");
            println!("0, {GPU_UUID}, NVIDIA A100-SXM4-40GB, 40960 MiB, 00000000:07:00.0, Enabled");
        }
        ["-L"] => {
            println!("GPU 0: NVIDIA A100-SXM4-40GB (UUID: {GPU_UUID})");
            for (i, g) in gis.iter().filter(|g| g.ci).enumerate() {
                println!("  MIG {} Device {i}: (UUID: MIG-{:08x}-0000-0000-0000-{:012x})", g.profile, g.id, g.start);
            }
        }
        ["mig", "-lgi"] | ["mig", "-i", "0", "-lgi"] => {
            if gis.is_empty() {
                println!("No GPU instances found: Not Found");
                return 6;
            }
            println!("+----------------------------------------------------+");
            println!("| GPU instances:                                     |");
            println!("| GPU   Name          Profile  Instance   Placement  |");
            println!("|                       ID       ID       Start:Size |");
            println!("|====================================================|");
            for g in &gis {
                let id = geo.shapes.iter().find(|s| s.name == g.profile).map_or(0, |s| s.id);
                println!(
                    "|   0  MIG {:<10} {:>4} {:>8} {:>10}:{}     |",
                    g.profile,
                    id,
                    g.id,
                    g.start,
                    size(&g.profile)
                );
                println!("+----------------------------------------------------+");
            }
        }
        ["mig", "-i", "0", "-dci"] => {
            if busy {
                println!(
                    "Unable to destroy compute instance ID  0 from GPU  0 GPU instance ID  1: In use by another client"
                );
                return 1;
            }
            if !gis.iter().any(|g| g.ci) {
                println!("No compute instances found: Not Found");
                return 6;
            }
            for g in gis.iter_mut().filter(|g| g.ci) {
                println!("Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID {:>2}", g.id);
                g.ci = false;
            }
            save(dir, &gis);
        }
        ["mig", "-i", "0", "-dgi"] => {
            if let Some(g) = gis.iter().find(|g| g.ci) {
                println!("Unable to destroy GPU instance ID {:>2} from GPU  0: In use by another client", g.id);
                return 1;
            }
            if gis.is_empty() {
                println!("No GPU instances found: Not Found");
                return 6;
            }
            for g in &gis {
                println!("Successfully destroyed GPU instance ID {:>2} from GPU  0", g.id);
            }
            save(dir, &[]);
        }
        ["mig", "-i", "0", "-cgi", tuples, "-C"] => {
            for t in tuples.split(',') {
                let (p, start) = t.split_once(':').unwrap_or((t, ""));
                let Some(shape) = geo.shapes.iter().find(|s| s.name == p || s.id.to_string() == p) else {
                    println!("Unable to create a GPU instance on GPU  0 using profile {p}: Invalid Argument");
                    println!("Failed to create GPU instances: Invalid Argument");
                    return 1;
                };
                let taken: Vec<(u32, u32)> = gis.iter().map(|g| (g.start, g.start + size(&g.profile))).collect();
                let free = |s: u32| taken.iter().all(|&(a, b)| s + u32::from(shape.slices) <= a || s >= b);
                let start = match start.parse::<u32>() {
                    Ok(s) if shape.starts.contains(&(s as u8)) && free(s) => Some(s),
                    Ok(_) => None,
                    Err(_) => shape.starts.iter().map(|s| u32::from(*s)).find(|s| free(*s)),
                };
                let Some(start) = start else {
                    println!("Unable to create a GPU instance on GPU  0 using profile {p}: Insufficient Resources");
                    println!("Failed to create GPU instances: Insufficient Resources");
                    save(dir, &gis);
                    return 1;
                };
                let id = (1..).find(|i| !gis.iter().any(|g| g.id == *i)).unwrap_or(1);
                gis.push(Gi { id, profile: shape.name.to_string(), start, ci: true });
                println!(
                    "Successfully created GPU instance ID {id:>2} on GPU  0 using profile MIG {} (ID {:>2})",
                    shape.name, shape.id
                );
                println!(
                    "Successfully created compute instance ID  0 on GPU  0 GPU instance ID {id:>2} using profile MIG {} (ID  0)",
                    shape.name
                );
            }
            save(dir, &gis);
        }
        other => {
            eprintln!("stand-in nvidia-smi: not recorded: {other:?}");
            return 2;
        }
    }
    0
}

/// A directory with a link `nvidia-smi` to this binary and a GPU laid out as `7g.40gb`.
fn setup(name: &str) -> (PathBuf, NvidiaSmi) {
    let dir = std::env::temp_dir().join(format!("gpool-mig-standin-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let me = std::env::current_exe().expect("exe");
    std::os::unix::fs::symlink(me, dir.join("nvidia-smi")).expect("link");
    save(&dir, &[Gi { id: 1, profile: "7g.40gb".into(), start: 0, ci: true }]);
    let smi = NvidiaSmi::at(dir.join("nvidia-smi"));
    (dir, smi)
}

fn slot(profile: &str, start: u32) -> MigSlot {
    MigSlot { profile: profile.into(), start }
}

/// (profile, start) of GPU 0's instances, as the backend's inventory reads them.
fn layout(smi: &mut NvidiaSmi) -> Vec<(String, Option<u32>)> {
    let gpus = smi.inventory().expect("inventory");
    let mut v: Vec<(String, Option<u32>)> =
        gpus[0].mig.as_ref().expect("MIG on").iter().map(|m| (m.profile.clone(), m.placement.map(|p| p.0))).collect();
    v.sort();
    v
}

fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("log")).unwrap_or_default()
}

fn a_valid_layout_is_applied_and_applying_it_again_changes_nothing() {
    let (dir, mut smi) = setup("valid");
    let want = [slot("3g.20gb", 4), slot("2g.10gb", 0), slot("1g.5gb", 2), slot("1g.5gb", 3)];
    smi.apply_mig_layout(0, &want).expect("applied");
    let got = layout(&mut smi);
    let expect: Vec<(String, Option<u32>)> = vec![
        ("1g.5gb".into(), Some(2)),
        ("1g.5gb".into(), Some(3)),
        ("2g.10gb".into(), Some(0)),
        ("3g.20gb".into(), Some(4)),
    ];
    assert_eq!(got, expect);
    let before = log(&dir).lines().count();
    smi.apply_mig_layout(0, &want).expect("applied again");
    let again: Vec<String> = log(&dir).lines().skip(before).map(String::from).collect();
    assert_eq!(again, ["mig -i 0 -lgi"], "nothing destroyed or created the second time");
}

fn an_invalid_placement_is_refused_and_the_gpu_is_reported_as_it_is() {
    let (_dir, mut smi) = setup("invalid");
    // 3g.20gb may only start at 0 or 4.
    let err = smi.apply_mig_layout(0, &[slot("3g.20gb", 2)]).expect_err("refused").to_string();
    assert!(err.contains("Insufficient Resources") && err.contains("MIG layout of GPU 0"), "{err}");
    assert_eq!(layout(&mut smi), Vec::<(String, Option<u32>)>::new(), "the old layout is gone: the GPU is empty");
    // Half done: the first fits, the second overlaps it.
    let err = smi.apply_mig_layout(0, &[slot("4g.20gb", 0), slot("3g.20gb", 0)]).expect_err("overlap").to_string();
    assert!(err.contains("Insufficient Resources"), "{err}");
    assert_eq!(layout(&mut smi), vec![("4g.20gb".to_string(), Some(0))], "what was created is reported");
}

fn a_gpu_in_use_is_left_alone() {
    let (dir, mut smi) = setup("busy");
    std::fs::write(dir.join("busy"), "").expect("busy");
    let err = smi.apply_mig_layout(0, &[slot("1g.5gb", 0)]).expect_err("busy").to_string();
    assert!(err.contains("In use by another client"), "{err}");
    assert_eq!(layout(&mut smi), vec![("7g.40gb".to_string(), Some(0))]);
}

/// Issue 40, point 1: a node whose GPUs NVML reads changes MIG layouts
/// through the `nvidia-smi` on its PATH, and says so when there is none.
fn a_backend_reading_gpus_another_way_lays_them_out_through_the_nvidia_smi_on_path() {
    let (dir, mut smi) = setup("on-path");
    let path = std::env::join_paths([Path::new("/nonexistent"), dir.as_path()]).expect("PATH");
    gpool_gpu::smi::apply_mig_layout_on_path(&path, 0, &[slot("4g.20gb", 0)]).expect("applied");
    assert_eq!(layout(&mut smi), vec![("4g.20gb".to_string(), Some(0))]);
    let err = gpool_gpu::smi::apply_mig_layout_on_path(std::ffi::OsStr::new("/nonexistent"), 0, &[slot("1g.5gb", 0)])
        .expect_err("no nvidia-smi")
        .to_string();
    assert!(err.contains("nvidia-smi") && err.contains("not on PATH"), "{err}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.first().is_some_and(|a| a.ends_with("/nvidia-smi")) {
        let dir = Path::new(&args[0]).parent().map(Path::to_path_buf).unwrap_or_default();
        std::process::exit(standin(&dir, &args[1..]));
    }
    let tests: [(&str, fn()); 4] = [
        (
            "a_valid_layout_is_applied_and_applying_it_again_changes_nothing",
            a_valid_layout_is_applied_and_applying_it_again_changes_nothing,
        ),
        (
            "an_invalid_placement_is_refused_and_the_gpu_is_reported_as_it_is",
            an_invalid_placement_is_refused_and_the_gpu_is_reported_as_it_is,
        ),
        ("a_gpu_in_use_is_left_alone", a_gpu_in_use_is_left_alone),
        (
            "a_backend_reading_gpus_another_way_lays_them_out_through_the_nvidia_smi_on_path",
            a_backend_reading_gpus_another_way_lays_them_out_through_the_nvidia_smi_on_path,
        ),
    ];
    let filter = args.iter().skip(1).find(|a| !a.starts_with('-'));
    let mut failed = 0;
    for (name, f) in tests {
        if filter.is_some_and(|x| !name.contains(x.as_str())) {
            continue;
        }
        match std::panic::catch_unwind(f) {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("test result: {}. {failed} failed", if failed == 0 { "ok" } else { "FAILED" });
    std::process::exit(i32::from(failed > 0));
}
