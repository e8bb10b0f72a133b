//! `rocm-smi --json`: an object keyed `card0`, `card1`, … (plus `system`),
//! every value a string, units in the key. Keys were renamed between ROCm
//! releases (`GPU ID` → `Device ID`, `Card series` → `Card Series` and
//! `Device Name`, `GPU memory use (%)` → `GPU Memory Allocated (VRAM%)`,
//! `Average Graphics Package Power (W)` → `Current Socket Graphics Package
//! Power (W)`), so each reading is looked up by every spelling it has had,
//! in order of preference.

use serde_json::{Map, Value};

use super::value::{mib, number, text};
use crate::GpuError;

/// One GPU as `rocm-smi --json` describes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RocmCard {
    /// `N` of `cardN`.
    pub index: u32,
    /// The product name, where one is printed (`Card Series`, `Device Name`,
    /// `Card series` when it is not a hex id).
    pub name: Option<String>,
    /// PCI device id, e.g. `0x73df`.
    pub device_id: Option<String>,
    pub unique_id: Option<String>,
    pub serial: Option<String>,
    pub pci_bus: Option<String>,
    pub numa_node: Option<u32>,
    pub memory_total_mb: Option<u64>,
    pub memory_used_mb: Option<u64>,
    pub gpu_util_pct: Option<f64>,
    /// Memory read/write activity (not allocation), where printed.
    pub mem_util_pct: Option<f64>,
    pub temperature_edge_c: Option<f64>,
    pub temperature_junction_c: Option<f64>,
    pub temperature_memory_c: Option<f64>,
    pub power_w: Option<f64>,
    pub power_cap_w: Option<f64>,
    pub sclk_mhz: Option<u32>,
    pub mclk_mhz: Option<u32>,
    pub fan_pct: Option<f64>,
    /// `SPX`, `DPX`, `QPX`, `CPX` (MI300-class), where printed.
    pub compute_partition: Option<String>,
    /// `NPS1`, `NPS4`, where printed.
    pub memory_partition: Option<String>,
    /// `PCIe Replay Count` (`--showreplaycount`).
    pub pcie_replays: Option<u64>,
}

const WHAT: &str = "rocm-smi --json";

/// Parses `rocm-smi … --json` output. Text before the JSON (the empty line
/// ROCm 5.7 and later print, warnings) is skipped.
pub fn parse_rocm_smi(out: &str) -> Result<Vec<RocmCard>, GpuError> {
    let start = out.find('{').ok_or_else(|| GpuError::Parse {
        what: WHAT,
        line: 1,
        why: "no JSON object in the output (some rocm-smi options print `WARNING: No JSON data to report`)".into(),
    })?;
    let line = out[..start].lines().count().max(1);
    let root: Value = serde_json::from_str(&out[start..]).map_err(|e| GpuError::Parse {
        what: WHAT,
        line: line + e.line().saturating_sub(1),
        why: e.to_string(),
    })?;
    let Value::Object(root) = root else {
        return Err(GpuError::Parse { what: WHAT, line, why: "the JSON is not an object of cards".into() });
    };
    let mut cards: Vec<RocmCard> = root
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("card")?.parse::<u32>().ok()?, v.as_object()?)))
        .map(|(index, c)| card(index, c))
        .collect();
    cards.sort_by_key(|c| c.index);
    Ok(cards)
}

/// The first of `keys` that has a value.
fn first<'a>(c: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().filter_map(|k| c.get(*k)).find(|v| text(v).is_some())
}

/// The value of the key that contains every word of `words` (case-insensitive).
fn with_words<'a>(c: &'a Map<String, Value>, words: &[&str]) -> Option<&'a Value> {
    c.iter()
        .find(|(k, v)| {
            let k = k.to_ascii_lowercase();
            words.iter().all(|w| k.contains(w)) && text(v).is_some()
        })
        .map(|(_, v)| v)
}

fn card(index: u32, c: &Map<String, Value>) -> RocmCard {
    let num = |keys: &[&str]| first(c, keys).and_then(number);
    let name = first(c, &["Card Series", "Device Name", "Card series", "Card Model", "Card model"])
        .and_then(text)
        .filter(|n| !n.starts_with("0x"));
    let clock = |keys: &[&str]| num(keys).map(|x| x.round() as u32);
    RocmCard {
        index,
        name,
        device_id: first(c, &["Device ID", "GPU ID"]).and_then(text),
        unique_id: first(c, &["Unique ID"]).and_then(text),
        serial: first(c, &["Serial Number"]).and_then(text).filter(|s| s != "0"),
        pci_bus: first(c, &["PCI Bus"]).and_then(text),
        numa_node: num(&["(Topology) Numa Node"]).filter(|n| *n >= 0.0).map(|n| n as u32),
        memory_total_mb: first(c, &["VRAM Total Memory (B)"]).and_then(|v| mib(v, "B")),
        memory_used_mb: first(c, &["VRAM Total Used Memory (B)"]).and_then(|v| mib(v, "B")),
        gpu_util_pct: num(&["GPU use (%)"]),
        mem_util_pct: num(&["GPU Memory Read/Write Activity (%)"]),
        temperature_edge_c: num(&["Temperature (Sensor edge) (C)"]),
        temperature_junction_c: num(&["Temperature (Sensor junction) (C)"]),
        temperature_memory_c: num(&["Temperature (Sensor memory) (C)"]),
        power_w: num(&[
            "Current Socket Graphics Package Power (W)",
            "Average Graphics Package Power (W)",
            "Average Socket Graphics Package Power (W)",
        ]),
        power_cap_w: num(&["Max Graphics Package Power (W)"]),
        sclk_mhz: clock(&["sclk clock speed:"]),
        mclk_mhz: clock(&["mclk clock speed:"]),
        fan_pct: num(&["Fan speed (%)"]),
        compute_partition: with_words(c, &["compute", "partition"]).and_then(text),
        memory_partition: with_words(c, &["memory", "partition"]).and_then(text),
        pcie_replays: num(&["PCIe Replay Count"]).filter(|n| *n >= 0.0).map(|n| n as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_json_is_a_parse_error_with_a_line() {
        let e = parse_rocm_smi("\nWARNING: No JSON data to report\n").expect_err("no JSON");
        assert!(matches!(e, GpuError::Parse { line: 1, .. }), "{e}");
        let e = parse_rocm_smi("\n\n{\"card0\": {\n").expect_err("cut");
        assert!(matches!(e, GpuError::Parse { line: 3.., .. }), "{e}");
        assert!(parse_rocm_smi("[1, 2]").is_err());
    }

    #[test]
    fn keys_are_read_by_meaning() {
        let c = parse_rocm_smi(
            r#"{"card1": {"Card series": "0x1002", "Device Name": "Navi 22", "Current Compute Partition": "CPX",
                "Current Socket Graphics Package Power (W)": "N/A", "Average Graphics Package Power (W)": "6.0"}}"#,
        )
        .expect("parses");
        assert_eq!(c[0].index, 1);
        assert_eq!(c[0].name.as_deref(), Some("Navi 22"), "a hex id is not a name");
        assert_eq!(c[0].compute_partition.as_deref(), Some("CPX"));
        assert_eq!(c[0].power_w, Some(6.0), "an N/A spelling falls through to the next");
    }
}
