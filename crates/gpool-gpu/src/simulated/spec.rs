//! The `--simulate-gpus` spec: `8xH100-80GB`, `4xA100-80GB,4xL4`, MIG
//! layouts (`:mig=3g.40gb+2g.20gb+1g.10gb*2`) and hot GPUs (`:hot=2`),
//! parsed into the devices a simulated node shows. A model's vendor, memory
//! and UUIDs follow from its name, the host and the device's place, so a
//! restarted daemon sees the same devices.

use super::{AMBIENT_C, Simulated};
use crate::model::mig_profile_memory_mb;
use crate::{GpuError, GpuInfo, MigInfo};

/// The vendor of a simulated model, from its name: `MI300X-192GB`, `RX-7900`,
/// `Radeon…` and `AMD…` are AMD GPUs; `TPU-v5p`, `v4`, `v5e`, `v5p`, `v6e`
/// are TPU chips; anything else is an NVIDIA GPU.
pub fn kind_of_model(model: &str) -> crate::Accelerator {
    let m = model.to_ascii_lowercase();
    let after = |p: &str| m.strip_prefix(p).and_then(|r| r.chars().next());
    if after("mi").is_some_and(|c| c.is_ascii_digit()) || ["rx", "radeon", "amd"].iter().any(|p| m.starts_with(p)) {
        crate::Accelerator::AmdGpu
    } else if m.starts_with("tpu") || tpu_generation(&m) {
        crate::Accelerator::Tpu
    } else {
        crate::Accelerator::NvidiaGpu
    }
}

/// `v4`, `v5e`, `v5p-95gb`, `v6e`: a `v`, one digit, then no other digit (`v100` is NVIDIA's).
fn tpu_generation(m: &str) -> bool {
    let mut c = m.chars();
    c.next() == Some('v')
        && c.next().is_some_and(|d| d.is_ascii_digit())
        && !c.next().is_some_and(|d| d.is_ascii_digit())
}

/// Memory in MiB the driver reports for a model name (from the `…GB` in the name, else 24 GB).
fn memory_mb(model: &str) -> u64 {
    let gb = model
        .rsplit(['-', '_'])
        .find_map(|p| p.to_ascii_lowercase().strip_suffix("gb").and_then(|n| n.parse::<u64>().ok()))
        .unwrap_or(24);
    // Drivers report a little less than the marketing size (H100 80GB: 81,559 MiB).
    gb * 1024 - gb * 1024 / 200
}

impl Simulated {
    /// Parses a spec; `host` goes into the UUIDs.
    pub fn parse(spec: &str, host: &str) -> Result<Simulated, GpuError> {
        let bad = |why: String| GpuError::Spec { spec: spec.to_string(), why };
        let mut gpus = Vec::new();
        let mut hot = Vec::new();
        for group in spec.split(',').map(str::trim).filter(|g| !g.is_empty()) {
            let mut options = group.split(':');
            let count_model = options.next().unwrap_or_default();
            let (mut mig, mut hot_list) = (None, None);
            for option in options {
                match option.split_once('=') {
                    Some(("mig", m)) => mig = Some(m),
                    Some(("hot", h)) => hot_list = Some(h),
                    _ => return Err(bad(format!("{group:?}: unknown option {option:?} (mig=… or hot=N+M)"))),
                }
            }
            let (count, model) =
                count_model.split_once(['x', 'X']).ok_or_else(|| bad(format!("{group:?} has no NxMODEL")))?;
            let count: u32 = count.trim().parse().map_err(|_| bad(format!("{count:?} is not a count")))?;
            let model = model.trim();
            if model.is_empty() || count == 0 || count > 64 {
                return Err(bad(format!("{group:?}: 1 to 64 GPUs of a named model")));
            }
            let kind = kind_of_model(model);
            if kind != crate::Accelerator::NvidiaGpu && mig.is_some() {
                return Err(bad(format!("{group:?}: MIG is NVIDIA's; {model} is a {} model", kind.as_str())));
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
            let mut hot_here = vec![false; count as usize];
            for h in hot_list.map(|h| h.split('+').collect::<Vec<_>>()).unwrap_or_default() {
                match h.trim().parse::<usize>() {
                    Ok(i) if i < count as usize => hot_here[i] = true,
                    _ => return Err(bad(format!("{group:?}: hot={h:?} is not a GPU index below {count}"))),
                }
            }
            hot.extend(hot_here);
            for _ in 0..count {
                let index = gpus.len() as u32;
                let uuid = match kind {
                    crate::Accelerator::NvidiaGpu => format!("GPU-{}", fake_uuid(host, index)),
                    crate::Accelerator::AmdGpu => format!("AMD-{}", fake_uuid(host, index)),
                    crate::Accelerator::Tpu => format!("TPU-{}", fake_uuid(host, index)),
                };
                let mem = memory_mb(model);
                let mig = profiles.as_ref().map(|ps| {
                    ps.iter()
                        .enumerate()
                        .map(|(i, p)| MigInfo {
                            profile: p.clone(),
                            uuid: format!("MIG-{}", fake_uuid(&format!("{host}/{index}"), i as u32)),
                            gi_id: Some(i as u32 + 1),
                            ci_id: Some(0),
                            placement: None,
                            memory_mb: mig_profile_memory_mb(p).unwrap_or(0),
                        })
                        .collect()
                });
                gpus.push(GpuInfo {
                    kind,
                    index,
                    uuid,
                    name: format!("Simulated {model}"),
                    model: model.to_string(),
                    memory_mb: mem,
                    pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + index)),
                    nvlink_group: (kind == crate::Accelerator::NvidiaGpu).then_some(0),
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
        let temps = vec![AMBIENT_C; gpus.len()];
        let energy_mj = vec![0.0; gpus.len()];
        Ok(Simulated {
            gpus,
            host: host.to_string(),
            layouts: 0,
            loads: None,
            temps,
            hot,
            energy_mj,
            last_sample: None,
            faults: std::collections::BTreeMap::new(),
        })
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
pub(super) fn fake_uuid(seed: &str, n: u32) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Backend;

    #[test]
    fn the_vendor_follows_the_model_name() {
        let mut s = Simulated::parse("8xMI300X-192GB,2xH100-80GB,4xv5p-95GB", "h").expect("spec");
        let inv = s.inventory().expect("inventory");
        let kinds: Vec<(&str, crate::Accelerator)> = inv.iter().map(|g| (g.model.as_str(), g.kind)).collect();
        assert_eq!(kinds[0], ("MI300X-192GB", crate::Accelerator::AmdGpu));
        assert_eq!(kinds[8], ("H100-80GB", crate::Accelerator::NvidiaGpu));
        assert_eq!(kinds[10], ("v5p-95GB", crate::Accelerator::Tpu));
        assert!(inv[0].uuid.starts_with("AMD-") && inv[0].nvlink_group.is_none());
        let e = Simulated::parse("1xMI300X:mig=1g.10gb", "h").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("MIG is NVIDIA's"), "{e}");
        for (m, k) in [("RX-7900", "amd-gpu"), ("TPU-v4", "tpu"), ("V100-32GB", "nvidia-gpu"), ("L4", "nvidia-gpu")] {
            assert_eq!(kind_of_model(m).as_str(), k, "{m}");
        }
    }

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
            ("4xH100:hot=4", "hot=\"4\""),
            ("4xH100:cold=1", "unknown option"),
        ] {
            let e = Simulated::parse(spec, "h").expect_err(spec).to_string();
            assert!(e.contains(why), "{spec}: {e}");
        }
    }
}
