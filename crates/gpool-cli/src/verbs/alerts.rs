//! `gpool alerts`: what fires now.

use clap::Args;
use gpool_api as api;

use crate::client::Connect;
use crate::output::{Output, emit, json, text};

#[derive(Args, Debug)]
pub(crate) struct AlertsArgs {
    #[arg(long, short = 'o', value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn run(a: AlertsArgs) -> anyhow::Result<()> {
    let list: Vec<api::AlertView> = a.connect.client()?.get("/alerts")?;
    emit(&render(&list, a.output)?);
    Ok(())
}

/// A line an alert, or a line saying that none fires.
pub(crate) fn render(list: &[api::AlertView], output: Output) -> anyhow::Result<String> {
    if output == Output::Json {
        return json(list);
    }
    if list.is_empty() {
        return Ok(text(vec!["no alerts firing".into()]));
    }
    let mut lines = vec![format!("{:<9} {:<22} {:<22} {:<20} SUMMARY", "SEVERITY", "ALERT", "SUBJECT", "SINCE")];
    for x in list {
        lines.push(format!("{:<9} {:<22} {:<22} {:<20} {}", x.severity, x.rule, x.subject, x.since, x.summary));
    }
    Ok(text(lines))
}
