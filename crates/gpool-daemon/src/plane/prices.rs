//! What a GPU-hour costs, per model: the built-in table
//! (`data/pricing/gpu-hour-prices.csv`, AWS on-demand list prices) and the
//! operator's overrides (`--gpu-price H100-80GB=4.50`). Used to price the
//! waste the advisor finds and a job's GPU-hours; full price catalogs with
//! node pools come with cost accounting.

use std::collections::BTreeMap;

const BUILT_IN: &str = include_str!("../../../../data/pricing/gpu-hour-prices.csv");

/// Prices per GPU-hour by model name.
#[derive(Clone, Debug, Default)]
pub struct Prices {
    by_model: BTreeMap<String, f64>,
}

fn norm(model: &str) -> String {
    model.trim().to_ascii_uppercase().replace([' ', '_'], "-")
}

impl Prices {
    /// The built-in table.
    pub fn built_in() -> Prices {
        let by_model = BUILT_IN
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("model,") && !l.trim().is_empty())
            .filter_map(|l| {
                let mut f = l.split(',');
                let model = f.next()?;
                let price = f.next()?.trim().parse::<f64>().ok()?;
                Some((norm(model), price))
            })
            .collect();
        Prices { by_model }
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

    /// The price of a model: an exact entry, else its family (`H100-80GB` → `H100`).
    pub fn per_gpu_hour(&self, model: &str) -> Option<f64> {
        let m = norm(model);
        if let Some(p) = self.by_model.get(&m) {
            return Some(*p);
        }
        let mut parts: Vec<&str> = m.split('-').collect();
        while parts.len() > 1 {
            parts.pop();
            if let Some(p) = self.by_model.get(&parts.join("-")) {
                return Some(*p);
            }
        }
        None
    }
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
            ("RTX-4090", None),
        ];
        for (model, want) in cases {
            assert_eq!(p.per_gpu_hour(model), want, "{model}");
        }
        for bad in ["H100", "H100=cheap", "H100=-1"] {
            assert!(Prices::built_in().with_overrides(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
