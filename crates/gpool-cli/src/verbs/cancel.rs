//! `gpool cancel`: the stop signal, then SIGKILL after the grace period.

use gpool_api as api;

use super::IdArgs;
use crate::client::{ClientError, ErrorKind};
use crate::output::{Output, emit, json, text};

/// Tries every id, printing each cancelled job as it goes and each failure
/// on standard error. When some fail, the error has the kind the failures
/// share (all not found: exit code 3), or `Failed` (1) when they differ.
pub(crate) fn run(a: IdArgs) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    let mut failures = Vec::new();
    let mut out = Vec::new();
    for id in &a.ids {
        match client.post::<_, api::JobView>(&format!("/jobs/{id}/cancel"), &serde_json::json!({})) {
            Ok(j) => {
                if a.output == Output::Table {
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
    if a.output == Output::Json {
        emit(&render(&out, Output::Json)?);
    }
    match failures.first() {
        None => Ok(()),
        Some(first) => {
            let kind = if failures.iter().all(|k| k == first) { *first } else { ErrorKind::Failed };
            let message = format!("{} of {} cancellations failed", failures.len(), a.ids.len());
            Err(ClientError::new(kind, message).into())
        }
    }
}

/// A line a cancelled job: what happens to it now.
pub(crate) fn render(jobs: &[api::JobView], output: Output) -> anyhow::Result<String> {
    if output == Output::Json {
        return json(jobs);
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
