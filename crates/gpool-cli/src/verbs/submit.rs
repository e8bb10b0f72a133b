//! `gpool submit`: a job from flags and a command, or from a spec file.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use gpool_api::spec::{DurationText, Priority, Quantity};
use gpool_api::{self as api, JobSpec};

use crate::client::Connect;
use crate::output::{Output, emit, text};

#[derive(Args, Debug)]
pub(crate) struct SubmitArgs {
    /// Whole GPUs per replica, NVIDIA or AMD (gpool.io/gpu; a spec can ask
    /// for one vendor's: nvidia.com/gpu, amd.com/gpu).
    #[arg(long, conflicts_with_all = ["mig", "gpu_memory", "gpu_fraction"])]
    gpus: Option<u32>,
    /// One MIG instance of this profile per replica, e.g. 1g.10gb.
    #[arg(long, conflicts_with_all = ["gpu_memory", "gpu_fraction"])]
    mig: Option<String>,
    /// One device (MIG instance or GPU, the smallest that fits) with at least this much memory, e.g. 20Gi;
    /// with --gpu-fraction, the memory of the share.
    #[arg(long)]
    gpu_memory: Option<String>,
    /// A share of one GPU that other jobs share too: 0.25, 25%, 250m, or auto (the share --gpu-memory is worth).
    #[arg(long)]
    gpu_fraction: Option<String>,
    /// Only GPUs of this model, e.g. H100-80GB.
    #[arg(long)]
    gpu_model: Option<String>,
    /// CPUs per replica (e.g. 8 or 500m).
    #[arg(long)]
    cpus: Option<String>,
    /// Memory per replica (e.g. 32Gi).
    #[arg(long)]
    memory: Option<String>,
    /// Quota queue.
    #[arg(long, short = 'q')]
    queue: Option<String>,
    /// Priority: low, normal, high or a number.
    #[arg(long, short = 'p')]
    priority: Option<String>,
    /// Time limit. A bare number is minutes, as in sbatch (`-t 90`: 1 h 30 min); also Slurm's
    /// MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, and 90s, 2h, 1h30m, 1d.
    #[arg(long, short = 't')]
    time: Option<String>,
    /// Replicas started together, with WORLD_SIZE/RANK/MASTER_ADDR/MASTER_PORT set;
    /// MIN:MAX (2:8) for an elastic job the scheduler grows and shrinks (docs/elastic.md).
    #[arg(long, short = 'n')]
    replicas: Option<gpool_api::spec::Replicas>,
    /// Job name.
    #[arg(long)]
    name: Option<String>,
    /// Run in this advance reservation: only on its GPUs, only in its window (gpool reservation list).
    #[arg(long)]
    reservation: Option<String>,
    /// A job array, as sbatch's --array: 0-99, 1,3,5-7, 0-20:2, with %N for at most N tasks at once
    /// (0-99%8). One job per index, with consecutive ids (the first is the array's; `ID_INDEX` names a
    /// task); each reads its index in GPOOL_ARRAY_TASK_ID and SLURM_ARRAY_TASK_ID.
    #[arg(long, short = 'a')]
    array: Option<String>,
    /// May be preempted by higher-priority or less-served work (gets the stop signal, then SIGKILL after --grace).
    #[arg(long)]
    preemptible: bool,
    /// Whether it may run on spot nodes (taken back by their provider): never, allowed, preferred (default: its queue's, else allowed).
    #[arg(long, value_parser = ["never", "allowed", "preferred"])]
    spot: Option<String>,
    /// Run the command in this OCI image (podman or docker on the node), e.g. pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime.
    #[arg(long)]
    image: Option<String>,
    /// Time between the stop signal and SIGKILL (default 30s).
    #[arg(long)]
    grace: Option<String>,
    /// Retries after a failure.
    #[arg(long)]
    retries: Option<u32>,
    /// Start after other jobs, in Slurm's forms: `12` or `afterok:12:13` (they succeeded),
    /// `afterany:12` (they ended, however), `afternotok:12` (they failed or were cancelled); comma-separated.
    #[arg(long = "after", visible_alias = "dependency", value_delimiter = ',')]
    after: Vec<String>,
    /// Do not start before this time, as Slurm's --begin: 2026-12-01T02:00 (your time zone: TZ, else the
    /// system's), 2026-12-01T02:00+01:00, or now+2h (s, m, h, d).
    #[arg(long)]
    begin: Option<String>,
    /// A soft deadline, in the forms --begin takes: the job rises in the order as it nears, and is
    /// reported when it can no longer make it (never killed for it).
    #[arg(long)]
    deadline: Option<String>,
    /// Wait until the jobs end, then exit with their status (0 if all succeeded, else the first failure's exit code), as sbatch --wait.
    #[arg(long)]
    wait: bool,
    /// Environment variable for the job (repeatable): --env KEY=VALUE.
    #[arg(long = "env", short = 'e')]
    env: Vec<String>,
    /// Job spec file (YAML or JSON); flags and a command override its fields.
    #[arg(long, short = 'f', conflicts_with = "script")]
    file: Option<PathBuf>,
    /// A batch script, as sbatch takes one: its `#SBATCH` lines (and `#GPOOL` lines, in these flags) say
    /// what it needs, flags given here win over both, and the script is the command (words after -- are
    /// its arguments). See docs/slurm.md.
    script: Option<PathBuf>,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    /// The command (after --).
    #[arg(last = true)]
    command: Vec<String>,
    #[command(flatten)]
    connect: Connect,
    /// A port the job listens on that the service proxy forwards to, at /job-ID-PORT/ (repeatable):
    /// a notebook's or TensorBoard's.
    #[arg(long, value_delimiter = ',')]
    expose: Vec<u16>,
    /// `gpool run`: follow the job instead of printing its id.
    #[arg(skip)]
    attach: bool,
    /// `gpool run --pty`: the job runs on a terminal attached here.
    #[arg(skip)]
    interactive: Option<api::spec::Interactive>,
}

/// `gpool run`: Slurm's `srun`, and with `--pty` its interactive session.
#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    submit: SubmitArgs,
    /// Run the command on a terminal attached here (srun --pty), once resources are free: keys,
    /// Ctrl-C and the window size reach the job; `~.` detaches, `gpool attach ID` rejoins.
    #[arg(long)]
    pty: bool,
    /// With --pty: how long the job outlives its last client (or waits for its first) before it is
    /// ended and its GPUs released: 5s to 24h (default 60s).
    #[arg(long, requires = "pty")]
    detach_grace: Option<String>,
}

/// Submits the job, then prints its output as it runs (waiting for resources
/// first) and exits with its status, as `srun CMD` does; with `--pty`, the
/// job's terminal is this one (`attach.rs`).
pub(crate) fn run_attached(r: RunArgs) -> anyhow::Result<()> {
    let interactive = r.pty.then(|| api::spec::Interactive { detach_grace: r.detach_grace.map(DurationText::Text) });
    run(SubmitArgs { attach: true, interactive, ..r.submit })
}

/// `#GPOOL` lines: `gpool submit`'s own flags.
#[derive(clap::Parser, Debug)]
#[command(name = "#GPOOL", no_binary_name = true)]
struct GpoolLines {
    #[command(flatten)]
    args: SubmitArgs,
}

/// Takes what the flags left unset from `from` (directives lose to flags).
fn fill(a: &mut SubmitArgs, from: SubmitArgs) {
    macro_rules! unset {
        ($($f:ident),*) => { $( if a.$f.is_none() { a.$f = from.$f; } )* };
    }
    unset!(
        gpus,
        mig,
        gpu_memory,
        gpu_fraction,
        gpu_model,
        cpus,
        memory,
        queue,
        priority,
        time,
        replicas,
        name,
        spot,
        image,
        grace,
        retries,
        begin,
        deadline,
        array,
        reservation
    );
    a.preemptible |= from.preemptible;
    if a.after.is_empty() {
        a.after = from.after;
    }
    if a.expose.is_empty() {
        a.expose = from.expose;
    }
    // The flags' variables are set last, so theirs win.
    a.env = from.env.into_iter().chain(std::mem::take(&mut a.env)).collect();
}

/// A batch script's directives into the flags, and the script as the command.
fn with_script(mut a: SubmitArgs, path: &std::path::Path) -> anyhow::Result<(SubmitArgs, Option<String>)> {
    let script = crate::sbatch::read(path)?;
    let lines = <GpoolLines as clap::Parser>::try_parse_from(&script.gpool_words)
        .map_err(|e| anyhow::anyhow!("{}: #GPOOL lines: {e}", path.display()))?;
    fill(&mut a, lines.args);
    let s = script.slurm;
    for ignored in &s.ignored {
        eprintln!("{}: #SBATCH --{ignored} has no effect in gpool", path.display());
    }
    macro_rules! unset {
        ($($f:ident),*) => { $( if a.$f.is_none() { a.$f = s.$f.clone(); } )* };
    }
    unset!(gpus, gpu_model, time, name, queue, cpus, memory, begin, array, reservation);
    if a.replicas.is_none() {
        a.replicas = s.replicas.map(gpool_api::spec::Replicas::fixed);
    }
    if a.after.is_empty() {
        a.after = s.after.clone();
    }
    a.command = script.argv.into_iter().chain(std::mem::take(&mut a.command)).collect();
    Ok((a, s.workdir))
}

pub(crate) fn run(a: SubmitArgs) -> anyhow::Result<()> {
    let (a, script_workdir) = match a.script.clone() {
        Some(path) => with_script(a, &path)?,
        None => (a, None),
    };
    let mut specs: Vec<JobSpec> = match &a.file {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            let value: serde_json::Value = gpool_api::yaml::from_str(&text)
                .with_context(|| format!("{} is not valid YAML or JSON", path.display()))?;
            if value.get("stages").is_some() {
                bail!("{} is a pipeline (it has stages:): run it with gpool pipeline run {0}", path.display());
            }
            if value.get("jobs").is_some() {
                serde_json::from_value::<api::spec::Batch>(value).with_context(|| format!("{}", path.display()))?.jobs
            } else {
                vec![serde_json::from_value::<JobSpec>(value).with_context(|| format!("{}", path.display()))?]
            }
        }
        None => {
            if a.command.is_empty() {
                bail!(
                    "nothing to run: give a command after --, e.g. gpool submit --gpus 1 -- python train.py, or a spec with -f job.yaml"
                );
            }
            vec![JobSpec::new(a.command.clone())]
        }
    };
    let cwd = std::env::current_dir().ok().map(|p| p.display().to_string());
    for s in &mut specs {
        if !a.command.is_empty() {
            s.command = api::Command::Argv(a.command.clone());
        }
        // A job in an image starts in the image's working directory, not this machine's.
        if s.workdir.is_none() && s.image.is_none() && a.image.is_none() {
            // `#SBATCH --chdir` is relative to where the script was submitted from, as in sbatch.
            let chdir = script_workdir.as_ref().map(|d| match &cwd {
                Some(here) if !d.starts_with('/') => format!("{here}/{d}"),
                _ => d.clone(),
            });
            s.workdir = chdir.or_else(|| cwd.clone());
        }
        let res = &mut s.resources;
        if let Some(g) = a.gpus {
            res.insert("gpool.io/gpu".into(), Quantity::Number(f64::from(g)));
        }
        if let Some(m) = &a.mig {
            res.insert(format!("nvidia.com/mig-{}", m.trim_start_matches("nvidia.com/mig-")), Quantity::Number(1.0));
        }
        if let Some(m) = &a.gpu_memory {
            res.insert("gpool.io/gpu-memory".into(), Quantity::Text(m.clone()));
        }
        if let Some(f) = &a.gpu_fraction {
            res.insert("gpool.io/gpu-fraction".into(), Quantity::Text(f.clone()));
        }
        if let Some(c) = &a.cpus {
            res.insert("cpu".into(), Quantity::Text(c.clone()));
        }
        if let Some(m) = &a.memory {
            res.insert("memory".into(), Quantity::Text(m.clone()));
        }
        if let Some(m) = &a.gpu_model {
            s.gpu_model = Some(m.clone());
        }
        if let Some(q) = &a.queue {
            s.queue = Some(q.clone());
        }
        if let Some(p) = &a.priority {
            s.priority = Some(p.parse::<i32>().map_or_else(|_| Priority::Class(p.clone()), Priority::Value));
        }
        if let Some(t) = &a.time {
            s.time_limit = Some(DurationText::Text(slurm_minutes(t)));
        }
        if let Some(g) = &a.grace {
            s.grace_period = Some(DurationText::Text(g.clone()));
        }
        if let Some(n) = a.replicas {
            s.replicas = n;
        }
        if let Some(n) = &a.name {
            s.name = Some(n.clone());
        }
        if let Some(r) = &a.reservation {
            s.reservation = Some(r.clone());
        }
        if let Some(array) = &a.array {
            s.array = Some(array.clone());
        }
        if a.preemptible {
            s.preemptible = true;
        }
        if let Some(p) = &a.spot {
            s.spot = Some(p.clone());
        }
        if let Some(i) = &a.image {
            s.image = Some(i.clone());
        }
        if let Some(r) = a.retries {
            s.retries = r;
        }
        s.expose.extend(&a.expose);
        if a.interactive.is_some() {
            s.interactive = a.interactive.clone();
        }
        if let Some(b) = &a.begin {
            s.begin_at = Some(b.clone());
        }
        // A spec file's local time, or --begin: an absolute time for the control plane.
        if let Some(d) = &a.deadline {
            s.deadline = Some(d.clone());
        }
        let zone = jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC);
        if let Some(b) = &s.begin_at {
            s.begin_at =
                Some(begin_time(b, &zone, jiff::Timestamp::now()).map_err(|e| anyhow::anyhow!("--begin {e}"))?);
        }
        if let Some(d) = &s.deadline {
            s.deadline =
                Some(begin_time(d, &zone, jiff::Timestamp::now()).map_err(|e| anyhow::anyhow!("--deadline {e}"))?);
        }
        for dep in &a.after {
            let (kind, ids) = parse_after(dep)?;
            match kind {
                After::Ok => s.depends_on.extend(ids),
                After::Any => s.after_any.extend(ids),
                After::NotOk => s.after_not_ok.extend(ids),
            }
        }
        for kv in &a.env {
            let (k, v) = kv.split_once('=').with_context(|| format!("--env {kv:?}: expected KEY=VALUE"))?;
            s.env.insert(k.to_string(), v.to_string());
        }
    }
    if a.attach && (specs.len() > 1 || specs.iter().any(|s| s.array.is_some() || s.service.is_some())) {
        bail!(
            "gpool run follows one job: submit batches, arrays and services with gpool submit (nothing was submitted)"
        );
    }
    let client = a.connect.client()?;
    if specs.iter().any(|s| s.service.is_some()) {
        return crate::verbs::services::apply(&client, specs, a.output);
    }
    let out: api::Submitted = if specs.len() == 1 {
        client.post("/jobs", &specs[0])?
    } else {
        client.post("/jobs", &api::spec::Batch { jobs: specs })?
    };
    if a.attach {
        let Some(&id) = out.ids.first() else { bail!("nothing was submitted") };
        if a.interactive.is_some() {
            return crate::verbs::attach::when_running(&client, id);
        }
        eprintln!("gpool: job {id} submitted; waiting for it to start");
        return crate::verbs::logs::follow(&client, id, 0);
    }
    emit(&render(&out, a.output)?);
    if a.wait {
        return crate::verbs::wait::wait_for(&client, &out.ids);
    }
    Ok(())
}

/// How a job follows another (Slurm's dependency types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum After {
    Ok,
    Any,
    NotOk,
}

/// `12`, `afterok:12:13`, `afterany:12`, `afternotok:12`.
pub(crate) fn parse_after(text: &str) -> anyhow::Result<(After, Vec<u64>)> {
    let mut parts = text.trim().split(':');
    let first = parts.next().unwrap_or("");
    let (kind, rest): (After, Vec<&str>) = match first {
        "afterok" => (After::Ok, parts.collect()),
        "afterany" => (After::Any, parts.collect()),
        "afternotok" => (After::NotOk, parts.collect()),
        id => (After::Ok, std::iter::once(id).chain(parts).collect()),
    };
    let ids = rest
        .iter()
        .map(|p| p.trim().parse::<u64>())
        .collect::<Result<Vec<_>, _>>()
        .ok()
        .filter(|ids| !ids.is_empty())
        .with_context(|| {
            format!("--after {text:?}: expected job ids, as 12, afterok:12:13, afterany:12 or afternotok:12")
        })?;
    Ok((kind, ids))
}

/// The ids of the new jobs, one a line.
pub(crate) fn render(out: &api::Submitted, output: Output) -> anyhow::Result<String> {
    match output {
        Output::Json | Output::Yaml => output.data(out),
        Output::Table | Output::Wide => Ok(text(out.ids.iter().map(u64::to_string).collect())),
    }
}

/// A begin time as the control plane takes it (RFC 3339, UTC) from what a
/// user writes: `now+2h`, a time with its zone, or a local time in `zone`.
pub(crate) fn begin_time(text: &str, zone: &jiff::tz::TimeZone, now: jiff::Timestamp) -> Result<String, String> {
    let t = text.trim();
    let at = if let Some(rest) = t.strip_prefix("now") {
        let after = match rest.trim() {
            "" => std::time::Duration::ZERO,
            r => {
                let d = r.strip_prefix('+').ok_or_else(|| format!("{text:?}: write now+2h, now+30m or now+90s"))?;
                gpool_api::quantity::parse_duration(d).map_err(|e| format!("{text:?}: {e}"))?
            }
        };
        let ms = i64::try_from(after.as_millis()).map_err(|_| format!("{text:?}: too far ahead"))?;
        now.as_millisecond().saturating_add(ms)
    } else if let Some(ms) = gpool_api::time::parse_rfc3339(t) {
        ms
    } else {
        let civil = t
            .replacen(' ', "T", 1)
            .parse::<jiff::civil::DateTime>()
            .or_else(|_| t.parse::<jiff::civil::Date>().map(|d| d.to_datetime(jiff::civil::Time::midnight())))
            .map_err(|_| {
                format!(
                    "{text:?}: expected a time such as 2026-12-01T02:00 (your time zone), \
                     2026-12-01T02:00+01:00, or now+2h"
                )
            })?;
        let zoned = civil.to_zoned(zone.clone()).map_err(|e| format!("{text:?}: {e}"))?;
        zoned.timestamp().as_millisecond()
    };
    Ok(gpool_api::time::rfc3339(at))
}

/// A time limit as sbatch reads it: a bare number is minutes (`90` → `90m`);
/// every other form (`90s`, `2h`, `HH:MM:SS`, `D-HH`) is left as it is.
fn slurm_minutes(t: &str) -> String {
    let t = t.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') { format!("{t}m") } else { t.to_string() }
}

#[cfg(test)]
mod tests {
    #[test]
    fn begin_times_read_as_slurm_users_write_them() {
        let zone = jiff::tz::TimeZone::posix("CET-1CEST,M3.5.0,M10.5.0/3").expect("zone");
        let now: jiff::Timestamp = "2026-11-26T10:00:00Z".parse().expect("now");
        let at = |t: &str| super::begin_time(t, &zone, now);
        assert_eq!(at("now+2h").as_deref(), Ok("2026-11-26T12:00:00.000Z"));
        assert_eq!(at("now").as_deref(), Ok("2026-11-26T10:00:00.000Z"));
        // A local time is the user's zone's: 02:00 in Paris in winter is 01:00 UTC.
        assert_eq!(at("2026-12-01T02:00").as_deref(), Ok("2026-12-01T01:00:00.000Z"));
        assert_eq!(at("2026-12-01 02:00:30").as_deref(), Ok("2026-12-01T01:00:30.000Z"));
        assert_eq!(at("2026-07-01").as_deref(), Ok("2026-06-30T22:00:00.000Z"), "summer time");
        assert_eq!(at("2026-12-01T02:00+05:00").as_deref(), Ok("2026-11-30T21:00:00.000Z"));
        for bad in ["tomorrow", "now-1h", "now+soon", "2026-13-01T00:00"] {
            let e = at(bad).expect_err(bad);
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    use super::*;
    use crate::testkit::assert_snapshot;

    #[test]
    fn a_bare_time_is_minutes_as_in_sbatch() {
        let secs = |t: &str| api::quantity::parse_duration(&slurm_minutes(t)).map(|d| d.as_secs()).expect(t);
        let cases = [
            ("90", 5_400),
            ("1.5", 90),
            ("90s", 90),
            ("2h", 7_200),
            ("1h30m", 5_400),
            ("10:30", 630),
            ("01:30:00", 5_400),
            ("1-00:00:00", 86_400),
            ("2-12", 216_000),
        ];
        for (text, want) in cases {
            assert_eq!(secs(text), want, "{text}");
        }
    }

    #[test]
    fn after_reads_slurms_dependency_forms() {
        assert_eq!(parse_after("12").expect("id"), (After::Ok, vec![12]));
        assert_eq!(parse_after("afterok:12:13").expect("ok"), (After::Ok, vec![12, 13]));
        assert_eq!(parse_after("afterany:7").expect("any"), (After::Any, vec![7]));
        assert_eq!(parse_after("afternotok:7").expect("notok"), (After::NotOk, vec![7]));
        for bad in ["afterok", "afterok:x", "singleton", "afterburst:3", ""] {
            let e = parse_after(bad).expect_err(bad).to_string();
            assert!(e.contains("afterany:12"), "{e}");
        }
    }

    #[test]
    fn submit_prints_the_ids() {
        let out = api::Submitted { ids: vec![41, 42, 43] };
        assert_snapshot("submit.txt", &render(&out, Output::Table).unwrap());
        assert_snapshot("submit.json", &render(&out, Output::Json).unwrap());
    }
}
