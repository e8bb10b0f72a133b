//! `gpool alerts`: what fires now.

use clap::Args;
use gpool_api as api;

use crate::client::Connect;
use crate::output::{Output, emit, text, when};

#[derive(Args, Debug)]
pub(crate) struct AlertsArgs {
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
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
    if output.is_data() {
        return output.data(list);
    }
    if list.is_empty() {
        return Ok(text(vec!["no alerts firing".into()]));
    }
    let mut lines = vec![format!("{:<9} {:<22} {:<22} {:<23} SUMMARY", "SEVERITY", "ALERT", "SUBJECT", "SINCE")];
    for x in list {
        lines.push(format!("{:<9} {:<22} {:<22} {:<23} {}", x.severity, x.rule, x.subject, when(&x.since), x.summary));
    }
    Ok(text(lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{alert, assert_snapshot};

    #[test]
    fn alerts_list_what_fires() {
        let list = vec![
            alert("GpuXidError", "critical", "node-a/gpu3", "XID 79 on node-a GPU 3: fallen off the bus")
                .value(79.0)
                .label("node", "node-a")
                .label("gpu", "3")
                .build(),
            alert("AllocatedGpuIdle", "warning", "job/42", "job 42 holds GPU 0 of node-a but used it under 5% for 10m")
                .value(0.8)
                .label("job_id", "42")
                .build(),
        ];
        assert_snapshot("alerts.txt", &render(&list, Output::Table).unwrap());
        assert_snapshot("alerts.json", &render(&list, Output::Json).unwrap());
    }

    #[test]
    fn no_alerts_is_said_in_words_and_an_empty_list() {
        assert_snapshot("alerts-none.txt", &render(&[], Output::Table).unwrap());
        assert_eq!(render(&[], Output::Json).unwrap(), "[]\n");
    }
}
