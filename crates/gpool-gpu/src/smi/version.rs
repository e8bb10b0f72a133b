//! `nvidia-smi --version`.

use crate::GpuError;

/// The versions `nvidia-smi --version` prints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SmiVersion {
    pub smi: Option<String>,
    pub nvml: Option<String>,
    pub driver: Option<String>,
    pub cuda: Option<String>,
}

/// Parses `nvidia-smi --version`: `NVIDIA-SMI version  : 590.48.01` lines.
/// Keys it does not know are skipped; a line without `:` is an error.
pub fn parse_version(text: &str) -> Result<SmiVersion, GpuError> {
    let mut v = SmiVersion::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let (key, value) = line.split_once(':').ok_or_else(|| GpuError::Parse {
            what: "nvidia-smi --version",
            line: i + 1,
            why: format!("no `key : value` in {line:?}"),
        })?;
        let value = super::value::present(value).map(str::to_string);
        match key.trim().to_ascii_lowercase().as_str() {
            "nvidia-smi version" => v.smi = value,
            "nvml version" => v.nvml = value,
            "driver version" => v.driver = value,
            "cuda version" => v.cuda = value,
            _ => {}
        }
    }
    Ok(v)
}
