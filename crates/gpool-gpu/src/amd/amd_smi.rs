//! `amd-smi static --json`, `amd-smi metric --json` and `amd-smi process
//! --json` (ROCm 6 and later). The root may be a bare list or
//! `{"gpu_data": [...]}`; values may be plain, strings with units,
//! `{"value", "unit"}` objects or `"N/A"` (see [`super::value`]).
//!
//! No complete `amd-smi metric --json` of a real machine has been
//! published: [`parse_metric`] follows the schema AMD documents for amd-smi
//! (`usage.gfx_activity`, `usage.umc_activity`, `power.socket_power`,
//! `temperature.edge|hotspot|mem`, `mem_usage.total_vram|used_vram`,
//! `clock.gfx_0.clk`, `clock.mem_0.clk`, `fan.usage`,
//! `ecc.total_correctable_count|total_uncorrectable_count`, per RAS block
//! `ecc_blocks.<BLOCK>.uncorrectable_count`, `pcie.replay_count`) and is
//! tested on the fragments that have been (the ROCm 6.1 changelog's `metric
//! -p`, the first 40 lines of an R9700's `metric`, neither of which reaches
//! the `ecc`, `ecc_blocks` or `pcie` sections; `static --json` of the MI210
//! has only which RAS blocks are enabled, no counts).

use serde_json::Value;

use super::value::{at, gpu_entries, mib, number, text};
use crate::{GpuError, GpuProcess};

/// One GPU as `amd-smi static --json` describes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AmdStatic {
    /// The `gpu` index (what `ROCR_VISIBLE_DEVICES` takes).
    pub gpu: u32,
    pub name: Option<String>,
    pub device_id: Option<String>,
    pub serial: Option<String>,
    pub uuid: Option<String>,
    pub bdf: Option<String>,
    pub memory_mb: Option<u64>,
    pub numa_node: Option<u32>,
    pub power_cap_w: Option<f64>,
    pub compute_partition: Option<String>,
    pub memory_partition: Option<String>,
}

/// One GPU's readings from `amd-smi metric --json`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AmdMetric {
    pub gpu: u32,
    pub gfx_activity_pct: Option<f64>,
    pub umc_activity_pct: Option<f64>,
    pub power_w: Option<f64>,
    pub temperature_edge_c: Option<f64>,
    pub temperature_hotspot_c: Option<f64>,
    pub temperature_mem_c: Option<f64>,
    pub memory_total_mb: Option<u64>,
    pub memory_used_mb: Option<u64>,
    pub gfx_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub fan_pct: Option<f64>,
    pub ecc_corrected: Option<u64>,
    /// `ecc.total_uncorrectable_count`, else the sum over `ecc_blocks`.
    pub ecc_uncorrected: Option<u64>,
    /// RAS blocks (`UMC`, `GFX`, …) counting uncorrectable errors, with the
    /// count; blocks at zero are left out.
    pub ras_uncorrectable: Vec<(String, u64)>,
    /// `pcie.replay_count`.
    pub pcie_replays: Option<u64>,
    /// `throttle_status`, where printed (`UNTHROTTLED`, `THROTTLED`).
    pub throttled: Option<bool>,
}

fn json(what: &'static str, out: &str) -> Result<Value, GpuError> {
    let start = out.find(['[', '{']).ok_or_else(|| GpuError::Parse {
        what,
        line: 1,
        why: format!("no JSON in the output: {:?}", out.lines().next().unwrap_or("")),
    })?;
    let line = out[..start].lines().count().max(1);
    serde_json::from_str(&out[start..]).map_err(|e| GpuError::Parse {
        what,
        line: line + e.line().saturating_sub(1),
        why: e.to_string(),
    })
}

fn gpu_index(e: &Value, position: usize) -> u32 {
    e.get("gpu").and_then(number).map_or(position as u32, |g| g as u32)
}

/// The first of several paths that has a value.
fn first<'a>(e: &'a Value, paths: &[&[&str]]) -> Option<&'a Value> {
    paths.iter().filter_map(|p| at(e, p)).find(|v| text(v).is_some() || v.is_object())
}

/// Parses `amd-smi static --json`.
pub fn parse_static(out: &str) -> Result<Vec<AmdStatic>, GpuError> {
    let root = json("amd-smi static --json", out)?;
    Ok(gpu_entries(&root)
        .into_iter()
        .enumerate()
        .map(|(i, e)| AmdStatic {
            gpu: gpu_index(e, i),
            name: first(e, &[&["asic", "market_name"], &["board", "product_name"]]).and_then(text),
            device_id: at(e, &["asic", "device_id"]).and_then(text),
            serial: first(e, &[&["asic", "asic_serial"], &["board", "product_serial"]])
                .and_then(text)
                .filter(|s| s != "0"),
            uuid: first(e, &[&["uuid"], &["asic", "uuid"]]).and_then(text),
            bdf: first(e, &[&["bus", "bdf"], &["bdf"]]).and_then(text),
            memory_mb: at(e, &["vram", "size"]).and_then(|v| mib(v, "MB")),
            numa_node: at(e, &["numa", "node"]).and_then(number).filter(|n| *n >= 0.0).map(|n| n as u32),
            power_cap_w: first(e, &[&["limit", "socket_power"], &["limit", "max_power"]]).and_then(number),
            compute_partition: first(
                e,
                &[&["partition", "compute_partition"], &["partition", "current_compute_partition"]],
            )
            .and_then(text),
            memory_partition: first(
                e,
                &[&["partition", "memory_partition"], &["partition", "current_memory_partition"]],
            )
            .and_then(text),
        })
        .collect())
}

/// Each RAS block's uncorrectable count, in the order printed. `ecc_blocks`
/// may be the string `N/A` (no RAS on the device): then none.
fn ecc_blocks(e: &Value) -> Vec<(String, u64)> {
    let Some(Value::Object(blocks)) = e.get("ecc_blocks") else { return Vec::new() };
    blocks
        .iter()
        .filter_map(|(name, b)| Some((name.clone(), b.get("uncorrectable_count").and_then(number)?)))
        .filter(|(_, n)| *n >= 0.0)
        .map(|(name, n)| (name, n as u64))
        .collect()
}

/// Parses `amd-smi metric --json` (see the module's note on its schema).
pub fn parse_metric(out: &str) -> Result<Vec<AmdMetric>, GpuError> {
    let root = json("amd-smi metric --json", out)?;
    Ok(gpu_entries(&root)
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let num = |paths: &[&[&str]]| first(e, paths).and_then(number);
            let blocks = ecc_blocks(e);
            let blocks_total = (!blocks.is_empty()).then(|| blocks.iter().map(|(_, n)| *n).sum::<u64>());
            AmdMetric {
                gpu: gpu_index(e, i),
                gfx_activity_pct: num(&[&["usage", "gfx_activity"]]),
                umc_activity_pct: num(&[&["usage", "umc_activity"]]),
                power_w: num(&[&["power", "socket_power"], &["power", "average_socket_power"]]),
                temperature_edge_c: num(&[&["temperature", "edge"]]),
                temperature_hotspot_c: num(&[&["temperature", "hotspot"]]),
                temperature_mem_c: num(&[&["temperature", "mem"]]),
                memory_total_mb: at(e, &["mem_usage", "total_vram"]).and_then(|v| mib(v, "MB")),
                memory_used_mb: at(e, &["mem_usage", "used_vram"]).and_then(|v| mib(v, "MB")),
                gfx_clock_mhz: num(&[&["clock", "gfx_0", "clk"]]).map(|x| x.round() as u32),
                mem_clock_mhz: num(&[&["clock", "mem_0", "clk"]]).map(|x| x.round() as u32),
                fan_pct: num(&[&["fan", "usage"]]),
                ecc_corrected: num(&[&["ecc", "total_correctable_count"]]).map(|x| x as u64),
                ecc_uncorrected: num(&[&["ecc", "total_uncorrectable_count"]]).map(|x| x as u64).or(blocks_total),
                ras_uncorrectable: blocks.into_iter().filter(|(_, n)| *n > 0).collect(),
                pcie_replays: num(&[&["pcie", "replay_count"]]).filter(|x| *x >= 0.0).map(|x| x as u64),
                throttled: at(e, &["power", "throttle_status"])
                    .and_then(text)
                    .map(|s| !s.eq_ignore_ascii_case("UNTHROTTLED")),
            }
        })
        .collect())
}

/// Parses `amd-smi process --json`: each GPU's processes. A process list
/// that is a message (`No running processes detected`) is empty.
pub fn parse_process(out: &str) -> Result<Vec<(u32, GpuProcess)>, GpuError> {
    let root = json("amd-smi process --json", out)?;
    let mut procs = Vec::new();
    for (i, e) in gpu_entries(&root).into_iter().enumerate() {
        let gpu = gpu_index(e, i);
        let Some(Value::Array(list)) = e.get("process_list") else { continue };
        for p in list {
            let info = p.get("process_info").unwrap_or(p);
            let Some(pid) = info.get("pid").and_then(number).filter(|p| *p > 0.0) else { continue };
            procs.push((
                gpu,
                GpuProcess {
                    pid: pid as u32,
                    name: info.get("name").and_then(text),
                    used_memory_mb: first(info, &[&["memory_usage", "vram_mem"], &["mem_usage"]])
                        .and_then(|v| mib(v, "B")),
                    sm_util_pct: None,
                    gi_id: None,
                    ci_id: None,
                },
            ));
        }
    }
    Ok(procs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_follows_the_documented_schema() {
        let m = parse_metric(
            r#"{"gpu_data": [{"gpu": 3,
                "usage": {"gfx_activity": {"value": 87, "unit": "%"}, "umc_activity": {"value": 41, "unit": "%"}},
                "power": {"socket_power": {"value": 612, "unit": "W"}, "throttle_status": "THROTTLED"},
                "clock": {"gfx_0": {"clk": {"value": 2100, "unit": "MHz"}}, "mem_0": {"clk": {"value": 1300, "unit": "MHz"}}},
                "temperature": {"edge": "N/A", "hotspot": {"value": 71, "unit": "C"}, "mem": {"value": 60, "unit": "C"}},
                "mem_usage": {"total_vram": {"value": 196592, "unit": "MB"}, "used_vram": {"value": 150000, "unit": "MB"}},
                "ecc": {"total_correctable_count": 2, "total_uncorrectable_count": 0}}]}"#,
        )
        .expect("parses");
        let m = &m[0];
        assert_eq!(
            (m.gpu, m.gfx_activity_pct, m.umc_activity_pct, m.power_w),
            (3, Some(87.0), Some(41.0), Some(612.0))
        );
        assert_eq!(
            (m.temperature_edge_c, m.temperature_hotspot_c, m.temperature_mem_c),
            (None, Some(71.0), Some(60.0))
        );
        assert_eq!((m.memory_total_mb, m.memory_used_mb), (Some(196_592), Some(150_000)));
        assert_eq!((m.gfx_clock_mhz, m.mem_clock_mhz, m.throttled), (Some(2100), Some(1300), Some(true)));
        assert_eq!((m.ecc_corrected, m.ecc_uncorrected), (Some(2), Some(0)));
        assert_eq!((m.ras_uncorrectable.len(), m.pcie_replays), (0, None), "no ecc_blocks, no pcie section");
    }

    #[test]
    fn ras_blocks_with_uncorrectable_errors_are_named() {
        let m = parse_metric(
            r#"[{"gpu": 0, "pcie": {"width": 16, "replay_count": 7},
                 "ecc": {"total_correctable_count": 5, "total_uncorrectable_count": 2},
                 "ecc_blocks": {"UMC": {"correctable_count": 5, "uncorrectable_count": 2, "deferred_count": 0},
                                "SDMA": {"correctable_count": 0, "uncorrectable_count": 0, "deferred_count": 0}}},
                {"gpu": 1, "ecc": "N/A", "pcie": {"replay_count": "N/A"},
                 "ecc_blocks": {"GFX": {"uncorrectable_count": 3}, "MMHUB": {"uncorrectable_count": 1}}},
                {"gpu": 2, "ecc_blocks": "N/A"}]"#,
        )
        .expect("parses");
        assert_eq!(m[0].ras_uncorrectable, [("UMC".to_string(), 2)], "blocks at zero are left out");
        assert_eq!((m[0].ecc_uncorrected, m[0].pcie_replays), (Some(2), Some(7)));
        assert_eq!(m[1].ecc_uncorrected, Some(4), "no total: the blocks summed");
        assert_eq!(m[1].ras_uncorrectable.len(), 2);
        assert_eq!(m[1].pcie_replays, None, "N/A is absent, not zero");
        assert_eq!((m[2].ecc_uncorrected, m[2].ras_uncorrectable.len()), (None, 0), "ecc_blocks N/A");
    }

    #[test]
    fn processes_in_either_shape_and_a_message_for_none() {
        let p = parse_process(
            r#"[{"gpu": 1, "process_list": [{"name": "python", "pid": 42, "mem_usage": {"value": 2, "unit": "GB"}}]},
                {"gpu": 2, "process_list": "No running processes detected"}]"#,
        )
        .expect("parses");
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].0, p[0].1.pid, p[0].1.used_memory_mb), (1, 42, Some(2048)));
        assert!(parse_process("Traceback (most recent call last):").is_err());
    }
}
