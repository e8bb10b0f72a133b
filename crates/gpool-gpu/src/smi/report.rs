//! What `nvidia-smi -q` says, as text or XML (`-q -x`): both parse into a
//! [`Report`].

use crate::{GpuSample, MigSample};

/// A parsed `nvidia-smi -q` or `-q -x`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub timestamp: Option<String>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    /// As the header says: may differ from `gpus.len()` in a trimmed file.
    pub attached_gpus: Option<u32>,
    pub gpus: Vec<ReportGpu>,
}

/// One GPU of a report.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReportGpu {
    pub name: Option<String>,
    pub serial: Option<String>,
    pub pci_bus_id: Option<String>,
    /// MIG mode now (`Some(false)` when off, `None` where unsupported).
    pub mig_mode: Option<bool>,
    pub mig_devices: Vec<ReportMigDevice>,
    /// The metrics, with processes and per-MIG-device memory. `index` is the
    /// GPU's position in the report. The report has no XIDs: `xid_*` stay
    /// `None` and empty.
    pub sample: GpuSample,
}

/// One MIG device of a report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportMigDevice {
    /// The MIG device index (as in `-L`).
    pub index: u32,
    pub gi_id: u32,
    pub ci_id: Option<u32>,
    pub sm_count: Option<u32>,
    pub memory_total_mb: Option<u64>,
    pub memory_used_mb: Option<u64>,
    pub memory_free_mb: Option<u64>,
}

impl ReportMigDevice {
    pub fn to_sample(&self) -> MigSample {
        MigSample {
            gi_id: self.gi_id,
            ci_id: self.ci_id,
            memory_used_mb: self.memory_used_mb,
            memory_total_mb: self.memory_total_mb,
        }
    }
}

/// Sums the counters that are present; `None` when none is.
pub(crate) fn sum_present(values: impl IntoIterator<Item = Option<u64>>) -> Option<u64> {
    values.into_iter().flatten().fold(None, |acc: Option<u64>, v| Some(acc.unwrap_or(0).saturating_add(v)))
}

/// `Some(true)` when any flag says yes, `Some(false)` when some say no and
/// none yes, `None` when none is present (`Pending Page Blacklist` and
/// `Pending Page Retirement` both spell the retired-page flag).
pub(crate) fn any_true(flags: impl IntoIterator<Item = Option<bool>>) -> Option<bool> {
    flags.into_iter().flatten().fold(None, |acc, f| Some(acc.unwrap_or(false) || f))
}

/// Names of clock event reasons as the reports spell them (XML element
/// suffixes and `-q` keys, lower-cased with `_` for spaces) → our names.
pub(crate) fn reason_name(spelled: &str) -> Option<&'static str> {
    Some(match spelled {
        "gpu_idle" | "idle" => "idle",
        "applications_clocks_setting" => "applications_clocks_setting",
        "sw_power_cap" => "sw_power_cap",
        "hw_slowdown" => "hw_slowdown",
        "sync_boost" => "sync_boost",
        "sw_thermal_slowdown" => "sw_thermal_slowdown",
        "hw_thermal_slowdown" => "hw_thermal_slowdown",
        "hw_power_brake_slowdown" => "hw_power_brake_slowdown",
        "display_clocks_setting" | "display_clock_setting" => "display_clock_setting",
        _ => return None,
    })
}

/// Orders reason names by their NVML bit, as the bitmask path does.
pub(crate) fn sort_reasons(names: &mut [String]) {
    let rank = |n: &String| crate::THROTTLE_REASONS.iter().position(|(_, r)| r == n).unwrap_or(usize::MAX);
    names.sort_by_key(rank);
}

/// Copies the memory and bus fault readings of a report (`from`) into a
/// sample where it has none (a `--query-gpu` answer asks for none of them),
/// and the PCIe throughput, which `--query-gpu` has no field for.
pub(crate) fn fill_faults(s: &mut GpuSample, from: &GpuSample) {
    s.remap_pending = s.remap_pending.or(from.remap_pending);
    s.remap_failed = s.remap_failed.or(from.remap_failed);
    s.retired_pages = s.retired_pages.or(from.retired_pages);
    s.retired_pages_pending = s.retired_pages_pending.or(from.retired_pages_pending);
    s.pcie_replays = s.pcie_replays.or(from.pcie_replays);
    s.remapped_rows_correctable = s.remapped_rows_correctable.or(from.remapped_rows_correctable);
    s.remapped_rows_uncorrectable = s.remapped_rows_uncorrectable.or(from.remapped_rows_uncorrectable);
    s.pcie_tx_bytes_per_s = s.pcie_tx_bytes_per_s.or(from.pcie_tx_bytes_per_s);
    s.pcie_rx_bytes_per_s = s.pcie_rx_bytes_per_s.or(from.pcie_rx_bytes_per_s);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_flag_set_is_set_and_none_present_is_unknown() {
        assert_eq!(any_true([None, None]), None);
        assert_eq!(any_true([Some(false), None]), Some(false));
        assert_eq!(any_true([Some(false), Some(true)]), Some(true));
        assert_eq!(sum_present([None, Some(2), Some(3)]), Some(5));
        assert_eq!(sum_present([None, None]), None);
    }

    #[test]
    fn report_faults_fill_only_what_the_sample_lacks() {
        let mut s = GpuSample { remap_pending: Some(false), ..GpuSample::default() };
        let report = GpuSample {
            remap_pending: Some(true),
            remap_failed: Some(true),
            retired_pages: Some(2),
            retired_pages_pending: Some(false),
            pcie_replays: Some(9),
            ..GpuSample::default()
        };
        fill_faults(&mut s, &report);
        assert_eq!(
            (s.remap_pending, s.remap_failed, s.retired_pages, s.retired_pages_pending, s.pcie_replays),
            (Some(false), Some(true), Some(2), Some(false), Some(9))
        );
    }
}
