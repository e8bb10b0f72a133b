//! A job as a user names it: its id (`1234`), or a task of a job array as
//! Slurm writes it (`1234_7`: task 7 of the array whose first task is job
//! 1234). As in Slurm, cancelling, holding or releasing an array's id acts
//! on every task of it; showing it shows that one job.

use std::str::FromStr;

use anyhow::{Context, bail};
use gpool_api as api;

use crate::client::Client;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JobRef {
    Id(u64),
    /// (the array's id, the task's index)
    Task(u64, u32),
}

impl FromStr for JobRef {
    type Err = String;

    fn from_str(s: &str) -> Result<JobRef, String> {
        let bad = || format!("{s:?}: a job id (1234), or a task of an array (1234_7)");
        match s.trim().split_once('_') {
            None => s.trim().parse().map(JobRef::Id).map_err(|_| bad()),
            Some((a, i)) => Ok(JobRef::Task(a.parse().map_err(|_| bad())?, i.parse().map_err(|_| bad())?)),
        }
    }
}

/// Where a task with `index` sits in an array of `spec` (its id is the array's plus that).
fn position(spec: &str, index: u32) -> Option<u64> {
    let a = api::spec::parse_array(spec).ok()?;
    a.indexes.iter().position(|i| *i == index).map(|p| p as u64)
}

/// The tasks of array `first` (of `tasks` tasks) in `state` (`active`, `pending`), every page of them.
fn tasks_in(client: &Client, first: u64, tasks: u32, state: &str) -> anyhow::Result<Vec<u64>> {
    let end = first + u64::from(tasks);
    let mut ids = Vec::new();
    let mut after = first.checked_sub(1);
    loop {
        let from = after.map_or_else(String::new, |a| format!("&after={a}"));
        let page: api::JobList = client.get(&format!("/jobs?limit=1000&state={state}{from}"))?;
        ids.extend(page.jobs.iter().map(|j| j.id).filter(|id| (first..end).contains(id)));
        match page.next.filter(|n| *n + 1 < end) {
            Some(n) => after = Some(n),
            None => return Ok(ids),
        }
    }
}

/// The job ids `refs` name. With `whole_arrays` (a state: `active`, `pending`), an
/// array's id names every task of it in that state, as scancel and scontrol hold take it.
pub(crate) fn resolve(client: &Client, refs: &[JobRef], whole_arrays: Option<&str>) -> anyhow::Result<Vec<u64>> {
    let mut ids = Vec::new();
    for r in refs {
        match *r {
            JobRef::Id(id) => {
                let Some(state) = whole_arrays else {
                    ids.push(id);
                    continue;
                };
                let job: api::JobView = client.get(&format!("/jobs/{id}"))?;
                match job.array.filter(|a| a.job == id) {
                    Some(a) => ids.extend(tasks_in(client, id, a.tasks, state)?),
                    None => ids.push(id),
                }
            }
            JobRef::Task(array, index) => {
                let job: api::JobView = client.get(&format!("/jobs/{array}"))?;
                let Some(spec) = job.array.filter(|a| a.job == array).and(job.spec.array.as_deref()) else {
                    bail!("{array}_{index}: job {array} is not the first task of an array");
                };
                let at = position(spec, index)
                    .with_context(|| format!("{array}_{index}: array {array} ({spec}) has no task {index}"))?;
                ids.push(array + at);
            }
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_tasks_read_as_slurm_writes_them() {
        assert_eq!("1234".parse::<JobRef>(), Ok(JobRef::Id(1234)));
        assert_eq!("1234_7".parse::<JobRef>(), Ok(JobRef::Task(1234, 7)));
        for bad in ["x", "1234_", "_7", "12_3_4", "-1"] {
            assert!(bad.parse::<JobRef>().is_err(), "{bad}");
        }
        assert_eq!(position("0-9%3", 7), Some(7));
        assert_eq!(position("1,3,5-7", 6), Some(3));
        assert_eq!(position("0-20:5", 15), Some(3));
        assert_eq!(position("0-20:5", 7), None);
    }
}
