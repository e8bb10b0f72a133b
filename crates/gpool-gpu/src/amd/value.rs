//! Values as AMD's tools print them, read by meaning: a JSON number; a
//! string with or without a unit (`"31.0"`, `"55 °C"`, `"(1402Mhz)"`,
//! `"10.1 GB"`); a `{"value": 10, "unit": "W"}` object (amd-smi from ROCm
//! 6.1 on). `"N/A"`, alone, with a reason (`"N/A (Secondary die)"`) or
//! inside an object, is absent, never zero.

use serde_json::Value;

/// The number and its unit (lower-case, `""` when none), if present.
pub fn quantity(v: &Value) -> Option<(f64, String)> {
    match v {
        Value::Number(n) => n.as_f64().map(|x| (x, String::new())),
        Value::String(s) => from_text(s),
        Value::Object(o) => {
            let (x, inner_unit) = quantity(o.get("value")?)?;
            let unit = o.get("unit").and_then(Value::as_str).map(str::to_ascii_lowercase);
            Some((x, unit.filter(|u| !u.is_empty()).unwrap_or(inner_unit)))
        }
        _ => None,
    }
}

/// The number, whatever its unit.
pub fn number(v: &Value) -> Option<f64> {
    quantity(v).map(|(x, _)| x).filter(|x| x.is_finite())
}

/// A number in text: `"31.0"`, `"(1402Mhz)"`, `"55 °C"`, `"103 W"`. Hex
/// ids (`"0x73df"`) are not numbers.
fn from_text(s: &str) -> Option<(f64, String)> {
    let t = s.trim().trim_start_matches('(').trim_end_matches(')').trim();
    if t.is_empty() || t.to_ascii_uppercase().starts_with("N/A") || t.starts_with("0x") {
        return None;
    }
    let end = t
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '-' || c == '+'))))
        .map_or(t.len(), |(i, _)| i);
    let x: f64 = t[..end].parse().ok()?;
    Some((x, t[end..].trim().to_ascii_lowercase()))
}

/// A size in MiB: the unit the value carries, else `default_unit` (what the
/// key names: `"VRAM Total Memory (B)"` → `"b"`).
pub fn mib(v: &Value, default_unit: &str) -> Option<u64> {
    let (x, unit) = quantity(v)?;
    let unit = if unit.is_empty() { default_unit.to_ascii_lowercase() } else { unit };
    let bytes = match unit.as_str() {
        "b" => x,
        "kb" | "kib" => x * 1024.0,
        "mb" | "mib" => x * 1024.0 * 1024.0,
        "gb" | "gib" => x * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    (bytes >= 0.0).then(|| (bytes / (1024.0 * 1024.0)).round() as u64)
}

/// Text that says something: not empty, not `N/A`.
pub fn text(v: &Value) -> Option<String> {
    let s = match v {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    (!s.is_empty() && !s.to_ascii_uppercase().starts_with("N/A")).then_some(s)
}

/// The per-GPU entries of an amd-smi answer, whichever root it has: a bare
/// list (ROCm 6.1 `metric`, 26.x `process`), `{"gpu_data": [...]}` (newer
/// `static` and `metric`), or one object.
pub fn gpu_entries(root: &Value) -> Vec<&Value> {
    match root {
        Value::Array(list) => list.iter().collect(),
        Value::Object(o) => match o.get("gpu_data") {
            Some(Value::Array(list)) => list.iter().collect(),
            _ => vec![root],
        },
        _ => Vec::new(),
    }
}

/// The value at a path of object keys, e.g. `["usage", "gfx_activity"]`.
pub fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_spelling_of_a_value() {
        let cases = [
            (json!(10), Some((10.0, ""))),
            (json!("31.0"), Some((31.0, ""))),
            (json!("(1402Mhz)"), Some((1402.0, "mhz"))),
            (json!("55 °C"), Some((55.0, "°c"))),
            (json!({"value": 10, "unit": "W"}), Some((10.0, "w"))),
            (json!({"value": "12 %", "unit": ""}), Some((12.0, "%"))),
            (json!({"value": "N/A", "unit": "GB/s"}), None),
            (json!("N/A"), None),
            (json!("N/A (Secondary die)"), None),
            (json!("0x73df"), None),
            (json!(""), None),
            (json!(null), None),
            (json!("-3.5"), Some((-3.5, ""))),
        ];
        for (v, want) in cases {
            assert_eq!(quantity(&v), want.map(|(x, u)| (x, u.to_string())), "{v}");
        }
    }

    #[test]
    fn sizes_in_mib_from_the_unit_or_the_key() {
        assert_eq!(mib(&json!("12868124672"), "B"), Some(12_272));
        assert_eq!(mib(&json!({"value": 65520, "unit": "MB"}), "B"), Some(65_520));
        assert_eq!(mib(&json!("10.1 GB"), "B"), Some(10_342));
        assert_eq!(mib(&json!("5 parsecs"), "B"), None);
    }

    #[test]
    fn both_roots() {
        let list = json!([{"gpu": 0}, {"gpu": 1}]);
        let wrapped = json!({"gpu_data": [{"gpu": 0}]});
        assert_eq!(gpu_entries(&list).len(), 2);
        assert_eq!(gpu_entries(&wrapped).len(), 1);
        assert_eq!(gpu_entries(&json!("No GPUs")).len(), 0);
    }
}
