//! `gpool queues`: quota queues and their use.

use gpool_api as api;

use super::ListArgs;
use crate::output::{Output, emit, text};

pub(crate) fn run(a: ListArgs) -> anyhow::Result<()> {
    let qs: Vec<api::QueueView> = a.connect.client()?.get("/queues")?;
    emit(&render(&qs, a.output)?);
    Ok(())
}

/// A line a queue: its guarantee and cap in GPUs, and what it uses.
pub(crate) fn render(qs: &[api::QueueView], output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(qs);
    }
    let mut lines = vec![format!(
        "{:<16} {:<10} {:>9} {:>7} {:>8} {:>8} {:>8}",
        "QUEUE", "COHORT", "GUARANTEE", "MAX", "USED", "PENDING", "RUNNING"
    )];
    for q in qs {
        lines.push(format!(
            "{:<16} {:<10} {:>9} {:>7} {:>8} {:>8} {:>8}",
            q.name,
            q.cohort.clone().unwrap_or_else(|| "-".into()),
            q.guarantee_gpus,
            q.max_gpus.map_or_else(|| "-".into(), |m| m.to_string()),
            q.used_gpus,
            q.pending,
            q.running
        ));
    }
    Ok(text(lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{assert_snapshot, queue};

    #[test]
    fn queues_show_guarantees_caps_and_use() {
        let qs = vec![
            queue("default").build(),
            queue("research").cohort("lab").guarantee(8.0).max(16.0).used(11.5).counts(3, 4).build(),
            queue("prod").cohort("lab").guarantee(8.0).used(8.0).counts(0, 2).build(),
        ];
        assert_snapshot("queues.txt", &render(&qs, Output::Table).unwrap());
        assert_snapshot("queues.json", &render(&qs, Output::Json).unwrap());
    }
}
