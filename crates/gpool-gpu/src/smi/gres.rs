//! `slurmd -G` GRES lines, as Slurm's NVML autodetection prints them:
//! `node: Gres Name=gpu Type=nvidia_h100_80gb_hbm3_1g.10gb Count=1 Index=336
//! ID=7696487 File=/dev/nvidia-caps/nvidia-cap336 Links=(null) Flags=…`.
//! Not nvidia-smi output: kept beside it to check what Slurm would see.

use crate::GpuError;

/// One GRES line of `slurmd -G`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gres {
    pub node: Option<String>,
    pub name: String,
    /// e.g. `nvidia_h100_80gb_hbm3` or `nvidia_h100_80gb_hbm3_1g.10gb` for a MIG device.
    pub kind: Option<String>,
    pub count: u64,
    pub index: Option<u64>,
    /// Device file: `/dev/nvidia0`, or `/dev/nvidia-caps/nvidia-capN` for MIG.
    pub file: Option<String>,
    pub links: Option<String>,
    pub flags: Vec<String>,
}

impl Gres {
    /// The MIG profile in the type (`…_1g.10gb` → `1g.10gb`), if any.
    pub fn mig_profile(&self) -> Option<&str> {
        let last = self.kind.as_deref()?.rsplit('_').next()?;
        let (g, _) = last.split_once('.')?;
        g.strip_suffix('g').is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())).then_some(last)
    }
}

/// Parses `slurmd -G` output: lines with `Gres` and `Key=Value` pairs; other lines are skipped.
pub fn parse_gres(text: &str) -> Result<Vec<Gres>, GpuError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let Some(at) = line.find("Gres ") else { continue };
        let node = line.get(..at).map(|n| n.trim().trim_end_matches(':').trim()).filter(|n| !n.is_empty());
        let err = |why: String| GpuError::Parse { what: "slurmd -G", line: i + 1, why };
        let mut g = Gres {
            node: node.map(str::to_string),
            name: String::new(),
            kind: None,
            count: 1,
            index: None,
            file: None,
            links: None,
            flags: Vec::new(),
        };
        for pair in line.get(at + 5..).unwrap_or("").split_whitespace() {
            let (k, v) = pair.split_once('=').ok_or_else(|| err(format!("{pair:?} is not Key=Value")))?;
            let opt = || (v != "(null)").then(|| v.to_string());
            match k {
                "Name" => g.name = v.to_string(),
                "Type" => g.kind = opt(),
                "Count" => g.count = v.parse().map_err(|_| err(format!("Count={v:?}")))?,
                "Index" => g.index = Some(v.parse().map_err(|_| err(format!("Index={v:?}")))?),
                "File" => g.file = opt(),
                "Links" => g.links = opt(),
                "Flags" => g.flags = v.split(',').map(str::to_string).collect(),
                _ => {}
            }
        }
        if g.name.is_empty() {
            return Err(err("no Name=".into()));
        }
        out.push(g);
    }
    Ok(out)
}
