//! What `gpool up`, `gpool serve` and `gpool agent` share in their wiring:
//! the data directory and its well-known files, and the YAML files an
//! operator writes (queues, alert rules).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use gpool_core::QueueConfig;
use serde::Deserialize;

/// The default data directory: `$XDG_DATA_HOME/gpool`, else `~/.local/share/gpool`.
pub fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("gpool");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".local/share/gpool")
}

/// Files the CLI reads to find a local daemon.
pub const URL_FILE: &str = "server.url";
pub const TOKEN_FILE: &str = "admin.token";
/// The Unix socket a daemon serves local callers on, in its data directory.
pub const SOCKET_FILE: &str = "gpool.sock";
/// The data directory of a system-wide daemon (the systemd units'), whose
/// socket the CLI looks for when the caller has no daemon of its own.
pub const SYSTEM_DATA_DIR: &str = "/var/lib/gpool";

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct QueueFile {
    name: String,
    #[serde(default)]
    cohort: Option<String>,
    #[serde(default)]
    guarantee_gpus: f64,
    #[serde(default)]
    max_gpus: Option<f64>,
    /// Caps per accelerator kind, by resource name: `{amd.com/gpu: 4, google.com/tpu: 16}`.
    #[serde(default)]
    max_per_kind: std::collections::BTreeMap<String, f64>,
    /// never, allowed or preferred: whether its jobs run on spot nodes when they do not say.
    #[serde(default)]
    spot: Option<String>,
    /// warn (default) or stop: what happens to a job whose GPUs all stay idle.
    #[serde(default)]
    idle: Option<String>,
    /// How long a started job of this queue is preempted by no one (`5m`; default: no protection).
    #[serde(default)]
    min_runtime: Option<String>,
    /// When its jobs may start: `[{days: mon-fri, from: "20:00", to: "07:00"}]`, in `timeZone`.
    #[serde(default)]
    windows: Vec<WindowFile>,
    /// The IANA time zone of its windows (required with them).
    #[serde(default)]
    time_zone: Option<String>,
    /// Whether its running jobs are stopped and requeued when its windows close (default: they run on).
    #[serde(default)]
    stop_at_end: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowFile {
    /// `mon-fri`, `sat,sun`; every day when absent.
    #[serde(default)]
    days: Option<String>,
    from: String,
    to: String,
}

/// A queue's windows from its file entry, their zone's offsets from the system's database.
fn queue_windows(q: &QueueFile, path: &Path) -> anyhow::Result<Option<Arc<gpool_core::windows::QueueWindows>>> {
    use gpool_core::windows::{QueueWindows, Window, parse_clock, parse_days};
    let at = |what: String| anyhow::anyhow!("{}: queue {}: {what}", path.display(), q.name);
    if q.windows.is_empty() {
        if q.stop_at_end {
            return Err(at("stopAtEnd needs windows: [{days: mon-fri, from: \"20:00\", to: \"07:00\"}]".into()));
        }
        return Ok(None);
    }
    let Some(name) = q.time_zone.as_deref() else {
        return Err(at("windows: say which time zone they are in (timeZone: Europe/Paris, or UTC)".into()));
    };
    let zone = crate::zones::load(name).map_err(|e| at(format!("timeZone: {e}")))?;
    let mut windows = Vec::new();
    for (i, w) in q.windows.iter().enumerate() {
        let days = parse_days(w.days.as_deref().unwrap_or("*")).map_err(|e| at(format!("windows[{i}].days: {e}")))?;
        let from = parse_clock(&w.from).map_err(|e| at(format!("windows[{i}].from: {e}")))?;
        let to = parse_clock(&w.to).map_err(|e| at(format!("windows[{i}].to: {e}")))?;
        if from == to {
            return Err(at(format!(
                "windows[{i}]: from {} to {} is empty; a whole day is from \"00:00\" to \"24:00\"",
                w.from, w.to
            )));
        }
        windows.push(Window { days, from, to });
    }
    let now = gpool_core::Time::from_millis(jiff::Timestamp::now().as_millisecond());
    Ok(Some(Arc::new(QueueWindows { windows, zone: crate::zones::rules(&zone, now), stop_at_end: q.stop_at_end })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    name: String,
    scope: String,
    metric: String,
    #[serde(default)]
    above: Option<f64>,
    #[serde(default)]
    below: Option<f64>,
    #[serde(default, rename = "for")]
    hold: Option<String>,
    #[serde(default)]
    severity: Option<String>,
}

/// Reads an alert rules YAML file: a list of
/// `{name, scope, metric, above|below, for, severity}` (docs/telemetry.md).
pub fn read_alert_rules(path: &Path) -> anyhow::Result<Vec<gpool_core::alert::Rule>> {
    use gpool_core::alert::{Comparison, Metric, Rule, Scope, Severity};
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let list: Vec<RuleFile> = gpool_api::yaml::from_str(&text)
        .with_context(|| format!("{}: expected a list of alert rules", path.display()))?;
    let p = path.display();
    list.into_iter()
        .map(|r| {
            let scope = Scope::parse(&r.scope).with_context(|| {
                format!("{p}: rule {}: scope {:?} is not gpu, allocated_gpu or job", r.name, r.scope)
            })?;
            let metric = Metric::parse(&r.metric).with_context(|| {
                let names: Vec<&str> = Metric::ALL.iter().map(|m| m.as_str()).collect();
                format!("{p}: rule {}: metric {:?} is not one of {}", r.name, r.metric, names.join(", "))
            })?;
            let (comparison, threshold) = match (r.above, r.below) {
                (Some(a), None) => (Comparison::Above, a),
                (None, Some(b)) => (Comparison::Below, b),
                _ => bail!("{p}: rule {}: give exactly one of `above: N` or `below: N`", r.name),
            };
            let hold = match &r.hold {
                Some(h) => gpool_api::quantity::parse_duration(h)
                    .map_err(|e| anyhow::anyhow!("{p}: rule {}: for: {e}", r.name))?,
                None => std::time::Duration::ZERO,
            };
            let severity = match r.severity.as_deref() {
                None => Severity::Warning,
                Some(s) => Severity::parse(s).with_context(|| {
                    format!("{p}: rule {}: severity {s:?} is not info, warning or critical", r.name)
                })?,
            };
            Ok(Rule { name: r.name, scope, metric, comparison, threshold, hold, severity })
        })
        .collect()
}

/// Reads a queues YAML file: a list of `{name, cohort, guaranteeGpus, maxGpus, maxPerKind, spot, idle,
/// windows, timeZone, stopAtEnd}`.
pub fn read_queues(path: &Path) -> anyhow::Result<Vec<QueueConfig>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let list: Vec<QueueFile> =
        gpool_api::yaml::from_str(&text).with_context(|| format!("{}: expected a list of queues", path.display()))?;
    list.into_iter()
        .map(|q| {
            let valid = |x: f64| x.is_finite() && x >= 0.0;
            if !valid(q.guarantee_gpus) || q.max_gpus.is_some_and(|m| !valid(m)) {
                bail!("{}: queue {}: quotas must be numbers of GPUs ≥ 0", path.display(), q.name);
            }
            if let Some(max) = q.max_gpus.filter(|m| *m < q.guarantee_gpus) {
                bail!(
                    "{}: queue {}: guaranteeGpus {} is more than maxGpus {max}: a queue cannot be promised more than it may use",
                    path.display(),
                    q.name,
                    q.guarantee_gpus
                );
            }
            let mut kind_max = std::collections::BTreeMap::new();
            for (resource, n) in &q.max_per_kind {
                let kind = gpool_core::DeviceKind::ALL.into_iter().find(|k| k.resource() == resource).ok_or_else(|| {
                    anyhow::anyhow!(
                        "{}: queue {}: maxPerKind names {resource:?}; the kinds are nvidia.com/gpu, amd.com/gpu and google.com/tpu",
                        path.display(),
                        q.name
                    )
                })?;
                if !valid(*n) {
                    bail!("{}: queue {}: maxPerKind {resource}: {n} is not a number of devices ≥ 0", path.display(), q.name);
                }
                kind_max.insert(kind, (n * 1000.0).round() as u64);
            }
            let spot = match q.spot.as_deref() {
                None => None,
                Some(s) => Some(s.parse().map_err(|e: String| anyhow::anyhow!("{}: queue {}: {e}", path.display(), q.name))?),
            };
            let idle_stop = match q.idle.as_deref() {
                None | Some("warn") => false,
                Some("stop") => true,
                Some(other) => bail!("{}: queue {}: idle {other:?} is not warn or stop", path.display(), q.name),
            };
            let windows = queue_windows(&q, path)?;
            let min_runtime = match q.min_runtime.as_deref() {
                None => std::time::Duration::ZERO,
                Some(t) => gpool_api::quantity::parse_duration(t).map_err(|e| {
                    anyhow::anyhow!("{}: queue {}: minRuntime: {e}", path.display(), q.name)
                })?,
            };
            Ok(QueueConfig {
                spot,
                idle_stop,
                min_runtime,
                windows,
                name: Arc::from(q.name.as_str()),
                cohort: q.cohort.map(|c| Arc::from(c.as_str())),
                guarantee: (q.guarantee_gpus * 1000.0).round() as u64,
                max: q.max_gpus.map(|m| (m * 1000.0).round() as u64),
                kind_max,
            })
        })
        .collect()
}

/// Creates the data directory (mode 0700).
pub fn data_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    Ok(())
}

/// Raises this process's limit of open files to the hard limit (the usual
/// soft limit, 1,024, is what a few hundred jobs and connections exhaust);
/// returns the limit now in force, if the system says.
pub fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        // Refused (a container that forbids it): keep what there is.
        let _ = setrlimit(Resource::Nofile, limit);
    }
    getrlimit(Resource::Nofile).current
}

/// This machine's host name, if it has one.
pub fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).ok().filter(|h| !h.is_empty())
}

/// This process's Unix account name (its effective uid's): the admin of `gpool up`,
/// and the account every job runs as in single-user mode.
pub fn this_account() -> Option<String> {
    // No `id` needed: a distroless image has none.
    let uid = rustix::process::geteuid().as_raw();
    crate::accounts::lookup_uid(uid).ok().flatten().map(|a| a.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_reads_its_minimum_run_time() {
        let f = std::env::temp_dir().join(format!("gpool-queues-min-{}.yaml", std::process::id()));
        std::fs::write(&f, "- {name: batch, minRuntime: 5m}\n- {name: any}\n").expect("file");
        let qs = read_queues(&f).expect("valid");
        std::fs::write(&f, "- {name: x, minRuntime: soon}\n").expect("file");
        let e = format!("{:#}", read_queues(&f).expect_err("bad minRuntime"));
        let _ = std::fs::remove_file(&f);
        let secs: Vec<u64> = qs.iter().map(|q| q.min_runtime.as_secs()).collect();
        assert_eq!(secs, [300, 0]);
        assert!(e.contains("queue x: minRuntime"), "{e}");
    }

    #[test]
    fn a_queue_sets_its_jobs_spot_default() {
        let f = std::env::temp_dir().join(format!("gpool-queues-spot-{}.yaml", std::process::id()));
        std::fs::write(
            &f,
            "- {name: batch, spot: preferred, idle: stop}\n- {name: prod, spot: never, idle: warn}\n- {name: any}\n",
        )
        .expect("file");
        let qs = read_queues(&f).expect("valid");
        std::fs::write(&f, "- {name: x, spot: sometimes}\n").expect("file");
        let e = read_queues(&f).expect_err("bad spot");
        std::fs::write(&f, "- {name: y, idle: nap}\n").expect("file");
        let e2 = read_queues(&f).expect_err("bad idle");
        let _ = std::fs::remove_file(&f);
        let spots: Vec<_> = qs.iter().map(|q| q.spot).collect();
        use gpool_core::SpotPolicy::*;
        assert_eq!(spots, [Some(Preferred), Some(Never), None]);
        assert!(e.to_string().contains("queue x") && e.to_string().contains("sometimes"), "{e}");
        assert!(e2.to_string().contains("idle \"nap\" is not warn or stop"), "{e2}");
        assert_eq!(qs.iter().map(|q| q.idle_stop).collect::<Vec<_>>(), [true, false, false]);
    }

    #[test]
    fn queue_windows_are_read_with_their_zone_and_bad_ones_say_why() {
        let f = std::env::temp_dir().join(format!("gpool-queues-windows-{}.yaml", std::process::id()));
        let write = |text: &str| std::fs::write(&f, text).expect("file");
        write(
            "- {name: night, timeZone: UTC, stopAtEnd: true, windows: [{days: mon-fri, from: '20:00', to: '07:00'}]}\n",
        );
        let ok = read_queues(&f).expect("valid");
        let w = ok[0].windows.as_ref().expect("windows");
        assert!(w.stop_at_end && w.windows[0].from == 1200 && w.windows[0].to == 420 && w.windows[0].days == 0b0111110);
        let cases = [
            ("- {name: n, windows: [{from: '20:00', to: '07:00'}]}\n", "timeZone: Europe/Paris, or UTC"),
            ("- {name: n, timeZone: Nowhere/Land, windows: [{from: '20:00', to: '07:00'}]}\n", "not a time zone"),
            ("- {name: n, timeZone: UTC, windows: [{from: '8pm', to: '07:00'}]}\n", "windows[0].from"),
            ("- {name: n, timeZone: UTC, windows: [{days: someday, from: '20:00', to: '07:00'}]}\n", "windows[0].days"),
            ("- {name: n, timeZone: UTC, windows: [{from: '20:00', to: '20:00'}]}\n", "is empty"),
            ("- {name: n, stopAtEnd: true}\n", "stopAtEnd needs windows"),
        ];
        for (text, want) in cases {
            write(text);
            let e = read_queues(&f).expect_err(want).to_string();
            assert!(e.contains("queue n") && e.contains(want), "{e:?} should say {want:?}");
        }
        let _ = std::fs::remove_file(&f);
    }

    #[test]
    fn a_queue_promised_more_than_its_maximum_is_refused() {
        let f = std::env::temp_dir().join(format!("gpool-queues-{}.yaml", std::process::id()));
        std::fs::write(&f, "- {name: ml, guaranteeGpus: 8, maxGpus: 4}\n").expect("file");
        let e = read_queues(&f).expect_err("guarantee over max");
        std::fs::write(&f, "- {name: ml, guaranteeGpus: 4, maxGpus: 8}\n").expect("file");
        let ok = read_queues(&f);
        let _ = std::fs::remove_file(&f);
        assert!(e.to_string().contains("guaranteeGpus 8 is more than maxGpus 4"), "{e}");
        assert_eq!(ok.expect("fine").len(), 1);
    }

    #[test]
    fn per_kind_maximums_are_read_by_resource_name_and_bad_ones_named() {
        let f = std::env::temp_dir().join(format!("gpool-queues-kinds-{}.yaml", std::process::id()));
        let read = |text: &str| {
            std::fs::write(&f, text).expect("file");
            read_queues(&f)
        };
        let ok = read("- {name: ml, maxPerKind: {amd.com/gpu: 4, google.com/tpu: 16, nvidia.com/gpu: 0.5}}\n");
        let unknown = read("- {name: ml, maxPerKind: {intel.com/gpu: 2}}\n");
        let negative = read("- {name: ml, maxPerKind: {amd.com/gpu: -1}}\n");
        let _ = std::fs::remove_file(&f);
        let q = &ok.expect("valid")[0];
        use gpool_core::DeviceKind::*;
        let got: Vec<_> = q.kind_max.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(got, [(NvidiaGpu, 500), (AmdGpu, 4000), (Tpu, 16_000)]);
        let e = unknown.expect_err("unknown kind").to_string();
        assert!(e.contains("intel.com/gpu") && e.contains("amd.com/gpu"), "{e}");
        let e = negative.expect_err("negative").to_string();
        assert!(e.contains("maxPerKind amd.com/gpu: -1"), "{e}");
    }

    #[test]
    fn the_open_file_limit_is_raised_to_the_hard_limit() {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let mut limit = getrlimit(Resource::Nofile);
        let hard = limit.maximum;
        // Start from a low soft limit (256 is plenty for this test binary), as a shell's 1,024 would be.
        limit.current = Some(hard.map_or(256, |h| h.min(256)));
        setrlimit(Resource::Nofile, limit).expect("lowering the soft limit is always allowed");
        assert_eq!(raise_open_file_limit(), hard);
    }
}
