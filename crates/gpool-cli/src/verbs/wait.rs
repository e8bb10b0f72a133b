//! `gpool submit --wait`: follow jobs to their end, as `sbatch --wait` does,
//! and exit with their status.

use std::fmt;

use gpool_api as api;

use crate::client::Client;

/// A job that did not succeed, as a command's failure: the exit code is the
/// job's own (1 to 255), 128 + its signal, or 1 when it has neither.
#[derive(Debug)]
pub(crate) struct JobStatus {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for JobStatus {}

/// The exit code a finished job gives the command that waited for it.
pub(crate) fn status_of(job: &api::JobView) -> Option<JobStatus> {
    let why = job.reason.clone().unwrap_or_else(|| job.state.as_str().to_string());
    let code = match (job.state, &job.exit) {
        (api::JobState::Succeeded, _) => return None,
        (api::JobState::Failed, Some(api::ExitView { code: Some(c), .. })) if (1..=255).contains(c) => *c as u8,
        (api::JobState::Failed, Some(api::ExitView { signal: Some(s), .. })) if (1..=127).contains(s) => 128 + *s as u8,
        _ => 1,
    };
    Some(JobStatus { code, message: format!("job {} {}: {why}", job.id, job.state.as_str()) })
}

/// Stops the event stream once the job has ended.
struct UntilEnded<'c> {
    client: &'c Client,
    id: u64,
    buf: Vec<u8>,
    ended: Option<api::JobView>,
}

impl UntilEnded<'_> {
    fn check(&mut self) -> std::io::Result<()> {
        let job: api::JobView =
            self.client.get(&format!("/jobs/{}", self.id)).map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        if job.state.is_terminal() {
            self.ended = Some(job);
            // Ends the stream: the caller knows why from `ended`.
            return Err(std::io::Error::other("job ended"));
        }
        Ok(())
    }
}

impl std::io::Write for UntilEnded<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        let mut event = false;
        while let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=pos).collect();
            event |= line.starts_with(b"data:");
        }
        if event {
            self.check()?;
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Waits for each job to end, in turn; the first that did not succeed
/// decides the command's failure (after every job has ended).
pub(crate) fn wait_for(client: &Client, ids: &[u64]) -> anyhow::Result<()> {
    let mut first_failure = None;
    for &id in ids {
        let now: api::JobView = client.get(&format!("/jobs/{id}"))?;
        let job = if now.state.is_terminal() {
            now
        } else {
            let mut w = UntilEnded { client, id, buf: Vec::new(), ended: None };
            let streamed = client.stream(&format!("/events?job={id}&after=0"), &mut w);
            match w.ended {
                Some(job) => job,
                None => {
                    streamed?;
                    // The stream closed without an end (the daemon went away): look once more.
                    let job: api::JobView = client.get(&format!("/jobs/{id}"))?;
                    if !job.state.is_terminal() {
                        anyhow::bail!(
                            "the event stream closed before job {id} ended; wait again with gpool logs -f {id}"
                        );
                    }
                    job
                }
            }
        };
        eprintln!("job {id} {}", job.state.as_str());
        if let Some(status) = status_of(&job) {
            first_failure.get_or_insert(status);
        }
    }
    match first_failure {
        None => Ok(()),
        Some(s) => Err(s.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::job;

    #[test]
    fn a_waited_job_gives_its_own_exit_code() {
        let code = |j: api::JobView| status_of(&j).map(|s| s.code);
        assert_eq!(code(job(1).state(api::JobState::Succeeded).build()), None);
        assert_eq!(code(job(2).state(api::JobState::Failed).exit(Some(3), None).build()), Some(3));
        assert_eq!(code(job(3).state(api::JobState::Failed).exit(None, Some(9)).build()), Some(137));
        assert_eq!(code(job(4).state(api::JobState::Cancelled).build()), Some(1));
        assert_eq!(code(job(5).state(api::JobState::TimedOut).build()), Some(1));
    }
}
