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

#[cfg(test)]
mod tests {
    use super::*;

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
