//! `gpool logs`: a replica's output, streamed as it comes with `-f`.

use clap::Args;

use crate::client::Connect;

#[derive(Args, Debug)]
pub(crate) struct LogsArgs {
    id: u64,
    /// Replica rank.
    #[arg(long, default_value_t = 0)]
    rank: u32,
    /// Show standard error instead of standard output.
    #[arg(long)]
    stderr: bool,
    /// Keep printing new output until the job ends.
    #[arg(long, short = 'f')]
    follow: bool,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn run(a: LogsArgs) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    let stream = if a.stderr { "stderr" } else { "stdout" };
    client.stream(
        &format!("/jobs/{}/logs?stream={stream}&rank={}&follow={}", a.id, a.rank, a.follow),
        &mut std::io::stdout().lock(),
    )
}
