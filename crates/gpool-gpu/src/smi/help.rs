//! `nvidia-smi --help-query-gpu` (and `--help-query-compute-apps`): the
//! fields a driver can be asked for, with their aliases.

use crate::GpuError;

/// One documented field: `"clocks.current.sm" or "clocks.sm"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryField {
    pub name: String,
    pub aliases: Vec<String>,
    /// The paragraph under the name.
    pub description: String,
    pub line: usize,
}

/// Parses the `--help-query-*` text: every line that starts with a quoted
/// name opens a field; the lines after it, up to a blank line, describe it.
/// Section blurbs (`Section about … properties`) and value lists
/// (`"0: Default" means …`) are not fields.
pub fn parse_help_query(text: &str) -> Result<Vec<QueryField>, GpuError> {
    let mut out: Vec<QueryField> = Vec::new();
    let mut open = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            open = false;
            continue;
        }
        if let Some(names) = field_names(line) {
            if names.is_empty() {
                return Err(GpuError::Parse {
                    what: "nvidia-smi --help-query-gpu",
                    line: i + 1,
                    why: format!("an empty field name in {line:?}"),
                });
            }
            let mut names = names.into_iter();
            let name = names.next().unwrap_or_default();
            out.push(QueryField { name, aliases: names.collect(), description: String::new(), line: i + 1 });
            open = true;
        } else if open && let Some(f) = out.last_mut() {
            if !f.description.is_empty() {
                f.description.push(' ');
            }
            f.description.push_str(line);
        }
    }
    Ok(out)
}

/// `"a" or "b"` → `["a", "b"]`; `None` when the line is not a list of quoted names.
fn field_names(line: &str) -> Option<Vec<String>> {
    let mut names = Vec::new();
    let mut rest = line;
    loop {
        let inner = rest.strip_prefix('"')?;
        let (name, after) = inner.split_once('"')?;
        if name.contains(char::is_whitespace) || name.contains(':') {
            return None;
        }
        names.push(name.to_string());
        let after = after.trim_start();
        if after.is_empty() {
            return Some(names);
        }
        rest = after.strip_prefix("or")?.trim_start();
    }
}
