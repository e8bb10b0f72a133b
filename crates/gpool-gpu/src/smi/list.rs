//! `nvidia-smi -L`: GPUs and their MIG devices, with UUIDs.
//!
//! ```text
//! GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-…)
//!   MIG 3g.40gb     Device  0: (UUID: MIG-…)                  (R470 and later)
//!   MIG 1g.5gb Device 0: (UUID: MIG-GPU-<gpu uuid>/7/0)       (before R470)
//! ```

use crate::GpuError;

/// A GPU line of `-L` and the MIG devices listed under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedGpu {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    pub mig: Vec<ListedMig>,
}

/// A MIG device line of `-L`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedMig {
    /// The MIG device index (`Device 0`).
    pub device: u32,
    /// The profile, e.g. `3g.40gb` (or `1c.3g.40gb` for a compute instance).
    pub profile: String,
    pub uuid: String,
    /// GPU and compute instance ids, which only the old UUID format
    /// (`MIG-GPU-<uuid>/<gi>/<ci>`) carries.
    pub gi_id: Option<u32>,
    pub ci_id: Option<u32>,
}

const WHAT: &str = "nvidia-smi -L";

fn err(line: usize, why: String) -> GpuError {
    GpuError::Parse { what: WHAT, line, why }
}

/// Splits `… (UUID: X)` into the text before and `X`.
fn split_uuid(rest: &str) -> Option<(&str, &str)> {
    let (before, after) = rest.rsplit_once("(UUID:")?;
    let uuid = after.trim().strip_suffix(')')?.trim();
    (!uuid.is_empty() && !uuid.contains(char::is_whitespace)).then_some((before.trim(), uuid))
}

/// GPU and compute instance ids from an old-format MIG UUID.
fn old_format_ids(uuid: &str) -> (Option<u32>, Option<u32>) {
    if !uuid.starts_with("MIG-GPU-") {
        return (None, None);
    }
    let mut parts = uuid.rsplit('/');
    let ci = parts.next().and_then(|c| c.parse().ok());
    let gi = parts.next().and_then(|g| g.parse().ok());
    match (gi, ci) {
        (Some(g), Some(c)) => (Some(g), Some(c)),
        _ => (None, None),
    }
}

/// Parses `nvidia-smi -L`. `No devices found.` is an empty list.
pub fn parse_list(text: &str) -> Result<Vec<ListedGpu>, GpuError> {
    let mut gpus: Vec<ListedGpu> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.to_ascii_lowercase().starts_with("no devices") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("GPU ") {
            let (index, rest) = rest.split_once(':').ok_or_else(|| err(line_no, format!("no `GPU N:` in {line:?}")))?;
            let index = index.trim().parse().map_err(|_| err(line_no, format!("GPU index {index:?}")))?;
            let (name, uuid) = split_uuid(rest).ok_or_else(|| err(line_no, format!("no `(UUID: …)` in {line:?}")))?;
            gpus.push(ListedGpu { index, name: name.to_string(), uuid: uuid.to_string(), mig: Vec::new() });
        } else if let Some(rest) = line.strip_prefix("MIG ") {
            let gpu = gpus.last_mut().ok_or_else(|| err(line_no, "a MIG device before any GPU".into()))?;
            let (head, uuid) = split_uuid(rest).ok_or_else(|| err(line_no, format!("no `(UUID: …)` in {line:?}")))?;
            // head: `3g.40gb     Device  0:`
            let head = head.trim_end().trim_end_matches(':');
            let (profile, device) =
                head.split_once("Device").ok_or_else(|| err(line_no, format!("no `Device N` in {line:?}")))?;
            let device = device.trim().parse().map_err(|_| err(line_no, format!("MIG device {device:?}")))?;
            let profile = profile.trim();
            if profile.is_empty() {
                return Err(err(line_no, format!("no MIG profile in {line:?}")));
            }
            let (gi_id, ci_id) = old_format_ids(uuid);
            gpu.mig.push(ListedMig { device, profile: profile.to_string(), uuid: uuid.to_string(), gi_id, ci_id });
        } else {
            return Err(err(line_no, format!("neither a GPU nor a MIG line: {:?}", super::csv::clip(line))));
        }
    }
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_parentheses_and_no_devices() {
        let l = parse_list("GPU 1: NVIDIA RTX (Ada) 6000 (UUID: GPU-x)\n").expect("parses");
        assert_eq!((l[0].index, l[0].name.as_str(), l[0].uuid.as_str()), (1, "NVIDIA RTX (Ada) 6000", "GPU-x"));
        assert!(parse_list("No devices found.\n").expect("parses").is_empty());
        let e = parse_list("GPU 0: A (UUID: GPU-x)\nhello\n").expect_err("junk");
        assert!(matches!(e, GpuError::Parse { line: 2, .. }));
        let e = parse_list("  MIG 1g.5gb Device 0: (UUID: MIG-x)\n").expect_err("orphan");
        assert!(matches!(e, GpuError::Parse { line: 1, .. }));
    }
}
