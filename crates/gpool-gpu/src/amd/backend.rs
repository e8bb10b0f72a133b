//! The AMD backend: `amd-smi` (ROCm 6 and later), falling back to
//! `rocm-smi --json` where `amd-smi` is missing or fails (older ROCm,
//! consumer cards, containers). Either tool may fail at any time; the other
//! is tried, and what failed is said once ([`Backend::degraded`]).
//!
//! What it runs (a stand-in can match on these exact argument lists):
//! [`AMD_STATIC_ARGS`] for the inventory, [`AMD_METRIC_ARGS`] and
//! [`AMD_PROCESS_ARGS`] for samples; or [`ROCM_SMI_ARGS`] for both.
//!
//! MI300-class partitions: in CPX (or DPX, QPX) mode each partition is a
//! GPU of its own to the driver and to both tools, with its own index and
//! its share of the memory, so it is inventoried as a device of its own,
//! of model `<model>-<mode>` (`MI300X-CPX`): a job that asks for an
//! `MI300X` is not given one eighth of it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::amd_smi::{AmdMetric, AmdStatic, parse_metric, parse_process, parse_static};
use super::rocm_smi::{RocmCard, parse_rocm_smi};
use crate::model::short_model;
use crate::tool::{self, ToolFailure};
use crate::{Accelerator, Backend, Degraded, GpuError, GpuInfo, GpuSample};

/// `amd-smi static --json`: the inventory.
pub const AMD_STATIC_ARGS: &[&str] = &["static", "--json"];
/// `amd-smi metric --json`: readings.
pub const AMD_METRIC_ARGS: &[&str] = &["metric", "--json"];
/// `amd-smi process --json`: processes (names need root).
pub const AMD_PROCESS_ARGS: &[&str] = &["process", "--json"];
/// `rocm-smi` with what the inventory and a sample read, in options every
/// rocm-smi since ROCm 4 knows.
pub const ROCM_SMI_ARGS: &[&str] = &[
    "--showproductname",
    "--showid",
    "--showuniqueid",
    "--showserial",
    "--showbus",
    "--showmeminfo",
    "vram",
    "--showuse",
    "--showmemuse",
    "--showtemp",
    "--showpower",
    "--showmaxpower",
    "--showclocks",
    "--showfan",
    "--showtoponuma",
    // Every recorded rocm-smi (ROCm 4.3 to 6.1, `data/amd/*telegraf*.json`;
    // 6.x `-a` text) takes it.
    "--showreplaycount",
    "--json",
];

/// Which tool gave the inventory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    AmdSmi,
    RocmSmi,
}

/// AMD GPUs through `amd-smi`, else `rocm-smi`.
#[derive(Clone, Debug)]
pub struct Amd {
    amd_smi: Option<PathBuf>,
    rocm_smi: Option<PathBuf>,
    timeout: Duration,
    source: Source,
    /// Power caps from the inventory, by index (`metric` does not repeat them).
    caps: Vec<(u32, f64)>,
    degraded: Vec<Degraded>,
}

impl Amd {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

    /// The tools found on `PATH`; `NoDriver` when neither is there.
    pub fn on_path() -> Result<Amd, GpuError> {
        let (a, r) = (tool::on_path("amd-smi"), tool::on_path("rocm-smi"));
        if a.is_none() && r.is_none() {
            return Err(GpuError::NoDriver(
                "neither amd-smi nor rocm-smi is on PATH: install ROCm (amdgpu driver and amd-smi) or pass --simulate-gpus"
                    .into(),
            ));
        }
        Ok(Amd::with_tools(a, r))
    }

    /// These tools (stand-ins in tests); either may be absent.
    pub fn with_tools(amd_smi: Option<PathBuf>, rocm_smi: Option<PathBuf>) -> Amd {
        Amd {
            amd_smi,
            rocm_smi,
            timeout: Amd::DEFAULT_TIMEOUT,
            source: Source::AmdSmi,
            caps: Vec::new(),
            degraded: Vec::new(),
        }
    }

    fn run(&self, program: &Path, args: &[&str]) -> Result<String, GpuError> {
        let name = program.file_name().map_or_else(|| "amd-smi".into(), |n| n.to_string_lossy().into_owned());
        let shown = args.join(" ");
        tool::run(program, args, self.timeout).map_err(|f| match f {
            ToolFailure::NotFound => GpuError::NoDriver(format!("{} not found", program.display())),
            ToolFailure::Spawn(e) => GpuError::Tool { tool: name, args: shown, why: format!("cannot run it: {e}") },
            ToolFailure::Timeout => GpuError::Tool {
                tool: name,
                args: shown,
                why: format!("no answer after {:?}, killed it", self.timeout),
            },
            ToolFailure::Failed { code, status, message } => {
                GpuError::Tool { tool: name, args: shown, why: ToolFailure::exit_text(code, &status, &message) }
            }
        })
    }

    fn note(&mut self, what: &str, command: String, e: &GpuError, instead: &str) {
        let why = match e {
            GpuError::Tool { why, .. } => why.clone(),
            other => other.to_string(),
        };
        if !self.degraded.iter().any(|d| d.what == what && d.command == command) {
            self.degraded.push(Degraded { what: what.into(), command, why, instead: instead.into() });
        }
    }

    fn rocm_cards(&self) -> Result<Vec<RocmCard>, GpuError> {
        let program = self.rocm_smi.as_deref().ok_or_else(|| GpuError::NoDriver("rocm-smi is not on PATH".into()))?;
        parse_rocm_smi(&self.run(program, ROCM_SMI_ARGS)?)
    }

    fn amd_static(&self) -> Result<Vec<AmdStatic>, GpuError> {
        let program = self.amd_smi.as_deref().ok_or_else(|| GpuError::NoDriver("amd-smi is not on PATH".into()))?;
        parse_static(&self.run(program, AMD_STATIC_ARGS)?)
    }
}

/// `AMD Instinct MI300X` → `MI300X`; `Navi 22 [Radeon RX 6700/6700 XT / 6800M]`
/// → `RX-6700`; `Arcturus GL-XL [Instinct MI100]` → `MI100`: the marketing
/// name in brackets where there is one, its first variant, shortened.
pub fn amd_model(name: &str, partition: Option<&str>) -> String {
    let inner = match (name.find('['), name.rfind(']')) {
        (Some(a), Some(b)) if b > a => &name[a + 1..b],
        _ => name,
    };
    let first = inner.split('/').next().unwrap_or(inner);
    let model = short_model(first);
    match partition.map(str::to_ascii_uppercase) {
        Some(p) if p != "SPX" && !p.is_empty() => format!("{model}-{p}"),
        _ => model,
    }
}

/// The name to show and the model to match requests against. A card whose
/// tool prints no name (rocm-smi of ROCm 4, which puts the vendor id there)
/// is named and modelled by its PCI device id: `AMD GPU 0x73df`, `AMD-0x73df`.
pub fn name_and_model(name: Option<&str>, device_id: Option<&str>, partition: Option<&str>) -> (String, String) {
    match name {
        Some(n) => (n.to_string(), amd_model(n, partition)),
        None => {
            let id = device_id.unwrap_or("unknown");
            let model = match partition.map(str::to_ascii_uppercase) {
                Some(p) if p != "SPX" && !p.is_empty() => format!("AMD-{id}-{p}"),
                _ => format!("AMD-{id}"),
            };
            (format!("AMD GPU {id}"), model)
        }
    }
}

/// An identity for a GPU that has no UUID to show: its unique id, serial,
/// PCI address or index, prefixed so that it cannot be taken for another
/// vendor's.
fn identity(unique: Option<&str>, serial: Option<&str>, bus: Option<&str>, index: u32) -> String {
    match unique.or(serial).or(bus) {
        Some(id) => format!("AMD-{id}"),
        None => format!("AMD-GPU-{index}"),
    }
}

fn info_from_static(s: &AmdStatic) -> GpuInfo {
    let (name, model) = name_and_model(s.name.as_deref(), s.device_id.as_deref(), s.compute_partition.as_deref());
    GpuInfo {
        kind: Accelerator::AmdGpu,
        index: s.gpu,
        uuid: s.uuid.clone().unwrap_or_else(|| identity(None, s.serial.as_deref(), s.bdf.as_deref(), s.gpu)),
        model,
        name,
        memory_mb: s.memory_mb.unwrap_or(0),
        pci_bus_id: s.bdf.clone(),
        nvlink_group: None,
        nvlink_peers: Vec::new(),
        numa_node: s.numa_node,
        mig: None,
    }
}

fn info_from_rocm(c: &RocmCard) -> GpuInfo {
    let (name, model) = name_and_model(c.name.as_deref(), c.device_id.as_deref(), c.compute_partition.as_deref());
    GpuInfo {
        kind: Accelerator::AmdGpu,
        index: c.index,
        uuid: identity(c.unique_id.as_deref(), c.serial.as_deref(), c.pci_bus.as_deref(), c.index),
        model,
        name,
        memory_mb: c.memory_total_mb.unwrap_or(0),
        pci_bus_id: c.pci_bus.clone(),
        nvlink_group: None,
        nvlink_peers: Vec::new(),
        numa_node: c.numa_node,
        mig: None,
    }
}

fn sample_from_metric(m: &AmdMetric, cap: Option<f64>) -> GpuSample {
    GpuSample {
        index: m.gpu,
        gpu_util_pct: m.gfx_activity_pct,
        mem_util_pct: m.umc_activity_pct,
        memory_used_mb: m.memory_used_mb,
        memory_total_mb: m.memory_total_mb,
        memory_free_mb: m.memory_total_mb.zip(m.memory_used_mb).map(|(t, u)| t.saturating_sub(u)),
        temperature_c: m.temperature_edge_c,
        memory_temperature_c: m.temperature_mem_c,
        junction_temperature_c: m.temperature_hotspot_c,
        slowdown_temperature_c: None,
        power_draw_w: m.power_w,
        power_limit_w: cap,
        sm_clock_mhz: m.gfx_clock_mhz,
        mem_clock_mhz: m.mem_clock_mhz,
        fan_pct: m.fan_pct,
        ecc_corrected_volatile: m.ecc_corrected,
        ecc_uncorrected_volatile: m.ecc_uncorrected,
        pcie_replays: m.pcie_replays,
        health_fault: ras_fault(&m.ras_uncorrectable),
        ..GpuSample::default()
    }
}

/// `RAS: 2 uncorrectable errors in block UMC` (blocks joined by `; `), or
/// `None` when no RAS block counts an uncorrectable error.
fn ras_fault(blocks: &[(String, u64)]) -> Option<String> {
    let parts: Vec<String> = blocks
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(block, n)| format!("RAS: {n} uncorrectable error{} in block {block}", if *n == 1 { "" } else { "s" }))
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn sample_from_rocm(c: &RocmCard) -> GpuSample {
    GpuSample {
        index: c.index,
        gpu_util_pct: c.gpu_util_pct,
        mem_util_pct: c.mem_util_pct,
        memory_used_mb: c.memory_used_mb,
        memory_total_mb: c.memory_total_mb,
        memory_free_mb: c.memory_total_mb.zip(c.memory_used_mb).map(|(t, u)| t.saturating_sub(u)),
        temperature_c: c.temperature_edge_c,
        memory_temperature_c: c.temperature_memory_c,
        junction_temperature_c: c.temperature_junction_c,
        slowdown_temperature_c: None,
        power_draw_w: c.power_w,
        power_limit_w: c.power_cap_w,
        sm_clock_mhz: c.sclk_mhz,
        mem_clock_mhz: c.mclk_mhz,
        fan_pct: c.fan_pct,
        pcie_replays: c.pcie_replays,
        // rocm-smi prints no ECC or RAS counts in JSON (`--showrasinfo` is text
        // only, ROCm issue #4374); none of the recorded `data/amd/*.json`
        // (MI100, RX 6700 XT 4.3 to 6.1, Vega 10, RX 7900 XT) has one.
        ..GpuSample::default()
    }
}

impl Backend for Amd {
    fn name(&self) -> &'static str {
        match self.source {
            Source::AmdSmi => "amd-smi",
            Source::RocmSmi => "rocm-smi",
        }
    }

    fn inventory(&mut self) -> Result<Vec<GpuInfo>, GpuError> {
        let amd = self.amd_smi.is_some().then(|| self.amd_static());
        match amd {
            Some(Ok(list)) if !list.is_empty() => {
                self.source = Source::AmdSmi;
                self.caps = list.iter().filter_map(|s| Some((s.gpu, s.power_cap_w?))).collect();
                return Ok(list.iter().map(info_from_static).collect());
            }
            Some(Ok(_)) => {}
            Some(Err(e @ GpuError::Parse { .. })) | Some(Err(e @ GpuError::Tool { .. })) if self.rocm_smi.is_some() => {
                self.note(
                    "GPU list without amd-smi",
                    "amd-smi static --json".into(),
                    &e,
                    "GPUs from `rocm-smi --json`",
                );
            }
            Some(Err(e)) if self.rocm_smi.is_none() => return Err(e),
            Some(Err(_)) | None => {}
        }
        let cards = self.rocm_cards()?;
        self.source = Source::RocmSmi;
        Ok(cards.iter().map(info_from_rocm).collect())
    }

    fn sample(&mut self) -> Result<Vec<GpuSample>, GpuError> {
        if self.source == Source::AmdSmi
            && let Some(program) = self.amd_smi.clone()
        {
            match self.run(&program, AMD_METRIC_ARGS).and_then(|t| parse_metric(&t)) {
                Ok(metrics) => {
                    let cap = |g: u32| self.caps.iter().find(|(i, _)| *i == g).map(|(_, c)| *c);
                    let mut samples: Vec<GpuSample> =
                        metrics.iter().map(|m| sample_from_metric(m, cap(m.gpu))).collect();
                    match self.run(&program, AMD_PROCESS_ARGS).and_then(|t| parse_process(&t)) {
                        Ok(procs) => {
                            for (gpu, p) in procs {
                                if let Some(s) = samples.iter_mut().find(|s| s.index == gpu) {
                                    s.processes.push(p);
                                }
                            }
                        }
                        Err(e) => self.note(
                            "sample processes unknown",
                            "amd-smi process --json".into(),
                            &e,
                            "GPU processes are not listed or matched to jobs",
                        ),
                    }
                    return Ok(samples);
                }
                Err(e) if self.rocm_smi.is_some() => {
                    self.note(
                        "samples without amd-smi",
                        "amd-smi metric --json".into(),
                        &e,
                        "samples from `rocm-smi --json`",
                    );
                }
                Err(e) => return Err(e),
            }
        }
        // rocm-smi lists processes without their GPU: none are attributed.
        Ok(self.rocm_cards()?.iter().map(sample_from_rocm).collect())
    }

    fn degraded(&self) -> Vec<Degraded> {
        self.degraded.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncorrectable_ras_errors_are_a_health_fault() {
        let m = AmdMetric {
            ecc_uncorrected: Some(3),
            ras_uncorrectable: vec![("UMC".into(), 2), ("GFX".into(), 1)],
            pcie_replays: Some(4),
            ..AmdMetric::default()
        };
        let s = sample_from_metric(&m, None);
        assert_eq!(
            s.health_fault.as_deref(),
            Some("RAS: 2 uncorrectable errors in block UMC; RAS: 1 uncorrectable error in block GFX")
        );
        assert_eq!((s.ecc_uncorrected_volatile, s.pcie_replays), (Some(3), Some(4)));
        assert_eq!(sample_from_metric(&AmdMetric::default(), None).health_fault, None);
        assert_eq!(ras_fault(&[("UMC".into(), 0)]), None);
    }

    #[test]
    fn models_from_the_names_amd_prints() {
        let cases = [
            ("AMD Instinct MI300X", None, "MI300X"),
            ("AMD Instinct MI300X", Some("SPX"), "MI300X"),
            ("AMD Instinct MI300X", Some("cpx"), "MI300X-CPX"),
            ("Navi 22 [Radeon RX 6700/6700 XT / 6800M]", None, "RX-6700"),
            ("Arcturus GL-XL [Instinct MI100]", None, "MI100"),
            ("AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2", None, "MI200"),
            ("AMD Radeon AI PRO R9700", None, "R9700"),
            ("AMD Instinct MI210", None, "MI210"),
        ];
        for (name, partition, want) in cases {
            assert_eq!(amd_model(name, partition), want, "{name}");
        }
    }
}
