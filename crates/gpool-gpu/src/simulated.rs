//! A simulated inventory for machines without GPUs: `8xH100-80GB`,
//! `4xA100-80GB,4xL4`, or with MIG: `1xH100-80GB:mig=3g.40gb+2g.20gb+1g.10gb+1g.10gb`,
//! or with GPUs that run hot: `4xH100-80GB:hot=2` (indices within the group).
//! UUIDs are stable for a given spec and host name, so a restarted daemon
//! sees the same devices.
//!
//! Samples follow what jobs declare ([`Simulated::with_loads`]), the way
//! real hardware would report it, and deterministically (no randomness, no
//! clock): utilisation as declared; memory as declared plus a small driver
//! reserve; power from idle (a tenth of the limit) up to the limit with
//! utilisation; temperature approaching 30 + 0.5 × util °C with a first-order
//! lag from one sample to the next; SM clock and pstate high under load, low
//! when idle; throttle reason `idle` when nothing runs. A hot GPU settles
//! [`HOT_EXTRA_C`] warmer: under load it reaches its slowdown temperature
//! ([`SLOWDOWN_C`]), and then holds there with its SM clock cut to
//! [`THROTTLED_CLOCK_FRACTION`] and `hw_thermal_slowdown` reported, as a GPU
//! with a failing fan or a blocked air path does. On a MIG-enabled GPU
//! the GPU-level utilisation is `None` (real hardware says `[N/A]`) and each
//! instance has a [`MigSample`].
//!
//! The spec and the devices it makes are `simulated/spec.rs`'s; this file is
//! the backend: samples, MIG layouts applied, faults injected.

use std::fmt;

use crate::model::{mig_gpu_slices, mig_profile_memory_mb};
use crate::{Backend, GpuError, GpuInfo, GpuProcess, GpuSample, InjectedFault, MigInfo, MigSample, MigSlot};

mod spec;

use spec::fake_uuid;
pub use spec::kind_of_model;

/// What a job does on a simulated device (a GPU or a MIG instance), as it declares it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimLoad {
    pub gpu_util_pct: f64,
    pub memory_used_mb: u64,
    pub pids: Vec<u32>,
    /// Each pid's memory, when several jobs share the device (as NVML
    /// reports it per process); empty: the memory is split evenly.
    pub pid_memory_mb: Vec<u64>,
    /// Each pid's share of SM time in percent, likewise.
    pub pid_util_pct: Vec<f64>,
}

/// Called with a device UUID (`GPU-…` or `MIG-…`); `None` = nothing runs there.
pub type LoadSource = Box<dyn Fn(&str) -> Option<SimLoad> + Send>;

/// Temperature with nothing running, °C.
const AMBIENT_C: f64 = 30.0;
/// Degrees above ambient per percent of utilisation, at steady state.
const C_PER_UTIL_PCT: f64 = 0.5;
/// How far the temperature moves toward its steady state in one sample.
const TEMP_LAG: f64 = 0.5;
/// Idle power as a fraction of the power limit.
const IDLE_POWER_FRACTION: f64 = 0.1;
/// Clocks of a simulated GPU, whatever its model.
const SM_CLOCK_IDLE_MHZ: u32 = 345;
const SM_CLOCK_BOOST_MHZ: u32 = 1980;
const MEM_CLOCK_MHZ: u32 = 2619;
/// PCIe traffic of an idle GPU (driver housekeeping), bytes per second.
const PCIE_IDLE_BYTES_PER_S: f64 = 64.0 * 1024.0;
/// Host-to-GPU bytes per second per percent of use (a data loader's share of
/// a x16 Gen5 link at full use: about 2 GB/s).
const PCIE_BYTES_PER_S_PER_UTIL_PCT: f64 = 20.0 * 1024.0 * 1024.0;
/// GPU slices of a full MIG-capable GPU.
const MIG_SLICES: f64 = 7.0;
/// Frame buffer the driver keeps for itself: 528 MiB of an H100's 81,559
/// in the recorded `nvidia-smi -q` (about 0.65%).
const RESERVED_FB_FRACTION: f64 = 0.0065;
/// HBM runs this much warmer than the GPU die under load, and at idle.
const MEMORY_TEMP_OFFSET_C: f64 = 4.0;
/// Where a simulated GPU starts slowing its clocks for heat (an H100 SXM's
/// `GPU Slowdown Temp` is 87–90 °C, depending on the board).
pub const SLOWDOWN_C: f64 = 90.0;
/// How much warmer a GPU marked `hot=` settles than a healthy one.
pub const HOT_EXTRA_C: f64 = 45.0;
/// A thermally throttled GPU's SM clock, as a share of its boost clock.
pub const THROTTLED_CLOCK_FRACTION: f64 = 0.6;
/// Fan speed at ambient, and its rise per °C above it.
const FAN_IDLE_PCT: f64 = 30.0;
const FAN_PCT_PER_C: f64 = 1.5;

/// A parsed `--simulate-gpus` spec, and where its load comes from.
pub struct Simulated {
    gpus: Vec<GpuInfo>,
    /// Goes into UUIDs, as on `parse`.
    host: String,
    /// Layouts applied so far: new instances get new UUIDs and ids.
    layouts: u32,
    loads: Option<LoadSource>,
    /// Each GPU's temperature at the last sample (°C), for the lag.
    temps: Vec<f64>,
    /// The GPUs marked `hot=`.
    hot: Vec<bool>,
    /// Each GPU's energy since the backend started (mJ), and when it was
    /// last sampled: DCGM's total energy counter grows with the power drawn.
    energy_mj: Vec<f64>,
    last_sample: Option<std::time::Instant>,
    /// Faults injected per GPU index (`gpool nodes inject`).
    faults: std::collections::BTreeMap<u32, SimFaults>,
}

/// What one simulated GPU was told to show.
#[derive(Clone, Debug, Default)]
struct SimFaults {
    xid_count: u64,
    xids: Vec<u64>,
    ecc_uncorrected: u64,
    gone: bool,
    /// Shown in the next sample, then gone: XID 79 is the driver's last
    /// word about a GPU that fell off the bus.
    gone_after_next: bool,
}

impl fmt::Debug for Simulated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Simulated")
            .field("gpus", &self.gpus)
            .field("loads", &self.loads.as_ref().map(|_| "LoadSource"))
            .field("temps", &self.temps)
            .finish()
    }
}

impl Simulated {
    /// Samples follow what `source` says runs on each device (GPU or MIG
    /// instance), instead of every device idling.
    pub fn with_loads(mut self, source: LoadSource) -> Simulated {
        self.loads = Some(source);
        self
    }

    fn load(&self, uuid: &str) -> Option<SimLoad> {
        self.loads.as_ref().and_then(|source| source(uuid))
    }
}

/// A power limit from the memory size, not from a model table: 8.75 W per GB
/// (80 GB → 700 W), within 70–1000 W.
fn power_limit_w(memory_mb: u64) -> f64 {
    ((memory_mb as f64 / 1024.0).round() * 8.75).clamp(70.0, 1000.0)
}

/// The memory the driver itself holds on a device: 0.1 % of it, at least 1 MiB.
fn driver_reserve_mb(total_mb: u64) -> u64 {
    (total_mb / 1000).max(1)
}

/// Declared utilisation within 0–100 (anything not a number: 0).
fn util_of(load: Option<&SimLoad>) -> f64 {
    load.map_or(0.0, |l| if l.gpu_util_pct.is_nan() { 0.0 } else { l.gpu_util_pct.clamp(0.0, 100.0) })
}

/// Memory used: the declaration capped at the device's size, plus the reserve.
fn used_mb(load: Option<&SimLoad>, total_mb: u64) -> u64 {
    load.map_or(0, |l| l.memory_used_mb).saturating_add(driver_reserve_mb(total_mb)).min(total_mb)
}

/// The declared pids, with the declared memory split evenly between them
/// (the first gets the remainder).
fn processes(load: Option<&SimLoad>, total_mb: u64, gi_id: Option<u32>, ci_id: Option<u32>) -> Vec<GpuProcess> {
    let Some(l) = load else { return Vec::new() };
    let n = l.pids.len() as u64;
    let declared = l.memory_used_mb.min(total_mb);
    let each = |i: usize| match l.pid_memory_mb.get(i) {
        Some(mb) if l.pid_memory_mb.len() == l.pids.len() => *mb,
        _ => declared / n + if i == 0 { declared % n } else { 0 },
    };
    l.pids
        .iter()
        .enumerate()
        .map(|(i, &pid)| GpuProcess {
            pid,
            name: None,
            used_memory_mb: Some(each(i)),
            sm_util_pct: (l.pid_util_pct.len() == l.pids.len())
                .then(|| l.pid_util_pct[i].clamp(0.0, 100.0).round() as u32),
            gi_id,
            ci_id,
        })
        .collect()
}

impl Backend for Simulated {
    fn name(&self) -> &'static str {
        "simulated"
    }

    fn inventory(&mut self) -> Result<Vec<GpuInfo>, GpuError> {
        Ok(self.gpus.clone())
    }

    /// Checks what a real GPU would (MIG mode on, known profiles, no
    /// overlapping memory slices) and lays the GPU out at once.
    fn mig_changes(&self) -> Result<(), String> {
        Ok(())
    }

    fn apply_mig_layout(&mut self, gpu: u32, layout: &[MigSlot]) -> Result<(), GpuError> {
        let refuse = |why: String| GpuError::Mig { gpu, why };
        let host = self.host.clone();
        let g = self.gpus.iter_mut().find(|g| g.index == gpu).ok_or_else(|| refuse("no such GPU".into()))?;
        let Some(current) = &g.mig else { return Err(refuse("MIG mode is off".into())) };
        let same = |a: &[MigSlot]| {
            let mut now: Vec<(&str, Option<u32>)> =
                current.iter().map(|m| (m.profile.as_str(), m.placement.map(|p| p.0))).collect();
            let mut want: Vec<(&str, Option<u32>)> = a.iter().map(|s| (s.profile.as_str(), Some(s.start))).collect();
            now.sort();
            want.sort();
            now == want
        };
        if same(layout) {
            return Ok(());
        }
        // Memory slices of each profile: 1g 1 (2 for the double-memory 1g), 2g 2, 3g and 4g 4, 7g 8.
        let mut used = [false; 8];
        for s in layout {
            let compute: u32 = s.profile.split('g').next().and_then(|n| n.parse().ok()).unwrap_or(0);
            let size = match compute {
                1 if mig_profile_memory_mb(&s.profile).unwrap_or(0) > g.memory_mb / 7 => 2,
                1 => 1,
                2 => 2,
                3 | 4 => 4,
                7 => 8,
                _ => return Err(refuse(format!("unknown profile {}", s.profile))),
            };
            for k in s.start..s.start + size {
                let slot = used
                    .get_mut(k as usize)
                    .ok_or_else(|| refuse(format!("{} cannot start at {}", s.profile, s.start)))?;
                if *slot {
                    return Err(refuse(format!(
                        "{} at {} overlaps another instance: Insufficient Resources",
                        s.profile, s.start
                    )));
                }
                *slot = true;
            }
        }
        self.layouts += 1;
        let generation = self.layouts;
        g.mig = Some(
            layout
                .iter()
                .enumerate()
                .map(|(i, s)| MigInfo {
                    profile: s.profile.clone(),
                    uuid: format!("MIG-{}", fake_uuid(&format!("{host}/{gpu}/{generation}"), i as u32)),
                    gi_id: Some(generation * 8 + i as u32),
                    ci_id: Some(0),
                    placement: Some((s.start, 0)),
                    memory_mb: mig_profile_memory_mb(&s.profile).unwrap_or(0),
                })
                .collect(),
        );
        Ok(())
    }

    fn inject_fault(&mut self, gpu: u32, fault: Option<&InjectedFault>) -> Result<(), GpuError> {
        if !self.gpus.iter().any(|g| g.index == gpu) {
            return Err(GpuError::Inject(format!("this node has no GPU {gpu} (it has {} GPUs)", self.gpus.len())));
        }
        let Some(fault) = fault else {
            self.faults.remove(&gpu);
            return Ok(());
        };
        let f = self.faults.entry(gpu).or_default();
        match fault {
            InjectedFault::Xid(x) => {
                f.xid_count += 1;
                f.xids.push(*x);
                f.gone_after_next |= *x == 79;
                if f.xids.len() > crate::RECENT_XIDS {
                    f.xids.remove(0);
                }
            }
            InjectedFault::EccUncorrected => f.ecc_uncorrected += 1,
            InjectedFault::Gone => f.gone = true,
        }
        Ok(())
    }

    fn sample(&mut self) -> Result<Vec<GpuSample>, GpuError> {
        let mut out = Vec::with_capacity(self.gpus.len());
        let now = std::time::Instant::now();
        let elapsed_s = self.last_sample.map_or(0.0, |t| now.duration_since(t).as_secs_f64());
        self.last_sample = Some(now);
        for (i, g) in self.gpus.iter().enumerate() {
            let fault = self.faults.get(&g.index).cloned().unwrap_or_default();
            if fault.gone {
                // Fallen off the bus: the driver no longer lists it.
                continue;
            }
            let total = g.memory_mb;
            let mut s = GpuSample {
                index: g.index,
                uuid: g.uuid.clone(),
                memory_total_mb: Some(total),
                ecc_corrected_volatile: Some(0),
                ecc_uncorrected_volatile: Some(fault.ecc_uncorrected),
                xid_last: Some(fault.xids.last().copied().unwrap_or(0)),
                xid_count: Some(fault.xid_count),
                xids_recent: fault.xids.clone(),
                remap_pending: Some(false),
                remap_failed: Some(false),
                pcie_replays: Some(0),
                remapped_rows_correctable: Some(0),
                remapped_rows_uncorrectable: Some(0),
                // Training moves no video.
                enc_util_pct: Some(0.0),
                dec_util_pct: Some(0.0),
                ..GpuSample::default()
            };
            // The share of the GPU's compute that is busy: drives power, heat and clocks.
            let busy = match &g.mig {
                None => {
                    let load = self.load(&g.uuid);
                    let util = util_of(load.as_ref());
                    let used = used_mb(load.as_ref(), total);
                    s.gpu_util_pct = Some(util);
                    s.mem_util_pct = Some(util / 2.0);
                    s.memory_used_mb = Some(used);
                    s.processes = processes(load.as_ref(), total, None, None);
                    util
                }
                Some(instances) => {
                    // Real MIG GPUs report no GPU-level utilisation.
                    let mut busy = 0.0;
                    let mut used_sum = 0u64;
                    for m in instances {
                        let load = self.load(&m.uuid);
                        let util = util_of(load.as_ref());
                        let used = used_mb(load.as_ref(), m.memory_mb);
                        busy += util * f64::from(mig_gpu_slices(&m.profile).unwrap_or(1)) / MIG_SLICES;
                        used_sum = used_sum.saturating_add(used);
                        s.processes.extend(processes(load.as_ref(), m.memory_mb, m.gi_id, m.ci_id));
                        s.mig.push(MigSample {
                            gi_id: m.gi_id.unwrap_or_default(),
                            ci_id: m.ci_id,
                            memory_used_mb: Some(used),
                            memory_total_mb: Some(m.memory_mb),
                        });
                    }
                    s.memory_used_mb = Some(used_sum.min(total));
                    busy.min(100.0)
                }
            };
            // As NVML counts: total = used + free + reserved.
            let reserved = (total as f64 * RESERVED_FB_FRACTION).round() as u64;
            s.memory_reserved_mb = Some(reserved);
            s.memory_free_mb = s.memory_used_mb.map(|u| total.saturating_sub(reserved).saturating_sub(u));
            let hot = self.hot.get(i).copied().unwrap_or(false);
            let extra = if hot { HOT_EXTRA_C } else { 0.0 };
            let target = AMBIENT_C + C_PER_UTIL_PCT * busy + extra;
            let temp = self.temps.get(i).copied().unwrap_or(AMBIENT_C);
            // A GPU at its slowdown temperature slows down instead of getting hotter.
            let temp = (temp + TEMP_LAG * (target - temp)).min(SLOWDOWN_C + 1.0);
            if let Some(t) = self.temps.get_mut(i) {
                *t = temp;
            }
            let loaded = busy > 0.0;
            let throttled = loaded && temp >= SLOWDOWN_C;
            let limit = power_limit_w(total);
            let idle = limit * IDLE_POWER_FRACTION;
            let busy_share = if throttled { busy / 100.0 * THROTTLED_CLOCK_FRACTION } else { busy / 100.0 };
            let draw = idle + (limit - idle) * busy_share;
            s.power_limit_w = Some(limit);
            s.power_draw_w = Some(draw);
            if let Some(e) = self.energy_mj.get_mut(i) {
                *e += draw * elapsed_s * 1000.0;
                s.energy_mj = Some(*e as u64);
            }
            s.temperature_c = Some(temp);
            s.slowdown_temperature_c = Some(SLOWDOWN_C);
            s.memory_temperature_c = Some(temp + MEMORY_TEMP_OFFSET_C);
            s.fan_pct = Some((FAN_IDLE_PCT + FAN_PCT_PER_C * (temp - AMBIENT_C)).clamp(0.0, 100.0));
            s.sm_clock_mhz = Some(match (loaded, throttled) {
                (false, _) => SM_CLOCK_IDLE_MHZ,
                (true, false) => SM_CLOCK_BOOST_MHZ,
                (true, true) => (f64::from(SM_CLOCK_BOOST_MHZ) * THROTTLED_CLOCK_FRACTION) as u32,
            });
            s.mem_clock_mhz = Some(MEM_CLOCK_MHZ);
            // Host traffic grows with the work: data loading in, results out.
            s.pcie_rx_bytes_per_s = Some(PCIE_IDLE_BYTES_PER_S + PCIE_BYTES_PER_S_PER_UTIL_PCT * busy);
            s.pcie_tx_bytes_per_s = Some(PCIE_IDLE_BYTES_PER_S + PCIE_BYTES_PER_S_PER_UTIL_PCT * busy / 4.0);
            s.pstate = Some(if loaded { "P0" } else { "P8" }.to_string());
            s.throttle_reasons = Some(match (loaded, throttled) {
                (false, _) => vec!["idle".to_string()],
                (true, false) => Vec::new(),
                (true, true) => vec!["hw_thermal_slowdown".to_string()],
            });
            out.push(s);
        }
        for f in self.faults.values_mut().filter(|f| f.gone_after_next) {
            (f.gone, f.gone_after_next) = (true, false);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    /// A load source backed by a map the test can change between samples.
    fn shared_loads() -> (Arc<Mutex<HashMap<String, SimLoad>>>, LoadSource) {
        let map: Arc<Mutex<HashMap<String, SimLoad>>> = Arc::default();
        let m = Arc::clone(&map);
        (map, Box::new(move |uuid| m.lock().expect("lock").get(uuid).cloned()))
    }

    fn load(util: f64, mb: u64, pids: &[u32]) -> SimLoad {
        SimLoad {
            gpu_util_pct: util,
            memory_used_mb: mb,
            pids: pids.to_vec(),
            pid_memory_mb: Vec::new(),
            pid_util_pct: Vec::new(),
        }
    }

    /// Every DCGM field docs/telemetry.md lists has a value, and the energy
    /// counter never goes back.
    #[test]
    fn every_documented_dcgm_field_is_reported() {
        let mut s = Simulated::parse("1xH100-80GB,1xA100-80GB:mig=3g.40gb", "h").expect("valid");
        let first = s.sample().expect("sample");
        let second = s.sample().expect("sample");
        for (a, g) in first.iter().zip(&second) {
            assert!(g.mem_util_pct.is_some() || !g.mig.is_empty(), "{g:?}");
            for (name, present) in [
                ("FB_USED", g.memory_used_mb.is_some()),
                ("FB_FREE", g.memory_free_mb.is_some()),
                ("FB_RESERVED", g.memory_reserved_mb.is_some()),
                ("GPU_TEMP", g.temperature_c.is_some()),
                ("MEMORY_TEMP", g.memory_temperature_c.is_some()),
                ("POWER_USAGE", g.power_draw_w.is_some()),
                ("POWER_MGMT_LIMIT", g.power_limit_w.is_some()),
                ("TOTAL_ENERGY_CONSUMPTION", g.energy_mj.is_some()),
                ("SM_CLOCK", g.sm_clock_mhz.is_some()),
                ("MEM_CLOCK", g.mem_clock_mhz.is_some()),
                ("FAN_SPEED", g.fan_pct.is_some()),
                ("XID_ERRORS", g.xid_last.is_some()),
                ("ECC_SBE_VOL_TOTAL", g.ecc_corrected_volatile.is_some()),
                ("ECC_DBE_VOL_TOTAL", g.ecc_uncorrected_volatile.is_some()),
                ("CLOCK_THROTTLE_REASONS", g.throttle_reasons.is_some()),
            ] {
                assert!(present, "GPU {}: no DCGM_FI_DEV_{name}", g.index);
            }
            assert!(g.energy_mj >= a.energy_mj, "energy only grows");
            let parts =
                g.memory_used_mb.unwrap_or(0) + g.memory_free_mb.unwrap_or(0) + g.memory_reserved_mb.unwrap_or(0);
            assert_eq!(Some(parts), g.memory_total_mb, "used + free + reserved = total");
        }
    }

    #[test]
    fn without_a_load_source_every_device_idles() {
        let mut s = Simulated::parse("2xH100-80GB", "h").expect("valid");
        for g in s.sample().expect("sample") {
            assert_eq!((g.gpu_util_pct, g.pstate.as_deref(), g.sm_clock_mhz), (Some(0.0), Some("P8"), Some(345)));
            assert_eq!(g.throttle_reasons, Some(vec!["idle".to_string()]));
            assert_eq!((g.power_draw_w, g.power_limit_w), (Some(70.0), Some(700.0)));
            assert_eq!((g.memory_total_mb, g.memory_used_mb), (Some(81_511), Some(81)), "only the driver's reserve");
            assert_eq!((g.memory_reserved_mb, g.memory_free_mb), (Some(530), Some(81_511 - 530 - 81)));
            assert_eq!((g.ecc_corrected_volatile, g.ecc_uncorrected_volatile, g.xid_last), (Some(0), Some(0), Some(0)));
            assert_eq!(g.temperature_c, Some(30.0));
            assert!(g.processes.is_empty() && g.mig.is_empty());
        }
    }

    #[test]
    fn samples_follow_declared_loads() {
        let mut s = Simulated::parse("2xH100-80GB", "h").expect("valid");
        let inv = s.inventory().expect("inventory");
        let (map, source) = shared_loads();
        map.lock().expect("lock").insert(inv[0].uuid.clone(), load(150.0, 10_000, &[11, 12, 13]));
        // Allocated but declaring nothing: 0 %, still the job's pid.
        map.lock().expect("lock").insert(inv[1].uuid.clone(), load(f64::NAN, 0, &[21]));
        let mut s = s.with_loads(source);
        let out = s.sample().expect("sample");
        let busy = &out[0];
        assert_eq!(
            (busy.gpu_util_pct, busy.pstate.as_deref(), busy.sm_clock_mhz),
            (Some(100.0), Some("P0"), Some(1980))
        );
        assert_eq!((busy.power_draw_w, busy.throttle_reasons.as_deref()), (Some(700.0), Some(&[][..])));
        assert_eq!(busy.memory_used_mb, Some(10_000 + 81));
        let mem: Vec<(u32, Option<u64>)> = busy.processes.iter().map(|p| (p.pid, p.used_memory_mb)).collect();
        assert_eq!(mem, [(11, Some(3334)), (12, Some(3333)), (13, Some(3333))]);
        let idle = &out[1];
        assert_eq!((idle.gpu_util_pct, idle.pstate.as_deref(), idle.power_draw_w), (Some(0.0), Some("P8"), Some(70.0)));
        assert_eq!(idle.processes.iter().map(|p| p.pid).collect::<Vec<_>>(), [21]);
        // A declaration larger than the GPU is capped at its size.
        map.lock().expect("lock").insert(inv[1].uuid.clone(), load(40.0, 1_000_000, &[21]));
        let out = s.sample().expect("sample");
        assert_eq!((out[1].memory_used_mb, out[1].memory_free_mb), (Some(81_511), Some(0)));
        assert_eq!(out[1].processes[0].used_memory_mb, Some(81_511));
        assert_eq!(out[1].power_draw_w, Some(70.0 + 630.0 * 0.4));
    }

    #[test]
    fn temperature_lags_behind_the_load_and_is_deterministic() {
        let run = || {
            let mut s = Simulated::parse("1xA100-40GB", "h").expect("valid");
            let uuid = s.inventory().expect("inventory")[0].uuid.clone();
            let (map, source) = shared_loads();
            let mut s = s.with_loads(source);
            let mut temps = Vec::new();
            map.lock().expect("lock").insert(uuid.clone(), load(100.0, 1000, &[1]));
            for _ in 0..8 {
                temps.push(s.sample().expect("sample")[0].temperature_c.expect("temp"));
            }
            map.lock().expect("lock").remove(&uuid);
            for _ in 0..8 {
                temps.push(s.sample().expect("sample")[0].temperature_c.expect("temp"));
            }
            temps
        };
        let temps = run();
        assert_eq!(temps, run(), "same loads, same samples");
        assert_eq!(temps[0], 55.0, "half way from 30 to 80 in one sample");
        assert!(temps[..8].windows(2).all(|w| w[0] < w[1] && w[1] < 80.0), "{temps:?}");
        assert!(temps[7] > 79.0);
        assert!(temps[8..].windows(2).all(|w| w[0] > w[1] && w[1] > 30.0), "{temps:?}");
        assert!(temps[15] < 31.0);
    }

    #[test]
    fn mig_gpus_report_instances_and_no_gpu_utilisation() {
        let mut s = Simulated::parse("1xH100-80GB:mig=3g.40gb+2g.20gb+1g.10gb*2", "h").expect("valid");
        let inv = s.inventory().expect("inventory");
        let mig = inv[0].mig.clone().expect("mig");
        let (map, source) = shared_loads();
        map.lock().expect("lock").insert(mig[0].uuid.clone(), load(100.0, 20_000, &[7, 8]));
        map.lock().expect("lock").insert(mig[2].uuid.clone(), load(0.0, 50_000, &[9]));
        // A load declared on the parent of a MIG GPU cannot run there: ignored.
        map.lock().expect("lock").insert(inv[0].uuid.clone(), load(100.0, 1, &[1]));
        let out = s.with_loads(source).sample().expect("sample");
        let g = &out[0];
        assert_eq!((g.gpu_util_pct, g.mem_util_pct), (None, None));
        let per: Vec<(u32, Option<u64>, Option<u64>)> =
            g.mig.iter().map(|m| (m.gi_id, m.memory_used_mb, m.memory_total_mb)).collect();
        assert_eq!(
            per,
            [
                (1, Some(20_039), Some(39_750)),
                (2, Some(19), Some(19_750)),
                (3, Some(9_750), Some(9_750)),
                (4, Some(9), Some(9_750))
            ]
        );
        assert_eq!(g.memory_used_mb, Some(20_039 + 19 + 9_750 + 9));
        let procs: Vec<(u32, Option<u32>, Option<u64>)> =
            g.processes.iter().map(|p| (p.pid, p.gi_id, p.used_memory_mb)).collect();
        assert_eq!(procs, [(7, Some(1), Some(10_000)), (8, Some(1), Some(10_000)), (9, Some(3), Some(9_750))]);
        // 3 of 7 slices at 100 %.
        let power = g.power_draw_w.expect("power");
        assert!((power - (70.0 + 630.0 * 3.0 / 7.0)).abs() < 1e-9, "{power}");
        assert_eq!((g.pstate.as_deref(), g.throttle_reasons.as_deref()), (Some("P0"), Some(&[][..])));
    }

    #[test]
    fn a_hot_gpu_slows_down_at_its_slowdown_temperature_under_load_and_the_others_do_not() {
        let (loads, source) = shared_loads();
        let mut s = Simulated::parse("4xH100-80GB:hot=2", "h").expect("spec").with_loads(source);
        let uuids: Vec<String> = s.inventory().expect("inv").into_iter().map(|g| g.uuid).collect();
        let idle = s.sample().expect("sample");
        assert!(idle.iter().all(|g| g.throttle_reasons == Some(vec!["idle".to_string()])), "idle first");
        for u in &uuids {
            loads.lock().expect("lock").insert(u.clone(), load(100.0, 1000, &[1]));
        }
        let mut last = Vec::new();
        for _ in 0..6 {
            last = s.sample().expect("sample");
        }
        let hot = &last[2];
        assert_eq!(hot.throttle_reasons, Some(vec!["hw_thermal_slowdown".to_string()]));
        assert!(hot.temperature_c.expect("t") >= SLOWDOWN_C, "{:?}", hot.temperature_c);
        assert_eq!(hot.sm_clock_mhz, Some(1188));
        assert!(hot.power_draw_w.expect("w") < 700.0);
        for g in [&last[0], &last[1], &last[3]] {
            assert_eq!((g.throttle_reasons.as_deref(), g.sm_clock_mhz), (Some(&[][..]), Some(SM_CLOCK_BOOST_MHZ)));
            assert!(g.temperature_c.expect("t") < 81.0);
            assert_eq!(g.slowdown_temperature_c, Some(SLOWDOWN_C));
        }
    }
}

#[cfg(test)]
mod fault_tests {
    use super::*;

    #[test]
    fn injected_faults_show_in_samples_until_cleared() {
        let mut s = Simulated::parse("2xH100-80GB", "h").expect("spec");
        s.inject_fault(1, Some(&InjectedFault::Xid(79))).expect("inject");
        s.inject_fault(1, Some(&InjectedFault::Xid(79))).expect("inject");
        s.inject_fault(0, Some(&InjectedFault::EccUncorrected)).expect("inject");
        let out = s.sample().expect("sample");
        assert_eq!((out[1].xid_count, out[1].xid_last, out[1].xids_recent.clone()), (Some(2), Some(79), vec![79, 79]));
        assert_eq!(s.sample().expect("sample").len(), 1, "after XID 79 the GPU is gone from the bus");
        s.inject_fault(1, None).expect("clear");
        assert_eq!((out[0].ecc_uncorrected_volatile, out[0].xid_count), (Some(1), Some(0)));
        s.inject_fault(0, Some(&InjectedFault::Gone)).expect("inject");
        let out = s.sample().expect("sample");
        assert_eq!(out.iter().map(|g| g.index).collect::<Vec<_>>(), [1], "a gone GPU is not sampled");
        s.inject_fault(0, None).expect("clear");
        assert_eq!(s.sample().expect("sample").len(), 2);
        let err = s.inject_fault(7, Some(&InjectedFault::Gone)).expect_err("no GPU 7");
        assert!(err.to_string().contains("no GPU 7"), "{err}");
    }
}
