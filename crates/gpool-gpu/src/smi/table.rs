//! The default `nvidia-smi` output: the GPU table (three lines a GPU), the
//! `MIG devices:` table and the `Processes:` table.
//!
//! Cells are split on `|`; values in a cell by whitespace. Names may be
//! truncated (`NVIDIA GeForce ...`), the fan may read `ERR!`, and a MIG device
//! that shares its GPU instance's memory has an empty memory cell.

use super::value::{self, present};
use crate::{GpuError, GpuProcess, GpuSample, MigSample};

const WHAT: &str = "nvidia-smi";

/// One GPU of the table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableGpu {
    /// The name as printed, without the `...` of a truncated one.
    pub name: String,
    /// The table cut the name short (`NVIDIA A100 80G...`).
    pub name_truncated: bool,
    pub persistence_mode: Option<bool>,
    pub pci_bus_id: Option<String>,
    pub display_active: Option<bool>,
    /// `Default`, `E. Process`, `Prohibited`.
    pub compute_mode: Option<String>,
    pub mig_mode: Option<bool>,
    /// Index, fan, temperature, pstate, power, memory, utilisation and the
    /// volatile uncorrected ECC count; `uuid` is empty (the table has none).
    pub sample: GpuSample,
}

/// One MIG device of the `MIG devices:` table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableMigDevice {
    pub gpu: u32,
    pub gi_id: u32,
    pub ci_id: u32,
    /// The MIG device index (`MIG Dev`).
    pub device: u32,
    /// `None` for a compute instance that shares its GPU instance's memory.
    pub memory_used_mb: Option<u64>,
    pub memory_total_mb: Option<u64>,
    pub bar1_used_mb: Option<u64>,
    pub bar1_total_mb: Option<u64>,
    pub sm_count: Option<u32>,
}

/// One process of the `Processes:` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableProcess {
    pub gpu: u32,
    /// `C`, `G` or `C+G`.
    pub kind: Option<String>,
    pub process: GpuProcess,
}

/// A parsed default `nvidia-smi` output.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SmiTable {
    pub smi_version: Option<String>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub gpus: Vec<TableGpu>,
    pub mig_devices: Vec<TableMigDevice>,
    pub processes: Vec<TableProcess>,
}

impl SmiTable {
    /// One sample a GPU, with its processes and MIG devices attached.
    pub fn samples(&self) -> Vec<GpuSample> {
        self.gpus
            .iter()
            .map(|g| {
                let i = g.sample.index;
                let mut s = g.sample.clone();
                s.processes = self.processes.iter().filter(|p| p.gpu == i).map(|p| p.process.clone()).collect();
                s.mig = self
                    .mig_devices
                    .iter()
                    .filter(|m| m.gpu == i)
                    .map(|m| MigSample {
                        gi_id: m.gi_id,
                        ci_id: Some(m.ci_id),
                        memory_used_mb: m.memory_used_mb,
                        memory_total_mb: m.memory_total_mb,
                    })
                    .collect();
                s
            })
            .collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Section {
    Gpus,
    Mig,
    Processes { gi_ci: bool },
}

fn err(line: usize, why: String) -> GpuError {
    GpuError::Parse { what: WHAT, line, why }
}

/// The cells of a `| a | b |` line, untrimmed.
fn cells(line: &str) -> Vec<&str> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').collect()
}

/// `used / total` sizes. The separator is ` /`: `N/A` holds a bare `/`.
fn used_total(cell: &str) -> (Option<u64>, Option<u64>) {
    match cell.split_once(" /") {
        Some((u, t)) => (value::mib(u, None), value::mib(t, None)),
        None => (None, None),
    }
}

/// The value after `label` up to the next run of two spaces or `|`.
fn labelled<'a>(line: &'a str, label: &str) -> Option<&'a str> {
    let (_, rest) = line.split_once(label)?;
    let rest = rest.trim_start();
    let end = rest.find("  ").or_else(|| rest.find('|')).unwrap_or(rest.len());
    present(rest.get(..end)?.trim())
}

/// Parses the default `nvidia-smi` output.
pub fn parse_table(text: &str) -> Result<SmiTable, GpuError> {
    let mut out = SmiTable::default();
    let mut section: Option<Section> = None;
    let mut in_body = false;
    let mut entry: Vec<(usize, &str)> = Vec::new();
    let mut saw_table = false;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        if line.contains("NVIDIA-SMI") && line.contains("Driver Version") {
            out.smi_version = labelled(line, "NVIDIA-SMI").map(str::to_string);
            out.driver_version = labelled(line, "Driver Version:").map(str::to_string);
            out.cuda_version = labelled(line, "CUDA Version:").map(str::to_string);
            saw_table = true;
            continue;
        }
        if !line.starts_with('|') && !line.starts_with('+') {
            // A blank line, the date line: between tables.
            finish(&mut out, section, &mut entry)?;
            section = None;
            in_body = false;
            continue;
        }
        saw_table = true;
        if line.starts_with('+') {
            finish(&mut out, section, &mut entry)?;
            continue;
        }
        if line.starts_with("|=") {
            in_body = true;
            continue;
        }
        if !in_body {
            if line.contains("Persistence-M") {
                section = Some(Section::Gpus);
            } else if line.contains("MIG devices:") {
                section = Some(Section::Mig);
            } else if line.contains("Processes:") {
                section = Some(Section::Processes { gi_ci: false });
            } else if let Some(Section::Processes { .. }) = section
                && line.split_whitespace().any(|t| t == "GI")
            {
                section = Some(Section::Processes { gi_ci: true });
            }
            continue;
        }
        match section {
            Some(Section::Processes { gi_ci }) => process_line(&mut out, gi_ci, line_no, line)?,
            Some(_) => entry.push((line_no, line)),
            None => {}
        }
    }
    finish(&mut out, section, &mut entry)?;
    if !saw_table && !text.trim().is_empty() {
        return Err(err(1, "no nvidia-smi table".into()));
    }
    Ok(out)
}

/// Parses the lines of one GPU or MIG device entry.
fn finish(out: &mut SmiTable, section: Option<Section>, entry: &mut Vec<(usize, &str)>) -> Result<(), GpuError> {
    let lines = std::mem::take(entry);
    let Some(&(first_no, first)) = lines.first() else { return Ok(()) };
    match section {
        Some(Section::Gpus) => out.gpus.push(gpu_entry(&lines)?),
        Some(Section::Mig) => {
            let c = cells(first);
            let ids: Vec<u32> =
                c.first().map(|c| c.split_whitespace().filter_map(value::id).collect()).unwrap_or_default();
            let [gpu, gi_id, ci_id, device] = ids[..] else {
                return Err(err(first_no, format!("expected GPU GI CI MIG-Dev ids in {first:?}")));
            };
            let (memory_used_mb, memory_total_mb) = c.get(1).map_or((None, None), |c| used_total(c));
            let (bar1_used_mb, bar1_total_mb) =
                lines.get(1).and_then(|(_, l)| cells(l).get(1).map(|c| used_total(c))).unwrap_or((None, None));
            let sm_count = c.get(2).and_then(|c| c.split_whitespace().next()).and_then(value::id);
            out.mig_devices.push(TableMigDevice {
                gpu,
                gi_id,
                ci_id,
                device,
                memory_used_mb,
                memory_total_mb,
                bar1_used_mb,
                bar1_total_mb,
                sm_count,
            });
        }
        _ => {}
    }
    Ok(())
}

fn gpu_entry(lines: &[(usize, &str)]) -> Result<TableGpu, GpuError> {
    let (first_no, first) = lines.first().copied().unwrap_or((0, ""));
    let c1 = cells(first);
    let head = c1.first().map_or("", |c| c.trim());
    let (index, rest) = head.split_once(char::is_whitespace).unwrap_or((head, ""));
    let index: u32 = index.parse().map_err(|_| err(first_no, format!("GPU index {index:?} in {first:?}")))?;
    let rest = rest.trim();
    let (name, persistence) = match rest.rsplit_once(char::is_whitespace) {
        Some((n, p)) if value::enabled(p).is_some() => (n.trim(), value::enabled(p)),
        _ => (rest, None),
    };
    let name_truncated = name.ends_with("...");
    let name = name.trim_end_matches("...").trim().to_string();
    let mut bus = c1.get(1).map(|c| c.split_whitespace());
    let pci_bus_id = bus.as_mut().and_then(Iterator::next).and_then(present).map(str::to_string);
    let display_active = bus.as_mut().and_then(Iterator::next).and_then(value::enabled);
    let mut g = TableGpu {
        name,
        name_truncated,
        persistence_mode: persistence,
        pci_bus_id,
        display_active,
        sample: GpuSample {
            index,
            ecc_uncorrected_volatile: c1.get(2).and_then(|c| value::count(c)),
            ..GpuSample::default()
        },
        ..TableGpu::default()
    };
    if let Some(&(_, second)) = lines.get(1) {
        let c2 = cells(second);
        let left = c2.first().copied().unwrap_or("");
        let (head, power) = left.split_once(" /").map_or((left, None), |(h, cap)| (h, Some(cap)));
        let mut t = head.split_whitespace();
        g.sample.fan_pct = t.next().and_then(|v| value::percent(v, None));
        g.sample.temperature_c = t.next().and_then(|v| value::celsius(v, None));
        g.sample.pstate = t.next().and_then(present).map(str::to_string);
        g.sample.power_draw_w = t.next().and_then(|v| value::watts(v, None));
        g.sample.power_limit_w = power.and_then(|p| value::watts(p, None));
        let (used, total) = c2.get(1).map_or((None, None), |c| used_total(c));
        g.sample.memory_used_mb = used;
        g.sample.memory_total_mb = total;
        if let Some(c) = c2.get(2) {
            let c = c.trim();
            let (util, mode) = c.split_once(char::is_whitespace).unwrap_or((c, ""));
            g.sample.gpu_util_pct = value::percent(util, None);
            g.compute_mode = present(mode).map(str::to_string);
        }
    }
    if let Some(&(_, third)) = lines.get(2) {
        g.mig_mode = cells(third).get(2).and_then(|c| value::enabled(c));
    }
    Ok(g)
}

fn process_line(out: &mut SmiTable, gi_ci: bool, line_no: usize, line: &str) -> Result<(), GpuError> {
    let inner = cells(line).concat();
    let t: Vec<&str> = inner.split_whitespace().collect();
    if t.is_empty() || inner.to_ascii_lowercase().contains("no running processes") {
        return Ok(());
    }
    let fixed = if gi_ci { 5 } else { 3 }; // GPU [GI CI] PID Type
    if t.len() < fixed + 1 {
        return Err(err(line_no, format!("too few columns for a process: {line:?}")));
    }
    let id = |k: usize| t.get(k).copied().and_then(value::id);
    let gpu = id(0).ok_or_else(|| err(line_no, format!("GPU index in {line:?}")))?;
    let pid = id(fixed - 2).ok_or_else(|| err(line_no, format!("PID in {line:?}")))?;
    let memory = t.last().copied().unwrap_or("");
    let name_end = t.len() - 1;
    let name = t.get(fixed..name_end).map(|n| n.join(" ")).filter(|n| !n.is_empty());
    out.processes.push(TableProcess {
        gpu,
        kind: t.get(fixed - 1).and_then(|k| present(k)).map(str::to_string),
        process: GpuProcess {
            pid,
            name,
            used_memory_mb: value::mib(memory, None),
            sm_util_pct: None,
            gi_id: if gi_ci { id(1) } else { None },
            ci_id: if gi_ci { id(2) } else { None },
        },
    });
    Ok(())
}
