//! NVML through nvml-wrapper, loaded at run time.
//!
//! NVML is initialised once per process and never shut down (the driver
//! releases it when the process exits): the XID event set borrows it for the
//! process's life, and a second [`Nvml::load`] shares it.
//!
//! A value a device does not report (`NotSupported`, `NoPermission`, a
//! function an older driver lacks) is `None`. A GPU NVML calls lost
//! (`NVML_ERROR_GPU_IS_LOST`: fallen off the bus) is a sample of its own
//! that says so in [`GpuSample::health_fault`]; a driver that went away, or
//! any other failure of a device, fails the sample with a message.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use nvml_wrapper::Device;
use nvml_wrapper::Nvml as Lib;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, PerformanceState, RetirementCause, TemperatureSensor,
    TemperatureThreshold,
};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_REMAPPED_COR, NVML_FI_DEV_REMAPPED_FAILURE, NVML_FI_DEV_REMAPPED_PENDING, NVML_FI_DEV_REMAPPED_UNC,
};

use crate::model::short_model;
use crate::{Backend, GpuError, GpuInfo, GpuProcess, GpuSample, MigInfo, MigSample, throttle_reason_names};

const MIB: u64 = 1024 * 1024;

/// NVLink links a GPU may have (`NVML_NVLINK_MAX_LINKS`).
const NVLINK_MAX_LINKS: u32 = 18;

/// What a sample of a GPU NVML calls lost says ([`GpuSample::health_fault`]).
pub const GPU_LOST: &str = "fallen off the bus: NVML says the GPU is lost (NVML_ERROR_GPU_IS_LOST)";

/// The process's NVML, once initialised.
static SHARED: Mutex<Option<&'static Lib>> = Mutex::new(None);

/// Initialises NVML the first time (a failure is not remembered: a later call tries again).
fn shared_lib() -> Result<&'static Lib, NvmlError> {
    let mut shared = SHARED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(lib) = *shared {
        return Ok(lib);
    }
    let lib: &'static Lib = Box::leak(Box::new(Lib::init()?));
    *shared = Some(lib);
    Ok(lib)
}

/// An initialised NVML, and the XID events it listens to.
pub struct Nvml {
    lib: &'static Lib,
    xid: Option<xid::Xid>,
    /// Per GPU index, the newest process-utilisation sample seen (µs), so
    /// that each reading covers only the time since the previous one.
    process_util_seen: std::collections::HashMap<u32, u64>,
    /// Each GPU's UUID by index, as last read: a lost GPU no longer tells it.
    uuids: BTreeMap<u32, String>,
}

impl Nvml {
    /// Loads `libnvidia-ml.so.1`. Without a driver: [`GpuError::NoDriver`].
    /// Registers for XID (critical error) events where the devices allow it.
    pub fn load() -> Result<Nvml, GpuError> {
        match shared_lib() {
            Ok(lib) => Ok(Nvml {
                lib,
                xid: xid::Xid::register(lib),
                process_util_seen: Default::default(),
                uuids: BTreeMap::new(),
            }),
            Err(e @ (NvmlError::LibloadingError(_) | NvmlError::DriverNotLoaded | NvmlError::LibraryNotFound)) => {
                Err(GpuError::NoDriver(e.to_string()))
            }
            Err(e) => Err(GpuError::Nvml(e.to_string())),
        }
    }
}

fn nvml_err(e: NvmlError) -> GpuError {
    GpuError::Nvml(e.to_string())
}

/// The errors that mean "this device does not report that value" (`None`),
/// as opposed to a device or driver that is gone.
fn is_missing(e: &NvmlError) -> bool {
    !matches!(
        e,
        NvmlError::GpuLost
            | NvmlError::Uninitialized
            | NvmlError::DriverNotLoaded
            | NvmlError::LibloadingError(_)
            | NvmlError::LibraryNotFound
            | NvmlError::LibRmVersionMismatch
            | NvmlError::ResetRequired
    )
}

/// The profile part of a MIG device name (`NVIDIA H100 80GB HBM3 MIG 1g.10gb` → `1g.10gb`).
fn mig_profile(name: &str) -> String {
    name.split_whitespace().last().unwrap_or("unknown").to_string()
}

/// `P0`…`P15`; `None` for an unknown state.
fn pstate_name(p: PerformanceState) -> Option<String> {
    use PerformanceState as P;
    let n = match p {
        P::Zero => 0,
        P::One => 1,
        P::Two => 2,
        P::Three => 3,
        P::Four => 4,
        P::Five => 5,
        P::Six => 6,
        P::Seven => 7,
        P::Eight => 8,
        P::Nine => 9,
        P::Ten => 10,
        P::Eleven => 11,
        P::Twelve => 12,
        P::Thirteen => 13,
        P::Fourteen => 14,
        P::Fifteen => 15,
        P::Unknown => return None,
    };
    Some(format!("P{n}"))
}

/// A field value read as a flag (non-zero = yes); `None` when it could not be read.
fn field_flag(sample: Option<&Result<FieldValueSample, NvmlError>>) -> Option<bool> {
    Some(match sample?.as_ref().ok()?.value.as_ref().ok()? {
        SampleValue::U32(v) => *v != 0,
        SampleValue::U64(v) => *v != 0,
        SampleValue::I64(v) => *v != 0,
        SampleValue::F64(v) => *v != 0.0,
    })
}

/// A field value read as a count; `None` when it could not be read.
fn field_count(sample: Option<&Result<FieldValueSample, NvmlError>>) -> Option<u64> {
    match sample?.as_ref().ok()?.value.as_ref().ok()? {
        SampleValue::U32(v) => Some(u64::from(*v)),
        SampleValue::U64(v) => Some(*v),
        SampleValue::I64(v) => u64::try_from(*v).ok(),
        SampleValue::F64(v) => (v.is_finite() && *v >= 0.0).then_some(*v as u64),
    }
}

/// The sample of a GPU NVML calls lost: its index, its UUID where it was
/// read before, the XIDs seen (from the event set, not the device), and the
/// fault. Nothing else can be read from it.
fn lost_sample(index: u32, uuid: Option<String>, xid: Option<&xid::Xid>) -> GpuSample {
    let uuid = uuid.unwrap_or_default();
    GpuSample {
        index,
        xid_last: xid.and_then(|x| x.last(&uuid)),
        xid_count: xid.and_then(|x| x.count(&uuid)),
        xids_recent: xid.map(|x| x.recent(&uuid)).unwrap_or_default(),
        health_fault: Some(GPU_LOST.into()),
        uuid,
        ..GpuSample::default()
    }
}

impl Backend for Nvml {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn mig_changes(&self) -> Result<(), String> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        crate::tool::find_in_path("nvidia-smi", &path).map(|_| ()).ok_or_else(|| crate::smi::NO_SMI_FOR_MIG.to_string())
    }

    fn apply_mig_layout(&mut self, gpu: u32, layout: &[crate::MigSlot]) -> Result<(), GpuError> {
        crate::smi::apply_mig_layout_on_path(&std::env::var_os("PATH").unwrap_or_default(), gpu, layout)
    }

    fn inventory(&mut self) -> Result<Vec<GpuInfo>, GpuError> {
        let count = self.lib.device_count().map_err(nvml_err)?;
        let mut gpus = Vec::new();
        let mut bus_to_index: BTreeMap<String, u32> = BTreeMap::new();
        let mut links: Vec<(u32, String)> = Vec::new();
        for i in 0..count {
            let d = self.lib.device_by_index(i).map_err(nvml_err)?;
            let name = d.name().map_err(nvml_err)?;
            let memory_mb = d.memory_info().map_err(nvml_err)?.total / MIB;
            let pci = d.pci_info().ok().map(|p| p.bus_id);
            if let Some(b) = &pci {
                bus_to_index.insert(b.to_ascii_lowercase(), i);
            }
            // NVLink peers: a missing link or no NVLink ends the scan.
            for link in 0..NVLINK_MAX_LINKS {
                let l = d.link_wrapper_for(link);
                match (l.is_active(), l.remote_pci_info()) {
                    (Ok(true), Ok(remote)) => links.push((i, remote.bus_id.to_ascii_lowercase())),
                    (Ok(_), _) => {}
                    (Err(_), _) => break,
                }
            }
            let mig_on = matches!(d.mig_mode(), Ok(m) if m.current == 1);
            let mig = if mig_on {
                let n = d.mig_device_count().unwrap_or(0);
                let mut list = Vec::new();
                for m in 0..n {
                    if let Ok(md) = d.mig_device_by_index(m) {
                        list.push(MigInfo {
                            profile: md.name().map(|n| mig_profile(&n)).unwrap_or_else(|_| "unknown".into()),
                            uuid: md.uuid().map_err(nvml_err)?,
                            // nvml-wrapper 0.13 has no safe nvmlDeviceGetGpuInstanceId: the
                            // MIG device index stands in (sample() uses the same numbering).
                            gi_id: Some(m + 1),
                            ci_id: None,
                            memory_mb: md.memory_info().map(|m| m.total / MIB).unwrap_or(0),
                            placement: None,
                        });
                    }
                }
                Some(list)
            } else {
                None
            };
            gpus.push(GpuInfo {
                kind: crate::Accelerator::NvidiaGpu,
                index: i,
                uuid: d.uuid().map_err(nvml_err)?,
                model: short_model(&name),
                name,
                memory_mb,
                pci_bus_id: pci,
                nvlink_group: None,
                nvlink_peers: Vec::new(),
                numa_node: None,
                mig,
            });
        }
        // NVLink islands: connected components of the link graph.
        let mut group: Vec<u32> = (0..count).collect();
        fn root(g: &mut [u32], mut x: u32) -> u32 {
            while g[x as usize] != x {
                g[x as usize] = g[g[x as usize] as usize];
                x = g[x as usize];
            }
            x
        }
        for (a, bus) in &links {
            if let Some(&b) = bus_to_index.get(bus) {
                let (ra, rb) = (root(&mut group, *a), root(&mut group, b));
                group[ra.max(rb) as usize] = ra.min(rb);
            }
        }
        let linked: BTreeSet<u32> =
            links.iter().flat_map(|(a, bus)| [Some(*a), bus_to_index.get(bus).copied()]).flatten().collect();
        // Peers: the GPUs of this node at the other end of an active link (a link to
        // an NVSwitch leads to no GPU here, and names no peer).
        let bus_of: BTreeMap<u32, String> =
            gpus.iter().filter_map(|g| Some((g.index, g.pci_bus_id.clone()?))).collect();
        for g in &mut gpus {
            if linked.contains(&g.index) {
                g.nvlink_group = Some(root(&mut group, g.index));
            }
            let peers: BTreeSet<u32> = links
                .iter()
                .filter(|(a, _)| *a == g.index)
                .filter_map(|(_, bus)| bus_to_index.get(bus).copied())
                .filter(|p| *p != g.index)
                .collect();
            g.nvlink_peers = peers.iter().filter_map(|p| bus_of.get(p).cloned()).collect();
        }
        self.uuids = gpus.iter().map(|g| (g.index, g.uuid.clone())).collect();
        Ok(gpus)
    }

    fn sample(&mut self) -> Result<Vec<GpuSample>, GpuError> {
        if let Some(x) = &mut self.xid {
            x.drain();
        }
        let lib = self.lib;
        let count = lib.device_count().map_err(nvml_err)?;
        let mut out = Vec::with_capacity(count as usize);
        for i in 0..count {
            let read = lib.device_by_index(i).and_then(|d| Ok((d.uuid()?, d)));
            let (uuid, d) = match read {
                Ok(x) => x,
                Err(NvmlError::GpuLost) => {
                    out.push(lost_sample(i, self.uuids.get(&i).cloned(), self.xid.as_ref()));
                    continue;
                }
                Err(e) => return Err(GpuError::Nvml(format!("GPU {i}: {e}"))),
            };
            self.uuids.insert(i, uuid.clone());
            match self.sample_device(i, &d, uuid.clone()) {
                Ok(s) => out.push(s),
                Err(NvmlError::GpuLost) => out.push(lost_sample(i, Some(uuid), self.xid.as_ref())),
                Err(e) => {
                    return Err(GpuError::Nvml(format!(
                        "GPU {i} ({uuid}): {e}. Check `nvidia-smi` and `dmesg` for Xid errors; a GPU reset or reboot may be needed"
                    )));
                }
            }
        }
        Ok(out)
    }
}

impl Nvml {
    /// One GPU's sample. A value the device does not report is `None`; any
    /// other error (a lost device, a driver gone) is returned, for
    /// [`Backend::sample`] to tell a lost GPU from the rest.
    fn sample_device(&mut self, i: u32, d: &Device<'_>, uuid: String) -> Result<GpuSample, NvmlError> {
        macro_rules! get {
            ($e:expr) => {
                match $e {
                    Ok(v) => Some(v),
                    Err(e) if is_missing(&e) => None,
                    Err(e) => return Err(e),
                }
            };
        }
        let util = get!(d.utilization_rates());
        let mem = get!(d.memory_info());
        // Each process's SM share since the last sample (jobs sharing the
        // GPU are told apart by it); a device without it leaves it out.
        let seen = self.process_util_seen.get(&i).copied();
        let mut sm_of: std::collections::HashMap<u32, (u64, u32)> = std::collections::HashMap::new();
        for s in d.process_utilization_stats(seen).unwrap_or_default() {
            let e = sm_of.entry(s.pid).or_insert((s.timestamp, s.sm_util));
            if s.timestamp >= e.0 {
                *e = (s.timestamp, s.sm_util);
            }
        }
        if let Some(newest) = sm_of.values().map(|(t, _)| *t).max() {
            self.process_util_seen.insert(i, newest);
        }
        let processes = get!(d.running_compute_processes())
            .unwrap_or_default()
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                name: self.lib.sys_process_name(p.pid, 256).ok().filter(|n| !n.is_empty()),
                used_memory_mb: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes / MIB),
                    UsedGpuMemory::Unavailable => None,
                },
                sm_util_pct: sm_of.get(&p.pid).map(|(_, u)| *u),
                gi_id: p.gpu_instance_id,
                ci_id: p.compute_instance_id,
            })
            .collect();
        let mut mig = Vec::new();
        if matches!(get!(d.mig_mode()), Some(m) if m.current == 1) {
            for m in 0..get!(d.mig_device_count()).unwrap_or(0) {
                let Some(md) = get!(d.mig_device_by_index(m)) else { continue };
                let mm = get!(md.memory_info());
                mig.push(MigSample {
                    // The same numbering as inventory(): see there.
                    gi_id: m + 1,
                    ci_id: None,
                    memory_used_mb: mm.as_ref().map(|m| m.used / MIB),
                    memory_total_mb: mm.as_ref().map(|m| m.total / MIB),
                });
            }
        }
        // Row remapping: nvml-wrapper 0.13 has no safe nvmlDeviceGetRemappedRows,
        // so its counts and flags are read as the field values NVML documents for them.
        let remap = get!(d.field_values_for(&[
            FieldId(NVML_FI_DEV_REMAPPED_PENDING),
            FieldId(NVML_FI_DEV_REMAPPED_FAILURE),
            FieldId(NVML_FI_DEV_REMAPPED_COR),
            FieldId(NVML_FI_DEV_REMAPPED_UNC),
        ]))
        .unwrap_or_default();
        // KB/s over NVML's last 20 ms window; NVML's KB are 1024 bytes.
        let pcie_tx = get!(d.pcie_throughput(PcieUtilCounter::Send)).map(|kb| f64::from(kb) * 1024.0);
        let pcie_rx = get!(d.pcie_throughput(PcieUtilCounter::Receive)).map(|kb| f64::from(kb) * 1024.0);
        // Retired pages (before Ampere): single- and double-bit causes together.
        let single = get!(d.retired_pages(RetirementCause::MultipleSingleBitEccErrors)).map(|p| p.len() as u64);
        let double = get!(d.retired_pages(RetirementCause::DoubleBitEccError)).map(|p| p.len() as u64);
        // NVLink: the error counters of the active links, summed. A link that
        // does not answer ends the scan (no NVLink, or no more links).
        let mut nvlink_errors: Option<u64> = None;
        for link in 0..NVLINK_MAX_LINKS {
            let l = d.link_wrapper_for(link);
            match l.is_active() {
                Ok(true) => {}
                Ok(false) => continue,
                Err(_) => break,
            }
            for counter in
                [ErrorCounter::DlReplay, ErrorCounter::DlRecovery, ErrorCounter::DlCrcFlit, ErrorCounter::DlCrcData]
            {
                if let Some(n) = get!(l.error_counter(counter)) {
                    nvlink_errors = Some(nvlink_errors.unwrap_or(0).saturating_add(n));
                }
            }
        }
        let xid = self.xid.as_ref();
        Ok(GpuSample {
            index: i,
            gpu_util_pct: util.as_ref().map(|u| f64::from(u.gpu)),
            mem_util_pct: util.as_ref().map(|u| f64::from(u.memory)),
            memory_used_mb: mem.as_ref().map(|m| m.used / MIB),
            memory_total_mb: mem.as_ref().map(|m| m.total / MIB),
            memory_free_mb: mem.as_ref().map(|m| m.free / MIB),
            memory_reserved_mb: mem.as_ref().map(|m| m.reserved / MIB),
            temperature_c: get!(d.temperature(TemperatureSensor::Gpu)).map(f64::from),
            // NVML has memory temperature only as a field value; not read here.
            memory_temperature_c: None,
            junction_temperature_c: None,
            slowdown_temperature_c: get!(d.temperature_threshold(TemperatureThreshold::Slowdown)).map(f64::from),
            power_draw_w: get!(d.power_usage()).map(|mw| f64::from(mw) / 1000.0),
            power_limit_w: get!(d.enforced_power_limit()).map(|mw| f64::from(mw) / 1000.0),
            energy_mj: get!(d.total_energy_consumption()),
            sm_clock_mhz: get!(d.clock_info(Clock::SM)),
            mem_clock_mhz: get!(d.clock_info(Clock::Memory)),
            fan_pct: get!(d.fan_speed(0)).map(f64::from),
            pstate: get!(d.performance_state()).and_then(pstate_name),
            ecc_corrected_volatile: get!(d.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)),
            ecc_uncorrected_volatile: get!(d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)),
            xid_last: xid.and_then(|x| x.last(&uuid)),
            xid_count: xid.and_then(|x| x.count(&uuid)),
            xids_recent: xid.map(|x| x.recent(&uuid)).unwrap_or_default(),
            remap_pending: field_flag(remap.first()),
            remap_failed: field_flag(remap.get(1)),
            retired_pages: crate::smi::report::sum_present([single, double]),
            retired_pages_pending: get!(d.are_pages_pending_retired()),
            nvlink_errors,
            pcie_replays: get!(d.pcie_replay_counter()).map(u64::from),
            enc_util_pct: get!(d.encoder_utilization()).map(|u| f64::from(u.utilization)),
            dec_util_pct: get!(d.decoder_utilization()).map(|u| f64::from(u.utilization)),
            pcie_tx_bytes_per_s: pcie_tx,
            pcie_rx_bytes_per_s: pcie_rx,
            remapped_rows_correctable: field_count(remap.get(2)),
            remapped_rows_uncorrectable: field_count(remap.get(3)),
            // A lost GPU is told by the caller; nothing else here says "unhealthy".
            health_fault: None,
            throttle_reasons: get!(d.current_throttle_reasons()).map(|r| throttle_reason_names(r.bits())),
            processes,
            mig,
            uuid,
        })
    }
}

/// XID (critical error) events: registered at load, drained without waiting
/// at each sample. Only where NVML has event sets (Linux).
mod xid {
    use std::collections::{BTreeMap, BTreeSet, VecDeque};

    use super::Lib;
    use crate::RECENT_XIDS;

    /// What was seen of the watched devices' XIDs, by UUID: the count and
    /// the last [`RECENT_XIDS`], oldest first. No NVML in it.
    #[derive(Debug, Default)]
    pub(super) struct XidLog {
        /// Devices registered for XID events.
        devices: BTreeSet<String>,
        count: BTreeMap<String, u64>,
        recent: BTreeMap<String, VecDeque<u64>>,
    }

    impl XidLog {
        pub(super) fn watch(&mut self, uuid: String) {
            self.devices.insert(uuid);
        }

        pub(super) fn watches_any(&self) -> bool {
            !self.devices.is_empty()
        }

        pub(super) fn record(&mut self, uuid: &str, xid: u64) {
            let n = self.count.entry(uuid.to_string()).or_insert(0);
            *n = n.saturating_add(1);
            let recent = self.recent.entry(uuid.to_string()).or_default();
            if recent.len() == RECENT_XIDS {
                recent.pop_front();
            }
            recent.push_back(xid);
        }

        /// The last XID of a device (0 = none since load); `None` when it is not watched.
        pub(super) fn last(&self, uuid: &str) -> Option<u64> {
            self.devices.contains(uuid).then(|| self.recent.get(uuid).and_then(|r| r.back().copied()).unwrap_or(0))
        }

        /// How many XIDs a device had since load; `None` when it is not watched.
        pub(super) fn count(&self, uuid: &str) -> Option<u64> {
            self.devices.contains(uuid).then(|| self.count.get(uuid).copied().unwrap_or(0))
        }

        /// The last XIDs of a device, oldest first.
        pub(super) fn recent(&self, uuid: &str) -> Vec<u64> {
            self.recent.get(uuid).map(|r| r.iter().copied().collect()).unwrap_or_default()
        }
    }

    #[cfg(target_os = "linux")]
    pub(super) struct Xid {
        set: nvml_wrapper::EventSet<'static>,
        log: XidLog,
    }

    #[cfg(target_os = "linux")]
    impl Xid {
        /// Registers every device that supports XID events. If a registration
        /// fails, NVML frees the set: then no XIDs at all (`xid_last: None`).
        pub(super) fn register(lib: &'static Lib) -> Option<Xid> {
            use nvml_wrapper::bitmasks::event::EventTypes;
            let mut set = lib.create_event_set().ok()?;
            let mut log = XidLog::default();
            for i in 0..lib.device_count().ok()? {
                let Ok(d) = lib.device_by_index(i) else { continue };
                let supported = d.supported_event_types().is_ok_and(|t| t.contains(EventTypes::CRITICAL_XID_ERROR));
                let Ok(uuid) = d.uuid() else { continue };
                if !supported {
                    continue;
                }
                set = d.register_events(EventTypes::CRITICAL_XID_ERROR, set).ok()?;
                log.watch(uuid);
            }
            log.watches_any().then_some(Xid { set, log })
        }

        /// Takes the pending events (`wait(0)` returns at once when there are none).
        pub(super) fn drain(&mut self) {
            use nvml_wrapper::enums::event::XidError;
            // Bounded: a storm of events cannot hold up the sample.
            for _ in 0..1024 {
                let Ok(event) = self.set.wait(0) else { break };
                if let (Ok(uuid), Some(XidError::Value(xid))) = (event.device.uuid(), event.event_data) {
                    self.log.record(&uuid, xid);
                }
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) struct Xid {
        log: XidLog,
    }

    #[cfg(not(target_os = "linux"))]
    impl Xid {
        pub(super) fn register(_: &'static Lib) -> Option<Xid> {
            None
        }
        pub(super) fn drain(&mut self) {}
    }

    impl Xid {
        pub(super) fn last(&self, uuid: &str) -> Option<u64> {
            self.log.last(uuid)
        }
        pub(super) fn count(&self, uuid: &str) -> Option<u64> {
            self.log.count(uuid)
        }
        pub(super) fn recent(&self, uuid: &str) -> Vec<u64> {
            self.log.recent(uuid)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_the_error_says_so_and_suggests_simulation() {
        // This machine (and CI) has no NVIDIA driver; on one that has, NVML loads instead.
        match Nvml::load() {
            Err(e @ GpuError::NoDriver(_)) => {
                let msg = e.to_string();
                assert!(msg.contains("no GPU driver found") && msg.contains("--simulate-gpus"), "{msg}");
            }
            Err(other) => panic!("unexpected error kind: {other}"),
            Ok(mut n) => {
                let inv = n.inventory().expect("inventory on a GPU machine");
                assert!(inv.iter().all(|g| !g.uuid.is_empty()));
                let samples = n.sample().expect("sample on a GPU machine");
                assert_eq!(samples.len(), inv.len());
                assert!(samples.iter().zip(&inv).all(|(s, g)| s.uuid == g.uuid));
            }
        }
    }

    #[test]
    fn mig_profiles_come_from_device_names() {
        assert_eq!(mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb"), "1g.10gb");
    }

    #[test]
    fn missing_values_and_lost_devices_are_told_apart() {
        assert!(is_missing(&NvmlError::NotSupported));
        assert!(is_missing(&NvmlError::NoPermission));
        assert!(is_missing(&NvmlError::FunctionNotFound));
        assert!(!is_missing(&NvmlError::GpuLost));
        assert!(!is_missing(&NvmlError::DriverNotLoaded));
        assert_eq!(pstate_name(PerformanceState::Eight).as_deref(), Some("P8"));
        assert_eq!(pstate_name(PerformanceState::Unknown), None);
    }

    #[test]
    fn xids_are_counted_and_the_last_few_kept_per_device() {
        let mut log = xid::XidLog::default();
        log.watch("GPU-a".into());
        log.watch("GPU-b".into());
        assert_eq!((log.last("GPU-a"), log.count("GPU-a"), log.recent("GPU-a")), (Some(0), Some(0), vec![]));
        for x in [13, 31, 13] {
            log.record("GPU-a", x);
        }
        assert_eq!((log.last("GPU-a"), log.count("GPU-a"), log.recent("GPU-a")), (Some(13), Some(3), vec![13, 31, 13]));
        assert_eq!((log.last("GPU-b"), log.count("GPU-b")), (Some(0), Some(0)), "per device");
        for x in 1..=10 {
            log.record("GPU-b", x);
        }
        assert_eq!(log.recent("GPU-b"), (3..=10).collect::<Vec<u64>>(), "the last RECENT_XIDS, oldest first");
        assert_eq!((log.last("GPU-b"), log.count("GPU-b")), (Some(10), Some(10)));
        assert_eq!((log.last("GPU-c"), log.count("GPU-c")), (None, None), "not watched");
    }

    #[test]
    fn a_lost_gpu_is_a_sample_that_says_so() {
        let s = lost_sample(3, Some("GPU-x".into()), None);
        assert_eq!((s.index, s.uuid.as_str()), (3, "GPU-x"));
        assert_eq!(s.health_fault.as_deref(), Some(GPU_LOST));
        assert!(GPU_LOST.contains("fallen off the bus") && GPU_LOST.contains("NVML_ERROR_GPU_IS_LOST"));
        assert_eq!((s.gpu_util_pct, s.memory_used_mb, s.xid_count), (None, None, None), "nothing else is known");
        assert_eq!(lost_sample(1, None, None).uuid, "", "a UUID never read stays unknown");
    }
}
