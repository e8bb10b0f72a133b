//! `--query-gpu=… --format=csv` and `--query-compute-apps=… --format=csv`.
//!
//! Columns are read by header name, in any order, with the unit the header
//! names (`memory.used [MiB]`) or the value carries (`11125 MiB`); aliases
//! (`gpu_uuid`, `clocks.sm`) and the `clocks_throttle_reasons` →
//! `clocks_event_reasons` rename resolve to one name. Without a header
//! (`noheader`), the caller passes the field list it asked for.

use super::report::sum_present;
use super::value::{self, present};
use crate::model::short_model;
use crate::{GpuError, GpuInfo, GpuProcess, GpuSample, throttle_reason_names};

/// Which query a CSV answers: some aliases depend on it (`name`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Query {
    Gpu,
    ComputeApps,
}

impl Query {
    fn what(self) -> &'static str {
        match self {
            Query::Gpu => "--query-gpu",
            Query::ComputeApps => "--query-compute-apps",
        }
    }
}

/// `--query-gpu` aliases (from `--help-query-gpu`) and their canonical names.
pub const GPU_ALIASES: &[(&str, &str)] = &[
    ("gpu_name", "name"),
    ("gpu_serial", "serial"),
    ("gpu_uuid", "uuid"),
    ("gpu_bus_id", "pci.bus_id"),
    ("inforom.image", "inforom.img"),
    ("inforom.power", "inforom.pwr"),
    ("gpu_operation_mode.current", "gom.current"),
    ("gpu_operation_mode.pending", "gom.pending"),
    ("retired_pages.sbe", "retired_pages.single_bit_ecc.count"),
    ("retired_pages.dbe", "retired_pages.double_bit.count"),
    ("remapped_rows.sbe", "remapped_rows.correctable"),
    ("remapped_rows.dbe", "remapped_rows.uncorrectable"),
    ("gpu.power.draw.average", "power.draw.average"),
    ("gpu.power.draw.instant", "power.draw.instant"),
    ("gpu.power.requested_limit", "power.limit"),
    ("gpu.power.current_limit", "enforced.power.limit"),
    ("gpu.power.default_limit", "power.default_limit"),
    ("gpu.power.min_limit", "power.min_limit"),
    ("gpu.power.max_limit", "power.max_limit"),
    ("module.power.requested_limit", "module.power.limit"),
    ("module.power.current_limit", "module.enforced.power.limit"),
    ("clocks.gr", "clocks.current.graphics"),
    ("clocks.sm", "clocks.current.sm"),
    ("clocks.mem", "clocks.current.memory"),
    ("clocks.video", "clocks.current.video"),
    ("clocks.applications.gr", "clocks.applications.graphics"),
    ("clocks.applications.mem", "clocks.applications.memory"),
    ("clocks.default_applications.gr", "clocks.default_applications.graphics"),
    ("clocks.default_applications.mem", "clocks.default_applications.memory"),
    ("clocks.max.gr", "clocks.max.graphics"),
    ("clocks.max.mem", "clocks.max.memory"),
];

/// `--query-compute-apps` aliases and their canonical names.
pub const APP_ALIASES: &[(&str, &str)] = &[("name", "process_name"), ("used_memory", "used_gpu_memory")];

/// The canonical, lower-case name of a field.
pub fn canonical(field: &str, query: Query) -> String {
    let f = field.trim().to_ascii_lowercase();
    let f = match f.strip_prefix("clocks_throttle_reasons") {
        Some(rest) => format!("clocks_event_reasons{rest}"),
        None => f,
    };
    let aliases = match query {
        Query::Gpu => GPU_ALIASES,
        Query::ComputeApps => APP_ALIASES,
    };
    match aliases.iter().find(|(alias, _)| *alias == f) {
        Some((_, name)) => (*name).to_string(),
        None => f,
    }
}

/// One column: the canonical field name and the header's unit, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvColumn {
    pub field: String,
    pub unit: Option<String>,
}

/// One data row: its line in the output (1-based) and its cells, trimmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvRow {
    pub line: usize,
    pub cells: Vec<String>,
}

/// A parsed `--format=csv` output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvTable {
    pub query: Query,
    pub columns: Vec<CsvColumn>,
    pub rows: Vec<CsvRow>,
}

/// Splits `memory.used [MiB]` into the field and the unit.
fn header_cell(cell: &str, query: Query) -> CsvColumn {
    let cell = cell.trim();
    match cell.split_once('[') {
        Some((name, rest)) => CsvColumn {
            field: canonical(name, query),
            unit: Some(rest.trim_end().trim_end_matches(']').trim().to_string()).filter(|u| !u.is_empty()),
        },
        None => CsvColumn { field: canonical(cell, query), unit: None },
    }
}

/// Whether a cell is shaped like a header cell: a field name, then maybe ` [unit]`.
fn header_shaped(cell: &str) -> bool {
    let name = cell.split_once('[').map_or(cell, |(n, _)| n).trim();
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// Lines nvidia-smi prints instead of rows when there is nothing to list.
fn nothing_to_list(line: &str) -> bool {
    let l = line.trim().to_ascii_lowercase();
    l.starts_with("no devices were found") || l.starts_with("no running processes found")
}

impl CsvTable {
    /// Parses CSV output. `fields` is the list asked for: needed without a
    /// header, and used to tell a header from a data row.
    pub fn parse(text: &str, query: Query, fields: Option<&[&str]>) -> Result<CsvTable, GpuError> {
        let what = query.what();
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l))
            .filter(|(_, l)| !l.trim().is_empty() && !nothing_to_list(l));
        let Some((first_no, first)) = lines.next() else {
            let columns = fields.unwrap_or(&[]).iter().map(|f| header_cell(f, query)).collect();
            return Ok(CsvTable { query, columns, rows: Vec::new() });
        };
        let first_cells: Vec<&str> = first.split(',').map(str::trim).collect();
        let is_header = match fields {
            None => true,
            Some(asked) => {
                let asked: Vec<String> = asked.iter().map(|f| canonical(f, query)).collect();
                first_cells.iter().all(|c| header_shaped(c))
                    && first_cells.iter().any(|c| asked.contains(&header_cell(c, query).field))
            }
        };
        let columns: Vec<CsvColumn> = if is_header {
            first_cells.iter().map(|c| header_cell(c, query)).collect()
        } else {
            fields.unwrap_or(&[]).iter().map(|f| header_cell(f, query)).collect()
        };
        if is_header && !first_cells.iter().all(|c| header_shaped(c)) {
            return Err(GpuError::Parse {
                what,
                line: first_no,
                why: format!("expected a header of field names, got {:?}", clip(first)),
            });
        }
        // A process name may hold commas: the extra cells go back into it.
        let name_col = columns.iter().position(|c| c.field == "process_name");
        let mut rows = Vec::new();
        let data = if is_header { None } else { Some((first_no, first)) };
        for (line, text) in data.into_iter().chain(lines) {
            let mut cells: Vec<String> = text.split(',').map(|c| c.trim().to_string()).collect();
            if let (Some(n), true) = (name_col, cells.len() > columns.len()) {
                let extra = cells.len() - columns.len();
                let joined: Vec<String> = cells.drain(n..=n + extra).collect();
                cells.insert(n, joined.join(","));
            }
            if cells.len() != columns.len() {
                return Err(GpuError::Parse {
                    what,
                    line,
                    why: format!("{} values for {} columns in {:?}", cells.len(), columns.len(), clip(text)),
                });
            }
            rows.push(CsvRow { line, cells });
        }
        Ok(CsvTable { query, columns, rows })
    }

    /// The column of a field (any alias), if the output has it.
    pub fn column(&self, field: &str) -> Option<usize> {
        let f = canonical(field, self.query);
        self.columns.iter().position(|c| c.field == f)
    }

    /// The header's unit for a field.
    pub fn unit(&self, field: &str) -> Option<&str> {
        self.column(field).and_then(|i| self.columns.get(i)).and_then(|c| c.unit.as_deref())
    }

    /// A field's value in a row, `None` when the column is absent or the value missing.
    pub fn get<'a>(&'a self, row: &'a CsvRow, field: &str) -> Option<&'a str> {
        self.column(field).and_then(|i| row.cells.get(i)).and_then(|v| present(v))
    }

    /// A field's value in a row as printed, missing markers included.
    pub fn raw<'a>(&'a self, row: &'a CsvRow, field: &str) -> Option<&'a str> {
        self.column(field).and_then(|i| row.cells.get(i)).map(String::as_str)
    }

    fn with_unit<T>(&self, row: &CsvRow, field: &str, f: impl Fn(&str, Option<&str>) -> Option<T>) -> Option<T> {
        self.get(row, field).and_then(|v| f(v, self.unit(field)))
    }
}

/// At most 80 characters of a line, for error messages.
pub(crate) fn clip(line: &str) -> String {
    let mut s: String = line.chars().take(80).collect();
    if line.chars().nth(80).is_some() {
        s.push('…');
    }
    s
}

/// One GPU (one row) of `--query-gpu` output.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueryGpuRow {
    /// The row's line in the output (1-based).
    pub line: usize,
    /// `timestamp`, as printed (`2026/07/14 08:12:53.353`).
    pub timestamp: Option<String>,
    pub name: Option<String>,
    pub pci_bus_id: Option<String>,
    /// `mig.mode.current`.
    pub mig_mode: Option<bool>,
    /// `clocks.max.sm`.
    pub max_sm_clock_mhz: Option<u32>,
    /// The metrics. `index` is the `index` column, else the row's position;
    /// `uuid` is empty when the output has none.
    pub sample: GpuSample,
}

/// The names of the `clocks_event_reasons.<name>` columns and the names we use.
const REASON_COLUMNS: [(&str, &str); 9] = [
    ("gpu_idle", "idle"),
    ("applications_clocks_setting", "applications_clocks_setting"),
    ("sw_power_cap", "sw_power_cap"),
    ("hw_slowdown", "hw_slowdown"),
    ("sync_boost", "sync_boost"),
    ("sw_thermal_slowdown", "sw_thermal_slowdown"),
    ("hw_thermal_slowdown", "hw_thermal_slowdown"),
    ("hw_power_brake_slowdown", "hw_power_brake_slowdown"),
    ("display_clock_setting", "display_clock_setting"),
];

/// Parses `--query-gpu` output: one row per GPU, or per sample with `-l`.
pub fn parse_query_gpu(text: &str, fields: Option<&[&str]>) -> Result<Vec<QueryGpuRow>, GpuError> {
    let t = CsvTable::parse(text, Query::Gpu, fields)?;
    let mut out = Vec::with_capacity(t.rows.len());
    for (pos, row) in t.rows.iter().enumerate() {
        let index = match t.get(row, "index") {
            None => u32::try_from(pos).unwrap_or(u32::MAX),
            Some(v) => v.parse().map_err(|_| GpuError::Parse {
                what: "--query-gpu",
                line: row.line,
                why: format!("index {v:?} is not a number"),
            })?,
        };
        let s = |f: &str| t.get(row, f).map(str::to_string);
        let first = |fs: &[&str], conv: fn(&str, Option<&str>) -> Option<f64>| {
            fs.iter().find_map(|f| t.with_unit(row, f, conv))
        };
        let throttle_reasons = match t.get(row, "clocks_event_reasons.active").and_then(value::hex) {
            Some(bits) => Some(throttle_reason_names(bits)),
            None => {
                let cols: Vec<(&str, Option<&str>)> = REASON_COLUMNS
                    .iter()
                    .map(|(col, name)| (*name, t.get(row, &format!("clocks_event_reasons.{col}"))))
                    .collect();
                cols.iter().any(|(_, v)| v.is_some()).then(|| {
                    cols.iter()
                        .filter(|(_, v)| v.is_some_and(|v| v.eq_ignore_ascii_case("active")))
                        .map(|(n, _)| (*n).to_string())
                        .collect()
                })
            }
        };
        let sample = GpuSample {
            index,
            uuid: s("uuid").unwrap_or_default(),
            gpu_util_pct: t.with_unit(row, "utilization.gpu", value::percent),
            mem_util_pct: t.with_unit(row, "utilization.memory", value::percent),
            memory_used_mb: t.with_unit(row, "memory.used", value::mib),
            memory_total_mb: t.with_unit(row, "memory.total", value::mib),
            memory_free_mb: t.with_unit(row, "memory.free", value::mib),
            memory_reserved_mb: t.with_unit(row, "memory.reserved", value::mib),
            temperature_c: t.with_unit(row, "temperature.gpu", value::celsius),
            memory_temperature_c: t.with_unit(row, "temperature.memory", value::celsius),
            junction_temperature_c: None,
            slowdown_temperature_c: None,
            power_draw_w: first(&["power.draw", "power.draw.average", "power.draw.instant"], value::watts),
            power_limit_w: first(&["enforced.power.limit", "power.limit"], value::watts),
            energy_mj: None,
            sm_clock_mhz: t.with_unit(row, "clocks.current.sm", value::mhz),
            mem_clock_mhz: t.with_unit(row, "clocks.current.memory", value::mhz),
            fan_pct: t.with_unit(row, "fan.speed", value::percent),
            pstate: s("pstate"),
            ecc_corrected_volatile: t.get(row, "ecc.errors.corrected.volatile.total").and_then(value::count),
            ecc_uncorrected_volatile: t.get(row, "ecc.errors.uncorrected.volatile.total").and_then(value::count),
            xid_last: None,
            xid_count: None,
            xids_recent: Vec::new(),
            // Read where the output has them: `SAMPLE_FIELDS` does not ask for
            // them (see there), a wider query or a stand-in may answer them.
            remap_pending: t.get(row, "remapped_rows.pending").and_then(value::enabled),
            remap_failed: t.get(row, "remapped_rows.failure").and_then(value::enabled),
            retired_pages: sum_present(
                ["retired_pages.single_bit_ecc.count", "retired_pages.double_bit.count"]
                    .map(|f| t.get(row, f).and_then(value::count)),
            ),
            retired_pages_pending: t.get(row, "retired_pages.pending").and_then(value::enabled),
            // `--query-gpu` has no NVLink error or PCIe replay field (590 `--help-query-gpu`).
            nvlink_errors: None,
            pcie_replays: None,
            enc_util_pct: t.with_unit(row, "utilization.encoder", value::percent),
            dec_util_pct: t.with_unit(row, "utilization.decoder", value::percent),
            // `--query-gpu` has no PCIe throughput field (`nvidia-smi -q` has).
            pcie_tx_bytes_per_s: None,
            pcie_rx_bytes_per_s: None,
            remapped_rows_correctable: t.get(row, "remapped_rows.correctable").and_then(value::count),
            remapped_rows_uncorrectable: t.get(row, "remapped_rows.uncorrectable").and_then(value::count),
            health_fault: None,
            throttle_reasons,
            processes: Vec::new(),
            mig: Vec::new(),
        };
        out.push(QueryGpuRow {
            line: row.line,
            timestamp: s("timestamp"),
            name: s("name"),
            pci_bus_id: s("pci.bus_id"),
            mig_mode: t.get(row, "mig.mode.current").and_then(value::enabled),
            max_sm_clock_mhz: t.with_unit(row, "clocks.max.sm", value::mhz),
            sample,
        });
    }
    Ok(out)
}

impl QueryGpuRow {
    /// The GPU as inventory: needs `uuid`, `name` and `memory.total`. MIG
    /// mode on gives `mig: Some(vec![])`, for the caller to fill.
    pub fn to_info(&self) -> Result<GpuInfo, GpuError> {
        let missing = |f: &str| GpuError::Parse {
            what: "--query-gpu",
            line: self.line,
            why: format!("no {f} for GPU {}: the inventory needs uuid, name and memory.total", self.sample.index),
        };
        if self.sample.uuid.is_empty() {
            return Err(missing("uuid"));
        }
        let name = self.name.clone().ok_or_else(|| missing("name"))?;
        Ok(GpuInfo {
            kind: crate::Accelerator::NvidiaGpu,
            index: self.sample.index,
            uuid: self.sample.uuid.clone(),
            model: short_model(&name),
            name,
            memory_mb: self.sample.memory_total_mb.ok_or_else(|| missing("memory.total"))?,
            pci_bus_id: self.pci_bus_id.clone(),
            nvlink_group: None,
            nvlink_peers: Vec::new(),
            numa_node: None,
            mig: (self.mig_mode == Some(true)).then(Vec::new),
        })
    }
}

/// One process of `--query-compute-apps` output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeApp {
    pub line: usize,
    pub gpu_uuid: Option<String>,
    pub gpu_bus_id: Option<String>,
    pub process: GpuProcess,
}

/// Parses `--query-compute-apps` output. A row without a pid is an error.
pub fn parse_compute_apps(text: &str, fields: Option<&[&str]>) -> Result<Vec<ComputeApp>, GpuError> {
    let t = CsvTable::parse(text, Query::ComputeApps, fields)?;
    t.rows
        .iter()
        .map(|row| {
            let pid = t.get(row, "pid").and_then(|p| p.parse::<u32>().ok()).ok_or_else(|| GpuError::Parse {
                what: "--query-compute-apps",
                line: row.line,
                why: format!("no pid in {:?}", row.cells),
            })?;
            Ok(ComputeApp {
                line: row.line,
                gpu_uuid: t.get(row, "gpu_uuid").map(str::to_string),
                gpu_bus_id: t.get(row, "gpu_bus_id").map(str::to_string),
                process: GpuProcess {
                    pid,
                    name: t.get(row, "process_name").map(str::to_string),
                    used_memory_mb: t.with_unit(row, "used_gpu_memory", value::mib),
                    sm_util_pct: None,
                    gi_id: None,
                    ci_id: None,
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_read_by_name_with_or_without_units_and_header() {
        let with = "memory.used [MiB], index, uuid\n11125 MiB, 3, GPU-a\n";
        let nounits = "memory.used [MiB], index, uuid\n11125, 3, GPU-a\n";
        let noheader = "GPU-a, 3, 11125\n";
        for (text, fields) in [(with, None), (nounits, None), (noheader, Some(&["uuid", "index", "memory.used"][..]))] {
            let rows = parse_query_gpu(text, fields).expect(text);
            assert_eq!(rows.len(), 1);
            assert_eq!((rows[0].sample.index, rows[0].sample.uuid.as_str()), (3, "GPU-a"));
            assert_eq!(rows[0].sample.memory_used_mb, Some(11125), "{text}");
        }
    }

    #[test]
    fn throttle_reasons_from_either_name_and_from_single_columns() {
        let old = "clocks_throttle_reasons.active\n0x0000000000000044\n";
        let rows = parse_query_gpu(old, None).expect("parses");
        assert_eq!(rows[0].sample.throttle_reasons, Some(vec!["sw_power_cap".into(), "hw_thermal_slowdown".into()]));
        let single = "clocks_throttle_reasons.gpu_idle, clocks_throttle_reasons.sw_power_cap\nActive, Not Active\n";
        let rows = parse_query_gpu(single, None).expect("parses");
        assert_eq!(rows[0].sample.throttle_reasons, Some(vec!["idle".into()]));
        let none = "index\n0\n";
        assert_eq!(parse_query_gpu(none, None).expect("parses")[0].sample.throttle_reasons, None);
    }

    #[test]
    fn memory_fault_columns_are_read_where_present() {
        let text = "index, remapped_rows.pending, remapped_rows.failure, retired_pages.sbe, retired_pages.dbe, retired_pages.pending\n\
                    0, Yes, No, [N/A], 2, Yes\n\
                    1, [N/A], [N/A], [N/A], [N/A], [N/A]\n";
        let rows = parse_query_gpu(text, None).expect("parses");
        let s = &rows[0].sample;
        assert_eq!(
            (s.remap_pending, s.remap_failed, s.retired_pages, s.retired_pages_pending),
            (Some(true), Some(false), Some(2), Some(true)),
            "aliases resolve; one count present is the sum"
        );
        let s = &rows[1].sample;
        assert_eq!(
            (s.remap_pending, s.remap_failed, s.retired_pages, s.retired_pages_pending),
            (None, None, None, None)
        );
        let absent = &parse_query_gpu("index\n0\n", None).expect("parses")[0].sample;
        assert_eq!((absent.remap_pending, absent.retired_pages, absent.pcie_replays), (None, None, None));
    }

    #[test]
    fn bad_rows_are_errors_with_their_line() {
        let e = parse_query_gpu("index, uuid\n0, GPU-a\n1\n", None).expect_err("short row");
        assert!(matches!(e, GpuError::Parse { line: 3, .. }), "{e}");
        let e = parse_query_gpu("index\nzero\n", None).expect_err("bad index");
        assert!(matches!(e, GpuError::Parse { line: 2, .. }), "{e}");
        // A process name with a comma stays one value.
        let apps = parse_compute_apps("pid, process_name, used_gpu_memory [MiB]\n7, python a,b.py, 10 MiB\n", None)
            .expect("parses");
        assert_eq!(apps[0].process.name.as_deref(), Some("python a,b.py"));
        assert_eq!(apps[0].process.used_memory_mb, Some(10));
        assert!(parse_compute_apps("", None).expect("empty").is_empty());
    }
}
