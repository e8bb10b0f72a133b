//! # gpool-gpu
//!
//! The device layer: what GPUs a node has and what they are doing, behind
//! one trait, [`Backend`].
//!
//! - [`nvml`]: NVIDIA's management library, loaded at run time (no link-time
//!   dependency): builds everywhere, and says plainly when there is no driver.
//!   Samples carry the last XID error, drained without blocking.
//! - [`smi`]: `nvidia-smi` output, parsed (CSV queries, `-L`, `mig -l*`,
//!   `-q`, `-q -x`, the table, `dmon`, `pmon`, …), and
//!   [`smi::NvidiaSmi`], a backend that runs the binary with a timeout: the
//!   fallback where NVML cannot load, and the way tests use recorded real
//!   GPUs (`data/nvidia-smi/`).
//! - [`simulated`]: an inventory from a spec like `8xH100-80GB` for machines
//!   without GPUs, demos and tests, whose samples follow what its jobs
//!   declare ([`simulated::Simulated::with_loads`]).
//!
//! Every metric is an `Option`: a value the device does not report
//! (`[N/A]`, `[Not Supported]`, `ERR!`, an NVML `NotSupported`) is absent,
//! never zero. Nothing depends on a GPU model name: models this crate has
//! never seen work the same way.

pub mod amd;
pub mod model;
pub mod nvml;
pub mod simulated;
pub mod smi;
pub mod tool;
pub mod tpu;

/// One MIG GPU instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigInfo {
    /// Profile name, e.g. `1g.10gb`.
    pub profile: String,
    /// `MIG-…` UUID (what `CUDA_VISIBLE_DEVICES` takes), or the old
    /// `MIG-GPU-<uuid>/<gi>/<ci>` form of pre-R470 drivers.
    pub uuid: String,
    /// GPU instance id (driver-assigned), where it could be read: `None`
    /// when neither `mig -lgi` nor the `-q` report answered (both may need
    /// root). The UUID alone is enough to pin the device.
    pub gi_id: Option<u32>,
    /// Compute instance id, where known.
    pub ci_id: Option<u32>,
    pub memory_mb: u64,
    /// Placement start and size, in memory slices, where known (`mig -lgi`).
    pub placement: Option<(u32, u32)>,
}

/// One GPU instance of a MIG layout to create: its profile and where it
/// starts, in memory slices (what `nvidia-smi mig -cgi PROFILE:START` takes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigSlot {
    pub profile: String,
    pub start: u32,
}

/// What kind of accelerator a device is, and so how a job is pinned to it
/// (`CUDA_VISIBLE_DEVICES`, `ROCR_VISIBLE_DEVICES`, `TPU_VISIBLE_CHIPS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Accelerator {
    #[default]
    NvidiaGpu,
    AmdGpu,
    Tpu,
}

impl Accelerator {
    /// `nvidia-gpu`, `amd-gpu` or `tpu` (what `gpool_core::DeviceKind` reads).
    pub fn as_str(self) -> &'static str {
        match self {
            Accelerator::NvidiaGpu => "nvidia-gpu",
            Accelerator::AmdGpu => "amd-gpu",
            Accelerator::Tpu => "tpu",
        }
    }
}

/// One GPU (or other accelerator) as discovered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    pub kind: Accelerator,
    /// Driver index: what the pinning variable of its kind takes.
    pub index: u32,
    pub uuid: String,
    /// The name the driver reports, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Short model name gpool matches requests against, e.g. `H100-80GB`.
    pub model: String,
    pub memory_mb: u64,
    pub pci_bus_id: Option<String>,
    /// GPUs with the same group are connected by NVLink.
    pub nvlink_group: Option<u32>,
    /// PCI bus ids of NVLink peers, where known.
    pub nvlink_peers: Vec<String>,
    pub numa_node: Option<u32>,
    /// `Some` when MIG mode is on.
    pub mig: Option<Vec<MigInfo>>,
}

/// A process using a GPU (or one of its MIG instances).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuProcess {
    pub pid: u32,
    pub name: Option<String>,
    pub used_memory_mb: Option<u64>,
    /// Its share of the GPU's SM time in percent, where the backend reports
    /// it per process (what NVML's process utilisation gives); `None` else.
    pub sm_util_pct: Option<u32>,
    /// The MIG instance the process runs in, if any.
    pub gi_id: Option<u32>,
    pub ci_id: Option<u32>,
}

/// What a MIG instance is doing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MigSample {
    pub gi_id: u32,
    pub ci_id: Option<u32>,
    pub memory_used_mb: Option<u64>,
    pub memory_total_mb: Option<u64>,
}

/// What one GPU is doing at one moment. Absent values are `None`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuSample {
    pub index: u32,
    pub uuid: String,
    /// Percent of time a kernel ran (`utilization.gpu`, DCGM_FI_DEV_GPU_UTIL).
    pub gpu_util_pct: Option<f64>,
    /// Percent of time memory was read or written (`utilization.memory`).
    pub mem_util_pct: Option<f64>,
    pub memory_used_mb: Option<u64>,
    pub memory_total_mb: Option<u64>,
    pub memory_free_mb: Option<u64>,
    pub memory_reserved_mb: Option<u64>,
    pub temperature_c: Option<f64>,
    pub memory_temperature_c: Option<f64>,
    /// The hottest point of the die (AMD's junction, or hotspot, sensor),
    /// where the device has one besides its edge temperature.
    pub junction_temperature_c: Option<f64>,
    /// The temperature at which the GPU starts slowing its clocks
    /// (NVML's `NVML_TEMPERATURE_THRESHOLD_SLOWDOWN`, `GPU Slowdown Temp`).
    pub slowdown_temperature_c: Option<f64>,
    pub power_draw_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    /// Total energy since the driver loaded, millijoules.
    pub energy_mj: Option<u64>,
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub fan_pct: Option<f64>,
    /// Performance state, e.g. `P0`.
    pub pstate: Option<String>,
    pub ecc_corrected_volatile: Option<u64>,
    pub ecc_uncorrected_volatile: Option<u64>,
    /// The last XID error seen (0 = none), where the backend can see them.
    pub xid_last: Option<u64>,
    /// XID events seen since the backend started: a rise says new ones came
    /// (the same XID twice leaves `xid_last` as it was).
    pub xid_count: Option<u64>,
    /// The last XIDs seen, oldest first, at most [`RECENT_XIDS`].
    pub xids_recent: Vec<u64>,
    /// HBM rows waiting to be remapped at the next GPU reset (`Remapped Rows`
    /// › `Pending`, `remapped_rows.pending`).
    pub remap_pending: Option<bool>,
    /// A row remap failed: the memory had no spare row left (`Remapping
    /// Failure Occurred`, `remapped_rows.failure`).
    pub remap_failed: Option<bool>,
    /// Pages retired for ECC errors, single and double bit together (older
    /// GPUs, before row remapping).
    pub retired_pages: Option<u64>,
    /// A page retirement waits for the next reset (`Pending Page Blacklist`).
    pub retired_pages_pending: Option<bool>,
    /// NVLink errors since the driver loaded, over all links (CRC, replay,
    /// recovery counters summed).
    pub nvlink_errors: Option<u64>,
    /// PCIe replays since the driver loaded.
    pub pcie_replays: Option<u64>,
    /// Video encoder and decoder use (in %; `utilization.encoder`, NVML's
    /// encoder and decoder utilization).
    pub enc_util_pct: Option<f64>,
    pub dec_util_pct: Option<f64>,
    /// PCIe throughput, bytes per second sent and received by the GPU (NVML
    /// samples a 20 ms window; the report prints `Tx/Rx Throughput` in KB/s).
    pub pcie_tx_bytes_per_s: Option<f64>,
    pub pcie_rx_bytes_per_s: Option<f64>,
    /// HBM rows remapped for correctable and for uncorrectable errors
    /// (`Remapped Rows` › `Correctable Error`, `Uncorrectable Error`).
    pub remapped_rows_correctable: Option<u64>,
    pub remapped_rows_uncorrectable: Option<u64>,
    /// The device's own word that it is unhealthy, where it gives one: a GPU
    /// NVML calls lost, an AMD RAS block counting uncorrectable errors, a TPU
    /// chip `tpu-info` reports unhealthy. `None` when it says nothing wrong.
    pub health_fault: Option<String>,
    /// Active clock throttle (event) reasons, by name: `idle`, `sw_power_cap`,
    /// `hw_slowdown`, `hw_thermal_slowdown`, `sw_thermal_slowdown`,
    /// `hw_power_brake_slowdown`, `sync_boost`, `applications_clocks_setting`,
    /// `display_clock_setting`. `None` when unknown; empty when none is active.
    pub throttle_reasons: Option<Vec<String>>,
    pub processes: Vec<GpuProcess>,
    /// Per MIG instance, when MIG is on.
    pub mig: Vec<MigSample>,
}

/// How many recent XIDs a sample carries ([`GpuSample::xids_recent`]).
pub const RECENT_XIDS: usize = 8;

/// A fault the simulated backend is told to show, so that what gpool does
/// about GPU faults can be tried without broken hardware
/// (`gpool nodes inject`). Real backends refuse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InjectedFault {
    /// An XID event with this number. XID 79 also takes the GPU off the
    /// bus after the sample that shows it, as on a real machine.
    Xid(u64),
    /// One more uncorrectable (double-bit) ECC error.
    EccUncorrected,
    /// The GPU stops answering: it is left out of samples, as a GPU fallen
    /// off the bus is.
    Gone,
}

/// A part of the device layer that did not answer, and what gpool did
/// without it: `MIG placement unknown: \`nvidia-smi mig -lgi\` failed
/// (exited with 4: Insufficient Permissions); MIG devices from \`nvidia-smi -L\`…`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Degraded {
    /// What is missing, e.g. `MIG placement unknown`.
    pub what: String,
    /// The command or call that failed, e.g. `nvidia-smi mig -lgi`.
    pub command: String,
    /// What it said.
    pub why: String,
    /// What was used instead, or what follows.
    pub instead: String,
}

impl std::fmt::Display for Degraded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: `{}` failed ({}); {}", self.what, self.command, self.why, self.instead)
    }
}

/// Why devices could not be discovered or read.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(
        "no GPU driver found: {0}. Install the driver (nvidia-smi, or amd-smi or rocm-smi for AMD GPUs, must work), or run with --simulate-gpus 8xH100-80GB to try gpool without GPUs"
    )]
    NoDriver(String),
    #[error("NVML error: {0}")]
    Nvml(String),
    #[error(
        "invalid --simulate-gpus {spec:?}: {why} (expected e.g. 8xH100-80GB, 4xA100-80GB,4xL4 or 1xH100-80GB:mig=3g.40gb+2g.20gb+1g.10gb+1g.10gb)"
    )]
    Spec { spec: String, why: String },
    /// A vendor tool other than nvidia-smi (`amd-smi`, `rocm-smi`,
    /// `tpu-info`) could not be run, or failed.
    #[error("{tool} {args}: {why}")]
    Tool { tool: String, args: String, why: String },
    /// `nvidia-smi` could not be run, or failed.
    #[error("nvidia-smi {args}: {why}")]
    Smi { args: String, why: String },
    /// `nvidia-smi` did not answer in time and was killed.
    #[error(
        "nvidia-smi {args}: no answer after {secs} s, killed it. The driver may be hung: check `dmesg` for Xid errors and `nvidia-smi` by hand; a GPU reset or reboot may be needed"
    )]
    Timeout { args: String, secs: u64 },
    /// A fault could not be injected (a real device, or no such GPU).
    #[error("cannot inject a fault: {0}")]
    Inject(String),
    /// A MIG layout could not be applied.
    #[error("MIG layout of GPU {gpu}: {why}")]
    Mig { gpu: u32, why: String },
    /// `nvidia-smi` output that does not parse.
    #[error("cannot parse nvidia-smi output ({what}), line {line}: {why}")]
    Parse { what: &'static str, line: usize, why: String },
}

/// Clock throttle (event) reasons by NVML bit (`nvmlClocksEventReason*`), with
/// the names [`GpuSample::throttle_reasons`] uses.
pub const THROTTLE_REASONS: [(u64, &str); 9] = [
    (0x1, "idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The names of the reasons set in an NVML bitmask (`clocks_event_reasons.active`),
/// in bit order. Bits NVML may add later are left out.
pub fn throttle_reason_names(bits: u64) -> Vec<String> {
    THROTTLE_REASONS.iter().filter(|(bit, _)| bits & bit != 0).map(|(_, name)| (*name).to_string()).collect()
}

/// A source of device inventory and samples.
pub trait Backend: Send {
    /// `nvml`, `nvidia-smi` or `simulated`.
    fn name(&self) -> &'static str;
    /// The node's GPUs, in driver index order.
    fn inventory(&mut self) -> Result<Vec<GpuInfo>, GpuError>;
    /// What every GPU is doing now, in driver index order.
    fn sample(&mut self) -> Result<Vec<GpuSample>, GpuError>;
    /// The sub-queries that failed in the last inventory or samples while
    /// the rest answered, each once: what is missing and what was used
    /// instead. Empty when everything answered.
    fn degraded(&self) -> Vec<Degraded> {
        Vec::new()
    }
    /// Shows `fault` on GPU `gpu` from the next sample on (`None`: clears
    /// what was injected, as a reset would). Only the simulated backend
    /// takes it: faults on real devices come from the devices.
    fn inject_fault(&mut self, gpu: u32, fault: Option<&InjectedFault>) -> Result<(), GpuError> {
        let _ = (gpu, fault);
        Err(GpuError::Inject(format!(
            "the {} backend reads real devices; faults can be injected only into simulated GPUs (gpool up --simulate-gpus, gpool agent --simulate-gpus)",
            self.name()
        )))
    }
    /// Gives MIG GPU `gpu` exactly the GPU instances of `layout`, each with
    /// one compute instance: nothing to do if it has them already, else its
    /// instances are destroyed and the new ones created. No job may be using
    /// the GPU. After a failure the GPU may be half done: callers read
    /// [`Backend::inventory`] afterwards and believe it, not the layout.
    fn apply_mig_layout(&mut self, gpu: u32, layout: &[MigSlot]) -> Result<(), GpuError> {
        let _ = layout;
        Err(GpuError::Mig { gpu, why: self.mig_changes().err().unwrap_or_default() })
    }
    /// Whether [`Backend::apply_mig_layout`] can work here; `Err` says why
    /// not and what would (`gpool agent --mig-managed` refuses to start on it).
    fn mig_changes(&self) -> Result<(), String> {
        Err(format!(
            "the {} backend cannot change MIG layouts; run the agent with --gpu-backend nvidia-smi",
            self.name()
        ))
    }
}
