//! `gpool queue` (`ls`): jobs, and why each pending one waits.

use clap::Args;
use gpool_api::{self as api, JobState};

use crate::client::Connect;
use crate::output::{Output, emit, gpus_of, text, truncate, when};

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
    /// At most this many jobs (more are fetched a page of 1,000 at a time; a cut is said on standard error).
    #[arg(long, default_value_t = 1000)]
    limit: u32,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn run(a: QueueArgs) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    if a.limit == 0 {
        anyhow::bail!("--limit 0 shows nothing: give 1 or more");
    }
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
    let mut cut = false;
    loop {
        let mut p = params.clone();
        if let Some(x) = after {
            p.push(format!("after={x}"));
        }
        let page: api::JobList = client.get(&format!("/jobs?{}", p.join("&")))?;
        jobs.extend(page.jobs);
        match page.next {
            Some(n) if jobs.len() < a.limit as usize => after = Some(n),
            Some(_) => {
                cut = true;
                break;
            }
            None => break,
        }
    }
    jobs.truncate(a.limit as usize);
    emit(&render(&jobs, a.output)?);
    if cut {
        // On standard error, so that -o json stays parseable.
        eprintln!("showing the first {} jobs; more match: pass --limit N to see more", jobs.len());
    }
    Ok(())
}

/// When a job started, `2025-03-01 09:00:00`, or `-`.
fn started(j: &api::JobView) -> String {
    j.started_at.as_deref().map_or_else(|| "-".into(), when)
}

/// One line a job: running ones say where, pending ones why they wait.
pub(crate) fn render(jobs: &[api::JobView], output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(jobs);
    }
    if output == Output::Wide {
        return Ok(wide(jobs));
    }
    let mut lines = vec![format!(
        "{:>6}  {:<16} {:<10} {:<10} {:<9} {:<14} {:<23} REASON",
        "ID", "NAME", "USER", "QUEUE", "STATE", "GPUS", "STARTED"
    )];
    let mut rest = jobs;
    while let Some(j) = rest.first() {
        // An array's pending tasks that wait for the same reason are one line, as squeue shows them.
        let folded = rest.iter().take_while(|k| same_pending_array(j, k)).count().max(1);
        let id = match (j.array, folded) {
            (Some(a), 1) => format!("{}_{}", a.job, a.index),
            (Some(a), _) => {
                let indexes: Vec<u32> = rest[..folded].iter().filter_map(|k| k.array.map(|x| x.index)).collect();
                let limit = a.limit.map_or_else(String::new, |l| format!("%{l}"));
                format!("{}_[{}{limit}]", a.job, ranges(&indexes))
            }
            (None, _) => j.id.to_string(),
        };
        rest = &rest[folded..];
        let devices: Vec<String> = j.replicas.iter().map(|r| r.cuda_visible_devices.clone()).collect();
        let reason = match j.state {
            JobState::Running => {
                let on =
                    format!("on {} [{}]", j.replicas.first().map_or("-", |r| r.node.as_str()), devices.join(" | "));
                // Still pulling its image (the only reason a running job has).
                match j.reason.as_deref().filter(|r| r.starts_with("pulling ")) {
                    Some(p) => format!("{on} {p}"),
                    None => on,
                }
            }
            _ => j.reason.clone().unwrap_or_default(),
        };
        lines.push(format!(
            "{:>6}  {:<16} {:<10} {:<10} {:<9} {:<14} {:<23} {}",
            id,
            truncate(&j.name, 16),
            truncate(&j.user, 10),
            truncate(&j.queue, 10),
            j.state.as_str(),
            truncate(&gpus_of(j), 14),
            started(j),
            reason
        ));
    }
    Ok(text(lines))
}

/// `-o wide`: every name whole, and the team, priority, attempt, submission time and image.
/// Whether `k` is a pending task of `j`'s array waiting for the same reason as `j`.
fn same_pending_array(j: &api::JobView, k: &api::JobView) -> bool {
    let pending = |x: &api::JobView| x.state == JobState::Pending;
    matches!((j.array, k.array), (Some(a), Some(b)) if a.job == b.job)
        && pending(j)
        && pending(k)
        && j.reason == k.reason
}

/// Indexes as Slurm compresses them: `0-3,7,9-10`.
fn ranges(indexes: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < indexes.len() {
        let start = indexes[i];
        let mut end = start;
        while i + 1 < indexes.len() && indexes[i + 1] == end + 1 {
            i += 1;
            end = indexes[i];
        }
        out.push(if end == start { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    out.join(",")
}

fn wide(jobs: &[api::JobView]) -> String {
    let mut lines = vec![format!(
        "{:>6}  {:<24} {:<12} {:<12} {:<12} {:<9} {:>8} {:>7} {:<14} {:<23} {:<23} {:<28} REASON",
        "ID", "NAME", "USER", "TEAM", "QUEUE", "STATE", "PRIORITY", "ATTEMPT", "GPUS", "SUBMITTED", "STARTED", "IMAGE"
    )];
    for j in jobs {
        let reason = match j.state {
            JobState::Running => {
                let on: Vec<String> =
                    j.replicas.iter().map(|r| format!("{}[{}]", r.node, r.cuda_visible_devices)).collect();
                format!("on {}{}", on.join(" "), j.reason.as_deref().map(|r| format!(" {r}")).unwrap_or_default())
            }
            _ => j.reason.clone().unwrap_or_default(),
        };
        lines.push(format!(
            "{:>6}  {:<24} {:<12} {:<12} {:<12} {:<9} {:>8} {:>7} {:<14} {:<23} {:<23} {:<28} {}",
            j.id,
            j.name,
            j.user,
            j.team,
            j.queue,
            j.state.as_str(),
            j.priority,
            j.attempt,
            gpus_of(j),
            when(&j.submitted_at),
            started(j),
            j.spec.image.as_deref().unwrap_or("-"),
            reason
        ));
    }
    text(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{assert_snapshot, job};

    #[test]
    fn wide_shows_whole_names_and_more_columns() {
        let jobs = [job(3).name("a-very-long-sweep-name-that-is-cut").gpus(8).reason("waiting for 8 GPUs").build()];
        let narrow = render(&jobs, Output::Table).expect("table");
        let wide = render(&jobs, Output::Wide).expect("wide");
        assert!(!narrow.contains("a-very-long-sweep-name-that-is-cut"), "{narrow}");
        assert!(wide.contains("a-very-long-sweep-name-that-is-cut"), "{wide}");
        for col in ["TEAM", "PRIORITY", "ATTEMPT", "SUBMITTED", "IMAGE"] {
            assert!(wide.lines().next().is_some_and(|h| h.contains(col)), "{col} in {wide}");
        }
    }

    #[test]
    fn queue_lists_running_and_pending_jobs() {
        let jobs = vec![
            job(1)
                .name("train-llm-with-a-long-name")
                .gpus(4)
                .replicas(2)
                .running_on("node-a", &["0,1,2,3", "4,5,6,7"])
                .build(),
            job(2)
                .name("notebook")
                .user("bob-the-builder")
                .queue("interactive")
                .mig("1g.10gb")
                .running_on("node-a", &["MIG-5e1c"])
                .build(),
            job(3).name("sweep-7").gpus(8).reason("waiting for 8 GPUs: 2 free on node-a").build(),
            job(4).gpu_memory("20Gi").state(JobState::Pending).reason("after job 3").build(),
            job(5).name("cpu-only").state(JobState::Succeeded).started("2025-03-01T08:00:00.123Z").build(),
        ];
        assert_snapshot("queue.txt", &render(&jobs, Output::Table).unwrap());
        assert_snapshot("queue.json", &render(&jobs, Output::Json).unwrap());
    }

    #[test]
    fn an_arrays_pending_tasks_are_one_line_as_squeue_shows_them() {
        let limit = "array 10 runs at most 2 task(s) at once";
        let mut jobs = vec![
            job(10).array(10, 0, 8, Some(2)).running_on("n1", &["0"]).build(),
            job(11).array(10, 1, 8, Some(2)).running_on("n1", &["1"]).build(),
        ];
        jobs.extend((2..7).map(|i| job(10 + u64::from(i)).array(10, i, 8, Some(2)).reason(limit).build()));
        jobs.push(job(17).array(10, 7, 8, Some(2)).reason("held by ana").build());
        jobs.push(job(18).reason("waiting for 8 GPUs").build());
        let table = render(&jobs, Output::Table).expect("a table");
        let ids: Vec<&str> = table.lines().skip(1).filter_map(|l| l.split_whitespace().next()).collect();
        assert_eq!(ids, ["10_0", "10_1", "10_[2-6%2]", "10_7", "18"], "{table}");
        assert_eq!(ranges(&[0, 1, 2, 3, 7, 9, 10]), "0-3,7,9-10");
        // Data output lists every task.
        assert_eq!(render(&jobs, Output::Json).expect("json").matches("\"array\"").count(), 8);
    }

    #[test]
    fn an_empty_queue_has_its_header() {
        assert_snapshot("queue-empty.txt", &render(&[], Output::Table).unwrap());
        assert_eq!(render(&[], Output::Json).unwrap(), "[]\n");
    }
}
