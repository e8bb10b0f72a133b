//! `gpool events`: what happens (submissions, starts, ends, preemptions), live.

use clap::Args;
use gpool_api as api;

use crate::client::Connect;
use crate::output::{emit, when};

#[derive(Args, Debug)]
pub(crate) struct EventsArgs {
    /// Only this job's events.
    #[arg(long)]
    job: Option<u64>,
    /// Replay history after this sequence number first (0 = all).
    #[arg(long)]
    after: Option<u64>,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn run(a: EventsArgs) -> anyhow::Result<()> {
    let mut q = Vec::new();
    if let Some(j) = a.job {
        q.push(format!("job={j}"));
    }
    if let Some(x) = a.after {
        q.push(format!("after={x}"));
    }
    let client = a.connect.client()?;
    let mut printer = SsePrinter { buf: Vec::new() };
    client.stream(&format!("/events?{}", q.join("&")), &mut printer)
}

/// `time kind message`, a line an event.
pub(crate) fn render(e: &api::EventView) -> String {
    format!("{}  {:<10} {}\n", when(&e.at), e.kind, e.message)
}

/// Prints the `data:` lines of a server-sent event stream with [`render`].
struct SsePrinter {
    buf: Vec<u8>,
}

impl std::io::Write for SsePrinter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        while let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line);
            if let Some(json) = line.trim_end().strip_prefix("data:")
                && let Ok(e) = serde_json::from_str::<api::EventView>(json.trim())
            {
                emit(&render(&e));
            }
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{assert_snapshot, event};

    #[test]
    fn events_print_time_kind_and_message() {
        let events = [
            event(1, "submitted", "job 1 (train) submitted by ana").job(1).build(),
            event(2, "started", "job 1 started on node-a [0,1,2,3]").job(1).build(),
            event(3, "preempted", "job 1 preempted for job 4 (priority 100)").job(1).build(),
            event(4, "node_down", "node gpu-7 silent for 10s: its jobs are requeued").build(),
        ];
        let text: String = events.iter().map(render).collect();
        assert_snapshot("events.txt", &text);
    }
}
