//! The `nvidia-smi` backend: runs the binary with a timeout and parses what
//! it prints.
//!
//! What it runs (a stand-in script can match on these exact argument lists):
//!
//! - [`Backend::inventory`]: [`INVENTORY_ARGS`]; when a GPU has MIG on, also
//!   [`LIST_ARGS`] (MIG UUIDs) and [`MIG_LGI_ARGS`] (GPU instance ids,
//!   profiles, placements), and [`XML_ARGS`] only if `-lgi` fails or does not
//!   account for every MIG device.
//! - [`Backend::sample`]: [`SAMPLE_ARGS`] and [`COMPUTE_APPS_ARGS`]; when a
//!   GPU has MIG on, also [`XML_ARGS`] (per-instance memory, and the GPU and
//!   compute instance of each process). If [`SAMPLE_ARGS`] fails (an older
//!   driver that lacks a field, say), [`XML_ARGS`] alone, then and from then on.
//!
//! Extra columns in the CSV answers are fine: columns are read by name.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::csv::{QueryGpuRow, parse_compute_apps, parse_query_gpu};
use super::list::{ListedMig, parse_list};
use super::mig::{GpuInstance, parse_gpu_instances};
use super::report::{Report, ReportGpu};
use super::value::same_bus_id;
use super::xml::parse_xml;
use crate::model::{mig_ci_slices, mig_gi_profile, mig_gpu_slices, mig_profile_memory_mb};
use crate::{Backend, GpuError, GpuInfo, GpuSample, MigInfo, MigSlot};

/// The fields [`INVENTORY_ARGS`] asks for.
pub const INVENTORY_FIELDS: &[&str] = &["index", "uuid", "name", "memory.total", "pci.bus_id", "mig.mode.current"];
/// `nvidia-smi` arguments for the inventory.
pub const INVENTORY_ARGS: &[&str] =
    &["--query-gpu=index,uuid,name,memory.total,pci.bus_id,mig.mode.current", "--format=csv"];
/// `nvidia-smi -L`: MIG device UUIDs.
pub const LIST_ARGS: &[&str] = &["-L"];
/// `nvidia-smi mig -lgi`: GPU instances.
pub const MIG_LGI_ARGS: &[&str] = &["mig", "-lgi"];
/// The fields [`SAMPLE_ARGS`] asks for: everything [`GpuSample`] maps that
/// `--query-gpu` has (aliases that drivers from R450 to R590 all accept).
pub const SAMPLE_FIELDS: &[&str] = &[
    "index",
    "uuid",
    "pci.bus_id",
    "mig.mode.current",
    "utilization.gpu",
    "utilization.memory",
    "memory.total",
    "memory.used",
    "memory.free",
    "memory.reserved",
    "temperature.gpu",
    "temperature.memory",
    "power.draw",
    "enforced.power.limit",
    "clocks.sm",
    "clocks.mem",
    "fan.speed",
    "pstate",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "clocks_throttle_reasons.active",
];
/// `nvidia-smi` arguments for a sample.
pub const SAMPLE_ARGS: &[&str] = &[
    "--query-gpu=index,uuid,pci.bus_id,mig.mode.current,utilization.gpu,utilization.memory,memory.total,memory.used,memory.free,memory.reserved,temperature.gpu,temperature.memory,power.draw,enforced.power.limit,clocks.sm,clocks.mem,fan.speed,pstate,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,clocks_throttle_reasons.active",
    "--format=csv",
];
/// The fields [`COMPUTE_APPS_ARGS`] asks for.
pub const COMPUTE_APPS_FIELDS: &[&str] = &["pid", "process_name", "gpu_uuid", "used_memory"];
/// `nvidia-smi` arguments for the processes of a sample.
pub const COMPUTE_APPS_ARGS: &[&str] = &["--query-compute-apps=pid,process_name,gpu_uuid,used_memory", "--format=csv"];
/// `nvidia-smi -q -x`: the full report, for MIG details and as the fallback.
pub const XML_ARGS: &[&str] = &["-q", "-x"];

/// The most output read from one run (an 8-GPU `-q -x` is about 200 KB).
const MAX_OUTPUT: u64 = 64 << 20;

/// `nvidia-smi`, run as a child process with a timeout.
#[derive(Clone, Debug)]
pub struct NvidiaSmi {
    program: PathBuf,
    timeout: Duration,
    /// `--query-gpu` failed once and `-q -x` worked: use `-q -x` from now on.
    xml_only: bool,
}

/// `name` in the directories of a `PATH`-style list, if there as an executable file.
pub fn find_in_path(name: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path).map(|dir| dir.join(name)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
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
        NvidiaSmi { program: program.into(), timeout: NvidiaSmi::DEFAULT_TIMEOUT, xml_only: false }
    }

    /// Sets how long one run may take.
    pub fn with_timeout(mut self, timeout: Duration) -> NvidiaSmi {
        self.timeout = timeout;
        self
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Runs `nvidia-smi args…` and returns what it printed on stdout. The
    /// child is killed when it takes longer than the timeout: a thread reads
    /// its output while this one waits on a channel with a deadline.
    pub fn run(&self, args: &[&str]) -> Result<String, GpuError> {
        let shown = args.join(" ");
        let mut child = Command::new(&self.program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => GpuError::NoDriver(format!(
                    "{} not found: install the NVIDIA driver or pass --simulate-gpus",
                    self.program.display()
                )),
                _ => GpuError::Smi {
                    args: shown.clone(),
                    why: format!("cannot run {}: {e}; check that it is an executable file", self.program.display()),
                },
            })?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // stderr in its own thread, so that a child filling one pipe never blocks on the other.
            let err = std::thread::spawn(move || read_all(stderr));
            let out = read_all(stdout);
            let err = err.join().unwrap_or_default();
            let _ = tx.send((out, err));
        });
        let (out, err) = match rx.recv_timeout(self.timeout) {
            Ok(output) => output,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(GpuError::Timeout { args: shown, secs: self.timeout.as_secs().max(1) });
            }
        };
        // Both pipes are closed: the child is exiting.
        let status =
            child.wait().map_err(|e| GpuError::Smi { args: shown.clone(), why: format!("cannot wait for it: {e}") })?;
        let out = String::from_utf8_lossy(&out).into_owned();
        if status.success() {
            return Ok(out);
        }
        let err = String::from_utf8_lossy(&err);
        // The line that says what went wrong: a refusal among success lines
        // (`mig -cgi` that created some instances, then failed), else stderr,
        // else the first thing it said.
        let refusal = |l: &&str| {
            let l = l.to_ascii_lowercase();
            l.starts_with("unable") || l.starts_with("failed") || l.starts_with("error")
        };
        let lines = || out.lines().chain(err.lines()).map(str::trim).filter(|l| !l.is_empty());
        let message = lines()
            .find(refusal)
            .or_else(|| err.lines().map(str::trim).find(|l| !l.is_empty()))
            .or_else(|| lines().next())
            .unwrap_or("")
            .to_string();
        let lower = message.to_ascii_lowercase();
        if lower.contains("couldn't communicate with the nvidia driver") || lower.contains("driver is not loaded") {
            return Err(GpuError::NoDriver(message));
        }
        Err(GpuError::Smi {
            args: shown.clone(),
            why: format!(
                "exited with {status}: {}. Run `nvidia-smi {shown}` by hand to see why",
                if message.is_empty() { "no message" } else { &message }
            ),
        })
    }

    fn report(&self) -> Result<Report, GpuError> {
        parse_xml(&self.run(XML_ARGS)?)
    }

    fn sample_from_csv(&self) -> Result<(Vec<QueryGpuRow>, Vec<GpuSample>), GpuError> {
        let rows = parse_query_gpu(&self.run(SAMPLE_ARGS)?, Some(SAMPLE_FIELDS))?;
        let samples = rows.iter().map(|r| r.sample.clone()).collect();
        Ok((rows, samples))
    }
}

fn read_all(pipe: Option<impl Read>) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(p) = pipe {
        let _ = p.take(MAX_OUTPUT).read_to_end(&mut buf);
    }
    buf
}

/// Fills in the MIG devices of GPU `gpu` from what `-L` listed, with GPU
/// instance ids, in this order of preference: the old UUID format's own ids;
/// the `-q -x` report (`report`: MIG device index → ids, and exact memory);
/// the `mig -lgi` list (`lgi`), matched in order (nvidia-smi numbers MIG
/// devices by GPU instance id, then compute instance id) by profile. That
/// match can be off when a GPU instance without a compute instance (so
/// without a MIG device) comes before one of the same profile; the report
/// is exact.
/// Placements come from `lgi`; memory from the report, else the profile name.
/// `Err` says why the ids cannot be told.
pub fn mig_inventory(
    gpu: u32,
    listed: &[ListedMig],
    lgi: Option<&[GpuInstance]>,
    report: Option<&ReportGpu>,
) -> Result<Vec<MigInfo>, String> {
    let mut gis: Vec<&GpuInstance> = lgi.unwrap_or(&[]).iter().filter(|g| g.gpu == gpu).collect();
    gis.sort_by_key(|g| g.gi_id);
    let mut devices: Vec<&ListedMig> = listed.iter().collect();
    devices.sort_by_key(|d| d.device);
    let (mut next_gi, mut used_slices) = (0usize, 0u32);
    let mut out = Vec::with_capacity(devices.len());
    for d in devices {
        let in_report = report.and_then(|r| r.mig_devices.iter().find(|m| m.index == d.device));
        let (gi_id, ci_id) = if let Some(gi) = d.gi_id {
            (gi, d.ci_id)
        } else if let Some(m) = in_report {
            (m.gi_id, m.ci_id)
        } else if lgi.is_some() {
            let want = mig_gi_profile(&d.profile);
            loop {
                let Some(gi) = gis.get(next_gi) else {
                    return Err(format!(
                        "MIG device {} ({}) has no GPU instance left in `mig -lgi`",
                        d.device, d.profile
                    ));
                };
                let slices = mig_gpu_slices(&gi.profile).unwrap_or(1);
                let need = mig_ci_slices(&d.profile).unwrap_or(slices);
                if mig_gi_profile(&gi.profile) == want && used_slices + need <= slices {
                    used_slices += need;
                    break (gi.gi_id, None);
                }
                next_gi += 1;
                used_slices = 0;
            }
        } else {
            return Err(format!("no GPU instance id for MIG device {} ({})", d.device, d.profile));
        };
        out.push(MigInfo {
            profile: d.profile.clone(),
            uuid: d.uuid.clone(),
            gi_id,
            ci_id,
            memory_mb: in_report
                .and_then(|m| m.memory_total_mb)
                .or_else(|| mig_profile_memory_mb(&d.profile))
                .unwrap_or(0),
            placement: gis.iter().find(|g| g.gi_id == gi_id).and_then(|g| g.placement),
        });
    }
    Ok(out)
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
        let rows = parse_query_gpu(&self.run(INVENTORY_ARGS)?, Some(INVENTORY_FIELDS))?;
        let mut gpus = rows.iter().map(QueryGpuRow::to_info).collect::<Result<Vec<_>, _>>()?;
        if gpus.iter().all(|g| g.mig.is_none()) {
            return Ok(gpus);
        }
        let listed = parse_list(&self.run(LIST_ARGS)?)?;
        let lgi = self.run(MIG_LGI_ARGS).and_then(|t| parse_gpu_instances(&t));
        let mut report: Option<Result<Report, GpuError>> = None;
        for g in gpus.iter_mut().filter(|g| g.mig.is_some()) {
            let l = listed.iter().find(|l| l.uuid == g.uuid).ok_or_else(|| GpuError::Smi {
                args: LIST_ARGS.join(" "),
                why: format!(
                    "GPU {} ({}) has MIG on but is not listed; is the driver's view changing?",
                    g.index, g.uuid
                ),
            })?;
            let lgi_list = lgi.as_ref().ok().map(Vec::as_slice);
            let mig = match mig_inventory(g.index, &l.mig, lgi_list, None) {
                Ok(m) => m,
                Err(first) => {
                    let r = report.get_or_insert_with(|| self.report());
                    let rg = r.as_ref().ok().and_then(|r| r.gpus.iter().find(|x| x.sample.uuid == g.uuid));
                    mig_inventory(g.index, &l.mig, lgi_list, rg).map_err(|_| GpuError::Smi {
                        args: MIG_LGI_ARGS.join(" "),
                        why: format!(
                            "cannot tell the GPU instance ids of GPU {}'s MIG devices ({first}; `mig -lgi`: {}; `-q -x`: {}). Listing GPU instances may need root: run gpool as root, or turn MIG off",
                            g.index,
                            lgi.as_ref().map_or_else(|e| e.to_string(), |_| "ok".into()),
                            r.as_ref().map_or_else(|e| e.to_string(), |_| "no such GPU".into()),
                        ),
                    })?
                }
            };
            g.mig = Some(mig);
        }
        Ok(gpus)
    }

    fn sample(&mut self) -> Result<Vec<GpuSample>, GpuError> {
        if self.xml_only {
            return Ok(self.report()?.gpus.into_iter().map(|g| g.sample).collect());
        }
        let (rows, mut samples) = match self.sample_from_csv() {
            Ok(x) => x,
            Err(e @ (GpuError::NoDriver(_) | GpuError::Timeout { .. })) => return Err(e),
            Err(csv_error) => {
                let report = self.report().map_err(|xml_error| GpuError::Smi {
                    args: SAMPLE_ARGS.join(" "),
                    why: format!("{csv_error}; the `-q -x` fallback failed too: {xml_error}"),
                })?;
                self.xml_only = true;
                return Ok(report.gpus.into_iter().map(|g| g.sample).collect());
            }
        };
        let apps = parse_compute_apps(&self.run(COMPUTE_APPS_ARGS)?, Some(COMPUTE_APPS_FIELDS))?;
        attach_processes(&mut samples, &rows, apps);
        if rows.iter().any(|r| r.mig_mode == Some(true)) {
            // Per-instance memory and the instance of each process are only in the report.
            // Without it the sample stands, with `mig` empty.
            if let Ok(report) = self.report() {
                for (s, r) in samples.iter_mut().zip(&rows) {
                    if r.mig_mode != Some(true) {
                        continue;
                    }
                    if let Some(g) = report.gpus.iter().find(|g| g.sample.uuid == s.uuid) {
                        s.mig = g.sample.mig.clone();
                        if !g.sample.processes.is_empty() {
                            s.processes = g.sample.processes.clone();
                        }
                    }
                }
            }
        }
        Ok(samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_lists_match_their_field_lists() {
        assert_eq!(INVENTORY_ARGS[0], format!("--query-gpu={}", INVENTORY_FIELDS.join(",")));
        assert_eq!(SAMPLE_ARGS[0], format!("--query-gpu={}", SAMPLE_FIELDS.join(",")));
        assert_eq!(COMPUTE_APPS_ARGS[0], format!("--query-compute-apps={}", COMPUTE_APPS_FIELDS.join(",")));
    }

    #[test]
    fn finds_programs_on_a_path_list() {
        let path = std::env::join_paths(["/nonexistent", "/bin", "/usr/bin"]).expect("path");
        assert!(find_in_path("sh", &path).is_some());
        assert_eq!(find_in_path("no-such-program-gpool", &path), None);
    }
}
