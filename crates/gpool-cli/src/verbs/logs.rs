//! `gpool logs`: a replica's output, streamed as it comes with `-f`.
//!
//! By default both streams: standard output to ours, standard error to
//! ours (after a `== job N rank R: stderr ==` line, when it has anything),
//! as Slurm's default output file holds both: a job that died of a Python
//! traceback or a CUDA error shows why. `--stdout` or `--stderr` picks one.
//! `--all-ranks` prints every replica's output, each line marked with its
//! rank as torchrun marks them (`[rank 1] …`).

use clap::Args;

use crate::client::{Client, Connect};

#[derive(Args, Debug)]
pub(crate) struct LogsArgs {
    /// The job (`1234_7`: task 7 of array 1234).
    #[arg(value_name = "ID")]
    job: crate::job_ref::JobRef,
    /// The job id `job` names (resolved once connected).
    #[arg(skip)]
    id: u64,
    /// Replica rank.
    #[arg(long, default_value_t = 0)]
    rank: u32,
    /// Every replica's output, each line marked `[rank N]` (standard error's on ours).
    #[arg(long, short = 'a', conflicts_with = "rank")]
    all_ranks: bool,
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

/// Writes whole lines, each after `prefix`, to standard output or error:
/// one write per line, so that ranks followed at once do not interleave
/// within a line.
struct RankLines {
    prefix: String,
    to_stderr: bool,
    pending: Vec<u8>,
}

impl RankLines {
    fn emit(&self, line: &[u8]) -> std::io::Result<()> {
        use std::io::Write as _;
        let mut whole = Vec::with_capacity(self.prefix.len() + line.len() + 1);
        whole.extend_from_slice(self.prefix.as_bytes());
        whole.extend_from_slice(line);
        if !line.ends_with(b"\n") {
            whole.push(b'\n');
        }
        if self.to_stderr {
            std::io::stderr().lock().write_all(&whole)
        } else {
            std::io::stdout().lock().write_all(&whole)
        }
    }

    /// The last line, if it had no newline.
    fn finish(mut self) -> std::io::Result<()> {
        let rest = std::mem::take(&mut self.pending);
        if rest.is_empty() { Ok(()) } else { self.emit(&rest) }
    }
}

impl std::io::Write for RankLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            self.emit(&line)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn path(a: &LogsArgs, stream: &str) -> String {
    path_of(a, a.rank, stream)
}

fn path_of(a: &LogsArgs, rank: u32, stream: &str) -> String {
    format!("/jobs/{}/logs?stream={stream}&rank={rank}&follow={}", a.id, a.follow)
}

/// `--all-ranks`: each rank's streams, marked; followed at once with `-f`,
/// else one rank after another.
fn all_ranks(client: &Client, a: &LogsArgs) -> anyhow::Result<()> {
    let job: gpool_api::JobView = client.get(&format!("/jobs/{}", a.id))?;
    let streams: &[&str] = match (a.stdout, a.stderr) {
        (true, _) => &["stdout"],
        (_, true) => &["stderr"],
        _ => &["stdout", "stderr"],
    };
    let one = |rank: u32, stream: &str| -> anyhow::Result<()> {
        let mut lines =
            RankLines { prefix: format!("[rank {rank}] "), to_stderr: stream == "stderr", pending: Vec::new() };
        client.stream(&path_of(a, rank, stream), &mut lines)?;
        Ok(lines.finish()?)
    };
    let ranks = 0..job.spec.replicas.max.max(1);
    if !a.follow {
        for rank in ranks {
            for stream in streams {
                one(rank, stream)?;
            }
        }
        return Ok(());
    }
    std::thread::scope(|s| {
        let followers: Vec<_> = ranks
            .flat_map(|rank| streams.iter().map(move |stream| (rank, *stream)))
            .map(|(rank, stream)| s.spawn(move || one(rank, stream)))
            .collect();
        followers
            .into_iter()
            .try_for_each(|f| f.join().unwrap_or_else(|_| Err(anyhow::anyhow!("following a rank failed"))))
    })?;
    exit_status(client, a.id)
}

pub(crate) fn run(mut a: LogsArgs) -> anyhow::Result<()> {
    let client = a.connect.client()?;
    a.id = crate::job_ref::resolve(&client, &[a.job], None)?.first().copied().unwrap_or(0);
    if a.all_ranks {
        return all_ranks(&client, &a);
    }
    if a.stdout || a.stderr {
        let stream = if a.stderr { "stderr" } else { "stdout" };
        return client.stream(&path(&a, stream), &mut std::io::stdout().lock());
    }
    if !a.follow {
        let header = format!("== job {} rank {}: stderr ==\n", a.id, a.rank);
        client.stream(&path(&a, "stdout"), &mut std::io::stdout().lock())?;
        let mut err = Headed { out: std::io::stderr().lock(), header: Some(header.as_str()) };
        return client.stream(&path(&a, "stderr"), &mut err);
    }
    follow(&client, a.id, a.rank)
}

/// Prints a replica's output as it comes, standard output and error each to
/// its own descriptor, waiting for the job to start if it is pending, until
/// it ends; then the job's status as the command's (`logs -f`, `gpool run`).
pub(crate) fn follow(client: &Client, id: u64, rank: u32) -> anyhow::Result<()> {
    let at = |stream: &str| format!("/jobs/{id}/logs?stream={stream}&rank={rank}&follow=true");
    let header = format!("== job {id} rank {rank}: stderr ==\n");
    std::thread::scope(|s| {
        let errs = s.spawn(|| {
            let mut err = Headed { out: std::io::stderr().lock(), header: Some(header.as_str()) };
            client.stream(&at("stderr"), &mut err)
        });
        let outs = client.stream(&at("stdout"), &mut std::io::stdout().lock());
        let errs = errs.join().unwrap_or_else(|_| Err(anyhow::anyhow!("following standard error failed")));
        outs.and(errs)
    })?;
    exit_status(client, id)
}

/// After following a job to its end: its status as the command's.
fn exit_status(client: &Client, id: u64) -> anyhow::Result<()> {
    let job: gpool_api::JobView = client.get(&format!("/jobs/{id}"))?;
    match crate::verbs::wait::status_of(&job).filter(|_| job.state.is_terminal()) {
        Some(status) => Err(status.into()),
        None => Ok(()),
    }
}
