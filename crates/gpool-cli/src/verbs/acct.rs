//! `gpool acct` (Slurm's `sacct`): the jobs that ended in a period, and
//! those still running, with Slurm-like fields. The period is answered by
//! the store's index on when jobs ended (`jobs_ended`), a page of 1,000 at a
//! time; running jobs come from the same list by state.

use clap::Args;
use gpool_api::{self as api, JobState};

use crate::client::Connect;
use crate::output::{emit, json, text, when};

/// Arguments of `gpool acct`.
#[derive(Args, Debug)]
pub(crate) struct AcctArgs {
    /// Jobs that ended since then: a span back from now (1h, 7d, 30d) or a time (2026-11-01, 2026-11-01T09:00:00Z).
    #[arg(long, short = 'S', default_value = "1d")]
    since: String,
    /// ...and before then (same forms); default: now.
    #[arg(long, short = 'E')]
    until: Option<String>,
    /// Only this user's jobs (admins; others see their own).
    #[arg(long, short = 'u')]
    user: Option<String>,
    /// Only this team's jobs.
    #[arg(long)]
    team: Option<String>,
    /// Only this queue (Slurm's partition).
    #[arg(long, short = 'q', alias = "partition")]
    queue: Option<String>,
    /// Only these states (comma-separated): succeeded, failed, cancelled, timed_out, running, ….
    #[arg(long, short = 's')]
    state: Option<String>,
    /// Only jobs whose name contains this.
    #[arg(long)]
    name: Option<String>,
    /// Leave out the jobs still running (sacct lists them too).
    #[arg(long)]
    ended_only: bool,
    /// Fields of the table or CSV, comma-separated, from: jobid, name, user, team, queue, state,
    /// submit, start, end, elapsed, waited, gpus, gpuhours, energy, cost, exitcode, reason, nodes, restarts.
    #[arg(long, default_value = "jobid,name,user,queue,state,elapsed,waited,gpus,gpuhours,exitcode,nodes")]
    format: String,
    /// At most this many jobs (pages of 1,000; a cut is said on standard error).
    #[arg(long, default_value_t = 100_000)]
    limit: usize,
    /// table, json, yaml or csv.
    #[arg(long, short = 'o', default_value = "table", value_parser = ["table", "json", "yaml", "csv"])]
    output: String,
    #[command(flatten)]
    connect: Connect,
}

/// The fields `--format` may name.
const FIELDS: &[&str] = &[
    "jobid", "name", "user", "team", "queue", "state", "submit", "start", "end", "elapsed", "waited", "gpus",
    "gpuhours", "energy", "cost", "exitcode", "reason", "nodes", "restarts",
];

/// One job as `gpool acct` reports it: what sacct would say, from the job's view.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub(crate) struct AcctRow {
    pub jobid: String,
    pub name: String,
    pub user: String,
    pub team: String,
    pub queue: String,
    pub state: String,
    pub submit: String,
    pub start: Option<String>,
    pub end: Option<String>,
    /// Seconds from its (last) start to its end, or to now while it runs.
    pub elapsed_s: Option<u64>,
    /// Seconds from submission to its first start (or to now while pending).
    pub waited_s: Option<u64>,
    pub gpus: u32,
    pub gpu_hours: Option<f64>,
    pub energy_wh: Option<f64>,
    pub cost_usd: Option<f64>,
    /// `code:signal`, as sacct's ExitCode.
    pub exit_code: Option<String>,
    pub reason: Option<String>,
    pub nodes: String,
    pub restarts: u32,
}

impl AcctRow {
    pub(crate) fn of(j: &api::JobView, now_ms: i64) -> AcctRow {
        let ms = |t: &Option<String>| t.as_deref().and_then(api::time::parse_rfc3339);
        let (submitted, started, ended) =
            (api::time::parse_rfc3339(&j.submitted_at), ms(&j.started_at), ms(&j.ended_at));
        let secs = |a: i64, b: i64| u64::try_from(b - a).ok().map(|d| d / 1000);
        let elapsed_s = started.and_then(|s| secs(s, ended.unwrap_or(now_ms)));
        let waited_s = submitted.and_then(|sub| secs(sub, started.unwrap_or(now_ms)));
        let mut nodes: Vec<&str> = j.replicas.iter().map(|r| r.node.as_str()).collect();
        nodes.dedup();
        let gpus = j.replicas.iter().map(|r| (r.gpus.len() + r.mig.len()) as u32).sum();
        let jobid = match &j.array {
            Some(a) => format!("{}_{}", a.job, a.index),
            None => j.id.to_string(),
        };
        AcctRow {
            jobid,
            name: j.name.clone(),
            user: j.user.clone(),
            team: j.team.clone(),
            queue: j.queue.clone(),
            state: j.state.as_str().to_string(),
            submit: j.submitted_at.clone(),
            start: j.started_at.clone(),
            end: j.ended_at.clone(),
            elapsed_s,
            waited_s,
            gpus,
            gpu_hours: j.usage.as_ref().map(|u| u.gpu_hours),
            energy_wh: j.usage.as_ref().and_then(|u| u.energy_wh),
            cost_usd: j.usage.as_ref().and_then(|u| u.cost_usd),
            exit_code: j.exit.as_ref().map(|e| format!("{}:{}", e.code.unwrap_or(0), e.signal.unwrap_or(0))),
            reason: j.reason.clone().filter(|_| j.state.is_terminal()),
            nodes: nodes.join(","),
            restarts: j.restarts,
        }
    }

    /// One field as the table and CSV print it.
    fn field(&self, f: &str) -> String {
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        let num = |v: Option<f64>, digits: usize| v.map_or_else(|| "-".into(), |x| format!("{x:.digits$}"));
        match f {
            "jobid" => self.jobid.clone(),
            "name" => self.name.clone(),
            "user" => self.user.clone(),
            "team" => self.team.clone(),
            "queue" => self.queue.clone(),
            "state" => self.state.clone(),
            "submit" => when(&self.submit),
            "start" => self.start.as_deref().map_or_else(|| "-".into(), when),
            "end" => self.end.as_deref().map_or_else(|| "-".into(), when),
            "elapsed" => self.elapsed_s.map_or_else(|| "-".into(), slurm_time),
            "waited" => self.waited_s.map_or_else(|| "-".into(), slurm_time),
            "gpus" => self.gpus.to_string(),
            "gpuhours" => num(self.gpu_hours, 3),
            "energy" => num(self.energy_wh.map(|w| w / 1000.0), 3),
            "cost" => num(self.cost_usd, 2),
            "exitcode" => opt(&self.exit_code),
            "reason" => opt(&self.reason),
            "nodes" => {
                if self.nodes.is_empty() {
                    "-".into()
                } else {
                    self.nodes.clone()
                }
            }
            "restarts" => self.restarts.to_string(),
            _ => String::new(),
        }
    }
}

/// Seconds as Slurm prints times: `MM:SS`, `HH:MM:SS`, `D-HH:MM:SS`.
pub(crate) fn slurm_time(s: u64) -> String {
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (d, h) {
        (0, 0) => format!("{m:02}:{s:02}"),
        (0, _) => format!("{h:02}:{m:02}:{s:02}"),
        _ => format!("{d}-{h:02}:{m:02}:{s:02}"),
    }
}

/// `--since`/`--until`: a span back from `now_ms` (`7d`) or a time; ms since the epoch.
pub(crate) fn point(text: &str, flag: &str, now_ms: i64) -> anyhow::Result<i64> {
    let t = text.trim();
    if let Some(ms) = api::time::parse_rfc3339(t) {
        return Ok(ms);
    }
    if let Some(ms) = api::time::parse_rfc3339(&format!("{t}T00:00:00Z")) {
        return Ok(ms);
    }
    match api::quantity::parse_duration(t) {
        Ok(d) => Ok(now_ms - i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2)),
        Err(_) => anyhow::bail!(
            "--{flag} {text:?}: give a span back from now (1h, 7d, 30d) or a time (2026-11-01, 2026-11-01T09:00:00Z)"
        ),
    }
}

/// The fields `--format` names, checked.
pub(crate) fn fields(format: &str) -> anyhow::Result<Vec<String>> {
    let fields: Vec<String> =
        format.split(',').map(|f| f.trim().to_ascii_lowercase()).filter(|f| !f.is_empty()).collect();
    if fields.is_empty() {
        anyhow::bail!("--format names no field; pick from {}", FIELDS.join(", "));
    }
    if let Some(bad) = fields.iter().find(|f| !FIELDS.contains(&f.as_str())) {
        anyhow::bail!("--format: {bad:?} is not a field; pick from {}", FIELDS.join(", "));
    }
    Ok(fields)
}

pub(crate) fn run(a: AcctArgs) -> anyhow::Result<()> {
    let now = crate::top::now_ms();
    let fields = fields(&a.format)?;
    let since = point(&a.since, "since", now)?;
    let until = a.until.as_deref().map(|u| point(u, "until", now)).transpose()?;
    if until.is_some_and(|u| u <= since) {
        anyhow::bail!("--until is not after --since: nothing can have ended in that period");
    }
    let states: Vec<JobState> = match &a.state {
        None => Vec::new(),
        Some(s) => s
            .split(',')
            .filter(|x| !x.trim().is_empty())
            .map(|x| {
                JobState::parse(x.trim()).ok_or_else(|| {
                    anyhow::anyhow!(
                        "--state {x:?}: pick from succeeded, failed, cancelled, timed_out, running, pending"
                    )
                })
            })
            .collect::<anyhow::Result<_>>()?,
    };
    let client = a.connect.client()?;
    let mut common = Vec::new();
    for (k, v) in [("user", &a.user), ("team", &a.team), ("queue", &a.queue)] {
        if let Some(v) = v {
            common.push(format!("{k}={}", urlencode(v)));
        }
    }
    let ended_states: Vec<&JobState> = states.iter().filter(|s| s.is_terminal()).collect();
    let live_states: Vec<&JobState> = states.iter().filter(|s| !s.is_terminal()).collect();
    let mut queries = Vec::new();
    if states.is_empty() || !ended_states.is_empty() {
        let mut q = common.clone();
        q.push(format!("ended_since={}", urlencode(&api::time::rfc3339(since))));
        if let Some(u) = until {
            q.push(format!("ended_until={}", urlencode(&api::time::rfc3339(u))));
        }
        if !ended_states.is_empty() {
            q.push(format!("state={}", ended_states.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")));
        }
        queries.push(q);
    }
    // Running jobs (sacct shows them), unless only ended ones were asked for.
    if !a.ended_only && until.is_none_or(|u| u >= now) && (states.is_empty() || !live_states.is_empty()) {
        let mut q = common.clone();
        let live = if live_states.is_empty() {
            "starting,running,stopping".to_string()
        } else {
            live_states.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
        };
        q.push(format!("state={live}"));
        queries.push(q);
    }
    let mut rows = Vec::new();
    let mut cut = false;
    'queries: for q in queries {
        let mut after = None;
        loop {
            let mut p = q.clone();
            p.push("limit=1000".into());
            if let Some(x) = after {
                p.push(format!("after={x}"));
            }
            let page: api::JobList = client.get(&format!("/jobs?{}", p.join("&")))?;
            for j in &page.jobs {
                if a.name.as_deref().is_none_or(|n| j.name.contains(n)) {
                    rows.push(AcctRow::of(j, now));
                }
                if rows.len() >= a.limit {
                    cut = page.next.is_some() || j.id != page.jobs.last().map_or(0, |l| l.id);
                    break 'queries;
                }
            }
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
    }
    if cut {
        eprintln!("gpool acct: the first {} jobs shown; narrow the period or raise --limit", a.limit);
    }
    emit(&render(&rows, &fields, &a.output)?);
    Ok(())
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The rows as a table (the `--format` fields), CSV, JSON or YAML (every field).
pub(crate) fn render(rows: &[AcctRow], fields: &[String], output: &str) -> anyhow::Result<String> {
    match output {
        "json" => return json(rows),
        "yaml" => return Ok(gpool_api::yaml::to_string(rows)?),
        "csv" => {
            let quote =
                |v: String| if v.contains([',', '"', '\n']) { format!("\"{}\"", v.replace('"', "\"\"")) } else { v };
            let mut out = fields.join(",") + "\n";
            for r in rows {
                out.push_str(&fields.iter().map(|f| quote(r.field(f))).collect::<Vec<_>>().join(","));
                out.push('\n');
            }
            return Ok(out);
        }
        _ => {}
    }
    let cells: Vec<Vec<String>> = rows.iter().map(|r| fields.iter().map(|f| r.field(f)).collect()).collect();
    let widths: Vec<usize> = fields
        .iter()
        .enumerate()
        .map(|(i, f)| cells.iter().map(|c| c[i].chars().count()).chain([f.len()]).max().unwrap_or(0).min(40))
        .collect();
    let line = |vals: Vec<String>| {
        vals.iter()
            .zip(&widths)
            .map(|(v, w)| format!("{:<w$}", crate::output::truncate(v, *w), w = *w))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut lines = vec![line(fields.iter().map(|f| f.to_uppercase()).collect())];
    lines.extend(cells.into_iter().map(line));
    if rows.is_empty() {
        lines.push("(no jobs ended in the period)".into());
    }
    Ok(text(lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::job;

    #[test]
    fn times_read_as_slurm_prints_them() {
        assert_eq!(
            [slurm_time(59), slurm_time(3599), slurm_time(3600), slurm_time(90_061)],
            ["00:59", "59:59", "01:00:00", "1-01:01:01"]
        );
    }

    #[test]
    fn periods_are_spans_back_or_times_and_bad_ones_say_what_to_write() {
        let now = 1_000_000_000_000;
        assert_eq!(point("1h", "since", now).expect("span"), now - 3_600_000);
        assert_eq!(
            point("2026-11-01", "since", now).expect("date"),
            api::time::parse_rfc3339("2026-11-01T00:00:00Z").expect("t")
        );
        let e = point("yesterday", "since", now).expect_err("bad").to_string();
        assert!(e.contains("--since \"yesterday\"") && e.contains("1h, 7d"), "{e}");
        assert!(fields("jobid,bogus").expect_err("bad").to_string().contains("\"bogus\" is not a field"));
    }

    #[test]
    fn a_finished_job_reads_like_sacct() {
        let mut j = job(12).running_on("gpu-a", &["0", "1"]).state(JobState::Failed).build();
        j.started_at = Some("2026-11-01T09:00:30Z".into());
        j.submitted_at = "2026-11-01T09:00:00Z".into();
        j.ended_at = Some("2026-11-01T10:02:03Z".into());
        j.exit = Some(api::ExitView { code: Some(3), signal: None });
        j.reason = Some("failed with exit code 3".into());
        let r = AcctRow::of(&j, 0);
        assert_eq!((r.elapsed_s, r.waited_s, r.gpus, r.exit_code.as_deref()), (Some(3693), Some(30), 2, Some("3:0")));
        let fields = fields("jobid,state,elapsed,waited,gpus,exitcode,nodes,reason").expect("fields");
        let table = render(std::slice::from_ref(&r), &fields, "table").expect("table");
        assert!(
            table.contains("12     failed  01:01:33  00:30   2     3:0       gpu-a  failed with exit code 3"),
            "{table}"
        );
        let csv = render(&[r], &fields, "csv").expect("csv");
        assert_eq!(csv.lines().nth(1), Some("12,failed,01:01:33,00:30,2,3:0,gpu-a,failed with exit code 3"));
    }
}
