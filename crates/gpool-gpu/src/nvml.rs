//! NVML through nvml-wrapper, loaded at run time.

use std::collections::BTreeMap;

use nvml_wrapper::Nvml as Lib;
use nvml_wrapper::error::NvmlError;

use crate::model::short_model;
use crate::{Backend, GpuError, GpuInfo, GpuSample, MigInfo};

/// An initialised NVML (kept for the process's life: dropping it calls nvmlShutdown).
pub struct Nvml {
    lib: Lib,
}

impl Nvml {
    /// Loads `libnvidia-ml.so.1`. Without a driver: [`GpuError::NoDriver`].
    pub fn load() -> Result<Nvml, GpuError> {
        match Lib::init() {
            Ok(lib) => Ok(Nvml { lib }),
            Err(e @ (NvmlError::LibloadingError(_) | NvmlError::DriverNotLoaded | NvmlError::LibraryNotFound)) => {
                Err(GpuError::NoDriver(e.to_string()))
            }
            Err(e) => Err(GpuError::Nvml(e.to_string())),
        }
    }
}

fn nvml_err(e: NvmlError) -> GpuError {
    GpuError::Nvml(e.to_string())
}

/// The profile part of a MIG device name (`NVIDIA H100 80GB HBM3 MIG 1g.10gb` → `1g.10gb`).
fn mig_profile(name: &str) -> String {
    name.split_whitespace().last().unwrap_or("unknown").to_string()
}

impl Backend for Nvml {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn inventory(&mut self) -> Result<Vec<GpuInfo>, GpuError> {
        let count = self.lib.device_count().map_err(nvml_err)?;
        let mut gpus = Vec::new();
        let mut bus_to_index: BTreeMap<String, u32> = BTreeMap::new();
        let mut links: Vec<(u32, String)> = Vec::new();
        for i in 0..count {
            let d = self.lib.device_by_index(i).map_err(nvml_err)?;
            let name = d.name().map_err(nvml_err)?;
            let memory_mb = d.memory_info().map_err(nvml_err)?.total / (1024 * 1024);
            let pci = d.pci_info().ok().map(|p| p.bus_id);
            if let Some(b) = &pci {
                bus_to_index.insert(b.to_ascii_lowercase(), i);
            }
            // NVLink peers: up to 18 links per GPU; a missing link or no NVLink ends the scan.
            for link in 0..18 {
                let l = d.link_wrapper_for(link);
                match (l.is_active(), l.remote_pci_info()) {
                    (Ok(true), Ok(remote)) => links.push((i, remote.bus_id.to_ascii_lowercase())),
                    (Ok(_), _) => {}
                    (Err(_), _) => break,
                }
            }
            let mig_on = matches!(d.mig_mode(), Ok(m) if m.current == 1);
            let mig = if mig_on {
                let n = d.mig_device_count().unwrap_or(0);
                let mut list = Vec::new();
                for m in 0..n {
                    if let Ok(md) = d.mig_device_by_index(m) {
                        list.push(MigInfo {
                            profile: md.name().map(|n| mig_profile(&n)).unwrap_or_else(|_| "unknown".into()),
                            uuid: md.uuid().map_err(nvml_err)?,
                            gi_id: m + 1,
                            ci_id: None,
                            memory_mb: md.memory_info().map(|m| m.total / (1024 * 1024)).unwrap_or(0),
                            placement: None,
                        });
                    }
                }
                Some(list)
            } else {
                None
            };
            gpus.push(GpuInfo {
                index: i,
                uuid: d.uuid().map_err(nvml_err)?,
                model: short_model(&name),
                name,
                memory_mb,
                pci_bus_id: pci,
                nvlink_group: None,
                nvlink_peers: Vec::new(),
                numa_node: None,
                mig,
            });
        }
        // NVLink islands: connected components of the link graph.
        let mut group: Vec<u32> = (0..count).collect();
        fn root(g: &mut [u32], mut x: u32) -> u32 {
            while g[x as usize] != x {
                g[x as usize] = g[g[x as usize] as usize];
                x = g[x as usize];
            }
            x
        }
        for (a, bus) in &links {
            if let Some(&b) = bus_to_index.get(bus) {
                let (ra, rb) = (root(&mut group, *a), root(&mut group, b));
                group[ra.max(rb) as usize] = ra.min(rb);
            }
        }
        let linked: std::collections::BTreeSet<u32> =
            links.iter().flat_map(|(a, bus)| [Some(*a), bus_to_index.get(bus).copied()]).flatten().collect();
        for g in &mut gpus {
            if linked.contains(&g.index) {
                g.nvlink_group = Some(root(&mut group, g.index));
            }
        }
        Ok(gpus)
    }

    fn sample(&mut self) -> Result<Vec<GpuSample>, GpuError> {
        Err(GpuError::Nvml("sampling is not implemented yet".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_the_error_says_so_and_suggests_simulation() {
        // This machine (and CI) has no NVIDIA driver; on one that has, NVML loads instead.
        match Nvml::load() {
            Err(e @ GpuError::NoDriver(_)) => {
                let msg = e.to_string();
                assert!(msg.contains("no NVIDIA driver found") && msg.contains("--simulate-gpus"), "{msg}");
            }
            Err(other) => panic!("unexpected error kind: {other}"),
            Ok(mut n) => {
                let inv = n.inventory().expect("inventory on a GPU machine");
                assert!(inv.iter().all(|g| !g.uuid.is_empty()));
            }
        }
    }

    #[test]
    fn mig_profiles_come_from_device_names() {
        assert_eq!(mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb"), "1g.10gb");
    }
}
