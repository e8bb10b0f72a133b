//! The node's GPUs from whatever `nvidia-smi` answers.
//!
//! Every sub-query is optional. The GPU list comes from `--query-gpu`, else
//! the `-q -x` or `-q` report, else `-L`; a GPU is kept as long as one of
//! them lists it. MIG devices come from `-L` (their `MIG-…` UUIDs, which is
//! all `CUDA_VISIBLE_DEVICES` needs since driver R470); their GPU-instance
//! ids and placements from `mig -lgi`, else the report. Listing GPU
//! instances needs root on most machines ("Insufficient Permissions"), so a
//! refusal there costs the placements, not the devices. Each failure that
//! changed what was found is returned as a [`Degraded`] that says what
//! failed and what was used instead.

use super::commands::{INVENTORY_ARGS, INVENTORY_FIELDS, LIST_ARGS, MIG_LGI_ARGS, TEXT_ARGS, XML_ARGS};
use super::csv::{QueryGpuRow, parse_query_gpu};
use super::list::{ListedGpu, ListedMig, parse_list};
use super::mig::{GpuInstance, parse_gpu_instances};
use super::report::{Report, ReportGpu};
use super::text::parse_text;
use super::xml::parse_xml;
use crate::model::{mig_ci_slices, mig_gi_profile, mig_gpu_slices, mig_profile_memory_mb, short_model};
use crate::{Degraded, GpuError, GpuInfo, MigInfo};

/// Runs `nvidia-smi ARGS` and returns what it printed.
pub type Run<'a> = dyn FnMut(&[&str]) -> Result<String, GpuError> + 'a;

/// What the inventory found, and what it had to do without.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inventory {
    pub gpus: Vec<GpuInfo>,
    pub degraded: Vec<Degraded>,
}

/// The sub-queries, each run at most once and only when needed.
struct Sources<'r, 'a> {
    run: &'r mut Run<'a>,
    list: Option<Result<Vec<ListedGpu>, GpuError>>,
    lgi: Option<Result<Vec<GpuInstance>, GpuError>>,
    /// The report and the arguments that gave it (`-q -x`, else `-q`).
    report: Option<Result<(Report, &'static [&'static str]), GpuError>>,
}

impl Sources<'_, '_> {
    fn list(&mut self) -> &Result<Vec<ListedGpu>, GpuError> {
        let run = &mut *self.run;
        self.list.get_or_insert_with(|| run(LIST_ARGS).and_then(|t| parse_list(&t)))
    }

    fn lgi(&mut self) -> &Result<Vec<GpuInstance>, GpuError> {
        let run = &mut *self.run;
        self.lgi.get_or_insert_with(|| run(MIG_LGI_ARGS).and_then(|t| parse_gpu_instances(&t)))
    }

    fn report(&mut self) -> &Result<(Report, &'static [&'static str]), GpuError> {
        let run = &mut *self.run;
        self.report.get_or_insert_with(|| {
            let xml = run(XML_ARGS).and_then(|t| parse_xml(&t));
            match xml {
                Ok(r) => Ok((r, XML_ARGS)),
                Err(xml_error) => match run(TEXT_ARGS).and_then(|t| parse_text(&t)) {
                    Ok(r) => Ok((r, TEXT_ARGS)),
                    Err(text_error) => Err(GpuError::Smi {
                        args: XML_ARGS.join(" "),
                        why: format!("{}; `nvidia-smi -q`: {}", refusal(&xml_error), refusal(&text_error)),
                    }),
                },
            }
        })
    }
}

/// What a failed sub-query said, short: the tool's own words without the
/// advice to run it by hand.
pub fn refusal(e: &GpuError) -> String {
    match e {
        GpuError::Smi { why, .. } => why.split(". Run `nvidia-smi").next().unwrap_or(why).to_string(),
        other => other.to_string(),
    }
}

fn shown(args: &[&str]) -> String {
    format!("nvidia-smi {}", args.join(" "))
}

fn note(out: &mut Vec<Degraded>, what: &str, args: &[&str], why: String, instead: String) {
    let d = Degraded { what: what.into(), command: shown(args), why, instead };
    if !out.contains(&d) {
        out.push(d);
    }
}

/// The inventory from whatever answers. `Err` only when nothing lists a GPU
/// (or the driver is not there), with every source's failure.
pub fn inventory(run: &mut Run<'_>) -> Result<Inventory, GpuError> {
    let mut src = Sources { run, list: None, lgi: None, report: None };
    let mut degraded = Vec::new();
    let csv = (src.run)(INVENTORY_ARGS)
        .and_then(|t| parse_query_gpu(&t, Some(INVENTORY_FIELDS)))
        .and_then(|rows| rows.iter().map(QueryGpuRow::to_info).collect::<Result<Vec<_>, _>>());
    let mut gpus = match csv {
        Ok(gpus) => gpus,
        Err(e @ (GpuError::NoDriver(_) | GpuError::Timeout { .. })) => return Err(e),
        Err(csv_error) => {
            let (gpus, from) = if let Ok((r, args)) = src.report() {
                (gpus_from_report(r), shown(args))
            } else if let Ok(l) = src.list() {
                (gpus_from_list(l), shown(LIST_ARGS))
            } else {
                let mut why = vec![format!("`{}`: {}", shown(INVENTORY_ARGS), refusal(&csv_error))];
                if let Some(Err(e)) = &src.report {
                    why.push(format!("`{}`: {}", shown(XML_ARGS), refusal(e)));
                }
                if let Some(Err(e)) = &src.list {
                    why.push(format!("`{}`: {}", shown(LIST_ARGS), refusal(e)));
                }
                return Err(GpuError::Smi {
                    args: "(every query that lists GPUs)".into(),
                    why: format!("nothing lists the GPUs: {}", why.join("; ")),
                });
            };
            let why = refusal(&csv_error);
            note(&mut degraded, "GPU list without `--query-gpu`", INVENTORY_ARGS, why, format!("GPUs from `{from}`"));
            gpus
        }
    };
    for g in gpus.iter_mut().filter(|g| g.mig.is_some()) {
        g.mig = Some(mig_devices(g, &mut src, &mut degraded));
    }
    Ok(Inventory { gpus, degraded })
}

/// GPUs as the report describes them. Memory comes from the name where the
/// report has none.
fn gpus_from_report(r: &Report) -> Vec<GpuInfo> {
    r.gpus
        .iter()
        .enumerate()
        .filter(|(_, g)| !g.sample.uuid.is_empty())
        .map(|(i, g)| {
            let name = g.name.clone().unwrap_or_else(|| "NVIDIA GPU".into());
            GpuInfo {
                kind: crate::Accelerator::NvidiaGpu,
                index: u32::try_from(i).unwrap_or(u32::MAX),
                uuid: g.sample.uuid.clone(),
                model: short_model(&name),
                memory_mb: g.sample.memory_total_mb.unwrap_or_else(|| memory_from_name(&name)),
                name,
                pci_bus_id: g.pci_bus_id.clone(),
                nvlink_group: None,
                nvlink_peers: Vec::new(),
                numa_node: None,
                mig: (g.mig_mode == Some(true) || !g.mig_devices.is_empty()).then(Vec::new),
            }
        })
        .collect()
}

/// GPUs as `-L` lists them: memory from the name (`H100 80GB` → 80,000 MiB,
/// a little under what the driver reports), MIG on where it lists MIG devices.
fn gpus_from_list(l: &[ListedGpu]) -> Vec<GpuInfo> {
    l.iter()
        .map(|g| GpuInfo {
            kind: crate::Accelerator::NvidiaGpu,
            index: g.index,
            uuid: g.uuid.clone(),
            model: short_model(&g.name),
            memory_mb: memory_from_name(&g.name),
            name: g.name.clone(),
            pci_bus_id: None,
            nvlink_group: None,
            nvlink_peers: Vec::new(),
            numa_node: None,
            mig: (!g.mig.is_empty()).then(Vec::new),
        })
        .collect()
}

/// The memory a GPU's name states (`NVIDIA H100 80GB HBM3` → 80,000 MiB), else 0.
fn memory_from_name(name: &str) -> u64 {
    name.split([' ', '-', '_'])
        .find_map(|t| t.to_ascii_lowercase().strip_suffix("gb").and_then(|n| n.parse::<u64>().ok()))
        .map_or(0, |gb| gb.saturating_mul(1000))
}

/// The MIG devices of GPU `g`, from `-L` with ids from `mig -lgi` or the
/// report; without `-L`, from the report with profiles from `mig -lgi`.
fn mig_devices(g: &GpuInfo, src: &mut Sources<'_, '_>, degraded: &mut Vec<Degraded>) -> Vec<MigInfo> {
    let listed = match src.list() {
        Ok(l) => Ok(l.iter().find(|l| l.uuid == g.uuid).map(|l| l.mig.clone()).unwrap_or_default()),
        Err(e) => Err(refusal(e)),
    };
    let listed = match listed {
        Ok(listed) => listed,
        Err(why) => return mig_without_list(g, why, src, degraded),
    };
    if listed.iter().all(|d| d.gi_id.is_some()) {
        // Pre-R470 UUIDs carry their ids; placements still need `-lgi`.
        let lgi = src.lgi().as_ref().ok().cloned();
        return mig_inventory(g.index, &listed, lgi.as_deref(), None);
    }
    let lgi = match src.lgi() {
        Ok(gis) => Ok(gis.clone()),
        Err(e) => Err(refusal(e)),
    };
    let with_lgi = mig_inventory(g.index, &listed, lgi.as_ref().ok().map(Vec::as_slice), None);
    if with_lgi.iter().all(|m| m.gi_id.is_some()) {
        return with_lgi;
    }
    // `-lgi` failed or did not account for every device: the report has exact ids.
    let report = match src.report() {
        Ok((r, args)) => r.gpus.iter().find(|x| x.sample.uuid == g.uuid).cloned().map(|rg| (rg, *args)),
        Err(_) => None,
    };
    let out = mig_inventory(g.index, &listed, lgi.as_ref().ok().map(Vec::as_slice), report.as_ref().map(|r| &r.0));
    if let Err(why) = lgi {
        let instead = match &report {
            Some((_, args)) if out.iter().all(|m| m.gi_id.is_some()) => {
                format!("MIG devices from `{}`, GPU instance ids from `{}`", shown(LIST_ARGS), shown(args))
            }
            _ => format!("MIG devices from `{}`, pinned by UUID; GPU instance ids unknown", shown(LIST_ARGS)),
        };
        note(degraded, "MIG placement unknown", MIG_LGI_ARGS, why, instead);
    }
    out
}

/// Without `-L` there are no `MIG-…` UUIDs: devices come from the report,
/// named the way `CUDA_VISIBLE_DEVICES` also takes them,
/// `MIG-<GPU UUID>/<GPU instance id>/<compute instance id>`, with their
/// profiles from `mig -lgi` (a compute instance that is not alone in its
/// GPU instance is named `Nc.` by its share of the SMs).
fn mig_without_list(
    g: &GpuInfo,
    list_error: String,
    src: &mut Sources<'_, '_>,
    degraded: &mut Vec<Degraded>,
) -> Vec<MigInfo> {
    let lgi: Option<Vec<GpuInstance>> = src.lgi().as_ref().ok().cloned();
    let report: Option<(ReportGpu, &'static [&'static str])> = match src.report() {
        Ok((r, args)) => r.gpus.iter().find(|x| x.sample.uuid == g.uuid).cloned().map(|rg| (rg, *args)),
        Err(_) => None,
    };
    let mut out = Vec::new();
    if let (Some(gis), Some((rg, _))) = (&lgi, &report) {
        for d in &rg.mig_devices {
            let Some(gi) = gis.iter().find(|x| x.gpu == g.index && x.gi_id == d.gi_id) else { continue };
            let ci = d.ci_id.unwrap_or(0);
            let siblings: Vec<_> = rg.mig_devices.iter().filter(|x| x.gi_id == d.gi_id).collect();
            let profile = match (siblings.len() > 1, d.sm_count, mig_gpu_slices(&gi.profile)) {
                (true, Some(sm), Some(slices)) => {
                    let all: u32 = siblings.iter().filter_map(|x| x.sm_count).sum();
                    let share = (u64::from(sm) * u64::from(slices)).div_ceil(u64::from(all.max(1)));
                    format!("{share}c.{}", gi.profile)
                }
                _ => gi.profile.clone(),
            };
            out.push(MigInfo {
                memory_mb: d.memory_total_mb.or_else(|| mig_profile_memory_mb(&profile)).unwrap_or(0),
                profile,
                uuid: format!("MIG-{}/{}/{}", g.uuid, d.gi_id, ci),
                gi_id: Some(d.gi_id),
                ci_id: Some(ci),
                placement: gi.placement,
            });
        }
    }
    let instead = match (&lgi, &report) {
        (Some(_), Some((_, args))) => format!(
            "MIG devices from `{}` and `{}`, pinned as MIG-<GPU UUID>/<GI>/<CI>",
            shown(MIG_LGI_ARGS),
            shown(args)
        ),
        _ => "no MIG device of this GPU can be scheduled: it needs `-L`, or both `mig -lgi` and `-q`".to_string(),
    };
    note(degraded, "MIG device UUIDs unknown", LIST_ARGS, list_error, instead);
    out
}

/// Fills in the MIG devices of GPU `gpu` from what `-L` listed, with GPU
/// instance ids, in this order of preference: the old UUID format's own ids;
/// the report (`report`: MIG device index → ids, and exact memory); the
/// `mig -lgi` list (`lgi`), matched in order (nvidia-smi numbers MIG devices
/// by GPU instance id, then compute instance id) by profile. That match can
/// be off when a GPU instance without a compute instance (so without a MIG
/// device) comes before one of the same profile; the report is exact.
/// Compute instances that share a GPU instance (`1c.3g.40gb` and
/// `2c.3g.40gb`) are matched to it together.
/// A device whose id cannot be told keeps `gi_id: None`; it is still a
/// device, pinned by its UUID.
/// Placements come from `lgi`; memory from the report, else the profile name.
pub fn mig_inventory(
    gpu: u32,
    listed: &[ListedMig],
    lgi: Option<&[GpuInstance]>,
    report: Option<&ReportGpu>,
) -> Vec<MigInfo> {
    let mut gis: Vec<&GpuInstance> = lgi.unwrap_or(&[]).iter().filter(|g| g.gpu == gpu).collect();
    gis.sort_by_key(|g| g.gi_id);
    let mut devices: Vec<&ListedMig> = listed.iter().collect();
    devices.sort_by_key(|d| d.device);
    let (mut next_gi, mut used_slices) = (0usize, 0u32);
    let mut out = Vec::with_capacity(devices.len());
    for d in devices {
        let in_report = report.and_then(|r| r.mig_devices.iter().find(|m| m.index == d.device));
        let (gi_id, ci_id) = if let Some(gi) = d.gi_id {
            (Some(gi), d.ci_id)
        } else if let Some(m) = in_report {
            (Some(m.gi_id), m.ci_id)
        } else {
            let want = mig_gi_profile(&d.profile);
            let mut found = None;
            while let Some(gi) = gis.get(next_gi) {
                let slices = mig_gpu_slices(&gi.profile).unwrap_or(1);
                let need = mig_ci_slices(&d.profile).unwrap_or(slices);
                if mig_gi_profile(&gi.profile) == want && used_slices + need <= slices {
                    used_slices += need;
                    found = Some(gi.gi_id);
                    break;
                }
                next_gi += 1;
                used_slices = 0;
            }
            (found, None)
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
            placement: gi_id.and_then(|id| gis.iter().find(|g| g.gi_id == id)).and_then(|g| g.placement),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An H200 whose one `3g.71gb` GPU instance is split into two compute
    /// instances (`1c.` and `2c.`), with `mig -lgi` refused for want of root.
    fn h200(args: &[&str]) -> Result<String, GpuError> {
        match args {
            a if a == INVENTORY_ARGS => Ok("index, uuid, name, memory.total [MiB], pci.bus_id, mig.mode.current\n\
                 0, GPU-h200, NVIDIA H200, 143771 MiB, 00000000:19:00.0, Enabled\n"
                .into()),
            a if a == LIST_ARGS => Ok("GPU 0: NVIDIA H200 (UUID: GPU-h200)\n\
                 \x20 MIG 1c.3g.71gb     Device  0: (UUID: MIG-aaaaaaaa-0000-0000-0000-000000000000)\n\
                 \x20 MIG 2c.3g.71gb     Device  1: (UUID: MIG-bbbbbbbb-0000-0000-0000-000000000000)\n"
                .into()),
            _ => Err(GpuError::Smi {
                args: args.join(" "),
                why: "exited with 4: Insufficient Permissions. Run `nvidia-smi …` by hand to see why".into(),
            }),
        }
    }

    #[test]
    fn compute_instances_sharing_a_gpu_instance_are_separate_devices() {
        let inv = inventory(&mut h200).expect("inventory");
        let mig = inv.gpus[0].mig.as_ref().expect("MIG on");
        let got: Vec<(&str, &str, Option<u32>, u64)> =
            mig.iter().map(|m| (m.profile.as_str(), m.uuid.as_str(), m.gi_id, m.memory_mb)).collect();
        assert_eq!(
            got,
            [
                ("1c.3g.71gb", "MIG-aaaaaaaa-0000-0000-0000-000000000000", None, 70_750),
                ("2c.3g.71gb", "MIG-bbbbbbbb-0000-0000-0000-000000000000", None, 70_750),
            ]
        );
        // Exactly what failed, in the tool's words, and what was used instead.
        let notes: Vec<String> = inv.degraded.iter().map(ToString::to_string).collect();
        assert_eq!(
            notes,
            [
                "MIG placement unknown: `nvidia-smi mig -lgi` failed (exited with 4: Insufficient Permissions); MIG devices from `nvidia-smi -L`, pinned by UUID; GPU instance ids unknown"
            ]
        );
    }

    #[test]
    fn with_mig_lgi_both_compute_instances_get_their_gpu_instance() {
        let lgi = "\
+----------------------------------------------------+
| GPU instances:                                     |
| GPU   Name          Profile  Instance   Placement  |
|                       ID       ID       Start:Size |
|====================================================|
|   0  MIG 3g.71gb       9        2          0:4     |
+----------------------------------------------------+
";
        let mut run = |args: &[&str]| if args == MIG_LGI_ARGS { Ok(lgi.to_string()) } else { h200(args) };
        let inv = inventory(&mut run).expect("inventory");
        let mig = inv.gpus[0].mig.as_ref().expect("MIG on");
        assert_eq!(mig.iter().map(|m| (m.gi_id, m.placement)).collect::<Vec<_>>(), [(Some(2), Some((0, 4))); 2]);
        assert!(inv.degraded.is_empty(), "{:?}", inv.degraded);
    }

    #[test]
    fn nothing_that_lists_gpus_is_an_error_naming_every_source() {
        let mut run = |args: &[&str]| -> Result<String, GpuError> {
            Err(GpuError::Smi { args: args.join(" "), why: "exited with 3: Not Supported".into() })
        };
        let e = inventory(&mut run).expect_err("nothing answers").to_string();
        for part in ["nothing lists the GPUs", "--query-gpu", "-q -x", "-L", "Not Supported"] {
            assert!(e.contains(part), "{part}: {e}");
        }
    }

    #[test]
    fn memory_from_a_name_that_states_it() {
        assert_eq!(memory_from_name("NVIDIA H100 80GB HBM3"), 80_000);
        assert_eq!(memory_from_name("A100-SXM4-40GB"), 40_000);
        assert_eq!(memory_from_name("NVIDIA H200"), 0);
    }
}
