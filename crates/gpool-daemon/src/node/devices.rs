//! The device files each GPU device of the node opens, so that a replica's
//! control group can deny the ones of devices it was not given
//! (`cgroup.rs`).
//!
//! - A GPU opens `/dev/nvidiaN` (character device 195:N, N its minor
//!   number, which is its index as the driver numbers them).
//! - A MIG instance opens its GPU's file, and two capability files under
//!   `/dev/nvidia-caps`: its GPU instance's and its compute instance's
//!   `access` capability. Their minor numbers are in
//!   `/proc/driver/nvidia/capabilities/gpuN/mig/giG[/ciC]/access`
//!   (`DeviceFileMinor: M`), their major is `nvidia-caps` in
//!   `/proc/devices`. Without them CUDA cannot use the instance, whatever
//!   `CUDA_VISIBLE_DEVICES` says: denying another instance's capabilities
//!   keeps a job off it even though both share the GPU's file.
//!
//! - An AMD GPU opens its DRM nodes (`/dev/dri/cardN`, `/dev/dri/renderD…`,
//!   major 226): the ones listed under its PCI address in
//!   `/sys/bus/pci/devices/<bdf>/drm/`, with their numbers in
//!   `/sys/class/drm/<name>/dev`.
//! - A TPU chip opens `/dev/accelN` or `/dev/vfio/N`: the numbers of that file.
//!
//! Files every job needs (`/dev/nvidiactl`, `/dev/nvidia-uvm`, AMD's
//! `/dev/kfd`) are not listed, so never denied.
//!
//! The same knowledge says what a job's container must be given
//! ([`DeviceFiles::for_container`]): NVIDIA GPUs go through the runtime's
//! NVIDIA hook or CDI; AMD GPUs and TPU chips as their device files
//! (`--device`), with the groups that own them.

use std::path::{Path, PathBuf};

use gpool_gpu::{Accelerator, GpuInfo};

/// NVIDIA's character-device major number (`/dev/nvidia0` is 195:0).
pub const NVIDIA_MAJOR: u32 = 195;

/// Which device files (major, minor) each device UUID of the node opens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceFiles {
    files: Vec<(String, u32, u32)>,
    /// The device files of each AMD GPU and TPU chip, by UUID, and its kind.
    paths: Vec<(String, Accelerator, PathBuf)>,
    /// AMD's compute interface, every ROCm process's, if the node has it.
    kfd: Option<PathBuf>,
    /// Each device's kind, by UUID (MIG instances are NVIDIA's).
    kinds: Vec<(String, Accelerator)>,
}

/// What a job's container is given for its devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Passthrough {
    /// No device (a CPU job, or simulated GPUs).
    Nothing,
    /// NVIDIA GPUs, by UUID: the runtime's NVIDIA hook or CDI.
    Nvidia,
    /// AMD GPUs or TPU chips: these device files, the groups that own them
    /// (so the job's user may open them), and for AMD GPUs
    /// `ROCR_VISIBLE_DEVICES` as the container numbers them (from 0).
    Files { files: Vec<PathBuf>, groups: Vec<u32>, rocr: Option<String> },
}

impl DeviceFiles {
    /// The files of `gpus` on this machine.
    pub fn of(gpus: &[GpuInfo]) -> DeviceFiles {
        DeviceFiles::under(gpus, Path::new("/proc"), Path::new("/sys"), Path::new("/dev"))
    }

    /// The files of `gpus`, read under these roots (`/proc`, `/sys`, `/dev` on a node).
    pub fn under(gpus: &[GpuInfo], proc_root: &Path, sys_root: &Path, dev_root: &Path) -> DeviceFiles {
        let caps_major = std::fs::read_to_string(proc_root.join("devices")).ok().and_then(|t| caps_major(&t));
        let mut files = Vec::new();
        let mut paths = Vec::new();
        let mut kinds: Vec<(String, Accelerator)> = Vec::new();
        for g in gpus {
            kinds.push((g.uuid.clone(), g.kind));
            kinds.extend(g.mig.iter().flatten().map(|m| (m.uuid.clone(), g.kind)));
            match g.kind {
                Accelerator::AmdGpu => {
                    for (name, a, b) in amd_files(g, sys_root) {
                        files.push((g.uuid.clone(), a, b));
                        paths.push((g.uuid.clone(), g.kind, dev_root.join("dri").join(name)));
                    }
                    continue;
                }
                Accelerator::Tpu => {
                    if let Some((path, a, b)) = tpu_file(g, dev_root) {
                        files.push((g.uuid.clone(), a, b));
                        paths.push((g.uuid.clone(), g.kind, path));
                    }
                    continue;
                }
                Accelerator::NvidiaGpu => {}
            }
            files.push((g.uuid.clone(), NVIDIA_MAJOR, g.index));
            for m in g.mig.iter().flatten() {
                files.push((m.uuid.clone(), NVIDIA_MAJOR, g.index));
                // Without a GPU-instance id (not readable without root) its capability files are unknown.
                let (Some(major), Some(gi_id)) = (caps_major, m.gi_id) else { continue };
                let gi = proc_root.join(format!("driver/nvidia/capabilities/gpu{}/mig/gi{gi_id}", g.index));
                let mut access = vec![gi.join("access")];
                access.extend(m.ci_id.map(|ci| gi.join(format!("ci{ci}")).join("access")));
                for file in access {
                    if let Some(minor) = std::fs::read_to_string(&file).ok().and_then(|t| file_minor(&t)) {
                        files.push((m.uuid.clone(), major, minor));
                    }
                }
            }
        }
        let kfd = Some(dev_root.join("kfd")).filter(|p| p.exists());
        DeviceFiles { files, paths, kfd, kinds }
    }

    /// What the container of a job given `devices` (GPU, MIG or chip UUIDs)
    /// must be given; `Err` says why this node cannot give it.
    pub fn for_container(&self, devices: &[String]) -> Result<Passthrough, String> {
        let kind = |d: &String| self.kinds.iter().find(|(u, _)| u == d).map(|(_, k)| *k);
        let others: Vec<&String> =
            devices.iter().filter(|d| kind(d).is_some_and(|k| k != Accelerator::NvidiaGpu)).collect();
        if others.is_empty() {
            return Ok(if devices.is_empty() { Passthrough::Nothing } else { Passthrough::Nvidia });
        }
        let mut files = Vec::new();
        let mut amd = 0;
        for d in others {
            let mine: Vec<&PathBuf> = self.paths.iter().filter(|(u, ..)| u == d).map(|(.., p)| p).collect();
            if mine.is_empty() {
                return Err(format!(
                    "the device files of {d} are not known (an AMD GPU's DRM nodes are read under \
                     /sys/bus/pci/devices/<its PCI address>/drm, a TPU chip's is /dev/accelN or /dev/vfio/N), \
                     so a container could not use it"
                ));
            }
            amd += usize::from(kind(d) == Some(Accelerator::AmdGpu));
            files.extend(mine.into_iter().cloned());
        }
        let rocr = (amd > 0).then(|| (0..amd).map(|i| i.to_string()).collect::<Vec<_>>().join(","));
        if rocr.is_some() {
            let kfd = self
                .kfd
                .clone()
                .ok_or("this node has no /dev/kfd (is the amdgpu driver loaded?), which every ROCm process opens")?;
            files.insert(0, kfd);
        }
        let mut groups: Vec<u32> =
            files.iter().filter_map(|f| rustix::fs::stat(f).ok()).map(|st| st.st_gid).filter(|g| *g != 0).collect();
        groups.sort_unstable();
        groups.dedup();
        Ok(Passthrough::Files { files, groups, rocr })
    }

    /// Every file of the node that none of `devices` (GPU and MIG UUIDs)
    /// opens, sorted, each once.
    pub fn deny_for(&self, devices: &[String]) -> Vec<(u32, u32)> {
        let allowed: Vec<(u32, u32)> =
            self.files.iter().filter(|(uuid, ..)| devices.contains(uuid)).map(|(_, a, b)| (*a, *b)).collect();
        let mut deny: Vec<(u32, u32)> =
            self.files.iter().map(|(_, a, b)| (*a, *b)).filter(|f| !allowed.contains(f)).collect();
        deny.sort_unstable();
        deny.dedup();
        deny
    }
}

/// An AMD GPU's DRM nodes (name, major, minor): those under its PCI address in sysfs.
fn amd_files(g: &GpuInfo, sys_root: &Path) -> Vec<(String, u32, u32)> {
    let Some(bdf) = g.pci_bus_id.as_deref().map(str::to_ascii_lowercase) else { return Vec::new() };
    let dir = sys_root.join("bus/pci/devices").join(&bdf).join("drm");
    let mut out: Vec<(String, u32, u32)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let dev = std::fs::read_to_string(sys_root.join("class/drm").join(e.file_name()).join("dev")).ok()?;
            let (a, b) = dev.trim().split_once(':')?;
            Some((e.file_name().to_str()?.to_string(), a.parse().ok()?, b.parse().ok()?))
        })
        .collect();
    out.sort_unstable();
    out
}

/// A TPU chip's device file (`/dev/accelN`, else `/dev/vfio/N`) and its numbers.
fn tpu_file(g: &GpuInfo, dev_root: &Path) -> Option<(PathBuf, u32, u32)> {
    [dev_root.join(format!("accel{}", g.index)), dev_root.join("vfio").join(g.index.to_string())]
        .into_iter()
        .find_map(|p| rustix::fs::stat(&p).ok().map(|st| (p, st)))
        .map(|(p, st)| (p, rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev)))
}

/// The major number of `nvidia-caps` in `/proc/devices`.
fn caps_major(proc_devices: &str) -> Option<u32> {
    proc_devices.lines().find_map(|l| {
        let (n, name) = l.trim().split_once(' ')?;
        (name.trim() == "nvidia-caps").then(|| n.parse().ok())?
    })
}

/// `DeviceFileMinor: M` of a capability's `access` file.
fn file_minor(access: &str) -> Option<u32> {
    access.lines().find_map(|l| l.strip_prefix("DeviceFileMinor:")?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpool_gpu::MigInfo;

    fn gpu(index: u32, mig: Option<Vec<MigInfo>>) -> GpuInfo {
        GpuInfo {
            kind: gpool_gpu::Accelerator::NvidiaGpu,
            index,
            uuid: format!("GPU-{index}"),
            name: "NVIDIA H100 80GB HBM3".into(),
            model: "H100-80GB".into(),
            memory_mb: 81_559,
            pci_bus_id: None,
            nvlink_group: None,
            nvlink_peers: Vec::new(),
            numa_node: None,
            mig,
        }
    }

    fn mig(uuid: &str, gi: u32, ci: Option<u32>) -> MigInfo {
        MigInfo {
            profile: "3g.40gb".into(),
            uuid: uuid.into(),
            gi_id: Some(gi),
            ci_id: ci,
            memory_mb: 40_000,
            placement: None,
        }
    }

    /// A `/proc` as a node with GPU 1 in MIG mode shows it: two GPU
    /// instances (1 and 2), each with compute instance 0.
    fn fake_proc(dir: &Path) {
        std::fs::create_dir_all(dir).expect("dir");
        std::fs::write(dir.join("devices"), "Character devices:\n  1 mem\n195 nvidia\n237 nvidia-caps\n")
            .expect("devices");
        for (gi, gi_minor, ci_minor) in [(1, 12, 13), (2, 21, 22)] {
            let d = dir.join(format!("driver/nvidia/capabilities/gpu1/mig/gi{gi}"));
            std::fs::create_dir_all(d.join("ci0")).expect("dirs");
            std::fs::write(d.join("access"), format!("DeviceFileMinor: {gi_minor}\nDeviceFileMode: 292\n"))
                .expect("gi");
            std::fs::write(d.join("ci0/access"), format!("DeviceFileMinor: {ci_minor}\nDeviceFileMode: 292\n"))
                .expect("ci");
        }
    }

    #[test]
    fn each_device_is_kept_off_the_others_files() {
        let dir = std::env::temp_dir().join(format!("gpool-devices-{}", std::process::id()));
        fake_proc(&dir);
        let gpus = [gpu(0, None), gpu(1, Some(vec![mig("MIG-a", 1, Some(0)), mig("MIG-b", 2, Some(0))]))];
        let files = DeviceFiles::under(&gpus, &dir, Path::new("/no/sys"), Path::new("/no/dev"));
        let _ = std::fs::remove_dir_all(&dir);
        let cases: [(&[&str], &[(u32, u32)]); 4] = [
            // A whole GPU: not the other GPU, nor any MIG capability.
            (&["GPU-0"], &[(195, 1), (237, 12), (237, 13), (237, 21), (237, 22)]),
            // A MIG instance: its GPU's file and its own capabilities, nothing else.
            (&["MIG-a"], &[(195, 0), (237, 21), (237, 22)]),
            (&["MIG-b"], &[(195, 0), (237, 12), (237, 13)]),
            (&["GPU-0", "MIG-a", "MIG-b"], &[]),
        ];
        for (devices, denied) in cases {
            let devices: Vec<String> = devices.iter().map(|d| (*d).to_string()).collect();
            assert_eq!(files.deny_for(&devices), denied, "{devices:?}");
        }
    }

    #[test]
    fn without_the_drivers_capability_files_only_gpu_files_are_known() {
        let gpus = [gpu(0, Some(vec![mig("MIG-a", 1, None)])), gpu(1, None)];
        let files = DeviceFiles::under(&gpus, Path::new("/no/such/proc"), Path::new("/no/sys"), Path::new("/no/dev"));
        assert_eq!(files.deny_for(&["MIG-a".to_string()]), [(195, 1)]);
    }

    /// Issue 22: AMD GPUs by their DRM nodes under sysfs, TPU chips by their
    /// device files; `/dev/kfd` (every ROCm job needs it) is never denied.
    #[test]
    fn amd_gpus_and_tpu_chips_are_kept_off_each_others_files() {
        let dir = std::env::temp_dir().join(format!("gpool-devices-amd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (sys, dev) = (dir.join("sys"), dir.join("dev"));
        for (bdf, nodes) in [
            ("0000:07:00.0", [("card0", 0), ("renderD128", 128)]),
            ("0000:0b:00.0", [("card1", 1), ("renderD129", 129)]),
        ] {
            for (name, minor) in nodes {
                std::fs::create_dir_all(sys.join("bus/pci/devices").join(bdf).join("drm").join(name)).expect("dir");
                std::fs::create_dir_all(sys.join("class/drm").join(name)).expect("dir");
                std::fs::write(sys.join("class/drm").join(name).join("dev"), format!("226:{minor}\n")).expect("dev");
            }
        }
        std::fs::create_dir_all(&dev).expect("dev");
        // A TPU chip's device file: any character device serves (here /dev/null, 1:3).
        std::os::unix::fs::symlink("/dev/null", dev.join("accel0")).expect("link");
        let amd = |i: u32, bdf: &str| GpuInfo {
            kind: Accelerator::AmdGpu,
            uuid: format!("AMD-{i}"),
            pci_bus_id: Some(bdf.to_ascii_uppercase()),
            mig: None,
            ..gpu(i, None)
        };
        let tpu = GpuInfo { kind: Accelerator::Tpu, uuid: "TPU-v5p-0".into(), pci_bus_id: None, ..gpu(0, None) };
        let gpus = [amd(0, "0000:07:00.0"), amd(1, "0000:0B:00.0"), tpu];
        let files = DeviceFiles::under(&gpus, Path::new("/no/proc"), &sys, &dev);
        // Issue 40, point 2: what a container of these devices is given.
        let err = files.for_container(&["AMD-1".into()]).expect_err("no /dev/kfd here");
        assert!(err.contains("/dev/kfd"), "{err}");
        let tpu = files.for_container(&["TPU-v5p-0".into()]).expect("a chip");
        assert!(
            matches!(&tpu, Passthrough::Files { files, rocr: None, .. } if *files == [dev.join("accel0")]),
            "{tpu:?}"
        );
        assert_eq!(files.for_container(&[]), Ok(Passthrough::Nothing));
        std::fs::write(dev.join("kfd"), "").expect("kfd");
        let with_kfd = DeviceFiles::under(&gpus, Path::new("/no/proc"), &sys, &dev);
        let amd1 = with_kfd.for_container(&["AMD-1".into()]).expect("an AMD GPU");
        assert_eq!(
            amd1,
            Passthrough::Files {
                files: vec![dev.join("kfd"), dev.join("dri/card1"), dev.join("dri/renderD129")],
                groups: Vec::new(),
                rocr: Some("0".into()),
            },
            "its own DRM nodes and the compute interface, numbered from 0 inside"
        );
        let gone = DeviceFiles { paths: Vec::new(), ..with_kfd.clone() };
        let err = gone.for_container(&["AMD-0".into()]).expect_err("no DRM node known");
        assert!(err.contains("device files of AMD-0 are not known"), "{err}");
        assert_eq!(with_kfd.for_container(&["GPU-0".into()]), Ok(Passthrough::Nvidia), "NVIDIA: the runtime's hook");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(files.deny_for(&["AMD-0".into()]), [(1, 3), (226, 1), (226, 129)]);
        assert_eq!(files.deny_for(&["AMD-1".into(), "TPU-v5p-0".into()]), [(226, 0), (226, 128)]);
        assert!(files.deny_for(&["AMD-0".into(), "AMD-1".into(), "TPU-v5p-0".into()]).is_empty());
    }

    #[test]
    fn proc_files_parse() {
        assert_eq!(caps_major("Character devices:\n  1 mem\n508 nvidia-caps\n195 nvidia\n"), Some(508));
        assert_eq!(caps_major("195 nvidia\n"), None);
        assert_eq!(file_minor("DeviceFileMinor: 7\nDeviceFileMode: 292\n"), Some(7));
        assert_eq!(file_minor("nonsense"), None);
    }
}
