//! What a GPU-hour costs, per model: the built-in table
//! (`data/pricing/gpu-hour-prices.csv`, AWS on-demand and spot list prices)
//! and the operator's overrides (`--gpu-price H100-80GB=4.50`). Used to
//! price the waste the advisor finds, a job's GPU-hours on nodes outside any
//! priced pool, and a pool's default price per node-hour.

use std::collections::BTreeMap;

const BUILT_IN: &str = include_str!("../../../../data/pricing/gpu-hour-prices.csv");

/// Prices per GPU-hour by model name.
#[derive(Clone, Debug, Default)]
pub struct Prices {
    by_model: BTreeMap<String, f64>,
    spot_by_model: BTreeMap<String, f64>,
}

fn norm(model: &str) -> String {
    model.trim().to_ascii_uppercase().replace([' ', '_'], "-")
}

impl Prices {
    /// The built-in table.
    pub fn built_in() -> Prices {
        let mut prices = Prices::default();
        for l in BUILT_IN.lines().filter(|l| !l.starts_with('#') && !l.starts_with("model,") && !l.trim().is_empty()) {
            let f: Vec<&str> = l.split(',').collect();
            let Some(model) = f.first().map(|m| norm(m)) else { continue };
            if let Some(p) = f.get(1).and_then(|p| p.trim().parse::<f64>().ok()) {
                prices.by_model.insert(model.clone(), p);
            }
            if let Some(p) = f.get(3).and_then(|p| p.trim().parse::<f64>().ok()) {
                prices.spot_by_model.insert(model, p);
            }
        }
        prices
    }

    /// Adds `MODEL=USD` overrides.
    pub fn with_overrides(mut self, overrides: &[String]) -> Result<Prices, String> {
        for o in overrides {
            let (m, p) = o
                .split_once('=')
                .ok_or_else(|| format!("--gpu-price {o:?}: expected MODEL=USD, e.g. H100-80GB=4.50"))?;
            let price: f64 = p
                .trim()
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| format!("--gpu-price {o:?}: {p:?} is not a price in USD per GPU-hour"))?;
            self.by_model.insert(norm(m), price);
        }
        Ok(self)
    }

    /// The on-demand price of a model: an exact entry, else its family (`H100-80GB` → `H100`).
    pub fn per_gpu_hour(&self, model: &str) -> Option<f64> {
        price_of(&self.by_model, model)
    }

    /// The spot price of a model, found as [`Prices::per_gpu_hour`] is. An
    /// overridden on-demand price keeps the built-in spot discount.
    pub fn spot_per_gpu_hour(&self, model: &str) -> Option<f64> {
        let spot = price_of(&self.spot_by_model, model)?;
        let built_in = Prices::built_in();
        match (built_in.per_gpu_hour(model), self.per_gpu_hour(model)) {
            (Some(listed), Some(now)) if listed > 0.0 && (listed - now).abs() > 1e-9 => Some(spot / listed * now),
            _ => Some(spot),
        }
    }
}

/// How many partitions of one GPU a device of this model is, and that
/// GPU's model: an MI300-class GPU in DPX, TPX, QPX or CPX mode is 2, 3, 4
/// or one per XCD (8 on an MI300X or MI325X, 6 on an MI300A, 4 on an
/// MI308X) GPUs to its driver, inventoried as `MI300X-CPX`
/// (gpool-gpu's `amd_model`). `None`: a whole GPU (SPX too).
pub fn partitions(model: &str) -> Option<(String, u32)> {
    let m = norm(model);
    let (base, mode) = m.rsplit_once('-')?;
    let n = match mode {
        "DPX" => 2,
        "TPX" => 3,
        "QPX" => 4,
        "CPX" => {
            let family = base.split('-').next().unwrap_or(base);
            match family {
                "MI300A" => 6,
                "MI308X" => 4,
                _ => 8,
            }
        }
        _ => return None,
    };
    Some((base.to_string(), n))
}

/// A model's price: its own entry (an override such as `MI300X-CPX=0.80`
/// included), else, for a partition, its GPU's price shared by the
/// partitions, else its family's.
fn price_of(table: &BTreeMap<String, f64>, model: &str) -> Option<f64> {
    if let Some(p) = table.get(&norm(model)) {
        return Some(*p);
    }
    match partitions(model) {
        Some((base, n)) => lookup(table, &base).map(|p| p / f64::from(n)),
        None => lookup(table, model),
    }
}

fn lookup(table: &BTreeMap<String, f64>, model: &str) -> Option<f64> {
    let m = norm(model);
    if let Some(p) = table.get(&m) {
        return Some(*p);
    }
    let mut parts: Vec<&str> = m.split('-').collect();
    while parts.len() > 1 {
        parts.pop();
        if let Some(p) = table.get(&parts.join("-")) {
            return Some(*p);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_find_their_price_exactly_or_by_family() {
        let p = Prices::built_in().with_overrides(&["l4=0.5".into()]).expect("valid");
        let cases = [
            ("H100-80GB", Some(12.29)),
            ("A100-80GB", Some(5.121)),
            ("A100-40GB", Some(4.097)),
            ("L4", Some(0.5)),
            ("MI300X", Some(6.0)),
            ("MI300X-192GB", Some(6.0)),
            // Partitions pay their share of the GPU: an eighth, a quarter, a half.
            ("MI300X-CPX", Some(0.75)),
            ("MI300X-QPX", Some(1.5)),
            ("mi300x-dpx", Some(3.0)),
            ("MI300X-SPX", Some(6.0)),
            ("RTX-4090", None),
        ];
        for (model, want) in cases {
            assert_eq!(p.per_gpu_hour(model), want, "{model}");
        }
        assert_eq!(p.spot_per_gpu_hour("V100-16GB"), Some(0.344));
        assert_eq!(p.spot_per_gpu_hour("MI300X-CPX").map(|x| (x * 1e6).round()), Some((1.109 / 8.0 * 1e6f64).round()));
        // An override of the partition itself wins over the share.
        let own = Prices::built_in().with_overrides(&["MI300X-CPX=0.9".into()]).expect("valid");
        assert_eq!(own.per_gpu_hour("MI300X-CPX"), Some(0.9));
        assert_eq!(partitions("MI300A-CPX"), Some(("MI300A".into(), 6)));
        assert_eq!(partitions("H100-80GB"), None);
        assert_eq!(p.spot_per_gpu_hour("L4").map(|x| (x * 1000.0).round()), Some(241.0), "the discount is kept");
        for bad in ["H100", "H100=cheap", "H100=-1"] {
            assert!(Prices::built_in().with_overrides(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
