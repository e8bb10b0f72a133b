//! `nvidia-smi mig …`: GPU and compute instances (`-lgi`, `-lci`), their
//! profiles (`-lgip`, `-lcip`), possible placements (`-lgipp`), and what
//! `-cgi` (create) answered.
//!
//! The list commands print boxed tables: a header, a `|===|` rule, then one
//! entry per instance or profile between `+---+` lines (profiles take two
//! lines). Columns are read by position, which has not changed from R450 to
//! R590. A driver with nothing to list prints `No GPU instances found: …`,
//! an empty list here.

use super::value;
use crate::GpuError;

/// A GPU instance (`mig -lgi`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInstance {
    pub gpu: u32,
    /// e.g. `3g.40gb`.
    pub profile: String,
    pub profile_id: u32,
    pub gi_id: u32,
    /// Start and size in memory slices.
    pub placement: Option<(u32, u32)>,
}

/// A compute instance (`mig -lci`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeInstance {
    pub gpu: u32,
    pub gi_id: u32,
    /// e.g. `1c.3g.40gb`.
    pub profile: String,
    pub profile_id: u32,
    pub ci_id: u32,
    pub placement: Option<(u32, u32)>,
}

/// A GPU instance profile (`mig -lgip`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInstanceProfile {
    pub gpu: u32,
    /// e.g. `1g.10gb` or `1g.10gb+me`.
    pub profile: String,
    pub profile_id: u32,
    pub free: u32,
    pub total: u32,
    /// The memory column (GiB) in MiB.
    pub memory_mb: Option<u64>,
    pub p2p: Option<bool>,
    pub sm: Option<u32>,
    pub dec: Option<u32>,
    pub enc: Option<u32>,
    pub ce: Option<u32>,
    pub jpeg: Option<u32>,
    pub ofa: Option<u32>,
}

/// A compute instance profile of one GPU instance (`mig -lcip`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeInstanceProfile {
    pub gpu: u32,
    pub gi_id: u32,
    pub profile: String,
    pub profile_id: u32,
    /// The profile the driver picks by default (`2*`).
    pub default: bool,
    pub free: u32,
    pub total: u32,
    pub sm: Option<u32>,
    pub dec: Option<u32>,
    pub enc: Option<u32>,
    pub ofa: Option<u32>,
    pub ce: Option<u32>,
    pub jpeg: Option<u32>,
}

/// Where a GPU instance profile may be placed (`mig -lgipp`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfilePlacements {
    pub gpu: u32,
    pub profile_id: u32,
    /// Possible start slices.
    pub starts: Vec<u32>,
    /// Size in memory slices.
    pub size: u32,
}

/// One line of table entry: its line number and whitespace tokens.
type Row<'a> = (usize, Vec<&'a str>);

/// The entries of a boxed table, each one or more rows.
fn entries<'a>(text: &'a str, what: &'static str) -> Result<Vec<Vec<Row<'a>>>, GpuError> {
    let mut out: Vec<Vec<Row<'a>>> = Vec::new();
    let mut in_body = false;
    let mut current: Vec<Row<'a>> = Vec::new();
    let mut saw_nothing_message = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with("|=") {
            in_body = true;
        } else if line.starts_with('+') {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
        } else if line.starts_with('|') {
            if in_body {
                current.push((
                    i + 1,
                    line.split(|c: char| c == '|' || c.is_whitespace()).filter(|t| !t.is_empty()).collect(),
                ));
            }
        } else if line.starts_with("No ") {
            saw_nothing_message = true;
        } else if !line.is_empty() {
            return Err(GpuError::Parse {
                what,
                line: i + 1,
                why: format!("not a table line: {:?}", super::csv::clip(line)),
            });
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    if !in_body && !saw_nothing_message && !text.trim().is_empty() {
        return Err(GpuError::Parse { what, line: 1, why: "no table (no `|===|` rule)".into() });
    }
    Ok(out)
}

/// Reads tokens of one row left to right, with errors that name the line.
struct Cursor<'a> {
    what: &'static str,
    line: usize,
    tokens: &'a [&'a str],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(what: &'static str, row: &'a Row<'a>) -> Cursor<'a> {
        Cursor { what, line: row.0, tokens: &row.1, at: 0 }
    }
    fn err(&self, why: String) -> GpuError {
        GpuError::Parse { what: self.what, line: self.line, why }
    }
    fn next(&mut self, name: &str) -> Result<&'a str, GpuError> {
        let t = self.tokens.get(self.at).copied().ok_or_else(|| self.err(format!("no {name} column")))?;
        self.at += 1;
        Ok(t)
    }
    fn id(&mut self, name: &str) -> Result<u32, GpuError> {
        let t = self.next(name)?;
        t.parse().map_err(|_| self.err(format!("{name} {t:?} is not a number")))
    }
    /// A profile name, after an optional `MIG`.
    fn profile(&mut self) -> Result<String, GpuError> {
        let mut t = self.next("name")?;
        if t == "MIG" {
            t = self.next("profile")?;
        }
        Ok(t.to_string())
    }
    fn opt(&mut self) -> Option<u32> {
        let t = self.tokens.get(self.at).copied();
        self.at += 1;
        t.and_then(value::id)
    }
    fn placement(&mut self) -> Result<Option<(u32, u32)>, GpuError> {
        match self.tokens.get(self.at).copied() {
            None => Ok(None),
            Some(t) => {
                self.at += 1;
                placement(t).map(Some).ok_or_else(|| self.err(format!("placement {t:?} is not start:size")))
            }
        }
    }
    fn free_total(&mut self) -> Result<(u32, u32), GpuError> {
        let t = self.next("Free/Total")?;
        t.split_once('/')
            .and_then(|(f, t)| Some((f.parse().ok()?, t.parse().ok()?)))
            .ok_or_else(|| self.err(format!("instances {t:?} is not free/total")))
    }
}

fn placement(t: &str) -> Option<(u32, u32)> {
    let (s, n) = t.split_once(':')?;
    Some((s.parse().ok()?, n.parse().ok()?))
}

/// Parses `nvidia-smi mig -lgi`.
pub fn parse_gpu_instances(text: &str) -> Result<Vec<GpuInstance>, GpuError> {
    const WHAT: &str = "nvidia-smi mig -lgi";
    entries(text, WHAT)?
        .iter()
        .map(|e| {
            let mut c = Cursor::new(WHAT, &e[0]);
            Ok(GpuInstance {
                gpu: c.id("GPU")?,
                profile: c.profile()?,
                profile_id: c.id("profile ID")?,
                gi_id: c.id("instance ID")?,
                placement: c.placement()?,
            })
        })
        .collect()
}

/// Parses `nvidia-smi mig -lci`.
pub fn parse_compute_instances(text: &str) -> Result<Vec<ComputeInstance>, GpuError> {
    const WHAT: &str = "nvidia-smi mig -lci";
    entries(text, WHAT)?
        .iter()
        .map(|e| {
            let mut c = Cursor::new(WHAT, &e[0]);
            Ok(ComputeInstance {
                gpu: c.id("GPU")?,
                gi_id: c.id("GPU instance ID")?,
                profile: c.profile()?,
                profile_id: c.id("profile ID")?,
                ci_id: c.id("instance ID")?,
                placement: c.placement()?,
            })
        })
        .collect()
}

/// Parses `nvidia-smi mig -lgip`.
pub fn parse_gpu_instance_profiles(text: &str) -> Result<Vec<GpuInstanceProfile>, GpuError> {
    const WHAT: &str = "nvidia-smi mig -lgip";
    entries(text, WHAT)?
        .iter()
        .map(|e| {
            let mut c = Cursor::new(WHAT, &e[0]);
            let (gpu, profile, profile_id) = (c.id("GPU")?, c.profile()?, c.id("ID")?);
            let (free, total) = c.free_total()?;
            let memory_mb = c
                .next("memory")
                .ok()
                .and_then(|m| value::number_unit(m))
                .and_then(|(gib, _)| value::mib(&format!("{gib} GiB"), None));
            let p2p = c.next("P2P").ok().and_then(value::enabled);
            let (sm, dec, enc) = (c.opt(), c.opt(), c.opt());
            let mut second = e.get(1).map(|r| Cursor::new(WHAT, r));
            let mut more = || second.as_mut().and_then(Cursor::opt);
            let (ce, jpeg, ofa) = (more(), more(), more());
            Ok(GpuInstanceProfile {
                gpu,
                profile,
                profile_id,
                free,
                total,
                memory_mb,
                p2p,
                sm,
                dec,
                enc,
                ce,
                jpeg,
                ofa,
            })
        })
        .collect()
}

/// Parses `nvidia-smi mig -lcip`.
pub fn parse_compute_instance_profiles(text: &str) -> Result<Vec<ComputeInstanceProfile>, GpuError> {
    const WHAT: &str = "nvidia-smi mig -lcip";
    entries(text, WHAT)?
        .iter()
        .map(|e| {
            let mut c = Cursor::new(WHAT, &e[0]);
            let (gpu, gi_id, profile) = (c.id("GPU")?, c.id("GPU instance ID")?, c.profile()?);
            let id = c.next("profile ID")?;
            let default = id.ends_with('*');
            let profile_id =
                id.trim_end_matches('*').parse().map_err(|_| c.err(format!("profile ID {id:?} is not a number")))?;
            let (free, total) = c.free_total()?;
            let (sm, dec, enc, ofa) = (c.opt(), c.opt(), c.opt(), c.opt());
            let mut second = e.get(1).map(|r| Cursor::new(WHAT, r));
            let mut more = || second.as_mut().and_then(Cursor::opt);
            let (ce, jpeg) = (more(), more());
            Ok(ComputeInstanceProfile {
                gpu,
                gi_id,
                profile,
                profile_id,
                default,
                free,
                total,
                sm,
                dec,
                enc,
                ofa,
                ce,
                jpeg,
            })
        })
        .collect()
}

/// Parses `nvidia-smi mig -lgipp`: `GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1`.
pub fn parse_placements(text: &str) -> Result<Vec<ProfilePlacements>, GpuError> {
    const WHAT: &str = "nvidia-smi mig -lgipp";
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with("No ") {
            continue;
        }
        let err = |why: &str| GpuError::Parse { what: WHAT, line: i + 1, why: format!("{why} in {line:?}") };
        let (head, set) = line.split_once('{').ok_or_else(|| err("no `{…}` placement set"))?;
        let (set, size) = set.split_once('}').ok_or_else(|| err("no `}`"))?;
        let size = size.trim().trim_start_matches(':').trim().parse().map_err(|_| err("no `:size`"))?;
        let starts = set
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().map_err(|_| err("placement start not a number")))
            .collect::<Result<Vec<u32>, _>>()?;
        let tokens: Vec<&str> = head.split_whitespace().collect();
        let gpu = after(&tokens, &["GPU"]).ok_or_else(|| err("no GPU index"))?;
        let profile_id = after(&tokens, &["Profile", "ID"]).ok_or_else(|| err("no profile ID"))?;
        out.push(ProfilePlacements { gpu, profile_id, starts, size });
    }
    Ok(out)
}

/// The number after a run of words (`["on", "GPU"]` → the GPU index).
fn after(tokens: &[&str], words: &[&str]) -> Option<u32> {
    let n = words.len();
    (0..tokens.len().saturating_sub(n)).find_map(|i| {
        let window = tokens.get(i..i + n)?;
        if window.iter().zip(words).all(|(t, w)| t.eq_ignore_ascii_case(w)) {
            let v = tokens.get(i + n)?;
            v.trim_end_matches([':', ')', ',']).parse().ok()
        } else {
            None
        }
    })
}

/// An instance `mig -cgi` (with or without `-C`) created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MigCreated {
    GpuInstance { gpu: u32, gi_id: u32, profile: String, profile_id: u32 },
    ComputeInstance { gpu: u32, gi_id: u32, ci_id: u32, profile: String, profile_id: u32 },
}

/// Why the driver refused to create an instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MigCreateError {
    /// No free slices where the profile could go (often a creation-order
    /// problem: create the larger profiles first).
    InsufficientResources,
    /// Anything else, as the driver said it.
    Other(String),
}

/// A `Unable to create …` or `Failed to create …` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigCreateFailure {
    pub line: usize,
    pub gpu: Option<u32>,
    /// The profile as given on the command line (name or id).
    pub profile: Option<String>,
    pub error: MigCreateError,
}

/// What `nvidia-smi mig -cgi …` answered: what it created, and what it could not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigCreateReport {
    pub created: Vec<MigCreated>,
    pub failures: Vec<MigCreateFailure>,
}

impl MigCreateReport {
    /// The instances created, or the first failure.
    pub fn into_result(self) -> Result<Vec<MigCreated>, MigCreateFailure> {
        match self.failures.into_iter().next() {
            Some(f) => Err(f),
            None => Ok(self.created),
        }
    }
}

/// Parses what `nvidia-smi mig -cgi <profiles> [-C]` printed. A refusal is a
/// [`MigCreateFailure`] in the report, not an `Err`: `Err` is for text that
/// is not `-cgi` output at all.
pub fn parse_create(text: &str) -> Result<MigCreateReport, GpuError> {
    const WHAT: &str = "nvidia-smi mig -cgi";
    let mut report = MigCreateReport::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let err = |why: &str| GpuError::Parse { what: WHAT, line: i + 1, why: format!("{why}: {line:?}") };
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let profile_name = || {
            let at = tokens.iter().position(|t| *t == "profile")?;
            let t = tokens.get(at + 1)?;
            let t = if *t == "MIG" { tokens.get(at + 2)? } else { t };
            Some(t.trim_end_matches(':').to_string())
        };
        let profile_id = || after(&tokens, &["(ID"]);
        if line.starts_with("Successfully created GPU instance") {
            report.created.push(MigCreated::GpuInstance {
                gpu: after(&tokens, &["on", "GPU"]).ok_or_else(|| err("no GPU"))?,
                gi_id: after(&tokens, &["instance", "ID"]).ok_or_else(|| err("no instance ID"))?,
                profile: profile_name().ok_or_else(|| err("no profile"))?,
                profile_id: profile_id().ok_or_else(|| err("no profile ID"))?,
            });
        } else if line.starts_with("Successfully created compute instance") {
            report.created.push(MigCreated::ComputeInstance {
                gpu: after(&tokens, &["on", "GPU"]).ok_or_else(|| err("no GPU"))?,
                gi_id: after(&tokens, &["GPU", "instance", "ID"]).ok_or_else(|| err("no GPU instance ID"))?,
                ci_id: after(&tokens, &["compute", "instance", "ID"]).ok_or_else(|| err("no instance ID"))?,
                profile: profile_name().ok_or_else(|| err("no profile"))?,
                profile_id: profile_id().ok_or_else(|| err("no profile ID"))?,
            });
        } else if line.starts_with("Unable to create") || line.starts_with("Failed to create") {
            let reason = line.rsplit_once(':').map_or(line, |(_, r)| r).trim();
            let error = if reason.eq_ignore_ascii_case("insufficient resources") {
                MigCreateError::InsufficientResources
            } else {
                MigCreateError::Other(reason.to_string())
            };
            report.failures.push(MigCreateFailure {
                line: i + 1,
                gpu: after(&tokens, &["on", "GPU"]),
                profile: profile_name(),
                error,
            });
        } else {
            return Err(err("not a -cgi result"));
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_listed_and_garbage() {
        assert!(parse_gpu_instances("No GPU instances found: Not Found\n").expect("empty").is_empty());
        assert!(parse_gpu_instances("").expect("empty").is_empty());
        let e = parse_gpu_instances("hello\n").expect_err("garbage");
        assert!(matches!(e, GpuError::Parse { line: 1, .. }), "{e}");
        let e = parse_gpu_instances("|===|\n|  0  MIG 1g.5gb  x  7  0:1 |\n").expect_err("bad id");
        assert!(matches!(e, GpuError::Parse { line: 2, .. }), "{e}");
        let e = parse_create("Successfully created GPU instance\n").expect_err("truncated");
        assert!(matches!(e, GpuError::Parse { line: 1, .. }), "{e}");
    }
}
