//! `nvidia-smi -q -x`: the XML report (DTD v11 and v12 and later).
//!
//! Differences handled: `<power_readings>` (v11) vs `<gpu_power_readings>`
//! (v12), `power_draw` vs `average_power_draw`/`instant_power_draw`,
//! `<clocks_throttle_reasons>` vs `<clocks_event_reasons>`, `<mig_devices>`
//! holding bare text `None`, ECC counters as `single_bit`/`double_bit`
//! totals (before Ampere) or `sram_*`/`dram_*` counters (Ampere and later),
//! `<pending_blacklist>` and `<pending_retirement>` both for the retired-page
//! flag, `<remapped_rows>` holding bare `N/A` (MIG on, GPUs before Ampere).

use roxmltree::{Document, Node, ParsingOptions};

use super::report::{Report, ReportGpu, ReportMigDevice, any_true, reason_name, sort_reasons, sum_present};
use super::value::{self, present};
use crate::{GpuError, GpuProcess, GpuSample};

const WHAT: &str = "nvidia-smi -q -x";

fn child<'a, 'i>(n: Node<'a, 'i>, name: &str) -> Option<Node<'a, 'i>> {
    n.children().find(|c| c.is_element() && c.tag_name().name() == name)
}

fn path<'a, 'i>(n: Node<'a, 'i>, names: &[&str]) -> Option<Node<'a, 'i>> {
    names.iter().try_fold(n, |n, name| child(n, name))
}

/// The trimmed text at a path, `None` when absent or missing (`N/A`).
fn text<'a>(n: Node<'a, '_>, names: &[&str]) -> Option<&'a str> {
    path(n, names)?.text().and_then(present)
}

fn string(n: Node<'_, '_>, names: &[&str]) -> Option<String> {
    text(n, names).map(str::to_string)
}

fn line_of(doc: &Document<'_>, n: Node<'_, '_>) -> usize {
    doc.text_pos_at(n.range().start).row as usize
}

/// Parses `nvidia-smi -q -x`.
pub fn parse_xml(text_in: &str) -> Result<Report, GpuError> {
    let opts = ParsingOptions { allow_dtd: true, ..ParsingOptions::default() };
    let doc = Document::parse_with_options(text_in, opts).map_err(|e| GpuError::Parse {
        what: WHAT,
        line: e.pos().row as usize,
        why: e.to_string(),
    })?;
    let root = doc.root_element();
    if root.tag_name().name() != "nvidia_smi_log" {
        return Err(GpuError::Parse {
            what: WHAT,
            line: line_of(&doc, root),
            why: format!("the root is <{}>, not <nvidia_smi_log>", root.tag_name().name()),
        });
    }
    let mut report = Report {
        timestamp: string(root, &["timestamp"]),
        driver_version: string(root, &["driver_version"]),
        cuda_version: string(root, &["cuda_version"]),
        attached_gpus: text(root, &["attached_gpus"]).and_then(value::id),
        gpus: Vec::new(),
    };
    let gpus = root.children().filter(|c| c.is_element() && c.tag_name().name() == "gpu");
    for (pos, g) in gpus.enumerate() {
        report.gpus.push(gpu(&doc, g, u32::try_from(pos).unwrap_or(u32::MAX))?);
    }
    Ok(report)
}

fn gpu(doc: &Document<'_>, g: Node<'_, '_>, index: u32) -> Result<ReportGpu, GpuError> {
    let err = |n: Node<'_, '_>, why: &str| GpuError::Parse { what: WHAT, line: line_of(doc, n), why: why.into() };
    let uuid = string(g, &["uuid"]).ok_or_else(|| err(g, "a <gpu> without <uuid>"))?;
    let mut mig_devices = Vec::new();
    if let Some(list) = child(g, "mig_devices") {
        // Holds `<mig_device>`s, or the bare text `None`.
        for m in list.children().filter(|c| c.is_element() && c.tag_name().name() == "mig_device") {
            let fb = |f: &str| text(m, &["fb_memory_usage", f]).and_then(|v| value::mib(v, None));
            mig_devices.push(ReportMigDevice {
                index: text(m, &["index"])
                    .and_then(value::id)
                    .ok_or_else(|| err(m, "a <mig_device> without <index>"))?,
                gi_id: text(m, &["gpu_instance_id"])
                    .and_then(value::id)
                    .ok_or_else(|| err(m, "a <mig_device> without <gpu_instance_id>"))?,
                ci_id: text(m, &["compute_instance_id"]).and_then(value::id),
                sm_count: text(m, &["device_attributes", "shared", "multiprocessor_count"]).and_then(value::id),
                memory_total_mb: fb("total"),
                memory_used_mb: fb("used"),
                memory_free_mb: fb("free"),
            });
        }
    }
    let fb = |f: &str| text(g, &["fb_memory_usage", f]).and_then(|v| value::mib(v, None));
    let power = child(g, "gpu_power_readings").or_else(|| child(g, "power_readings"));
    let power_of = |names: &[&str]| {
        power.and_then(|p| names.iter().find_map(|n| text(p, &[n]).and_then(|v| value::watts(v, None))))
    };
    let mut processes = Vec::new();
    if let Some(list) = child(g, "processes") {
        for p in list.children().filter(|c| c.is_element() && c.tag_name().name() == "process_info") {
            processes.push(GpuProcess {
                pid: text(p, &["pid"]).and_then(value::id).ok_or_else(|| err(p, "a <process_info> without <pid>"))?,
                name: string(p, &["process_name"]),
                used_memory_mb: text(p, &["used_memory"]).and_then(|v| value::mib(v, None)),
                sm_util_pct: None,
                gi_id: text(p, &["gpu_instance_id"]).and_then(value::id),
                ci_id: text(p, &["compute_instance_id"]).and_then(value::id),
            });
        }
    }
    let (ecc_corrected, ecc_uncorrected) = volatile_ecc(g);
    let sample = GpuSample {
        index,
        uuid,
        gpu_util_pct: text(g, &["utilization", "gpu_util"]).and_then(|v| value::percent(v, None)),
        mem_util_pct: text(g, &["utilization", "memory_util"]).and_then(|v| value::percent(v, None)),
        memory_used_mb: fb("used"),
        memory_total_mb: fb("total"),
        memory_free_mb: fb("free"),
        memory_reserved_mb: fb("reserved"),
        temperature_c: text(g, &["temperature", "gpu_temp"]).and_then(|v| value::celsius(v, None)),
        memory_temperature_c: text(g, &["temperature", "memory_temp"]).and_then(|v| value::celsius(v, None)),
        junction_temperature_c: None,
        slowdown_temperature_c: text(g, &["temperature", "gpu_temp_slow_threshold"])
            .and_then(|v| value::celsius(v, None)),
        power_draw_w: power_of(&["power_draw", "average_power_draw", "instant_power_draw"]),
        power_limit_w: power_of(&["enforced_power_limit", "current_power_limit", "power_limit"]),
        // The report has no energy counter.
        energy_mj: None,
        sm_clock_mhz: text(g, &["clocks", "sm_clock"]).and_then(|v| value::mhz(v, None)),
        mem_clock_mhz: text(g, &["clocks", "mem_clock"]).and_then(|v| value::mhz(v, None)),
        fan_pct: text(g, &["fan_speed"]).and_then(|v| value::percent(v, None)),
        pstate: string(g, &["performance_state"]),
        ecc_corrected_volatile: ecc_corrected,
        ecc_uncorrected_volatile: ecc_uncorrected,
        xid_last: None,
        xid_count: None,
        xids_recent: Vec::new(),
        remap_pending: text(g, &["remapped_rows", "remapped_row_pending"]).and_then(value::enabled),
        remap_failed: text(g, &["remapped_rows", "remapped_row_failure"]).and_then(value::enabled),
        retired_pages: sum_present(
            ["multiple_single_bit_retirement", "double_bit_retirement"]
                .map(|k| text(g, &["retired_pages", k, "retired_count"]).and_then(value::count)),
        ),
        retired_pages_pending: any_true(
            ["pending_blacklist", "pending_retirement"]
                .map(|k| text(g, &["retired_pages", k]).and_then(value::enabled)),
        ),
        // The report prints no NVLink error counters (`nvidia-smi nvlink -e` does).
        nvlink_errors: None,
        pcie_replays: text(g, &["pci", "replay_counter"]).and_then(value::count),
        enc_util_pct: text(g, &["utilization", "encoder_util"]).and_then(|v| value::percent(v, None)),
        dec_util_pct: text(g, &["utilization", "decoder_util"]).and_then(|v| value::percent(v, None)),
        pcie_tx_bytes_per_s: text(g, &["pci", "tx_util"]).and_then(value::bytes_per_s),
        pcie_rx_bytes_per_s: text(g, &["pci", "rx_util"]).and_then(value::bytes_per_s),
        remapped_rows_correctable: text(g, &["remapped_rows", "remapped_row_corr"]).and_then(value::count),
        remapped_rows_uncorrectable: text(g, &["remapped_rows", "remapped_row_unc"]).and_then(value::count),
        health_fault: None,
        throttle_reasons: throttle(g),
        processes,
        mig: mig_devices.iter().map(ReportMigDevice::to_sample).collect(),
    };
    Ok(ReportGpu {
        name: string(g, &["product_name"]),
        serial: string(g, &["serial"]),
        pci_bus_id: string(g, &["pci", "pci_bus_id"]).or_else(|| g.attribute("id").map(str::to_string)),
        mig_mode: text(g, &["mig_mode", "current_mig"]).and_then(value::enabled),
        mig_devices,
        sample,
    })
}

/// Volatile ECC counts: `single_bit`/`double_bit` `total`s where the report
/// has them, else the sum of the `*_correctable` and `*_uncorrectable*` counters.
fn volatile_ecc(g: Node<'_, '_>) -> (Option<u64>, Option<u64>) {
    let Some(vol) = path(g, &["ecc_errors", "volatile"]) else { return (None, None) };
    let total = |kind: &str| text(vol, &[kind, "total"]).and_then(value::count);
    if child(vol, "single_bit").is_some() || child(vol, "double_bit").is_some() {
        return (total("single_bit"), total("double_bit"));
    }
    let counters = |pick: fn(&str) -> bool| {
        sum_present(
            vol.children()
                .filter(|c| c.is_element() && pick(c.tag_name().name()))
                .map(|c| c.text().and_then(value::count)),
        )
    };
    (
        counters(|n| n.ends_with("_correctable") && !n.contains("uncorrectable")),
        counters(|n| n.contains("_uncorrectable")),
    )
}

/// Active clock event (throttle) reasons; `None` without any readable reason.
fn throttle(g: Node<'_, '_>) -> Option<Vec<String>> {
    let (list, prefix) = match child(g, "clocks_event_reasons") {
        Some(l) => (l, "clocks_event_reason_"),
        None => (child(g, "clocks_throttle_reasons")?, "clocks_throttle_reason_"),
    };
    let mut seen = false;
    let mut active = Vec::new();
    for c in list.children().filter(|c| c.is_element()) {
        let Some(name) = c.tag_name().name().strip_prefix(prefix).and_then(reason_name) else { continue };
        let Some(v) = c.text().and_then(present) else { continue };
        seen = true;
        if v.eq_ignore_ascii_case("active") {
            active.push(name.to_string());
        }
    }
    sort_reasons(&mut active);
    seen.then_some(active)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_errors_carry_the_line() {
        let e = parse_xml("<nvidia_smi_log>\n<gpu>\n</nvidia_smi_log>").expect_err("bad xml");
        assert!(matches!(e, GpuError::Parse { line: 3, .. }), "{e}");
        let e = parse_xml("<other/>").expect_err("wrong root");
        assert!(matches!(e, GpuError::Parse { line: 1, .. }), "{e}");
        let e = parse_xml("<nvidia_smi_log>\n  <gpu id=\"x\"></gpu>\n</nvidia_smi_log>").expect_err("no uuid");
        assert!(matches!(e, GpuError::Parse { line: 2, .. }), "{e}");
        let r = parse_xml("<nvidia_smi_log/>").expect("empty log");
        assert!(r.gpus.is_empty());
    }
}
