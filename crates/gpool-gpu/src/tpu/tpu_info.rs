//! `tpu-info` (Google's CLI for Cloud TPU VMs) as it prints: titled tables
//! drawn by `rich` with box characters (up to 0.8) or as Markdown pipes
//! (0.9 and later), warning panels, and two `Key: value` header lines.
//! Columns are read by header name in either layout and in all three
//! generations seen (`Device`/`Memory usage` in 2024, `Chip`/`HBM Usage
//! (GiB)` later); units are inside the cells (`1.26 GiB / 95.74 GiB`,
//! `71.11%`); `N/A` and a `None` PID are absent.

use crate::GpuError;

/// One chip of the `TPU Chips` table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TpuChip {
    /// The N of `/dev/accelN` or `/dev/vfio/N`: what `TPU_VISIBLE_CHIPS` takes.
    pub index: u32,
    /// `/dev/vfio/0`.
    pub device: String,
    /// `TPU v5p chip`.
    pub chip_type: Option<String>,
    /// The process holding it.
    pub pid: Option<u32>,
}

/// One chip's runtime readings (only while a framework holds the TPU).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TpuUsage {
    pub chip: u32,
    pub hbm_used_mib: Option<u64>,
    pub hbm_total_mib: Option<u64>,
    pub duty_cycle_pct: Option<f64>,
}

/// What one run of `tpu-info` printed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TpuInfo {
    pub libtpu_version: Option<String>,
    /// `v5p`, `v6e`.
    pub accelerator_type: Option<String>,
    pub chips: Vec<TpuChip>,
    pub usage: Vec<TpuUsage>,
    /// TensorCore utilisation by core id.
    pub tensorcore_pct: Vec<(u32, f64)>,
    /// Processes by chip (`tpu-info --process`): (chip, pid, name).
    pub processes: Vec<(u32, u32, Option<String>)>,
    /// The warning panels, joined into one line each.
    pub warnings: Vec<String>,
}

/// A table: its title, header and rows of cells.
struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn col(&self, names: &[&str]) -> Option<usize> {
        self.header.iter().position(|h| names.iter().any(|n| h.eq_ignore_ascii_case(n)))
    }
}

fn cells(line: &str) -> Vec<String> {
    let t = line.trim().trim_matches(['│', '┃', '|']);
    t.split(['│', '┃', '|']).map(|c| c.trim().to_string()).collect()
}

/// Tables and warning panels in the order printed.
fn tables(text: &str, warnings: &mut Vec<String>) -> Vec<Table> {
    let mut out: Vec<Table> = Vec::new();
    let mut title = String::new();
    let mut panel: Option<String> = None;
    let mut open: Option<Table> = None;
    for raw in text.lines() {
        let line = raw.trim();
        if let Some(p) = panel.as_mut() {
            if line.starts_with('╰') {
                warnings.push(p.trim().to_string());
                panel = None;
            } else {
                p.push(' ');
                p.push_str(line.trim_matches('│').trim());
            }
            continue;
        }
        if line.starts_with('╭') {
            panel = Some(String::new());
            continue;
        }
        let is_rule = |l: &str| l.chars().all(|c| "━─┏┓┗┛┡┩┳┻╇┃┣┫└┘┴┬┼├┤┌┐╤╧═|-: ".contains(c));
        let is_row = line.starts_with(['│', '┃', '|']);
        if is_row && !is_rule(line) {
            let c = cells(line);
            match open.as_mut() {
                Some(t) if !t.header.is_empty() => t.rows.push(c),
                _ => open = Some(Table { title: title.clone(), header: c, rows: Vec::new() }),
            }
            continue;
        }
        if is_rule(line) && !line.is_empty() {
            continue;
        }
        // Text: ends a table; a non-empty line is the next title.
        if let Some(t) = open.take() {
            out.push(t);
        }
        if !line.is_empty() {
            title = line.to_string();
        }
    }
    out.extend(open);
    out
}

fn present(s: &str) -> Option<&str> {
    let s = s.trim();
    (!s.is_empty() && !s.to_ascii_uppercase().starts_with("N/A") && !s.eq_ignore_ascii_case("none")).then_some(s)
}

fn percent(s: &str) -> Option<f64> {
    present(s)?.trim_end_matches('%').trim().parse().ok()
}

/// `1.26 GiB` → MiB (GiB, MiB, GB, MB).
fn mib(s: &str) -> Option<u64> {
    let s = present(s)?;
    let (n, unit) = s.split_once(' ').unwrap_or((s, "GiB"));
    let x: f64 = n.trim().parse().ok()?;
    let factor = match unit.trim().to_ascii_lowercase().as_str() {
        "gib" => 1024.0,
        "gb" => 1e9 / 1_048_576.0,
        "mib" | "mb" => 1.0,
        _ => return None,
    };
    Some((x * factor).round() as u64)
}

/// `/dev/vfio/3`, `/dev/accel3` or `3` → 3.
fn chip_index(s: &str) -> Option<u32> {
    let digits: String = s.trim().chars().rev().take_while(char::is_ascii_digit).collect();
    digits.chars().rev().collect::<String>().parse().ok()
}

/// Parses what `tpu-info` printed (any of its modes: the default view,
/// `--process`, `--metric …`). Output with no table and no header line is
/// an error naming the first line.
pub fn parse_tpu_info(text: &str) -> Result<TpuInfo, GpuError> {
    let mut info = TpuInfo::default();
    for line in text.lines().map(str::trim) {
        let l = line.trim_start_matches("- ");
        if let Some((k, v)) = l.split_once(':') {
            let v = v.trim();
            match k.trim().to_ascii_lowercase().as_str() {
                "libtpu version" => info.libtpu_version = Some(v.to_string()),
                "accelerator type" => info.accelerator_type = present(v).map(str::to_string),
                _ => {}
            }
        }
    }
    let tables = tables(text, &mut info.warnings);
    for t in &tables {
        let title = t.title.to_ascii_lowercase();
        let chip = t.col(&["Chip", "Device"]);
        if title.starts_with("tpu chips") {
            let (ty, pid) = (t.col(&["Type"]), t.col(&["PID"]));
            for r in &t.rows {
                let Some(dev) = chip.and_then(|c| r.get(c)) else { continue };
                let Some(index) = chip_index(dev) else { continue };
                info.chips.push(TpuChip {
                    index,
                    device: dev.clone(),
                    chip_type: ty.and_then(|c| r.get(c)).and_then(|s| present(s)).map(str::to_string),
                    pid: pid.and_then(|c| r.get(c)).and_then(|s| present(s)?.parse().ok()),
                });
            }
        } else if title.contains("utilization") && !title.starts_with("tensorcore") || title == "tpu hbm usage" {
            let hbm = t.col(&["HBM Usage (GiB)", "Memory usage"]);
            let duty = t.col(&["Duty cycle", "Duty Cycle (%)"]);
            for r in &t.rows {
                let Some(index) = chip.and_then(|c| r.get(c)).and_then(|s| chip_index(s)) else { continue };
                let (used, total) = match hbm.and_then(|c| r.get(c)).and_then(|s| s.split_once('/')) {
                    Some((u, t)) => (mib(u), mib(t)),
                    None => (None, None),
                };
                let u = TpuUsage { chip: index, hbm_used_mib: used, hbm_total_mib: total, duty_cycle_pct: None };
                let u = TpuUsage { duty_cycle_pct: duty.and_then(|c| r.get(c)).and_then(|s| percent(s)), ..u };
                merge_usage(&mut info.usage, u);
            }
        } else if title == "tpu duty cycle" {
            // Per core: taken per chip where a chip has one core (v5e, v6e); see `duty_by_core`.
            let (core, duty) = (t.col(&["Core ID"]), t.col(&["Duty Cycle (%)", "Duty cycle"]));
            for r in &t.rows {
                let Some(index) = core.and_then(|c| r.get(c)).and_then(|s| chip_index(s)) else { continue };
                let d = duty.and_then(|c| r.get(c)).and_then(|s| percent(s));
                merge_usage(&mut info.usage, TpuUsage { chip: index, duty_cycle_pct: d, ..TpuUsage::default() });
            }
        } else if title.starts_with("tensorcore") {
            let (core, pct) = (t.col(&["Core ID"]), t.col(&["TensorCore Utilization"]));
            for r in &t.rows {
                if let (Some(c), Some(p)) = (
                    core.and_then(|c| r.get(c)).and_then(|s| chip_index(s)),
                    pct.and_then(|c| r.get(c)).and_then(|s| percent(s)),
                ) {
                    info.tensorcore_pct.push((c, p));
                }
            }
        } else if title.starts_with("tpu process info") {
            let (pid, name) = (t.col(&["PID"]), t.col(&["Process Name"]));
            for r in &t.rows {
                let Some(index) = chip.and_then(|c| r.get(c)).and_then(|s| chip_index(s)) else { continue };
                let Some(p) = pid.and_then(|c| r.get(c)).and_then(|s| present(s)?.parse().ok()) else { continue };
                let n = name.and_then(|c| r.get(c)).and_then(|s| present(s)).map(str::to_string);
                info.processes.push((index, p, n));
            }
        }
    }
    if tables.is_empty() && info.accelerator_type.is_none() && info.libtpu_version.is_none() {
        return Err(GpuError::Parse {
            what: "tpu-info",
            line: 1,
            why: format!("no table and no `Accelerator type:` line in {:?}", text.lines().next().unwrap_or("")),
        });
    }
    Ok(info)
}

/// Adds what `u` knows to the chip's entry.
fn merge_usage(list: &mut Vec<TpuUsage>, u: TpuUsage) {
    match list.iter_mut().find(|x| x.chip == u.chip) {
        Some(x) => {
            x.hbm_used_mib = x.hbm_used_mib.or(u.hbm_used_mib);
            x.hbm_total_mib = x.hbm_total_mib.or(u.hbm_total_mib);
            x.duty_cycle_pct = x.duty_cycle_pct.or(u.duty_cycle_pct);
        }
        None => list.push(u),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_and_values() {
        assert_eq!(
            cells("│ /dev/vfio/0 │ TPU v5p chip │ 1       │ None │"),
            ["/dev/vfio/0", "TPU v5p chip", "1", "None"]
        );
        assert_eq!(cells("| 0    | 18.45 GiB / 31.25 GiB |    100.00% |"), ["0", "18.45 GiB / 31.25 GiB", "100.00%"]);
        assert_eq!(
            (mib("1.26 GiB"), mib("N/A"), percent("71.11%"), percent("N/A")),
            (Some(1290), None, Some(71.11), None)
        );
        assert_eq!((chip_index("/dev/accel3"), chip_index("/dev/vfio/12"), chip_index("x")), (Some(3), Some(12), None));
    }

    #[test]
    fn nothing_recognisable_is_an_error() {
        assert!(parse_tpu_info("Traceback (most recent call last):\n").is_err());
        assert!(parse_tpu_info("").is_err());
    }
}
