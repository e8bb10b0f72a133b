//! `gpool submit | queue | show | cancel | logs | nodes | queues | token | whoami | events`.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use gpool_api::spec::{DurationText, Priority, Quantity};
use gpool_api::{self as api, JobSpec, JobState};

use crate::client::Connect;
use crate::output::{Output, print_json, truncate, usage_lines};

#[derive(Args, Debug)]
pub(crate) struct SubmitArgs {
    /// Whole GPUs per replica (nvidia.com/gpu).
    #[arg(long, conflicts_with_all = ["mig", "gpu_memory"])]
    gpus: Option<u32>,
    /// One MIG instance of this profile per replica, e.g. 1g.10gb.
    #[arg(long, conflicts_with = "gpu_memory")]
    mig: Option<String>,
    /// One device (MIG instance or GPU, the smallest that fits) with at least this much memory, e.g. 20Gi.
    #[arg(long)]
    gpu_memory: Option<String>,
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
    /// Time limit, e.g. 2h or 90m.
    #[arg(long, short = 't')]
    time: Option<String>,
    /// Replicas started together, with WORLD_SIZE/RANK/MASTER_ADDR/MASTER_PORT set.
    #[arg(long, short = 'n')]
    replicas: Option<u32>,
    /// Job name.
    #[arg(long)]
    name: Option<String>,
    /// May be preempted by higher-priority or less-served work (gets the stop signal, then SIGKILL after --grace).
    #[arg(long)]
    preemptible: bool,
    /// Time between the stop signal and SIGKILL (default 30s).
    #[arg(long)]
    grace: Option<String>,
    /// Retries after a failure.
    #[arg(long)]
    retries: Option<u32>,
    /// Start only after these jobs succeeded.
    #[arg(long = "after", value_delimiter = ',')]
    after: Vec<u64>,
    /// Environment variable for the job (repeatable): --env KEY=VALUE.
    #[arg(long = "env", short = 'e')]
    env: Vec<String>,
    /// Job spec file (YAML or JSON); flags and a command override its fields.
    #[arg(long, short = 'f')]
    file: Option<PathBuf>,
    #[arg(long, short = 'o', value_enum, default_value_t)]
    output: Output,
    /// The command (after --).
    #[arg(last = true)]
    command: Vec<String>,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn submit(a: SubmitArgs) -> anyhow::Result<()> {
    let mut specs: Vec<JobSpec> = match &a.file {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            let value: serde_yaml::Value =
                serde_yaml::from_str(&text).with_context(|| format!("{} is not valid YAML or JSON", path.display()))?;
            if value.get("jobs").is_some() {
                serde_yaml::from_value::<api::spec::Batch>(value).with_context(|| format!("{}", path.display()))?.jobs
            } else {
                vec![serde_yaml::from_value::<JobSpec>(value).with_context(|| format!("{}", path.display()))?]
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
        if s.workdir.is_none() {
            s.workdir = cwd.clone();
        }
        let res = &mut s.resources;
        if let Some(g) = a.gpus {
            res.insert("nvidia.com/gpu".into(), Quantity::Number(f64::from(g)));
        }
        if let Some(m) = &a.mig {
            res.insert(format!("nvidia.com/mig-{}", m.trim_start_matches("nvidia.com/mig-")), Quantity::Number(1.0));
        }
        if let Some(m) = &a.gpu_memory {
            res.insert("gpool.io/gpu-memory".into(), Quantity::Text(m.clone()));
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
            s.time_limit = Some(DurationText::Text(t.clone()));
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
        if a.preemptible {
            s.preemptible = true;
        }
        if let Some(r) = a.retries {
            s.retries = r;
        }
        s.depends_on.extend(a.after.iter().copied());
        for kv in &a.env {
            let (k, v) = kv.split_once('=').with_context(|| format!("--env {kv:?}: expected KEY=VALUE"))?;
            s.env.insert(k.to_string(), v.to_string());
        }
    }
    let client = a.connect.client()?;
    let out: api::Submitted = if specs.len() == 1 {
        client.post("/jobs", &specs[0])?
    } else {
        client.post("/jobs", &api::spec::Batch { jobs: specs })?
    };
    match a.output {
        Output::Json => print_json(&out),
        Output::Table => {
            for id in out.ids {
                outln!("{id}");
            }
            Ok(())
        }
    }
}

#[derive(Args, Debug)]
pub(crate) struct QueueArgs {
    /// States to show (comma-separated), e.g. pending,running; default: active jobs.
    #[arg(long, short = 's')]
    state: Option<String>,
    /// Show finished jobs too.
    #[arg(long, short = 'a')]
    all: bool,
    /// Only this user's jobs (admins).
    #[arg(long, short = 'u')]
    user: Option<String>,
    /// Only this queue.
    #[arg(long, short = 'q')]
    queue: Option<String>,
    /// At most this many jobs.
    #[arg(long, default_value_t = 1000)]
    limit: u32,
    #[arg(long, short = 'o', value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

fn gpus_of(j: &api::JobView) -> String {
    let per: Vec<String> = j
        .spec
        .resources
        .iter()
        .filter(|(k, _)| k.starts_with("nvidia.com/") || k.starts_with("gpool.io/gpu"))
        .map(|(k, v)| {
            let name = k.trim_start_matches("nvidia.com/").trim_start_matches("gpool.io/");
            format!("{}:{}", name, v.text())
        })
        .collect();
    let per = if per.is_empty() { "-".to_string() } else { per.join(",") };
    if j.spec.replicas > 1 { format!("{}x{per}", j.spec.replicas) } else { per }
}

fn elapsed(j: &api::JobView) -> String {
    j.started_at
        .clone()
        .map(|s| s.replace('T', " ").trim_end_matches('Z').split('.').next().unwrap_or("").to_string())
        .unwrap_or_else(|| "-".into())
}

pub(crate) fn queue(a: QueueArgs) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    let mut params = vec![format!("limit={}", a.limit.min(1000))];
    match (&a.state, a.all) {
        (Some(s), _) => params.push(format!("state={s}")),
        (None, false) => params.push("state=active".into()),
        (None, true) => {}
    }
    if let Some(u) = &a.user {
        params.push(format!("user={u}"));
    }
    if let Some(q) = &a.queue {
        params.push(format!("queue={q}"));
    }
    let mut jobs = Vec::new();
    let mut after = None;
    loop {
        let mut p = params.clone();
        if let Some(x) = after {
            p.push(format!("after={x}"));
        }
        let page: api::JobList = client.get(&format!("/jobs?{}", p.join("&")))?;
        jobs.extend(page.jobs);
        match page.next {
            Some(n) if jobs.len() < a.limit as usize => after = Some(n),
            _ => break,
        }
    }
    if a.output == Output::Json {
        return print_json(&jobs);
    }
    outln!(
        "{:>6}  {:<16} {:<10} {:<10} {:<9} {:<14} {:<19} REASON",
        "ID",
        "NAME",
        "USER",
        "QUEUE",
        "STATE",
        "GPUS",
        "STARTED"
    );
    for j in &jobs {
        let devices: Vec<String> = j.replicas.iter().map(|r| r.cuda_visible_devices.clone()).collect();
        let reason = match j.state {
            JobState::Running => {
                format!("on {} [{}]", j.replicas.first().map_or("-", |r| r.node.as_str()), devices.join(" | "))
            }
            _ => j.reason.clone().unwrap_or_default(),
        };
        outln!(
            "{:>6}  {:<16} {:<10} {:<10} {:<9} {:<14} {:<19} {}",
            j.id,
            truncate(&j.name, 16),
            truncate(&j.user, 10),
            truncate(&j.queue, 10),
            j.state.as_str(),
            truncate(&gpus_of(j), 14),
            elapsed(j),
            reason
        );
    }
    Ok(())
}

#[derive(Args, Debug)]
pub(crate) struct IdArgs {
    /// Job id(s).
    #[arg(required = true)]
    ids: Vec<u64>,
    #[arg(long, short = 'o', value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn show(a: IdArgs) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    let jobs: Vec<api::JobView> =
        a.ids.iter().map(|id| client.get(&format!("/jobs/{id}"))).collect::<anyhow::Result<_>>()?;
    if a.output == Output::Json {
        return if jobs.len() == 1 { print_json(&jobs[0]) } else { print_json(&jobs) };
    }
    for j in jobs {
        outln!("job {} ({})", j.id, j.name);
        outln!("  user/team/queue  {}/{}/{}", j.user, j.team, j.queue);
        outln!("  state            {}", j.state.as_str());
        if let Some(r) = &j.reason {
            outln!("  reason           {r}");
        }
        outln!("  priority         {}", j.priority);
        outln!("  command          {}", j.spec.command.argv().join(" "));
        outln!("  resources        {}", gpus_of(&j));
        outln!("  submitted        {}", j.submitted_at);
        if let Some(s) = &j.started_at {
            outln!("  started          {s}");
        }
        if let Some(e) = &j.ended_at {
            outln!("  ended            {e}");
        }
        outln!("  attempt/restarts {}/{}", j.attempt, j.restarts);
        for r in &j.replicas {
            outln!("  rank {:<3} on {}  CUDA_VISIBLE_DEVICES={}", r.rank, r.node, r.cuda_visible_devices);
        }
        if let Some(x) = &j.exit {
            outln!("  exit             code {:?} signal {:?}", x.code, x.signal);
        }
        if let Some(u) = &j.usage {
            let curve: Vec<f64> = client
                .get::<api::JobUsageView>(&format!("/jobs/{}/usage", j.id))
                .map(|v| v.points.iter().filter_map(|p| p.gpu_util).collect())
                .unwrap_or_default();
            for line in usage_lines(u, &curve) {
                outln!("{line}");
            }
            // The advisor's one-line verdicts; `gpool advise` has the evidence.
            if let Ok(a) = client.get::<api::AdviceView>(&format!("/jobs/{}/advice", j.id)) {
                for f in a.findings.iter().filter(|f| f.kind != "not_enough_data") {
                    outln!("  advice           {} (gpool advise {})", f.summary, j.id);
                }
            }
        }
    }
    Ok(())
}

pub(crate) fn cancel(a: IdArgs) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    let mut failed = 0;
    let mut out = Vec::new();
    for id in &a.ids {
        match client.post::<_, api::JobView>(&format!("/jobs/{id}/cancel"), &serde_json::json!({})) {
            Ok(j) => {
                if a.output == Output::Table {
                    outln!("{}: {}", j.id, j.reason.clone().unwrap_or_else(|| j.state.as_str().to_string()));
                }
                out.push(j);
            }
            Err(e) => {
                eprintln!("job {id}: {e:#}");
                failed += 1;
            }
        }
    }
    if a.output == Output::Json {
        print_json(&out)?;
    }
    if failed > 0 {
        bail!("{failed} of {} cancellations failed", a.ids.len());
    }
    Ok(())
}

#[derive(Args, Debug)]
pub(crate) struct LogsArgs {
    id: u64,
    /// Replica rank.
    #[arg(long, default_value_t = 0)]
    rank: u32,
    /// Show standard error instead of standard output.
    #[arg(long)]
    stderr: bool,
    /// Keep printing new output until the job ends.
    #[arg(long, short = 'f')]
    follow: bool,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn logs(a: LogsArgs) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    let stream = if a.stderr { "stderr" } else { "stdout" };
    client.stream(
        &format!("/jobs/{}/logs?stream={stream}&rank={}&follow={}", a.id, a.rank, a.follow),
        &mut std::io::stdout().lock(),
    )
}

#[derive(Args, Debug)]
pub(crate) struct ListArgs {
    #[arg(long, short = 'o', value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn nodes(a: ListArgs) -> anyhow::Result<()> {
    let nodes: Vec<api::NodeView> = a.connect.client()?.get("/nodes")?;
    if a.output == Output::Json {
        return print_json(&nodes);
    }
    for n in &nodes {
        let agent = match (&n.agent, &n.addr) {
            (Some(a), Some(addr)) => format!("  agent {a} at {addr}"),
            (Some(a), None) => format!("  agent {a}"),
            _ => String::new(),
        };
        outln!(
            "{}  {}  pool {}  source {}{agent}  CPUs {}/{} free  memory {}/{} GiB free  jobs {:?}",
            n.name,
            n.state,
            n.pool,
            n.source,
            n.free_cpus,
            n.cpus,
            n.free_memory_mb / 1024,
            n.memory_mb / 1024,
            n.jobs
        );
        for d in &n.devices {
            let who = d.job.map_or_else(|| "free".to_string(), |j| format!("job {j}"));
            let t = d.telemetry.as_ref();
            let now = match t {
                Some(t) => format!(
                    "{:>4} {:>14} {:>5} {:>6}",
                    t.gpu_util.map_or_else(|| "-".into(), |u| format!("{u:.0}%")),
                    match (t.memory_used_mb, t.memory_total_mb) {
                        (Some(u), Some(m)) => format!("{}/{} GiB", u / 1024, m / 1024),
                        _ => "-".into(),
                    },
                    t.temperature_c.map_or_else(|| "-".into(), |c| format!("{c:.0}C")),
                    t.power_w.map_or_else(|| "-".into(), |p| format!("{p:.0}W")),
                ),
                None => format!("{:>4} {:>14} {:>5} {:>6}", "-", "-", "-", "-"),
            };
            outln!(
                "  GPU {:<2} {:<12} {:>6} MiB  {}  {}  {}",
                d.index,
                d.model,
                d.memory_mb,
                now,
                d.uuid,
                if d.mig.is_empty() { who } else { "MIG".into() }
            );
            for m in &d.mig {
                outln!(
                    "    MIG {:<10} {:>10}  {}  {}",
                    m.profile,
                    m.memory_used_mb.map_or_else(|| "-".into(), |u| format!("{u} MiB")),
                    m.uuid,
                    m.job.map_or_else(|| "free".to_string(), |j| format!("job {j}"))
                );
            }
        }
    }
    Ok(())
}

pub(crate) fn queues(a: ListArgs) -> anyhow::Result<()> {
    let qs: Vec<api::QueueView> = a.connect.client()?.get("/queues")?;
    if a.output == Output::Json {
        return print_json(&qs);
    }
    outln!(
        "{:<16} {:<10} {:>9} {:>7} {:>8} {:>8} {:>8}",
        "QUEUE",
        "COHORT",
        "GUARANTEE",
        "MAX",
        "USED",
        "PENDING",
        "RUNNING"
    );
    for q in qs {
        outln!(
            "{:<16} {:<10} {:>9} {:>7} {:>8} {:>8} {:>8}",
            q.name,
            q.cohort.unwrap_or_else(|| "-".into()),
            q.guarantee_gpus,
            q.max_gpus.map_or_else(|| "-".into(), |m| m.to_string()),
            q.used_gpus,
            q.pending,
            q.running
        );
    }
    Ok(())
}

#[derive(Args, Debug)]
pub(crate) struct TokenArgs {
    /// User the token acts as.
    #[arg(long)]
    user: String,
    /// Team (fair-share group).
    #[arg(long)]
    team: Option<String>,
    /// Make an admin token.
    #[arg(long, conflicts_with = "node")]
    admin: bool,
    /// Make a node token, for `gpool agent --token` (it speaks only the agent protocol).
    #[arg(long)]
    node: bool,
    #[arg(long, short = 'o', value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn token_create(a: TokenArgs) -> anyhow::Result<()> {
    let role = if a.admin {
        Some("admin".to_string())
    } else if a.node {
        Some("node".to_string())
    } else {
        None
    };
    let req = api::TokenRequest { user: a.user, team: a.team, role };
    let t: api::TokenCreated = a.connect.client()?.post("/tokens", &req)?;
    match a.output {
        Output::Json => print_json(&t),
        Output::Table => {
            outln!("{}", t.token);
            eprintln!(
                "token for {} (team {}, {}); it is shown only once: export GPOOL_TOKEN={}",
                t.user, t.team, t.role, t.token
            );
            Ok(())
        }
    }
}

pub(crate) fn whoami(a: ListArgs) -> anyhow::Result<()> {
    let w: api::WhoAmI = a.connect.client()?.get("/whoami")?;
    match a.output {
        Output::Json => print_json(&w),
        Output::Table => {
            outln!("{} (team {}, {})", w.user, w.team, w.role);
            Ok(())
        }
    }
}

#[derive(Args, Debug)]
pub(crate) struct EventsArgs {
    /// Only this job's events.
    #[arg(long)]
    job: Option<u64>,
    /// Replay history after this sequence number first (0 = all).
    #[arg(long)]
    after: Option<u64>,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn events(a: EventsArgs) -> anyhow::Result<()> {
    let mut q = Vec::new();
    if let Some(j) = a.job {
        q.push(format!("job={j}"));
    }
    if let Some(x) = a.after {
        q.push(format!("after={x}"));
    }
    let client = a.connect.client()?;
    let mut printer = SsePrinter { buf: Vec::new() };
    client.stream(&format!("/events?{}", q.join("&")), &mut printer)
}

/// Prints `data:` lines of a server-sent event stream as "time kind message".
struct SsePrinter {
    buf: Vec<u8>,
}

impl std::io::Write for SsePrinter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        while let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line);
            if let Some(json) = line.trim_end().strip_prefix("data:")
                && let Ok(e) = serde_json::from_str::<api::EventView>(json.trim())
            {
                outln!("{}  {:<10} {}", e.at, e.kind, e.message);
            }
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush()
    }
}

pub(crate) fn parse_duration_arg(s: &str) -> Result<std::time::Duration, String> {
    let d = gpool_api::quantity::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("must be more than zero".into());
    }
    Ok(d)
}
