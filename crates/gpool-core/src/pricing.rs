//! What a GPU-hour costs, per model: the built-in table
//! (`data/pricing/gpu-hour-prices.csv`, AWS on-demand and spot list prices)
//! and the operator's overrides (`--gpu-price H100-80GB=4.50`). Used to
//! price the waste the advisor finds, a job's GPU-hours on nodes outside any
//! priced pool, and a pool's default price per node-hour.

use std::collections::BTreeMap;

const BUILT_IN: &str = include_str!("../../../data/pricing/gpu-hour-prices.csv");

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
        lookup(&self.by_model, model)
    }

    /// The spot price of a model, found as [`Prices::per_gpu_hour`] is. An
    /// overridden on-demand price keeps the built-in spot discount.
    pub fn spot_per_gpu_hour(&self, model: &str) -> Option<f64> {
        let spot = lookup(&self.spot_by_model, model)?;
        let built_in = Prices::built_in();
        match (built_in.per_gpu_hour(model), self.per_gpu_hour(model)) {
            (Some(listed), Some(now)) if listed > 0.0 && (listed - now).abs() > 1e-9 => Some(spot / listed * now),
            _ => Some(spot),
        }
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
            ("RTX-4090", None),
        ];
        for (model, want) in cases {
            assert_eq!(p.per_gpu_hour(model), want, "{model}");
        }
        assert_eq!(p.spot_per_gpu_hour("V100-16GB"), Some(0.344));
        assert_eq!(p.spot_per_gpu_hour("L4").map(|x| (x * 1000.0).round()), Some(241.0), "the discount is kept");
        for bad in ["H100", "H100=cheap", "H100=-1"] {
            assert!(Prices::built_in().with_overrides(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
