//! The exact argument lists gpool runs `nvidia-smi` with: a stand-in
//! script can match on them. Fields are read by column name, so a stand-in
//! may answer with more columns than asked.

/// The fields [`INVENTORY_ARGS`] asks for.
pub const INVENTORY_FIELDS: &[&str] = &["index", "uuid", "name", "memory.total", "pci.bus_id", "mig.mode.current"];
/// `nvidia-smi` arguments for the inventory.
pub const INVENTORY_ARGS: &[&str] =
    &["--query-gpu=index,uuid,name,memory.total,pci.bus_id,mig.mode.current", "--format=csv"];
/// `nvidia-smi -L`: MIG device UUIDs.
pub const LIST_ARGS: &[&str] = &["-L"];
/// `nvidia-smi mig -lgi`: GPU instances.
pub const MIG_LGI_ARGS: &[&str] = &["mig", "-lgi"];
/// The fields [`SAMPLE_ARGS`] asks for: everything [`GpuSample`](crate::GpuSample) maps that
/// `--query-gpu` has (aliases that drivers from R450 to R590 all accept).
///
/// Not asked (issue 38): `remapped_rows.pending`/`.failure` and
/// `retired_pages.*`. The only `--help-query-gpu` recorded is R590's; an
/// older driver that lacks one field fails the whole query, and the backend
/// then reads the slower report from then on. The CSV parser reads them
/// where an answer has them; the report (run with each sample while a GPU
/// has MIG on, and always on the fallback) fills them, and PCIe replays and
/// throughput, which `--query-gpu` has no field for.
pub const SAMPLE_FIELDS: &[&str] = &[
    "index",
    "uuid",
    "pci.bus_id",
    "mig.mode.current",
    "utilization.gpu",
    "utilization.memory",
    "utilization.encoder",
    "utilization.decoder",
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
    "--query-gpu=index,uuid,pci.bus_id,mig.mode.current,utilization.gpu,utilization.memory,utilization.encoder,utilization.decoder,memory.total,memory.used,memory.free,memory.reserved,temperature.gpu,temperature.memory,power.draw,enforced.power.limit,clocks.sm,clocks.mem,fan.speed,pstate,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,clocks_throttle_reasons.active",
    "--format=csv",
];
/// The fields [`COMPUTE_APPS_ARGS`] asks for.
pub const COMPUTE_APPS_FIELDS: &[&str] = &["pid", "process_name", "gpu_uuid", "used_memory"];
/// `nvidia-smi` arguments for the processes of a sample.
pub const COMPUTE_APPS_ARGS: &[&str] = &["--query-compute-apps=pid,process_name,gpu_uuid,used_memory", "--format=csv"];
/// `nvidia-smi -q -x`: the full report, for MIG details and as the fallback.
pub const XML_ARGS: &[&str] = &["-q", "-x"];
/// `nvidia-smi -q`: the same report as text, where `-q -x` fails.
pub const TEXT_ARGS: &[&str] = &["-q"];
