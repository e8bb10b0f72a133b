//! `gpool logs`: a replica's output, streamed as it comes with `-f`.
//!
//! By default both streams: standard output to ours, standard error to
//! ours (after a `== job N rank R: stderr ==` line, when it has anything),
//! as Slurm's default output file holds both: a job that died of a Python
//! traceback or a CUDA error shows why. `--stdout` or `--stderr` picks one.

use clap::Args;

use crate::client::{Client, Connect};

#[derive(Args, Debug)]
pub(crate) struct LogsArgs {
    id: u64,
    /// Replica rank.
    #[arg(long, default_value_t = 0)]
    rank: u32,
    /// Only standard output.
    #[arg(long, conflicts_with = "stderr")]
    stdout: bool,
    /// Only standard error.
    #[arg(long)]
    stderr: bool,
    /// Keep printing new output until the job ends (waiting for it to start
    /// if it is pending), then exit with its status as submit --wait does.
    #[arg(long, short = 'f')]
    follow: bool,
    #[command(flatten)]
    connect: Connect,
}

/// Writes a header line before the first byte, if any byte comes.
struct Headed<'a, W: std::io::Write> {
    out: W,
    header: Option<&'a str>,
}

impl<W: std::io::Write> std::io::Write for Headed<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(h) = self.header.take().filter(|_| !buf.is_empty()) {
            self.out.write_all(h.as_bytes())?;
        }
        self.out.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

fn path(a: &LogsArgs, stream: &str) -> String {
    format!("/jobs/{}/logs?stream={stream}&rank={}&follow={}", a.id, a.rank, a.follow)
}

pub(crate) fn run(a: LogsArgs) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    if a.stdout || a.stderr {
        let stream = if a.stderr { "stderr" } else { "stdout" };
        return client.stream(&path(&a, stream), &mut std::io::stdout().lock());
    }
    let header = format!("== job {} rank {}: stderr ==\n", a.id, a.rank);
    let err_to = |client: &Client| {
        let mut err = Headed { out: std::io::stderr().lock(), header: Some(header.as_str()) };
        client.stream(&path(&a, "stderr"), &mut err)
    };
    if !a.follow {
        client.stream(&path(&a, "stdout"), &mut std::io::stdout().lock())?;
        return err_to(&client);
    }
    // Following: both at once, each to its own descriptor.
    std::thread::scope(|s| {
        let errs = s.spawn(|| err_to(&client));
        let outs = client.stream(&path(&a, "stdout"), &mut std::io::stdout().lock());
        let errs = errs.join().unwrap_or_else(|_| Err(anyhow::anyhow!("following standard error failed")));
        outs.and(errs)
    })?;
    exit_status(&client, a.id)
}

/// After following a job to its end: its status as the command's.
fn exit_status(client: &Client, id: u64) -> anyhow::Result<()> {
    let job: gpool_api::JobView = client.get(&format!("/jobs/{id}"))?;
    match crate::verbs::wait::status_of(&job).filter(|_| job.state.is_terminal()) {
        Some(status) => Err(status.into()),
        None => Ok(()),
    }
}
