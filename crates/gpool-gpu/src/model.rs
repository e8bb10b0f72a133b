//! Short model names from driver names, without knowing any model: the
//! first token that looks like a product number (letters then digits, e.g.
//! `H100`, `A10G`, `T4`, `RTX 4090`), plus the memory size when the name
//! states one (`80GB`).

/// `NVIDIA H100 80GB HBM3` → `H100-80GB`; `Tesla T4` → `T4`;
/// `NVIDIA A100-SXM4-40GB` → `A100-40GB`; `NVIDIA GeForce RTX 4090` → `RTX-4090`.
/// The memory size is added only when the name states it.
pub fn short_model(name: &str) -> String {
    let tokens: Vec<&str> = name.split([' ', '-', '_']).filter(|t| !t.is_empty()).collect();
    let vendor = ["nvidia", "tesla", "geforce", "quadro", "amd", "radeon", "instinct"];
    let tokens: Vec<&str> = tokens.into_iter().filter(|t| !vendor.contains(&t.to_ascii_lowercase().as_str())).collect();
    let is_product = |t: &str| {
        let letters = t.chars().take_while(|c| c.is_ascii_alphabetic()).count();
        letters > 0 && t.chars().nth(letters).is_some_and(|c| c.is_ascii_digit())
    };
    let is_memory = |t: &str| {
        let lower = t.to_ascii_lowercase();
        lower.strip_suffix("gb").is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    };
    let family = match tokens.iter().position(|t| is_product(t)) {
        Some(i) => tokens[i].to_string(),
        None => match tokens.iter().position(|t| t.chars().all(|c| c.is_ascii_digit())) {
            // "RTX 4090": a word followed by a bare number.
            Some(i) if i > 0 => format!("{}-{}", tokens[i - 1], tokens[i]),
            _ => tokens.first().map_or_else(|| "GPU".to_string(), |t| t.to_string()),
        },
    };
    match tokens.iter().find(|t| is_memory(t)) {
        Some(mem) => format!("{family}-{}", mem.to_ascii_uppercase()),
        None => family,
    }
}

/// The parts of a MIG profile name: `1c.3g.40gb+me` → compute slices `Some(1)`,
/// GPU slices `Some(3)`, memory `Some(40)` GB.
fn mig_parts(profile: &str) -> (Option<u32>, Option<u32>, Option<u64>) {
    let base = profile.trim().trim_start_matches("MIG ").split('+').next().unwrap_or("");
    let (mut c, mut g, mut gb) = (None, None, None);
    for part in base.split('.') {
        let p = part.to_ascii_lowercase();
        if let Some(n) = p.strip_suffix("gb") {
            gb = n.parse().ok();
        } else if let Some(n) = p.strip_suffix('g') {
            g = n.parse().ok();
        } else if let Some(n) = p.strip_suffix('c') {
            c = n.parse().ok();
        }
    }
    (c, g, gb)
}

/// The memory a MIG profile's name states, in MiB, rounded down a little
/// (`3g.40gb` → 39,750): drivers report a bit more or less than the nominal
/// size (H100 3g.40gb: 40,448 MiB; A100 80GB 1g.10gb: 9,728 MiB). Only for
/// when nothing better is known.
pub fn mig_profile_memory_mb(profile: &str) -> Option<u64> {
    mig_parts(profile).2.filter(|gb| *gb > 0 && *gb < 1_000_000).map(|gb| gb * 1000 - 250)
}

/// The GPU (compute) slices of a MIG profile: `3g.40gb` → 3, `1c.3g.40gb` → 3
/// (its GPU instance's), `1g.10gb+me` → 1.
pub fn mig_gpu_slices(profile: &str) -> Option<u32> {
    mig_parts(profile).1
}

/// The compute-instance slices a profile names (`1c.3g.40gb` → 1); `None`
/// for a GPU instance profile, whose compute instance spans it.
pub fn mig_ci_slices(profile: &str) -> Option<u32> {
    mig_parts(profile).0
}

/// The GPU instance profile of a compute instance profile (`1c.3g.40gb` → `3g.40gb`),
/// without a `+me`-style suffix.
pub fn mig_gi_profile(profile: &str) -> &str {
    let base = profile.trim().trim_start_matches("MIG ").split('+').next().unwrap_or("");
    match base.split_once('.') {
        Some((first, rest)) if first.ends_with('c') && first.len() > 1 => rest,
        _ => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_profiles_read_without_a_table() {
        assert_eq!(mig_profile_memory_mb("3g.40gb"), Some(39_750));
        assert_eq!(mig_profile_memory_mb("1g.10gb+me"), Some(9_750));
        assert_eq!(mig_profile_memory_mb("1c.3g.40gb"), Some(39_750));
        assert_eq!(mig_profile_memory_mb("weird"), None);
        assert_eq!(mig_gpu_slices("7g.80gb"), Some(7));
        assert_eq!(mig_gpu_slices("1c.3g.40gb"), Some(3));
        assert_eq!(mig_ci_slices("2c.3g.40gb"), Some(2));
        assert_eq!(mig_ci_slices("3g.40gb"), None);
        assert_eq!(mig_gi_profile("1c.3g.40gb"), "3g.40gb");
        assert_eq!(mig_gi_profile("1g.10gb+me"), "1g.10gb");
    }

    #[test]
    fn names_shorten_without_a_model_table() {
        let cases = [
            ("NVIDIA H100 80GB HBM3", "H100-80GB"),
            ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
            ("NVIDIA A100 80GB PCIe", "A100-80GB"),
            ("Tesla T4", "T4"),
            ("Tesla P100-PCIE-16GB", "P100-16GB"),
            ("NVIDIA A10G", "A10G"),
            ("NVIDIA L4", "L4"),
            ("NVIDIA GeForce RTX 4090", "RTX-4090"),
            ("Tesla V100-SXM2-32GB", "V100-32GB"),
            ("NVIDIA B200", "B200"),
            ("", "GPU"),
        ];
        for (name, want) in cases {
            assert_eq!(short_model(name), want, "{name}");
        }
    }
}
