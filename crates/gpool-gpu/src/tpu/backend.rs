//! Cloud TPU chips on a TPU VM (`google.com/tpu`): found from their device
//! files (`/dev/accelN` on v2-v4, `/dev/vfio/N` on v5e, v5p, v6e), and from
//! `tpu-info` where installed, which also gives HBM use and duty cycle
//! while a framework holds the chips. Each chip is pinned by its N
//! (`TPU_VISIBLE_CHIPS`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::tpu_info::{TpuInfo, parse_tpu_info};
use crate::tool::{self, ToolFailure};
use crate::{Accelerator, Backend, Degraded, GpuError, GpuInfo, GpuProcess, GpuSample};

/// HBM per chip in MiB by generation, for when `tpu-info` cannot say:
/// what `tpu-info` reports on v4 (31.75 GiB), v5p (95.74 GiB) and v6e
/// (31.25 GiB) in the recorded outputs; Google's published sizes for the
/// others (v2 8 GiB, v3 16 GiB, v5e 16 GiB).
pub const HBM_MIB: [(&str, u64); 6] =
    [("v2", 8_192), ("v3", 16_384), ("v4", 32_512), ("v5e", 16_384), ("v5p", 98_038), ("v6e", 32_000)];

/// `v5p`, `v5p-8`, `TPU v5p chip`, `v5litepod-16` → `v5p`/`v5e`.
pub fn generation(s: &str) -> Option<String> {
    let s = s.to_ascii_lowercase();
    let word = s.split([' ', '-']).find(|w| w.starts_with('v') && w[1..].starts_with(|c: char| c.is_ascii_digit()))?;
    Some(if word.starts_with("v5lite") { "v5e".into() } else { word.to_string() })
}

/// Chips from the device files under `dev` (`/dev` on a TPU VM), sorted.
pub fn chips_in(dev: &Path) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let mut scan = |dir: PathBuf, prefix: &str, shown: &str| {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(n) = name.strip_prefix(prefix).and_then(|n| n.parse::<u32>().ok()) {
                out.push((n, format!("{shown}{name}")));
            }
        }
    };
    scan(dev.to_path_buf(), "accel", "/dev/");
    scan(dev.join("vfio"), "", "/dev/vfio/");
    out.sort();
    out
}

/// Cloud TPU chips.
#[derive(Clone, Debug)]
pub struct Tpu {
    tpu_info: Option<PathBuf>,
    dev: PathBuf,
    /// `TPU_ACCELERATOR_TYPE` (set on TPU VMs and GKE TPU nodes), e.g. `v5p-8`.
    accelerator_type: Option<String>,
    timeout: Duration,
    degraded: Vec<Degraded>,
}

impl Tpu {
    /// This machine's chips: `NoDriver` unless it is a TPU VM. VFIO groups
    /// (`/dev/vfio/N`) exist on any host that passes devices to VMs, so they
    /// count as TPU chips only where `tpu-info` is installed or
    /// `TPU_ACCELERATOR_TYPE` says this is a TPU VM; `/dev/accelN` (v2-v4) counts alone.
    pub fn on_host() -> Result<Tpu, GpuError> {
        let t = Tpu::with(tool::on_path("tpu-info"), PathBuf::from("/dev"), std::env::var("TPU_ACCELERATOR_TYPE").ok());
        let vouched = t.tpu_info.is_some() || t.accelerator_type.is_some();
        let chips = chips_in(&t.dev);
        if !vouched && !chips.iter().any(|(_, d)| d.starts_with("/dev/accel")) {
            return Err(GpuError::NoDriver(
                "no TPU (no /dev/accelN; no tpu-info on PATH or TPU_ACCELERATOR_TYPE to vouch for /dev/vfio/N)".into(),
            ));
        }
        Ok(t)
    }

    /// A stand-in `tpu-info`, device files under `dev`, and the accelerator type.
    pub fn with(tpu_info: Option<PathBuf>, dev: PathBuf, accelerator_type: Option<String>) -> Tpu {
        Tpu { tpu_info, dev, accelerator_type, timeout: Duration::from_secs(10), degraded: Vec::new() }
    }

    fn run_tpu_info(&mut self) -> Option<TpuInfo> {
        let program = self.tpu_info.clone()?;
        let got = tool::run(&program, &[], self.timeout)
            .map_err(|f| match f {
                ToolFailure::Failed { code, status, message } => ToolFailure::exit_text(code, &status, &message),
                ToolFailure::Timeout => format!("no answer after {:?}, killed it", self.timeout),
                ToolFailure::NotFound => "not found".into(),
                ToolFailure::Spawn(e) => format!("cannot run it: {e}"),
            })
            .and_then(|t| parse_tpu_info(&t).map_err(|e| e.to_string()));
        match got {
            Ok(info) => Some(info),
            Err(why) => {
                let d = Degraded {
                    what: "TPU readings unknown".into(),
                    command: "tpu-info".into(),
                    why,
                    instead: "chips from their device files; no HBM use or duty cycle".into(),
                };
                if !self.degraded.contains(&d) {
                    self.degraded.push(d);
                }
                None
            }
        }
    }
}

impl Backend for Tpu {
    fn name(&self) -> &'static str {
        "tpu"
    }

    fn inventory(&mut self) -> Result<Vec<GpuInfo>, GpuError> {
        let info = self.run_tpu_info();
        self.chips(info.as_ref())
    }

    /// Readings come only while a framework holds the chips; otherwise the
    /// samples carry nothing but the chips (absent, not zero).
    fn sample(&mut self) -> Result<Vec<GpuSample>, GpuError> {
        let info = self.run_tpu_info();
        let chips = self.chips(info.as_ref())?;
        Ok(chips.iter().map(|c| sample_of(c, info.as_ref())).collect())
    }

    fn degraded(&self) -> Vec<Degraded> {
        self.degraded.clone()
    }
}

impl Tpu {
    /// The chips `tpu-info` lists, else the device files.
    fn chips(&self, info: Option<&TpuInfo>) -> Result<Vec<GpuInfo>, GpuError> {
        let mut chips: Vec<(u32, String, Option<String>)> = match info {
            Some(i) if !i.chips.is_empty() => {
                i.chips.iter().map(|c| (c.index, c.device.clone(), c.chip_type.clone())).collect()
            }
            _ => chips_in(&self.dev).into_iter().map(|(n, d)| (n, d, None)).collect(),
        };
        chips.sort();
        if chips.is_empty() {
            return Err(GpuError::NoDriver("no TPU chip found (tpu-info lists none, no device files)".into()));
        }
        let generation_found = info
            .and_then(|i| i.accelerator_type.as_deref().and_then(generation))
            .or_else(|| chips.iter().find_map(|c| c.2.as_deref().and_then(generation)))
            .or_else(|| self.accelerator_type.as_deref().and_then(generation));
        let hbm = |chip: u32| {
            info.and_then(|i| i.usage.iter().find(|u| u.chip == chip)?.hbm_total_mib).or_else(|| {
                let g = generation_found.as_deref()?;
                HBM_MIB.iter().find(|(n, _)| *n == g).map(|(_, m)| *m)
            })
        };
        let generation_name = generation_found.clone().unwrap_or_else(|| "unknown".into());
        Ok(chips
            .iter()
            .map(|(index, device, ty)| GpuInfo {
                kind: Accelerator::Tpu,
                index: *index,
                uuid: format!("TPU-{generation_name}-{index}"),
                name: ty.clone().unwrap_or_else(|| format!("TPU {generation_name} chip ({device})")),
                model: format!("TPU-{generation_name}"),
                memory_mb: hbm(*index).unwrap_or(0),
                pci_bus_id: None,
                nvlink_group: None,
                nvlink_peers: Vec::new(),
                numa_node: None,
                mig: None,
            })
            .collect())
    }
}

/// One chip's sample: HBM and duty cycle where `tpu-info` gave them, and
/// the processes holding it.
fn sample_of(c: &GpuInfo, info: Option<&TpuInfo>) -> GpuSample {
    let u = info.and_then(|i| i.usage.iter().find(|u| u.chip == c.index));
    let mut processes: Vec<GpuProcess> = Vec::new();
    let holders = info.into_iter().flat_map(|i| {
        let chip_pid = i.chips.iter().filter(|x| x.index == c.index).filter_map(|x| Some((x.pid?, None)));
        let listed = i.processes.iter().filter(|p| p.0 == c.index).map(|p| (p.1, p.2.clone()));
        chip_pid.chain(listed).collect::<Vec<_>>()
    });
    for (pid, name) in holders {
        if !processes.iter().any(|p| p.pid == pid) {
            processes.push(GpuProcess { pid, name, used_memory_mb: None, sm_util_pct: None, gi_id: None, ci_id: None });
        }
    }
    GpuSample {
        index: c.index,
        uuid: c.uuid.clone(),
        gpu_util_pct: u.and_then(|u| u.duty_cycle_pct),
        memory_used_mb: u.and_then(|u| u.hbm_used_mib),
        memory_total_mb: u.and_then(|u| u.hbm_total_mib).or(Some(c.memory_mb).filter(|m| *m > 0)),
        processes,
        // tpu-info reports no chip health or state in the recorded versions
        // (`data/tpu`: 2024, 0.8, 0.9+ docs; its `... Status` panels are about
        // metrics, not chips): `health_fault` stays `None`.
        ..GpuSample::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_from_every_spelling() {
        for (s, want) in
            [("v5p", "v5p"), ("v5p-8", "v5p"), ("TPU v6e chip", "v6e"), ("v5litepod-16", "v5e"), ("v4-8", "v4")]
        {
            assert_eq!(generation(s).as_deref(), Some(want), "{s}");
        }
        assert_eq!(generation("unknown (libtpu not found)"), None);
    }

    #[test]
    fn chips_from_device_files() {
        let dir = std::env::temp_dir().join(format!("gpool-tpu-dev-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("vfio")).expect("dir");
        for f in ["accel0", "accel1", "vfio/2", "vfio/vfio", "null"] {
            std::fs::write(dir.join(f), "").expect("file");
        }
        let found = chips_in(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            found,
            [(0, "/dev/accel0".to_string()), (1, "/dev/accel1".to_string()), (2, "/dev/vfio/2".to_string())]
        );
    }
}
