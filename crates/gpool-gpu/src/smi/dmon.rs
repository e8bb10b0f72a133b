//! `nvidia-smi dmon` (device monitoring) and `nvidia-smi pmon` (process
//! monitoring): `#`-headers naming the columns, then one row per device (or
//! process) per interval. `-` is a value the device does not report.

use super::value::{self, present};
use crate::{GpuError, GpuSample};

/// The column names of the first `#` header line, and the data lines.
fn columns_and_rows<'a>(
    text: &'a str,
    what: &'static str,
) -> Result<(Vec<String>, Vec<(usize, Vec<&'a str>)>), GpuError> {
    let mut names: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(h) = line.strip_prefix('#') {
            // The first header names the columns; the second gives units.
            if names.is_none() {
                names = Some(h.split_whitespace().map(str::to_ascii_lowercase).collect());
            }
            continue;
        }
        let Some(n) = &names else {
            return Err(GpuError::Parse { what, line: i + 1, why: "a row before the `# gpu …` header".into() });
        };
        let cells: Vec<&str> = line.split_whitespace().collect();
        if cells.len() < n.len() {
            return Err(GpuError::Parse {
                what,
                line: i + 1,
                why: format!("{} values for {} columns", cells.len(), n.len()),
            });
        }
        rows.push((i + 1, cells));
    }
    Ok((names.unwrap_or_default(), rows))
}

/// One row of `dmon`: one device at one interval.
#[derive(Clone, Debug, PartialEq)]
pub struct DmonRow {
    pub line: usize,
    pub gpu: u32,
    /// Every column by its header name (`pwr`, `gtemp`, `sm`, `mclk`, …), as printed.
    pub values: Vec<(String, String)>,
}

impl DmonRow {
    /// A column's value, `None` when absent or `-`.
    pub fn get(&self, column: &str) -> Option<&str> {
        self.values.iter().find(|(c, _)| c == column).and_then(|(_, v)| present(v))
    }

    /// The row as a sample (`uuid` empty: dmon prints none). `sm` is the
    /// utilisation `utilization.gpu` reports.
    pub fn to_sample(&self) -> GpuSample {
        let f = |c: &str| self.get(c).and_then(|v| value::number_unit(v)).map(|(n, _)| n);
        let clock = |c: &str| self.get(c).and_then(|v| value::mhz(v, None));
        GpuSample {
            index: self.gpu,
            power_draw_w: f("pwr"),
            temperature_c: f("gtemp"),
            memory_temperature_c: f("mtemp"),
            junction_temperature_c: None,
            slowdown_temperature_c: None,
            gpu_util_pct: f("sm"),
            mem_util_pct: f("mem"),
            mem_clock_mhz: clock("mclk"),
            sm_clock_mhz: clock("pclk"),
            memory_used_mb: self.get("fb").and_then(|v| value::mib(v, None)),
            ecc_corrected_volatile: self.get("sbecc").and_then(value::count),
            ecc_uncorrected_volatile: self.get("dbecc").and_then(value::count),
            ..GpuSample::default()
        }
    }
}

/// Parses `nvidia-smi dmon` output (any `-s` column set).
pub fn parse_dmon(text: &str) -> Result<Vec<DmonRow>, GpuError> {
    const WHAT: &str = "nvidia-smi dmon";
    let (names, rows) = columns_and_rows(text, WHAT)?;
    let gpu_col = names.iter().position(|n| n == "gpu").ok_or_else(|| GpuError::Parse {
        what: WHAT,
        line: 1,
        why: "no `gpu` column in the header".into(),
    })?;
    rows.into_iter()
        .map(|(line, cells)| {
            let gpu = cells.get(gpu_col).and_then(|v| value::id(v)).ok_or_else(|| GpuError::Parse {
                what: WHAT,
                line,
                why: format!("GPU index {:?} is not a number", cells.get(gpu_col)),
            })?;
            let values = names.iter().zip(&cells).map(|(n, v)| (n.clone(), (*v).to_string())).collect();
            Ok(DmonRow { line, gpu, values })
        })
        .collect()
}

/// One row of `pmon`: one process at one interval.
#[derive(Clone, Debug, PartialEq)]
pub struct PmonRow {
    pub line: usize,
    pub gpu: u32,
    pub pid: u32,
    /// `C`, `G` or `C+G`.
    pub kind: Option<String>,
    pub sm_pct: Option<f64>,
    pub mem_pct: Option<f64>,
    pub command: Option<String>,
}

/// Parses `nvidia-smi pmon` output. Rows with pid `-` (a GPU without
/// processes) are left out.
pub fn parse_pmon(text: &str) -> Result<Vec<PmonRow>, GpuError> {
    const WHAT: &str = "nvidia-smi pmon";
    let (names, rows) = columns_and_rows(text, WHAT)?;
    let col = |n: &str| names.iter().position(|c| c == n);
    let (Some(gpu_col), Some(pid_col)) = (col("gpu"), col("pid")) else {
        return Err(GpuError::Parse { what: WHAT, line: 1, why: "no `gpu` and `pid` columns in the header".into() });
    };
    let mut out = Vec::new();
    for (line, cells) in rows {
        let get = |c: Option<usize>| c.and_then(|c| cells.get(c)).and_then(|v| present(v));
        let Some(pid) = get(Some(pid_col)) else { continue };
        let bad = |what: &str| GpuError::Parse { what: WHAT, line, why: format!("{what} is not a number") };
        let pct = |n: &str| get(col(n)).and_then(|v| value::percent(v, None));
        out.push(PmonRow {
            line,
            gpu: get(Some(gpu_col)).and_then(value::id).ok_or_else(|| bad("GPU index"))?,
            pid: value::id(pid).ok_or_else(|| bad("pid"))?,
            kind: get(col("type")).map(str::to_string),
            sm_pct: pct("sm"),
            mem_pct: pct("mem"),
            // The command is the last column and may hold spaces.
            command: col("command")
                .and_then(|c| cells.get(c..))
                .map(|c| c.join(" "))
                .and_then(|c| present(&c).map(str::to_string)),
        });
    }
    Ok(out)
}
