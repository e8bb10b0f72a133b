//! `gpool queues`: quota queues and their use.

use gpool_api as api;

use super::ListArgs;
use crate::output::{Output, emit, text};

pub(crate) fn run(a: ListArgs) -> anyhow::Result<()> {
    let qs: Vec<api::QueueView> = a.connect.client()?.get("/queues")?;
    emit(&render(&qs, a.output)?);
    Ok(())
}

/// Each kind with a maximum or in use: `amd 3/4` (used/max), `nvidia 8`.
fn per_kind(q: &api::QueueView) -> String {
    let kinds: std::collections::BTreeSet<&String> = q.max_per_kind.keys().chain(q.used_per_kind.keys()).collect();
    let each: Vec<String> = kinds
        .into_iter()
        .map(|k| {
            let short = k.split(['.', '/']).next().unwrap_or(k);
            let short = if short == "google" { "tpu" } else { short };
            let used = q.used_per_kind.get(k).copied().unwrap_or(0.0);
            match q.max_per_kind.get(k) {
                Some(m) => format!("{short} {used}/{m}"),
                None => format!("{short} {used}"),
            }
        })
        .collect();
    if each.is_empty() { "-".into() } else { each.join(", ") }
}

/// A line a queue: its guarantee and cap in GPUs, what it uses, and per kind.
pub(crate) fn render(qs: &[api::QueueView], output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(qs);
    }
    let mut lines = vec![format!(
        "{:<16} {:<10} {:>9} {:>7} {:>8} {:>8} {:>8}  {}",
        "QUEUE", "COHORT", "GUARANTEE", "MAX", "USED", "PENDING", "RUNNING", "PER KIND (USED/MAX)"
    )];
    for q in qs {
        lines.push(format!(
            "{:<16} {:<10} {:>9} {:>7} {:>8} {:>8} {:>8}  {}",
            q.name,
            q.cohort.clone().unwrap_or_else(|| "-".into()),
            q.guarantee_gpus,
            q.max_gpus.map_or_else(|| "-".into(), |m| m.to_string()),
            q.used_gpus,
            q.pending,
            q.running,
            per_kind(q)
        ));
        if let Some(w) = &q.window {
            // "closed until 2026-…Z": the time as people read it.
            let shown = match w.split_once(" until ") {
                Some((state, at)) => format!("{state} until {}", crate::output::when(at)),
                None => w.clone(),
            };
            lines.push(format!("  window: {shown}"));
        }
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
            queue("mixed")
                .max(24.0)
                .used(11.0)
                .kind("nvidia.com/gpu", None, 8.0)
                .kind("amd.com/gpu", Some(4.0), 3.0)
                .kind("google.com/tpu", Some(16.0), 0.0)
                .counts(1, 3)
                .build(),
        ];
        assert_snapshot("queues.txt", &render(&qs, Output::Table).unwrap());
        assert_snapshot("queues.json", &render(&qs, Output::Json).unwrap());
    }
}
