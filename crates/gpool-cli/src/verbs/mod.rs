//! The client verbs of `gpool`, one file each (`drain` holds `resume` too).
//! Each has a `run` that fetches API views with the client and a pure
//! `render` that turns them into the text printed, table or JSON; the
//! snapshot tests (`crate::testkit`) check every `render`.

use clap::Args;

use crate::client::Connect;
use crate::output::Output;

pub(crate) mod acct;
pub(crate) mod admin;
pub(crate) mod advise;
pub(crate) mod alerts;
pub(crate) mod attach;
pub(crate) mod budgets;
pub(crate) mod cancel;
pub(crate) mod cost;
pub(crate) mod drain;
pub(crate) mod events;
pub(crate) mod health;
pub(crate) mod hold;
pub(crate) mod logs;
pub(crate) mod nodes;
pub(crate) mod ping;
pub(crate) mod pipeline;
pub(crate) mod pools;
pub(crate) mod power;
pub(crate) mod profile;
pub(crate) mod queue;
pub(crate) mod queues;
pub(crate) mod registry;
pub(crate) mod reservation;
pub(crate) mod schedule;
pub(crate) mod services;
pub(crate) mod show;
pub(crate) mod submit;
pub(crate) mod token;
pub(crate) mod wait;
pub(crate) mod whoami;

/// Arguments of the verbs that take job ids (`show`, `cancel`).
#[derive(Args, Debug)]
pub(crate) struct IdArgs {
    /// Job id(s); `1234_7` names task 7 of array 1234.
    #[arg(required = true)]
    ids: Vec<crate::job_ref::JobRef>,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

/// Arguments of listings without filters (`nodes`, `queues`, `whoami`).
#[derive(Args, Debug)]
pub(crate) struct ListArgs {
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}
