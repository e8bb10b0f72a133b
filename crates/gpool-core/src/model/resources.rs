//! Accelerator kinds, MIG profiles and the unit quotas are counted in.

use std::fmt;
use std::str::FromStr;

/// What kind of accelerator a device is. Only NVIDIA GPUs are discovered
/// today; the other kinds exist so that inventory and requests can name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum DeviceKind {
    #[default]
    NvidiaGpu,
    AmdGpu,
    Tpu,
}

impl DeviceKind {
    pub const ALL: [DeviceKind; 3] = [DeviceKind::NvidiaGpu, DeviceKind::AmdGpu, DeviceKind::Tpu];

    /// Its position in [`DeviceKind::ALL`] (and in a [`KindUnits`]).
    pub fn index(self) -> usize {
        match self {
            DeviceKind::NvidiaGpu => 0,
            DeviceKind::AmdGpu => 1,
            DeviceKind::Tpu => 2,
        }
    }

    /// The resource a spec names it by (`nvidia.com/gpu`, `amd.com/gpu`, `google.com/tpu`).
    pub fn resource(self) -> &'static str {
        match self {
            DeviceKind::NvidiaGpu => "nvidia.com/gpu",
            DeviceKind::AmdGpu => "amd.com/gpu",
            DeviceKind::Tpu => "google.com/tpu",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::NvidiaGpu => "nvidia-gpu",
            DeviceKind::AmdGpu => "amd-gpu",
            DeviceKind::Tpu => "tpu",
        }
    }
}

/// Thousandths of a device per accelerator kind (a queue's use, a placement's units).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindUnits(pub [GpuMilli; 3]);

impl KindUnits {
    pub fn get(&self, k: DeviceKind) -> GpuMilli {
        self.0[k.index()]
    }

    pub fn add(&mut self, k: DeviceKind, units: GpuMilli) {
        self.0[k.index()] = self.0[k.index()].saturating_add(units);
    }

    pub fn add_all(&mut self, other: &KindUnits) {
        for k in DeviceKind::ALL {
            self.add(k, other.get(k));
        }
    }

    pub fn sub_all(&mut self, other: &KindUnits) {
        for k in DeviceKind::ALL {
            self.0[k.index()] = self.0[k.index()].saturating_sub(other.get(k));
        }
    }

    /// The kinds with any units, and theirs.
    pub fn iter(&self) -> impl Iterator<Item = (DeviceKind, GpuMilli)> + '_ {
        DeviceKind::ALL.into_iter().map(|k| (k, self.get(k))).filter(|(_, u)| *u > 0)
    }
}

/// A set of accelerator kinds: those a job may run on, whose use its fair
/// share weighs (a team's TPU hours do not lower its priority for GPUs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KindMask(u8);

impl KindMask {
    pub const ALL: KindMask = KindMask(0b111);

    pub fn of(kinds: impl IntoIterator<Item = DeviceKind>) -> KindMask {
        KindMask(kinds.into_iter().fold(0, |m, k| m | 1 << k.index()))
    }

    pub fn contains(self, k: DeviceKind) -> bool {
        self.0 & 1 << k.index() != 0
    }

    /// The sum of `units` over the kinds in the set.
    pub fn sum(self, units: &KindUnits) -> GpuMilli {
        DeviceKind::ALL.into_iter().filter(|k| self.contains(*k)).map(|k| units.get(k)).sum()
    }
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DeviceKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "nvidia-gpu" | "nvidia" | "gpu" | "nvidia.com/gpu" => Ok(DeviceKind::NvidiaGpu),
            "amd-gpu" | "amd" | "amd.com/gpu" => Ok(DeviceKind::AmdGpu),
            "tpu" | "google.com/tpu" => Ok(DeviceKind::Tpu),
            other => Err(format!(
                "unknown device kind {other:?}: expected nvidia.com/gpu, amd.com/gpu or google.com/tpu \
                 (or nvidia-gpu, amd-gpu, tpu)"
            )),
        }
    }
}

/// A MIG device profile of NVIDIA Multi-Instance GPU, e.g. `1g.10gb`,
/// `1g.10gb+me`, or `1c.3g.40gb` for a compute instance that takes one of
/// its GPU instance's three compute slices and shares its memory.
///
/// The name is what `nvidia-smi -L` and `mig -lgip` print and what
/// Kubernetes (NVIDIA's device plugin, mixed strategy) puts after
/// `nvidia.com/mig-`. Compute slices are out of 7 on A100/H100/H200.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MigProfile {
    /// The GPU instance's compute slices (the `1` of `1g.10gb`, the `3` of `1c.3g.40gb`).
    pub compute_slices: u8,
    /// Memory in GB as written in the name (the `10` of `1g.10gb`).
    pub memory_gb: u32,
    /// Media-extension variant (`+me`).
    pub media_extensions: bool,
    /// The compute instance's slices when it takes only part of its GPU
    /// instance (the `1` of `1c.3g.40gb`); `None` when it spans it.
    pub compute_instance_slices: Option<u8>,
}

/// Number of compute slices of a full MIG-capable GPU.
pub const MIG_COMPUTE_SLICES: u32 = 7;

impl MigProfile {
    /// A GPU-instance profile (`3g.40gb`), whose compute instance spans it.
    pub fn gpu_instance(compute_slices: u8, memory_gb: u32) -> MigProfile {
        MigProfile { compute_slices, memory_gb, media_extensions: false, compute_instance_slices: None }
    }

    /// The compute slices a device of this profile runs on: its compute
    /// instance's (`1c.3g.40gb` → 1), else its GPU instance's.
    pub fn compute(&self) -> u8 {
        self.compute_instance_slices.unwrap_or(self.compute_slices)
    }

    /// Whether devices of this profile share their GPU instance's memory
    /// with its other compute instances (`1c.3g.40gb`: yes).
    pub fn shares_memory(&self) -> bool {
        self.compute_instance_slices.is_some()
    }

    /// The share of a whole GPU this profile is worth in quota accounting,
    /// in thousandths of a GPU (compute slices out of seven).
    pub fn gpu_milli(&self) -> u32 {
        (u32::from(self.compute()) * 1000).div_ceil(MIG_COMPUTE_SLICES).min(1000)
    }
}

impl fmt::Display for MigProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(c) = self.compute_instance_slices {
            write!(f, "{c}c.")?;
        }
        write!(f, "{}g.{}gb", self.compute_slices, self.memory_gb)?;
        if self.media_extensions {
            f.write_str("+me")?;
        }
        Ok(())
    }
}

/// Why a MIG profile name could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid MIG profile {input:?}: {why} (expected a name like 1g.10gb, 3g.40gb, 1g.10gb+me or 1c.3g.40gb)")]
pub struct MigProfileError {
    pub input: String,
    pub why: &'static str,
}

impl FromStr for MigProfile {
    type Err = MigProfileError;

    fn from_str(input: &str) -> Result<Self, MigProfileError> {
        let err = |why| MigProfileError { input: input.to_string(), why };
        let s = input.trim().to_ascii_lowercase();
        let s = s.strip_prefix("nvidia.com/mig-").unwrap_or(&s);
        let (s, me) = match s.strip_suffix("+me").or_else(|| s.strip_suffix(".me")) {
            Some(rest) => (rest, true),
            None => (s, false),
        };
        // `1c.3g.40gb`: a compute instance of part of a `3g.40gb` GPU instance.
        let (ci, s) = match s.split_once('.') {
            Some((c, rest)) if c.ends_with('c') => {
                let c: u8 = c[..c.len() - 1].parse().map_err(|_| err("compute-instance slices are not a number"))?;
                (Some(c), rest)
            }
            _ => (None, s),
        };
        let (g, mem) = s.split_once('.').ok_or_else(|| err("missing '.' between compute and memory"))?;
        let g = g.strip_suffix('g').ok_or_else(|| err("compute part must end in 'g'"))?;
        let mem = mem.strip_suffix("gb").ok_or_else(|| err("memory part must end in 'gb'"))?;
        let compute_slices: u8 = g.parse().map_err(|_| err("compute slices are not a number"))?;
        let memory_gb: u32 = mem.parse().map_err(|_| err("memory is not a whole number of GB"))?;
        if compute_slices == 0 || u32::from(compute_slices) > MIG_COMPUTE_SLICES {
            return Err(err("compute slices must be between 1 and 7"));
        }
        if memory_gb == 0 {
            return Err(err("memory must be at least 1 GB"));
        }
        if let Some(c) = ci
            && (c == 0 || c > compute_slices)
        {
            return Err(err("compute-instance slices must be between 1 and the GPU instance's"));
        }
        // `3c.3g.40gb` is the whole GPU instance: the same device as `3g.40gb`.
        let compute_instance_slices = ci.filter(|c| *c < compute_slices);
        Ok(MigProfile { compute_slices, memory_gb, media_extensions: me, compute_instance_slices })
    }
}

/// Whole-GPU equivalents in thousandths: a full GPU is 1000, a `3g.40gb`
/// MIG instance 429. Quotas and fair-share usage are counted in this unit.
pub type GpuMilli = u64;

/// One whole GPU in [`GpuMilli`].
pub const GPU: GpuMilli = 1000;

/// Compares GPU model names the way users type them: case-insensitive, and
/// `H100-80GB`, `h100 80gb` and `H100_80GB` are the same model.
pub fn same_model(a: &str, b: &str) -> bool {
    let norm = |c: char| {
        if c == ' ' || c == '_' { '-' } else { c.to_ascii_lowercase() }
    };
    a.len() == b.len() && a.chars().map(norm).eq(b.chars().map(norm))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_profiles_parse_from_the_names_tools_print() {
        let cases: &[(&str, Result<(u8, u32, bool), &str>)] = &[
            ("1g.10gb", Ok((1, 10, false))),
            ("3g.40gb", Ok((3, 40, false))),
            ("7g.80gb", Ok((7, 80, false))),
            ("1g.10gb+me", Ok((1, 10, true))),
            ("nvidia.com/mig-2g.20gb", Ok((2, 20, false))),
            ("nvidia.com/mig-1g.10gb.me", Ok((1, 10, true))),
            ("1G.5GB", Ok((1, 5, false))),
            ("1c.3g.40gb", Ok((3, 40, false))),
            ("nvidia.com/mig-2c.3g.71gb", Ok((3, 71, false))),
            ("0c.3g.40gb", Err("compute-instance slices must be between 1 and the GPU instance's")),
            ("4c.3g.40gb", Err("compute-instance slices must be between 1 and the GPU instance's")),
            ("xc.3g.40gb", Err("compute-instance slices are not a number")),
            ("8g.80gb", Err("compute slices must be between 1 and 7")),
            ("0g.10gb", Err("compute slices must be between 1 and 7")),
            ("1g10gb", Err("missing '.' between compute and memory")),
            ("1.10gb", Err("compute part must end in 'g'")),
            ("1g.10", Err("memory part must end in 'gb'")),
            ("xg.10gb", Err("compute slices are not a number")),
            ("1g.0gb", Err("memory must be at least 1 GB")),
            ("", Err("missing '.' between compute and memory")),
        ];
        for (input, want) in cases {
            let got = input.parse::<MigProfile>();
            match (got, want) {
                (Ok(p), Ok((g, m, me))) => {
                    assert_eq!((p.compute_slices, p.memory_gb, p.media_extensions), (*g, *m, *me), "{input}")
                }
                (Err(e), Err(why)) => assert_eq!(e.why, *why, "{input}"),
                (got, want) => panic!("{input}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn profiles_print_back_to_their_canonical_name() {
        for name in ["1g.10gb", "3g.40gb", "1g.10gb+me", "7g.141gb", "1c.3g.71gb", "2c.3g.71gb"] {
            assert_eq!(name.parse::<MigProfile>().map(|p| p.to_string()).as_deref(), Ok(name));
        }
        // A compute instance that spans its GPU instance is that GPU instance.
        assert_eq!("3c.3g.40gb".parse::<MigProfile>().map(|p| p.to_string()).as_deref(), Ok("3g.40gb"));
    }

    #[test]
    fn a_compute_instance_counts_its_own_slices_and_shares_its_memory() {
        let whole: MigProfile = "3g.40gb".parse().expect("profile");
        let part: MigProfile = "1c.3g.40gb".parse().expect("profile");
        assert_ne!(whole, part, "a job asking for one must not get the other");
        assert_eq!((whole.compute(), whole.shares_memory(), whole.gpu_milli()), (3, false, 429));
        assert_eq!((part.compute(), part.shares_memory(), part.gpu_milli()), (1, true, 143));
    }

    #[test]
    fn mig_quota_weight_is_compute_slices_over_seven() {
        let w = |s: &str| s.parse::<MigProfile>().map(|p| p.gpu_milli()).unwrap_or(0);
        assert_eq!(w("1g.10gb"), 143);
        assert_eq!(w("3g.40gb"), 429);
        assert_eq!(w("7g.80gb"), 1000);
    }

    #[test]
    fn model_names_match_loosely_but_not_wrongly() {
        assert!(same_model("H100-80GB", "h100_80gb"));
        assert!(same_model("A100 80GB", "a100-80gb"));
        assert!(!same_model("A100-80GB", "A100-40GB"));
        assert!(!same_model("A100", "A100-80GB"));
    }
}
