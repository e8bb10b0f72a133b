//! `gpool cancel`: the stop signal, then SIGKILL after the grace period.

use clap::Args;
use gpool_api as api;

use crate::client::{Client, ClientError, Connect, ErrorKind};
use crate::output::{Output, emit, text};

#[derive(Args, Debug)]
pub(crate) struct CancelArgs {
    /// Job id(s) (an array's id is every task of it, `1234_7` one task); or none, with -u and/or
    /// --state, for every job that matches (as scancel -u).
    ids: Vec<crate::job_ref::JobRef>,
    /// Every job of this user (any user's: admins only).
    #[arg(long, short = 'u', conflicts_with = "ids")]
    user: Option<String>,
    /// Only jobs in these states, comma-separated (pending, running, ...); default: every job not ended.
    #[arg(long, conflicts_with = "ids")]
    state: Option<String>,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

/// The ids of the jobs that match the filters, every page of them.
fn matching(client: &Client, user: Option<&str>, state: Option<&str>) -> anyhow::Result<Vec<u64>> {
    let mut params = vec!["limit=1000".to_string(), format!("state={}", state.unwrap_or("active"))];
    if let Some(u) = user {
        params.push(format!("user={u}"));
    }
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let mut p = params.clone();
        p.extend(after.map(|x: u64| format!("after={x}")));
        let page: api::JobList = client.get(&format!("/jobs?{}", p.join("&")))?;
        ids.extend(page.jobs.iter().map(|j| j.id));
        match page.next {
            Some(n) => after = Some(n),
            None => return Ok(ids),
        }
    }
}

/// Tries every id, printing each cancelled job as it goes and each failure
/// on standard error. When some fail, the error has the kind the failures
/// share (all not found: exit code 3), or `Failed` (1) when they differ.
pub(crate) fn run(a: CancelArgs) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    let ids = if a.ids.is_empty() {
        if a.user.is_none() && a.state.is_none() {
            anyhow::bail!("give job ids, or -u USER and/or --state STATE to cancel every job that matches");
        }
        let ids = matching(&client, a.user.as_deref(), a.state.as_deref())?;
        if ids.is_empty() {
            eprintln!("no job matches");
        }
        ids
    } else {
        crate::job_ref::resolve(&client, &a.ids, Some("active"))?
    };
    let mut failures = Vec::new();
    let mut out = Vec::new();
    for id in &ids {
        match client.post_empty::<api::JobView>(&format!("/jobs/{id}/cancel")) {
            Ok(j) => {
                if !a.output.is_data() {
                    emit(&render(std::slice::from_ref(&j), Output::Table)?);
                }
                out.push(j);
            }
            Err(e) => {
                eprintln!("job {id}: {e:#}");
                failures.push(ClientError::kind_of(&e));
            }
        }
    }
    if a.output.is_data() {
        emit(&render(&out, a.output)?);
    }
    match failures.first() {
        None => Ok(()),
        Some(first) => {
            let kind = if failures.iter().all(|k| k == first) { *first } else { ErrorKind::Failed };
            let message = format!("{} of {} cancellations failed", failures.len(), ids.len());
            Err(ClientError::new(kind, message).into())
        }
    }
}

/// A line a cancelled job: what happens to it now.
pub(crate) fn render(jobs: &[api::JobView], output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(jobs);
    }
    Ok(text(
        jobs.iter()
            .map(|j| format!("{}: {}", j.id, j.reason.clone().unwrap_or_else(|| j.state.as_str().to_string())))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{assert_snapshot, job};
    use gpool_api::JobState;

    #[test]
    fn cancel_says_what_happens_to_each_job() {
        let jobs = vec![
            job(4).state(JobState::Stopping).reason("cancelled by ana: stop signal sent, SIGKILL in 30s").build(),
            job(5).state(JobState::Cancelled).build(),
        ];
        assert_snapshot("cancel.txt", &render(&jobs, Output::Table).unwrap());
        assert_snapshot("cancel.json", &render(&jobs, Output::Json).unwrap());
    }
}
