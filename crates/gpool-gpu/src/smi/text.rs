//! `nvidia-smi -q`: the text report, `Key : Value` lines nested by indentation.
//!
//! The lines become a tree (an arena: no recursion, whatever the nesting), then
//! the fields gpool maps are looked up by key, ignoring case and alignment.
//! Driver differences handled: `Clocks Throttle Reasons` vs `Clocks Event
//! Reasons`, `Power Draw` vs `Average Power Draw`, `Gpu` vs `GPU`,
//! `FB Memory Usage` vs `Shared FB Memory Usage` in `MIG Device` blocks, ECC
//! counters as `Single Bit`/`Double Bit` totals or `SRAM`/`DRAM` counters,
//! `Pending Page Blacklist` vs `Pending Page Retirement`, `Remapped Rows`
//! as a section or a bare `N/A` (MIG on, GPUs without row remapping).

use super::report::{Report, ReportGpu, ReportMigDevice, any_true, reason_name, sort_reasons, sum_present};
use super::value::{self, present};
use crate::{GpuError, GpuProcess, GpuSample};

const WHAT: &str = "nvidia-smi -q";

#[derive(Debug)]
struct Entry {
    key: String,
    value: Option<String>,
    line: usize,
    children: Vec<usize>,
}

/// The report's lines as a tree.
struct Tree {
    nodes: Vec<Entry>,
    roots: Vec<usize>,
}

/// Splits `Key   : Value` at the first colon that has a space before it or a
/// space (or the end) after it, so `Bus Id : 00000000:19:00.0` keeps its
/// value whole and `GPU 00000000:19:00.0` stays a section title.
fn split_key_value(line: &str) -> (&str, Option<&str>) {
    for (i, c) in line.char_indices() {
        if c != ':' {
            continue;
        }
        let before = line.get(..i).unwrap_or("");
        let after = line.get(i + 1..).unwrap_or("");
        if before.ends_with(' ') || after.is_empty() || after.starts_with(' ') {
            return (before.trim(), Some(after.trim()));
        }
    }
    (line.trim(), None)
}

impl Tree {
    fn parse(text: &str) -> Tree {
        let mut tree = Tree { nodes: Vec::new(), roots: Vec::new() };
        let mut stack: Vec<(usize, usize)> = Vec::new(); // (indent, node)
        for (i, raw) in text.lines().enumerate() {
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with("===") {
                continue;
            }
            let indent: usize =
                raw.chars().take_while(|c| c.is_whitespace()).map(|c| if c == '\t' { 4 } else { 1 }).sum();
            let (key, value) = split_key_value(trimmed);
            let id = tree.nodes.len();
            tree.nodes.push(Entry {
                key: key.to_string(),
                value: value.map(str::to_string),
                line: i + 1,
                children: Vec::new(),
            });
            while stack.last().is_some_and(|(d, _)| *d >= indent) {
                stack.pop();
            }
            match stack.last() {
                Some(&(_, parent)) => {
                    if let Some(p) = tree.nodes.get_mut(parent) {
                        p.children.push(id);
                    }
                }
                None => tree.roots.push(id),
            }
            stack.push((indent, id));
        }
        tree
    }

    fn node(&self, id: usize) -> Option<&Entry> {
        self.nodes.get(id)
    }

    fn children(&self, id: usize) -> impl Iterator<Item = (usize, &Entry)> {
        self.node(id).map(|n| n.children.as_slice()).unwrap_or(&[]).iter().filter_map(|&c| Some((c, self.node(c)?)))
    }

    /// The first child with this key (case-insensitive).
    fn child(&self, id: usize, key: &str) -> Option<usize> {
        self.children(id).find(|(_, n)| n.key.eq_ignore_ascii_case(key)).map(|(c, _)| c)
    }

    fn path(&self, id: usize, keys: &[&str]) -> Option<usize> {
        keys.iter().try_fold(id, |n, k| self.child(n, k))
    }

    /// The value at a path, `None` when absent or missing (`N/A`).
    fn value(&self, id: usize, keys: &[&str]) -> Option<&str> {
        self.node(self.path(id, keys)?)?.value.as_deref().and_then(present)
    }

    /// The value of the first of several alternative paths that has one.
    fn first(&self, id: usize, alternatives: &[&[&str]]) -> Option<&str> {
        alternatives.iter().find_map(|keys| self.value(id, keys))
    }
}

/// Parses `nvidia-smi -q` (all GPUs, or one with `-i`).
pub fn parse_text(text: &str) -> Result<Report, GpuError> {
    let tree = Tree::parse(text);
    let root_value = |key: &str| {
        tree.roots
            .iter()
            .filter_map(|&r| tree.node(r))
            .find(|n| n.key.eq_ignore_ascii_case(key))
            .and_then(|n| n.value.as_deref().and_then(present))
            .map(str::to_string)
    };
    let mut report = Report {
        timestamp: root_value("Timestamp"),
        driver_version: root_value("Driver Version"),
        cuda_version: root_value("CUDA Version"),
        attached_gpus: root_value("Attached GPUs").and_then(|v| v.parse().ok()),
        gpus: Vec::new(),
    };
    let sections = tree.roots.iter().copied().filter(|&r| {
        tree.node(r).is_some_and(|n| n.value.is_none() && n.key.starts_with("GPU ") && !n.children.is_empty())
    });
    for (pos, g) in sections.enumerate() {
        report.gpus.push(gpu(&tree, g, u32::try_from(pos).unwrap_or(u32::MAX))?);
    }
    Ok(report)
}

fn gpu(t: &Tree, g: usize, index: u32) -> Result<ReportGpu, GpuError> {
    let line = |id: usize| t.node(id).map_or(0, |n| n.line);
    let uuid = t.value(g, &["GPU UUID"]).ok_or_else(|| GpuError::Parse {
        what: WHAT,
        line: line(g),
        why: "a GPU section without `GPU UUID`".into(),
    })?;
    let mut mig_devices = Vec::new();
    for (m, n) in t.children(g) {
        if !n.key.eq_ignore_ascii_case("MIG Device") {
            continue;
        }
        let fb = |f: &str| {
            t.first(m, &[&["Shared FB Memory Usage", f], &["FB Memory Usage", f]]).and_then(|v| value::mib(v, None))
        };
        mig_devices.push(ReportMigDevice {
            index: t.value(m, &["Index"]).and_then(value::id).ok_or_else(|| GpuError::Parse {
                what: WHAT,
                line: line(m),
                why: "a MIG Device without an Index".into(),
            })?,
            gi_id: t.value(m, &["GPU Instance ID"]).and_then(value::id).ok_or_else(|| GpuError::Parse {
                what: WHAT,
                line: line(m),
                why: "a MIG Device without a GPU Instance ID".into(),
            })?,
            ci_id: t.value(m, &["Compute Instance ID"]).and_then(value::id),
            sm_count: t.value(m, &["Device Attributes", "Shared", "Multiprocessor count"]).and_then(value::id),
            memory_total_mb: fb("Total"),
            memory_used_mb: fb("Used"),
            memory_free_mb: fb("Free"),
        });
    }
    let fb = |f: &str| t.value(g, &["FB Memory Usage", f]).and_then(|v| value::mib(v, None));
    let power = |names: &[&str]| {
        ["GPU Power Readings", "Power Readings"].iter().find_map(|section| {
            names.iter().find_map(|n| t.value(g, &[section, n])).and_then(|v| value::watts(v, None))
        })
    };
    let (ecc_corrected, ecc_uncorrected) = volatile_ecc(t, g);
    let sample = GpuSample {
        index,
        uuid: uuid.to_string(),
        gpu_util_pct: t.value(g, &["Utilization", "GPU"]).and_then(|v| value::percent(v, None)),
        mem_util_pct: t.value(g, &["Utilization", "Memory"]).and_then(|v| value::percent(v, None)),
        memory_used_mb: fb("Used"),
        memory_total_mb: fb("Total"),
        memory_free_mb: fb("Free"),
        memory_reserved_mb: fb("Reserved"),
        temperature_c: t.value(g, &["Temperature", "GPU Current Temp"]).and_then(|v| value::celsius(v, None)),
        memory_temperature_c: t.value(g, &["Temperature", "Memory Current Temp"]).and_then(|v| value::celsius(v, None)),
        junction_temperature_c: None,
        slowdown_temperature_c: t.value(g, &["Temperature", "GPU Slowdown Temp"]).and_then(|v| value::celsius(v, None)),
        power_draw_w: power(&["Power Draw", "Average Power Draw", "Instantaneous Power Draw"]),
        power_limit_w: power(&["Current Power Limit", "Enforced Power Limit", "Power Limit"]),
        energy_mj: None,
        sm_clock_mhz: t.value(g, &["Clocks", "SM"]).and_then(|v| value::mhz(v, None)),
        mem_clock_mhz: t.value(g, &["Clocks", "Memory"]).and_then(|v| value::mhz(v, None)),
        fan_pct: t.value(g, &["Fan Speed"]).and_then(|v| value::percent(v, None)),
        pstate: t.value(g, &["Performance State"]).map(str::to_string),
        ecc_corrected_volatile: ecc_corrected,
        ecc_uncorrected_volatile: ecc_uncorrected,
        xid_last: None,
        xid_count: None,
        xids_recent: Vec::new(),
        remap_pending: t.value(g, &["Remapped Rows", "Pending"]).and_then(value::enabled),
        remap_failed: t.value(g, &["Remapped Rows", "Remapping Failure Occurred"]).and_then(value::enabled),
        retired_pages: sum_present(
            ["Single Bit ECC", "Double Bit ECC"].map(|k| t.value(g, &["Retired Pages", k]).and_then(value::count)),
        ),
        retired_pages_pending: any_true(
            ["Pending Page Blacklist", "Pending Page Retirement", "Pending"]
                .map(|k| t.value(g, &["Retired Pages", k]).and_then(value::enabled)),
        ),
        // The report prints no NVLink error counters (`nvidia-smi nvlink -e` does).
        nvlink_errors: None,
        pcie_replays: t.value(g, &["PCI", "Replays Since Reset"]).and_then(value::count),
        enc_util_pct: t.value(g, &["Utilization", "Encoder"]).and_then(|v| value::percent(v, None)),
        dec_util_pct: t.value(g, &["Utilization", "Decoder"]).and_then(|v| value::percent(v, None)),
        pcie_tx_bytes_per_s: t.value(g, &["PCI", "Tx Throughput"]).and_then(value::bytes_per_s),
        pcie_rx_bytes_per_s: t.value(g, &["PCI", "Rx Throughput"]).and_then(value::bytes_per_s),
        remapped_rows_correctable: t.value(g, &["Remapped Rows", "Correctable Error"]).and_then(value::count),
        remapped_rows_uncorrectable: t.value(g, &["Remapped Rows", "Uncorrectable Error"]).and_then(value::count),
        health_fault: None,
        throttle_reasons: throttle(t, g),
        processes: processes(t, g)?,
        mig: mig_devices.iter().map(ReportMigDevice::to_sample).collect(),
    };
    let section_bus = t.node(g).and_then(|n| n.key.strip_prefix("GPU ")).map(|b| b.trim().to_string());
    Ok(ReportGpu {
        name: t.value(g, &["Product Name"]).map(str::to_string),
        serial: t.value(g, &["Serial Number"]).map(str::to_string),
        pci_bus_id: t.value(g, &["PCI", "Bus Id"]).map(str::to_string).or(section_bus),
        mig_mode: t.value(g, &["MIG Mode", "Current"]).and_then(value::enabled),
        mig_devices,
        sample,
    })
}

fn volatile_ecc(t: &Tree, g: usize) -> (Option<u64>, Option<u64>) {
    let Some(vol) = t.path(g, &["ECC Errors", "Volatile"]) else { return (None, None) };
    if t.child(vol, "Single Bit").is_some() || t.child(vol, "Double Bit").is_some() {
        let total = |kind: &str| t.value(vol, &[kind, "Total"]).and_then(value::count);
        return (total("Single Bit"), total("Double Bit"));
    }
    let counters = |pick: fn(&str) -> bool| {
        sum_present(
            t.children(vol)
                .filter(|(_, n)| pick(&n.key.to_ascii_lowercase()))
                .map(|(_, n)| n.value.as_deref().and_then(value::count)),
        )
    };
    (counters(|k| k.contains("correctable") && !k.contains("uncorrectable")), counters(|k| k.contains("uncorrectable")))
}

fn throttle(t: &Tree, g: usize) -> Option<Vec<String>> {
    let list = t.child(g, "Clocks Event Reasons").or_else(|| t.child(g, "Clocks Throttle Reasons"))?;
    let mut seen = false;
    let mut active = Vec::new();
    // Every descendant (`HW Thermal Slowdown` sits under `HW Slowdown`), without recursion.
    let mut todo: Vec<usize> = t.children(list).map(|(c, _)| c).collect();
    while let Some(id) = todo.pop() {
        let Some(n) = t.node(id) else { continue };
        todo.extend(n.children.iter().copied());
        let spelled = n.key.to_ascii_lowercase().replace(' ', "_");
        let (Some(name), Some(v)) = (reason_name(&spelled), n.value.as_deref().and_then(present)) else { continue };
        seen = true;
        if v.eq_ignore_ascii_case("active") {
            active.push(name.to_string());
        }
    }
    sort_reasons(&mut active);
    seen.then_some(active)
}

/// `Processes`: `None`, or runs of `GPU instance ID`, `Compute instance ID`
/// and `Process ID` (with `Type`, `Name`, `Used GPU Memory` under it).
fn processes(t: &Tree, g: usize) -> Result<Vec<GpuProcess>, GpuError> {
    let Some(list) = t.child(g, "Processes") else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    let (mut gi, mut ci) = (None, None);
    for (id, n) in t.children(list) {
        let key = n.key.to_ascii_lowercase();
        let v = n.value.as_deref().and_then(present);
        match key.as_str() {
            "gpu instance id" => gi = v.and_then(value::id),
            "compute instance id" => ci = v.and_then(value::id),
            "process id" => {
                let pid = v.and_then(value::id).ok_or_else(|| GpuError::Parse {
                    what: WHAT,
                    line: n.line,
                    why: format!("process id {:?} is not a number", n.value),
                })?;
                out.push(GpuProcess {
                    pid,
                    name: t.value(id, &["Name"]).map(str::to_string),
                    used_memory_mb: t.value(id, &["Used GPU Memory"]).and_then(|m| value::mib(m, None)),
                    sm_util_pct: None,
                    gi_id: gi.take(),
                    ci_id: ci.take(),
                });
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_values_and_sections() {
        assert_eq!(split_key_value("Bus Id      : 00000000:19:00.0"), ("Bus Id", Some("00000000:19:00.0")));
        assert_eq!(split_key_value("GPU 00000000:19:00.0"), ("GPU 00000000:19:00.0", None));
        assert_eq!(split_key_value("Chassis Serial Number :"), ("Chassis Serial Number", Some("")));
        let e = parse_text("GPU 0000:01:00.0\n    Product Name : X\n").expect_err("no uuid");
        assert!(matches!(e, GpuError::Parse { line: 1, .. }), "{e}");
        assert!(parse_text("").expect("empty").gpus.is_empty());
    }
}
