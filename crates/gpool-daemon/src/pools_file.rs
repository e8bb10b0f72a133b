//! The node pools file (`--pools pools.yaml`), read by `gpool up`,
//! `gpool serve` and `gpool sim` alike. Imports neither wing.
//!
//! ```yaml
//! budget: {dollarsPerHour: 400}        # optional cap on the whole fleet
//! pools:
//!   - name: spot-v100
//!     kind: spot                       # on-demand (default), spot, reserved
//!     gpus: 8
//!     model: V100-16GB
//!     cpus: 64                         # default 12 per GPU
//!     memoryGb: 488                    # default 128 per GPU
//!     labels: {zone: us-east-1a}
//!     price: 2.75                      # $/node-hour; default: built-in list price × GPUs
//!     min: 0
//!     max: 10
//!     bootTimeout: 10m                 # default 10m
//!     idleTimeout: 10m                 # default 10m
//!     provider:
//!       command: {create: [/opt/gpool/create-node], delete: [/opt/gpool/delete-node], timeout: 5m}
//!       # or: local: {}                # real `gpool agent --simulate-gpus` processes here
//!     spotTrace: spot/us-east-1a_v100_1.json   # gpool sim only: when the spot market has room
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use gpool_core::pools::{NodeShape, PoolConfig, RetryRules};
use gpool_core::pricing::Prices;
use gpool_core::{Pool, PoolKind};
use serde::Deserialize;

/// How a pool's nodes are made and removed.
#[derive(Clone, Debug, PartialEq)]
pub enum Provider {
    /// The operator's programs, called as `PROGRAM... POOL NODE` with the
    /// environment of docs/cost.md, each within `timeout`.
    Command { create: Vec<String>, delete: Vec<String>, timeout: Duration },
    /// `gpool agent --simulate-gpus` processes on this machine, made by the
    /// same code path as `Command` (gpool calls itself as the program).
    Local,
}

/// Everything the pools file says.
#[derive(Clone, Debug, Default)]
pub struct PoolsSpec {
    pub pools: Vec<PoolConfig>,
    /// The provider of each pool, in the same order (`None`: none given; the
    /// simulator needs none, a daemon refuses it).
    pub providers: Vec<Option<Provider>>,
    /// The spot availability trace of each pool (`gpool sim` only).
    pub spot_traces: Vec<Option<PathBuf>>,
    pub max_dollars_per_hour: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    #[serde(default)]
    budget: Option<BudgetFile>,
    pools: Vec<PoolFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct BudgetFile {
    dollars_per_hour: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PoolFile {
    name: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    gpus: u32,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    gpu_memory_gb: Option<u64>,
    #[serde(default)]
    cpus: Option<u32>,
    #[serde(default)]
    memory_gb: Option<u64>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    price: Option<f64>,
    #[serde(default)]
    min: u32,
    max: u32,
    #[serde(default)]
    boot_timeout: Option<String>,
    #[serde(default)]
    idle_timeout: Option<String>,
    #[serde(default)]
    retry: Option<RetryFile>,
    #[serde(default)]
    provider: Option<ProviderFile>,
    #[serde(default)]
    spot_trace: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RetryFile {
    backoff: Option<String>,
    max_backoff: Option<String>,
    failures_before_unavailable: Option<u32>,
    unavailable_for: Option<String>,
}

/// `{command: {...}}` or `{local: {}}` (a struct, as YAML maps read best).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ProviderFile {
    command: Option<CommandFile>,
    local: Option<LocalFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CommandFile {
    create: Vec<String>,
    delete: Vec<String>,
    timeout: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LocalFile {}

/// Reads and checks a pools file; relative `spotTrace` paths are taken
/// from the file's directory.
pub fn read_pools(path: &Path, prices: &Prices) -> anyhow::Result<PoolsSpec> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read the pools file {}", path.display()))?;
    let mut spec = parse_pools(&text, prices).with_context(|| format!("pools file {}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    for t in spec.spot_traces.iter_mut().flatten() {
        if t.is_relative() {
            *t = dir.join(&*t);
        }
    }
    Ok(spec)
}

/// Parses a pools file's text.
pub fn parse_pools(text: &str, prices: &Prices) -> anyhow::Result<PoolsSpec> {
    let file: File = gpool_api::yaml::from_str(text).context("expected {pools: [...], budget: {dollarsPerHour}}")?;
    let mut spec = PoolsSpec {
        max_dollars_per_hour: match file.budget {
            Some(b) if b.dollars_per_hour.is_finite() && b.dollars_per_hour > 0.0 => Some(b.dollars_per_hour),
            Some(b) => bail!("budget.dollarsPerHour must be a positive number, got {}", b.dollars_per_hour),
            None => None,
        },
        ..PoolsSpec::default()
    };
    if file.pools.is_empty() {
        bail!("no pools: list at least one under `pools:`");
    }
    let mut names = std::collections::BTreeSet::new();
    for p in file.pools {
        let name = p.name.clone();
        let bad = |what: String| anyhow::anyhow!("pool {name}: {what}");
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            bail!("pool {name:?}: a pool name is letters, digits, - and _ (it starts node names)");
        }
        if !names.insert(name.clone()) {
            bail!("pool {name} is listed twice");
        }
        let kind = match p.kind.as_deref().map(str::to_ascii_lowercase).as_deref() {
            None | Some("on-demand") | Some("ondemand") => PoolKind::OnDemand,
            Some("spot") | Some("preemptible") => PoolKind::Spot,
            Some("reserved") => PoolKind::Reserved,
            Some(other) => return Err(bad(format!("kind {other:?} is not on-demand, spot or reserved"))),
        };
        if p.gpus > 64 {
            return Err(bad(format!("{} GPUs per node; at most 64 are supported", p.gpus)));
        }
        if p.max == 0 || p.min > p.max {
            return Err(bad(format!("min {} and max {}: max must be at least 1 and at least min", p.min, p.max)));
        }
        let model = p.model.unwrap_or_else(|| if p.gpus > 0 { "H100-80GB".into() } else { "none".into() });
        let gpu_memory_mb = p.gpu_memory_gb.map_or_else(|| model_memory_mb(&model), |g| g * 1024);
        let per_gpu = match kind {
            PoolKind::Spot => prices.spot_per_gpu_hour(&model),
            _ => prices.per_gpu_hour(&model),
        };
        let price = match (p.price, per_gpu) {
            (Some(x), _) if x.is_finite() && x >= 0.0 => x,
            (Some(x), _) => return Err(bad(format!("price {x} is not a number of dollars per node-hour ≥ 0"))),
            (None, Some(g)) if p.gpus > 0 => g * f64::from(p.gpus),
            (None, _) => {
                return Err(bad(format!("no built-in price for {model:?}: give `price:` in dollars per node-hour")));
            }
        };
        let duration = |field: &str, v: Option<String>, default: Duration| -> anyhow::Result<Duration> {
            match v {
                None => Ok(default),
                Some(s) => gpool_api::quantity::parse_duration(&s).map_err(|e| bad(format!("{field}: {e}"))),
            }
        };
        let mut retry = RetryRules::default();
        if let Some(r) = p.retry {
            retry.backoff = duration("retry.backoff", r.backoff, retry.backoff)?;
            retry.max_backoff = duration("retry.maxBackoff", r.max_backoff, retry.max_backoff)?;
            retry.unavailable_for = duration("retry.unavailableFor", r.unavailable_for, retry.unavailable_for)?;
            retry.failures_before_unavailable =
                r.failures_before_unavailable.unwrap_or(retry.failures_before_unavailable).max(1);
        }
        let provider = match p.provider.map(|f| (f.command, f.local)) {
            None => None,
            Some((None, None)) | Some((Some(_), Some(_))) => {
                return Err(bad("provider: give exactly one of `command: {create, delete}` or `local: {}`".into()));
            }
            Some((None, Some(LocalFile {}))) => Some(Provider::Local),
            Some((Some(CommandFile { create, delete, timeout }), None)) => {
                if create.is_empty() || delete.is_empty() {
                    return Err(bad("provider.command needs a create and a delete program (lists of words)".into()));
                }
                Some(Provider::Command {
                    create,
                    delete,
                    timeout: duration("provider.command.timeout", timeout, Duration::from_secs(300))?,
                })
            }
        };
        spec.pools.push(PoolConfig {
            pool: Pool { name: Arc::from(name.as_str()), kind },
            shape: NodeShape {
                gpus: p.gpus,
                gpu_model: Arc::from(model.as_str()),
                gpu_memory_mb,
                cpus: p.cpus.unwrap_or(12 * p.gpus.max(1)),
                memory_mb: p.memory_gb.unwrap_or(128 * u64::from(p.gpus.max(1))) * 1024,
                labels: p.labels,
            },
            price_per_node_hour: price,
            min: p.min,
            max: p.max,
            boot_timeout: duration("bootTimeout", p.boot_timeout, Duration::from_secs(600))?,
            idle_timeout: duration("idleTimeout", p.idle_timeout, Duration::from_secs(600))?,
            retry,
        });
        spec.providers.push(provider);
        spec.spot_traces.push(p.spot_trace);
    }
    Ok(spec)
}

/// GPU memory in MiB from a model name like `A100-40GB` (80 GB otherwise).
fn model_memory_mb(model: &str) -> u64 {
    let gb = model
        .rsplit(['-', '_', ' '])
        .find_map(|part| part.to_ascii_lowercase().strip_suffix("gb").and_then(|n| n.parse::<u64>().ok()))
        .unwrap_or(80);
    gb * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pools_file_reads_with_defaults_and_prices() {
        let text = "budget: {dollarsPerHour: 500}\npools:\n  - {name: od, gpus: 8, model: V100-16GB, max: 4}\n  - {name: spot, kind: spot, gpus: 8, model: V100-16GB, max: 10, idleTimeout: 5m, provider: {local: {}}}\n  - {name: mine, gpus: 1, model: RTX-4090, price: 0.4, min: 1, max: 2, provider: {command: {create: [mk], delete: [rm], timeout: 1m}}}\n";
        let s = parse_pools(text, &Prices::built_in()).expect("valid");
        assert_eq!(s.max_dollars_per_hour, Some(500.0));
        assert_eq!(s.pools.len(), 3);
        assert!((s.pools[0].price_per_node_hour - 8.0 * 3.06).abs() < 1e-9, "on-demand list price × GPUs");
        assert!((s.pools[1].price_per_node_hour - 8.0 * 0.344).abs() < 1e-9, "spot list price × GPUs");
        assert_eq!(s.pools[1].idle_timeout, Duration::from_secs(300));
        assert_eq!(s.pools[0].shape.gpu_memory_mb, 16 * 1024);
        assert_eq!(s.providers[1], Some(Provider::Local));
        assert!(
            matches!(&s.providers[2], Some(Provider::Command { timeout, .. }) if *timeout == Duration::from_secs(60))
        );
    }

    #[test]
    fn bad_pools_files_say_what_is_wrong() {
        let cases = [
            ("pools: []\n", "no pools"),
            ("pools:\n  - {name: a, gpus: 8, max: 0}\n", "max must be at least 1"),
            ("pools:\n  - {name: a, gpus: 8, min: 3, max: 2}\n", "at least min"),
            ("pools:\n  - {name: a, gpus: 1, model: RTX-4090, max: 2}\n", "give `price:`"),
            ("pools:\n  - {name: a, gpus: 8, max: 2, kind: cheap}\n", "cheap"),
            ("pools:\n  - {name: a, gpus: 8, max: 2, colour: red}\n", "colour"),
            ("pools:\n  - {name: a, gpus: 8, max: 2}\n  - {name: a, gpus: 8, max: 2}\n", "twice"),
            ("pools:\n  - {name: 'a b', gpus: 8, max: 2}\n", "letters, digits"),
            ("pools:\n  - {name: a, gpus: 8, max: 2, bootTimeout: soon}\n", "bootTimeout"),
            (
                "pools:\n  - {name: a, gpus: 8, max: 2, provider: {command: {create: [], delete: [x]}}}\n",
                "create and a delete",
            ),
            ("budget: {dollarsPerHour: -1}\npools:\n  - {name: a, gpus: 8, max: 2}\n", "positive"),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", parse_pools(text, &Prices::built_in()).expect_err(text));
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
