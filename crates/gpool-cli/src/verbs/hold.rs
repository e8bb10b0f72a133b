//! `gpool hold` and `gpool release` (Slurm's `scontrol hold|release`): a
//! pending job held back until its owner or an admin releases it.

use clap::Args;
use gpool_api as api;

use crate::client::{ClientError, Connect, ErrorKind};
use crate::output::{Output, emit};

#[derive(Args, Debug)]
pub(crate) struct HoldArgs {
    /// Job id(s), pending; an array's id is every task of it, `1234_7` one task.
    #[arg(required = true)]
    ids: Vec<crate::job_ref::JobRef>,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

/// Holds (`hold`) or releases each job, saying what each now waits for.
pub(crate) fn run(a: HoldArgs, hold: bool) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    let verb = if hold { "hold" } else { "release" };
    let mut out = Vec::new();
    let mut failures = Vec::new();
    let ids = crate::job_ref::resolve(&client, &a.ids, Some("pending"))?;
    for id in &ids {
        match client.post_empty::<api::JobView>(&format!("/jobs/{id}/{verb}")) {
            Ok(j) => out.push(j),
            Err(e) => {
                eprintln!("job {id}: {e:#}");
                failures.push(ClientError::kind_of(&e));
            }
        }
    }
    emit(&super::cancel::render(&out, a.output)?);
    match failures.first() {
        None => Ok(()),
        Some(first) => {
            let kind = if failures.iter().all(|k| k == first) { *first } else { ErrorKind::Failed };
            Err(ClientError::new(kind, format!("{} of {} jobs could not be {verb}ed", failures.len(), ids.len()))
                .into())
        }
    }
}
