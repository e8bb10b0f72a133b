//! A simulated inventory for machines without GPUs: `8xH100-80GB`,
//! `4xA100-80GB,4xL4`, or with MIG: `1xH100-80GB:mig=3g.40gb+2g.20gb+1g.10gb+1g.10gb`.
//! UUIDs are stable for a given spec and host name, so a restarted daemon
//! sees the same devices.

use crate::{Backend, GpuError, GpuInfo, GpuSample, MigInfo};

/// Memory in MiB the driver reports for a model name (from the `…GB` in the name, else 24 GB).
fn memory_mb(model: &str) -> u64 {
    let gb = model
        .rsplit(['-', '_'])
        .find_map(|p| p.to_ascii_lowercase().strip_suffix("gb").and_then(|n| n.parse::<u64>().ok()))
        .unwrap_or(24);
    // Drivers report a little less than the marketing size (H100 80GB: 81,559 MiB).
    gb * 1024 - gb * 1024 / 200
}

/// What a job does on a simulated device (a GPU or a MIG instance), as it declares it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimLoad {
    pub gpu_util_pct: f64,
    pub memory_used_mb: u64,
    pub pids: Vec<u32>,
}

/// Called with a device UUID (`GPU-…` or `MIG-…`); `None` = nothing runs there.
pub type LoadSource = Box<dyn Fn(&str) -> Option<SimLoad> + Send>;

/// A parsed `--simulate-gpus` spec.
pub struct Simulated {
    gpus: Vec<GpuInfo>,
    loads: Option<LoadSource>,
}

impl Simulated {
    /// Samples follow what the source says each device's job does.
    pub fn with_loads(mut self, source: LoadSource) -> Simulated {
        self.loads = Some(source);
        self
    }
}

impl Simulated {
    /// Parses a spec; `host` goes into the UUIDs.
    pub fn parse(spec: &str, host: &str) -> Result<Simulated, GpuError> {
        let bad = |why: String| GpuError::Spec { spec: spec.to_string(), why };
        let mut gpus = Vec::new();
        for group in spec.split(',').map(str::trim).filter(|g| !g.is_empty()) {
            let (count_model, mig) = match group.split_once(":mig=") {
                Some((cm, m)) => (cm, Some(m)),
                None => (group, None),
            };
            let (count, model) =
                count_model.split_once(['x', 'X']).ok_or_else(|| bad(format!("{group:?} has no NxMODEL")))?;
            let count: u32 = count.trim().parse().map_err(|_| bad(format!("{count:?} is not a count")))?;
            let model = model.trim();
            if model.is_empty() || count == 0 || count > 64 {
                return Err(bad(format!("{group:?}: 1 to 64 GPUs of a named model")));
            }
            let profiles: Option<Vec<String>> = match mig {
                None => None,
                Some(m) => {
                    let list: Vec<String> = m.split('+').flat_map(expand).collect();
                    if list.is_empty() {
                        return Err(bad(format!("{group:?}: empty MIG layout")));
                    }
                    let slices: u32 =
                        list.iter().map(|p| p.split('g').next().and_then(|n| n.parse::<u32>().ok()).unwrap_or(8)).sum();
                    if slices > 7 {
                        return Err(bad(format!("{group:?}: MIG layout uses {slices} compute slices, a GPU has 7")));
                    }
                    Some(list)
                }
            };
            for _ in 0..count {
                let index = gpus.len() as u32;
                let uuid = format!("GPU-{}", fake_uuid(host, index));
                let mem = memory_mb(model);
                let mig = profiles.as_ref().map(|ps| {
                    ps.iter()
                        .enumerate()
                        .map(|(i, p)| MigInfo {
                            profile: p.clone(),
                            uuid: format!("MIG-{}", fake_uuid(&format!("{host}/{index}"), i as u32)),
                            gi_id: i as u32 + 1,
                            ci_id: Some(0),
                            placement: None,
                            memory_mb: p
                                .split('.')
                                .nth(1)
                                .and_then(|m| m.strip_suffix("gb"))
                                .and_then(|g| g.parse::<u64>().ok())
                                .map_or(0, |g| g * 1000 - 250),
                        })
                        .collect()
                });
                gpus.push(GpuInfo {
                    index,
                    uuid,
                    name: format!("Simulated {model}"),
                    model: model.to_string(),
                    memory_mb: mem,
                    pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + index)),
                    nvlink_group: Some(0),
                    nvlink_peers: Vec::new(),
                    numa_node: Some(0),
                    mig,
                });
            }
        }
        if gpus.is_empty() {
            return Err(bad("no GPUs".into()));
        }
        if gpus.len() > 64 {
            return Err(bad(format!("{} GPUs; at most 64 per node", gpus.len())));
        }
        Ok(Simulated { gpus, loads: None })
    }
}

/// `1g.10gb*7` → seven `1g.10gb`.
fn expand(p: &str) -> Vec<String> {
    match p.split_once('*') {
        Some((prof, n)) => vec![prof.trim().to_string(); n.trim().parse().unwrap_or(0)],
        None => vec![p.trim().to_string()],
    }
}

/// A deterministic UUID-shaped string from a seed.
fn fake_uuid(seed: &str, n: u32) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in seed.bytes().chain(n.to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    let h2 = h.rotate_left(29).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xffff,
        h2 >> 48,
        h2 & 0xffff_ffff_ffff
    )
}

impl Backend for Simulated {
    fn name(&self) -> &'static str {
        "simulated"
    }

    fn inventory(&mut self) -> Result<Vec<GpuInfo>, GpuError> {
        Ok(self.gpus.clone())
    }

    fn sample(&mut self) -> Result<Vec<GpuSample>, GpuError> {
        Ok(self
            .gpus
            .iter()
            .map(|g| {
                let load = self.loads.as_ref().and_then(|f| f(&g.uuid));
                GpuSample {
                    index: g.index,
                    uuid: g.uuid.clone(),
                    gpu_util_pct: Some(load.as_ref().map_or(0.0, |l| l.gpu_util_pct)),
                    memory_used_mb: Some(load.as_ref().map_or(0, |l| l.memory_used_mb)),
                    memory_total_mb: Some(g.memory_mb),
                    ..GpuSample::default()
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_expand_to_devices() {
        let mut s = Simulated::parse("4xA100-80GB,4xL4", "host").expect("valid");
        let inv = s.inventory().expect("inventory");
        assert_eq!(inv.len(), 8);
        assert_eq!((inv[0].model.as_str(), inv[7].model.as_str(), inv[7].index), ("A100-80GB", "L4", 7));
        assert_eq!(inv[0].memory_mb, 81_511);
        let again = Simulated::parse("4xA100-80GB,4xL4", "host").expect("valid").inventory().expect("inventory");
        assert_eq!(inv, again, "stable UUIDs");
        let mig = Simulated::parse("1xH100-80GB:mig=3g.40gb+2g.20gb+1g.10gb*2", "h")
            .expect("valid")
            .inventory()
            .expect("inv");
        let m = mig[0].mig.as_ref().expect("mig");
        assert_eq!(
            m.iter().map(|i| i.profile.as_str()).collect::<Vec<_>>(),
            ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
        );
        assert!(m[0].uuid.starts_with("MIG-"));
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (spec, why) in [
            ("eight", "NxMODEL"),
            ("0xH100", "1 to 64"),
            ("65xH100", "1 to 64"),
            ("1xH100:mig=7g.80gb+1g.10gb", "8 compute slices"),
            ("", "no GPUs"),
        ] {
            let Err(e) = Simulated::parse(spec, "h") else { panic!("{spec} parsed") };
            let e = e.to_string();
            assert!(e.contains(why), "{spec}: {e}");
        }
    }
}
