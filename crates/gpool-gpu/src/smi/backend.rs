//! The `nvidia-smi` backend: runs the binary with a timeout and parses what
//! it prints.
//!
//! What it runs (the exact argument lists are in [`super::commands`]):
//!
//! - [`Backend::inventory`]: see [`super::inventory`]: `--query-gpu`, and
//!   only where needed `-L`, `mig -lgi`, `-q -x`, `-q`. Every one of them may
//!   fail; each GPU is kept as long as one of them lists it.
//! - [`Backend::sample`]: [`SAMPLE_ARGS`] and [`COMPUTE_APPS_ARGS`]; when a
//!   GPU has MIG on, also [`XML_ARGS`] (else [`TEXT_ARGS`]) for per-instance
//!   memory and the GPU and compute instance of each process, and then
//!   the report's row remapping, retired pages and PCIe replays for every
//!   GPU (the query does not ask for them: see [`SAMPLE_FIELDS`]). If
//!   [`SAMPLE_ARGS`] fails (an older driver that lacks a field, say), the
//!   report alone, then and from then on. A process list or MIG report that
//!   fails leaves the sample without them, and says so once
//!   ([`Backend::degraded`]).
//!
//! Extra columns in the CSV answers are fine: columns are read by name.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::commands::{COMPUTE_APPS_ARGS, COMPUTE_APPS_FIELDS, SAMPLE_ARGS, SAMPLE_FIELDS, TEXT_ARGS, XML_ARGS};
use super::csv::{QueryGpuRow, parse_compute_apps, parse_query_gpu};
use super::inventory::{inventory, refusal};
use super::mig::parse_gpu_instances;
use super::report::{Report, fill_faults};
use super::text::parse_text;
use super::value::same_bus_id;
use super::xml::parse_xml;
use crate::model::mig_gpu_slices;
use crate::tool::{self, ToolFailure, find_in_path};
use crate::{Backend, Degraded, GpuError, GpuInfo, GpuSample, MigSlot};

/// `nvidia-smi`, run as a child process with a timeout.
#[derive(Clone, Debug)]
pub struct NvidiaSmi {
    program: PathBuf,
    timeout: Duration,
    /// `--query-gpu` failed once and the report worked: use the report from now on.
    report_only: bool,
    /// What failed while the rest answered (see [`Backend::degraded`]).
    degraded: Vec<Degraded>,
    /// Each GPU's slowdown temperature by UUID, read once from the report
    /// (`--query-gpu` has no field for it); `None` until first asked.
    slowdown_c: Option<std::collections::HashMap<String, f64>>,
    /// XIDs from the kernel log (`kmsg.rs`): nvidia-smi reports none.
    kernel_log: Option<super::kmsg::KernelLog>,
}

/// What the message says when a backend that reads GPUs another way (NVML)
/// cannot find the `nvidia-smi` its MIG changes go through.
pub const NO_SMI_FOR_MIG: &str = "MIG layouts are changed through nvidia-smi (NVML reads the GPUs), which is not on PATH: install it with the driver";

/// Changes a MIG layout through the `nvidia-smi` found on `path`, for a
/// backend that reads the GPUs another way (NVML's own MIG calls are not
/// in the safe bindings; `nvidia-smi mig` is what operators use anyway).
pub fn apply_mig_layout_on_path(path: &std::ffi::OsStr, gpu: u32, layout: &[MigSlot]) -> Result<(), GpuError> {
    let program = find_in_path("nvidia-smi", path).ok_or_else(|| GpuError::Mig { gpu, why: NO_SMI_FOR_MIG.into() })?;
    NvidiaSmi::at(program).apply_mig_layout(gpu, layout)
}

impl NvidiaSmi {
    /// How long one run may take before it is killed.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

    /// `nvidia-smi` found on `PATH`.
    pub fn on_path() -> Result<NvidiaSmi, GpuError> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        find_in_path("nvidia-smi", &path).map(NvidiaSmi::at).ok_or_else(|| {
            GpuError::NoDriver("nvidia-smi not found on PATH: install the NVIDIA driver or pass --simulate-gpus".into())
        })
    }

    /// The `nvidia-smi` at this path (or a stand-in for it).
    pub fn at(program: impl Into<PathBuf>) -> NvidiaSmi {
        NvidiaSmi {
            program: program.into(),
            timeout: NvidiaSmi::DEFAULT_TIMEOUT,
            report_only: false,
            slowdown_c: None,
            degraded: Vec::new(),
            kernel_log: None,
        }
    }

    /// Reads XID events from the kernel log too (a node's real driver; not
    /// a stand-in's). If it cannot be read, samples carry no XIDs, and
    /// [`Backend::degraded`] says why.
    pub fn with_kernel_log(mut self) -> NvidiaSmi {
        match super::kmsg::KernelLog::open() {
            Ok(k) => self.kernel_log = Some(k),
            Err(why) => self.note(Degraded {
                what: "XID events unknown".into(),
                command: "read /dev/kmsg".into(),
                why,
                instead: "faults are seen by ECC counts, row remapping and GPUs that stop answering only".into(),
            }),
        }
        self
    }

    /// The XIDs the kernel logged for each sample's GPU (by PCI bus id).
    fn add_kernel_xids<'a>(&mut self, samples: impl Iterator<Item = (&'a mut GpuSample, Option<&'a str>)>) {
        let Some(k) = self.kernel_log.as_mut() else { return };
        k.drain();
        for (s, bus) in samples {
            let Some(bus) = bus else { continue };
            let (count, recent) = k.of(bus);
            s.xid_last = Some(recent.last().copied().unwrap_or(0));
            (s.xid_count, s.xids_recent) = (Some(count), recent);
        }
    }

    /// Sets how long one run may take.
    pub fn with_timeout(mut self, timeout: Duration) -> NvidiaSmi {
        self.timeout = timeout;
        self
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Runs `nvidia-smi args…` and returns what it printed on stdout,
    /// killing it after the timeout.
    pub fn run(&self, args: &[&str]) -> Result<String, GpuError> {
        let shown = args.join(" ");
        tool::run(&self.program, args, self.timeout).map_err(|f| match f {
            ToolFailure::NotFound => GpuError::NoDriver(format!(
                "{} not found: install the NVIDIA driver or pass --simulate-gpus",
                self.program.display()
            )),
            ToolFailure::Spawn(e) => GpuError::Smi {
                args: shown.clone(),
                why: format!("cannot run {}: {e}; check that it is an executable file", self.program.display()),
            },
            ToolFailure::Timeout => GpuError::Timeout { args: shown.clone(), secs: self.timeout.as_secs().max(1) },
            ToolFailure::Failed { code, status, message } => {
                let lower = message.to_ascii_lowercase();
                if lower.contains("couldn't communicate with the nvidia driver")
                    || lower.contains("driver is not loaded")
                {
                    return GpuError::NoDriver(message);
                }
                GpuError::Smi {
                    args: shown.clone(),
                    why: format!(
                        "{}. Run `nvidia-smi {shown}` by hand to see why",
                        ToolFailure::exit_text(code, &status, &message)
                    ),
                }
            }
        })
    }

    /// The `-q -x` report, else the `-q` one (some drivers and containers
    /// refuse one and not the other).
    fn report(&self) -> Result<Report, GpuError> {
        match self.run(XML_ARGS).and_then(|t| parse_xml(&t)) {
            Ok(r) => Ok(r),
            Err(e @ (GpuError::NoDriver(_) | GpuError::Timeout { .. })) => Err(e),
            Err(xml_error) => self.run(TEXT_ARGS).and_then(|t| parse_text(&t)).map_err(|text_error| GpuError::Smi {
                args: XML_ARGS.join(" "),
                why: format!("{}; `nvidia-smi -q`: {}", refusal(&xml_error), refusal(&text_error)),
            }),
        }
    }

    fn note(&mut self, d: Degraded) {
        if !self.degraded.iter().any(|x| x.command == d.command && x.what == d.what) {
            self.degraded.push(d);
        }
    }

    fn sample_from_csv(&self) -> Result<(Vec<QueryGpuRow>, Vec<GpuSample>), GpuError> {
        let rows = parse_query_gpu(&self.run(SAMPLE_ARGS)?, Some(SAMPLE_FIELDS))?;
        let samples = rows.iter().map(|r| r.sample.clone()).collect();
        Ok((rows, samples))
    }
}

/// Puts each compute app under its GPU: by UUID, else by PCI bus id.
fn attach_processes(samples: &mut [GpuSample], rows: &[QueryGpuRow], apps: Vec<super::csv::ComputeApp>) {
    for app in apps {
        let by_uuid = app.gpu_uuid.as_deref().and_then(|u| samples.iter().position(|s| s.uuid == u));
        let by_bus = || {
            let bus = app.gpu_bus_id.as_deref()?;
            rows.iter().position(|r| r.pci_bus_id.as_deref().is_some_and(|b| same_bus_id(b, bus)))
        };
        if let Some(s) = by_uuid.or_else(by_bus).and_then(|i| samples.get_mut(i)) {
            s.processes.push(app.process);
        }
    }
}

impl Backend for NvidiaSmi {
    fn name(&self) -> &'static str {
        "nvidia-smi"
    }

    /// `mig -i G -lgi` (done already?), `-dci`, `-dgi`, then `-cgi P:S,… -C`
    /// in one call, larger profiles first (the driver places in order). A
    /// destroy that finds nothing is not a failure; one that finds the GPU
    /// busy is.
    fn mig_changes(&self) -> Result<(), String> {
        Ok(())
    }

    fn apply_mig_layout(&mut self, gpu: u32, layout: &[MigSlot]) -> Result<(), GpuError> {
        let g = gpu.to_string();
        let mig = |why: String| GpuError::Mig { gpu, why };
        let mut want: Vec<(String, u32)> = layout.iter().map(|s| (s.profile.clone(), s.start)).collect();
        want.sort();
        if let Ok(gis) = self.run(&["mig", "-i", &g, "-lgi"]).and_then(|t| parse_gpu_instances(&t)) {
            let mut now: Vec<(String, u32)> = gis
                .iter()
                .filter(|x| x.gpu == gpu)
                .map(|x| (x.profile.clone(), x.placement.map_or(u32::MAX, |p| p.0)))
                .collect();
            now.sort();
            if now == want {
                return Ok(());
            }
        }
        for args in [["mig", "-i", &g, "-dci"], ["mig", "-i", &g, "-dgi"]] {
            match self.run(&args) {
                Ok(_) => {}
                Err(GpuError::Smi { why, .. }) if why.to_ascii_lowercase().contains("not found") => {}
                Err(GpuError::Smi { why, .. }) => return Err(mig(format!("`nvidia-smi {}`: {why}", args.join(" ")))),
                Err(e) => return Err(e),
            }
        }
        if layout.is_empty() {
            return Ok(());
        }
        let mut order: Vec<&MigSlot> = layout.iter().collect();
        order.sort_by_key(|s| (std::cmp::Reverse(mig_gpu_slices(&s.profile).unwrap_or(0)), s.start));
        let tuples: Vec<String> = order.iter().map(|s| format!("{}:{}", s.profile, s.start)).collect();
        let tuples = tuples.join(",");
        let out = match self.run(&["mig", "-i", &g, "-cgi", &tuples, "-C"]) {
            Ok(out) => out,
            Err(GpuError::Smi { why, .. }) => return Err(mig(format!("creating {tuples}: {why}"))),
            Err(e) => return Err(e),
        };
        match super::mig::parse_create(&out)?.into_result() {
            Ok(_) => Ok(()),
            Err(f) => Err(mig(format!(
                "creating {tuples}: the driver refused {} ({:?})",
                f.profile.unwrap_or_else(|| "an instance".into()),
                f.error
            ))),
        }
    }

    fn inventory(&mut self) -> Result<Vec<GpuInfo>, GpuError> {
        let found = inventory(&mut |args| self.run(args))?;
        self.degraded.retain(|d| d.what.starts_with("sample"));
        self.degraded.extend(found.degraded);
        Ok(found.gpus)
    }

    fn degraded(&self) -> Vec<Degraded> {
        self.degraded.clone()
    }

    fn sample(&mut self) -> Result<Vec<GpuSample>, GpuError> {
        if self.report_only {
            let mut gpus = self.report()?.gpus;
            self.add_kernel_xids(gpus.iter_mut().map(|g| (&mut g.sample, g.pci_bus_id.as_deref())));
            return Ok(gpus.into_iter().map(|g| g.sample).collect());
        }
        let (rows, mut samples) = match self.sample_from_csv() {
            Ok(x) => x,
            Err(e @ (GpuError::NoDriver(_) | GpuError::Timeout { .. })) => return Err(e),
            Err(csv_error) => {
                let report = self.report().map_err(|report_error| GpuError::Smi {
                    args: SAMPLE_ARGS.join(" "),
                    why: format!("{}; the report fallback failed too: {}", refusal(&csv_error), refusal(&report_error)),
                })?;
                self.report_only = true;
                self.note(Degraded {
                    what: "samples without `--query-gpu`".into(),
                    command: format!("nvidia-smi {}", SAMPLE_ARGS.join(" ")),
                    why: refusal(&csv_error),
                    instead: "every sample from the `-q` report from now on".into(),
                });
                let mut gpus = report.gpus;
                self.add_kernel_xids(gpus.iter_mut().map(|g| (&mut g.sample, g.pci_bus_id.as_deref())));
                return Ok(gpus.into_iter().map(|g| g.sample).collect());
            }
        };
        // Without the process list the sample stands: processes are then
        // unknown, not absent, and nothing is attributed to jobs by pid.
        match self.run(COMPUTE_APPS_ARGS).and_then(|t| parse_compute_apps(&t, Some(COMPUTE_APPS_FIELDS))) {
            Ok(apps) => attach_processes(&mut samples, &rows, apps),
            Err(e @ (GpuError::NoDriver(_) | GpuError::Timeout { .. })) => return Err(e),
            Err(e) => self.note(Degraded {
                what: "sample processes unknown".into(),
                command: format!("nvidia-smi {}", COMPUTE_APPS_ARGS.join(" ")),
                why: refusal(&e),
                instead: "GPU processes are not listed or matched to jobs".into(),
            }),
        }
        // Thresholds do not change while the driver runs: read them once, and
        // a report that does not answer leaves them unknown (no heat check
        // by threshold, throttle reasons still count).
        if self.slowdown_c.is_none() {
            let found = self.report().map(|r| {
                r.gpus.iter().filter_map(|g| Some((g.sample.uuid.clone(), g.sample.slowdown_temperature_c?))).collect()
            });
            self.slowdown_c = Some(found.unwrap_or_default());
        }
        if let Some(known) = &self.slowdown_c {
            for s in samples.iter_mut() {
                s.slowdown_temperature_c = known.get(&s.uuid).copied();
            }
        }
        if rows.iter().any(|r| r.mig_mode == Some(true)) {
            // Per-instance memory and the instance of each process are only in the report.
            // Without it the sample stands, with `mig` empty.
            match self.report() {
                Ok(report) => {
                    for (s, r) in samples.iter_mut().zip(&rows) {
                        let Some(g) = report.gpus.iter().find(|g| g.sample.uuid == s.uuid) else { continue };
                        // Read just now: its fault readings hold for every GPU.
                        fill_faults(s, &g.sample);
                        if r.mig_mode != Some(true) {
                            continue;
                        }
                        s.mig = g.sample.mig.clone();
                        if !g.sample.processes.is_empty() {
                            s.processes = g.sample.processes.clone();
                        }
                    }
                }
                Err(e) => self.note(Degraded {
                    what: "sample of MIG devices unknown".into(),
                    command: format!("nvidia-smi {}", XML_ARGS.join(" ")),
                    why: refusal(&e),
                    instead: "no per-MIG-device memory; whole-GPU readings only".into(),
                }),
            }
        }
        self.add_kernel_xids(samples.iter_mut().zip(rows.iter().map(|r| r.pci_bus_id.as_deref())));
        Ok(samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_lists_match_their_field_lists() {
        use crate::smi::commands::{INVENTORY_ARGS, INVENTORY_FIELDS};
        assert_eq!(INVENTORY_ARGS[0], format!("--query-gpu={}", INVENTORY_FIELDS.join(",")));
        assert_eq!(SAMPLE_ARGS[0], format!("--query-gpu={}", SAMPLE_FIELDS.join(",")));
        assert_eq!(COMPUTE_APPS_ARGS[0], format!("--query-compute-apps={}", COMPUTE_APPS_FIELDS.join(",")));
    }
}
