//! How the CLI prints: the `-o table|json|yaml` choice, JSON and YAML, and the helpers the
//! tables share. Rendering is pure (API views in, text out) so that it can be
//! checked against snapshots; [`emit`] is what writes to standard output.

use std::io::Write as _;

use clap::ValueEnum;
use gpool_api as api;

/// Output format of listings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Output {
    #[default]
    Table,
    Json,
    /// The same data as JSON, as YAML (kubectl's `-o yaml`).
    Yaml,
    /// The table with more columns and nothing cut short, where a listing has more to say (`gpool queue`); else the table.
    Wide,
}

impl Output {
    /// Whether it prints the API's data rather than a table.
    pub(crate) fn is_data(self) -> bool {
        matches!(self, Output::Json | Output::Yaml)
    }

    /// `v` as this format prints it (JSON for a table, which has its own rendering).
    pub(crate) fn data<T: serde::Serialize + ?Sized>(self, v: &T) -> anyhow::Result<String> {
        match self {
            Output::Yaml => Ok(gpool_api::yaml::to_string(v)?),
            Output::Json | Output::Table | Output::Wide => json(v),
        }
    }
}

/// `-o table|json|yaml`, and the older `--json`, for commands whose result
/// is one JSON value (`gpool sim`, `gpool bench …`): the CLI's one spelling.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub(crate) struct DataFlag {
    /// How the result is printed: table, json or yaml (as everywhere in the CLI).
    #[arg(long, short = 'o', value_enum, conflicts_with = "json")]
    pub(crate) output: Option<Output>,
    /// Print the result as JSON (the same as `-o json`).
    #[arg(long)]
    pub(crate) json: bool,
}

impl DataFlag {
    /// The data format asked for; `None` for the table.
    pub(crate) fn data(self) -> Option<Output> {
        match self.output {
            Some(o) => o.is_data().then_some(o),
            None => self.json.then_some(Output::Json),
        }
    }
}

/// Prints `v` as `format` says: JSON on one line, or YAML.
pub(crate) fn print_data(format: Output, v: &serde_json::Value) -> anyhow::Result<()> {
    match format {
        Output::Yaml => outln!("{}", format.data(v)?.trim_end()),
        _ => outln!("{v}"),
    }
    Ok(())
}

/// The zone times are shown in: set once by `main` (local, or UTC with
/// `--utc`); UTC until then, so that rendering tests do not depend on
/// the machine's zone.
static ZONE: std::sync::OnceLock<api::time::Zone> = std::sync::OnceLock::new();

/// Shows times in UTC (`--utc`) or in the local zone (`TZ`, else the system's).
pub(crate) fn use_zone(utc: bool) {
    // TZ if set, else /etc/localtime; UTC when neither can be read.
    let local = || api::time::Zone::new(jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC));
    let _ = ZONE.set(if utc { api::time::Zone::utc() } else { local() });
}

fn zone() -> &'static api::time::Zone {
    ZONE.get_or_init(api::time::Zone::utc)
}

/// An RFC 3339 time from the API as people read it: `2026-11-22 00:00:37 EST`.
pub(crate) fn when(rfc: &str) -> String {
    zone().show(rfc)
}

/// [`when`] of milliseconds since the epoch, to the minute.
pub(crate) fn when_minute_ms(ms: i64) -> String {
    zone().show_minute_ms(ms)
}

/// [`when`] of milliseconds since the epoch.
pub(crate) fn when_ms(ms: i64) -> String {
    zone().show_ms(ms)
}

/// `v` as `-o json` prints it: pretty JSON and a newline.
pub(crate) fn json<T: serde::Serialize + ?Sized>(v: &T) -> anyhow::Result<String> {
    let mut text = serde_json::to_string_pretty(v)?;
    text.push('\n');
    Ok(text)
}

/// Lines as one text, each ended by a newline.
pub(crate) fn text(lines: Vec<String>) -> String {
    let mut out = String::new();
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// `s` safe for a terminal: a control character (but line breaks and
/// tabs) or an invisible format character (a bidi override) becomes U+FFFD.
/// Text from nodes and users reaches admins' terminals; an escape sequence in
/// it must not drive them (the API refuses such names; a node's telemetry
/// may still carry them).
pub(crate) fn shown(s: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| (c.is_control() && c != '\n' && c != '\t') || gpool_daemon::plane::input::format_char(c);
    if s.chars().any(bad) {
        std::borrow::Cow::Owned(s.chars().map(|c| if bad(c) { '\u{FFFD}' } else { c }).collect())
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// Writes rendered text to standard output; ends the program quietly when
/// standard output is closed (`gpool queue | head`) instead of failing.
pub(crate) fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(shown(text).as_bytes())
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

/// `s` cut to `n` characters, the last one an ellipsis when cut.
pub(crate) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

/// `▁▂▃▅▇` for values 0–100.
pub(crate) fn sparkline(values: &[f64], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if values.is_empty() {
        return String::new();
    }
    // Average into at most `width` buckets.
    let n = values.len().min(width.max(1));
    (0..n)
        .map(|i| {
            let (a, b) = (i * values.len() / n, ((i + 1) * values.len() / n).max(i * values.len() / n + 1));
            let slice = &values[a..b.min(values.len())];
            let v = slice.iter().sum::<f64>() / slice.len().max(1) as f64;
            BARS[((v.clamp(0.0, 100.0) / 100.0) * 7.0).round() as usize]
        })
        .collect()
}

/// `12.5 GiB`.
pub(crate) fn gib(mb: u64) -> String {
    format!("{:.1} GiB", mb as f64 / 1024.0)
}

/// ` ($12.34)`, or nothing when the price is unknown.
pub(crate) fn money(usd: Option<f64>) -> String {
    usd.map_or_else(String::new, |u| format!(" (${u:.2})"))
}

/// What a job asks for per replica: `gpu:2`, `mig-1g.10gb:1`, `2xgpu:4`, or `-`.
pub(crate) fn gpus_of(j: &api::JobView) -> String {
    let per: Vec<String> = j
        .spec
        .resources
        .iter()
        .filter_map(|(k, v)| {
            // `gpu` is any GPU (`--gpus`); a vendor's own resource is named by its vendor.
            let name = match k.as_str() {
                "nvidia.com/gpu" => "nvidia",
                "amd.com/gpu" => "amd",
                "google.com/tpu" => "tpu",
                k => k
                    .strip_prefix("nvidia.com/")
                    .or_else(|| k.strip_prefix("gpool.io/"))
                    .filter(|n| n.starts_with("gpu") || n.starts_with("mig-"))?,
            };
            Some(format!("{}:{}", name, v.text()))
        })
        .collect();
    let per = if per.is_empty() { "-".to_string() } else { per.join(",") };
    if j.spec.replicas.max > 1 { format!("{}x{per}", j.spec.replicas) } else { per }
}

/// Lines describing a job's usage, for `gpool show`.
/// `850 Wh`, `12.4 kWh`.
pub(crate) fn energy(wh: f64) -> String {
    if wh >= 1000.0 { format!("{:.1} kWh", wh / 1000.0) } else { format!("{wh:.0} Wh") }
}

pub(crate) fn usage_lines(u: &api::UsageSummary, curve: &[f64]) -> Vec<String> {
    let mut out = vec![format!(
        "  GPU-hours        {:.3}{}, of which idle {:.3}",
        u.gpu_hours,
        money(u.cost_usd),
        u.idle_gpu_hours
    )];
    if let Some(m) = u.mean_gpu_util {
        out.push(format!("  utilisation      mean {m:.0}%  {}", sparkline(curve, 60)));
    }
    if let Some(p) = u.peak_memory_mb {
        out.push(format!("  peak GPU memory  {}", gib(p)));
    }
    if let Some(c) = u.mean_cpu_cores {
        out.push(format!("  CPU              {c:.1} cores on average"));
    }
    if let Some(wh) = u.energy_wh {
        out.push(format!("  GPU energy       {}", energy(wh)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_name_the_vendor_a_job_asked_for() {
        use crate::testkit::job;
        use gpool_api::spec::Quantity;
        let cases = [
            ("gpool.io/gpu", "gpu:2"),
            ("nvidia.com/gpu", "nvidia:2"),
            ("amd.com/gpu", "amd:2"),
            ("google.com/tpu", "tpu:2"),
            ("nvidia.com/mig-1g.10gb", "mig-1g.10gb:2"),
            ("cpu", "-"),
        ];
        for (key, want) in cases {
            let j = job(1).resource(key, Quantity::Number(2.0)).build();
            assert_eq!(gpus_of(&j), want, "{key}");
        }
    }

    #[test]
    fn sparklines_scale_and_bucket() {
        assert_eq!(sparkline(&[0.0, 100.0], 10), "▁█");
        assert_eq!(sparkline(&[0.0, 0.0, 100.0, 100.0], 2), "▁█");
        assert_eq!(sparkline(&[], 5), "");
        assert_eq!(sparkline(&[50.0; 100], 4).chars().count(), 4);
    }

    #[test]
    fn escape_sequences_and_bidi_overrides_never_reach_the_terminal() {
        assert_eq!(shown("gpu0\u{1b}[2J ok\n\tnext"), "gpu0\u{FFFD}[2J ok\n\tnext");
        assert_eq!(shown("node\u{202E}1n"), "node\u{FFFD}1n");
        assert!(matches!(shown("plain"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn truncation_keeps_the_width() {
        assert_eq!(truncate("short", 16), "short");
        assert_eq!(truncate("a-rather-long-job-name", 10), "a-rather-…");
        assert_eq!(truncate("a-rather-long-job-name", 10).chars().count(), 10);
    }
}
